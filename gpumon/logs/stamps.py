"""Date-times such as nvidia-smi writes them (``2024/05/01 10:00:01.123``; ISO 8601's
``2024-05-01T10:00:01``; ``2022-05-22:16:54:15.760601`` as some monitoring scripts write it)
read straight from their digits, every stamp of one width at once: a
day-long log has 86,400 distinct stamps, and parsing each on its own takes microseconds. The
same epoch seconds (UTC) as values._stamp_text gives them; anything else (another layout, a
date or time out of range) is left to it.
"""
from __future__ import annotations

import numpy as np

# Where the separators of "YYYY/MM/DD HH:MM:SS" sit, what each may be, and the digits' places.
_SEPS = {4: b"/-", 7: b"/-", 10: b" T:", 13: b":", 16: b":"}
_FIELDS = {"year": (0, 4), "month": (5, 7), "day": (8, 10), "hour": (11, 13),
           "minute": (14, 16), "second": (17, 19)}
_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
# Widest stamp read here: nine fraction digits (nanoseconds), exact as integers and powers of
# ten in a double.
MAX_WIDTH = 29


def fixed_stamps(cells) -> tuple[np.ndarray, np.ndarray]:
    """(epoch seconds, read) of cells (table.Cells) written ``YYYY/MM/DD HH:MM:SS`` and
    fraction digits (``.123``) or none; cells not read are NaN."""
    t = np.full(len(cells), np.nan)
    ok = np.zeros(len(cells), bool)
    for width in np.unique(cells.length).tolist():
        if width < 19 or width == 20 or width > MAX_WIDTH:
            continue
        rows = np.flatnonzero(cells.length == width)
        t[rows], ok[rows] = _one_width(cells.take(rows).chars(width))
    t[~ok] = np.nan
    return t, ok


def _one_width(chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fixed_stamps of stamps all ``width`` wide: ``chars`` is (width, rows)."""
    width = chars.shape[0]
    # As digits, one row per character place: other characters come out above 9 (unsigned).
    v = chars.astype(np.int16) - ord("0")
    seps = {**_SEPS, 19: b"."} if width > 19 else _SEPS
    digits = np.ones(width, bool)
    digits[list(seps)] = False
    ok = (v[digits].view(np.uint16) <= 9).all(0)
    for pos, allowed in seps.items():
        ok &= np.isin(chars[pos], np.frombuffer(allowed, np.uint8))
    f = {k: _number(v, a, b) for k, (a, b) in _FIELDS.items()}
    ok &= _in_range(f)
    month = np.clip(f["month"], 1, 12)
    t = (_days(f["year"], month, f["day"]) * 86400 + f["hour"] * 3600
         + f["minute"] * 60 + f["second"]).astype(float)
    if width > 20:
        # k digits as an integer over 10**k: the double nearest the decimal, as parsing it is.
        t = t + _number(v, 20, width) / float(10 ** (width - 20))
    return t, ok


def _number(v: np.ndarray, a: int, b: int) -> np.ndarray:
    """The decimal number written in digit rows a to b (exclusive) of ``v``."""
    out = v[a].astype(np.int64)
    for k in range(a + 1, b):
        out = out * 10 + v[k]
    return out


def _leap(y: np.ndarray) -> np.ndarray:
    return (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))


def _in_range(f: dict) -> np.ndarray:
    """Which fields are a real date and time (the others are left to values._stamp_text)."""
    y, m, d = f["year"], f["month"], f["day"]
    ok = (y >= 1970) & (y <= 9999) & (m >= 1) & (m <= 12)
    last = _DAYS[np.clip(m, 1, 12) - 1] + ((m == 2) & _leap(y))
    return ok & (d >= 1) & (d <= last) & (f["hour"] <= 23) & (f["minute"] <= 59) & (
        f["second"] <= 59)


def _days(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
