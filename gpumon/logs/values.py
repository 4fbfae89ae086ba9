"""Text cells to numbers, as logs write them: values with units (``92 %``, ``150.23 W``),
missing markers (``[N/A]``, ``-``), clock-event masks in hex, date-times and epoch seconds.
Each function takes a column of cells (table.Cells) and returns (values with NaN for
missing, bad-cell mask). The usual cells are read by numpy, every row at once (``decimals``,
``_hex``, stamps.fixed_stamps); a cell they do not read is read by Python, once per distinct
text.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Callable, Optional

import numpy as np

from gpumon.logs.stamps import fixed_stamps
from gpumon.logs.lines import Lines
from gpumon.logs.log import Malformed
from gpumon.logs.table import Cells, read_cells

# A decimal number, as nvidia-smi and people's own loops write them (units already stripped),
# or a float's own words for what is none (nan, inf).
NUMBER_RE = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*"
                       r"|\s*[-+]?(nan|inf|infinity)\s*", re.IGNORECASE)


def key(name: str) -> str:
    """'utilization.gpu [%]' -> 'utilization.gpu'."""
    return re.sub(r"\s*[\[(].*?[\])]\s*$", "", name.strip()).strip().lower()


MISSING = ("", "-", "n/a", "[n/a]", "na", "nan", "none", "[not supported]", "[unknown error]",
            "[insufficient permissions]", "[gpu is lost]", "[requested functionality has "
            "been deprecated]", "not supported")
# The characters units are made of ("92 %", "150.23 W", "1024 MiB", "1410 MHz"), taken off
# the end of a value.
_UNIT_CHARS = " %WMiBHzKkGCsJm/"
_AFTER_NUMBER = np.zeros(256, bool)         # what may follow a number: its unit, whitespace
_AFTER_NUMBER[list(_UNIT_CHARS.encode()) + [0, 9, 11, 12, 13]] = True
_NOTHING = np.zeros(256, bool)              # (0: past the cell's end)
_NOTHING[0] = True
# Widest cell read by numpy; most digits a number read by numpy may have (exact as an integer
# in a double, so that dividing by a power of ten rounds as parsing the decimal does).
WIDE = 32
MAX_DIGITS = 15
_POW10 = 10.0 ** np.arange(WIDE + 1)
_HEX = np.full(256, 16, np.uint64)
for _c in b"0123456789abcdefABCDEF":
    _HEX[_c] = int(chr(_c), 16)
_HEX8 = _HEX.astype(np.uint8)


def decimals(cells: Cells, units: bool) -> tuple[np.ndarray, np.ndarray]:
    """(values, read): cells written ``[-+]digits[.digits]`` (``units``: then a unit), as the
    double nearest the decimal; the others not read (NaN)."""
    got = _aligned(cells, units)
    if got is not None:
        return got, np.ones(len(cells), bool)
    n = len(cells)
    w = min(int(cells.length.max()), WIDE) if n else 0
    ch = cells.chars(w)
    after = _AFTER_NUMBER if units else _NOTHING
    acc, ndig, frac = np.zeros(n), np.zeros(n, np.int8), np.zeros(n, np.int8)
    lead, point, other = np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    neg = ch[0] == 45 if w else np.zeros(n, bool)
    for k in range(w):
        c = ch[k]
        if not lead.any():              # past every number: only what follows is checked
            other |= ~after[c]
            continue
        d = c - np.uint8(48)
        digit = d < 10
        dot = c == 46
        lead &= digit | dot | ((neg | (c == 43)) if k == 0 else False)
        dg = lead & digit
        acc = np.where(dg, acc * 10 + d, acc)
        ndig += dg
        ld = lead & dot
        other |= ld & point             # (a second decimal point)
        point |= ld
        frac += dg & point
        other |= ~(lead | after[c])
    ok = (cells.length <= WIDE) & (ndig >= 1) & (ndig <= MAX_DIGITS) & ~other
    v = acc / _POW10[frac]
    v = np.where(neg, -v, v)
    v[~ok] = np.nan
    return v, ok


def _aligned(cells: Cells, units: bool) -> Optional[np.ndarray]:
    """decimals() of a column written in one layout (what a logger's format string writes):
    every cell digits, as many after a decimal point (or none) and the same unit; digits
    right-aligned, every cell is read at once. None when the column is not so."""
    n, length = len(cells), cells.length
    if n == 0 or int(length.max()) > WIDE:
        return None
    first = cells.take(np.zeros(1, np.int64)).texts()[0]
    number = first.rstrip(_UNIT_CHARS + "\t\v\f\r") if units else first
    unit, frac = len(first) - len(number), (number[::-1].find(".") if "." in number else -1)
    digits = length - unit
    width = int(digits.max())
    if width - (frac >= 0) > MAX_DIGITS or int(digits.min()) < frac + 2:
        return None
    if unit:
        tail = Cells(cells.buf, cells.start + digits, length).places(unit)
        if not (tail == tail[:, :1]).all():
            return None
    m = Cells(cells.buf, cells.start + digits - width, length).places(width)
    right = np.arange(width - 1, -1, -1)            # digits to the right of each place
    if frac >= 0:
        dot = width - frac - 1
        if not (m[dot] == 46).all():
            return None
        m[dot] = 48
        right = right - (right > frac)
    m -= np.uint8(48)
    np.copyto(m, 0, where=np.arange(width)[:, None] < width - digits)    # (before a cell)
    if not (m < 10).all():
        return None
    return (10.0 ** right @ m) / _POW10[max(frac, 0)]


def _by_text(cells: Cells, rows: np.ndarray, fn: Callable, v: np.ndarray,
             flag: np.ndarray) -> None:
    """``v[rows], flag[rows] = fn(text)`` for the cells ``rows``, ``fn`` called once per
    distinct text."""
    if not len(rows):
        return
    texts, codes = cells.take(rows).distinct()
    got = [fn(t) for t in texts]
    v[rows] = np.array([g[0] for g in got], float)[codes]
    flag[rows] = np.array([g[1] for g in got], bool)[codes]


def _missing(text: str) -> bool:
    return text.lower() in MISSING or text.startswith("[")


def _num_text(text: str) -> tuple[float, bool]:
    """(value, bad) of one trimmed cell (see num)."""
    if _missing(text):
        return math.nan, False
    s = text.rstrip(_UNIT_CHARS)
    if NUMBER_RE.fullmatch(s):
        return float(s), False              # ("-nan", "inf": a float's own words)
    return math.nan, True


def num(cells: Cells) -> tuple[np.ndarray, np.ndarray]:
    """Numbers, with or without their unit -> (float values, NaN missing; bad-value mask).
    Missing: empty, a marker of MISSING, or ``[...]``."""
    one = cells.one_text()
    if one is not None:             # (a clock, a limit: one text on every row)
        v, bad = num(one)
        return np.repeat(v, len(cells)), np.repeat(bad, len(cells))
    v, ok = decimals(cells, units=True)
    bad = np.zeros(len(cells), bool)
    _by_text(cells, np.flatnonzero(~ok), _num_text, v, bad)
    return v, bad


def _hex(cells: Cells) -> tuple[np.ndarray, np.ndarray]:
    """(values, read): cells written ``0x`` and 1 to 16 hex digits."""
    n = len(cells)
    if n and (cells.length == cells.length[0]).all() and 3 <= int(cells.length[0]) <= 18:
        m = cells.places(int(cells.length[0]))         # (one width: every digit at once)
        h = np.zeros((16, n), np.uint8)                 # the digits, right-aligned
        h[18 - len(m):] = _HEX8[m[2:]]
        ok = (m[0] == 48) & ((m[1] | 32) == 120) & (h < 16).all(0)
        packed = (h[0::2] << 4) | (h[1::2] & 15)       # two digits a byte, big-endian
        v = np.ascontiguousarray(packed.T).view(">u8")[:, 0].astype(float)
        v[~ok] = np.nan
        return v, ok
    w = min(int(cells.length.max()), 18) if n else 0
    if w < 3:
        return np.full(n, np.nan), np.zeros(n, bool)
    ch = cells.chars(w)
    h = _HEX[ch]
    ok = ((ch[0] == 48) & ((ch[1] | 32) == 120) & (cells.length >= 3) & (cells.length <= 18)
          & ~((h[2:] == 16) & (ch[2:] != 0)).any(0))
    acc = np.zeros(n, np.uint64)
    for k in range(2, w):
        acc = np.where(ch[k] != 0, acc * np.uint64(16) + h[k], acc)
    v = acc.astype(float)
    v[~ok] = np.nan
    return v, ok


def _hex_text(text: str) -> tuple[float, bool]:
    if _missing(text):
        return math.nan, False
    try:
        return (float(int(text, 16)) if text.lower().startswith("0x") else float(text)), False
    except ValueError:
        return math.nan, True


def hex_or_num(cells: Cells) -> tuple[np.ndarray, np.ndarray]:
    """Clock event reasons: '0x0000000000000004' or a number."""
    v, ok = _hex(cells)
    rest = np.flatnonzero(~ok)
    if len(rest):
        dv, dok = decimals(cells.take(rest), units=False)
        v[rest[dok]] = dv[dok]
        ok[rest[dok]] = True
    bad = np.zeros(len(cells), bool)
    _by_text(cells, np.flatnonzero(~ok), _hex_text, v, bad)
    return v, bad


def times(cells: Cells, numeric: Optional[bool] = None
          ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(epoch seconds, bad cells, whether read as numbers): numbers where every cell is one
    (``numeric`` None), else date-times ('2024/01/15 10:00:01.123', ISO 8601);
    ``numeric`` False: date-times."""
    v = _numbers(cells) if numeric is None else None
    if v is not None:
        return v, np.isnan(v), True
    return (*_stamps(cells), False)


def time_columns(cells: Cells) -> dict:
    """A block's times (``time``), bad times (``time_bad``) and whether they were read as
    numbers (``time_numeric``: the block's summary, batches.Columns.extra), for
    table.read_cells; see whole_times."""
    t, bad, numeric = times(cells)
    return {"time": t, "time_bad": bad, "time_numeric": numeric}


def whole_times(lines: Lines, names: list[str], name: str, cols) -> None:
    """times() of the whole column in ``cols`` (batches.Columns of time_columns' blocks): where
    some blocks' times were all numbers and others' not, the column is not numbers, and every
    block is read again as date-times (its rows counted once: the malformed lines are not)."""
    if len(set(cols.extra.get("time_numeric", []))) < 2:
        return

    def dates(cells):
        t, bad, _ = times(cells[name], numeric=False)
        return {"time": t, "time_bad": bad}

    again, _ = read_cells(Lines(lines.data, lines.lineno, Malformed(), lines.lines, lines.ends,
                                lines.quotes), names, [name], dates)
    cols.put_column("time", again.get("time"))
    cols.put_column("time_bad", again.get("time_bad"))


def _numbers(cells: Cells) -> Optional[np.ndarray]:
    """Every cell read as a number, or None if one is no number (the first cell is tried
    first: a column of date-times is told at once)."""
    if len(cells) and not NUMBER_RE.fullmatch(cells.take(np.zeros(1, np.int64)).texts()[0]):
        return None
    v, ok = decimals(cells, units=False)
    rest = np.flatnonzero(~ok)
    if not len(rest):
        return v
    texts, codes = cells.take(rest).distinct()
    if not all(NUMBER_RE.fullmatch(t) for t in texts):
        return None
    v[rest] = np.array([float(t) for t in texts])[codes]
    return v


def _stamps(cells: Cells) -> tuple[np.ndarray, np.ndarray]:
    """Date-times read once per run of equal cells (every GPU's row of one poll carries the
    same stamp, on rows in a row)."""
    n = len(cells)
    if n == 0:
        return np.zeros(0), np.zeros(0, bool)
    new = np.ones(n, bool)
    if (cells.length == cells.length[0]).all() and int(cells.length[0]) <= WIDE:
        m = cells.places(int(cells.length[0]))      # (one width: compared as they are)
        new[1:] = (m[:, 1:] != m[:, :-1]).any(0)
    else:
        ch = cells.chars(min(int(cells.length.max()), WIDE))
        new[1:] = ((cells.length[1:] != cells.length[:-1]) | (cells.length[1:] > WIDE)
                   | (ch[:, 1:] != ch[:, :-1]).any(0))
    first = np.flatnonzero(new)
    runs = cells.take(first)
    t, ok = fixed_stamps(runs)
    flag = np.zeros(len(first), bool)
    _by_text(runs, np.flatnonzero(~ok), lambda s: (_stamp_text(s), False), t, flag)
    t = np.repeat(t, np.diff(np.append(first, n)))
    return t, np.isnan(t)


_FRACTION = re.compile(r"\.\d+")


def _stamp_text(text: str) -> float:
    """Epoch seconds of a date-time 'YYYY/MM/DD HH:MM:SS' (or '-' and 'T' for '/' and ' ')
    and a fraction after it, the rest ignored (UTC); NaN when it is none."""
    s = text.replace("-", "/").replace("T", " ")
    try:
        sec = datetime.strptime(s[:19], "%Y/%m/%d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return math.nan
    m = _FRACTION.match(s, 19, 40)
    return sec.timestamp() + (float("0" + m.group()) if m else 0.0)
