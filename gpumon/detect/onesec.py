"""One second of a job, in plain Python: what the pause tracker reads of it.

The live detector completes one second per tick (at the default 1 s interval) and feeds it
to its job's PauseTracker. ``pauses.Seconds``, ``pauses.host_bins`` and
``cold.cold_seconds`` compute the same inputs with numpy over many seconds (a log); on one
second numpy's fixed cost per call is most of theirs. These give the same values (the same
float operations and comparisons, NaN where they have NaN) from the second's column of the
bins, as Python numbers. tests/test_detect_onesec.py holds them equal on random bins.
"""
from __future__ import annotations

import math

from gpumon.detect.bins import GI, HI
from gpumon.detect.pauses import storage_bound
from gpumon.detect.thresholds import Thresholds

NAN = math.nan


def _div(a: float, b: float) -> float:
    """nanops.div on numbers: a / b where b > 0, else NaN."""
    return a / b if b > 0 else NAN


def _rows(col: list, num: str, den: str) -> list:
    """Per GPU, field ``num`` over field ``den`` of a second's bins (``col``: bins.GPU_FIELDS
    x GPUs, as lists)."""
    return [a / b if b > 0 else NAN for a, b in zip(col[GI[num]], col[GI[den]])]


def gap_second(col: list, th: Thresholds) -> bool:
    """pauses.gap_stops of one second (``col``: bins.GPU_FIELDS x GPUs, as lists)."""
    return bool(col[GI["n"]]) and all(
        n >= th.stop_gap_samples and gn > 0 and gs >= th.stop_gap_s * gn
        for n, gn, gs in zip(col[GI["n"]], col[GI["gapn"]], col[GI["gaps"]]))


def second_at(duty: list, n: float, u: float, th: Thresholds, cold: bool,
              gap: bool = False, spin: bool = False) -> tuple:
    """pauses.Seconds(...).at(i) of one second: per-GPU ``duty`` (NaN: no data), the job's
    sample count ``n`` and busy sum ``u``, ``cold`` (cold_second), ``gap`` (gap_second),
    ``spin`` (cold.spin_seconds)."""
    nk, low, stopped, trickle, on, floor = _tally(duty, th)
    G = len(duty)
    lone = nk > 1 and stopped == 1 and on == nk - 1
    return (nk > 0 and n > 0, (stopped == G or gap) and nk == G,
            nk > 1 and low == nk - 1 and trickle == 1, lone, on == nk,
            floor if nk > 0 and not cold else 0.0, float(n), float(u), lone and spin)


def _tally(duty: list, th: Thresholds) -> tuple:
    """Over the GPUs with data (duty not NaN): how many, how many below idle_duty, below
    trickle_duty, below trickle_duty but not idle_duty, at all_on_duty or more, and the least
    duty (1.0 where none: Seconds.full)."""
    nk = low = stopped = trickle = on = 0
    floor = 1.0
    for d in duty:
        if d != d:
            continue
        lo, st = d < th.idle_duty, d < th.trickle_duty
        nk += 1
        low += lo
        stopped += st
        trickle += st and not lo
        on += d >= th.all_on_duty
        floor = d if d < floor else floor
    return nk, low, stopped, trickle, on, floor


def all_busy(col: list, th: Thresholds) -> bool:
    """cold.settled's reading of one second: every GPU at busy_bin_duty or more with its
    power known (no GPU: False)."""
    duty, pw = _rows(col, "u", "n"), _rows(col, "pw", "pn")
    return bool(duty) and all(d >= th.busy_bin_duty and p == p for d, p in zip(duty, pw))


def cold_second(col: list, th: Thresholds) -> bool:
    """cold.cold_seconds' comparison on one second: some GPU busy but cold (whether the
    second is settled is the caller's: all_busy over it and the seconds before)."""
    duty = _rows(col, "u", "n")
    pw = [p if d >= th.busy_bin_duty else NAN for d, p in zip(duty, _rows(col, "pw", "pn"))]
    known = [p == p for p in pw]
    if sum(known) < 2:
        return False
    ranked = [p if k else -math.inf for p, k in zip(pw, known)]
    hot = ranked.index(max(ranked))          # (np.argmax: the first of equal maxima)
    top = pw[hot]
    if not top > 0:
        return False
    frac = [p / (lim if lim > 0 else NAN) for p, lim in zip(pw, _rows(col, "pl", "pln"))]
    for p, k, fr in zip(pw, known, frac):
        gap = frac[hot] - fr
        if k and p <= th.cold_power_ratio * top and (gap != gap or gap >= th.power_spread):
            return True
    return False


def _ranks(col: list, th: Thresholds) -> tuple:
    """(starving, main_busy) of host_bins over a second's ranks: some rank's loaders
    saturated or its main process at a core without loaders; some rank's main process at a
    core beside its loaders."""
    wk, ld, lb = _rows(col, "wk", "wkn"), _rows(col, "ld", "ldn"), _rows(col, "lb", "lbn")
    # np.fmax(main CPU, its busiest thread): NaN only where both are.
    main = [b if a != a else a if b != b or a >= b else b
            for a, b in zip(_rows(col, "mc", "mcn"), _rows(col, "mt", "mtn"))]
    starving = main_busy = False
    share, core = th.loader_busy_share, th.core_busy_pct
    for w, cpu, busy, m in zip(wk, ld, lb, main):
        per = w if w != w or w >= 1 else 1      # np.maximum(w, 1): NaN stays NaN
        if w >= 0.5:
            starving = starving or cpu / (100 * per) >= share or busy / per >= share
            main_busy = main_busy or m >= core
        elif w < 0.5:
            starving = starving or m >= core
    return starving, main_busy


def _present(col: list, th: Thresholds) -> bool:
    """host_bins' ``present``: no GPU without its processes or memory, where known."""
    gone = [(p == p and p <= 0) or (m == m and m < th.mem_active_mib) for p, m in
            zip(_rows(col, "pid", "pidn"), _rows(col, "mem", "memn"))]
    return not any(gone)


def host_second(col: list, hcol: list, th: Thresholds) -> tuple:
    """pauses.host_bins of one second: (workers, starving, writing, present, age,
    main_busy); ``hcol``: the second's host bins (bins.HOST_FIELDS, as a list)."""
    starving, main_busy = _ranks(col, th)
    io, rd, wr = [_div(hcol[HI[a]], hcol[HI[b]]) for a, b in
                  (("io", "ion"), ("rd", "rdn"), ("wr", "wrn"))]
    wk = _rows(col, "wk", "wkn")
    known = [w for w in wk if w == w]
    workers = max([w if w == w else -1 for w in wk]) if known else NAN
    ages = [a for a in _rows(col, "age", "agen") if a == a]
    return (float(workers), bool(starving or storage_bound(io, rd, th)),
            wr >= th.ckpt_write_mbps, _present(col, th), min(ages) if ages else NAN, main_busy)
