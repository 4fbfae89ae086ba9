"""A whole log through the detector: per-second verdicts, hysteresis, segments, summary.

The log's samples go into the same per-second bins as live data (gpumon.detect.bins); the
same features and rules judge the window ending at every second (judge_windows: the
windows' bins a batch at a time, the batches side by side on the cores, threads.py), the
rules of hindsight.py relabel what only a whole log shows, and the same Hysteresis, stepped
every second, turns them into a timeline. A few windows of each segment, judged the same
way, give its evidence and reason.
"""
from __future__ import annotations

import math
import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from gpumon.diagnosis import CAUSES, IDLE, INSUFFICIENT_DATA, PAUSED, VERDICTS, Diagnosis
from gpumon.detect import nanops as N
from gpumon.detect.bins import GI, Store
from gpumon.detect.pipeline import CONFIDENCE_FACTOR, EVIDENCE_KEYS, make_diagnosis, store_jobs
from gpumon.detect.pipeline import bin_duty, idle_diagnosis
from gpumon.detect.features import kernel_recent, last_kernel, view_bins, window_features
from gpumon.detect.pauses import pause_flags
from gpumon.detect.seconds import seconds
from gpumon.detect.rules import judge
from gpumon.detect.rules import held
from gpumon.detect.hold import Hysteresis, settle
from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds
from gpumon.logs.log import Log, runs
from gpumon.logs.memory import small_pages
from gpumon.analyze import hindsight as H
from gpumon.analyze.hindsight import Job
from gpumon.analyze.pauses import one_off_dips, recovered, scan
from gpumon.logs.threads import map_threads

# A batch of windows judged at once: at most this many windows, and this many bins in all.
CHUNK_BINS = 4096
BATCH_BINS = 1 << 15
STORE_CHUNK = 1 << 17          # samples binned at once
# Evidence of a segment: the median over at most this many evenly spaced seconds of it.
EVIDENCE_POINTS = 9
_STARVED = VERDICTS.index("data_starvation")
_BUSY = VERDICTS.index("busy")
_STALL = VERDICTS.index("sync_stall")
_RANK_HOST = CAUSES.index("rank_host")
_INSUFFICIENT = VERDICTS.index(INSUFFICIENT_DATA)
_PAUSED = VERDICTS.index(PAUSED)
_UNKNOWN = CAUSES.index("unknown")


@dataclass
class Timeline:
    segments: list = field(default_factory=list)     # Diagnosis, start/end set, time order
    jobs: list = field(default_factory=list)         # (gpus, shared_process)
    start: Optional[float] = None
    end: Optional[float] = None
    samples_per_s: Optional[float] = None
    gaps: list = field(default_factory=list)         # (start, end): no samples, no verdict
    # Runs of one sample per GPU this timeline stands for (a log sampled every few minutes
    # is one such run per sample: _merge_short); 0 for any other.
    lone: int = 0


def _rate(log: Log) -> float:
    s = log.samples
    span = float(s.time.max() - s.time.min()) if len(s.time) > 1 else 0.0
    g = s.gpu
    if len(g) and 0 <= g.min() and g.max() < 1 << 16:     # GPU indices: count, no sort
        ngpu = int(np.count_nonzero(np.bincount(g)))
    else:
        ngpu = len(np.unique(g)) or 1
    return len(s.time) / ngpu / span if span > 0 else 0.0


def build_store(log: Log, th: Thresholds) -> Store:
    s = log.samples
    st = Store(math.floor(float(np.nanmin(s.time))), th, dtype=np.float32,
               driver_samples=log.kind == "gpumon")
    # In time order per GPU, in chunks: bursts and gaps carry across chunks exactly as
    # they carry across live ticks, and no chunk's scratch arrays grow with the log.
    order = _gpu_time_order(s.gpu, s.time)
    st.add_gpus(s.gpu)
    if not st.cap and len(order):
        # All the bins at once (b0 from the first chunk, as adding it would set it): no
        # copies of a growing store (a 72-hour log's is ~300 MB).
        st.reserve(float(np.nanmin(s.time[order[:STORE_CHUNK]])), float(np.nanmax(s.time)))
    scratch: dict = {}
    for a in range(0, len(order), STORE_CHUNK):
        st.add_samples(_take(s, order[a:a + STORE_CHUNK], scratch))
    if log.jobs is not None:
        st.add_jobs(log.jobs)
    if log.host is not None:
        st.add_host(log.host)
    return st


def _gpu_time_order(gpu: np.ndarray, t: np.ndarray) -> np.ndarray:
    """np.lexsort((t, gpu)): by GPU, then time, ties in file order. A log is in time order
    per GPU already, so a stable sort by GPU alone gives the same order, much faster."""
    key = gpu
    if len(gpu) and -(1 << 15) <= gpu.min() and gpu.max() < 1 << 15:
        key = gpu.astype(np.int16)      # numpy sorts 16-bit keys by radix: the same order
    order = np.argsort(key, kind="stable")
    ts, gs = t[order], gpu[order]
    if len(ts) > 1 and not bool(((gs[1:] != gs[:-1]) | (ts[1:] >= ts[:-1])).all()):
        return np.lexsort((t, gpu))
    return order


_SAMPLE_COLS = ("time", "gpu", "util", "power", "power_limit", "clock", "clock_max", "events",
                "mem", "has_pid")


def _take(s, idx, scratch: dict):
    """The samples at ``idx``, gathered into arrays kept in ``scratch`` from one chunk to
    the next (add_samples keeps none of them): fresh ones for every chunk would each be
    faulted in anew."""
    from gpumon.detect.bins import SampleCols
    out = []
    for name in _SAMPLE_COLS:
        a = getattr(s, name)
        if a is None:
            out.append(None)
            continue
        buf = scratch.get(name)
        if buf is None or buf.dtype != a.dtype or len(buf) < len(idx):
            buf = scratch[name] = np.empty(len(idx), a.dtype)
        out.append(np.take(a, idx, out=buf[:len(idx)]))
    return SampleCols(*out)


def judge_windows(st: Store, rows: list[int], shared: bool, job: Job, th: Thresholds,
                  ends: np.ndarray, features: bool = False) -> tuple[dict, Optional[dict]]:
    """The rules' output (and with ``features`` the window features) of the windows ending
    at ``ends`` (sorted bins), whatever their spacing: the bins those windows hold are laid
    side by side (a window's bins once, shared with the window before where they overlap),
    a batch at a time (_batches), the batches on the cores. A window never reaches
    further back than view_bins: at the log's first bins it holds the bins there are."""
    W = view_bins(th)
    live = np.flatnonzero(st.g[:, :, :st.nb].any(axis=(1, 2)))
    scratch = threading.local()
    flags = (job.pause, job.excl, job.why, job.recent)

    def one(batch):
        idx, at = batch
        g, h = _gather(st, rows, idx, live, scratch)
        ps, ex, wy, rc = (None if a is None else a[idx] for a in flags)
        f = window_features(g, h, at, ps, th, excluded=ex, why=wy, recent=rc)
        return judge(f, shared, th), (f if features else None)

    out = _map(one, _batches(np.asarray(ends, np.int64), W))
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
    fields (those with any data in the store) copied in: the others stay zero. Bins that
    follow one another (every second's windows) are a slice, copied into a buffer of this
    thread's kept from batch to batch (a fresh one would be faulted in anew each time)."""
    a, b = int(idx[0]), int(idx[-1]) + 1
    bufs = scratch.__dict__.setdefault("g", {})
    if b - a == len(idx):
        g32, h32 = st.view(rows, b, a, raw=True)
        buf = bufs.get(g32.shape)
        if buf is None:
            buf = bufs[g32.shape] = np.zeros(g32.shape)
        buf[live] = g32[live]
        return buf, h32.astype(np.float64)
    g_all, h_all = st.view(rows, raw=True)
    buf = np.zeros(g_all.shape[:2] + (len(idx),))      # (batches of scattered windows vary)
    for k in live.tolist():
        buf[k] = np.take(g_all[k], idx, axis=1)
    return buf, np.take(h_all, idx, axis=1).astype(np.float64)


def _map(fn, items: list) -> list:
    """map_threads for window_features and judge: they silence RuntimeWarnings with
    warnings.catch_warnings, which saves and restores the process-wide filters, so threads
    entering and leaving it out of step would leave a filter behind. Inside this outer block
    every state they restore still ignores them; leaving it restores the caller's filters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return map_threads(fn, items)


def _cat(parts: list[dict]) -> dict:
    """Per-window outputs of several calls joined on their last axis. A flag of each call's
    whole view (features' seen_*: a signal reported at all) becomes whether any call's view
    had it, as a plain bool (what pipeline.missing_signals reads of it, without an np.any
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


def timeline(log: Log, th: Thresholds = DEFAULT) -> Timeline:
    """The log's segments (per job, in time order), its jobs and its span. Where logging
    stopped (logs.log.runs) there is a gap: each run is judged on its own."""
    with small_pages():
        parts = [_timeline(r, th) for r in runs(log, th.idle_after_s, th.context_s,
                                                int(th.min_samples))]
    return _join(parts, th)


def _join(parts: list[Timeline], th: Thresholds) -> Timeline:
    parts = _merge_short(parts, th)
    if len(parts) == 1:
        return parts[0]
    tl = Timeline(start=min(p.start for p in parts), end=max(p.end for p in parts))
    spans = [p.end - p.start for p in parts]
    tl.samples_per_s = (sum(p.samples_per_s * w for p, w in zip(parts, spans)) / sum(spans)
                        if sum(spans) > 0 else 0.0)
    for p in parts:
        tl.segments += p.segments
        tl.jobs += [j for j in p.jobs if j not in tl.jobs]
    tl.gaps = _gaps(parts)
    tl.segments.sort(key=lambda d: (d.start, d.gpus))
    return tl


def _gaps(parts: list[Timeline]) -> list:
    """Where the runs have no samples: between them, and within a run of lone samples."""
    ordered = sorted(parts, key=lambda p: p.start)
    inner = [g for p in parts for g in p.gaps]
    return sorted(inner + [(a.end, b.start) for a, b in zip(ordered, ordered[1:])
                           if b.start > a.end])


def _merge_short(parts: list[Timeline], th: Thresholds) -> list[Timeline]:
    """Runs of one sample per GPU, one after another in time (a log sampled every few
    minutes is one such run per sample), as one run: one insufficient_data segment over
    them all, the stretches between them its gaps."""
    out: list[Timeline] = []
    for p in parts:
        q = out[-1] if out else None
        if q is None or not q.lone or not p.lone or p.start < q.end:
            out.append(p)
            continue
        gpus = tuple(sorted(set(q.segments[0].gpus) | set(p.segments[0].gpus)))
        n = q.lone + p.lone
        span = p.end - q.start
        every = span / max(n - 1, 1)
        d = replace(q.segments[0], gpus=gpus, end=p.end,
                    advice=_sparse_advice(every, _rate_th(th, 1 / every if every else 0.0)))
        out[-1] = Timeline(segments=[d], jobs=[], start=q.start, end=p.end,
                           samples_per_s=n / span if span > 0 else 0.0,
                           gaps=q.gaps + ([(q.end, p.start)] if p.start > q.end else []),
                           lone=n)
    return out


def _timeline(log: Log, th: Thresholds) -> Timeline:
    rate = _rate(log)
    start, end = float(np.nanmin(log.samples.time)), float(np.nanmax(log.samples.time))
    if end - start < th.window_s:
        return _too_short(log, rate, start, end)
    th = _rate_th(th, rate)
    st = build_store(log, th)
    nb = st.nb
    start = st.bin_time(0)
    end = float(np.nanmax(log.samples.time))
    pids = dict(log.pids) if log.pids else {}
    for g in st.gpus:
        pids.setdefault(g, None)
    jobs = store_jobs(st, nb, nb, pids, {}, th)
    tl = Timeline(jobs=jobs, start=float(np.nanmin(log.samples.time)), end=end,
                  samples_per_s=rate)
    if not jobs:
        tl.segments = [idle_diagnosis(sorted(st.gpus), start, end, th, whole_log=True)]
        return tl
    for gpus, shared in jobs:
        tl.segments += _job_segments(st, gpus, shared, th, end)
    tl.segments.sort(key=lambda d: (d.start, d.gpus))
    if rate and rate * th.window_s < th.min_samples:
        span = tl.end - tl.start
        every = span / max(rate * span - 1, 1)     # (n samples a GPU: n - 1 intervals)
        tl.segments = [replace(d, advice=_sparse_advice(every, th))
                       if d.verdict == INSUFFICIENT_DATA else d for d in tl.segments]
    return tl


def _rate_th(th: Thresholds, rate: float) -> Thresholds:
    """The thresholds a log sampled ``rate`` times a second per GPU is judged with: under 2,
    windows of window_1hz_s at least."""
    if rate and rate < 2.0:
        return replace(th, window_s=max(th.window_s, th.window_1hz_s))
    return th


def _sparse_advice(every: float, th: Thresholds) -> str:
    """What to do about a log sampled too sparsely (a sample every ``every`` s) for any
    window to be judged."""
    return (f"one sample every {every:.0f} s is too few to see bursts and gaps (a "
            f"{th.window_s:.0f} s window needs {th.min_samples:.0f}): log every second or "
            "faster (gpumon log, or nvidia-smi --query-gpu=... -l 1)")


def _job_segments(st: Store, gpus, shared: bool, th: Thresholds, end: float) -> list:
    """One job's segments: its raw verdict per bin, held (hysteresis), in runs, each with
    the evidence of a few of its windows."""
    nb = st.nb
    rows = [st.rows[x] for x in gpus]
    job = _raw_verdicts(st, rows, shared, th)
    v, c, s = job.v, job.c, job.s
    times = st.origin + (st.b0 + np.arange(1, nb + 1)) * BIN_S   # bin_time(e + 1)
    # (Without Hysteresis.step's ``quick``: below, a log dates every change from the
    # window in which the new verdict first appeared anyway.)
    held, keys = hold(Hysteresis.of(th), times, v, c, s, job.r["sticky"])
    held = settle(held, keys, th)     # (one cause per verdict: detect/hold.py)
    # Segments: runs of one held verdict. Live, a verdict changes once it has won for
    # hold_s; a log knows when the new one first appeared: date each change from there.
    bounds = [0] + _first_seen(held, keys, v, c, s) + [nb]
    spans = list(zip(bounds[:-1], bounds[1:]))
    # Evidence from windows L bins into each segment (a window's evidence lags its end); a
    # pause's own (paused seconds keep their own windows: hindsight's lead).
    L = min(int(round(th.hold_s / BIN_S)), nb - 1)
    leads = [0 if keys[held[b - 1]][0] == _PAUSED else L for a, b in spans]
    picks = [np.unique(np.minimum(np.linspace(a, b - 1, min(EVIDENCE_POINTS, b - a))
                                  .round().astype(int) + lead, nb - 1))
             for (a, b), lead in zip(spans, leads)]
    pts = np.unique(np.concatenate(picks))
    r_all, f_all = judge_windows(st, rows, shared, job, th, pts, features=True)
    where = {int(p): i for i, p in enumerate(pts)}
    out = []
    for (a, b), pk, lead in zip(spans, picks, leads):
        key = keys[held[b - 1]]      # (held changes at or after a)
        ds = [make_diagnosis(f_all, r_all, where[int(p)], gpus, None, None, th) for p in pk]
        a2, b2 = min(a + lead, nb - 1), min(b + lead, nb)
        same = (v[a2:b2] == key[0]) & (c[a2:b2] == key[1]) & (s[a2:b2] == key[2])
        conf = job.r["confidence"][a2:b2][same].tolist()
        out.append(_merge(ds, key, gpus, st.bin_time(a), min(st.bin_time(b), end), conf,
                          _reason(ds, key, job, a, b2, th)))
    return out


def _raw_verdicts(st: Store, rows: list[int], shared: bool, th: Thresholds) -> Job:
    """One job's bins judged: the pause flags (job_flags), the rules' output per bin and the
    (verdict, cause, straggler) per bin, hindsight's window and verdict rules applied."""
    job = job_flags(st, rows, th)
    job.recent = kernel_recent(last_kernel(st.view(rows, raw=True)[0], out=job.excl), th)
    job.r = judge_windows(st, rows, shared, job, th, np.arange(st.nb))[0]
    job.v, job.c, job.s = job.r["verdict"], job.r["cause"], job.r["straggler"]
    return H.apply(H.apply(job, "window"), "verdict")


def _first_seen(held: np.ndarray, keys: list, v: np.ndarray, c: np.ndarray,
                s: np.ndarray) -> list:
    """The bins at which the held verdict changes, each moved back to where the new one
    first appeared in the raw ones: the run of raw verdicts that won the hold (of the new
    verdict; where only its cause or straggler changed, of the new key). Bins with too few
    samples to judge just before that run, after a pause (the first seconds after it, whose
    windows leave the pause out), belong to the new verdict too: the hold kept the pause
    through them only for want of data."""
    out = []
    prev = 0
    for i in (np.flatnonzero(held[1:] != held[:-1]) + 1).tolist():
        new, old = keys[held[i]], keys[held[i - 1]]
        j = i
        if new[0] != old[0]:
            while j - 1 > prev and v[j - 1] == new[0]:
                j -= 1
            while old[0] == _PAUSED and j - 1 > prev and v[j - 1] == _INSUFFICIENT:
                j -= 1
        else:
            while j - 1 > prev and (v[j - 1], c[j - 1], s[j - 1]) == new:
                j -= 1
        out.append(j)
        prev = j
    return out


def _work_level(g: np.ndarray, th: Thresholds) -> np.ndarray:
    """Per bin, the least busy GPU's duty (-inf where a GPU has no data, or where power is
    known and one is cold beside the hottest: spinning in a collective is not work). A
    pause is over where it stays at busy_duty for recover_s (the job back at full speed:
    its ramp seconds would read as starvation in the windows); a stall on one rank's host
    where it stays at work_duty (the rank back at steady work: real jobs run at 88-92%
    after a save, under busy_duty)."""
    duty, _, _ = bin_duty(g)
    with np.errstate(invalid="ignore", divide="ignore"):
        level = np.where(np.isnan(duty), -np.inf, duty).min(axis=0)
        pw = np.where(g[GI["pn"]] > 0, g[GI["pw"]] / g[GI["pn"]], np.nan)
        top = np.nanmax(np.where(np.isnan(pw), -np.inf, pw), axis=0)
        level[((pw / top) <= th.cold_power_ratio).any(axis=0)] = -np.inf
    return level


def _too_short(log: Log, rate: float, start: float, end: float) -> Timeline:
    """A run shorter than one window: nothing can be said of it."""
    gpus = tuple(sorted(set(log.samples.gpu.tolist())))
    d = Diagnosis(verdict=INSUFFICIENT_DATA, gpus=gpus, confidence=0.0,
                  evidence={k: None for k in EVIDENCE_KEYS},
                  advice="too few samples to judge: log for longer", start=start, end=end)
    lone = int(len(log.samples.time) <= len(gpus))
    return Timeline(segments=[d], jobs=[], start=start, end=end, samples_per_s=rate, lone=lone)


def job_flags(st: Store, rows: list[int], th: Thresholds) -> Job:
    """The job on these store rows: its bins, the live pause tracker's flags per bin
    (pauses.pause_flags) with hindsight's pause rules applied, and what hindsight reads."""
    g, hb = st.view(rows, raw=True)
    duty, n, u = bin_duty(g)
    table = seconds(g, hb, th)
    # A job seen starting in the log (it did not hold its GPUs, then does) starts paused,
    # as it does live; one that holds them from the log's first second was not seen
    # starting: its first seconds are no start-up.
    present = table.present
    starts = present & ~np.concatenate(([True], present[:-1]))
    pause, excl, why = pause_flags(table, th, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        power = N.div(g[GI["pw"]], g[GI["pn"]])
    # (A rank's host starving where its loader workers are known: host_starving's reading.)
    starving = table.starving & ~np.isnan(table.workers)
    dips = one_off_dips(duty, n, th, starving)
    job = H.Job(th, duty, n, u, None, scan(duty, n, u, th), starving, power, dips,
                recovered(dips, len(n), th), _work_level(g, th), pause, excl, why)
    H.apply(job, "pause")
    # Seconds in which the job did not hold its GPUs (before it started, after it ended)
    # are left out of its windows, as the live detector only judges a job once it exists.
    job.excl = job.excl | ~present
    return job

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


def _merge(ds: list[Diagnosis], key: tuple, gpus, start: float, end: float,
           conf: list[float], reason: tuple[str, str]) -> Diagnosis:
    from gpumon.detect.advice import advice
    v, c, s = key
    verdict = VERDICTS[v]
    cause = CAUSES[c] if c >= 0 else None
    strag = gpus[s] if s >= 0 else None
    quoted = _quoted(ds, verdict, cause)
    # The numbers its reason quotes, of the same window; else the middle of its windows'.
    ev = dict(quoted.evidence) if quoted is not None else {k: _middle(ds, k)
                                                            for k in EVIDENCE_KEYS}
    missing = sorted({m for d in ds for m in d.missing})
    base = float(np.mean(conf)) if conf else 0.5
    for m in missing:
        base *= CONFIDENCE_FACTOR.get(m, 1.0)
    return Diagnosis(verdict=verdict, gpus=tuple(gpus), cause=cause, straggler_gpu=strag,
                     confidence=round(min(0.99, base), 3), evidence=ev,
                     advice=advice(verdict, cause, strag), start=start, end=end,
                     missing=tuple(missing), rule=reason[0], because=reason[1])


def _quoted(ds: list[Diagnosis], verdict: str, cause) -> Optional[Diagnosis]:
    """The window whose reason and evidence a segment shows: its middle window that gave its
    verdict (its first windows may still show the verdict it changed from); None if none."""
    same = [d for d in ds if d.verdict == verdict and d.cause == cause]
    return same[len(same) // 2] if same else None


def _reason(ds: list[Diagnosis], key: tuple, job: H.Job, a: int, b: int, th: Thresholds
            ) -> tuple[str, str]:
    """A segment's rule and reason: those of its middle window that gave its verdict (its
    first windows may still show the verdict it changed from); else the hindsight rule that
    gave its bins [a, b) that verdict; else what made it."""
    verdict, cause = VERDICTS[key[0]], CAUSES[key[1]] if key[1] >= 0 else None
    q = _quoted(ds, verdict, cause)
    d = ds[len(ds) // 2]
    if q is not None:
        return q.rule, q.because
    by = H.relabelled(job, a, b, key[0])
    if by is not None:
        return by[0], H.BY_NAME[by[0]].reason(job, by[1], by[2], d)
    if verdict == INSUFFICIENT_DATA:
        return "too_few_samples", "too few samples in these seconds to judge them"
    # The hold kept the verdict before while another had not yet won.
    return held.hold.name, held.hold.because(d.verdict, d.rule, th)


def _middle(ds: list[Diagnosis], k: str) -> Optional[float]:
    """The median of evidence ``k`` over the windows ``ds`` that have it (None: none)."""
    vals = [d.evidence.get(k) for d in ds if d.evidence.get(k) is not None]
    return round(_median(vals), 4) if vals else None


def _median(vals: list) -> float:
    """np.median of a few numbers (no NaN), without its per-call cost: the middle one, or
    the mean of the two middle ones, (a + b) / 2, as np.median computes it."""
    s = sorted(vals)
    k = len(s) // 2
    return float(s[k]) if len(s) % 2 else (float(s[k - 1]) + float(s[k])) / 2


def summary(tl: Timeline) -> dict:
    """The verdict that explains most of the run once start-up and shutdown are set aside."""
    if not tl.segments:
        return {"verdict": INSUFFICIENT_DATA, "cause": None, "gpus": [], "straggler_gpu": None,
                "confidence": 0.0, "fractions": {}}
    main = max(tl.jobs, key=lambda j: (len(j[0]), -j[0][0]))[0] if tl.jobs else \
        tl.segments[0].gpus
    core = _core([d for d in tl.segments if tuple(d.gpus) == tuple(main)])
    frac = _shares(core, lambda d: d.verdict)
    verdict = max(frac, key=lambda k: frac[k])
    of = [d for d in core if d.verdict == verdict]
    cause, strag = max(_shares(of, lambda d: (d.cause, d.straggler_gpu)).items(),
                       key=lambda kv: kv[1])[0]
    dur = sum(_len(d) for d in of)
    conf = sum(d.confidence * _len(d) for d in of) / dur
    return {"verdict": verdict, "cause": cause, "gpus": list(main), "straggler_gpu": strag,
            "confidence": round(conf, 3),
            "fractions": {k: round(v, 4) for k, v in sorted(frac.items(), key=lambda x: -x[1])}}


def _core(segs: list) -> list:
    """The segments without the idle or insufficient ones at either end (start-up, shutdown);
    a log in which the job never worked is judged whole (its idle is the answer)."""
    edge = (IDLE, INSUFFICIENT_DATA)
    a, b = 0, len(segs)
    while a < b and segs[a].verdict in edge:
        a += 1
    while b > a and segs[b - 1].verdict in edge:
        b -= 1
    worked = any(d.verdict not in edge + (PAUSED,) for d in segs[a:b])
    return segs[a:b] if worked else segs


def _len(d: Diagnosis) -> float:
    """A segment's weight: its length (a run of a single sample weighs a little, not 0)."""
    return max(d.end - d.start, 1e-3)


def _shares(segs: list, key) -> dict:
    """Each key's share of the segments' time."""
    total = sum(_len(d) for d in segs)
    out: dict = {}
    for d in segs:
        out[key(d)] = out.get(key(d), 0.0) + _len(d) / total
    return out