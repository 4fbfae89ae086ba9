"""Text cells to numbers, as logs write them: values with units (``92 %``, ``150.23 W``),
missing markers (``[N/A]``, ``-``), clock-event masks in hex, date-times and epoch seconds.
Each function takes an Arrow column and returns (values with NaN for missing, bad-cell mask).
"""
from __future__ import annotations

import math
import re
from typing import Callable, Optional

import numpy as np

from gpumon.logs.arrow import (fill, np1, nulls_where, pa_modules, pc, str_array, to_np,
                               arrow_mask, text_matrix)
from gpumon.logs.stamps import fixed_stamps

# A decimal number, as nvidia-smi and people's own loops write them (units already stripped).
_NUMBER_RE = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def key(name: str) -> str:
    """'utilization.gpu [%]' -> 'utilization.gpu'."""
    return re.sub(r"\s*[\[(].*?[\])]\s*$", "", name.strip()).strip().lower()


MISSING = ("", "-", "n/a", "[n/a]", "na", "nan", "none", "[not supported]", "[unknown error]",
            "[insufficient permissions]", "[gpu is lost]", "[requested functionality has "
            "been deprecated]", "not supported")
_UNIT_RE = r"\s*(%|[a-zA-Z][a-zA-Z/]*)\s*$"
_UNIT_CHARS = " %WMiBHzKkGCsJm/"


def num_fast(col) -> Optional[np.ndarray]:
    """num() of a text column in the usual case, cheaply: every value a number followed by
    its unit, none missing (so none empty and none bad). None when that is not so (then
    num() decides). ASCII trimming is exact here: a value with other whitespace at an end
    does not cast, and goes to num()."""
    pc = pa_modules()[1]
    v = _cast_float(pc.ascii_rtrim(pc.ascii_trim_whitespace(col), characters=_UNIT_CHARS))
    return None if v is None or np.isnan(v).any() else v


def _cast_float(s) -> Optional[np.ndarray]:
    """Text (chunks) cast to float64 (null -> NaN), or None when a value is not a number. A
    column of text that is no number at all fails on its first values, not after all."""
    pa, pc, _ = pa_modules()
    try:
        if len(s) > 256:
            pc.cast(s.slice(0, 256), pa.float64())
        return to_np(pc.cast(s, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def numeric_text(s) -> bool:
    """Whether every value of a text column (trimmed) is a number: how times() reads it."""
    return _cast_float(s) is not None


def num(col, trimmed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A column of text (or numbers) -> (float values with NaN missing, bad-value mask).
    ``trimmed``: text already trimmed of whitespace."""
    pa, pc, _ = pa_modules()
    if trimmed:
        return _text_num(col)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        return to_np(pc.cast(col, pa.float64())), np.zeros(len(col), bool)
    if pa.types.is_null(col.type):
        return np.full(len(col), np.nan), np.zeros(len(col), bool)
    return _text_num(pc.utf8_trim_whitespace(pc.cast(col, pa.string())))


def _text_num(s) -> tuple[np.ndarray, np.ndarray]:
    """num() of text already trimmed of whitespace."""
    pa, pc, _ = pa_modules()
    # Units trail the number ("92 %", "150.23 W", "1024 MiB", "1410 MHz"): trimming the
    # characters they are made of is ~10x faster than a regular expression.
    stripped = pc.utf8_rtrim(s, characters=_UNIT_CHARS)
    # Fast path (the usual log): every value a number once its unit is gone. Only NaN
    # values, if any, need telling missing ("nan") from unreadable.
    v = _cast_float(stripped)
    if v is not None:
        nan = np.isnan(v)
        if not nan.any():
            return v, nan
    if hasattr(s, "combine_chunks"):
        s = s.combine_chunks()
    low = pc.utf8_lower(s)
    missing = fill(pc.or_(pc.is_null(s), pc.is_in(low, value_set=str_array(MISSING))),
                    True)
    missing = pc.or_(missing, pc.starts_with(s, "["))
    stripped = nulls_where(missing, pc.utf8_rtrim(s, characters=_UNIT_CHARS))
    try:
        v = to_np(pc.cast(stripped, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # The slow path, only for columns with unreadable values: cells that are not a number
        # become null (counted as malformed by the caller), the rest are cast.
        ok = fill(pc.match_substring_regex(stripped, _NUMBER_RE), False)
        stripped = nulls_where(pc.invert(ok), stripped)
        v = to_np(pc.cast(pc.utf8_trim_whitespace(stripped), pa.float64()))
    miss = to_np(missing)
    return v, (~miss) & np.isnan(v)


def is_text(t) -> bool:
    pa = pa_modules()[0]
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def trimmed_text(col):
    """A text column (chunks kept) trimmed of whitespace; None when the column is not text."""
    return pc().utf8_trim_whitespace(col) if is_text(col.type) else None


def hex_or_num(col, trimmed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Clock event reasons: '0x0000000000000004' or a number."""
    pa, pc, _ = pa_modules()
    s = col if trimmed else trimmed_text(col)
    if s is None:
        return num(col)
    uarr = pc.unique(s)
    uniq = uarr.to_pylist()
    table = {}
    for u in uniq:
        if u is None or u.lower() in MISSING or u.startswith("["):
            table[u] = (math.nan, False)
            continue
        try:
            table[u] = (float(int(u, 16)) if u.lower().startswith("0x") else float(u), False)
        except ValueError:
            table[u] = (math.nan, True)
    idx = to_np(pc.index_in(s, value_set=uarr))
    vals = np.array([table[u][0] for u in uniq] + [math.nan])
    bad = np.array([table[u][1] for u in uniq] + [False])
    idx = np.where(np.isnan(idx.astype(float)), len(uniq), idx).astype(np.int64)
    return vals[idx], bad[idx]


def times(col, base_interval: float = 1.0, trimmed: bool = False
          ) -> tuple[np.ndarray, np.ndarray]:
    """Epoch seconds from numbers or date-times ('2024/01/15 10:00:01.123', ISO 8601)."""
    pa, pc, _ = pa_modules()
    s = col if trimmed else trimmed_text(col)
    if s is None:
        return num(col)
    v = _cast_float(s)
    if v is not None:
        return v, np.isnan(v) & ~to_np(pc.is_null(s))
    # Every GPU's row of one poll carries the same stamp, on rows in a row: parse the first
    # stamp of each run of equal ones only.
    n = len(s)
    if n > 1:
        new = np.ones(n, dtype=bool)
        new[1:] = to_np(fill(pc.not_equal(s.slice(1), s.slice(0, n - 1)), True))
        first = np.flatnonzero(new)
        if len(first) < n:
            tu, bu = _parse_times(pc.filter(s, arrow_mask(new)))
            lengths = np.diff(np.append(first, n))
            return np.repeat(tu, lengths), np.repeat(bu, lengths)
    return _parse_times(s)


def _parse_times(s) -> tuple[np.ndarray, np.ndarray]:
    """Date-times ('2024/01/15 10:00:01.123', ISO 8601) as epoch seconds, and bad values."""
    pa, pc, _ = pa_modules()
    if hasattr(s, "combine_chunks"):
        s = s.combine_chunks()
    t = fixed_stamps(s)
    if t is not None:
        return t, np.zeros(len(t), bool)
    s2 = pc.replace_substring(pc.replace_substring(s, "-", "/"), "T", " ")
    whole = pc.utf8_slice_codeunits(s2, 0, 19)
    frac = pc.utf8_slice_codeunits(s2, 19, 40)
    try:
        sec = pc.strptime(whole, format="%Y/%m/%d %H:%M:%S", unit="s", error_is_null=True)
        t = to_np(pc.cast(sec, pa.int64())).astype(float)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        t = np.full(len(s), np.nan)
    if pc.any(pc.is_valid(frac)).as_py():
        if not frac.null_count and to_np(pc.match_substring_regex(frac, r"^\.\d+$")).all():
            # Every stamp ends in ".<digits>" (what nvidia-smi writes): "0" in front is what
            # the regular expressions below make of each, for a fifth of the work.
            fr = pc.utf8_replace_slice(frac, 0, 0, "0")
        else:
            fr = pc.replace_substring_regex(frac, r"^(\.\d+).*$", "0\\1")
            fr = nulls_where(pc.invert(fill(pc.match_substring_regex(fr, r"^0\.\d+$"),
                                              False)), fr)
        f = to_np(pc.cast(fr, pa.float64()))
        t = t + np.nan_to_num(f)
    nulls = to_np(pc.is_null(s))
    return t, np.isnan(t) & ~nulls



def per_value(col, f: Callable) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """``f(texts) -> (values, flags)`` for every row of the text column ``col``, with ``f``
    called once on its distinct texts (an Arrow array) and the results spread back to the
    rows: the same arrays, when ``f`` reads each text on its own. None when ``col`` has no
    rows or a null (then call ``f(col)``)."""
    pc_ = pc()
    if len(col) == 0:
        return None
    one = _one_text(col)
    if one is not None:         # (a clock, a limit: the same text on every row)
        v, b = f(one)
        idx = np.zeros(len(col), np.intp)
        return v[idx], (b[idx] if b.any() else np.zeros(len(idx), bool))
    d = pc_.dictionary_encode(col)
    chunks = d.chunks if hasattr(d, "chunks") else [d]
    chunks = [ch for ch in chunks if len(ch)]
    if any(ch.indices.null_count for ch in chunks):
        return None
    idx = np.concatenate([np1(ch.indices, copy=False) for ch in chunks])
    v, b = f(chunks[0].dictionary)       # one dictionary, shared by every chunk
    return v[idx], (b[idx] if b.any() else np.zeros(len(idx), bool))


# Widest text _one_text compares byte by byte (a clock-event mask is 18).
ONE_TEXT_WIDTH = 32
# Rows _one_text compares first: a column of many texts (utilization, power) differs within
# them, and is not compared whole.
ONE_TEXT_PROBE = 64


def _one_text(col):
    """The first row of a text column (one chunk, no nulls) whose rows all hold the same
    text, as a one-row array; else None. Comparing fixed-width bytes costs a fraction of
    hashing every row (dictionary_encode)."""
    if hasattr(col, "chunks"):
        if col.num_chunks != 1:
            return None
        col = col.chunk(0)
    m = text_matrix(col, ONE_TEXT_WIDTH)
    if m is None or not (m[:ONE_TEXT_PROBE] == m[0]).all() or not (m == m[0]).all():
        return None
    return col.slice(0, 1)
