"""Hindsight: what only a whole log allows, as an ordered list of named rules.

A live verdict judges the window that ends now; a log also holds what came after. Each rule
below may relabel a job's seconds in one way, in this order: ``pause`` rules set or clear
pause flags or their causes (before the windows are judged, so the windows leave those
seconds out or take them in), the ``window`` rule picks which window a second reads,
``verdict`` rules relabel the rules' verdicts. Nothing else in `gpumon analyze` changes a
verdict, a pause flag or its cause. A segment whose windows never gave its verdict, and
whose seconds a rule giving that verdict relabelled, records that rule: its name and its
reason, built from the numbers it used and the caller's thresholds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from gpumon.diagnosis import CAUSES, PAUSED, VERDICTS
from gpumon.analyze.pauses import (AFTER, DIP, LEAD, not_one_off, one_off_dips, recovered,
                                   run_sides, runs, scan, two_sided)
from gpumon.detect import LogJob
from gpumon.detect.seconds import SecondsTable
from gpumon.detect.thresholds import BIN_S, Thresholds, bins

_STARVED = VERDICTS.index("data_starvation")
_BUSY = VERDICTS.index("busy")
_STALL = VERDICTS.index("sync_stall")
_PAUSED = VERDICTS.index(PAUSED)
_RANK_HOST = CAUSES.index("rank_host")
_UNKNOWN = CAUSES.index("unknown")


@dataclass(kw_only=True)
class Job(LogJob):
    """One job's seconds (a detector LogJob) with what hindsight reads besides: ``sc``:
    pauses.scan of its seconds; ``starving``: a rank's host starving where its loader
    workers are known; ``dips``: pauses.one_off_dips; ``rec``: pauses.recovered's marks of
    them; ``marks``: per rule, the seconds it relabelled."""
    sc: object
    starving: np.ndarray
    dips: list
    rec: np.ndarray
    marks: dict = field(default_factory=dict)

    @property
    def level(self) -> np.ndarray:
        """Per second, the least duty of the job's GPUs (the table's ``full``: warm work on
        every GPU), -inf where one has no data. A pause is over where it stays at busy_duty
        for recover_s (back at full speed); a stall on one rank's host where it stays at
        work_duty (the rank back at steady work)."""
        t = self.table
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(t.duty).any(axis=0), -np.inf, t.full)


def make(th: Thresholds, g: np.ndarray, table: SecondsTable, pause: np.ndarray,
         excl: np.ndarray, why: np.ndarray) -> Job:
    """The detector's LogJob of one job (its bins ``g``, its seconds ``table``, its pause
    flags) with what hindsight reads (the Detector calls this, then ``apply``)."""
    # (A rank's host starving where its loader workers are known.)
    starving = table.starving & ~np.isnan(table.workers)
    sc = scan(table, th)
    dips = one_off_dips(sc, th, starving)
    return Job(th=th, g=g, table=table, pause=pause, excl=excl, why=why, sc=sc,
               starving=starving, dips=dips, rec=recovered(dips, len(table), th))


@dataclass(frozen=True)
class Hindsight:
    """One hindsight rule: ``relabels`` "pause", "window" or "verdict"; ``gives`` the verdict
    its seconds then read (a VERDICTS index; None: their windows say); ``when`` the bins it
    relabels; ``apply`` relabels them; ``reason`` (job, a, b, d) says why for the bins [a, b)
    of a segment whose middle window is ``d``."""
    name: str
    relabels: str
    gives: Optional[int]
    when: Callable[[Job], np.ndarray]
    apply: Callable[[Job, np.ndarray], None]
    reason: Callable[[Job, int, int, object], str]


def _secs(k: int) -> str:
    """``k`` bins in words."""
    return f"{k * BIN_S:.0f} s"


def _after(job: Job, b: int) -> str:
    """The steady work (lone seconds allowed: pauses.scan) from bin ``b`` on, in words."""
    return _secs(int(job.sc.run_after[b]) if b < len(job.table) else 0)


def _back_at(job: Job, duty: float) -> np.ndarray:
    """The seconds in a run of recover_s or more in which every GPU is at ``duty`` or more
    (Job.level): back at work."""
    m = job.level >= duty
    after, before = run_sides(m)
    return m & (after + before >= job.th.recover_s / BIN_S)


def _read(d) -> str:
    """What the windows of a segment read (``d``: its middle window)."""
    return f"its windows read {d.verdict} (rule {d.rule})"


def _dip_at(job: Job, i: int) -> str:
    """The one-off dip (pauses.one_off_dips) whose marks hold bin ``i``, in words: its
    length, the steady work on either side and what that had to be at least."""
    th = job.th
    hb = bins(th.hold_s)
    a0, b0, a, b = next(d for d in reversed(job.dips) if d[1] - hb <= i < d[3])
    return (f"{_secs(a - b0)} stop ({_secs(b0 - a0)} of steady work before it, "
            f"{_secs(b - a)} after it; {th.context_s:.0f} s and {th.isolation:.0f} "
            "times the stop or more on either side)")


# --- pause flags ------------------------------------------------------------------------


def _final(job: Job) -> np.ndarray:
    """Per second, the cause its pause (its run of paused seconds) had at its last second."""
    a, b = runs(job.pause)
    last = np.repeat(b - 1, b - a)
    out = np.full(len(job.why), -1, dtype=job.why.dtype)
    out[job.pause] = job.why[last]
    return out


def _final_cause(job: Job) -> np.ndarray:
    return job.pause & (job.why != _final(job))


def _set_final(job: Job, m: np.ndarray) -> None:
    job.why = np.where(m, _final(job), job.why)


def _why_final_cause(job: Job, a: int, b: int, d) -> str:
    return (f"a log holds the whole {_secs(b - a)} pause: what it turned out to be "
            "names each of its seconds")


def _starved_stop(job: Job) -> np.ndarray:
    return job.pause & ~job.excl


def _clear(job: Job, m: np.ndarray) -> None:
    job.pause, job.excl = job.pause & ~m, job.excl & ~m


def _why_starved_stop(job: Job, a: int, b: int, d) -> str:
    return (f"the pause tracker found this {_secs(b - a)} stop to be starvation (it came "
            "again, or work came back at a starved rhythm): a log knows it from its first "
            "second, so no second of it is a pause")


def _why_not_one_off(job: Job, a: int, b: int, d) -> str:
    return (f"nothing on the host explains this {_secs(b - a)} stop and only "
            f"{_after(job, b)} of steady work (at {job.th.work_duty:.0%} or more) "
            "followed it before the next: the next gap of a starving job, not a pause")


def _mark_pause(job: Job, m: np.ndarray) -> None:
    job.why = np.where(m & (job.why < 0), _UNKNOWN, job.why)
    job.pause, job.excl = job.pause | m, job.excl | m


def _why_two_sided(job: Job, a: int, b: int, d) -> str:
    th = job.th
    return (f"the log shows steady work on either side of this {_secs(b - a)} stop "
            f"({_secs(int(job.sc.run_before[a]))} before, {_after(job, b)} after; at least "
            f"{th.context_s:.0f} s and as long as the stop), back at the level before within "
            f"{th.idle_after_s:.0f} s: a pause of healthy work, not starvation, which does "
            "not stop on its own")


# --- the window ---------------------------------------------------------------------------


def hindsight_lead(r: dict, flags: list, k: int) -> dict:
    """Each second's rule output is that of the window ending ``k`` bins after it. A window
    that ends at a second sees only the seconds before it, so a new regime shows once it
    fills enough of the window; a log also holds the seconds that follow, and the window
    ending a little later sees it sooner. A second keeps its own window where that later
    window lies past a change of the per-second ``flags`` (a pause starting or ending, the
    job leaving its GPUs) or past the log's end, or where either window reads ``paused``:
    those flags are per second, not windowed. ``r``: the rules' output per bin (on its last
    axis)."""
    n = len(r["verdict"])
    if k <= 0 or n == 0:
        return r
    state = np.zeros(n, np.int64)
    for i, f in enumerate(flags):
        state |= f.astype(np.int64) << i
    run_end = np.append(np.flatnonzero(state[1:] != state[:-1]) + 1, n)
    last = run_end[np.searchsorted(run_end, np.arange(n), side="right")] - 1
    own = np.arange(n)
    src = own + k
    keep = src > last                   # (the log's last k seconds too: no run goes past it)
    src = np.where(keep, own, src)
    v = r["verdict"]
    keep |= (v == _PAUSED) | (v[src] == _PAUSED) | r["quick"][src]
    src = np.where(keep, own, src)
    return {key: (a[..., src] if np.ndim(a) and np.shape(a)[-1] == n else a)
            for key, a in r.items()}


def _lead_when(job: Job) -> np.ndarray:
    return np.ones(len(job.table), bool)        # (hindsight_lead says which seconds lead)


def _lead(job: Job, m: np.ndarray) -> None:
    # (The lead: hold_s, as a live verdict lags its window by the hold and a segment's
    # evidence is read that far into it.)
    job.r = hindsight_lead(job.r, [job.pause, job.excl], bins(job.th.hold_s))
    job.v, job.c, job.s = job.r["verdict"], job.r["cause"], job.r["straggler"]


def _why_lead(job: Job, a: int, b: int, d) -> str:
    return (f"each second reads the window ending {job.th.hold_s:.0f} s after it (the lag of "
            "a live verdict), not past a pause's edge")


# --- verdicts -----------------------------------------------------------------------------


def _relabel(verdict: int, cause: int) -> Callable[[Job, np.ndarray], None]:
    def apply(job: Job, m: np.ndarray) -> None:
        job.v, job.c, job.s = (np.where(m, verdict, job.v), np.where(m, cause, job.c),
                               np.where(m, -1, job.s))
    return apply


def _stall_on_host(job: Job) -> np.ndarray:
    return (job.v == _STALL) & (job.c == _RANK_HOST)


def _over(job: Job) -> np.ndarray:
    after, lead = job.rec == AFTER, job.rec == LEAD
    return (after & ((job.v == _STARVED) | _stall_on_host(job))) | (lead & (job.v == _STARVED))


def _why_over(job: Job, a: int, b: int, d) -> str:
    return (f"{_read(d)}, which hold a one-off stop: the log shows steady work on either "
            f"side of that {_dip_at(job, a)}: over")


def _back(job: Job) -> np.ndarray:
    return _stall_on_host(job) & _back_at(job, job.th.work_duty)


def _why_back(job: Job, a: int, b: int, d) -> str:
    th = job.th
    after, before = run_sides(job.level >= th.work_duty)
    low = float(job.level[a:b][job.marks["back"][a:b]].min())
    return (f"{_read(d)}, which still hold the stall, but every GPU is back at steady "
            f"work, {low:.0%} or more (at least {th.work_duty:.0%}), for "
            f"{_secs(after[a] + before[a])} ({th.recover_s:.0f} s or more): the rank is back "
            "at work")


def _one_off(job: Job) -> np.ndarray:
    return (job.rec == DIP) & (job.v == _STARVED)


def _why_one_off(job: Job, a: int, b: int, d) -> str:
    return (f"{_read(d)}, but the log shows steady work on either side of this "
            f"{_dip_at(job, a)}: a one-off stop, not a starved rhythm")


HINDSIGHT: tuple[Hindsight, ...] = (
    Hindsight("final_cause", "pause", None, _final_cause, _set_final, _why_final_cause),
    Hindsight("starved_stop", "pause", None, _starved_stop, _clear, _why_starved_stop),
    Hindsight("not_one_off", "pause", None, not_one_off, _clear, _why_not_one_off),
    Hindsight("two_sided", "pause", _PAUSED, two_sided, _mark_pause, _why_two_sided),
    Hindsight("lead", "window", None, _lead_when, _lead, _why_lead),
    Hindsight("over", "verdict", _BUSY, _over, _relabel(_BUSY, -1), _why_over),
    Hindsight("back", "verdict", _BUSY, _back, _relabel(_BUSY, -1), _why_back),
    Hindsight("one_off", "verdict", _PAUSED, _one_off, _relabel(_PAUSED, _UNKNOWN),
              _why_one_off),
)
BY_NAME = {h.name: h for h in HINDSIGHT}


def apply(job: Job, stage: str) -> Job:
    """The rules of ``stage`` ("pause", "window" or "verdict"), in order, on ``job``."""
    for h in HINDSIGHT:
        if h.relabels == stage:
            m = h.when(job)
            job.marks[h.name] = m
            if m.any():
                h.apply(job, m)
    return job


def relabelled(job: Job, a: int, b: int, verdict: int) -> Optional[tuple[str, int, int]]:
    """The hindsight rule that gave ``verdict`` to the most of the bins [a, b), with the run
    of its bins there: (name, start, end); None if none did."""
    best = None
    for h in HINDSIGHT:
        m = job.marks.get(h.name)
        if h.gives != verdict or m is None:
            continue
        hit = np.flatnonzero(m[a:b])
        if len(hit) and (best is None or len(hit) > best[0]):
            best = (len(hit), h.name, a + int(hit[0]), a + int(hit[-1]) + 1)
    return None if best is None else best[1:]
