"""Pauses of a healthy run (checkpoint, validation pass, epoch boundary) are not starvation.

A pause starts when (almost) every GPU of a job stops after a stretch of steady work: the
``context_s`` before it was busy (duty >= duty_starved) and had no such stop. It lasts while
the job is not healthy again (a checkpoint's idle seconds, a validation pass's different
rhythm, new loader workers starting), at most ``pause_max_s``; work is back at duty_starved,
or at the job's own level before the pause where that is lower. Starvation stops the GPUs
again and again: a second all-idle stretch after work resumed ends the "pause" at once, so a
starving job is called starving one cycle later than it would be otherwise.

``PauseTracker.step`` is fed one completed second at a time, live and offline alike, so both
mark the same seconds.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional

import numpy as np

from gpumon.detect import nanops as N
from gpumon.diagnosis import CAUSES
from gpumon.detect.bins import GI, HI

from gpumon.detect.thresholds import DEFAULT, Thresholds



class PauseTracker:
    def __init__(self, th: Thresholds = DEFAULT):
        self.th = th
        self.ctx = max(2, int(round(th.context_s / th.bin_s)))
        self.pmax = int(round(th.pause_max_s / th.bin_s))
        self.startup = int(round(th.loader_startup_s / th.bin_s))
        self.resume = max(1, int(round(th.resume_s / th.bin_s)))
        self.back = max(1, int(round(th.back_s / th.bin_s)))
        self.hist: deque = deque(maxlen=self.ctx)   # (n, u, stop) of bins outside pauses
        self.recent: deque = deque(maxlen=self.resume)
        self.after: deque = deque(maxlen=self.resume)   # duty since work resumed in a pause
        self.in_pause = False
        self.length = 0
        self.resumed = False
        self.i = -1                  # bins fed so far - 1
        self.start = 0               # first bin of the current pause
        self.unmark: range = range(0)   # bins of a "pause" just found to be starvation
        self.workers: Optional[float] = None   # loader workers during steady work
        self.cooldown = 0
        self.steady = 0           # bins of steady work in a row, outside pauses
        self.on_bins = 0          # bins with every GPU at work since the pause began
        self.extra = False        # more loader workers than steady work had, last bin
        self.starting = False     # the current pause is the job's start (see begin())
        self.reason = "unknown"   # why the current pause (a cause of diagnosis.CAUSES)
        self.bar = th.duty_starved   # duty at which work is back (see _return_bar)

    def step(self, duties: np.ndarray, n: float, u: float,
             host: Optional[tuple] = None) -> bool:
        """Feed one bin: per-GPU duty (NaN without data), job sample count and busy sum, and
        the host's view of it (see ``host_bins``). True when this bin is part of a pause."""
        have = ~np.isnan(duties)
        G = int(have.sum())
        all_idle = G > 0 and bool((duties[have] < self.th.idle_duty).all())
        all_on = G > 0 and bool((duties[have] >= self.th.all_on_duty).all())
        low = duties[have] < self.th.idle_duty
        lone_idle = G > 1 and int(low.sum()) == 1 and bool((duties[have][~low]
                                                           >= self.th.all_on_duty).all())
        return self.step_bin(G > 0 and n > 0, all_idle, n, u, host, all_on, lone_idle)

    def step_bin(self, has_data: bool, all_idle: bool, n: float, u: float,
                 host: Optional[tuple] = None, all_on: bool = True,
                 lone_idle: bool = False) -> bool:
        """step() with the bin already reduced: any data, every GPU idle, n and u sums,
        every GPU working at least all_on_duty, one GPU idle beside others at work."""
        th = self.th
        self.i += 1
        self.cooldown -= 1
        workers, starving, writing, present, age, main_busy = host if host is not None else (
            math.nan, False, False, True, math.nan, False)
        known = not math.isnan(workers)
        # What the host says explains a stop: more loader workers than in steady work (a
        # validation DataLoader), workers started when the GPUs stopped (any new DataLoader,
        # also an epoch boundary's), checkpoint-size disk writes, or a main process busy with
        # something other than waiting for batches (saving, evaluating).
        changed = known and self.workers is not None and workers - self.workers >= 0.5
        aged = known and (not math.isnan(age) or workers < 0.5)   # (no workers: none new)
        fresh = aged and age <= (self.length if self.in_pause else 0) * th.bin_s + th.fresh_slack_s
        explained = known and (changed or writing or fresh or main_busy)
        # A new DataLoader or a checkpoint being written: a stop that is a pause even soon
        # after the last one (a job with slow loader start-up pauses at every epoch end).
        new_work = known and (changed or writing or fresh)
        # Saturated loaders that are not new, behind GPUs that all stopped, with nothing else
        # to explain it: the input pipeline cannot keep up. Not a pause, from its first second.
        # (Without worker ages, new workers at an epoch boundary look the same for up to
        # loader_startup_s, so only a longer stop says so.)
        starved_now = aged and starving and not explained
        self.unmark = range(0)
        if not has_data:
            if self.in_pause:
                self.length += 1
                if self.length >= self.pmax:
                    self.in_pause = self.starting = False
            return self.in_pause
        # A stop: every GPU idle, or one rank idle while the others wait for it and the host
        # writes at checkpoint rate (rank 0 alone saving, the others in the next all-reduce).
        stop = all_idle or (lone_idle and writing)
        duty = u / n
        self.recent.append(duty)
        if self.in_pause:
            self.length += 1
            if self.extra and not changed:
                # The extra DataLoader (a validation pass's) is gone: training restarts now,
                # its ramp-up is not a starved rhythm.
                self.resumed, self.on_bins = False, 0
                self.after.clear()
            self.extra = changed
            self._why(writing, changed, fresh and not self.starting)
            if self.resumed and (all_on or self.after):
                self.after.append(duty)     # counted from when every rank is back
            # Work came back at a starved rhythm with nothing to explain it (host known; at a
            # job's start, host or not: a start has no choppy validation rhythm to excuse):
            # this was the onset of starvation, not a pause.
            slow = ((known or self.starting) and len(self.after) == self.resume
                    and sum(self.after) / self.resume < self.bar)
            if all_on:
                self.on_bins += 1
            # Stopping again after every rank worked for a while is the next starvation gap;
            # a choppy restart (ranks and loaders coming back one by one) is not.
            back = self.on_bins >= self.back
            slow = slow and back
            # A job's start: its workers are all new, so they explain nothing; a start that
            # goes on at a starved rhythm once every rank runs is starvation. New workers
            # explain a stop while they start up (at most loader_startup_s), not once work
            # has resumed: a starved rhythm behind them then is the input pipeline (one that
            # restarts its loaders and then cannot keep up).
            if self.starting or self.length > self.startup or len(self.after) == self.resume:
                explained = known and (changed or writing or main_busy)
            hungry = not explained and (slow or (all_idle and (back or starved_now or (
                starving and self.length > self.startup))))
            if self.length >= self.pmax or hungry or not present:
                self.in_pause = self.starting = False   # too long, or starving: judge it
                if hungry:
                    self.unmark = range(self.start, self.i)
                    # A job found starving gets no new pause for a while: its long gaps recur.
                    self.cooldown = int(th.cooldown_contexts * self.ctx)
            elif (len(self.recent) == self.resume and not changed
                  and sum(self.recent) / self.resume >= self.bar):
                # Back to steady work; not while the extra DataLoader that came with the
                # pause (a validation pass's) is still there: its first batches come fast.
                self.in_pause = self.starting = False
            else:
                if duty >= th.resumed_duty and not self.resumed:
                    # Work came back during this second: a partial second, not yet the
                    # rhythm to judge (the next ones are).
                    self.resumed = True
                # A pause blocks the next one for context_s: a job stopping every few seconds
                # starves, it does not checkpoint.
                self.hist.append((0.0, 0.0, True))
                return True
        elif ((stop or changed) and present and not (stop and starved_now)
              and ((self.cooldown <= 0 and self._healthy_context())
                   or (stop and new_work and self._steady_since_pause()))):
            # (A new DataLoader's workers appearing after steady work is a validation pass
            # starting, even before the GPUs stop.)
            self.in_pause, self.length, self.resumed = True, 1, False
            self.reason = "unknown"
            self._why(writing, changed, fresh)
            self.steady = 0
            self.bar = self._return_bar()
            self.extra = changed
            self.after.clear()
            self.on_bins = 0
            self.start = self.i
            self.recent.clear()
            self.hist.append((0.0, 0.0, True))
            return True
        self.hist.append((n, u, stop))
        self._steady(not stop and duty >= th.duty_starved)
        if known and duty >= th.duty_starved:
            self.workers = workers              # the loader of steady work
        return False

    def quiet(self, ns: list, us: list) -> None:
        """step_bin over bins that, outside a pause, can neither start one nor change what
        the tracker knows of steady work: bins with data, not every GPU idle, host unknown
        (no loader workers known) and the job present. The same state as stepping each."""
        k = len(ns)
        if not k:
            return
        assert not self.in_pause
        self.i += k
        self.cooldown -= k
        self.unmark = range(0)
        self.recent.extend(u / n for n, u in zip(ns[-self.resume:], us[-self.resume:]))
        self.hist.extend((n, u, False) for n, u in zip(ns[-self.ctx:], us[-self.ctx:]))
        # _steady over the run: the longest run of steady bins in it (the first one joined to
        # the run before) decides whether a cooldown was lifted; the last one carries on.
        ok = np.asarray(us, float) / np.asarray(ns, float) >= self.th.duty_starved
        breaks = np.flatnonzero(~ok)
        if not len(breaks):
            runs = [self.steady + k]
            self.steady += k
        else:
            b = np.concatenate(([-1], breaks, [k]))
            runs = (np.diff(b) - 1).tolist()
            runs[0] += self.steady
            self.steady = runs[-1]
        if max(runs) >= self.ctx:
            self.cooldown = min(self.cooldown, 0)

    def _steady(self, ok: bool) -> None:
        """One more bin outside a pause, at steady work or not: context_s of steady work in a
        row lifts the cooldown of a "pause" found to be starvation (a choppy restart after an
        epoch boundary can look like one; a starving job never runs that long at full duty)."""
        self.steady = self.steady + 1 if ok else 0
        if self.steady >= self.ctx:
            self.cooldown = min(self.cooldown, 0)

    def _why(self, writing: bool, changed: bool, fresh: bool) -> None:
        """What the host says the current pause is, most specific first: checkpoint-size
        disk writes, more loader workers than steady work had (a validation pass's own
        DataLoader), new loader workers (an epoch boundary's)."""
        if writing:
            self.reason = "checkpoint"
        elif changed and self.reason not in ("checkpoint",):
            self.reason = "validation"
        elif fresh and self.reason in ("unknown",):
            self.reason = "epoch_boundary"

    def begin(self) -> None:
        """The job starts now (seen starting live): its first seconds, while ranks and loader
        workers come up one by one, are a pause until work runs steady, as after an epoch
        boundary, unless the ranks then run at a starved rhythm."""
        self.in_pause, self.starting, self.length, self.resumed = True, True, 0, False
        self.reason = "startup"
        self.bar = self.th.duty_starved
        self.start = self.i + 1
        self.after.clear()
        self.recent.clear()
        self.on_bins = 0

    def _return_bar(self) -> float:
        """Duty at which work is back after a pause: duty_starved, or the job's own level
        before it less return_tol where that is lower (a job whose steady work sits below
        duty_starved, its gaps the step's own uploads, comes back to that level)."""
        sn = su = 0.0
        for n, u, stop in self.hist:
            if not stop:
                sn += n
                su += u
        level = su / sn if sn > 0 else 1.0
        return min(self.th.duty_starved, level - self.th.return_tol)

    def _steady_since_pause(self) -> bool:
        """Work since the last pause (or stop) ran at a steady duty for resume_s."""
        recent = []
        for n, u, stop in reversed(self.hist):
            if stop:
                break
            recent.append((n, u))
        sn = sum(n for n, _ in recent)
        return (len(recent) >= self.resume and sn > 0
                and sum(u for _, u in recent) / sn >= self.th.pause_context_duty)

    def _healthy_context(self) -> bool:
        h = self.hist
        if len(h) < self.ctx // 2:
            return False
        sn = su = 0.0
        for n, u, stop in h:
            if stop:
                return False
            sn += n
            su += u
        return sn > 0 and su / sn >= self.th.pause_context_duty


def storage_bound(io, rd, th: Thresholds = DEFAULT):
    """Storage feeds the job: iowait with disk reads, or heavy reads however little iowait."""
    with np.errstate(invalid="ignore"):
        return (rd >= th.disk_read_mbps) & ((io >= th.iowait_pct) | (rd >= th.disk_read_busy_mbps))


# Fields host_bins divides (numerators, denominators), per GPU and for the host.
_HB_NUM = [GI[k] for k in ("wk", "ld", "lb", "mc", "mt", "mem", "pid", "age")]
_HB_DEN = [GI[k] for k in ("wkn", "ldn", "lbn", "mcn", "mtn", "memn", "pidn", "agen")]
_HB_HNUM = [HI[k] for k in ("io", "rd", "wr")]
_HB_HDEN = [HI[k] for k in ("ion", "rdn", "wrn")]


def host_bins(g: np.ndarray, h: np.ndarray, th: Thresholds = DEFAULT) -> list:
    """Per bin (workers, starving, writing, present, age, main_busy) for the pause tracker,
    from a job's bins: the most loader workers of any rank, whether any rank's host shows
    starvation, whether the disk is written at checkpoint rates, whether the job still holds
    its GPUs (memory, processes), the age of the youngest loader worker of any rank (NaN
    unknown), and whether a rank's main process that has loader workers is itself at a full
    core (saving a checkpoint, evaluating: work that is not feeding). NaN workers when the
    host is unknown."""
    def r(a, b):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)
    # Every ratio in one division (element-wise, the same numbers as one by one).
    wk, ld, lb, mc, mt, mem, pid, age = r(g[_HB_NUM], g[_HB_DEN])
    main = np.fmax(mc, mt)
    io, rd, wr = r(h[_HB_HNUM], h[_HB_HDEN])
    with np.errstate(invalid="ignore"):
        per = np.maximum(wk, 1)
        starving_g = (((wk >= 0.5) & ((ld / (100 * per) >= th.loader_busy_share)
                                      | (lb / per >= th.loader_busy_share)))
                      | ((wk < 0.5) & (main >= th.core_busy_pct)))
        starving = starving_g.any(axis=0) | storage_bound(io, rd, th)
        writing = wr >= th.ckpt_write_mbps
        # The job still holds its GPUs: memory in use (or a process) wherever that is known.
        gone = np.where(~np.isnan(pid), pid <= 0, False) | np.where(
            ~np.isnan(mem), mem < th.mem_active_mib, False)
        present = ~gone.any(axis=0)
        workers = np.where(np.isnan(wk).all(axis=0), np.nan,
                           N.nanmax(np.where(np.isnan(wk), -1, wk), axis=0))
        youngest = np.where(np.isnan(age).all(axis=0), np.nan,
                            N.nanmin(np.where(np.isnan(age), np.inf, age), axis=0))
        main_busy = ((wk >= 0.5) & (main >= th.core_busy_pct)).any(axis=0)
    return list(zip(workers.tolist(), starving.tolist(), writing.tolist(), present.tolist(),
                    youngest.tolist(), main_busy.tolist()))


def pause_flags(duty: np.ndarray, n: np.ndarray, u: np.ndarray,
                th: Thresholds = DEFAULT, host: Optional[list] = None,
                starts: Optional[np.ndarray] = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pause, excluded, why) per bin of a job from per-GPU duty (G, T) and job n, u sums
    (T,); ``why``: the pause's cause (an index into diagnosis.CAUSES), -1 outside pauses.

    ``pause`` is what was known at each bin (the verdict there is busy); ``excluded`` drops
    the bins of pauses later found to be starvation, so windows after that see the gaps.
    ``starts``: bins at which the job is seen starting (PauseTracker.begin), as live.
    """
    tr = PauseTracker(th)
    out = np.zeros(len(n), dtype=bool)
    excl = np.zeros(len(n), dtype=bool)
    why = np.full(len(n), -1, dtype=np.int64)
    with np.errstate(invalid="ignore"):
        has = ((~np.isnan(duty)).any(axis=0) & (n > 0)).tolist()
        idle = (np.where(np.isnan(duty), 0.0, duty) < th.idle_duty) | np.isnan(duty)
        all_idle = (idle.all(axis=0) & (~np.isnan(duty)).any(axis=0)).tolist()
        all_on = ((np.where(np.isnan(duty), 1.0, duty) >= th.all_on_duty).all(axis=0)).tolist()
        known = ~np.isnan(duty)
        low = idle & known
        on = (np.where(known, duty, 1.0) >= th.all_on_duty) | low
        lone_idle = ((known.sum(axis=0) > 1) & (low.sum(axis=0) == 1) & on.all(axis=0)).tolist()
    nl, ul = n.tolist(), u.tolist()
    step = tr.step_bin
    begin = set() if starts is None else set(np.flatnonzero(starts).tolist())
    # Runs of bins that outside a pause change nothing but the tracker's history (see
    # PauseTracker.quiet) are fed at once: the end of each run (exclusive), per bin.
    quiet_end = _quiet_runs(has, all_idle, host, begin, len(nl))
    i = 0
    while i < len(nl):
        j = quiet_end[i]
        if j > i and not tr.in_pause:
            tr.quiet(nl[i:j], ul[i:j])
            i = j
            continue
        if i in begin:
            tr.begin()
        out[i] = excl[i] = step(has[i], all_idle[i], nl[i], ul[i],
                                host[i] if host is not None else None, all_on[i],
                                lone_idle[i])
        if out[i]:
            why[i] = CAUSES.index(tr.reason)
        if tr.unmark:
            excl[tr.unmark.start:tr.unmark.stop] = False
        i += 1
    return out, excl, why


def _quiet_runs(has: list, all_idle: list, host: Optional[list], begin: set,
                T: int) -> list:
    """Per bin, the end (exclusive) of the run of quiet bins it starts (itself when it is
    not quiet): bins with data, not every GPU idle, no loader workers known, no checkpoint
    writes, the job present and not seen starting there."""
    q = np.array(has, dtype=bool) & ~np.array(all_idle, dtype=bool)
    if host is not None:
        w = np.fromiter((x[0] for x in host), float, T)
        wr = np.fromiter((x[2] for x in host), bool, T)
        pres = np.fromiter((x[3] for x in host), bool, T)
        q &= np.isnan(w) & pres & ~wr
    if begin:
        q[list(begin)] = False
    # The next non-quiet bin at or after each bin.
    idx = np.where(q, T, np.arange(T))
    end = np.minimum.accumulate(idx[::-1])[::-1]
    return end.tolist()
