"""The verdict rules: small named functions over one job's windows (windows.py), tried in
the order of RULES; the first that fires decides a window, and records its name (explain.py
says why, in the numbers it used).

Order, and why:
- the job let go of its GPUs -> idle; too few samples -> insufficient_data; a stop after
  steady work (pauses.py) -> paused; no kernels -> idle (held with memory), or right after
  work -> data_starvation.
- clock-event reasons with the SM clock held down -> throttled (not while every GPU waits for
  input its host cannot supply); with several GPUs and not all throttled, the throttled one
  is the straggler.
- GPUs of one job at different duty cycles: one is the odd one out. Whether the busier GPUs
  compute or spin decides who waits for whom: a rank waiting in an NCCL collective keeps a
  kernel running at low power (NVIDIA/nccl #968, #199, #1550; pytorch #36285). A computing
  busier GPU is the straggler (imbalance; DataParallel's GPU 0). Spinning busier GPUs wait
  for an idle rank held up on its host: its own host counters decide (starving: starvation
  on it; otherwise, and always without host counters, rank_host).
- every GPU below duty_starved together -> data_starvation; cause from host counters.
- every GPU busy and cold for hang_s, none computing -> sync_stall (hang).
- every GPU ~100% but some at a fraction of the hottest one's power -> sync_stall.
- fewer seconds of data than the two rules before need (a job's first seconds, a short
  status sample), and nothing seen that rules them out -> insufficient_data.
- otherwise busy.
"""
from __future__ import annotations

import warnings

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.hostview import CALM
from gpumon.detect.thresholds import DEFAULT, Thresholds
from gpumon.detect.windows import Windows, clip, low_nan, power_need, short_hang
from gpumon.diagnosis import (BUSY, CAUSES, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, PAUSED,
                              SYNC_STALL, THROTTLED, VERDICTS)

CAUSE_NAMES = CAUSES
C = {c: i for i, c in enumerate(CAUSE_NAMES)}


def job_gone(w: Windows) -> None:
    """The job does not hold its GPUs (one of them, where its memory is known, holds less
    than mem_active_mib: the seconds the pause tracker counts the job absent): idle, however
    few of the window's seconds are left to judge (a job that ends during a pause has every
    second of its last windows set aside; one that is still starting has none yet)."""
    with CALM:
        gone = (w.f["mem_last"] < w.th.mem_active_mib).any(axis=0) if w.G else \
            np.zeros(w.E, bool)
    w.decide("job_gone", gone, IDLE, cf=0.9)


def too_few_samples(w: Windows) -> None:
    """Fewer than min_samples per GPU in the window. (A pause leaves its seconds out of the
    window: whether the window had samples at all is counted with them, so a log sampled
    every 15 s is never "paused".)"""
    f, th = w.f, w.th
    insufficient = (w.nmin < th.min_samples) | (f["bins"] < 1) | np.isnan(w.jduty)
    sparse = (f["n_all"].min(axis=0) if w.G else np.zeros(w.E)) < th.min_samples
    w.decide("too_few_samples", (insufficient & ~f["pause"]) | sparse, INSUFFICIENT_DATA,
             cf=0.3)


def pause(w: Windows) -> None:
    """A stop after steady work, as the pause tracker read it, with its cause."""
    pc = w.f["pause_cause"]
    w.decide("pause", w.f["pause"], PAUSED, c=np.where(pc >= 0, pc, C["unknown"]), cf=0.6)


def no_kernels(w: Windows) -> None:
    """No kernels in the window nor in the context before it (no sample there above
    idle_util_pct, the duty under idle_duty), the host not feeding: idle (held when the job
    still holds its GPUs' memory). A job whose rare bursts recur (one every 20 s, a loader
    far too slow) still runs kernels: quiet_after_work decides."""
    f, th = w.f, w.th
    quiet = (w.dmax < th.idle_duty) & ~(f["ctx_duty"] >= th.idle_duty) & ~f["kernel_recent"]

    def held():
        return (f["mem_last"] >= th.mem_active_mib).any(axis=0) if w.G else np.zeros(w.E, bool)
    w.decide("no_kernels", quiet & ~w.feeding, IDLE,
             c=lambda: np.where(held(), C["held"], -1),
             cf=lambda: clip(0.7 + 0.3 * (th.idle_duty - w.dmax) / th.idle_duty, 0.5, 0.99))


def quiet_after_work(w: Windows) -> None:
    """No kernels now right after work, or rare bursts between long gaps, and no pause: a
    long gap of a starving job."""
    w.decide("quiet_after_work", w.dmax < w.th.idle_duty, DATA_STARVATION,
             c=lambda: w.host.cause(np.full(w.E, -1)), cf=0.6)


def throttle(w: Windows) -> None:
    """Clock-event reasons with the clock really held down; not while every GPU waits for
    input its host cannot supply (a slow clock is not what holds the job back then)."""
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
    w.decide("throttle", (nthr > 0) & ~waiting, THROTTLED, c=tcause,
             s=lambda: np.where((G > 1) & (nthr < G), tgpu, -1),
             cf=lambda: clip(0.6 + 0.4 * share.max(axis=0), 0, 0.95))


def rank_computes(w: Windows) -> None:
    """One rank computes longer (its power rises with its work) while the others wait."""
    if w.G > 1 and w.asym.any():      # (computes only where some window is asymmetric)
        w.decide("rank_computes", w.asym & w.computes, SYNC_STALL,
                 c=C["dataparallel"] if w.shared else C["imbalance"], s=lambda: w.amax,
                 cf=lambda: w.asym_conf)


def rank_host_starved(w: Windows) -> None:
    """The busier GPUs spin while one rank idles, and that rank's own host starves
    (loaders saturated, main process at a core, storage): starvation on it."""
    if w.G > 1 and w.asym.any():
        w.decide("rank_host_starved", w.asym & (w.hs >= 0), DATA_STARVATION,
                 c=lambda: w.host.cause(w.hs), s=w.hs, cf=w.asym_conf)


def stall_over(w: Windows) -> None:
    """The busier GPUs spun while one rank idled, but every GPU has been back at steady work
    (log_steady_duty) for recover_s: that rank's stall is over (a save, a slow batch),
    whatever the window still holds of it."""
    if w.G > 1 and w.asym.any():
        back = w.f["steady_run"] >= w.th.recover_s / w.th.bin_s
        w.decide("stall_over", w.asym & (w.lone_idler >= 0) & ~w.feeding & back, BUSY,
                 cf=0.6)


def rank_host(w: Windows) -> None:
    """The busier GPUs spin while one rank idles, and its host shows no starved input (or
    there are no host counters): the cause is on that rank's host but cannot be told (its
    input, a checkpoint or logging on it)."""
    if w.G > 1 and w.asym.any():
        w.decide("rank_host", w.asym & (w.lone_idler >= 0) & ~w.feeding, SYNC_STALL,
                 c=C["rank_host"], s=w.lone_idler, cf=lambda: np.minimum(w.asym_conf, 0.7))


def duty_low(w: Windows) -> None:
    """Every GPU below duty_starved together (or ranks idling in turn with no rank to name):
    the job waits for input. With host counters that show no cause (loaders not saturated,
    no main process at a core, no iowait), a mild dip is the step's own uploads and
    launches; without host counters, every GPU steady in every second is too (at
    steady_bin_duty or more, or at steady_floor_duty or more and flat to the second)."""
    f, th = w.f, w.th
    if w.G > 1:
        w.decide("duty_low", w.asym, DATA_STARVATION,
                 c=lambda: w.host.cause(np.full(w.E, -1)), cf=lambda: w.asym_conf)
    known = w.known
    limit = np.where(known & ~w.feeding, th.duty_starved_calm_host, th.duty_starved)
    steady = ~known & (f["bins"] >= th.min_samples) & (
        (f["low_bins"] == 0) | ((f["floor_bins"] == 0) & (f["duty_sd"] <= th.steady_duty_sd)))
    starved = (w.jduty < limit) & ~steady & ~w.over
    w.decide("duty_low", starved, DATA_STARVATION, c=lambda: w.host.cause(w.hs),
             s=lambda: w.hs, cf=lambda: clip(0.6 + (th.duty_starved - w.jduty), 0.6, 0.95))


def hang(w: Windows) -> None:
    """Every GPU busy but cold for hang_s, none computing: a collective never completes."""
    w.decide("hang", (w.G > 1) & (w.f["cold_run"] >= w.th.hang_s / w.th.bin_s), SYNC_STALL,
             c=C["hang"], cf=0.8)


def busy_but_cold(w: Windows) -> None:
    """Every GPU reads ~100%, but the others draw a fraction of the hottest one's power, the
    same GPU the hottest in most seconds: they spin while it computes. Without a power limit
    (dmon) the ratio decides alone; power is a 1 s average, so a few seconds of every GPU at
    work are needed to compare."""
    if w.G < 2:
        return
    f, th = w.f, w.th
    pfb, rel = f["power_frac_busy"], f["rel_power"]
    with CALM:
        rel_min = np.where(np.isnan(rel), np.inf, rel).min(axis=0)
    maybe = (rel_min <= th.cold_power_ratio) & (f["all_busy_bins"] >= th.power_min_s / th.bin_s)
    if not maybe.any():        # (no GPU cold in a window long enough to compare)
        return
    ar = np.arange(w.E)
    with CALM:
        # The hottest GPU; without a power limit, by its power relative to the others.
        hot = np.where(np.isnan(pfb).all(axis=0), np.argmax(low_nan(rel), axis=0),
                       np.argmax(low_nan(pfb), axis=0))
        top = pfb[hot, ar]
        has = ~np.isnan(pfb)
        # Mean power of the other GPUs (a median costs 20x more for the same answer).
        med = (np.where(has, pfb, 0.0).sum(axis=0) - N.nan_to_num(top)) / np.maximum(
            has.sum(axis=0) - 1, 1)
        med = np.where(has.sum(axis=0) > 1, med, np.nan)
    gap = top - med
    # The same GPU the hottest whenever another is cold: a straggler, not ranks taking turns.
    same = f["hot_bins"][hot, ar] >= th.straggler_hot_share * f["cold_bins"]
    cold = (maybe & same & ((gap >= th.power_spread) | np.isnan(gap))
            & ~w.over_power)      # (the cold GPU spun during the stall that is over)
    w.decide("busy_but_cold", cold, SYNC_STALL,
             c=C["dataparallel"] if w.shared else C["imbalance"],
             s=hot, cf=lambda: clip(0.55 + N.nan_to_num(gap, nan=0.05), 0.55, 0.95))


def too_short(w: Windows) -> None:
    """Busy so far, but the job's data is shorter than a rule that could overturn busy needs
    (a job's first seconds, a short `gpumon status` sample): every GPU busy at a hang's low
    power since the data began, for less than hang_s; or GPUs whose power could not be
    compared over power_min_s settled seconds (power_need) and was not seen to agree in the
    seconds there are. No verdict yet (insufficient_data), never a confident busy."""
    f, th = w.f, w.th
    need = power_need(th)
    if w.G < 2 or (f["data_run"].min() >= th.hang_s / th.bin_s and f["window"].min() >= need):
        return                  # (a job seen long enough: every live window after its first)
    with CALM:
        rel_min = np.where(np.isnan(f["rel_power"]), np.inf, f["rel_power"]).min(axis=0)
    agree = (f["all_busy_bins"] >= 1) & (rel_min > th.cold_power_ratio)
    short = np.minimum(f["data_run"], f["window"]) < need
    w.decide("too_short", short_hang(f, th) | (short & ~agree), INSUFFICIENT_DATA, cf=0.0)


def busy(w: Windows) -> None:
    """None of the above."""
    w.decide("busy", np.ones(w.E, bool), BUSY,
             cf=lambda: clip(0.6 + 2.0 * (w.jduty - w.th.duty_starved), 0.5, 0.95))


# The rules in the order they are tried.
ORDER = (job_gone, too_few_samples, pause, no_kernels, quiet_after_work, throttle,
         rank_computes, rank_host_starved, stall_over, rank_host, duty_low, hang, busy_but_cold,
         too_short, busy)
RULES = tuple(r.__name__ for r in ORDER)
# Rules whose verdict a live screen takes at once, without the hold (Hysteresis.step's
# ``quick``): a rank idle beside spinning ones is evidence from two signals that agree (its
# duty, their power), and stall_over has waited recover_s of steady work itself.
AT_ONCE = np.array([RULES.index("rank_host"), RULES.index("stall_over")])


def judge(f: dict, shared_process: bool = False, th: Thresholds = DEFAULT) -> dict:
    """Verdict codes (index into VERDICTS), cause codes (index into CAUSE_NAMES or -1),
    straggler rows (or -1), confidence, the deciding rule (index into RULES) and whether the
    host shows starvation, per window. (Windows without power or host counters make all-NaN
    slices: expected, not warnings.)"""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        w = Windows(f, shared_process, th, RULES)
        for rule in ORDER:
            rule(w)
            if w.all_decided:
                break
        out = w.result()
        # ``quick`` as Hysteresis reads it: a starvation verdict the host confirms, or a rule
        # of AT_ONCE (the host's flag alone must not rush a stall past the hold).
        out["quick"] = ((out["quick"] & (out["verdict"] == VERDICTS.index(DATA_STARVATION)))
                        | np.isin(out["rule"], AT_ONCE))
        if f["data_run"].min() * th.bin_s < th.window_s:     # (the job's first seconds)
            out["confidence"] = out["confidence"] * short_factor(f, th)
        return out


def short_factor(f: dict, th: Thresholds) -> np.ndarray:
    """(E,): confidence kept on a window that holds fewer seconds of the job's data than
    window_s: half at none, all at window_s (a verdict from a short sample is never a
    confident one)."""
    have = np.minimum(f["data_run"], f["window"]) * th.bin_s
    return 0.5 + 0.5 * np.minimum(have / th.window_s, 1.0)
