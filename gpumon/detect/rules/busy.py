"""Busy: none of the rules before fired."""
from __future__ import annotations

import numpy as np

from gpumon.detect.rules import rule
from gpumon.detect.rules.words import Window, pct
from gpumon.detect.windows import Windows, clip
from gpumon.diagnosis import BUSY


def _busy(x: Window) -> str:
    ev = x.ev
    s = (f"every GPU ran a kernel {pct(ev.get('duty_cycle'))} of the last {x.seconds()} s "
         f"(lowest {pct(ev.get('duty_min'))})")
    if ev.get("power_frac_busy") is not None:
        s += f", at {pct(ev['power_frac_busy'])} of the power limit while busy"
    sm = ev.get("sm_active")
    if sm is not None and sm < x.th.few_sm_active:
        s += f"; SMs {pct(sm)} active: small kernels or batches leave most SMs idle"
    elif sm is not None:
        s += f", {pct(sm)} of their SMs active"
    return s


@rule(BUSY, 150, "none of the above", _busy)
def busy(w: Windows) -> None:
    """None of the above."""
    w.decide(busy, np.ones(w.E, bool),
             cf=lambda: clip(0.6 + 2.0 * (w.jduty - w.th.duty_starved), 0.5, 0.95))
