"""Data starvation: the GPUs (or one rank) wait for input."""
from __future__ import annotations

import numpy as np

from gpumon.detect.rules import rule
from gpumon.detect.rules.words import Window, pct, rhythm
from gpumon.detect.windows import Windows, clip
from gpumon.diagnosis import DATA_STARVATION


def _quiet_after_work(x: Window) -> str:
    th = x.th
    return (f"no kernel in the last {x.seconds()} s ({pct(x.ev.get('duty_max'))}), but one "
            f"within the last {th.idle_after_s:.0f} s ({pct(x.f['ctx_duty'][x.e])} over the "
            f"last {th.context_s:.0f} s): the job waits between bursts, not steadily enough "
            f"to call this a pause; host: {x.host_line()}")


@rule(DATA_STARVATION, 50, "no kernel now, but some in the last {idle_after_s:.0f} s (work "
      "that was not steady, or a slow loader's rare bursts)", _quiet_after_work,
      cause="from the host")
def quiet_after_work(w: Windows) -> None:
    """No kernel now right after work, and no pause: a long gap of a starving job."""
    w.decide(quiet_after_work, w.dmax < w.th.idle_duty,
             c=lambda: w.host.cause(np.full(w.E, -1)), cf=0.6)


def _rank_host_starved(x: Window) -> str:
    s = x.srow
    return (f"GPU {x.gpus[s]} at {pct(x.mean('duty', [s]))} while the others at "
            f"{pct(x.mean('duty', x.others()))}, and its own rank's host starves "
            f"({x.host_line()})")


@rule(DATA_STARVATION, 80, "one GPU idles beside spinning ones, and its own rank's host "
      "starves", _rank_host_starved, cause="on it, from its host")
def rank_host_starved(w: Windows) -> None:
    """One rank idles beside spinning ones, and its own host starves."""
    if w.G > 1 and w.asym.any():
        w.decide(rank_host_starved, w.asym & (w.hs >= 0), c=lambda: w.host.cause(w.hs),
                 s=w.hs, cf=w.asym_conf)


def _duty_low(x: Window) -> str:
    ev, th = x.ev, x.th
    lo, hi = ev.get("duty_min"), ev.get("duty_max")
    if lo is not None and hi is not None and hi - lo > th.duty_spread:
        # GPUs as far apart as an odd one out: the mean alone reads as if each ran that much.
        s = (f"the GPUs ran a kernel {pct(ev.get('duty_cycle'))} of the last {x.seconds()} s "
             f"on average ({pct(lo)} to {pct(hi)}), under {pct(th.duty_starved)}")
    else:
        s = (f"every GPU ran a kernel {pct(ev.get('duty_cycle'))} of the last {x.seconds()} s"
             f", under {pct(th.duty_starved)}")
    return s + rhythm(ev) + f"; host: {x.host_line()}"


@rule(DATA_STARVATION, 110, "every GPU under {duty_starved:.0%} duty together", _duty_low,
      cause="from the host")
def duty_low(w: Windows) -> None:
    """The job's duty under duty_starved (under work_duty where its host is known and calm;
    steady seconds without host counters are no starvation), or ranks idling in turn."""
    f, th = w.f, w.th
    if w.G > 1:
        w.decide(duty_low, w.asym, c=lambda: w.host.cause(np.full(w.E, -1)),
                 cf=lambda: w.asym_conf)
    known = w.known
    limit = np.where(known & ~w.feeding, th.work_duty, th.duty_starved)
    steady = ~known & (f["bins"] >= th.min_samples) & (f["low_bins"] == 0)
    starved = (w.jduty < limit) & ~steady & ~w.over
    w.decide(duty_low, starved, c=lambda: w.host.cause(w.hs), s=lambda: w.hs,
             cf=lambda: clip(0.6 + (th.duty_starved - w.jduty), 0.6, 0.95))
