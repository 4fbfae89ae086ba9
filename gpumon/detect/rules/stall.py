"""Sync stalls: GPUs of one job wait for each other (a straggler, a rank held up on its host,
a hang), or stopped waiting (stall_over)."""
from __future__ import annotations

import math

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.rules import rule
from gpumon.detect.rules.words import Window, gpu_list, pct, sms
from gpumon.detect.windows import C, Windows, clip, low_nan
from gpumon.diagnosis import BUSY, SYNC_STALL
from gpumon.detect.thresholds import BIN_S


def _rank_computes(x: Window) -> str:
    s, o = x.srow, x.others()
    return (f"GPU {x.gpus[s]} at {pct(x.mean('duty', [s]))} and "
            f"{pct(x.mean('power_frac', [s]))} of its power limit computes while "
            f"{gpu_list([x.gpus[i] for i in o])} at {pct(x.mean('duty', o))} draw "
            f"{pct(x.mean('power_frac', o))}: they wait for it")


@rule(SYNC_STALL, 70, "one GPU busier, and its power rises with its work: it computes",
      _rank_computes, cause="imbalance, dataparallel")
def rank_computes(w: Windows) -> None:
    """One rank computes longer (its power rises with its work) while the others wait."""
    if w.G > 1 and w.asym.any():      # (computes only where some window is asymmetric)
        w.decide(rank_computes, w.asym & w.computes,
                 c=C["dataparallel"] if w.shared else C["imbalance"], s=lambda: w.amax,
                 cf=lambda: w.asym_conf)


def _stall_over(x: Window) -> str:
    duty = x.col("duty")
    i = int(np.nanargmin(np.where(np.isnan(duty), np.inf, duty)))
    secs = int(x.f["steady_run"][x.e])
    return (f"GPU {x.gpus[i]} idled in this window while the others waited for it, but every "
            f"GPU has run at {pct(x.th.work_duty)} or more for the last {secs} s: "
            "its stall is over")


@rule(BUSY, 90, "one GPU idled beside spinning ones, but every GPU has been at "
      "{work_duty:.0%} duty or more for {recover_s:.0f} s (for a second after a stall that "
      "long)", _stall_over,
      shows_at_once=True)      # (it waited recover_s of steady work itself)
def stall_over(w: Windows) -> None:
    """One rank idled beside spinning ones, but every GPU is back at steady work: over."""
    if w.G > 1 and w.asym.any():
        rec = w.th.recover_s / BIN_S
        back = (w.f["steady_run"] >= rec) | ((w.f["steady_run"] >= 1)
                                             & (w.f["stall_bins"] >= rec))
        w.decide(stall_over, w.asym & (w.lone_idler >= 0) & ~w.feeding & back, cf=0.6)


def _rank_host(x: Window) -> str:
    s, o = x.srow, x.others()
    sd, od = x.mean("duty", [s]), x.mean("duty", o)
    pf, watts = x.mean("power_frac_busy", o), x.mean("power_w", o)
    power = sms(x, o) or (f" drawing {pct(pf)} of their power limit" if not math.isnan(pf)
                          else f" drawing {watts:.0f} W" if not math.isnan(watts) else "")
    gs, og = x.gpus[s], gpu_list([x.gpus[i] for i in o])
    host = ("no host counters to tell its input pipeline from checkpointing or logging on it"
            if x.ev.get("loader_cpu_pct") is None and x.ev.get("main_cpu_pct") is None else
            f"its host shows no starved input ({x.host_line()}): a checkpoint, logging or "
            "other host work on that rank")
    return (f"GPU {gs} at {pct(sd)} while {og} at {pct(od)}{power}: they wait in a "
            f"collective for GPU {gs}; {host}")


@rule(SYNC_STALL, 100, "one GPU idles beside spinning ones, its host shows no starved input "
      "(or no host counters)", _rank_host, cause="rank_host",
      shows_at_once=True)      # (two signals agree: its duty, the others' power)
def rank_host(w: Windows) -> None:
    """One rank idles beside spinning ones, its host shows no starved input."""
    if w.G > 1 and w.asym.any():
        w.decide(rank_host, w.asym & (w.lone_idler >= 0) & ~w.feeding, c=C["rank_host"],
                 s=w.lone_idler, cf=lambda: np.minimum(w.asym_conf, 0.7))


def _hang(x: Window) -> str:
    run, th = int(x.f["cold_run"][x.e]), x.th
    if sms(x, range(len(x.gpus))):
        return (f"{gpu_list(x.gpus)} busy ({pct(x.ev.get('duty_cycle'))})"
                f"{sms(x, range(len(x.gpus)))} for {run} s or more, none computing (under "
                f"{pct(th.spin_sm_active)} for {th.hang_s:.0f} s): a collective waiting for "
                "a rank that is not coming")
    return (f"{gpu_list(x.gpus)} busy ({pct(x.ev.get('duty_cycle'))}) at "
            f"{pct(x.ev.get('power_frac_busy'))} of their power limit for {run} s or more, "
            f"none computing (at most {pct(th.spin_power_frac)} for {th.hang_s:.0f} s): "
            "a collective waiting for a rank that is not coming")


@rule(SYNC_STALL, 120, "every GPU busy at {spin_power_frac:.0%} of its power limit or less "
      "(with SM activity: under {spin_sm_active:.0%} of its SMs active) for {hang_s:.0f} s",
      _hang, cause="hang")
def hang(w: Windows) -> None:
    """Every GPU busy but cold for hang_s, none computing: a collective never completes."""
    w.decide(hang, (w.G > 1) & (w.f["cold_run"] >= w.th.hang_s / BIN_S), c=C["hang"],
             cf=0.8)


def _busy_but_cold(x: Window) -> str:
    s = x.srow                  # (busy_but_cold always names the hottest GPU)
    who = f"GPU {x.gpus[s]}"
    if sms(x, x.others()):
        return (f"{gpu_list([x.gpus[i] for i in x.others()])} at "
                f"{pct(x.mean('duty', x.others()))} utilization{sms(x, x.others())} against "
                f"{pct(x.mean('sm_active', [s]))} on {who}: they wait in a collective for {who}")
    hot, cold = (x.f[k][..., x.e] for k in ("hot_bins", "cold_bins"))
    return (f"every GPU busy, but the others draw as little as "
            f"{pct(x.ev.get('rel_power_min'))} of {who}'s power, the hottest in "
            f"{hot[s] * BIN_S:.0f} of the {cold * BIN_S:.0f} s another was cold: "
            "they spin in a collective while it computes")


@rule(SYNC_STALL, 130, "every GPU busy, the others at a fraction of the hottest one's power "
      "(with SM activity: of the most active one's SMs), the same GPU hottest in most seconds",
      _busy_but_cold,
      cause="imbalance, dataparallel")
def busy_but_cold(w: Windows) -> None:
    """Every GPU busy, the others cold beside the same hottest one (by SM activity where
    every GPU has it): they spin while it computes."""
    if w.G < 2:
        return
    f, th = w.f, w.th
    need = th.recover_s / BIN_S
    maybe = w.some_cold(need) & (f["all_busy_bins"] >= need)
    if not maybe.any():        # (no GPU cold in a window long enough to compare)
        return
    hot, gap = _hottest(w)
    gpm = w.gpm
    if gpm.any():      # (by SM activity: the most SMs active, power_spread above the others)
        hot_sm = np.argmax(low_nan(f["sm_active"]), axis=0)
        hot = np.where(gpm, hot_sm, hot)
        gap = np.where(gpm, _above_others(f["sm_active"], hot_sm), gap)
    # The same GPU the hottest whenever another is cold: a straggler, not ranks taking turns.
    same = f["hot_bins"][hot, np.arange(w.E)] >= th.straggler_hot_share * f["cold_bins"]
    cold = (maybe & same & ((gap >= th.power_spread) | np.isnan(gap))
            & ~w.over_power)      # (the cold GPU spun during the stall that is over)
    w.decide(busy_but_cold, cold, c=C["dataparallel"] if w.shared else C["imbalance"],
             s=hot, cf=lambda: clip(0.55 + N.nan_to_num(gap, nan=0.05), 0.55, 0.95))


def _hottest(w: Windows) -> tuple[np.ndarray, np.ndarray]:
    """(E,) each: the hottest GPU's row (without a power limit, by its power relative to the
    others) and how far its power fraction is above the others' mean."""
    pfb = w.f["power_frac_busy"]
    hot = np.where(np.isnan(pfb).all(axis=0), np.argmax(low_nan(w.f["rel_power"]), axis=0),
                   np.argmax(low_nan(pfb), axis=0))
    return hot, _above_others(pfb, hot)


def _above_others(a: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """(E,): how far GPU row ``hot``'s ``a`` (G, E) is above the other GPUs' mean (NaN: fewer
    than two known)."""
    top = a[hot, np.arange(a.shape[1])]
    has = ~np.isnan(a)
    # Mean of the other GPUs (a median costs 20x more for the same answer).
    med = (np.where(has, a, 0.0).sum(axis=0) - N.nan_to_num(top)) / np.maximum(
        has.sum(axis=0) - 1, 1)
    return top - np.where(has.sum(axis=0) > 1, med, np.nan)
