"""``nvidia-smi dmon`` logs: whitespace columns under ``#`` header lines whose names vary by
driver (``pwr temp`` or ``pwr gtemp mtemp``, ``jpg ofa`` on newer ones) and repeat every
screenful; ``-`` is missing. Without header lines (an excerpt, ``grep -v '#'``) the columns
are dmon's default set for their count (sniff.DMON_DEFAULTS), and the log says so. Without a
time column (``-o T``) samples are ``interval`` apart."""
from __future__ import annotations

import datetime as dt
import math
from typing import Optional

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.errors import UserError
from gpumon.logs.lines import Lines
from gpumon.logs.log import MAX_GPU_INDEX, Log, finish
from gpumon.logs.sniff import dmon_columns

# dmon column (lower case) -> detector column.
FIELDS = {"sm": "util", "pwr": "power", "pclk": "clock", "fb": "mem"}


def read(lines: Lines, path: str, interval: Optional[float]) -> Log:
    step = interval or 1.0
    names: Optional[list[str]] = None
    notes: list[str] = []
    rows: list[tuple] = []
    where: list[int] = []
    count: dict[int, int] = {}
    nrows = 0
    for k, line in enumerate(lines.text_lines()):
        s = line.strip()
        if s.startswith("#"):
            low = s.lstrip("#").lower().split()
            if "gpu" in low:             # the names line ("# Idx W C ..." is the units line)
                names = low
            continue
        if not s:
            continue
        nrows += 1
        if names is None:
            names = dmon_columns(s)
            if names is None:
                raise UserError(f"{path}: no nvidia-smi dmon header line (# gpu ...) and "
                                f"{len(s.split())} columns, not one of dmon's default sets "
                                "(9, 10 or 12 after date and time): cannot tell which is which")
            notes.append(f"no dmon header: columns taken from their count as "
                         f"'{' '.join(names)}' (dmon's default set)")
        row = _row(s.split(), names, count, step)
        if row is None:
            lines.malformed.add(int(lines.line_of([k])[0]))
            continue
        rows.append(row)
        where.append(k)
    arr = np.array(rows, dtype=float).reshape(-1, 6)
    samples = SampleCols(arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3], None,
                         arr[:, 4], None, None, arr[:, 5], None)
    log = Log(path, "dmon", samples, None, None, {}, lines.malformed, nrows, notes)
    kept = np.array(where, dtype=np.int64)
    return finish(log, np.zeros(len(rows), bool), lambda r: lines.line_of(kept[r]))


def _row(parts: list[str], names: list[str], count: dict, step: float) -> Optional[tuple]:
    if len(parts) != len(names):
        return None
    rec = dict(zip(names, parts))
    try:
        g = int(rec.get("gpu", rec.get("idx")))
        if not 0 <= g <= MAX_GPU_INDEX:
            return None
        vals = [_val(rec.get(c)) for c in ("sm", "pwr", "pclk", "fb")]
        if "time" in rec:
            t = _time(rec.get("date"), rec["time"])
        else:
            k = count.get(g, 0)
            count[g] = k + 1
            t = k * step
    except (ValueError, TypeError, OverflowError):
        return None
    return (t, g, *vals)


def _val(x: Optional[str]) -> float:
    if x is None or x == "-":
        return math.nan
    return float(x)


def _time(date: Optional[str], t: str) -> float:
    hh, mm, ss = t.split(":")
    secs = int(hh) * 3600 + int(mm) * 60 + float(ss)
    if date:
        d = dt.datetime.strptime(date, "%Y%m%d").replace(tzinfo=dt.timezone.utc)
        return d.timestamp() + secs
    return secs
