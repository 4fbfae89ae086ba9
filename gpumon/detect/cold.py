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
