"""A whole log through the detector: per-second verdicts, hysteresis, segments, summary.

The log's samples go into the same per-second bins as live data (gpumon.detect.bins); the
same features and rules judge the window ending at every second (judge_windows: the
windows' bins a batch at a time, the batches side by side on the cores, threads.py), the
rules of hindsight.py relabel what only a whole log shows, and the same Hysteresis, stepped
every second, turns them into a timeline. A few windows of each segment, judged the same
way, give its evidence and reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median
from typing import Optional

import numpy as np

from gpumon.diagnosis import IDLE, INSUFFICIENT_DATA, PAUSED, VERDICTS, Diagnosis
from gpumon.detect import Detector
from gpumon.detect.result import (EVIDENCE_KEYS, advice, discounted, idle_diagnosis,
                                  key_names, make_diagnosis, no_data_diagnosis)
from gpumon.detect.rules import held, idle
from gpumon.detect.thresholds import DEFAULT, Thresholds, bins
from gpumon.logs.log import Log, runs
from gpumon.logs.memory import small_pages
from gpumon.logs.sniff import DRIVER_SAMPLED
from gpumon.analyze import hindsight as H
# Evidence of a segment: the median over at most this many evenly spaced seconds of it.
EVIDENCE_POINTS = 9
_INSUFFICIENT = VERDICTS.index(INSUFFICIENT_DATA)
_PAUSED = VERDICTS.index(PAUSED)


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
    tl.gaps = sorted([g for p in parts for g in p.gaps] + _gaps(parts))
    tl.segments.sort(key=lambda d: (d.start, d.gpus))
    return tl


def _gaps(parts: list[Timeline]) -> list:
    """Where the runs ``parts`` have no samples: between one and the next in time."""
    ordered = sorted(parts, key=lambda p: p.start)
    return [(a.end, b.start) for a, b in zip(ordered, ordered[1:]) if b.start > a.end]


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
                           gaps=q.gaps + _gaps([q, p]),
                           lone=n)
    return out


def _timeline(log: Log, th: Thresholds) -> Timeline:
    rate = _rate(log)
    start, end = float(np.nanmin(log.samples.time)), float(np.nanmax(log.samples.time))
    if end - start < th.window_s:
        return _too_short(log, rate, start, end, th)
    det = Detector(_rate_th(th, rate))
    th = det.th
    samples = log.samples if not log.gpm or "sm_active_ratio" not in log.gpm else replace(
        log.samples, sm_active=log.gpm["sm_active_ratio"])
    st, jobs = det.read_log(samples, log.jobs, log.host, log.kind in DRIVER_SAMPLED,
                            log.pids)
    start = st.bin_time(0)
    end = float(np.nanmax(log.samples.time))
    tl = Timeline(jobs=jobs, start=float(np.nanmin(log.samples.time)), end=end,
                  samples_per_s=rate)
    if not jobs:
        tl.segments = [idle_diagnosis(sorted(st.gpus), start, end, th, whole_log=True)]
        return tl
    for gpus, shared in jobs:
        tl.segments += _job_segments(det, st, gpus, shared, end)
    tl.segments.sort(key=lambda d: (d.start, d.gpus))
    if rate and rate * th.window_s < th.min_samples:
        span = tl.end - tl.start
        every = span / max(rate * span - 1, 1)     # (n samples a GPU: n - 1 intervals)
        tl.segments = [replace(d, advice=_sparse_advice(every, th))
                       if d.verdict == INSUFFICIENT_DATA else d for d in tl.segments]
    return tl


def _rate_th(th: Thresholds, rate: float) -> Thresholds:
    """The thresholds a log sampled ``rate`` times a second per GPU is judged with: under 2,
    windows twice as long, holding the samples a window holds at 2 a second."""
    if rate and rate < 2.0:
        return replace(th, window_s=2 * th.window_s)
    return th


def _sparse_advice(every: float, th: Thresholds) -> str:
    """What to do about a log sampled too sparsely (a sample every ``every`` s) for any
    window to be judged."""
    return (f"one sample every {every:.0f} s is too few to see bursts and gaps (a "
            f"{th.window_s:.0f} s window needs {th.min_samples:.0f}): log every second or "
            "faster (gpumon log, or nvidia-smi --query-gpu=... -l 1)")


def _job_segments(det: Detector, st, gpus, shared: bool, end: float) -> list:
    """One job's segments: its verdict per second, held, in runs (each change dated from
    where the new verdict first appeared), each with the evidence of a few of its windows."""
    th = det.th
    nb = st.nb
    job = det.judge_log(st, gpus, shared, H)
    v, c, s, held, keys = job.v, job.c, job.s, job.held, job.keys
    # Segments: runs of one held verdict. Live, a verdict changes once it has won for
    # hold_s; a log knows when the new one first appeared: date each change from there.
    bounds = [0] + _first_seen(held, keys, v, c, s) + [nb]
    spans = list(zip(bounds[:-1], bounds[1:]))
    # Evidence from windows L bins into each segment (a window's evidence lags its end); a
    # pause's own (paused seconds keep their own windows: hindsight's lead).
    L = min(bins(th.hold_s), nb - 1)
    leads = [0 if keys[held[b - 1]][0] == _PAUSED else L for a, b in spans]
    picks = [np.unique(np.minimum(np.linspace(a, b - 1, min(EVIDENCE_POINTS, b - a))
                                  .round().astype(int) + lead, nb - 1))
             for (a, b), lead in zip(spans, leads)]
    pts = np.unique(np.concatenate(picks))
    rows = [st.rows[x] for x in gpus]
    r_all, f_all = det.judge_windows(st, rows, shared, job, pts, features=True)
    where = {int(p): i for i, p in enumerate(pts)}
    out = []
    for (a, b), pk, lead in zip(spans, picks, leads):
        key = keys[held[b - 1]]      # (held changes at or after a)
        ds = [make_diagnosis(f_all, r_all, where[int(p)], gpus, None, None, th) for p in pk]
        a2, b2 = min(a + lead, nb - 1), min(b + lead, nb)
        same = (v[a2:b2] == key[0]) & (c[a2:b2] == key[1]) & (s[a2:b2] == key[2])
        conf = job.r["confidence"][a2:b2][same].tolist()
        q = _quoted(ds, *key_names(key, gpus)[:2])
        out.append(_merge(ds, q, key, gpus, st.bin_time(a), min(st.bin_time(b), end), conf,
                          _reason(ds, q, key, job, a, b2, th)))
    return out


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
        k = 1 if new[0] != old[0] else 3        # (the verdict; else the whole key)
        while j - 1 > prev and (v[j - 1], c[j - 1], s[j - 1])[:k] == new[:k]:
            j -= 1
        while new[0] != old[0] == _PAUSED and j - 1 > prev and v[j - 1] == _INSUFFICIENT:
            j -= 1
        out.append(j)
        prev = j
    return out


def _too_short(log: Log, rate: float, start: float, end: float, th: Thresholds) -> Timeline:
    """A run shorter than one window: nothing can be said of it."""
    gpus = tuple(sorted(set(log.samples.gpu.tolist())))
    why = f"no run of samples here spans one window ({th.window_s:g} s)"
    d = replace(no_data_diagnosis(gpus, start, end, why),
                advice="too few samples to judge: log for longer")
    lone = int(len(log.samples.time) <= len(gpus))
    return Timeline(segments=[d], jobs=[], start=start, end=end, samples_per_s=rate, lone=lone)


def _merge(ds: list[Diagnosis], q: Optional[Diagnosis], key: tuple, gpus, start: float,
           end: float, conf: list[float], reason: tuple[str, str]) -> Diagnosis:
    verdict, cause, strag = key_names(key, gpus)
    # The numbers its reason quotes, of the same window (_quoted: ``q``); else the middle of
    # its windows'.
    ev = dict(q.evidence) if q is not None else {k: _middle(ds, k) for k in EVIDENCE_KEYS}
    missing = sorted({m for d in ds for m in d.missing})
    base = discounted(float(np.mean(conf)) if conf else 0.5, missing)
    return Diagnosis(verdict=verdict, gpus=tuple(gpus), cause=cause, straggler_gpu=strag,
                     confidence=round(min(0.99, base), 3), evidence=ev,
                     advice=advice(verdict, cause, strag), start=start, end=end,
                     missing=tuple(missing), rule=reason[0], because=reason[1])


def _quoted(ds: list[Diagnosis], verdict: str, cause) -> Optional[Diagnosis]:
    """The window whose reason and evidence a segment shows: its middle window that gave its
    verdict (its first windows may still show the verdict it changed from); None if none."""
    same = [d for d in ds if d.verdict == verdict and d.cause == cause]
    return same[len(same) // 2] if same else None


def _reason(ds: list[Diagnosis], q: Optional[Diagnosis], key: tuple, job: H.Job, a: int,
            b: int, th: Thresholds) -> tuple[str, str]:
    """A segment's rule and reason: those of the window it quotes (_quoted: ``q``); else
    the hindsight rule that gave its bins [a, b) that verdict; else what made it."""
    d = ds[len(ds) // 2]
    if q is not None:
        return q.rule, q.because
    by = H.relabelled(job, a, b, key[0])
    if by is not None:
        return by[0], H.BY_NAME[by[0]].reason(job, by[1], by[2], d)
    if key[0] == _INSUFFICIENT:
        return idle.too_few_samples.name, "too few samples in these seconds to judge them"
    # The hold kept the verdict before while another had not yet won.
    return held.hold.name, held.hold.because(d.verdict, d.rule, th)


def _middle(ds: list[Diagnosis], k: str) -> Optional[float]:
    """The median of evidence ``k`` over the windows ``ds`` that have it (None: none)."""
    vals = [d.evidence.get(k) for d in ds if d.evidence.get(k) is not None]
    return round(float(median(vals)), 4) if vals else None


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