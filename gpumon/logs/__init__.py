"""Log formats: every log gpumon reads, as detector columns.

    from gpumon.logs import read_log
    log = read_log("run.csv")        # a Log (logs.log): samples, jobs, host, malformed, notes

``read_log`` takes a path, ``-`` (standard input), a pipe, or a gzip file; it sniffs the
format from the first lines (sniff.py) and hands the clean lines (lines.py: bad bytes, NULs,
over-long lines counted as malformed) to that format's reader: gpumon_csv, nvsmi, dmon, plain,
screen, jsonl (gpumon's JSON lines, through gpumon_csv), dcgm.
Every malformed line, whatever is wrong with it, is skipped and counted in ``log.malformed``;
the rest is read.
"""
from __future__ import annotations

import csv
from typing import Optional

from gpumon.errors import UserError
from gpumon.logs.lines import Lines, clean_chunks, cut_cells, size_text
from gpumon.logs.log import Log, Malformed
from gpumon.logs.memory import small_pages, text_budget
from gpumon.logs.sniff import KINDS, sniff
from gpumon.logs.source import chunks, display_name
from gpumon.logs.table import header

# Lines sniffed for the format.
SNIFF_LINES = 40
# Seconds between the samples of a log without a time column (``interval``): from a
# millisecond to a day (beyond, a log's times would run past any date it can hold).
INTERVAL_RANGE = (1e-3, 86400.0)


def read_log(path: str, interval: Optional[float] = None,
             columns: Optional[dict] = None) -> Log:
    """Any supported log, its kind detected from its first lines. Running out of memory is
    a UserError that says how much of the log had been read. ``columns``: role -> column
    name (columns.parse_option), for a plain log whose columns are named by the user."""
    name = display_name(path)
    if interval is not None and not INTERVAL_RANGE[0] <= interval <= INTERVAL_RANGE[1]:
        raise UserError(f"interval must be from {INTERVAL_RANGE[0]:g} to "
                        f"{INTERVAL_RANGE[1]:g} seconds, not {interval!r}")
    got = Counted(chunks(path))
    try:
        with small_pages():                 # (clean's scratch arrays are large too)
            lines = clean_chunks(got, text_budget(), name)
            return read_lines(lines, name, interval, columns)
    except MemoryError:
        raise UserError(f"{name}: out of memory after reading {size_text(got.bytes)} of it "
                        "(split the log, or analyse a part of it)") from None


class Counted:
    """An iterator of byte chunks that counts the bytes it has handed on."""

    def __init__(self, chunks):
        self.chunks = iter(chunks)
        self.bytes = 0

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        c = next(self.chunks)
        self.bytes += len(c)
        return c


def read_lines(lines: Lines, name: str, interval: Optional[float] = None,
               columns: Optional[dict] = None) -> Log:
    head = lines.head(SNIFF_LINES)
    if not head:
        bad = (f" ({lines.malformed.count} malformed line(s))" if lines.malformed.count
               else "")
        raise UserError(f"{name}: empty, nothing to analyse{bad}")
    kind = sniff(head)
    if kind is None and not columns:
        raise UserError(f"{name}: not a log gpumon can read (want a gpumon CSV or JSON-lines "
                        "log, an nvidia-smi --query-gpu CSV, an nvidia-smi dmon log, "
                        "nvidia-smi's screen logged again and again, a dcgmi dmon log or a CSV "
                        "of DCGM fields, or a CSV or table with a utilization column)"
                        + refused_columns(head))
    if columns and kind not in (None, "plain", "gpumon", "nvidia-smi"):
        raise UserError(f"{name}: --columns names the columns of a CSV or table log, not of "
                        f"a {kind} log")
    # Only the reader of this kind is imported.
    if kind == "nvidia-smi-screen":
        from gpumon.logs import screen
        return screen.read(lines, name)
    if kind == "dmon":
        from gpumon.logs import dmon
        return dmon.read(lines, name, interval)
    if kind == "gpumon-jsonl":
        from gpumon.logs import jsonl
        return jsonl.read(lines, name)
    if kind in ("dcgm-dmon", "dcgm-csv"):
        from gpumon.logs import dcgm
        return dcgm.read(lines, name, kind, interval)
    lines, cut = cut_cells(lines)
    log = _csv(lines, kind, name, interval, columns)
    if cut:
        log.notes.append(f"{cut} row(s) with a quoted cell holding a line break: each cell "
                         "read up to its first line break")
    return log


def _csv(lines: Lines, kind: Optional[str], name: str, interval: Optional[float],
         columns: Optional[dict]) -> Log:
    if kind == "gpumon" and not columns:
        from gpumon.logs import gpumon_csv
        return gpumon_csv.read(lines, header(lines), name)
    if kind == "nvidia-smi" and not columns:
        from gpumon.logs import nvsmi
        return nvsmi.read(lines, header(lines), name, interval)
    from gpumon.logs import plain
    return plain.read(lines, name, columns)


def refused_columns(head: list[str]) -> str:
    """For a refused log with a header: the columns it has, and how to name them."""
    from gpumon.logs.columns import seen
    from gpumon.logs.headers import locate
    form = locate(head)
    try:
        names = form.names if form is not None else next(csv.reader([head[0]]), [])
    except csv.Error:
        return ""
    if len(names) < 2:
        return ""
    return (f"; its columns: {seen(names)}; name them with --columns "
            "time=COLUMN,util=COLUMN[,gpu=..,power=..,mem=..]")


__all__ = ["read_log", "read_lines", "sniff", "Log", "Malformed", "KINDS", "INTERVAL_RANGE"]
