"""Stops seen from both sides, what `gpumon analyze` knows that a live verdict cannot: the
scan of a job's seconds, its dips and the steady work around them, which the rules of
hindsight.py read.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

import numpy as np

from gpumon.diagnosis import CAUSES
from gpumon.detect.seconds import SecondsTable
from gpumon.detect.thresholds import Thresholds, bins

_UNKNOWN = CAUSES.index("unknown")


def runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs [a, b) of True in ``mask``: their starts and ends."""
    e = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return e[::2], e[1::2]


def run_sides(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per bin i: how many True bins start at i, and how many end just before i (their sum
    is the length of the run of True that holds i, 0 where i is False)."""
    T = len(mask)
    idx = np.arange(T)
    # Next False bin at or after i; last False bin before i.
    bad = np.flatnonzero(~mask)
    nxt = np.append(bad, T)[np.searchsorted(bad, idx, side="left")]
    prv = np.insert(bad, 0, -1)[np.searchsorted(bad, idx, side="left")]
    return nxt - idx, idx - prv - 1


def _window_sums(x: np.ndarray, w: int) -> np.ndarray:
    """s[i] = x[i:i + w].sum() for every i with i + w <= len(x) (float64)."""
    c = np.concatenate(([0.0], np.cumsum(x, dtype=np.float64)))
    return c[w:] - c[:-w] if len(x) >= w else np.zeros(0)


def isolates(work: int, dip: int, need: int, times: float = 1.0,
             left: Optional[int] = None) -> bool:
    """Whether ``work`` bins of steady work beside a stop ``dip`` bins long set it apart: at
    least ``need`` bins and ``times`` the stop. After a stop ``left`` bins before the log's
    end, that many are enough: the log ends before it can tell."""
    want = max(need, int(times * dip))
    return work >= (want if left is None else min(want, left))


def two_sided(job) -> np.ndarray:
    """Bins (T,) of a job (a hindsight.Job: its seconds ``table``, their ``sc``, a rank's
    host ``starving`` per bin) that are pauses judged with what followed them. Live, a stop
    after steady work is a pause only while nothing says otherwise (a choppy rhythm, or a
    stop again, ends it: gpumon.detect.pauses); a dip that starts with every GPU stopping
    after context_s of steady work and is followed within idle_after_s by steady work at
    the same level again (_dip) is a pause of a healthy run whatever its inside looked
    like, as starvation does not stop on its own; unless, as live, saturated loader workers
    stood behind the stopped GPUs for longer than loader_startup_s."""
    table, th, sc = job.table, job.th, job.sc
    T = len(table)
    out = np.zeros(T, dtype=bool)
    if sc is None:
        return out
    need = _need(th)          # steady bins before and after a dip
    leads = _leads(sc, need, bins(th.stagger_s))
    has = leads >= 0
    for s, lead in zip(sc.first[has].tolist(), leads[has].tolist()):
        dip = _dip(sc, s, lead, th, need)
        if dip is None:
            continue
        a, e = dip
        if not _stopped(table.duty[:, a:e], table.power, a, e, need, th):
            continue
        if int((job.starving[s:e] & ~sc.good[s:e]).sum()) > bins(th.loader_startup_s):
            continue
        out[a:e] = True
    return out


def not_one_off(job) -> np.ndarray:
    """Bins (T,) of the live tracker's pauses (a hindsight.Job's ``pause``) that a log shows
    were no one-off stop: of cause unknown (nothing on the host explains them) and followed
    by steady work (lone seconds allowed) shorter than the pause itself before the next
    stop, the log not ending first. Such a stop is the next gap of a starving job; a
    checkpoint, validation pass or epoch boundary is followed by more work than it took
    (two_sided's isolation)."""
    pause, sc = job.pause, job.sc
    T = len(pause)
    out = np.zeros(T, dtype=bool)
    if sc is None or not pause.any():
        return out
    unknown = job.why == _UNKNOWN
    for a, e in zip(*(r.tolist() for r in runs(pause))):
        if e < T and unknown[a:e].all() and not isolates(sc.run_after[e], e - a, 0,
                                                          left=T - e):
            out[a:e] = True
    return out


def _need(th: Thresholds) -> int:
    """Bins of steady work wanted before and after a dip (context_s)."""
    return max(2, bins(th.context_s))


def scan(table: SecondsTable, th: Thresholds) -> Optional[SimpleNamespace]:
    """What two_sided and not_one_off read of a job's seconds ``table``: computed once, it
    serves both. None where the job is too short for a dip with steady work on either side
    (both then find none)."""
    T = len(table)
    need = _need(th)
    if T < 2 * need + 1:
        return None
    duty, n, u = table.duty, table.n, table.u
    sc = SimpleNamespace()
    has, good = table.has, table.at_work
    sc.good = good
    with np.errstate(invalid="ignore", divide="ignore"):     # (the job's duty, u over n)
        sc.jd = jd = np.where(has, u / np.where(n > 0, n, 1.0), 0.0)
    # Before a dip, a lone second below steady work with recover_s seconds of work at full
    # speed on each side (a 1 s sample that caught the gap between two steps) is steady work
    # too, up to blips_max of them per context. (Not the first second of a validation pass,
    # whose rhythm after it is slower; not a choppy rhythm's, whose seconds alternate
    # faster.) The same holds for what follows a dip where no context_s of steady work
    # throughout does: a lone second that caught the gap between two steps is not a stop.
    full = good & (jd >= th.duty_starved)      # steady work at full speed
    blip = ~good
    k = min(bins(th.recover_s), T // 2)
    blip[:k] = blip[T - k:] = False
    for j in range(1, k + 1):
        blip[k:T - k] &= full[k - j:T - k - j] & full[k + j:T - k + j]
    at_work = good | blip                       # steady work, lone seconds allowed
    sc.jd_w = jd_w = _window_sums(jd, need)
    # Per GPU: the seconds it sat idle beside the others at work (the table's lone_idle). One
    # rank falling behind is the same one again and again; ranks that run on their own (a
    # validation pass has no all-reduce to line them up) take turns.
    with np.errstate(invalid="ignore"):
        sc.lone_g = table.lone_idle & (duty < th.trickle_duty)
    # More of them where the job's duty over the context still reads as work (a rhythm
    # whose 1 s samples catch the gap every few steps; a starving job's duty is lower), as
    # long as no more than blips_max are one rank idle beside others at work (a rank whose
    # stalls keep coming back).
    many = _window_sums(blip, need) > th.blips_max
    many &= (jd_w < th.duty_starved * need - 1e-9) | (
        _window_sums(blip & table.lone_idle, need) > th.blips_max)
    sc.bad_lone = np.where(many, need, _window_sums(~at_work, need))
    # A dip: a second without steady work (a stop, a validation pass's rhythm, a rank that
    # fell behind for a moment) after one with it.
    drop = ~good
    sc.deep = has & ~table.all_on
    sc.run_after, sc.run_before = run_sides(at_work)
    sc.first = np.flatnonzero(drop[need:] & ~drop[need - 1:-1]) + need
    return sc


def _leads(sc: SimpleNamespace, need: int, lead_in: int) -> np.ndarray:
    """Per possible dip start (``sc.first``): how many bins before it the steady work before
    it ended, the fewest up to ``lead_in``; -1 where none did (no dip starts there). Ranks
    stop one after another: the steady work may end a few seconds before all do. (All at
    once: a starving job has thousands of starts, nearly none of them after steady work.)"""
    s = sc.first
    lead = np.full(len(s), -1)
    for k in range(lead_in, -1, -1):        # (the fewest last, to win)
        i = s - k - need
        lead[(i >= 0) & (sc.bad_lone[np.maximum(i, 0)] == 0)] = k
    return lead


def _dip(sc: SimpleNamespace, s: int, lead: int, th: Thresholds, need: int
         ) -> Optional[tuple[int, int]]:
    """The pause [start, end) whose first non-steady bin is ``s``, its steady work ending
    ``lead`` bins before it (_leads), or None: that work at work_duty or more, a
    return to steady work at that level within idle_after_s (or to the end of the log), and
    the dip isolated (see _isolated)."""
    T = len(sc.good)
    level = sc.jd_w[s - lead - need] / need
    if level < th.work_duty:
        return None
    bar = min(level, th.duty_starved) - th.return_tol     # back at the same level
    pmax = bins(th.idle_after_s)
    hi = min(s + pmax, T - need)
    level_ok = sc.jd_w[s + 1:hi + 1] >= bar * need - 1e-9
    # The return: the first bin from which context_s of work at that level follows, lone
    # seconds allowed as before a dip (a 1 s sample that caught the gap between two steps).
    hit = np.flatnonzero((sc.bad_lone[s + 1:hi + 1] == 0) & level_ok) if hi > s else ()
    at_end = not len(hit)
    if not at_end:
        e = s + 1 + int(hit[0])
    else:
        e = _tail_return(sc.good, sc.jd, s, bar, pmax, need)
        if e is None:
            return None
    isolated = _isolated(sc, s - lead, e, at_end, bins(th.stagger_s), need)
    return (s - lead, e) if isolated else None


def _isolated(sc: SimpleNamespace, a: int, e: int, at_end: bool, lead_in: int,
              need: int) -> bool:
    """Steady work (lone seconds allowed) on either side of the dip [a, e) that isolates it
    (``need`` bins and as long as the dip), and the ranks stopped together: one rank idle
    beside others at work for most of the dip, the same rank throughout, is held up on its
    host (its input, or a checkpoint only it writes, which the live tracker calls a pause
    where the host shows writes)."""
    T = len(sc.good)
    dip = e - a
    lone = int(sc.lone_g[:, a:e].sum(axis=1).max())
    return bool(sc.deep[a:e].any() and isolates(sc.run_after[e], dip, need, left=T - e)
                and isolates(sc.run_before[a], dip, need) and 2 * lone <= dip
                and not (at_end and lone > lead_in))


def _stopped(duty: np.ndarray, power: Optional[np.ndarray], a: int, e: int, need: int,
             th: Thresholds) -> bool:
    """Whether some GPU stopped in the dip [a, e): a second below on_duty at
    stop_power_frac of its power over the need bins before the dip or less (an idle GPU's
    power falls; a 1 s sample at 0% beside busy power caught the gap between two steps).
    A GPU whose power is unknown there counts as stopped in its low seconds. (The table's
    spinning reads the power of the GPUs at work beside a stopped one; this, the stopped
    GPU's own.)"""
    low = duty < th.on_duty
    if power is None:
        return bool(low.any())
    with np.errstate(invalid="ignore"):
        before = power[:, max(0, a - need):a]
        known = (~np.isnan(before)).any(axis=1)
        ctx = np.nanmean(np.where(known[:, None], before, 0.0), axis=1)
        drop = power[:, a:e] <= th.stop_power_frac * ctx[:, None]
    return bool((low & (drop | np.isnan(power[:, a:e]) | ~known[:, None])).any())


def _tail_return(good: np.ndarray, jd: np.ndarray, s: int, bar: float, pmax: int,
                 need: int):
    """The bin at which steady work at ``bar`` or more resumed after the dip starting at
    ``s`` and ran to the end of the log, at least half of context_s (``need``) of it, what
    stands for a context where the log holds no more; None if it did not."""
    tail = need // 2
    T = len(good)
    if T - s >= pmax + need:
        return None     # every return within pmax had need bins after it, and none held
    bad = np.flatnonzero(~good[s:]) + s
    if not len(bad):
        return None
    e = int(bad[-1]) + 1
    if e - s > pmax or T - e < tail or jd[e:].mean() < bar:
        return None
    return e


# recovered()'s marks per bin: the isolated dip itself, the steady work just beside it (its
# windows hold the dip), and the rest of the steady work after it.
DIP, LEAD, AFTER = 1, 2, 3


def one_off_dips(sc: Optional[SimpleNamespace], th: Thresholds,
                 starving: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(a0, b0, a, b) per isolated dip [b0, a) of a job (``sc``: scan() of its bins): steady
    work [a0, b0) before it and [a, b) after it (every GPU at work_duty or more in every
    second, no rank's host ``starving``) that isolates it: each at least context_s long and
    ``isolation`` times as long as the dip (after it, up to the log's end where that comes
    first). Such a dip was a one-off (a rank's slow batch, a short save), where a starving
    job stops again sooner; its windows would hold starvation for up to context_s after it."""
    if sc is None:          # (too short for steady work on either side of a dip)
        return []
    need = _need(th)
    steady = list(zip(*(r.tolist() for r in runs(sc.good & ~starving))))   # steady [a, b)
    return [(a0, b0, a, b) for (a0, b0), (a, b) in zip(steady, steady[1:])
            if isolates(b0 - a0, a - b0, need, th.isolation)
            and isolates(b - a, a - b0, need, th.isolation, left=len(sc.good) - a)]


def recovered(dips: list, T: int, th: Thresholds) -> np.ndarray:
    """Per bin (T,) of a job, from its one_off_dips: DIP in each dip, LEAD in the hold_s of
    work before it (analyze's windows lead by that much) and the first recover_s after it,
    AFTER in the rest of the steady work after it, 0 elsewhere."""
    out = np.zeros(T, dtype=np.int8)
    rb = max(1, bins(th.recover_s))
    hb = max(0, bins(th.hold_s))
    for a0, b0, a, b in dips:
        out[b0 - hb:b0], out[a:a + rb], out[a + rb:b] = LEAD, LEAD, AFTER
        out[b0:a] = DIP
    return out
