"""Hand-made bins for the seconds table: per-GPU duty (and power, host readings) per second."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from gpumon.detect.bins import GI, GPU_FIELDS, HI, HOST_FIELDS
from gpumon.detect.seconds import SecondsTable, seconds
from gpumon.detect.thresholds import DEFAULT, Thresholds

SAMPLES = 6.0         # utilization samples per GPU per second


def bins(duty, power=None, limit=None, n: Optional[np.ndarray] = None):
    """(g, h): bins of G GPUs over T seconds from ``duty`` (G, T; NaN: no sample), optional
    ``power`` and ``limit`` (W, G x T or a number; NaN: unknown), ``n``: the job's samples
    per second (0: none from any GPU)."""
    duty = np.asarray(duty, float)
    G, T = duty.shape
    g = np.zeros((len(GPU_FIELDS), G, T))
    h = np.zeros((len(HOST_FIELDS), T))
    seen = ~np.isnan(duty)
    if n is not None:
        seen &= (np.asarray(n) > 0)[None, :]
    g[GI["n"]] = np.where(seen, SAMPLES, 0.0)
    g[GI["u"]] = np.where(seen, np.nan_to_num(duty) * SAMPLES, 0.0)
    for val, s, c in ((power, "pw", "pn"), (limit, "pl", "pln")):
        if val is not None:
            v = np.broadcast_to(np.asarray(val, float), (G, T))
            g[GI[c]] = np.where(np.isnan(v), 0.0, 1.0)
            g[GI[s]] = np.nan_to_num(v)
    return g, h


def host(g, h, t, workers=None, ld=None, age=None, mc=None, mem=None, io=None, rd=None,
         wr=None, gpu=slice(None)):
    """Set second ``t``'s readings (each once, on GPUs ``gpu``; host ones for the host)."""
    for k, v in (("wk", workers), ("ld", ld), ("age", age), ("mc", mc), ("mem", mem)):
        if v is not None:
            g[GI[k], gpu, t] = v
            g[GI["memn" if k == "mem" else k + "n"], gpu, t] = 1
    for k, v in (("io", io), ("rd", rd), ("wr", wr)):
        if v is not None:
            h[HI[k], t] = v
            h[HI[k + "n"], t] = 1


def table_of(duty, n=None, hosts: Optional[list] = None,
             th: Thresholds = DEFAULT) -> SecondsTable:
    """The seconds table of ``duty`` (G, T) and, per second, optional host readings as
    (workers, starving, writing, present, loader age, main_busy): made true by loaders at a
    full core, disk writes at 100 MB/s, memory released, a main process at a core."""
    g, h = bins(duty, n=n)
    for t, x in enumerate(hosts or []):
        workers, starving, writing, present, age, busy = x
        if not math.isnan(workers):
            host(g, h, t, workers=workers, ld=100.0 * workers if starving else 0.0,
                 age=None if math.isnan(age) else age, mc=100.0 if busy else 0.0)
        if writing:
            host(g, h, t, wr=100.0)
        if not present:
            host(g, h, t, mem=0.0)
    return seconds(g, h, th)
