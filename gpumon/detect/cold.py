"""Busy but cold, for one second of readings: the comparison the `busy_but_cold` rule makes
(rules.py, features._power_features), on the latest values, so the dashboard's COLD mark
says what the detector uses. The thresholds are the detector's (thresholds.py):
busy_bin_duty, cold_power_ratio and power_spread."""
from __future__ import annotations

from typing import Mapping, Optional

from gpumon.detect.thresholds import DEFAULT, Thresholds


def busy_cold(util_pct: Mapping[int, Optional[float]], power_w: Mapping[int, Optional[float]],
              limit_w: Mapping[int, Optional[float]],
              th: Thresholds = DEFAULT) -> frozenset[int]:
    """The GPUs busy (utilization at least busy_bin_duty) that draw at most cold_power_ratio
    of the hottest busy GPU's power, at least power_spread of their limit below it (where
    the limits are known). Fewer than two busy GPUs with power: none (nothing to compare)."""
    busy = {g: w for g, w in power_w.items()
            if w is not None and (util_pct.get(g) or 0.0) >= 100.0 * th.busy_bin_duty}
    if len(busy) < 2:
        return frozenset()
    hot = max(busy, key=busy.get)
    top = busy[hot]
    if top <= 0:
        return frozenset()
    out = set()
    for g, w in busy.items():
        if g == hot or w / top > th.cold_power_ratio:
            continue
        lim, hot_lim = limit_w.get(g), limit_w.get(hot)
        if lim and hot_lim and top / hot_lim - w / lim < th.power_spread:
            continue
        out.add(g)
    return frozenset(out)


def cold_seconds(g, th: Thresholds = DEFAULT):
    """Per bin of a job's bins ``g`` (bins.GPU_FIELDS x G x T): some GPU busy but cold, the
    comparison ``busy_cold`` makes, on each second's mean power (False where fewer than two
    busy GPUs have power)."""
    import numpy as np
    from gpumon.detect.bins import GI

    def mean(s, c):
        return np.where(c > 0, s / np.where(c > 0, c, 1.0), np.nan)
    with np.errstate(invalid="ignore"):
        duty = mean(g[GI["u"]], g[GI["n"]])
        pw = np.where(duty >= th.busy_bin_duty, mean(g[GI["pw"]], g[GI["pn"]]), np.nan)
        frac = pw / mean(g[GI["pl"]], g[GI["pln"]])
        known = ~np.isnan(pw)
        hot = np.argmax(np.where(known, pw, -np.inf), axis=0)
        top = np.take_along_axis(pw, hot[None], axis=0)[0]
        hot_frac = np.take_along_axis(frac, hot[None], axis=0)[0]
        gap = hot_frac - frac                    # NaN where a limit is unknown: no check
        spread = np.isnan(gap) | (gap >= th.power_spread)
        cold = known & (pw <= th.cold_power_ratio * top) & spread
        return (known.sum(axis=0) >= 2) & (top > 0) & cold.any(axis=0)
