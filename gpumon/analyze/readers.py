"""Readers for every log `gpumon analyze` takes, each returning a Log of detector columns.

- gpumon CSV (``time,gpu,source,...``, written by CsvSink): every column by name.
- ``nvidia-smi --query-gpu=... --format=csv[,nounits]``: values with units (``92 %``,
  ``150.23 W``, ``1024 MiB``), any subset and order of fields, ``[N/A]`` for unsupported,
  timestamps like ``2024/01/15 10:00:01.123``, ``-l``/``-lms`` intervals.
- ``nvidia-smi dmon``: whitespace columns under ``#`` header lines whose names vary by
  driver and repeat; ``-`` is missing; without a time column samples are ``interval`` apart.
- plain CSV: a time column, a GPU index column and a utilization column (a pynvml loop's).

pyarrow reads CSV (multi-threaded, only the fields the detector uses) and is imported here
only, lazily: the monitor never loads it. pandas is never imported (not even by pyarrow, see
_np). A value that is present but unreadable makes its line malformed; the line is counted
(first line number reported) and the rest is analysed.
"""
from __future__ import annotations

import csv
import io
import math
import re
from typing import Callable, Optional

import numpy as np

from gpumon.detect.bins import HostCols, JobCols, SampleCols
from gpumon.errors import UserError
from gpumon.analyze.log import Log, Malformed
from gpumon.analyze.memory import small_pages
from gpumon.analyze.threads import map_threads

KINDS = ("gpumon", "nvidia-smi", "dmon", "plain")

# nvidia-smi --query-gpu field names (units stripped) -> detector column.
NVSMI_FIELDS = {
    "timestamp": "time", "index": "gpu",
    "utilization.gpu": "util",
    "memory.used": "mem",
    "power.draw": "power", "power.draw.average": "power", "power.draw.instant": "power",
    "enforced.power.limit": "power_limit", "power.limit": "power_limit",
    "clocks.sm": "clock", "clocks.current.sm": "clock",
    "clocks.max.sm": "clock_max", "clocks.max.graphics": "clock_max",
    "clocks_throttle_reasons.active": "events", "clocks_event_reasons.active": "events",
    "uuid": "gpu_id", "gpu_uuid": "gpu_id", "pci.bus_id": "gpu_id", "gpu_bus_id": "gpu_id",
}
NVSMI_KNOWN = set(NVSMI_FIELDS) | {
    "name", "driver_version", "memory.total", "memory.free", "utilization.memory",
    "temperature.gpu", "temperature.memory", "fan.speed", "pstate", "clocks.mem",
    "clocks.gr", "clocks.max.memory", "power.max_limit", "power.min_limit",
    "power.default_limit", "pcie.link.gen.current", "pcie.link.width.current", "count",
    "serial", "clocks.current.graphics", "clocks.current.memory", "clocks.video"}

# Plain CSV column names, lower case, in order of preference.
PLAIN_TIME = ("time", "timestamp", "ts", "t", "epoch", "unix_time", "datetime", "date_time",
              "time_s", "seconds")
PLAIN_GPU = ("gpu", "gpu_index", "index", "gpu_id", "device", "device_index", "idx", "gpu_idx")
PLAIN_UTIL = ("util", "utilization", "gpu_util", "util_gpu", "util_gpu_pct", "utilization_gpu",
              "gpu_utilization", "utilization.gpu", "sm", "sm_util", "util_pct", "gpu_util_pct")
PLAIN_POWER = ("power", "power_w", "power_draw", "power.draw", "power_draw_w")
PLAIN_MEM = ("mem_used", "memory_used", "mem_used_mib", "memory.used", "memory_used_mib")
PLAIN_LIMIT = ("power_limit", "power_limit_w", "power.limit")


# A decimal number, as nvidia-smi and people's own loops write them (units already stripped).
_NUMBER_RE = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


_MODULES: Optional[tuple] = None


def _pa():
    """(pyarrow, its compute kernels, pyarrow.csv), imported once."""
    global _MODULES
    if _MODULES is None:
        try:
            import pyarrow as pa
            import pyarrow.csv as pcsv
        except ImportError:
            raise UserError("gpumon analyze needs pyarrow: pip install 'gpumon[analyze]'"
                            ) from None
        try:
            from gpumon.analyze.compute import Compute
            pc = Compute()
        except (ImportError, AttributeError):
            import pyarrow.compute as pc
        _MODULES = (pa, pc, pcsv)
    return _MODULES


def _pc():
    return _pa()[1]


# Arrow -> numpy and numpy -> Arrow without pyarrow's pandas bridge: pyarrow imports pandas
# (when installed) the first time it converts to or from Python or numpy objects (to_numpy,
# pa.array, pa.scalar, a Python value as a compute argument), and that import alone costs
# more than reading a day-long log. Readers therefore move data through Arrow buffers.
def _np(a) -> np.ndarray:
    """An Arrow array (or chunks of one) of numbers or booleans as a numpy array of its own,
    nulls as NaN (numbers; integers then become floats), as ``to_numpy(zero_copy_only=False)``
    gives them."""
    if hasattr(a, "chunks"):
        if a.num_chunks > 1 and _plain(a.type):     # joined once, by numpy
            return np.concatenate([_np1(c, copy=False) for c in a.chunks])
        a = a.combine_chunks()
    if not _plain(a.type):
        return a.to_numpy(zero_copy_only=False)
    return _np1(a, copy=True)


def _plain(t) -> bool:
    """Numbers and booleans, which _np1 reads from Arrow's buffers."""
    pa = _pa()[0]
    return pa.types.is_boolean(t) or ((pa.types.is_integer(t) or pa.types.is_floating(t))
                                      and not pa.types.is_float16(t))


def _np1(a, copy: bool) -> np.ndarray:
    """_np of one Array of _plain type (``copy=False``: may be a view of Arrow's memory)."""
    pa = _pa()[0]
    n, off, t = len(a), a.offset, a.type
    if pa.types.is_boolean(t):
        if a.null_count:
            return a.to_numpy(zero_copy_only=False)   # objects with None, as ever (rare)
        return _bits(a.buffers()[1], off, n)
    kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dt = np.dtype(f"{kind}{t.bit_width // 8}")
    if n == 0:
        return np.zeros(0, dt if not a.null_count else np.float64)
    v = np.frombuffer(a.buffers()[1], dtype=dt, count=n, offset=off * dt.itemsize)
    if a.null_count:
        v = v.astype(np.float64)
        v[~_bits(a.buffers()[0], off, n)] = np.nan
    elif copy:
        v = v.copy()
    return v


def _bits(buf, off: int, n: int) -> np.ndarray:
    """Arrow's bit-packed booleans (validity or values) as a numpy bool array."""
    return np.unpackbits(np.frombuffer(buf, np.uint8), count=off + n,
                         bitorder="little")[off:].astype(bool)


def _arrow_mask(m: np.ndarray):
    """A numpy bool array as an Arrow boolean array."""
    pa = _pa()[0]
    return pa.BooleanArray.from_buffers(
        pa.bool_(), len(m), [None, pa.py_buffer(np.packbits(m, bitorder="little").tobytes())])


def _str_array(words) -> object:
    """Python strings as an Arrow string array."""
    pa = _pa()[0]
    data = [w.encode() for w in words]
    offsets = np.cumsum([0] + [len(d) for d in data]).astype(np.int32)
    return pa.StringArray.from_buffers(len(data), pa.py_buffer(offsets.tobytes()),
                                       pa.py_buffer(b"".join(data)))


def _fill(a, value: bool):
    """pc.fill_null(a, value) for a boolean array (without making a Python scalar)."""
    pc = _pa()[1]
    return pc.or_kleene(a, pc.is_null(a)) if value else pc.and_kleene(a, pc.is_valid(a))


def _nulls_where(mask, a):
    """``a`` with nulls where ``mask`` is true (pc.if_else(mask, None, a))."""
    pa, pc, _ = _pa()
    return pc.if_else(mask, pa.nulls(len(a), a.type), a)


def _key(name: str) -> str:
    """'utilization.gpu [%]' -> 'utilization.gpu'."""
    return re.sub(r"\s*\[.*?\]\s*$", "", name.strip()).strip().lower()


# -- detection --------------------------------------------------------------------------------
def head_lines(path: str, n: int = 40) -> list[str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace", newline="") as f:
            out = []
            for line in f:
                if line.strip():
                    out.append(line.rstrip("\r\n"))
                if len(out) >= n:
                    break
            return out
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a log") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def detect(lines: list[str]) -> Optional[str]:
    """The kind of log these first lines belong to, or None."""
    if not lines:
        return None
    first = lines[0].lstrip()
    if first.startswith("#"):
        words = first.lstrip("#").lower().split()
        if "gpu" in words or "idx" in words:
            return "dmon"
        return None
    header = [_key(h) for h in next(csv.reader([lines[0]]))]
    if header[:3] == ["time", "gpu", "source"]:
        return "gpumon"
    if any(h in NVSMI_KNOWN for h in header) and (
            "utilization.gpu" in header or "timestamp" in header or "index" in header):
        if "utilization.gpu" in header:
            return "nvidia-smi"
    if _pick(header, PLAIN_UTIL) is not None and (
            _pick(header, PLAIN_TIME) is not None or _pick(header, PLAIN_GPU) is not None):
        return "plain"
    if "utilization.gpu" in header:
        return "nvidia-smi"
    return None


def _pick(header: list[str], names: tuple) -> Optional[int]:
    for n in names:
        if n in header:
            return header.index(n)
    return None


# -- numeric helpers --------------------------------------------------------------------------
_MISSING = ("", "-", "n/a", "[n/a]", "na", "nan", "none", "[not supported]", "[unknown error]",
            "[insufficient permissions]", "[gpu is lost]", "[requested functionality has "
            "been deprecated]", "not supported")
_UNIT_RE = r"\s*(%|[a-zA-Z][a-zA-Z/]*)\s*$"
_UNIT_CHARS = " %WMiBHzKkGCsJm/"


def _num_fast(col) -> Optional[np.ndarray]:
    """num() of a text column in the usual case, cheaply: every value a number followed by
    its unit, none missing (so none empty and none bad). None when that is not so (then
    num() decides). ASCII trimming is exact here: a value with other whitespace at an end
    does not cast, and goes to num()."""
    pc = _pa()[1]
    v = _cast_float(pc.ascii_rtrim(pc.ascii_trim_whitespace(col), characters=_UNIT_CHARS))
    return None if v is None or np.isnan(v).any() else v


def _cast_float(s) -> Optional[np.ndarray]:
    """Text (chunks) cast to float64 (null -> NaN), or None when a value is not a number. A
    column of text that is no number at all fails on its first values, not after all."""
    pa, pc, _ = _pa()
    try:
        if len(s) > 256:
            pc.cast(s.slice(0, 256), pa.float64())
        return _np(pc.cast(s, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def num(col, trimmed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A column of text (or numbers) -> (float values with NaN missing, bad-value mask).
    ``trimmed``: text already trimmed of whitespace."""
    pa, pc, _ = _pa()
    if trimmed:
        return _text_num(col)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        return _np(pc.cast(col, pa.float64())), np.zeros(len(col), bool)
    if pa.types.is_null(col.type):
        return np.full(len(col), np.nan), np.zeros(len(col), bool)
    return _text_num(pc.utf8_trim_whitespace(pc.cast(col, pa.string())))


def _text_num(s) -> tuple[np.ndarray, np.ndarray]:
    """num() of text already trimmed of whitespace."""
    pa, pc, _ = _pa()
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
    missing = _fill(pc.or_(pc.is_null(s), pc.is_in(low, value_set=_str_array(_MISSING))),
                    True)
    missing = pc.or_(missing, pc.starts_with(s, "["))
    stripped = _nulls_where(missing, pc.utf8_rtrim(s, characters=_UNIT_CHARS))
    try:
        v = _np(pc.cast(stripped, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # The slow path, only for columns with unreadable values: cells that are not a number
        # become null (counted as malformed by the caller), the rest are cast.
        ok = _fill(pc.match_substring_regex(stripped, _NUMBER_RE), False)
        stripped = _nulls_where(pc.invert(ok), stripped)
        v = _np(pc.cast(pc.utf8_trim_whitespace(stripped), pa.float64()))
    miss = _np(missing)
    return v, (~miss) & np.isnan(v)


def _is_text(t) -> bool:
    pa = _pa()[0]
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _trimmed_text(col):
    """A text column (chunks kept) trimmed of whitespace; None when the column is not text."""
    return _pc().utf8_trim_whitespace(col) if _is_text(col.type) else None


def hex_or_num(col, trimmed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Clock event reasons: '0x0000000000000004' or a number."""
    pa, pc, _ = _pa()
    s = col if trimmed else _trimmed_text(col)
    if s is None:
        return num(col)
    uarr = pc.unique(s)
    uniq = uarr.to_pylist()
    table = {}
    for u in uniq:
        if u is None or u.lower() in _MISSING or u.startswith("["):
            table[u] = (math.nan, False)
            continue
        try:
            table[u] = (float(int(u, 16)) if u.lower().startswith("0x") else float(u), False)
        except ValueError:
            table[u] = (math.nan, True)
    idx = _np(pc.index_in(s, value_set=uarr))
    vals = np.array([table[u][0] for u in uniq] + [math.nan])
    bad = np.array([table[u][1] for u in uniq] + [False])
    idx = np.where(np.isnan(idx.astype(float)), len(uniq), idx).astype(np.int64)
    return vals[idx], bad[idx]


def times(col, base_interval: float = 1.0, trimmed: bool = False
          ) -> tuple[np.ndarray, np.ndarray]:
    """Epoch seconds from numbers or date-times ('2024/01/15 10:00:01.123', ISO 8601)."""
    pa, pc, _ = _pa()
    s = col if trimmed else _trimmed_text(col)
    if s is None:
        return num(col)
    v = _cast_float(s)
    if v is not None:
        return v, np.isnan(v) & ~_np(pc.is_null(s))
    # Every GPU's row of one poll carries the same stamp, on rows in a row: parse the first
    # stamp of each run of equal ones only.
    n = len(s)
    if n > 1:
        new = np.ones(n, dtype=bool)
        new[1:] = _np(_fill(pc.not_equal(s.slice(1), s.slice(0, n - 1)), True))
        first = np.flatnonzero(new)
        if len(first) < n:
            tu, bu = _parse_times(pc.filter(s, _arrow_mask(new)))
            lengths = np.diff(np.append(first, n))
            return np.repeat(tu, lengths), np.repeat(bu, lengths)
    return _parse_times(s)


def _parse_times(s) -> tuple[np.ndarray, np.ndarray]:
    """Date-times ('2024/01/15 10:00:01.123', ISO 8601) as epoch seconds, and bad values."""
    pa, pc, _ = _pa()
    if hasattr(s, "combine_chunks"):
        s = s.combine_chunks()
    s2 = pc.replace_substring(pc.replace_substring(s, "-", "/"), "T", " ")
    whole = pc.utf8_slice_codeunits(s2, 0, 19)
    frac = pc.utf8_slice_codeunits(s2, 19, 40)
    try:
        sec = pc.strptime(whole, format="%Y/%m/%d %H:%M:%S", unit="s", error_is_null=True)
        t = _np(pc.cast(sec, pa.int64())).astype(float)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        t = np.full(len(s), np.nan)
    if pc.any(pc.is_valid(frac)).as_py():
        if not frac.null_count and _np(pc.match_substring_regex(frac, r"^\.\d+$")).all():
            # Every stamp ends in ".<digits>" (what nvidia-smi writes): "0" in front is what
            # the regular expressions below make of each, for a fifth of the work.
            fr = pc.utf8_replace_slice(frac, 0, 0, "0")
        else:
            fr = pc.replace_substring_regex(frac, r"^(\.\d+).*$", "0\\1")
            fr = _nulls_where(pc.invert(_fill(pc.match_substring_regex(fr, r"^0\.\d+$"),
                                              False)), fr)
        f = _np(pc.cast(fr, pa.float64()))
        t = t + np.nan_to_num(f)
    nulls = _np(pc.is_null(s))
    return t, np.isnan(t) & ~nulls


# -- CSV reading ------------------------------------------------------------------------------
def _read_csv(path: str, header: list[str], typed: Optional[dict] = None):
    """The file as a pyarrow Table of strings (or ``typed`` columns); rows with the wrong
    number of fields are skipped and counted."""
    pa, pc, pcsv = _pa()
    skipped = [0]

    def on_invalid(row):
        skipped[0] += 1
        return "skip"

    names = [h.strip() for h in header]
    types = {n: pa.string() for n in names}
    if typed:
        types.update(typed)
    try:
        table = pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(column_names=names, skip_rows=1, block_size=1 << 24),
            parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=True))
    except pa.ArrowInvalid as exc:
        if typed:
            raise
        raise UserError(f"{path}: cannot parse as CSV ({str(exc).splitlines()[0]})") from None
    return table, skipped[0]


def _read_text(path: str, header: list[str], want: Optional[list[str]] = None,
               typed: Optional[dict] = None):
    """Columns ``want`` (default all) as text, empty fields as empty strings (pyarrow's
    multithreaded reader; about as fast as pandas' C parser and without its import); rows
    with the wrong number of fields are skipped and counted. ``typed``: columns read as
    another type ("int64"); a value that does not parse as one raises ArrowInvalid."""
    pa, _, pcsv = _pa()
    skipped = [0]

    def on_invalid(row):
        skipped[0] += 1
        return "skip"

    names = [h.strip() for h in header]
    try:
        table = pcsv.read_csv(
            path,
            # 1 MiB blocks: every core parses (fewer, larger blocks leave cores idle).
            read_options=pcsv.ReadOptions(column_names=names, skip_rows=1, block_size=1 << 20),
            parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pcsv.ConvertOptions(
                column_types={n: (pa.type_for_alias(typed[n]) if typed and n in typed
                                  else pa.string()) for n in names},
                strings_can_be_null=False,
                include_columns=want if want is not None else names))
    except pa.ArrowInvalid as exc:
        if typed:
            raise
        raise UserError(f"{path}: cannot parse as CSV ({str(exc).splitlines()[0]})") from None
    return table, skipped[0]


def _first_bad_line(path: str, width: int, row_ok: Callable[[list[str]], bool],
                    skip: int = 1) -> Optional[int]:
    """Line number of the first line with the wrong field count or an unreadable value."""
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as f:
        for lineno, row in enumerate(csv.reader(f), start=1):
            if lineno <= skip or not row or not any(c.strip() for c in row):
                continue
            if len(row) != width or not row_ok(row):
                return lineno
    return None


def _cell_ok(cell: str, hexa: bool = False) -> bool:
    c = cell.strip()
    if c.lower() in _MISSING or c.startswith("["):
        return True
    c = re.sub(_UNIT_RE, "", c)
    try:
        if hexa and c.lower().startswith("0x"):
            int(c, 16)
        else:
            float(c)
        return True
    except ValueError:
        return False


def _gpu_codes(col) -> np.ndarray:
    """GPU identifiers (UUID, bus id) -> 0..n-1 in order of first appearance."""
    pa, pc, _ = _pa()
    arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    arr = pc.utf8_trim_whitespace(pc.cast(arr, pa.string()))
    uniq = pc.unique(arr)
    idx = _np(pc.index_in(arr, value_set=uniq))
    return np.nan_to_num(idx.astype(float), nan=-1).astype(np.int64)


def _per_time_order(t: np.ndarray) -> np.ndarray:
    """Without a GPU column: the n-th row of each timestamp is GPU n."""
    order = np.argsort(t, kind="stable")
    ts = t[order]
    start = np.ones(len(ts), bool)
    start[1:] = ts[1:] != ts[:-1]
    grp = np.cumsum(start) - 1
    first = np.flatnonzero(start)
    rank = np.arange(len(ts)) - first[grp]
    out = np.empty(len(t), np.int64)
    out[order] = rank
    return out


def _finish(log: Log, keep: np.ndarray) -> Log:
    """Drop malformed rows from every column."""
    if keep.all():
        return log
    s = log.samples
    for name in ("time", "gpu", "util", "power", "power_limit", "clock", "clock_max", "events",
                 "mem", "has_pid"):
        a = getattr(s, name)
        if a is not None:
            setattr(s, name, a[keep])
    if log.jobs is not None:
        for name in ("time", "gpu", "loader_cpu", "main_cpu", "main_thread", "workers",
                     "loader_busy", "loader_age"):
            a = getattr(log.jobs, name)
            if a is not None:
                setattr(log.jobs, name, a[keep])
    if log.host is not None:
        for name in ("time", "iowait", "disk_read", "disk_write", "cpu"):
            setattr(log.host, name, getattr(log.host, name)[keep])
    return log


def read_gpumon(path: str, header: list[str]) -> Log:
    pa, pc, _ = _pa()
    names = [h.strip() for h in header]
    text_cols = {"source", "pids", "verdict", "cause"}
    typed = {n: (pa.string() if n in text_cols else pa.float64()) for n in names}
    try:
        table, skipped = _read_csv(path, header, typed)
        fast = True
    except pa.ArrowInvalid:
        table, skipped = _read_csv(path, header)
        fast = False
    n = table.num_rows
    bad = np.zeros(n, bool)

    def col(name, hexa=False):
        if name not in table.column_names:
            return np.full(n, np.nan)
        v, b = (hex_or_num if hexa else num)(table.column(name))
        bad[:] |= b
        return v

    t = col("time")
    gpu = col("gpu")
    bad |= np.isnan(t) | np.isnan(gpu)
    pids_col = table.column("pids") if "pids" in table.column_names else None
    if pids_col is not None:
        p = pc.utf8_trim_whitespace(pids_col.combine_chunks())
        length = _np(pc.utf8_length(p)).astype(float)      # NaN: no PIDs column value
        has_pid = np.where(np.isnan(length), np.nan, (length > 0).astype(float))
    else:
        has_pid = np.full(n, np.nan)
    samples = SampleCols(t, np.nan_to_num(gpu, nan=-1).astype(np.int64), col("util_gpu_pct"),
                         col("power_w"), col("power_limit_w"), col("sm_clock_mhz"),
                         col("sm_clock_max_mhz"), col("clock_events", hexa=True),
                         col("mem_used_mib"), has_pid)
    jobs = JobCols(t, samples.gpu, col("loader_cpu_pct"), col("main_cpu_pct"),
                   col("main_thread_max_pct"), col("loader_workers"), col("loader_busy"),
                   col("loader_age_s"))
    host = HostCols(t, col("iowait_pct"), col("disk_read_mbps"), col("disk_write_mbps"),
                    col("cpu_pct"))
    pids: dict = {}
    if pids_col is not None:
        # Each distinct (GPU, PIDs text) pair once, in order of first appearance.
        ptab = pids_col.combine_chunks()
        uarr = pc.unique(ptab)
        texts = uarr.to_pylist()
        code = np.nan_to_num(_np(pc.index_in(ptab, value_set=uarr)).astype(float),
                             nan=len(texts)).astype(np.int64)
        _, first = np.unique(samples.gpu * (len(texts) + 1) + code, return_index=True)
        first.sort()
        for g, k in zip(samples.gpu[first].tolist(), code[first].tolist()):
            ptxt = texts[k] if k < len(texts) else None
            cur = set(pids.get(g) or ())
            if ptxt:
                try:
                    cur |= {int(x) for x in ptxt.split()}
                except ValueError:
                    pass
            pids[g] = tuple(sorted(cur))
    log = Log(path, "gpumon", samples, jobs, host, pids, Malformed(), n + skipped)
    nbad = int(bad.sum()) + skipped
    if nbad:
        width = len(header)
        first = _first_bad_line(path, width, lambda row: _gpumon_row_ok(row, names))
        log.malformed.add(first, nbad)
    del fast
    return _finish(log, ~bad)


def _gpumon_row_ok(row: list[str], names: list[str]) -> bool:
    for cell, name in zip(row, names):
        if name in ("source", "pids", "verdict", "cause"):
            continue
        if cell.strip() == "" and name not in ("time", "gpu"):
            continue
        if not _cell_ok(cell) or (name in ("time", "gpu") and cell.strip() == ""):
            return False
    return True


# How a detector column of an nvidia-smi log is read (the others: num).
NVSMI_READ = {"time": times, "events": hex_or_num}
# Columns converted once per distinct text (see per_value): few distinct values, or (power)
# a tenth as many as rows. Timestamps are nearly all distinct per poll: times() already
# parses each run of equal stamps once.
NVSMI_BY_VALUE = {"util", "mem", "power", "power_limit", "clock", "clock_max", "events"}


def _nvsmi_text(c, fn) -> tuple[np.ndarray, np.ndarray]:
    """(values, bad) of a text column of an nvidia-smi log (or of its distinct texts)."""
    if fn is num:
        v = _num_fast(c)
        if v is not None:
            return v, np.zeros(len(c), bool)
    s = _pc().utf8_trim_whitespace(c)
    v, b = fn(s, trimmed=True)
    # nvidia-smi never writes an empty field: an empty one is a short line.
    return v, b | (_np(_pc().binary_length(s)) == 0)


def per_value(col, f: Callable) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """``f(texts) -> (values, flags)`` for every row of the text column ``col``, with ``f``
    called once on its distinct texts (an Arrow array) and the results spread back to the
    rows: the same arrays, when ``f`` reads each text on its own. None when ``col`` has no
    rows or a null (then call ``f(col)``)."""
    pc = _pc()
    if len(col) == 0:
        return None
    d = pc.dictionary_encode(col)
    chunks = d.chunks if hasattr(d, "chunks") else [d]
    chunks = [ch for ch in chunks if len(ch)]
    if any(ch.indices.null_count for ch in chunks):
        return None
    idx = np.concatenate([_np1(ch.indices, copy=False) for ch in chunks])
    v, b = f(chunks[0].dictionary)       # one dictionary, shared by every chunk
    return v[idx], (b[idx] if b.any() else np.zeros(len(idx), bool))


def read_nvsmi(path: str, header: list[str], interval: Optional[float] = None) -> Log:
    names = [h.strip() for h in header]
    keys = [_key(h) for h in names]
    cols: dict[str, str] = {}
    for name, k in zip(names, keys):
        target = NVSMI_FIELDS.get(k)
        if target and target not in cols:
            cols[target] = name
    if "gpu" in cols:
        cols.pop("gpu_id", None)      # GPUs by index; their UUID or bus id is not needed
    # Only the fields the detector reads are converted (the rest only count as fields); the
    # GPU index is read as an integer by the CSV reader (as text when it is not one).
    want = list(dict.fromkeys(cols.values()))
    try:
        table, skipped = _read_text(path, header, want,
                                    {cols["gpu"]: "int64"} if "gpu" in cols else None)
    except _pa()[0].ArrowInvalid:
        table, skipped = _read_text(path, header, want)
    n = table.num_rows
    bad = np.zeros(n, bool)
    if "util" not in cols:
        raise UserError(f"{path}: an nvidia-smi log needs the utilization.gpu field "
                        "(nvidia-smi --query-gpu=timestamp,index,utilization.gpu,...)")

    def convert(target):
        c = table.column(cols[target])
        fn = NVSMI_READ.get(target, num)
        if not _is_text(c.type):
            v, b = fn(c)
            return v, b | _empty(c)
        if target in NVSMI_BY_VALUE:
            # Each distinct text once (a column holds few: 0-100 %, a handful of clocks).
            r = per_value(c, lambda d: _nvsmi_text(d, fn))
            if r is not None:
                return r
        return _nvsmi_text(c, fn)

    # Every column at once (each converts on its own; the bad rows of all are or-ed).
    wanted = [x for x in cols if x != "gpu_id"]
    conv = dict(zip(wanted, map_threads(convert, wanted)))
    for _, b in conv.values():
        bad |= b

    def col(target):
        return conv[target][0] if target in conv else None

    util = col("util")
    if "gpu" in cols:
        gpu = col("gpu")
        bad |= np.isnan(gpu)
        gpu = np.nan_to_num(gpu, nan=-1).astype(np.int64)
    elif "gpu_id" in cols:
        gpu = _gpu_codes(table.column(cols["gpu_id"]))
    else:
        gpu = None
    if "time" in cols:
        t = col("time")
        bad |= np.isnan(t)
        if gpu is None:
            gpu = _per_time_order(np.nan_to_num(t))
    else:
        if gpu is None:
            gpu = np.zeros(n, np.int64)
        step = interval or 1.0
        t = _row_times(gpu, step)
    samples = SampleCols(t, gpu, util, col("power"), col("power_limit"), col("clock"),
                         col("clock_max"), col("events"), col("mem"), None)
    log = Log(path, "nvidia-smi", samples, None, None, {}, Malformed(), n + skipped)
    nbad = int(bad.sum()) + skipped
    if nbad:
        hexcols = {i for i, k in enumerate(keys) if NVSMI_FIELDS.get(k) == "events"}
        numcols = {i for i, k in enumerate(keys) if NVSMI_FIELDS.get(k) in
                   ("util", "power", "power_limit", "clock", "clock_max", "mem", "gpu")}
        tcol = keys.index("timestamp") if "timestamp" in keys else None

        def ok(row):
            for i, c in enumerate(row):
                if i in numcols and not _cell_ok(c):
                    return False
                if i in hexcols and not _cell_ok(c, hexa=True):
                    return False
                if i == tcol and not re.match(r"^\s*\d{4}[/-]\d\d[/-]\d\d[ T]\d\d:\d\d:\d\d", c):
                    return False
            return True
        log.malformed.add(_first_bad_line(path, len(header), ok), nbad)
    return _finish(log, ~bad)


def _empty(col) -> np.ndarray:
    pa, pc, _ = _pa()
    if hasattr(col, "combine_chunks"):
        col = col.combine_chunks()
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return _np(pc.is_null(col))   # a missing trailing field
    length = _np(pc.utf8_length(pc.utf8_trim_whitespace(col)))
    return (length == 0) | np.isnan(length.astype(float))


def _row_times(gpu: np.ndarray, step: float) -> np.ndarray:
    """Without a time column: the k-th row of each GPU is at k * step."""
    t = np.zeros(len(gpu))
    for g in np.unique(gpu):
        m = gpu == g
        t[m] = np.arange(int(m.sum())) * step
    return t


def read_plain(path: str, header: list[str]) -> Log:
    names = [h.strip() for h in header]
    keys = [_key(h) for h in names]
    picks = [_pick(keys, c) for c in (PLAIN_UTIL, PLAIN_TIME, PLAIN_GPU, PLAIN_POWER,
                                       PLAIN_LIMIT, PLAIN_MEM)]
    table, skipped = _read_text(path, header, list(dict.fromkeys(
        names[i] for i in picks if i is not None)))
    n = table.num_rows
    bad = np.zeros(n, bool)

    def col(cands, fn=num):
        i = _pick(keys, cands)
        if i is None:
            return None
        v, b = fn(table.column(names[i]))
        bad[:] |= b
        return v

    util = col(PLAIN_UTIL)
    t = col(PLAIN_TIME, times)
    gpu = col(PLAIN_GPU)
    if gpu is None:
        gpu = np.zeros(n)
    if t is None:
        t = _row_times(np.nan_to_num(gpu).astype(np.int64), 1.0)
    bad |= np.isnan(t) | np.isnan(gpu)
    samples = SampleCols(t, np.nan_to_num(gpu, nan=-1).astype(np.int64), util, col(PLAIN_POWER),
                         col(PLAIN_LIMIT), None, None, None, col(PLAIN_MEM), None)
    log = Log(path, "plain", samples, None, None, {}, Malformed(), n + skipped)
    nbad = int(bad.sum()) + skipped
    if nbad:
        idx = {i for i, k in enumerate(keys)
               if k in PLAIN_UTIL + PLAIN_GPU + PLAIN_POWER + PLAIN_MEM + PLAIN_LIMIT}
        ti = _pick(keys, PLAIN_TIME)

        def ok(row):
            if ti is not None and not row[ti].strip():
                return False
            return all(_cell_ok(row[i]) for i in idx)
        log.malformed.add(_first_bad_line(path, len(header), ok), nbad)
    return _finish(log, ~bad)


# dmon column names (lower case) -> detector column; names vary by driver version.
DMON_FIELDS = {"gpu": "gpu", "idx": "gpu", "sm": "util", "pwr": "power", "pclk": "clock",
               "fb": "mem", "date": "date", "time": "time"}


def read_dmon(path: str, interval: Optional[float] = None) -> Log:
    bad = Malformed()
    rows: list[tuple] = []
    names: Optional[list[str]] = None
    step = interval or 1.0
    count: dict[int, int] = {}
    nrows = 0
    try:
        f = open(path, "r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        for lineno, line in enumerate(f, start=1):
            s = line.strip()
            if not s:
                continue
            if s.startswith("#"):
                words = s.lstrip("#").split()
                low = [w.lower() for w in words]
                if "gpu" in low or "idx" in low and names is None:
                    if "gpu" in low:
                        names = low
                continue
            nrows += 1
            parts = s.split()
            if names is None or len(parts) != len(names):
                bad.add(lineno)
                continue
            rec = dict(zip(names, parts))
            try:
                g = int(rec.get("gpu", rec.get("idx")))
                util = _dmon_val(rec.get("sm"))
                power = _dmon_val(rec.get("pwr"))
                clock = _dmon_val(rec.get("pclk"))
                mem = _dmon_val(rec.get("fb"))
                if "time" in rec:
                    t = _dmon_time(rec.get("date"), rec["time"])
                else:
                    k = count.get(g, 0)
                    count[g] = k + 1
                    t = k * step
            except (ValueError, TypeError):
                bad.add(lineno)
                continue
            rows.append((t, g, util, power, clock, mem))
    if names is None and nrows:
        raise UserError(f"{path}: no nvidia-smi dmon header line (# gpu ...) found")
    arr = np.array(rows, dtype=float).reshape(-1, 6)
    samples = SampleCols(arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3], None,
                         arr[:, 4], None, None, arr[:, 5], None)
    return Log(path, "dmon", samples, None, None, {}, bad, nrows)


def _dmon_val(x: Optional[str]) -> float:
    if x is None or x == "-":
        return math.nan
    return float(x)


def _dmon_time(date: Optional[str], t: str) -> float:
    import datetime as dt
    hh, mm, ss = t.split(":")
    secs = int(hh) * 3600 + int(mm) * 60 + float(ss)
    if date:
        d = dt.datetime.strptime(date, "%Y%m%d").replace(tzinfo=dt.timezone.utc)
        return d.timestamp() + secs
    return secs


def read_log(path: str, interval: Optional[float] = None) -> Log:
    """Any supported log, its kind detected from its first lines."""
    with small_pages():
        return _read_log(path, interval)


def _read_log(path: str, interval: Optional[float]) -> Log:
    lines = head_lines(path)
    if not lines:
        raise UserError(f"{path}: empty file, nothing to analyse")
    kind = detect(lines)
    if kind is None:
        raise UserError(f"{path}: not a log gpumon can read (want a gpumon CSV, an nvidia-smi "
                        "--query-gpu CSV, an nvidia-smi dmon log, or a CSV with time, gpu and "
                        "utilization columns)")
    if kind == "dmon":
        return read_dmon(path, interval)
    header = next(csv.reader(io.StringIO(lines[0])))
    if kind == "gpumon":
        return read_gpumon(path, header)
    if kind == "nvidia-smi":
        return read_nvsmi(path, header, interval)
    return read_plain(path, header)
