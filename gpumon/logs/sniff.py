"""Which log a file is, from its first lines: the one place that decides.

- ``gpumon``: a CSV whose header starts ``time,gpu,source``;
- ``nvidia-smi``: a ``--query-gpu`` CSV (a header with ``utilization.gpu``);
- ``dmon``: ``nvidia-smi dmon`` lines under ``# gpu ...`` headers, or without headers
  (an excerpt, ``| grep -v '#'``) when the column count is one of dmon's default sets;
- ``plain``: a CSV with a utilization column (a person's own loop; columns.py tells which),
  its header maybe a comment line or the header row of a whitespace table with a banner
  (headers.py);
- ``nvidia-smi-screen``: nvidia-smi's own screen appended again and again (``nvidia-smi -l 1``);
- ``gpumon-jsonl``: gpumon's JSON-lines log (a line per poll, each a JSON object);
- ``dcgm-dmon``: ``dcgmi dmon`` output (``#Entity`` header lines, rows ``GPU 0 ...``);
- ``dcgm-csv``: a CSV of DCGM fields by short or long name (``GPUTL``, ``DCGM_FI_DEV_GPU_UTIL``)
  with an entity (GPU) or time column.
"""
from __future__ import annotations

import csv
import re
from typing import Optional

from gpumon.logs.columns import choose
from gpumon.logs.headers import locate, sample_rows
from gpumon.logs.values import key

KINDS = ("gpumon", "nvidia-smi", "dmon", "plain", "nvidia-smi-screen", "gpumon-jsonl",
         "dcgm-dmon", "dcgm-csv")
# Kinds whose rows are the driver's utilization samples (gpumon's own logs).
DRIVER_SAMPLED = ("gpumon", "gpumon-jsonl")

# nvidia-smi dmon's default columns (``-s puc``) by driver generation, keyed by their count,
# for a log without its header lines. Options -o D / -o T put date / time columns in front.
DMON_DEFAULTS = {
    9: "gpu pwr temp sm mem enc dec mclk pclk",
    10: "gpu pwr gtemp mtemp sm mem enc dec mclk pclk",
    12: "gpu pwr gtemp mtemp sm mem enc dec jpg ofa mclk pclk",
}
_DMON_CELL = re.compile(r"^(-|\d+(\.\d+)?)$")
_DATE = re.compile(r"^\d{8}$")
_TIME = re.compile(r"^\d\d:\d\d:\d\d$")

def sniff(lines: list[str]) -> Optional[str]:
    """The kind of log these first (non-blank) lines belong to, or None."""
    if not lines:
        return None
    kind = _framed(lines)
    if kind is not None:
        return kind
    first = lines[0].lstrip()
    if _dmon_header(first) or dmon_columns(first) is not None or _dmon_like(first):
        return "dmon"      # (dmon.read refuses a column count it cannot name, with the count)
    form = locate(lines)
    if form is not None:
        return "plain" if choose(form.names, sample_rows(lines, form)).readable else None
    return _csv(lines)


def _dmon_header(first: str) -> bool:
    """dmon's header line: ``# gpu pwr ...`` (or ``# Idx W ...``), no commas."""
    words = first.lstrip("#").lower().split()
    return first.startswith("#") and "," not in first and ("gpu" in words or "idx" in words)


def _csv(lines: list[str]) -> Optional[str]:
    """The kind of a CSV log, from its header (the first line) and first rows."""
    try:
        raw = next(csv.reader([lines[0]]), [])
    except csv.Error:
        return None
    header = [key(h) for h in raw]
    if header[:3] == ["time", "gpu", "source"]:
        return "gpumon"
    if "utilization.gpu" in header:
        return "nvidia-smi"
    if len(raw) >= 2 and choose(raw, sample_rows(lines, None)).readable:
        return "plain"
    return None


def _framed(lines: list[str]) -> Optional[str]:
    """The kinds told by a mark of their own: nvidia-smi's screen (its banner), gpumon's
    JSON-lines log (no other log starts with a JSON object), a DCGM log (a ``#Entity``
    header line of ``dcgmi dmon``, or a CSV header naming DCGM fields and an entity or time
    column)."""
    if any("NVIDIA-SMI" in x and "Driver Version" in x for x in lines):
        return "nvidia-smi-screen"
    first = lines[0].lstrip()
    if first.startswith("{"):
        return "gpumon-jsonl"
    if any("#Entity" in x for x in lines):
        return "dcgm-dmon"
    from gpumon.logs.dcgm import csv_columns
    return "dcgm-csv" if csv_columns(lines[0]) is not None else None


def _dmon_like(line: str) -> bool:
    """Whitespace-separated numbers, the first a GPU index: dmon output, headers cut off."""
    words = line.split()
    return (len(words) >= 4 and "," not in line and words[0].isdigit()
            and all(_DMON_CELL.match(w) or _TIME.match(w) for w in words))


def dmon_columns(line: str) -> Optional[list[str]]:
    """For a dmon data line without a header: the column names its count implies (dmon's
    default set for that count, after any date and time columns), or None."""
    words = line.split()
    front = []
    if words and _DATE.match(words[0]):
        front.append("date")
        words = words[1:]
    if words and _TIME.match(words[0]):
        front.append("time")
        words = words[1:]
    if len(words) not in DMON_DEFAULTS or not all(_DMON_CELL.match(w) for w in words):
        return None
    if not words[0].isdigit():
        return None
    return front + DMON_DEFAULTS[len(words)].split()
