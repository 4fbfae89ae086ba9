"""Throttled: clock-event reasons with the SM clock held down."""
from __future__ import annotations

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.rules import rule
from gpumon.detect.rules.words import Window, gpu_list, pct
from gpumon.detect.windows import C, Windows, clip
from gpumon.diagnosis import THROTTLED


def _throttle(x: Window) -> str:
    who = f"GPU {x.gpus[x.srow]}" if x.srow >= 0 else gpu_list(x.gpus)
    return (f"{who}: clock-event reasons (thermal, power cap, slowdown) "
            f"{pct(x.ev.get('throttle_share'))} of the time with the SM clock at "
            f"{pct(x.ev.get('clock_frac'))} of its maximum")


@rule(THROTTLED, 60, "clock-event reasons {throttle_share:.0%} of the time or more with the SM "
      "clock under {throttle_clock_frac:.0%} of its maximum (and the host not starving GPUs "
      "that wait)", _throttle, cause="thermal, power_cap, hw_slowdown")
def throttle(w: Windows) -> None:
    """Clock-event reasons with the clock held down, unless the GPUs wait for input."""
    f, th, G, E = w.f, w.th, w.G, w.E
    share = N.throttle_share(f["therm_share"], f["pcap_share"], f["hws_share"])
    clock_low = np.where(np.isnan(f["clock_frac"]), True,
                         f["clock_frac"] < th.throttle_clock_frac)
    thr = (share >= th.throttle_share) & clock_low                       # (G, E)
    if not thr.any():          # (no GPU throttled in any window: nothing to decide)
        return
    nthr = thr.sum(axis=0)
    tgpu = np.argmax(np.where(thr, share, -1.0), axis=0)

    def tcause():
        ar = np.arange(E)
        return np.select([f["therm_share"][tgpu, ar] >= th.throttle_share,
                          f["pcap_share"][tgpu, ar] >= th.throttle_share],
                         [C["thermal"], C["power_cap"]], C["hw_slowdown"])
    waiting = w.feeding & (w.jduty < th.duty_starved)
    w.decide(throttle, (nthr > 0) & ~waiting, c=tcause,
             s=lambda: np.where((G > 1) & (nthr < G), tgpu, -1),
             cf=lambda: clip(0.6 + 0.4 * share.max(axis=0), 0, 0.95))
