"""Pauses of a healthy run (checkpoint, validation pass, epoch boundary) are not starvation:
``PauseTracker.step`` marks them one completed second at a time, live and offline alike.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional

import numpy as np

from gpumon.diagnosis import CAUSES
from gpumon.detect.seconds import Second, SecondsTable
from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds, bins


class _Host:
    """What the host says of one second, for the tracker (see seconds.SecondsTable)."""

    __slots__ = ("starving", "writing", "present", "main_busy", "workers", "known", "changed",
                 "fresh", "new_work", "explained", "starved_now")

    def __init__(self, sec: Second, tr: "PauseTracker"):
        th, age = tr.th, sec.loader_age
        workers, self.starving, self.writing = sec.workers, sec.starving, sec.writing
        self.present, self.main_busy = sec.present, sec.main_busy
        self.workers = workers
        self.known = known = not math.isnan(workers)
        self.changed = self.fresh = self.new_work = self.explained = False
        self.starved_now = False
        if known:
            self._loader(workers, age, tr, th)

    def _loader(self, workers: float, age: float, tr: "PauseTracker", th: Thresholds) -> None:
        """What the loader workers (known) say of the second."""
        self.changed = tr.workers is not None and workers - tr.workers >= 0.5
        aged = not math.isnan(age) or workers < 0.5    # (no workers: none new)
        since = (tr.length if tr.in_pause else 0) * BIN_S
        self.fresh = aged and age <= since + th.stagger_s
        self.new_work = self.changed or self.writing or self.fresh
        self.explained = self.new_work or self.main_busy
        # Saturated old loaders, nothing else to explain the stop: the input pipeline.
        self.starved_now = aged and self.starving and not self.explained


# Without loader workers a second's view holds only the host's flags: one view of each serves.
_UNKNOWN: dict = {}


def _view(sec: Second, tr: "PauseTracker") -> _Host:
    """_Host(sec, tr), shared among the seconds in which no loader workers are known."""
    if sec.workers == sec.workers:      # (workers known: NaN is the one value unequal to itself)
        return _Host(sec, tr)
    key = (sec.starving, sec.writing, sec.present, sec.main_busy)
    hv = _UNKNOWN.get(key)
    if hv is None:
        hv = _UNKNOWN[key] = _Host(sec, tr)
    return hv


_NONE = range(0)


class PauseTracker:
    """Marks, one second at a time, the seconds of a job that are a pause of healthy work.

    outside  -> paused at a stop, or a new DataLoader, that steady work before it or the host
             explains (``_starts``); ``begin``: the job seen starting, cause "startup".
    paused   -> outside when work is back at the job's level for resume_s (``_back_to_work``),
             after idle_after_s, when the job lets go of its GPUs or one rank holds the others
             up (``_held_up``); "hungry" (``_hungry``): the pause was starvation, its seconds
             are unmarked (``unmark``) and none starts again before ``calm``.
    """

    def __init__(self, th: Thresholds = DEFAULT):
        self.th = th
        self.ctx = max(2, bins(th.context_s))
        self.pmax = bins(th.idle_after_s)
        self.startup = bins(th.loader_startup_s)
        self.resume = max(1, bins(th.resume_s))
        self.back = max(1, bins(th.hold_s))
        self.started = max(self.resume, bins(th.context_s))
        # (n, u, stop) of the last bins with data: (0, 0, True) for a pause's own
        self.hist: deque = deque(maxlen=self.ctx)
        self.recent: deque = deque(maxlen=self.resume)
        self.after: deque = deque(maxlen=self.resume)   # duty since every rank is back
        self.first: deque = deque(maxlen=self.resume)   # duty of a start's last seconds
        self.run = 0              # seconds in a row with GPU work, in a job's start
        self.in_pause = False
        self.length = 0
        self.i = -1                  # bins fed so far - 1
        self.start = 0               # first bin of the current pause
        self.unmark: range = _NONE     # bins of a "pause" just found to be starvation
        self.lead_in: range = _NONE    # the bins before a pause that just started in which
        # its stop had already run (part of the pause: their duty is not the job's work)
        self.gap = -1             # the last bin without data
        self.alone = False        # the last bin had one rank alone at a trickle
        self.workers: Optional[float] = None   # loader workers during steady work
        self.calm = 0             # the first bin a pause may start in (see _inside)
        self.steady = 0           # bins of steady work in a row, outside pauses
        self.on_bins = 0          # bins with every GPU at work since the pause began
        self.extra = False        # more loader workers than steady work had, last bin
        self.starting = False     # the current pause is the job's start (see begin())
        self.worked = True        # the job has run GPU work since it started
        self.reason = "unknown"   # why the current pause (a cause of diagnosis.CAUSES)
        self.bar = th.duty_starved   # duty at which work is back (see _return_bar)

    def step(self, sec: Second) -> bool:
        """Feed one second (a row of the seconds table); True when it is part of a pause."""
        has, idle, alone, lone_idle, n, u = (sec.has, sec.stopped, sec.alone, sec.lone_idle,
                                             sec.n, sec.u)
        self.i += 1
        self.unmark = self.lead_in = _NONE
        hv = _view(sec, self)
        # A rank alone at a trickle counts from its second second in a row.
        alone, self.alone = alone and self.alone, alone and has
        if not has:
            return self._no_data()
        stop = idle or alone or (lone_idle and hv.writing)
        duty = u / n
        if self.in_pause:
            return self._paused(sec, duty, stop, alone, hv)
        if (stop or hv.changed) and self._starts(stop, alone, hv):
            self._start(hv, alone)
            return True
        self._outside(sec, duty, stop, hv)
        return False

    def _paused(self, sec: Second, duty: float, stop: bool, alone: bool, hv: _Host) -> bool:
        """A second with data in a pause: whether it is part of it."""
        self.recent.append(duty if sec.all_on else 0.0)    # (work is back on every GPU)
        if self._held_up(sec.held, hv):
            stop = True
        elif self._inside(duty, sec.stopped, alone, sec.all_on, hv, sec.full):
            self.hist.append((0.0, 0.0, True))
            # Every GPU at warm work at the job's level is work, not while an extra
            # DataLoader is there.
            return not (sec.full >= self.bar and not hv.changed)
        self._outside(sec, duty, stop, hv)
        return False

    def _held_up(self, held: bool, hv: _Host) -> bool:
        """One rank stopped while the others spin (``held``), no checkpoint writes, past a
        start's first hold_s: a rank holding the others up ends the pause."""
        if not held or hv.writing or (self.starting and self.run < self.back):
            return False
        self.in_pause = self.starting = False
        return True

    def _outside(self, sec: Second, duty: float, stop: bool, hv: _Host) -> None:
        """One more second outside a pause: the history a pause is judged against; context_s
        of steady work (the table's at_work) in a row lifts the cooldown (``calm``)."""
        self.hist.append((sec.n, sec.u, stop or not sec.all_on))
        if stop or not sec.at_work:
            self.steady = 0
        else:
            self.steady += 1
            if self.steady >= self.ctx and self.calm > self.i:
                self.calm = self.i
        if hv.known and sec.at_work:
            self.workers = hv.workers              # the loader of steady work

    def _no_data(self) -> bool:
        self.gap = self.i
        if self.in_pause:
            self.length += 1
            if self.length >= self.pmax:
                self.in_pause = self.starting = False
        return self.in_pause

    def _starts(self, stop: bool, alone: bool, hv: _Host) -> bool:
        """Whether a stop, or a new DataLoader appearing (``hv.changed``), starts a pause."""
        if not hv.present or (stop and hv.starved_now):
            return False
        if self.i >= self.calm and self._healthy_context():
            return True
        return stop and (hv.new_work or alone) and self._steady_since_pause()

    def _start(self, hv: _Host, alone: bool) -> None:
        self.in_pause, self.length = True, 1
        self.reason = "unknown"
        self._why(hv.writing or alone, hv.changed, hv.fresh)
        self.steady = 0
        self.bar = self._return_bar()
        self.extra = hv.changed
        self.after.clear()
        self.on_bins = 0
        self.start = self.i
        # The stop's own seconds before this one: with data, below the bar, back to resume_s.
        lead = self.i
        for n, u, _ in reversed(self.hist):
            if lead - 1 <= self.gap or self.i - lead >= self.resume or not n or u / n >= self.bar:
                break
            lead -= 1
        self.lead_in = range(lead, self.i)
        self.recent.clear()
        self.hist.append((0.0, 0.0, True))

    def _inside(self, duty: float, idle: bool, alone: bool, all_on: bool, hv: _Host,
                full: float) -> bool:
        """One more second of the current pause; False when the pause ends with it."""
        self.length += 1
        if self.starting:
            # (Every rank running kernels, none spinning for a rank still coming up.)
            self.run = self.run + 1 if full >= self.th.trickle_duty else 0
            self.first.append(duty)
        self._track_return(duty, alone, all_on, hv)
        hungry = self._hungry(idle, alone, hv)
        if self.length >= self.pmax or hungry or not hv.present:
            self.in_pause = self.starting = False     # too long, or starving: judge it
            if hungry:
                self.unmark = range(self.start, self.i)
                # A job found starving gets no new pause for a while: its long gaps recur.
                self.calm = self.i + int(self.th.isolation * self.ctx)
            return False
        if self._back_to_work(hv):
            self.in_pause = self.starting = False
            return False
        return True

    def _track_return(self, duty: float, alone: bool, all_on: bool, hv: _Host) -> None:
        """What the pause knows of work coming back: the duty since every rank returned
        (``after``), the seconds with every rank at work, and the pause's cause."""
        if self.extra and not hv.changed:
            # The extra DataLoader is gone: training restarts now.
            self.on_bins = 0
            self.after.clear()
        self.extra = hv.changed
        self._why(hv.writing or (alone and not self.starting), hv.changed,
                  hv.fresh and not self.starting)
        if self.on_bins and (not self.starting or self.run > self.back):
            self.after.append(duty)
        if all_on:
            self.on_bins += 1
        self.worked = self.worked or duty >= self.th.trickle_duty

    def _back_to_work(self, hv: _Host) -> bool:
        """Steady work for resume_s at the job's level on every GPU, the pause's extra
        DataLoader gone."""
        return (len(self.recent) == self.resume and not hv.changed
                and sum(self.recent) / self.resume >= self.bar)

    def _hungry(self, idle: bool, alone: bool, hv: _Host) -> bool:
        """The pause is starvation after all, nothing explaining it: work back at a starved
        rhythm, every GPU stopped again after every rank was back for hold_s, or saturated
        old loaders behind the stop; never before the job's first GPU work."""
        if alone or not self.worked or self._explained(hv):
            return False
        if idle and (self.on_bins >= self.back or hv.starved_now):
            return True
        if idle and hv.starving and self.length > self.startup:
            return True
        return self._slow(hv) or self._running_slow()

    def _running_slow(self) -> bool:
        """A start with every rank at work for context_s, its last resume_s below the bar."""
        return (self.starting and self.run >= self.started
                and sum(self.first) / self.resume < self.bar)

    def _explained(self, hv: _Host) -> bool:
        """The host explains the stop; new workers only while they start up (at most
        loader_startup_s) and before every rank is back at work."""
        if self.starting or self.length > self.startup or self.after:
            return hv.known and (hv.changed or hv.writing or hv.main_busy)
        return hv.explained

    def _slow(self, hv: _Host) -> bool:
        """Every rank back, below the bar since (``after``): one second of it where the host
        starves the job, else (and in a start) resume_s."""
        need = 1 if hv.starving and not self.starting else self.resume
        if not (hv.known or self.starting) or len(self.after) < need:
            return False
        return sum(self.after) / len(self.after) < self.bar

    def _why(self, saving: bool, changed: bool, fresh: bool) -> None:
        """The pause's cause, most specific first: checkpoint (writes, or one rank alone at a
        trickle), validation (more loader workers), epoch_boundary (new loader workers)."""
        if saving:
            self.reason = "checkpoint"
        elif changed and self.reason != "checkpoint":
            self.reason = "validation"
        elif fresh and self.reason == "unknown":
            self.reason = "epoch_boundary"

    def begin(self) -> None:
        """The job starts now: a pause ("startup") until work runs steady."""
        self.in_pause, self.starting, self.length = True, True, 0
        self.alone = False
        self.reason = "startup"
        self.bar = self.th.duty_starved
        self.start = self.i + 1
        self.after.clear()
        self.recent.clear()
        self.first.clear()
        self.on_bins = self.run = 0
        self.worked = False

    def _return_bar(self) -> float:
        """Duty at which work is back: duty_starved, or the job's level before the pause
        less return_tol where that is lower."""
        level = _level([e for e in self.hist if not e[2]])
        return min(self.th.duty_starved, (1.0 if math.isnan(level) else level)
                   - self.th.return_tol)

    def _steady_since_pause(self) -> bool:
        """Work before this stop (its own seconds skipped) and since the last stop ran at
        work_duty for resume_s."""
        recent = []
        h = list(self.hist)
        k = len(h)
        while k and h[k - 1][2] and h[k - 1][0] > 0:     # (a pause's own bins have n = 0)
            k -= 1
        for e in reversed(h[:k]):
            if e[2]:
                break
            recent.append(e)
        return len(recent) >= self.resume and _level(recent) >= self.th.work_duty

    def _healthy_context(self) -> bool:
        """context_s of history (half of it at least: what stands for a context where no
        more is known) with no stop in it, at work_duty."""
        h = self.hist
        return (len(h) >= self.ctx // 2 and not any(e[2] for e in h)
                and _level(h) >= self.th.work_duty)


def _level(entries) -> float:
    """The job's duty over entries (n, u, stop) of PauseTracker.hist (NaN: no samples)."""
    sn = sum(e[0] for e in entries)
    return sum(e[1] for e in entries) / sn if sn > 0 else math.nan


class PauseMarks:
    """What the pause tracker marked, per absolute bin, as it knew it at that bin: ``pause``
    (the verdict there is busy), ``excl`` (left out of the windows: a pause later found to
    be starvation is taken back in, a stop's lead-in left out) and ``why`` (the pause's
    cause, a diagnosis.CAUSES index; -1 outside pauses). One driver of the tracker: the live
    detector feeds it a few seconds a tick, a log all of its seconds at once."""

    def __init__(self, th: Thresholds = DEFAULT):
        self.tr = PauseTracker(th)
        self.lo = 0                                # absolute bin of the arrays' index 0
        self.pause = np.zeros(0, bool)
        self.excl = np.zeros(0, bool)
        self.why = np.zeros(0, np.int64)

    def feed(self, table: SecondsTable, first: int, begin: frozenset = frozenset()) -> None:
        """Step the tracker over the seconds of ``table``, the first of them absolute bin
        ``first``; ``begin``: the table's seconds at which the job is seen starting."""
        tr, n = self.tr, len(table)
        if not len(self.pause):
            self.lo = first                        # (nothing before the first fed bin)
        self._grow(first + n)
        at = first - self.lo - tr.i - 1          # array index - tracker index
        paused, causes, marks = [], [], []
        for k, sec in enumerate(table.rows()):
            if k in begin:
                tr.begin()
            if tr.step(sec):
                paused.append(k)
                causes.append(CAUSES.index(tr.reason))
            if tr.unmark or tr.lead_in:
                marks.append((tr.unmark, tr.lead_in))
        k0 = first - self.lo
        self.pause[k0:k0 + n] = self.excl[k0:k0 + n] = False
        self.why[k0:k0 + n] = -1
        idx = np.asarray(paused, np.int64) + k0
        self.pause[idx] = self.excl[idx] = True
        self.why[idx] = causes
        for unmark, lead_in in marks:       # (each only reaches bins before its own)
            self.excl[max(unmark.start + at, 0):max(unmark.stop + at, 0)] = False
            self.excl[max(lead_in.start + at, 0):max(lead_in.stop + at, 0)] = True

    def _grow(self, end: int) -> None:
        extra = end - self.lo - len(self.pause)
        if extra > 0:
            self.pause = np.concatenate((self.pause, np.zeros(extra, bool)))
            self.excl = np.concatenate((self.excl, np.zeros(extra, bool)))
            self.why = np.concatenate((self.why, np.full(extra, -1, np.int64)))

    def arrays(self, base: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pause, excl, why) over absolute bins base..end-1 (bins never fed: none); the
        bins before ``base`` are forgotten."""
        if base > self.lo:
            k = base - self.lo
            self.pause, self.excl, self.why = self.pause[k:], self.excl[k:], self.why[k:]
            self.lo = base
        self._grow(end)
        pad = self.lo - base
        a, b = max(base - self.lo, 0), end - self.lo
        out = (self.pause[a:b], self.excl[a:b], self.why[a:b])
        if pad <= 0:
            return out
        return tuple(np.concatenate((np.full(pad, f, x.dtype), x))
                     for f, x in zip((False, False, -1), out))


def pause_flags(table: SecondsTable, th: Thresholds = DEFAULT,
                starts: Optional[np.ndarray] = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pause, excluded, why) per bin of a job from its seconds table, each as the live
    tracker knew it at that bin (PauseMarks). ``starts``: bins at which the job is seen
    starting (PauseTracker.begin), as live."""
    m = PauseMarks(th)
    m.feed(table, 0, frozenset() if starts is None else
           frozenset(np.flatnonzero(starts).tolist()))
    return m.pause, m.excl, m.why
