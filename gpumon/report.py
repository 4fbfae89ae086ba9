"""`gpumon analyze` output: a Timeline (gpumon.analyze) as JSON and as text."""
from __future__ import annotations

import datetime as dt
from typing import Optional

from gpumon.diagnosis import evidence_text
from gpumon.logs.columns import EPOCH_MIN
from gpumon.logs.log import Log
from gpumon.analyze.timeline import Timeline, summary

def to_json(tl: Timeline, log: Optional[Log] = None) -> dict:
    out = {
        "summary": summary(tl),
        "segments": [{"start": round(d.start, 3), "end": round(d.end, 3), "verdict": d.verdict,
                      "cause": d.cause, "gpus": list(d.gpus), "straggler_gpu": d.straggler_gpu,
                      "confidence": d.confidence, "rule": d.rule, "because": d.because,
                      "evidence": d.evidence, "advice": d.advice, "missing": list(d.missing)}
                     for d in tl.segments],
        "gaps": [{"start": round(a, 3), "end": round(b, 3)} for a, b in tl.gaps],
    }
    if log is not None:
        out["malformed_lines"] = log.malformed.count
        out["notes"] = list(log.notes)
    return out


def _clock(t: Optional[float], t0: float) -> str:
    """Local wall-clock time (the dashboard's convention; the report names the zone once)."""
    if t is None:
        return "?"
    if t0 > EPOCH_MIN:
        return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")
    return f"{t - t0:7.0f}s"


def _zone_line(t0: float) -> str:
    """Where the timeline's clock starts, and in which zone its times are."""
    if t0 <= EPOCH_MIN:
        return "  times: seconds since the first sample"
    start = dt.datetime.fromtimestamp(t0).astimezone()
    return (f"  times: local time, {start.tzname()} (UTC{start.strftime('%z')[:3]}:"
            f"{start.strftime('%z')[3:]}); the log starts {start.strftime('%Y-%m-%d %H:%M:%S')}")


# Gaps listed one by one in the text timeline; more are summed up in one line (a log sampled
# every few minutes has one between every two samples; --format json lists each).
MAX_GAP_ROWS = 10
WEEK_S = 7 * 86400


def _dur(s: float) -> str:
    s = int(round(s))
    if s >= WEEK_S:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def to_text(log: Log, tl: Timeline, explain: bool = False) -> str:
    """The report; ``explain``: each segment of the timeline also says which rule decided it
    and why."""
    sm = summary(tl)
    t0 = tl.start or 0.0
    return "\n".join(_header(log, tl, sm) + _verdict(tl, sm) + [_zone_line(t0), "timeline:"]
                     + _timeline_rows(tl, t0, explain))


def _header(log: Log, tl: Timeline, sm: dict) -> list[str]:
    """What was read: the file, its kind, its span (and runs), GPUs, rate, notes, bad lines."""
    span = (tl.end or 0) - (tl.start or 0)
    gap = sum(b - a for a, b in tl.gaps)
    gpus = ",".join(str(g) for g in sm["gpus"]) or "-"
    length = _dur(span) if not tl.gaps else (
        f"{_dur(span - gap)} of samples in {len(tl.gaps) + 1} runs over {_dur(span)}")
    what = f"{log.kind} log" + (" of SIMULATED GPUs" if log.simulated else "")
    out = [f"{log.path}: {what}, {length}, GPUs {gpus}, {_rate(tl.samples_per_s)}"]
    out += [f"  note: {n}" for n in log.notes] + _many_gaps(tl.gaps)
    if log.malformed.count:
        line = (f", the first at line {log.malformed.first_line}"
                if log.malformed.first_line is not None else "")
        out.append(f"  {log.malformed.count} malformed line(s) skipped{line}")
    return out


def _many_gaps(gaps: list) -> list[str]:
    """Gaps too many to list in the timeline, in one line."""
    if len(gaps) <= MAX_GAP_ROWS:
        return []
    total, longest = sum(b - a for a, b in gaps), max(b - a for a, b in gaps)
    return [f"  no samples in {len(gaps):,} stretches ({_dur(total)} in all, the longest "
            f"{_dur(longest)}): no verdict there (--format json lists them)"]


def _rate(rate: Optional[float]) -> str:
    """Samples a second per GPU; under one in ten seconds, the seconds between them."""
    rate = rate or 0.0
    if 0 < rate < 0.1:
        return f"one sample every {1 / rate:,.0f} s per GPU"
    return f"{rate:.1f} samples/s per GPU"


def headline(sm: dict) -> str:
    """The summary's verdict, cause and straggler in words (the report's and the plot's)."""
    head = sm["verdict"] + (f" ({sm['cause']})" if sm["cause"] else "")
    if sm["straggler_gpu"] is not None:
        head += f", straggler GPU {sm['straggler_gpu']}"
    return head


def _verdict(tl: Timeline, sm: dict) -> list[str]:
    """The summary verdict, its shares of time, and its longest segment's reason."""
    out = [f"verdict: {headline(sm)}, confidence {sm['confidence']:.2f}"]
    fr = ", ".join(f"{k} {v:.0%}" for k, v in sm["fractions"].items())
    if fr:
        out.append(f"  time: {fr}")
    main = [d for d in tl.segments if d.verdict == sm["verdict"] and d.cause == sm["cause"]
            and d.straggler_gpu == sm["straggler_gpu"] and list(d.gpus) == sm["gpus"]]
    if not main:
        return out
    return out + _why(max(main, key=lambda x: x.end - x.start))


def _why(d) -> list[str]:
    """A segment's rule and reason, evidence, advice and missing signals."""
    ev = evidence_text(d.evidence)
    out = ([f"  rule {d.rule}: {d.because}"] if d.rule else []) + (
        [f"  evidence: {ev}"] if ev else []) + [f"  advice: {d.advice}"]
    if d.missing:
        out.append(f"  missing signals: {', '.join(d.missing)}")
    return out


def _timeline_rows(tl: Timeline, t0: float, explain: bool) -> list[str]:
    """Segments and gaps in time order."""
    gaps = tl.gaps if len(tl.gaps) <= MAX_GAP_ROWS else []     # (else summed in _header)
    rows = [(a, f"  {_clock(a, t0)} - {_clock(b, t0)}  {_dur(b - a):>7}  no samples "
                "(logging stopped): no verdict") for a, b in gaps]
    for d in tl.segments:
        name = d.verdict + (f" ({d.cause})" if d.cause else "")
        if d.straggler_gpu is not None:
            name += f" straggler {d.straggler_gpu}"
        gp = ",".join(map(str, d.gpus))
        line = (f"  {_clock(d.start, t0)} - {_clock(d.end, t0)}  {_dur(d.end - d.start):>7}"
                f"  GPUs {gp:<8} {name}  [{d.confidence:.2f}]")
        if explain and d.rule:
            line += f"\n      rule {d.rule}: {d.because}"
        rows.append((d.start, line))
    return [r for _, r in sorted(rows, key=lambda x: x[0])]
