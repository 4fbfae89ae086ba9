"""Busy but cold: a GPU busy (duty at least busy_bin_duty) that draws at most cold_power_ratio
of the hottest busy GPU's power, at least power_spread of its limit below it where the limits
are known; fewer than two busy GPUs with power: none (nothing to compare). The comparison the
`busy_but_cold` rule makes over its windows (rules.py, features._power_features), here for one
second at a time: on the latest readings (``busy_cold``: the dashboard's COLD mark says what
the detector uses) and on each second of a job's bins (``cold_seconds``: the pause tracker's
"full work", in the seconds whose power the rules compare: ``settled``). The thresholds are
the detector's (thresholds.py)."""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.bins import GI
from gpumon.detect.thresholds import DEFAULT, Thresholds


def _cold(duty: np.ndarray, power: np.ndarray, limit: np.ndarray,
          th: Thresholds) -> np.ndarray:
    """(G, T) bool: each GPU busy but cold in each second, from per-GPU duty (share), power
    and power limit (W), NaN where unknown."""
    with np.errstate(invalid="ignore", divide="ignore"):
        pw = np.where(duty >= th.busy_bin_duty, power, np.nan)
        known = ~np.isnan(pw)
        hot = (np.argmax(np.where(known, pw, -np.inf), axis=0), np.arange(pw.shape[1]))
        frac = pw / np.where(limit > 0, limit, np.nan)
        gap = frac[hot] - frac                  # NaN: a limit unknown, no check
        cold = known & (pw <= th.cold_power_ratio * pw[hot]) & (np.isnan(gap)
                                                                | (gap >= th.power_spread))
        return cold & (known.sum(axis=0) >= 2) & (pw[hot] > 0)


def busy_cold(util_pct: Mapping[int, Optional[float]], power_w: Mapping[int, Optional[float]],
              limit_w: Mapping[int, Optional[float]],
              th: Thresholds = DEFAULT) -> frozenset[int]:
    """The GPUs busy but cold on these readings (utilization %, power and limit W)."""
    gpus = list(power_w)
    if len(gpus) < 2:
        return frozenset()

    def col(values, scale=1.0):
        return np.array([[np.nan if values.get(g) is None else values[g] / scale]
                         for g in gpus], dtype=float)
    cold = _cold(col(util_pct, 100.0), col(power_w), col(limit_w), th)[:, 0]
    return frozenset(g for g, c in zip(gpus, cold) if c)


def settle_bins(th: Thresholds) -> int:
    """Seconds with every GPU at work before a second whose power is compared."""
    return max(0, int(round(th.power_settle_s / th.bin_s)))


def settled(all_busy: np.ndarray, th: Thresholds) -> np.ndarray:
    """(T,): the seconds in which power is compared across GPUs: every GPU at work in it and
    in the power_settle_s before (the driver's power is a 1 s average, so a GPU's first
    second back from a wait, its own or spinning on a rank that waited, still reads cold)."""
    out = all_busy.copy()
    for k in range(1, settle_bins(th) + 1):
        out[k:] &= all_busy[:-k]
        out[:k] = False
    return out


# Bins whose context is gathered at once by spin_seconds (bounds its scratch memory).
SPIN_CHUNK = 4096


def spin_seconds(g: np.ndarray, th: Thresholds = DEFAULT, first: int = 0,
                 duty: Optional[np.ndarray] = None) -> np.ndarray:
    """Per bin of a job's bins ``g`` (T,): one GPU stopped (under trickle_duty) beside GPUs at
    work (busy_bin_duty or more) that each draw at most stop_power_frac of their own highest
    power over the context_s before: they spin in a collective (NCCL keeps a kernel running
    while it waits, at a fraction of its computing power), they do not compute. Power
    unknown: False. Bins from ``first`` on (the bins before are context only; ``duty``: their
    per-GPU duty where the caller has it); only bins with a GPU stopped beside one at work
    are read (a day-long log has few; a live second rarely is one)."""
    T = g.shape[-1]
    out = np.zeros(T - first, bool)
    if duty is not None and duty.shape == (g.shape[1], 1):
        d = [x for x in duty[:, 0].tolist() if x == x]
        if not d or min(d) >= th.trickle_duty or max(d) < th.busy_bin_duty:
            return out
    with np.errstate(invalid="ignore", divide="ignore"):
        if duty is None:
            duty = N.div(g[GI["u"], :, first:], g[GI["n"], :, first:])
        busy = duty >= th.busy_bin_duty
        idx = np.flatnonzero((duty < th.trickle_duty).any(axis=0) & busy.any(axis=0))
        if not len(idx):
            return out
        power = N.div(g[GI["pw"]], g[GI["pn"]])
    busy, idx = busy[:, idx], idx + first
    idx, busy = idx[idx > 0], busy[:, idx > 0]
    ctx = np.arange(1, max(1, int(round(th.context_s / th.bin_s))) + 1)
    for a in range(0, len(idx), SPIN_CHUNK):
        i, b = idx[a:a + SPIN_CHUNK], busy[:, a:a + SPIN_CHUNK]
        back = i[:, None] - ctx[None, :]                       # (k, ctx)
        before = np.where(back >= 0, power[:, np.maximum(back, 0)], np.nan)
        ref = np.fmax.reduce(before, axis=2)                   # (G, k): NaN where unknown
        with np.errstate(invalid="ignore"):
            spin = power[:, i] <= th.stop_power_frac * ref
        out[i - first] = np.where(b, spin, True).all(axis=0)
    return out


def cold_seconds(g: np.ndarray, th: Thresholds = DEFAULT, lead: int = 0) -> np.ndarray:
    """Per bin of a job's bins ``g`` (bins.GPU_FIELDS x G x T): some GPU busy but cold, on
    each second's mean duty, power and limit, in seconds where power is compared (settled);
    the first ``lead`` bins only settle the ones after them and are left out."""
    with np.errstate(invalid="ignore", divide="ignore"):
        duty, power = N.div(g[GI["u"]], g[GI["n"]]), N.div(g[GI["pw"]], g[GI["pn"]])
        limit = N.div(g[GI["pl"]], g[GI["pln"]])
        busy = (duty >= th.busy_bin_duty) & ~np.isnan(power)
    all_busy = busy.all(axis=0) if busy.shape[0] else np.zeros(busy.shape[1], bool)
    return (_cold(duty, power, limit, th).any(axis=0) & settled(all_busy, th))[lead:]
