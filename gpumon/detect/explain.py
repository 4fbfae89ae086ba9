"""Why a rule decided: one sentence per rule (rules.RULES), built from the numbers it used, in
terms a user can check against the screen or the log (duty = share of time a kernel ran)."""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

from gpumon.detect.thresholds import DEFAULT, Thresholds
from gpumon.diagnosis import CAUSES


def _pct(x: Optional[float]) -> str:
    return "?" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


def _gpus(gs: Sequence[int]) -> str:
    gs = sorted(gs)
    if len(gs) > 2 and gs == list(range(gs[0], gs[-1] + 1)):
        return f"GPUs {gs[0]}-{gs[-1]}"
    return ("GPU " if len(gs) == 1 else "GPUs ") + ",".join(map(str, gs))


class _Window:
    """Window ``e`` of the features ``f`` of a job on ``gpus``."""

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
        return int(self.f["window"][self.e]) if "window" in self.f else 0

    def others(self) -> list[int]:
        return [i for i in range(len(self.gpus)) if i != self.srow]

    def host_line(self) -> str:
        ev = self.ev
        parts = []
        if ev.get("loader_cpu_pct") is not None:
            parts.append(f"loader workers {ev['loader_cpu_pct']:.0f}% CPU")
        if ev.get("main_cpu_pct") is not None:
            parts.append(f"main process {ev['main_cpu_pct']:.0f}%")
        if ev.get("iowait_pct") is not None:
            parts.append(f"iowait {ev['iowait_pct']:.1f}%")
        return ", ".join(parts) if parts else "no host counters"


def _too_few(w: _Window) -> str:
    """Too few samples; a GPU that sent none in the whole window (MIG, vGPU) is named."""
    s = (f"{int(np.nanmin(w.col('n'))) if len(w.gpus) else 0} utilization samples in the "
         f"window, fewer than {w.th.min_samples:.0f}")
    none = [g for g, n in zip(w.gpus, w.col("n_all").tolist()) if not n > 0] \
        if "n_all" in w.f else []
    return s + f"; {no_util_text(none)}" if none else s


def no_util_text(gpus: Sequence[int]) -> str:
    """Why GPUs that sent no utilization sample have no verdict."""
    verb = "reports" if len(gpus) == 1 else "report"
    return (f"{_gpus(gpus)} {verb} no utilization (a MIG instance or vGPU, or a driver that "
            "does not support it): idle cannot be told from busy without it")


def _duty_low(w: _Window) -> str:
    ev, th = w.ev, w.th
    lo, hi = ev.get("duty_min"), ev.get("duty_max")
    if lo is not None and hi is not None and hi - lo > th.duty_spread:
        # GPUs as far apart as an odd one out: the mean alone reads as if each ran that much.
        s = (f"the GPUs ran a kernel {_pct(ev.get('duty_cycle'))} of the last {w.seconds()} s "
             f"on average ({_pct(lo)} to {_pct(hi)}), under {_pct(th.duty_starved)}")
    else:
        s = (f"every GPU ran a kernel {_pct(ev.get('duty_cycle'))} of the last {w.seconds()} s, "
             f"under {_pct(th.duty_starved)}")
    if ev.get("burst_s") is not None and ev.get("gap_s") is not None:
        s += f", in bursts of {ev['burst_s']:.1f} s and gaps of {ev['gap_s']:.1f} s"
    return s + f"; host: {w.host_line()}"


def _rank_host(w: _Window) -> str:
    s, o = w.srow, w.others()
    sd, od = w.mean("duty", [s]), w.mean("duty", o)
    pf, watts = w.mean("power_frac_busy", o), w.mean("power_w", o)
    power = (f" drawing {_pct(pf)} of their power limit" if not math.isnan(pf) else
             f" drawing {watts:.0f} W" if not math.isnan(watts) else "")
    gs, og = w.gpus[s], _gpus([w.gpus[i] for i in o])
    host = ("no host counters to tell its input pipeline from checkpointing or logging on it"
            if w.ev.get("loader_cpu_pct") is None and w.ev.get("main_cpu_pct") is None else
            f"its host shows no starved input ({w.host_line()}): a checkpoint, logging or "
            "other host work on that rank")
    return (f"GPU {gs} at {_pct(sd)} while {og} at {_pct(od)}{power}: they wait in a "
            f"collective for GPU {gs}; {host}")


def _stall_over(w: _Window) -> str:
    duty = w.col("duty")
    i = int(np.nanargmin(np.where(np.isnan(duty), np.inf, duty)))
    secs = int(w.f["steady_run"][w.e])
    return (f"GPU {w.gpus[i]} idled in this window while the others waited for it, but every "
            f"GPU has run at {_pct(w.th.log_steady_duty)} or more for the last {secs} s: "
            "its stall is over")


def _rank_computes(w: _Window) -> str:
    s, o = w.srow, w.others()
    return (f"GPU {w.gpus[s]} at {_pct(w.mean('duty', [s]))} and "
            f"{_pct(w.mean('power_frac', [s]))} of its power limit computes while "
            f"{_gpus([w.gpus[i] for i in o])} at {_pct(w.mean('duty', o))} draw "
            f"{_pct(w.mean('power_frac', o))}: they wait for it")


def _rank_host_starved(w: _Window) -> str:
    s = w.srow
    return (f"GPU {w.gpus[s]} at {_pct(w.mean('duty', [s]))} while the others at "
            f"{_pct(w.mean('duty', w.others()))}, and its own rank's host starves "
            f"({w.host_line()})")


def _hang(w: _Window) -> str:
    run = int(w.f["cold_run"][w.e])
    return (f"{_gpus(w.gpus)} busy ({_pct(w.ev.get('duty_cycle'))}) at "
            f"{_pct(w.ev.get('power_frac_busy'))} of their power limit for {run} s or more, "
            f"none computing (at most {_pct(w.th.hang_power_frac)} for {w.th.hang_s:.0f} s): "
            "a collective waiting for a rank that is not coming")


def _busy_but_cold(w: _Window) -> str:
    s = w.srow
    who = f"GPU {w.gpus[s]}" if s >= 0 else "GPU ?"
    hot, cold = (w.f[k][..., w.e] for k in ("hot_bins", "cold_bins"))
    turns = (f", the hottest in {hot[s] * w.th.bin_s:.0f} of the {cold * w.th.bin_s:.0f} s "
             "another was cold" if s >= 0 else "")
    return (f"every GPU busy, but the others draw as little as "
            f"{_pct(w.ev.get('rel_power_min'))} of {who}'s power{turns}: "
            "they spin in a collective while it computes")


def _throttle(w: _Window) -> str:
    who = f"GPU {w.gpus[w.srow]}" if w.srow >= 0 else _gpus(w.gpus)
    return (f"{who}: clock-event reasons (thermal, power cap, slowdown) "
            f"{_pct(w.ev.get('throttle_share'))} of the time with the SM clock at "
            f"{_pct(w.ev.get('clock_frac'))} of its maximum")


def _no_kernels(w: _Window) -> str:
    mem = w.col("mem_last")
    mem = mem[~np.isnan(mem)]
    held = (f", holding {mem.max():.0f} MiB of memory" if len(mem) and
            mem.max() >= w.th.mem_active_mib else "")
    return (f"the GPUs ran a kernel {_pct(w.ev.get('duty_max'))} of the last {w.seconds()} s "
            f"and {_pct(w.f['ctx_duty'][w.e])} of the {w.th.context_s:.0f} s before "
            f"(under {_pct(w.th.idle_duty)}), no sample above {w.th.idle_util_pct:.0f}% in the "
            f"last {w.th.idle_after_s:.0f} s{held}")


def _quiet_after_work(w: _Window) -> str:
    return (f"no kernel in the last {w.seconds()} s ({_pct(w.ev.get('duty_max'))}), but one "
            f"within the last {w.th.idle_after_s:.0f} s ({_pct(w.f['ctx_duty'][w.e])} over the "
            f"last {w.th.context_s:.0f} s): the job waits between bursts, not steadily enough "
            f"to call this a pause; host: {w.host_line()}")


# Why a pause, by its cause (rules: the pause tracker's reading of the host, pauses.py).
_PAUSE_WHY = {
    "checkpoint": ("a checkpoint: the host writes to disk at checkpoint rate, or one rank "
                   "works alone at a trickle (copying its state off the GPU) while the others "
                   "run nothing"),
    "validation": ("more DataLoader workers than training had appeared: a validation pass "
                   "with its own loader"),
    "epoch_boundary": "new DataLoader workers started: an epoch boundary",
    "unknown": ("this is not the burst-then-idle rhythm of starved input, and nothing in "
                "the counters says why (no disk writes, no new loader workers known)"),
}


def _pause(w: _Window) -> str:
    code = int(w.f["pause_cause"][w.e]) if "pause_cause" in w.f else -1
    cause = CAUSES[code] if code >= 0 else "unknown"
    secs = int(w.f["pause_len"][w.e]) if "pause_len" in w.f else 0
    wm = int(round(w.th.window_max_s / w.th.bin_s))
    ago = f"{secs} s ago" if secs <= wm else f"more than {wm} s ago"
    if cause == "startup":
        return f"the job started {ago}: its ranks load and get their first batches"
    return (f"the job stopped after steady work {ago} (every GPU, or all but one working "
            f"alone, or one rank while the others wait for it); "
            f"{_PAUSE_WHY.get(cause, _PAUSE_WHY['unknown'])}")


def _too_short(w: _Window) -> str:
    """What can be said of a window shorter than the rules need, and how long they need."""
    from gpumon.detect.windows import power_need, short_hang
    th, run = w.th, int(w.f["data_run"][w.e])
    if short_hang(w.f, th)[w.e]:
        need = int(math.ceil(th.hang_s / th.bin_s))
        say = (f"every GPU at {_pct(w.ev.get('duty_cycle'))} utilization drawing "
               f"{_pct(w.ev.get('power_frac_busy'))} of its power limit for {run} s: a hang "
               f"is called after {th.hang_s:.0f} s")
    else:
        need, run = int(math.ceil(power_need(th))), min(run, w.seconds())
        say = (f"every GPU at {_pct(w.ev.get('duty_cycle'))} utilization; whether some wait "
               f"in a collective (busy but cold) needs their power compared over "
               f"{th.power_min_s:.0f} s of every GPU at work")
        if w.ev.get("rel_power_min") is not None:
            say += f" (coldest at {_pct(w.ev['rel_power_min'])} of the hottest's so far)"
    return f"no verdict yet (needs {need * th.bin_s:.0f} s of samples, had {run}): {say}"


def _busy(w: _Window) -> str:
    ev = w.ev
    s = (f"every GPU ran a kernel {_pct(ev.get('duty_cycle'))} of the last {w.seconds()} s "
         f"(lowest {_pct(ev.get('duty_min'))})")
    if ev.get("power_frac_busy") is not None:
        s += f", at {_pct(ev['power_frac_busy'])} of the power limit while busy"
    return s


def _job_gone(w: _Window) -> str:
    mib = w.th.mem_active_mib
    gone = [g for g, m in zip(w.gpus, w.col("mem_last").tolist()) if m < mib]
    verb = "holds" if len(gone) == 1 else "hold"
    if len(gone) == len(w.gpus):
        return (f"{_gpus(gone)} {verb} less than {mib:.0f} MiB of memory: the job let go of "
                f"{'it' if len(gone) == 1 else 'them'}")
    return (f"{_gpus(gone)} of the job's {_gpus(w.gpus)} {verb} less than {mib:.0f} MiB of "
            "memory: the job is not (or no longer) running on all of them")


BECAUSE: dict[str, Callable[[_Window], str]] = {
    "job_gone": _job_gone,
    "too_few_samples": _too_few,
    "pause": _pause,
    "no_kernels": _no_kernels,
    "quiet_after_work": _quiet_after_work,
    "throttle": _throttle,
    "rank_computes": _rank_computes,
    "rank_host_starved": _rank_host_starved,
    "stall_over": _stall_over,
    "rank_host": _rank_host,
    "duty_low": _duty_low,
    "hang": _hang,
    "busy_but_cold": _busy_but_cold,
    "too_short": _too_short,
    "busy": _busy,
}


def because(rule: str, f: dict, e: int, gpus: Sequence[int], srow: int, ev: dict,
            th: Thresholds = DEFAULT) -> str:
    """The sentence for ``rule`` on window ``e`` (straggler row ``srow``, -1 for none)."""
    fn = BECAUSE.get(rule)
    if fn is None:
        return ""
    with np.errstate(all="ignore"):
        return fn(_Window(f, e, gpus, srow, ev, th))
