"""Idle, or too little to judge: no job, the job gone, too few samples, no kernels, too
short a sample for the rules that need longer."""
from __future__ import annotations

import math

import numpy as np

from gpumon.detect.rules import Rule, rule
from gpumon.detect.rules.words import Window, gpu_list, no_util_text, pct
from gpumon.detect.thresholds import BIN_S, Thresholds
from gpumon.detect.windows import C, Windows, clip, power_need, short_hang
from gpumon.diagnosis import IDLE, INSUFFICIENT_DATA


def _no_job(th: Thresholds, whole_log: bool) -> str:
    """``whole_log``: no job found over a whole log (analyze), not live."""
    kernels = (f"{th.idle_duty:.0%} or more of its samples show a kernel (above "
               f"{th.idle_util_pct:.0f}%)" if whole_log else f"it ran a kernel (a sample above "
               f"{th.idle_util_pct:.0f}%) in the last {th.idle_after_s:.0f} s")
    return (f"no GPU is in use: none has a process or holds {th.mem_active_mib:.0f} MiB of "
            f"memory (where neither is known: none where {kernels})")


# Decided where jobs are found (jobs.store_jobs found none), before any window.
no_job = Rule("no_job", IDLE, 0, "no GPU has a process or holds {mem_active_mib:.0f} MiB "
              "(without either: ran a kernel in the last {idle_after_s:.0f} s)", _no_job,
              family=__name__)


def _job_gone(x: Window) -> str:
    """The GPUs the job does not hold, by the signal that says so: memory, else processes."""
    mib = x.th.mem_active_mib
    gone = [(g, m < mib) for g, m, h in zip(x.gpus, x.col("mem_last").tolist(),
                                            x.col("holds").tolist()) if not h]
    said = []
    for low_mem, what in ((True, f"less than {mib:.0f} MiB of memory"), (False, "no process")):
        gs = [g for g, m in gone if m == low_mem]
        if gs:
            verb = ("holds" if low_mem else "runs") if len(gs) == 1 else (
                "hold" if low_mem else "run")
            said.append(f"{gpu_list(gs)} {verb} {what}")
    why = " and ".join(said)
    if len(gone) == len(x.gpus):
        return f"{why}: the job let go of {'it' if len(gone) == 1 else 'them'}"
    return (f"{why}, of the job's {gpu_list(x.gpus)}: the job is not (or no longer) running "
            "on all of them")


@rule(IDLE, 10, "one of the job's GPUs neither runs a process nor holds "
      "{mem_active_mib:.0f} MiB (where known)", _job_gone)
def job_gone(w: Windows) -> None:
    """The job does not hold its GPUs (seconds.SecondsTable.present): idle, however few of
    the window's seconds are left."""
    w.decide(job_gone, ~w.f["present"], cf=0.9)


# Why a window of a job had no sample at all (result.no_data_diagnosis).
NO_SAMPLES = "no utilization sample from any GPU of the job in the window"


def _unmeasured(f: dict) -> np.ndarray:
    """Per window: some GPU's samples measured no time (each further than max_sample_gap_s
    from the one before): no burst or gap can be seen."""
    return np.minimum.reduce(np.add.reduce(f["run_t"]), axis=0) <= 0


def _too_few(x: Window) -> str:
    """Too few samples; a GPU that sent none in the whole window (MIG, vGPU) is named."""
    if _unmeasured(x.f)[x.e]:
        return (f"samples further apart than {x.th.max_sample_gap_s:g} s: no burst or gap "
                "can be measured, and a few samples' duty is no rhythm")
    s = (f"{int(np.nanmin(x.col('n')))} utilization samples in the "
         f"window, fewer than {x.th.min_samples:.0f}")
    none = [g for g, n in zip(x.gpus, x.col("n_all").tolist()) if not n > 0]
    return s + f"; {no_util_text(none)}" if none else s


@rule(INSUFFICIENT_DATA, 20, "fewer than {min_samples:.0f} utilization samples per GPU in "
      "the window, or samples further apart than {max_sample_gap_s:g} s", _too_few)
def too_few_samples(w: Windows) -> None:
    """Too few samples, or samples that measured no time; a pause's seconds count as
    sampled."""
    f, th = w.f, w.th
    insufficient = ((w.nmin < th.min_samples) | (f["bins"] < 1) | np.isnan(w.jduty)
                    | _unmeasured(f))
    sparse = f["n_all"].min(axis=0) < th.min_samples
    w.decide(too_few_samples, (insufficient & ~f["pause"]) | sparse, cf=0.3)


def _no_kernels(x: Window) -> str:
    th = x.th
    mem = x.col("mem_last")
    mem = mem[~np.isnan(mem)]
    held = (f", holding {mem.max():.0f} MiB of memory" if len(mem) and
            mem.max() >= th.mem_active_mib else "")
    return (f"no sample of the GPUs above {th.idle_util_pct:.0f}% (a kernel) in the last "
            f"{th.idle_after_s:.0f} s: they read {pct(x.ev.get('duty_max'))} over the last "
            f"{x.seconds()} s and {pct(x.f['ctx_duty'][x.e])} over the "
            f"{th.context_s:.0f} s before{held}")


@rule(IDLE, 40, "no sample above {idle_util_pct:.0f}% (a kernel) in the last "
      "{idle_after_s:.0f} s, the window included; host not feeding",
      _no_kernels, cause="`held` if memory is held")
def no_kernels(w: Windows) -> None:
    """No kernel (a sample above idle_util_pct) in the last idle_after_s, the host not
    feeding: idle (held with memory)."""
    f, th = w.f, w.th
    held = f["mem_last"] >= th.mem_active_mib
    w.decide(no_kernels, ~f["kernel_recent"] & ~w.feeding,
             c=lambda: np.where(held.any(axis=0), C["held"], -1),
             cf=lambda: clip(1.0 - 0.3 * w.dmax / (th.idle_util_pct / 100), 0.5, 0.99))


def _too_short(x: Window) -> str:
    """What can be said of a window shorter than the rules need, and how long they need."""
    th, ev, run = x.th, x.ev, int(x.f["data_run"][x.e])
    if short_hang(x.f, th)[x.e]:
        need = int(math.ceil(th.hang_s / BIN_S))
        say = (f"every GPU at {pct(ev.get('duty_cycle'))} utilization drawing "
               f"{pct(ev.get('power_frac_busy'))} of its power limit for {run} s: a hang "
               f"is called after {th.hang_s:.0f} s")
    else:
        need, run = int(math.ceil(power_need(th))), min(run, x.seconds())
        say = (f"every GPU at {pct(ev.get('duty_cycle'))} utilization; whether some wait "
               f"in a collective (busy but cold) needs their power compared over "
               f"{th.recover_s:.0f} s of every GPU at work")
        if ev.get("rel_power_min") is not None:
            say += f" (coldest at {pct(ev['rel_power_min'])} of the hottest's so far)"
    return f"no verdict yet (needs {need * BIN_S:.0f} s of samples, had {run}): {say}"


@rule(INSUFFICIENT_DATA, 140, "busy so far, but fewer seconds of data than a rule needs: "
      "every GPU busy at {spin_power_frac:.0%} of its power limit or less for under "
      "{hang_s:.0f} s, or the GPUs' power not yet compared over {recover_s:.0f} s",
      _too_short)
def too_short(w: Windows) -> None:
    """Busy so far, on fewer seconds than hang or busy_but_cold need (short_hang,
    power_need), the GPUs' power not seen to agree: no verdict yet."""
    f, th = w.f, w.th
    need = power_need(th)
    if w.G < 2 or (f["data_run"].min() >= th.hang_s / BIN_S and f["window"].min() >= need):
        return                  # (a job seen long enough: every live window after its first)
    agree = (f["all_busy_bins"] >= 1) & ~w.some_cold(1)     # (none cold so far)
    short = np.minimum(f["data_run"], f["window"]) < need
    w.decide(too_short, short_hang(f, th) | (short & ~agree), cf=0.0)
