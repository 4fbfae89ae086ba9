"""Log formats: every log gpumon reads, as detector columns.

    from gpumon.logs import read_log
    log = read_log("run.csv")        # a Log (logs.log): samples, jobs, host, malformed, notes

``read_log`` takes a path, ``-`` (standard input), a pipe, or a gzip file; it sniffs the
format from the first lines (sniff.py) and hands the clean lines (lines.py: bad bytes, NULs,
over-long lines counted as malformed) to that format's reader: gpumon_csv, nvsmi, dmon, plain,
screen.
Every malformed line, whatever is wrong with it, is skipped and counted in ``log.malformed``;
the rest is read.
"""
from __future__ import annotations

from typing import Optional

from gpumon.errors import UserError
from gpumon.logs.arrow import reading_pool
from gpumon.logs.lines import Lines, clean
from gpumon.logs.log import Log, Malformed
from gpumon.logs.memory import small_pages
from gpumon.logs.sniff import KINDS, sniff
from gpumon.logs.source import display_name, read_bytes
from gpumon.logs.table import header

# Lines sniffed for the format.
SNIFF_LINES = 40


def read_log(path: str, interval: Optional[float] = None) -> Log:
    """Any supported log, its kind detected from its first lines."""
    name = display_name(path)
    with small_pages():                 # (clean's scratch arrays are large too)
        lines = clean(read_bytes(path))
        with reading_pool():
            return read_lines(lines, name, interval)


def read_lines(lines: Lines, name: str, interval: Optional[float] = None) -> Log:
    head = lines.head(SNIFF_LINES)
    if not head:
        bad = (f" ({lines.malformed.count} malformed line(s))" if lines.malformed.count
               else "")
        raise UserError(f"{name}: empty, nothing to analyse{bad}")
    kind = sniff(head)
    if kind is None:
        raise UserError(f"{name}: not a log gpumon can read (want a gpumon CSV, an nvidia-smi "
                        "--query-gpu CSV, an nvidia-smi dmon log, nvidia-smi's screen logged "
                        "again and again, or a CSV with time or GPU and utilization columns)")
    # Only the reader of this kind is imported.
    if kind == "nvidia-smi-screen":
        from gpumon.logs import screen
        return screen.read(lines, name)
    if kind == "dmon":
        from gpumon.logs import dmon
        return dmon.read(lines, name, interval)
    names = header(lines)
    if kind == "gpumon":
        from gpumon.logs import gpumon_csv
        return gpumon_csv.read(lines, names, name)
    if kind == "nvidia-smi":
        from gpumon.logs import nvsmi
        return nvsmi.read(lines, names, name, interval)
    from gpumon.logs import plain
    return plain.read(lines, names, name)


__all__ = ["read_log", "read_lines", "sniff", "Log", "Malformed", "KINDS"]
