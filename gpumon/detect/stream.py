"""StreamingDetector: live verdicts, one per job, with hysteresis.

Each tick's samples are added into a sliding store of per-second bins (cheap: a few numpy
calls per tick). Once per completed second of data the rules judge the window ending there,
and a verdict replaces the current one only after winning for ``hold_s`` seconds of data, so
a noisy boundary does not flap. ``gpumon analyze`` runs the same rules and the same
hold (detect/hold.py) over every second of a log.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from gpumon.diagnosis import CAUSES, VERDICTS, Diagnosis
from gpumon.samples import Tick
from gpumon.detect.advice import advice
from gpumon.detect.bins import GI, Store
from gpumon.detect.pipeline import (active_since, judge_job, make_diagnosis,
                                    no_data_diagnosis, no_job_diagnoses, store_jobs,
                                    tick_columns)
from gpumon.detect.features import kernel_recent, last_kernel, view_bins
from gpumon.detect.hold import Hysteresis
from gpumon.detect.jobs import GroupMemo
from gpumon.detect.pauses import PauseTracker
from gpumon.detect.seconds import seconds
from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds

class _Job:
    """Live state of one job: its pauses, when it started, its held verdict."""

    def __init__(self, th: Thresholds, since: int):
        self.pauses = PauseTracker(th)
        self.flags: dict[int, bool] = {}    # absolute bin -> pause (as known then)
        self.excl: dict[int, bool] = {}     # absolute bin -> left out of the features
        self.why: dict[int, int] = {}       # absolute bin -> the pause's cause (CAUSES index)
        self.since = since                  # absolute bin the job was first seen in use
        self.next = since                   # next absolute bin to feed the pause tracker
        self.hyst = Hysteresis.of(th)
        self.conf: Optional[float] = None   # confidence when the held verdict last won
        self.last_kernel = -math.inf        # absolute bin of the last kernel seen (features)
        self.th = th

    def step_pauses(self, g, h, base: int, last: int) -> None:
        """Feed the pause tracker the bins it has not seen, up to ``last`` (absolute); the
        view's index 0 is absolute bin ``base``. Forget bins older than the view."""
        b_first = max(self.next, base)
        if b_first <= last:
            i0 = b_first - base
            # (The bins before settle a second's power and are what a GPU spins below.)
            table = seconds(g, h, self.th, i0)
        tr = self.pauses
        for b in range(b_first, last + 1):
            k = b - base - i0
            self.flags[b] = self.excl[b] = tr.step(table.row(k))
            if self.flags[b]:
                self.why[b] = CAUSES.index(tr.reason)
            for j in tr.unmark:       # that "pause" was starvation after all
                self.excl[b - tr.i + j] = False
            for j in tr.lead_in:      # the stop began inside the bin before
                self.excl[b - tr.i + j] = True
        self.next = last + 1
        for b in [b for b in self.flags if b < base]:
            del self.flags[b]
            self.excl.pop(b, None)
            self.why.pop(b, None)

    def arrays(self, base: int, end: int):
        """(pause, excluded, why, keep) over absolute bins base..end-1."""
        absr = range(base, end)
        fl, ex, wy = self.flags.get, self.excl.get, self.why.get
        pause = np.array([fl(b, False) for b in absr], dtype=bool)
        excl = np.array([ex(b, False) for b in absr], dtype=bool)
        why = np.array([wy(b, -1) for b in absr], dtype=np.int64)
        keep = np.arange(base, end) >= self.since
        return pause, excl, why, keep

    def feed(self, t: float, r: dict, e: int) -> None:
        """The rules' raw verdict of window ``e`` into the hysteresis."""
        raw = (int(r["verdict"][e]), int(r["cause"][e]), int(r["straggler"][e]))
        self.hyst.step(t, raw, bool(r["sticky"][e]), bool(r["quick"][e]))
        if raw == self.hyst.current:
            self.conf = float(r["confidence"][e])


class StreamingDetector:
    """Live verdicts: ``update(tick)`` returns the current Diagnosis per job.

    Cost: each tick's samples are added to the bins with a handful of numpy calls; the rules
    run once per completed second of data (at most), on the last ``context_s`` seconds.
    """

    def __init__(self, th: Thresholds = DEFAULT):
        self.th = th
        self.window = max(1, int(round(th.window_s / BIN_S)))
        self.span = view_bins(th)        # bins of history every window's features need
        self.cap = self.span + 8
        self.store: Optional[Store] = None
        self.current: list[Diagnosis] = []
        self._done = -1                      # last absolute bin judged
        self._pids: dict[int, Optional[tuple]] = {}
        self._ppid: dict[int, int] = {}
        self._jobs: dict[tuple, _Job] = {}
        self._groups = GroupMemo()           # the last grouping of GPUs into jobs
        self._kernel_t: dict[int, float] = {}    # GPU -> time of its last sample with a kernel
        self._lost: frozenset = frozenset()      # GPUs lost (they leave their job)

    def reset(self) -> None:
        self.__init__(self.th)

    def update(self, tick: Tick) -> list[Diagnosis]:
        if tick.lost and not self._lost.issuperset(tick.lost):
            self._lost = self._lost.union(tick.lost)
        last = self._ingest(tick) if tick.gpus else None
        if last is None:
            return self.current
        first = max(self._done + 1, last - self.window + 1, self.store.b0)
        self._done = last
        found = self._found(last)
        if found is not None:
            out = [self._judge(tuple(gpus), shared, first, last) for gpus, shared in found]
            keys = {tuple(gpus) for gpus, _ in found}
            for k in [k for k in self._jobs if k not in keys]:
                del self._jobs[k]
            self.current = out
        return self.current

    def _found(self, last: int) -> Optional[list]:
        """The jobs to judge at bin ``last``; None where there is none, ``current`` then
        saying why (no sample for a whole window, or no GPU in use)."""
        st = self.store
        stop = last - st.b0 + 1
        t_end = st.bin_time(stop)
        # A second with no sample from a GPU (a hole in a replayed log, a monitor that fell
        # behind) says nothing of whether it is in use: each GPU is read in its last second
        # with samples, within a window.
        lo = max(0, stop - self.window)
        seen = bool(st.g[GI["n"], :, lo:stop].any())
        if not seen and self._jobs:
            # No sample for a whole window: nothing can be said, and the jobs are kept (when
            # samples come back they are judged on, not found anew as if they had started).
            self.current = [no_data_diagnosis(gpus, t_end - self.th.window_s, t_end)
                            for gpus in self._jobs]
            return None
        recent = frozenset(gpu for gpu, t in self._kernel_t.items()
                           if t_end - t < self.th.idle_after_s)
        found = (store_jobs(st, stop, stop - lo, self._pids, self._ppid, self.th, self._groups,
                            latest=True, recent=recent, gone=self._lost) if seen else [])
        if not found:
            self.current = no_job_diagnoses(st, lo, stop, t_end - self.th.window_s, t_end,
                                            self.th, self._lost)
            self._jobs.clear()
            return None
        return found

    def _ingest(self, tick: Tick) -> Optional[int]:
        """Add the tick to the store; the last complete bin when it completed one not yet
        judged (bins before the newest sample's bin are complete), else None."""
        samples, jobs, hosts, pids, ppid = tick_columns((tick,))
        if self.store is None:
            self.store = Store(math.floor(float(samples.time.min())), self.th, cap=self.cap)
        st = self.store
        st.add_samples(samples)
        k = np.flatnonzero(samples.util > self.th.idle_util_pct)
        if len(k):
            k = k[np.argsort(samples.time[k], kind="stable")]   # (the latest one last)
            self._kernel_t.update(zip(samples.gpu[k].tolist(), samples.time[k].tolist()))
        st.add_jobs(jobs)
        st.add_host(hosts)
        for g, p in pids.items():
            if p is not None or g not in self._pids:
                self._pids[g] = p
        if ppid:
            self._ppid = ppid
        newest = int(math.floor((float(samples.time.max()) - st.origin) / BIN_S))
        last = newest - 1
        return None if last <= self._done or last < st.b0 else last

    def _judge(self, gpus: tuple, shared: bool, first: int, last: int) -> Diagnosis:
        """The job's Diagnosis at bin ``last``: its pauses stepped up to there, the windows
        ending at bins first..last judged and fed to its hysteresis."""
        st = self.store
        stop = last - st.b0 + 1
        lo = max(0, stop - self.span)
        g, h = st.view([st.rows[x] for x in gpus], stop, lo)
        n = g[GI["n"]].sum(axis=0)            # the job's samples per bin
        job = self._jobs.get(gpus)
        if job is None:
            since = active_since(g, self.th)
            job = self._jobs[gpus] = _Job(self.th, st.b0 + lo + since)
            # Seen starting, not already running: a job appears when it takes its GPUs'
            # memory or runs processes on them. Without either, its first sign is a kernel
            # (store_jobs): a start is not seen, and a slow job's return after a minute with
            # none is no new start.
            if since > 0 and bool(g[[GI["memn"], GI["pidn"]]].any()):
                job.pauses.begin()
        base = st.b0 + lo              # absolute bin of view index 0
        job.step_pauses(g, h, base, last)
        pause, excl, why, keep = job.arrays(base, st.b0 + stop)
        ends = np.arange(max(first, job.since, base), last + 1) - base
        if len(ends) == 0:
            ends = np.array([stop - lo - 1])
        # A kernel within idle_after_s, which can lie before the view: the job remembers the
        # last one.
        lk = last_kernel(g, job.last_kernel - base if job.last_kernel < base else -math.inf,
                         excl)
        job.last_kernel = base + float(lk[-1])
        f, r = judge_job(g, h, pause, ends, shared, self.th, keep=keep, excluded=excl,
                         why=why, recent=kernel_recent(lk, self.th))
        for e in range(len(ends)):
            job.feed(st.bin_time(lo + int(ends[e]) + 1), r, e)
        e = len(ends) - 1
        t_end = st.bin_time(stop)
        f = _data_window(f, e, int(ends[e]), n)
        d = make_diagnosis(f, r, e, gpus, t_end - float(f["window"][e]) * BIN_S,
                           t_end, self.th)
        return _hold(d, job.hyst.current, gpus, job.conf)


def _data_window(f: dict, e: int, end: int, n: np.ndarray) -> dict:
    """``f`` with window ``e`` (ending at view bin ``end``) no longer than the seconds of data
    the job has (``n``: its samples per bin): right after the start, the reason and the
    samples per second speak of the seconds sampled, not of window_s."""
    have = np.flatnonzero(n[:end + 1] > 0)
    span = end - int(have[0]) + 1 if len(have) else 0
    if not 0 < span < f["window"][e]:
        return f
    window = f["window"].copy()
    window[e] = span
    return dict(f, window=window)


def _named(key: Optional[tuple], gpus: Sequence[int]):
    if key is None:
        return None
    v, c, s = key
    return (VERDICTS[v], CAUSES[c] if c >= 0 else None, gpus[s] if s >= 0 else None)


def _hold(fresh: Diagnosis, key: Optional[tuple], gpus: Sequence[int],
          conf: Optional[float]) -> Diagnosis:
    """The held verdict, cause and straggler with the freshest evidence."""
    named = _named(key, gpus)
    if named is None or named == (fresh.verdict, fresh.cause, fresh.straggler_gpu):
        return fresh
    v, c, s = named
    return replace(fresh, verdict=v, cause=c, straggler_gpu=s, advice=advice(v, c, s),
                   confidence=round(conf if conf is not None else fresh.confidence, 3))
