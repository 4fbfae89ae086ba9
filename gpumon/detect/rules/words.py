"""What reasons are made of: one window as a reason reads it, and the wording several rules'
reasons share (duty = share of time a kernel ran)."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from gpumon.detect.thresholds import Thresholds


def pct(x: Optional[float]) -> str:
    """A share as a whole per cent; "?" where it is unknown."""
    return "?" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


def gpu_list(gs: Sequence[int]) -> str:
    """"GPU 3", "GPUs 0,2" or "GPUs 0-7"."""
    gs = sorted(gs)
    if len(gs) > 2 and gs == list(range(gs[0], gs[-1] + 1)):
        return f"GPUs {gs[0]}-{gs[-1]}"
    return ("GPU " if len(gs) == 1 else "GPUs ") + ",".join(map(str, gs))


def known(x) -> bool:
    """A number was measured (not None, not NaN)."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def sms(x: "Window", rows) -> str:
    """" with N% of their SMs active" where the GPUs ``rows`` of window ``x`` all have SM
    activity (GPM), else nothing: the reason then names power instead."""
    a = x.col("sm_active")[list(rows)]
    if not len(a) or np.isnan(a).any():
        return ""
    return f" with {pct(float(a.mean()))} of {'its' if len(a) == 1 else 'their'} SMs active"


def rhythm(ev: dict) -> str:
    """", in bursts of B s and gaps of G s" where both were measured, else nothing."""
    b, g = ev.get("burst_s"), ev.get("gap_s")
    if not (known(b) and known(g)):
        return ""
    return f", in bursts of {b:.1f} s and gaps of {g:.1f} s"


def no_util_text(gpus: Sequence[int]) -> str:
    """Why GPUs that sent no utilization sample have no verdict."""
    verb = "reports" if len(gpus) == 1 else "report"
    return (f"{gpu_list(gpus)} {verb} no utilization (a MIG instance or vGPU, or a driver that "
            "does not support it): idle cannot be told from busy without it")


class Window:
    """Window ``e`` of the features ``f`` of a job on ``gpus``, as a reason reads it: the
    straggler row ``srow`` (-1 for none), the evidence ``ev`` and the thresholds ``th`` the
    rules were given."""

    def __init__(self, f: dict, e: int, gpus: Sequence[int], srow: int, ev: dict,
                 th: Thresholds):
        self.f, self.e, self.gpus, self.srow, self.ev, self.th = f, e, list(gpus), srow, ev, th

    def col(self, name: str) -> np.ndarray:
        return self.f[name][:, self.e]

    def mean(self, name: str, rows) -> float:
        a = self.col(name)[rows]
        a = a[~np.isnan(a)]
        return float(a.mean()) if len(a) else math.nan

    def seconds(self) -> int:
        return int(self.f["window"][self.e])

    def others(self) -> list[int]:
        return [i for i in range(len(self.gpus)) if i != self.srow]

    def host_line(self) -> str:
        """The host counters of the evidence that were measured."""
        ev, parts = self.ev, []
        if ev.get("loader_cpu_pct") is not None:
            parts.append(f"loader workers {ev['loader_cpu_pct']:.0f}% CPU")
        if ev.get("main_cpu_pct") is not None:
            parts.append(f"main process {ev['main_cpu_pct']:.0f}%")
        if ev.get("iowait_pct") is not None:
            parts.append(f"iowait {ev['iowait_pct']:.1f}%")
        return ", ".join(parts) if parts else "no host counters"
