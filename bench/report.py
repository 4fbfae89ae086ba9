"""The benchmark's results as Markdown: tables of figures with their spread, ratios, targets."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from bench.overhead import Measurement


def pct(v: Optional[float]) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3f}" if abs(v) < 0.1 else f"{v:.2f}"


def cpu_cell(m: Measurement) -> str:
    if m.error:
        return "failed"
    lo, hi = m.spread
    return f"{pct(m.mean)} ({pct(lo)}-{pct(hi)})"


def mib(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.0f}"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def overhead_table(ms: Sequence[Measurement]) -> list[str]:
    rows = []
    for m in ms:
        s = m.subject
        term = pct(m.term_mean) if s.tmux and not m.error else ""
        note = m.error or m.note
        rows.append([f"**{s.name}**" if s.ours else s.name, s.setting, s.gpus, cpu_cell(m),
                     term, mib(m.rss_mib), note])
    return table(["program", "setting", "GPUs", "CPU % of one core, mean (min-max)",
                  "+ tmux server %", "peak RSS MiB", "note"], rows)


@dataclass(frozen=True)
class Ratio:
    ours: Measurement
    peer: Measurement

    def value(self, with_term: bool = False) -> Optional[float]:
        a, b = self.ours.mean, self.peer.mean
        if a is None or b is None or b <= 0:
            return None
        if with_term:
            a += self.ours.term_mean or 0.0
            b += self.peer.term_mean or 0.0
        return a / b


def ratio_table(ratios: Sequence[Ratio]) -> list[str]:
    rows = []
    for r in ratios:
        o, p = r.ours.subject, r.peer.subject
        v = r.value()
        both = r.value(with_term=True) if (o.tmux or p.tmux) else None
        rows.append([f"{o.name} {o.setting}", f"{p.name} {p.setting}", o.gpus,
                     "n/a" if v is None else f"{v:.2f}x",
                     "" if both is None else f"{both:.2f}x"])
    return table(["gpumon", "peer", "GPUs", "CPU ratio", "incl. terminal"], rows)


@dataclass(frozen=True)
class Target:
    what: str
    limit: str
    measured: str
    ok: Optional[bool]     # None: not measured

    @property
    def verdict(self) -> str:
        return "not measured" if self.ok is None else ("met" if self.ok else "**missed**")


def target_table(targets: Sequence[Target]) -> list[str]:
    return table(["target", "limit", "measured", ""],
                 [[t.what, t.limit, t.measured, t.verdict] for t in targets])


def frame_table(frames: Sequence[dict]) -> list[str]:
    rows = [[f["gpus"], f"{f['median_ms']:.2f}", f"{f['p90_ms']:.2f}",
             f"{f['build_median_ms']:.2f}", f["frames"]] for f in frames]
    return table(["GPUs", "frame median ms", "p90 ms", "of which view+layout ms", "frames"],
                 rows)
