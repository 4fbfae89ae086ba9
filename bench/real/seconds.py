"""Second by second on the real logs whose labels hold one rank's stalls (a rank-0 save while
the other ranks wait in the next collective): the physics of each second against the verdict
`gpumon analyze` gives it.

The labels of bench/real/manifest.toml are shares of the whole run; this reads the samples
themselves. A second is a *stall* where one GPU ran under STALL_BELOW % while every other GPU
was at SPIN_FROM % or more (they spin in the collective), *work* where every GPU was at
WORK_FROM % or more; other seconds (a save starting or ending inside the second, start-up)
are not scored. Each GPU's utilization is its mean over the samples of the second.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

STALL_BELOW = 30.0
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


def verdicts(timeline) -> dict[int, str]:
    """{second: verdict} from the timeline's segments."""
    out: dict[int, str] = {}
    for d in timeline.segments:
        for s in range(int(np.floor(d.start)), int(np.ceil(d.end))):
            out[s] = d.verdict
    return out


def score(samples, timeline) -> Counter:
    """Seconds per (physics, verdict)."""
    v = verdicts(timeline)
    return Counter((p, v[s]) for s, p in physics(samples).items() if s in v)


def table(rows: list[tuple[str, Counter]]) -> list[str]:
    """Markdown: per log, stall seconds read sync_stall and work seconds read busy."""
    out = ["| log | stall seconds read sync_stall | work seconds read busy | "
           "work seconds read sync_stall | other |",
           "|---|---:|---:|---:|---|"]
    tot: Counter = Counter()
    for name, c in rows:
        tot.update(c)
        out.append(_row(name, c))
    out.append(_row("**all**", tot))
    return out


def _row(name: str, c: Counter) -> str:
    st = sum(n for (p, _), n in c.items() if p == "stall")
    wk = sum(n for (p, _), n in c.items() if p == "work")
    main = {("stall", "sync_stall"), ("work", "busy"), ("work", "sync_stall")}
    other = ", ".join(f"{p} as {v}: {n}" for (p, v), n in sorted(c.items()) if (p, v) not in main)
    return (f"| {name} | {c[('stall', 'sync_stall')]}/{st} | {c[('work', 'busy')]}/{wk} | "
            f"{c[('work', 'sync_stall')]} | {other or '-'} |")
