"""`gpumon analyze`: offline diagnosis of gpumon, nvidia-smi --query-gpu, nvidia-smi dmon and
plain time/gpu/utilization CSV logs, through the live detector's bins, features and rules.

    from gpumon.analyze import analyze_file
    log, tl = analyze_file("run.csv")          # Log, Timeline
    to_json(tl) / to_text(log, tl)          # gpumon.report

The readers are numpy and the standard library only; neither pyarrow nor pandas is used.
"""
from __future__ import annotations

from typing import Optional

from gpumon.errors import UserError
from gpumon.logs.log import Log, Malformed
from gpumon.logs import read_log, sniff
from gpumon.analyze.timeline import Timeline, summary, timeline
from gpumon.detect.thresholds import DEFAULT, Thresholds


def analyze_file(path: str, interval: Optional[float] = None,
                 th: Thresholds = DEFAULT, columns: Optional[dict] = None
                 ) -> tuple[Log, Timeline]:
    """``columns``: role -> column name (``{"time": "elapsed_sec", "util": "gpu_util_pct"}``)
    for a CSV or table log whose columns gpumon does not tell by itself."""
    log = read_log(path, interval, columns)
    if log.empty:
        bad = (f" ({log.malformed.count} malformed line(s), the first at line "
               f"{log.malformed.first_line})" if log.malformed.count else "")
        raise UserError(f"{path}: no usable samples (no GPU utilization values){bad}")
    try:
        return log, timeline(log, th)
    except MemoryError:
        raise UserError(f"{path}: out of memory analysing its {len(log.samples.time):,} "
                        "samples (split the log, or analyse a part of it)") from None


__all__ = ["analyze_file", "read_log", "sniff", "timeline", "summary", "Log", "Malformed",
           "Timeline"]
