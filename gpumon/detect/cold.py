"""Busy but cold: a GPU busy (duty at least busy_bin_duty) that draws at most cold_power_ratio
of the hottest busy GPU's power, at least power_spread of its limit below it where the limits
are known; fewer than two busy GPUs with power: none (nothing to compare). The comparison the
`busy_but_cold` rule makes over its windows (rules.py, features._power_features), here for one
second at a time: on the latest readings (``busy_cold``: the dashboard's COLD mark says what
the detector uses) and on each second of a job's bins (``cold_seconds``: the pause tracker's
"full work"). The thresholds are the detector's (thresholds.py)."""
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


def cold_seconds(g: np.ndarray, th: Thresholds = DEFAULT) -> np.ndarray:
    """Per bin of a job's bins ``g`` (bins.GPU_FIELDS x G x T): some GPU busy but cold, on
    each second's mean duty, power and limit."""
    with np.errstate(invalid="ignore", divide="ignore"):
        duty, power = N.div(g[GI["u"]], g[GI["n"]]), N.div(g[GI["pw"]], g[GI["pn"]])
        limit = N.div(g[GI["pl"]], g[GI["pln"]])
    return _cold(duty, power, limit, th).any(axis=0)
