"""The detector: one orchestrator, for a live feed, a whole log and one window.

    det = Detector(th)
    det.update(tick) -> list[Diagnosis]       # live: a tick at a time, verdicts held
    det.judge_log(store, gpus, shared, hindsight) -> LogJob   # a log: every second, held
    diagnose(window, th) -> list[Diagnosis]   # one window, no state

Each runs the same stages on a job's bins (bins.Store; jobs from jobs.store_jobs): the
seconds table (seconds.py) -> the pause tracker (pauses.py) -> window features and the rules
(features.py, rules/) -> the hold (hold.py) -> a Diagnosis (result.py). A whole log also
takes hindsight: ``hindsight.apply(job, stage)`` after the pause flags ("pause") and after
the rules ("window", then "verdict"); nothing else relabels a second.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from gpumon.diagnosis import Diagnosis
from gpumon.samples import Tick
from gpumon.detect.bins import GI, Store, log_store, tick_columns
from gpumon.detect.features import kernel_recent, last_kernel, view_bins, window_features
from gpumon.detect.hold import Hysteresis, settle
from gpumon.detect.jobs import GroupMemo, active_since, store_jobs
from gpumon.detect.pauses import PauseMarks, pause_flags
from gpumon.detect.result import (data_window, held_diagnosis, make_diagnosis,
                                  no_data_diagnosis, no_job_diagnoses)
from gpumon.detect.rules import judge
from gpumon.detect.seconds import WINDOW_COLS, SecondsTable, seconds
from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds, bins

# A batch of a log's windows judged at once: at most this many windows, and this many bins.
CHUNK_BINS = 4096
BATCH_BINS = 1 << 15


class Detector:
    """Live verdicts, ``update(tick)``: the current Diagnosis per job; a whole log's,
    ``judge_log``. Live cost: each tick's samples are added to the bins with a handful of
    numpy calls; the rules run once per completed second of data (at most), on the last
    ``context_s`` seconds."""

    def __init__(self, th: Thresholds = DEFAULT):
        self.th = th
        self.window = max(1, bins(th.window_s))
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
            self.current = [self._judge(tuple(g), shared, first, last) for g, shared in found]
            keys = {tuple(g) for g, _ in found}
            self._jobs = {k: job for k, job in self._jobs.items() if k in keys}
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
        st.add_host(jobs, hosts)
        for g, p in pids.items():
            if p is not None or g not in self._pids:
                self._pids[g] = p
        if ppid:
            self._ppid = ppid
        # Bins that ended by the tick's time are complete (the driver gave every sample
        # before it), as are those before the newest sample's bin.
        now = max(float(samples.time.max()), float(tick.time))
        last = min(int(math.floor((now - st.origin) / BIN_S)) - 1, st.b0 + st.nb - 1)
        return None if last <= self._done or last < st.b0 else last

    def _judge(self, gpus: tuple, shared: bool, first: int, last: int) -> Diagnosis:
        """The job's Diagnosis at bin ``last``: its pauses stepped up to there, the windows
        ending at bins first..last judged and fed to its hysteresis."""
        st = self.store
        stop = last - st.b0 + 1
        lo = max(0, stop - self.span)
        g, h = st.view([st.rows[x] for x in gpus], stop, lo)
        job = self._jobs.get(gpus)
        if job is None:
            since = active_since(g, self.th)
            job = self._jobs[gpus] = _Job(self.th, st.b0 + lo + since)
            # Seen starting, not already running: a job appears when it takes its GPUs'
            # memory or runs processes on them. Without either, its first sign is a kernel
            # (store_jobs): a start is not seen, and a slow job's return after a minute with
            # none is no new start.
            if since > 0 and bool(g[[GI["memn"], GI["pidn"]]].any()):
                job.pauses.tr.begin()
        base = st.b0 + lo              # absolute bin of view index 0
        table = seconds(g, h, self.th)
        job.step_pauses(table, base, last)
        pause, excl, why, keep = job.arrays(base, st.b0 + stop)
        ends = np.arange(max(first, job.since, base), last + 1) - base
        if len(ends) == 0:
            ends = np.array([stop - lo - 1])
        # A kernel within idle_after_s, which can lie before the view: the job remembers the
        # last one.
        lk = last_kernel(g, job.last_kernel - base if job.last_kernel < base else -math.inf,
                         excl)
        job.last_kernel = base + float(lk[-1])
        f = window_features(g, h, ends, pause, self.th, keep=keep, excluded=excl, why=why,
                            recent=kernel_recent(lk, self.th),
                            table=table)
        r = judge(f, shared, self.th)
        for e in range(len(ends)):
            job.feed(st.bin_time(lo + int(ends[e]) + 1), r, e)
        e = len(ends) - 1
        t_end = st.bin_time(stop)
        f = data_window(f, e)
        d = make_diagnosis(f, r, e, gpus, t_end - float(f["window"][e]) * BIN_S,
                           t_end, self.th)
        return held_diagnosis(d, job.hyst.current, gpus, job.conf)

    # -- a whole log --------------------------------------------------------------------------

    def read_log(self, samples, jobs, host, driver_samples: bool,
                 pids: Optional[dict]) -> tuple[Store, list]:
        """A whole log's bins (bins.log_store) and the jobs over all of it; ``pids``: the
        processes the log saw per GPU, where it has them."""
        st = log_store(samples, jobs, host, self.th, driver_samples)
        pids = dict(pids) if pids else {}
        for g in st.gpus:
            pids.setdefault(g, None)
        return st, store_jobs(st, st.nb, st.nb, pids, {}, self.th)

    def judge_log(self, st: Store, gpus: Sequence[int], shared: bool,
                  hindsight=None) -> "LogJob":
        """Every second of one job of a log (a whole-log ``st``): its pause flags, the rules'
        output of the window ending at each second, the verdict held after each. With
        ``hindsight`` (analyze/hindsight.py), its rules relabel the seconds between stages."""
        th = self.th
        rows = [st.rows[x] for x in gpus]
        g, h = st.view(rows)
        table = seconds(g, h, th)
        # A job seen starting in the log (it did not hold its GPUs, then does) starts paused,
        # as it does live; one that holds them from the log's first second was not seen
        # starting: its first seconds are no start-up.
        present = table.present
        starts = present & ~np.concatenate(([True], present[:-1]))
        flags = pause_flags(table, th, starts)
        job = LogJob(th, g, table, *flags) if hindsight is None else \
            hindsight.make(th, g, table, *flags)
        _apply(hindsight, job, "pause")
        # Seconds in which the job did not hold its GPUs (before it started, after it ended)
        # are left out of its windows, as the live detector only judges a job once it exists.
        job.excl = job.excl | ~present
        job.recent = kernel_recent(last_kernel(g, out=job.excl), th)
        job.r = self.judge_windows(st, rows, shared, job, np.arange(st.nb))[0]
        job.v, job.c, job.s = job.r["verdict"], job.r["cause"], job.r["straggler"]
        _apply(hindsight, _apply(hindsight, job, "window"), "verdict")
        times = st.origin + (st.b0 + np.arange(1, st.nb + 1)) * BIN_S   # bin_time(e + 1)
        held, job.keys = hold(Hysteresis(th), times, job.v, job.c, job.s, job.r["sticky"])
        job.held = settle(held, job.keys, th)     # (one cause per verdict: hold.py)
        return job

    def judge_windows(self, st: Store, rows: list[int], shared: bool, job: "LogJob",
                      ends: np.ndarray, features: bool = False) -> tuple[dict, Optional[dict]]:
        """The rules' output (and with ``features`` the window features) of a log's windows
        ending at ``ends`` (sorted bins), whatever their spacing: the bins those windows hold
        are laid side by side (a window's bins once, shared with the window before where they
        overlap), a batch at a time (_batches), the batches on the cores. A window never
        reaches further back than view_bins: at the log's first bins it holds those there are."""
        from gpumon.logs.threads import map_threads      # (a log's work: not loaded live)
        th = self.th
        live = np.flatnonzero(st.g[:, :, :st.nb].any(axis=(1, 2)))
        scratch = threading.local()
        flags = (job.pause, job.excl, job.why, job.recent)

        def one(batch):
            idx, at = batch
            g, h = _gather(st, rows, idx, live, scratch)
            ps, ex, wy, rc = (None if a is None else a[idx] for a in flags)
            f = window_features(g, h, at, ps, th, excluded=ex, why=wy, recent=rc,
                                table=job.table.take(idx, WINDOW_COLS))
            return judge(f, shared, th), (f if features else None)

        out = map_threads(one, _batches(np.asarray(ends, np.int64), self.span))
        r = _cat([o[0] for o in out])
        return r, (_cat([o[1] for o in out]) if features else None)


def _batches(ends: np.ndarray, W: int) -> list:
    """(bins, positions) per batch of ``ends``: the bins the windows ending there hold, in
    order, each once, and each window's last bin's position among them. A batch holds at
    most CHUNK_BINS windows, and as many as the bins they add (all of a window's where it
    meets no other) keep within BATCH_BINS."""
    if not len(ends):
        return []
    lo = np.maximum(ends - W + 1, 0)
    # Each window adds the bins after the one before it (all of its own where they do not
    # meet): from max(its start, the last end + 1) to its end.
    first = lo.copy()
    first[1:] = np.maximum(lo[1:], ends[:-1] + 1)
    size = ends - first + 1
    upto = np.cumsum(size)
    out = []
    i = 0
    while i < len(ends):
        base = upto[i] - size[i]
        j = max(min(i + CHUNK_BINS, int(np.searchsorted(upto, base + BATCH_BINS, side="right"))),
                i + 1)
        sz, fs = size[i:j].copy(), first[i:j].copy()
        fs[0], sz[0] = lo[i], ends[i] - lo[i] + 1       # (a batch's first window: whole)
        pos = np.cumsum(sz)
        idx = np.arange(pos[-1]) - np.repeat(pos - sz - fs, sz)
        out.append((idx, pos - 1))
        i = j
    return out


def _gather(st: Store, rows: list[int], idx: np.ndarray, live: np.ndarray, scratch
            ) -> tuple[np.ndarray, np.ndarray]:
    """The store's bins ``idx`` of these rows as float64 arrays, with only the ``live``
    fields (those with any data in the store) copied in: the others stay zero. The copy goes
    into a buffer of this thread's kept from batch to batch (a fresh one would be faulted in
    anew each time)."""
    g_all, h_all = st.view(rows)
    shape = g_all.shape[:2] + (len(idx),)
    bufs = scratch.__dict__.setdefault("g", {})
    buf = bufs.get(shape)
    if buf is None:
        buf = bufs[shape] = np.zeros(shape)
    for k in live.tolist():
        buf[k] = np.take(g_all[k], idx, axis=1)
    return buf, np.take(h_all, idx, axis=1).astype(np.float64)


def _cat(parts: list[dict]) -> dict:
    """Per-window outputs of several calls joined on their last axis. A flag of each call's
    whole view (features' seen_*: a signal reported at all) becomes whether any call's view
    had it, as a plain bool (what result.missing_signals reads of it, without an np.any
    per window)."""
    out = {}
    for k in parts[0]:
        a = [p[k] for p in parts]
        if np.ndim(a[0]):
            out[k] = np.concatenate(a, axis=-1)
        elif all(x.__class__ is bool for x in a):
            out[k] = any(a)
        else:
            out[k] = np.array(a)
    return out


def hold(hy: Hysteresis, times: np.ndarray, v: np.ndarray, c: np.ndarray, s: np.ndarray,
         sticky: np.ndarray) -> tuple[np.ndarray, list]:
    """``hy.step`` fed every bin's raw (verdict, cause, straggler) in turn: the key held after
    each bin, as an index into the returned list of keys (noted where a step changed it)."""
    step, at, held = hy.step, [0], [hy.current]
    for e, (t, key, k) in enumerate(zip(times.tolist(), zip(v.tolist(), c.tolist(),
                                                             s.tolist()), sticky.tolist())):
        if step(t, key, k):
            at.append(e)
            held.append(hy.current)
    runs = np.diff(np.append(at, len(v)))
    held = [h for h, r in zip(held, runs.tolist()) if r]
    keys = list(dict.fromkeys(held))
    ids = {k: i for i, k in enumerate(keys)}
    return np.repeat([ids[h] for h in held], runs[runs > 0]).astype(np.int64), keys


@dataclass
class LogJob:
    """One job's seconds of a log as the stages fill them in: its bins ``g`` and seconds
    ``table``; the pause flags as known then (``pause``: a pause; ``excl``: left out of the
    windows; ``why``: the pause's cause, a CAUSES index); ``recent``: a kernel within
    idle_after_s; the rules' output ``r`` and its verdict, cause and straggler per second
    (``v``, ``c``, ``s``); the key held after each second (``held``, an index into
    ``keys``). hindsight.make gives analyze's, with what its rules read besides."""
    th: Thresholds
    g: np.ndarray
    table: SecondsTable
    pause: np.ndarray
    excl: np.ndarray
    why: np.ndarray
    recent: Optional[np.ndarray] = None
    r: Optional[dict] = None
    v: Optional[np.ndarray] = None
    c: Optional[np.ndarray] = None
    s: Optional[np.ndarray] = None
    held: Optional[np.ndarray] = None
    keys: list = field(default_factory=list)


def _apply(hindsight, job: LogJob, stage: str) -> LogJob:
    return job if hindsight is None else hindsight.apply(job, stage)


class _Job:
    """Live state of one job: its pauses, when it started, its held verdict."""

    def __init__(self, th: Thresholds, since: int):
        self.pauses = PauseMarks(th)        # the pause tracker and what it marked
        self.since = since                  # absolute bin the job was first seen in use
        self.next = since                   # next absolute bin to feed the pause tracker
        self.hyst = Hysteresis(th)
        self.conf: Optional[float] = None   # confidence when the held verdict last won
        self.last_kernel = -math.inf        # absolute bin of the last kernel seen (features)
        self.th = th

    def step_pauses(self, table: SecondsTable, base: int, last: int) -> None:
        """Feed the pause tracker the seconds of the view's ``table`` it has not seen, up to
        ``last`` (absolute, the view's last); the view's index 0 is absolute bin ``base``."""
        b_first = max(self.next, base)
        if b_first <= last:
            self.pauses.feed(table.take(slice(b_first - base, None)), b_first)
        self.next = last + 1

    def arrays(self, base: int, end: int):
        """(pause, excluded, why, keep) over absolute bins base..end-1; the bins before
        ``base`` are forgotten."""
        return self.pauses.arrays(base, end) + (np.arange(base, end) >= self.since,)

    def feed(self, t: float, r: dict, e: int) -> None:
        """The rules' raw verdict of window ``e`` into the hysteresis."""
        raw = (int(r["verdict"][e]), int(r["cause"][e]), int(r["straggler"][e]))
        self.hyst.step(t, raw, bool(r["sticky"][e]), bool(r["quick"][e]))
        if raw == self.hyst.current:
            self.conf = float(r["confidence"][e])


def diagnose(window: Sequence[Tick], th: Thresholds = DEFAULT) -> list[Diagnosis]:
    """One Diagnosis per job, judged on the whole window (no hysteresis, no state)."""
    samples, jobs, hosts, pids, ppid = tick_columns(window)
    gone = frozenset(g for t in window for g in t.lost)
    if len(samples.time) == 0:
        return [no_data_diagnosis((), None, None, "no sample in the window")]
    start, end = float(samples.time.min()), float(samples.time.max())
    store = Store(math.floor(start), th)
    store.add_samples(samples)
    store.add_host(jobs, hosts)
    nb = store.nb
    found = store_jobs(store, nb, nb, pids, ppid, th, gone=gone)
    if not found:
        return no_job_diagnoses(store, 0, nb, start, end, th, gone, whole_log=True)
    out = []
    for gpus, shared in found:
        g, h = store.view([store.rows[x] for x in gpus])
        table = seconds(g, h, th)
        pause, excl, why = pause_flags(table, th)
        f = window_features(g, h, np.array([nb - 1]), pause, th, w=nb, excluded=excl, why=why,
                            table=table)
        r = judge(f, shared, th)
        out.append(make_diagnosis(f, r, 0, gpus, start, end, th))
    return out
