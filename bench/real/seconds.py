"""Second by second on the real logs whose labels hold one rank's stalls (a rank-0 save while
the other ranks wait in the next collective): the physics of each second against the verdict
`gpumon analyze` gives it.

The labels of bench/real/manifest.toml are shares of the whole run; this reads the samples
themselves, and scores `gpumon analyze` and the live detector fed the same samples second by
second. A second is a *stall* where one GPU ran under 30% while every other GPU was at 95% or
more (they spin in the collective), *work* where every GPU was at 80% or more; other seconds
(a save starting or ending inside the second, start-up) are not scored. Each GPU's utilization is its mean over the samples of the second.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

STALL_BELOW = 30.0      # % (the module's figures)
SPIN_FROM = 95.0
WORK_FROM = 80.0


def applies(entry: dict) -> bool:
    """A log labelled with one rank's stalls: sync_stall among its expected shares."""
    return entry.get("gpus", 1) >= 2 and "sync_stall" in (entry.get("expected_shares") or {})


def physics(samples) -> dict[int, str]:
    """{second: "stall" | "work"} of the seconds the physics decides (see the module)."""
    t = np.floor(samples.time).astype(np.int64)
    gpus = np.unique(samples.gpu)
    keep = ~np.isnan(samples.util)
    sec0 = int(t[keep].min())
    n_s = int(t[keep].max()) - sec0 + 1
    total = np.zeros((len(gpus), n_s))
    count = np.zeros((len(gpus), n_s))
    gi = np.searchsorted(gpus, samples.gpu[keep])
    np.add.at(total, (gi, t[keep] - sec0), samples.util[keep])
    np.add.at(count, (gi, t[keep] - sec0), 1)
    seen = (count > 0).all(axis=0)
    u = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    srt = np.sort(u, axis=0)
    stall = seen & (srt[0] < STALL_BELOW) & (srt[1] >= SPIN_FROM)
    work = seen & (srt[0] >= WORK_FROM)
    return {sec0 + i: ("stall" if stall[i] else "work")
            for i in np.flatnonzero(stall | work).tolist()}


def live_verdicts(samples) -> dict[int, str]:
    """{second: verdict} of the live detector (Detector) fed the log's samples a
    second at a time, as `gpumon watch` would have judged the job had it run beside it
    (without host counters or process lists: the log has neither)."""
    from gpumon.detect import Detector
    from gpumon.samples import GpuSample, Tick

    def num(a, i):
        return None if a is None or np.isnan(a[i]) else float(a[i])

    det = Detector()
    out: dict[int, str] = {}
    order = np.argsort(samples.time, kind="stable")
    secs = np.floor(samples.time[order]).astype(np.int64)
    cuts = np.flatnonzero(np.diff(secs)) + 1
    for part in np.split(order, cuts):
        gs = tuple(GpuSample(time=float(samples.time[i]), gpu=int(samples.gpu[i]),
                             source="replay", util_gpu_pct=num(samples.util, i),
                             mem_used_mib=num(samples.mem, i), power_w=num(samples.power, i),
                             power_limit_w=num(samples.power_limit, i))
                   for i in part.tolist())
        sec = int(np.floor(samples.time[part[0]]))
        ds = det.update(Tick(time=sec + 1.0, gpus=tuple(sorted(gs, key=lambda g: g.gpu))))
        if ds:
            out[sec] = ds[0].verdict        # (the verdict once this second is in)
    return out


def live_shares(samples) -> dict[str, float]:
    """Each verdict's share of the live detector's seconds (live_verdicts), the idle and
    insufficient_data seconds at either end set aside as analyze's summary sets them aside
    (all of them kept where no work verdict was said in between: only pauses)."""
    lv = live_verdicts(samples)
    seq = [lv[k] for k in sorted(lv)]
    edge = ("idle", "insufficient_data")
    a, b = 0, len(seq)
    while a < b and seq[a] in edge:
        a += 1
    while b > a and seq[b - 1] in edge:
        b -= 1
    core = seq[a:b]
    if not any(v not in edge + ("paused",) for v in core):
        core = seq
    n = len(core)
    out: dict[str, float] = {}
    for v in core:
        out[v] = out.get(v, 0.0) + 1.0 / n
    return out


def verdicts(timeline) -> dict[int, str]:
    """{second: verdict} from the timeline's segments."""
    out: dict[int, str] = {}
    for d in timeline.segments:
        for s in range(int(np.floor(d.start)), int(np.ceil(d.end))):
            out[s] = d.verdict
    return out


def score(samples, timeline) -> tuple[Counter, Counter]:
    """Seconds per (physics, verdict): `gpumon analyze`'s, the live detector's."""
    ph = physics(samples)
    return tuple(Counter((p, v[s]) for s, p in ph.items() if s in v)
                 for v in (verdicts(timeline), live_verdicts(samples)))


def table(rows: list[tuple[str, tuple[Counter, Counter]]]) -> list[str]:
    """Markdown: per log and path (analyze, live), stall seconds read sync_stall and work
    seconds read busy."""
    out = ["| log | path | stall seconds read sync_stall | work seconds read busy | "
           "work seconds read sync_stall | other |",
           "|---|---|---:|---:|---:|---|"]
    tot: tuple[Counter, Counter] = (Counter(), Counter())
    for name, cs in rows:
        for k, (path, c) in enumerate(zip(PATHS, cs)):
            tot[k].update(c)
            out.append(_row(name, path, c))
    out += [_row("**all**", path, c) for path, c in zip(PATHS, tot)]
    return out


PATHS = ("analyze", "live")


def _row(name: str, path: str, c: Counter) -> str:
    st = sum(n for (p, _), n in c.items() if p == "stall")
    wk = sum(n for (p, _), n in c.items() if p == "work")
    main = {("stall", "sync_stall"), ("work", "busy"), ("work", "sync_stall")}
    other = ", ".join(f"{p} as {v}: {n}" for (p, v), n in sorted(c.items()) if (p, v) not in main)
    return (f"| {name} | {path} | {c[('stall', 'sync_stall')]}/{st} | "
            f"{c[('work', 'busy')]}/{wk} | "
            f"{c[('work', 'sync_stall')]} | {other or '-'} |")
