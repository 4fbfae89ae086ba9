"""StreamingDetector: live verdicts, one per job, with hysteresis.

Each tick's samples are added into a sliding store of per-second bins (cheap: a few numpy
calls per tick). Once per completed second of data the rules judge the window ending there,
and a verdict replaces the current one only after winning for ``hold_s`` seconds of data, so
a noisy boundary does not flap. ``gpumon analyze`` runs the same rules and the same
``Hysteresis`` over every second of a log.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from gpumon.diagnosis import Diagnosis, INSUFFICIENT_DATA, VERDICTS
from gpumon.samples import Tick
from gpumon.detect.advice import advice
from gpumon.detect.bins import Store
from gpumon.detect.engine import (idle_diagnosis, judge_job, make_diagnosis, store_jobs,
                                  tick_columns)
from gpumon.detect.rules import CAUSE_NAMES
from gpumon.detect.thresholds import DEFAULT, Thresholds

_INSUFFICIENT = VERDICTS.index(INSUFFICIENT_DATA)


class Hysteresis:
    """Keeps the current (verdict, cause, straggler) until another wins for ``hold_s``.

    insufficient_data never displaces a verdict; the first verdict is taken at once.
    """

    def __init__(self, hold_s: float):
        self.hold_s = hold_s
        self.current: Optional[tuple] = None
        self.since: Optional[float] = None       # when ``current`` was adopted
        self._cand: Optional[tuple] = None
        self._cand_since = 0.0

    def step(self, t: float, key: tuple) -> bool:
        """Feed the raw verdict key at time ``t``; True when ``current`` changed."""
        if key[0] == _INSUFFICIENT and self.current is not None:
            return False
        if self.current is None or (self.current[0] == _INSUFFICIENT and key[0] != _INSUFFICIENT):
            changed = self.current != key
            self.current, self.since, self._cand = key, t, None
            return changed
        if key == self.current:
            self._cand = None
            return False
        if key != self._cand:
            self._cand, self._cand_since = key, t
        if t - self._cand_since >= self.hold_s - 1e-9:
            self.current, self.since, self._cand = key, t, None
            return True
        return False


class StreamingDetector:
    """Live verdicts: ``update(tick)`` returns the current Diagnosis per job."""

    def __init__(self, th: Thresholds = DEFAULT):
        self.th = th
        self.window = max(1, int(round(th.window_s / th.bin_s)))
        # Enough bins for a pause's context, the longest pause and a window after it.
        self.cap = int(math.ceil((th.context_s + th.pause_max_s) / th.bin_s)) + self.window + 4
        self.store: Optional[Store] = None
        self.current: list[Diagnosis] = []
        self._done = -1                      # last absolute bin judged
        self._pids: dict[int, Optional[tuple]] = {}
        self._ppid: dict[int, int] = {}
        self._hyst: dict[tuple, Hysteresis] = {}
        self._conf: dict[tuple, float] = {}   # confidence when the held verdict last won

    def reset(self) -> None:
        self.__init__(self.th)

    def update(self, tick: Tick) -> list[Diagnosis]:
        if not tick.gpus and tick.host is None:
            return self.current
        samples, jobs, hosts, pids, ppid = tick_columns((tick,))
        if self.store is None:
            if not len(samples.time):
                return self.current
            self.store = Store(math.floor(float(samples.time.min())), self.th, cap=self.cap)
        st = self.store
        st.add_samples(samples)
        st.add_jobs(jobs)
        st.add_host(hosts)
        for g, p in pids.items():
            if p is not None or g not in self._pids:
                self._pids[g] = p
        self._ppid.update(ppid)
        if len(samples.time) == 0:
            return self.current
        # Bins before the newest sample's bin are complete.
        newest = int(math.floor((float(samples.time.max()) - st.origin) / self.th.bin_s))
        last_complete = newest - 1
        if last_complete <= self._done:
            return self.current
        first = max(self._done + 1, last_complete - self.window + 1, st.b0)
        self._done = last_complete
        stop = last_complete - st.b0 + 1
        if stop <= 0:
            return self.current
        ends = np.arange(first - st.b0, stop)
        jobs_now = store_jobs(st, stop, self.window, self._pids, self._ppid, self.th)
        t_end = st.bin_time(stop)
        if not jobs_now:
            self.current = [idle_diagnosis(sorted(st.gpus), t_end - self.th.window_s, t_end)]
            self._hyst.clear()
            return self.current
        out = []
        keys = set()
        for gpus, shared in jobs_now:
            key = tuple(gpus)
            keys.add(key)
            f, r = judge_job(st, gpus, shared, ends, self.th, stop=stop)
            hy = self._hyst.setdefault(key, Hysteresis(self.th.hold_s))
            for e in range(len(ends)):
                t = st.bin_time(int(ends[e]) + 1)
                raw = (int(r["verdict"][e]), int(r["cause"][e]), int(r["straggler"][e]))
                hy.step(t, raw)
                if raw == hy.current:
                    self._conf[key] = float(r["confidence"][e])
            e = len(ends) - 1
            t = st.bin_time(int(ends[e]) + 1)
            d = make_diagnosis(f, r, e, gpus, t - self.th.window_s, t, self.th)
            d = _hold(d, hy.current, gpus, self._conf.get(key))
            out.append(d)
        for k in list(self._hyst):
            if k not in keys:
                del self._hyst[k]
                self._conf.pop(k, None)
        self.current = out
        return out


def _named(key: Optional[tuple], gpus: Sequence[int]):
    if key is None:
        return None
    v, c, s = key
    return (VERDICTS[v], CAUSE_NAMES[c] if c >= 0 else None, gpus[s] if s >= 0 else None)


def _hold(fresh: Diagnosis, key: Optional[tuple], gpus: Sequence[int],
          conf: Optional[float]) -> Diagnosis:
    """The held verdict, cause and straggler with the freshest evidence."""
    named = _named(key, gpus)
    if named is None or named == (fresh.verdict, fresh.cause, fresh.straggler_gpu):
        return fresh
    v, c, s = named
    return replace(fresh, verdict=v, cause=c, straggler_gpu=s, advice=advice(v, c, s),
                   confidence=round(conf if conf is not None else fresh.confidence, 3))
