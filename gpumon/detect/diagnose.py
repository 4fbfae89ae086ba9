"""diagnose(window): the pure detector, one Diagnosis per job over a window of ticks."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from gpumon.diagnosis import Diagnosis, INSUFFICIENT_DATA
from gpumon.samples import Tick
from gpumon.detect.bins import Store
from gpumon.detect.engine import (EVIDENCE_KEYS, bin_duty, idle_diagnosis, judge_job,
                                  make_diagnosis, store_jobs, tick_columns)
from gpumon.detect.pauses import host_bins, pause_flags
from gpumon.detect.thresholds import DEFAULT, Thresholds


def diagnose(window: Sequence[Tick], th: Thresholds = DEFAULT) -> list[Diagnosis]:
    """One Diagnosis per job, judged on the whole window (no hysteresis, no state)."""
    samples, jobs, hosts, pids, ppid = tick_columns(window)
    if len(samples.time) == 0:
        return [Diagnosis(verdict=INSUFFICIENT_DATA, confidence=0.0,
                          evidence={k: None for k in EVIDENCE_KEYS},
                          advice="not enough samples yet")]
    start, end = float(samples.time.min()), float(samples.time.max())
    store = Store(math.floor(start), th)
    store.add_samples(samples)
    store.add_jobs(jobs)
    store.add_host(hosts)
    nb = store.nb
    found = store_jobs(store, nb, nb, pids, ppid, th)
    if not found:
        return [idle_diagnosis(sorted(store.gpus), start, end)]
    out = []
    for gpus, shared in found:
        g, h = store.view([store.rows[x] for x in gpus])
        duty, n, u = bin_duty(g)
        pause, excl, why = pause_flags(duty, n, u, th, host_bins(g, h, th))
        f, r = judge_job(g, h, pause, np.array([nb - 1]), shared, th, w=nb, excluded=excl,
                         why=why)
        out.append(make_diagnosis(f, r, 0, gpus, start, end, th))
    return out
