"""Date-times (nvidia-smi's ``2024/05/01 10:00:01.123``, ISO 8601's ``2024-05-01T10:00:01``,
``2022-05-22:16:54:15.760601``; every one as wide as the others) read
straight from their digits: a day-long log has 86,400 distinct stamps, and Arrow's strptime
and regular expressions take ~0.5 us on each. The same epoch seconds as values._parse_times
gives them; anything else (another layout, a date or time out of range) is left to it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.logs.arrow import text_matrix

# Where the separators of "YYYY/MM/DD HH:MM:SS" sit (each of the bytes given: ISO 8601's
# "2024-05-01T10:00:01" and "2022-05-22:16:54:15" as some monitoring scripts write it), and
# the digits' places.
_SEPS = {4: b"/-", 7: b"/-", 10: b" T:", 13: b":", 16: b":"}
_FIELDS = {"year": (0, 4), "month": (5, 7), "day": (8, 10), "hour": (11, 13),
           "minute": (14, 16), "second": (17, 19)}
_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
# Widest stamp read here: nine fraction digits (nanoseconds), exact as integers and powers of
# ten in a double.
MAX_WIDTH = 29


def fixed_stamps(s) -> Optional[np.ndarray]:
    """Epoch seconds of an Arrow text array (no nulls) of stamps all ``YYYY/MM/DD HH:MM:SS``
    (or with the other separators of _SEPS) followed by the same number of fraction digits
    (``.123``) or none; None otherwise."""
    chars = text_matrix(s, MAX_WIDTH)
    if chars is None or chars.shape[1] < 19 or chars.shape[1] == 20:
        return None
    width = chars.shape[1]
    # One row per character place (each a contiguous array), as digits: separators and
    # other characters come out below 0 or above 9 (above 9 as unsigned).
    v = chars.T.astype(np.int16) - ord("0")
    seps = {**_SEPS, 19: b"."} if width > 19 else _SEPS
    digits = np.ones(width, bool)
    digits[list(seps)] = False
    if not (v[digits].view(np.uint16) <= 9).all():
        return None
    if not all(_any_of(v[pos], sep).all() for pos, sep in seps.items()):
        return None
    f = {k: _number(v, a, b) for k, (a, b) in _FIELDS.items()}
    if not _in_range(f):
        return None
    t = (_days(f["year"], f["month"], f["day"]) * 86400 + f["hour"] * 3600
         + f["minute"] * 60 + f["second"]).astype(float)
    if width > 20:
        # k digits as an integer over 10**k: the double nearest the decimal, as parsing it is.
        t = t + _number(v, 20, width) / float(10 ** (width - 20))
    return t


def _any_of(row: np.ndarray, chars: bytes) -> np.ndarray:
    """Where a digit row holds one of ``chars``."""
    m = row == chars[0] - ord("0")
    for c in chars[1:]:
        m |= row == c - ord("0")
    return m


def _number(v: np.ndarray, a: int, b: int) -> np.ndarray:
    """The decimal number written in digit rows a to b (exclusive) of ``v``."""
    out = v[a].astype(np.int64)
    for k in range(a + 1, b):
        out = out * 10 + v[k]
    return out


def _leap(y: np.ndarray) -> np.ndarray:
    return (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))


def _in_range(f: dict) -> bool:
    """Every field a real date and time (else strptime decides what it is)."""
    y, m, d = f["year"], f["month"], f["day"]
    if not (((y >= 1970) & (y <= 9999) & (m >= 1) & (m <= 12)).all()):
        return False
    last = _DAYS[m - 1] + ((m == 2) & _leap(y))
    return bool(((d >= 1) & (d <= last) & (f["hour"] <= 23) & (f["minute"] <= 59)
                 & (f["second"] <= 59)).all())


def _days(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
