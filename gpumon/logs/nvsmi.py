"""``nvidia-smi --query-gpu=... --format=csv[,nounits] -l N`` logs: values with units
(``92 %``, ``150.23 W``, ``1024 MiB``), any subset and order of fields, ``[N/A]`` for
unsupported, timestamps like ``2024/01/15 10:00:01.123``, ``-l``/``-lms`` intervals."""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.errors import UserError
from gpumon.logs.arrow import pa_modules, pc, to_np
from gpumon.logs.batches import Columns
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, empty_samples, finish, gpu_index, row_times
from gpumon.logs.table import stream_table
from gpumon.logs.values import (hex_or_num, is_text, key, num, num_fast, numeric_text, per_value,
                               times, trimmed_text)

# --query-gpu field names (units stripped) -> detector column.
FIELDS = {
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
# Rows of one poll (nvidia-smi -l/-lms) lie within this many seconds of each other.
POLL_SPREAD_S = 0.02
# How a detector column is read (the others: num).
READ = {"time": times, "events": hex_or_num}
# Columns converted once per distinct text (see per_value): few distinct values, or (power)
# a tenth as many as rows. Timestamps are nearly all distinct per poll: times() already
# parses each run of equal stamps once.
BY_VALUE = {"util", "mem", "power", "power_limit", "clock", "clock_max", "events"}


def read(lines: Lines, names: list[str], path: str, interval: Optional[float]) -> Log:
    cols: dict[str, str] = {}
    for name in names:
        target = FIELDS.get(key(name))
        if target and target not in cols:
            cols[target] = name
    if "util" not in cols:
        raise UserError(f"{path}: an nvidia-smi log needs the utilization.gpu field "
                        "(nvidia-smi --query-gpu=timestamp,index,utilization.gpu,...)")
    if "gpu" in cols:
        cols.pop("gpu_id", None)      # GPUs by index; their UUID or bus id is not needed
    # Only the fields the detector reads are converted (the rest only count as fields); the
    # GPU index is read as an integer by the CSV reader (as text when it is not one). The
    # rows are read and converted a record batch at a time: no text table of the whole log.
    want = list(dict.fromkeys(cols.values()))
    rows = lines.count()

    def sink():
        return _Sink(cols, rows)

    try:
        got, body = stream_table(lines, names, want, sink,
                                 {cols["gpu"]: "int64"} if "gpu" in cols else None)
    except pa_modules()[0].ArrowInvalid:
        got, body = stream_table(lines, names, want, sink)
    if got is None or got.cols.rows == 0:
        return Log(path, "nvidia-smi", empty_samples(), malformed=body.malformed)
    if len(got.numeric) > 1:
        _whole_times(body.lines, names, cols["time"], got.cols)
    conv = got.cols
    n = conv.rows
    bad = conv.get("bad") | conv.get("time_bad") if "time_bad" in conv else conv.get("bad")
    col = conv.get
    if "gpu" in cols:
        gpu, bad_gpu = gpu_index(col("gpu"))
        bad |= bad_gpu
    elif "gpu_id" in cols:
        gpu = gpu_codes(pa_modules()[0].chunked_array(got.ids))
    else:
        gpu = None
    if "time" in cols:
        t = col("time")
        if gpu is None:
            gpu, bad_gpu = gpu_index(per_time_order(np.nan_to_num(t)).astype(float))
            bad |= bad_gpu
    else:
        if gpu is None:
            gpu = np.zeros(n, np.int64)
        t = row_times(gpu, interval or 1.0)
    samples = SampleCols(t, gpu, col("util"), col("power"), col("power_limit"), col("clock"),
                         col("clock_max"), col("events"), col("mem"), None)
    log = Log(path, "nvidia-smi", samples, None, None, {}, body.malformed, n)
    return finish(log, bad, body.line_of)


class _Sink:
    """What stream_table's batches become: the detector columns as numpy arrays, ``bad``
    (rows with a bad value in any but the time column) and ``time_bad``; GPU identifiers
    kept as text (their codes follow first appearance in the whole log); whether each
    batch's times were numbers."""

    def __init__(self, cols: dict, rows: int):
        self.names = cols
        self.wanted = [x for x in cols if x != "gpu_id"]
        self.cols = Columns(rows)
        self.ids: list = []
        self.numeric: set = set()

    def add(self, batch) -> None:
        names = self.names
        cols = {x: batch.column(names[x]) for x in self.wanted}
        # The time column's text trimmed once, for its values and for numeric_text below.
        stamps = trimmed_text(cols["time"]) if "time" in cols else None
        # One column after another: the sink already runs beside the parser (table._stream),
        # and threads of its own per batch only cost more than they overlap.
        conv = [_trimmed(stamps, times) if x == "time" and stamps is not None
                else _convert(c, x) for x, c in cols.items()]
        out = {x: v for x, (v, _) in zip(self.wanted, conv)}
        bad = np.zeros(batch.num_rows, bool)
        for x, (_, b) in zip(self.wanted, conv):
            if x == "time":
                out["time_bad"] = b
            else:
                bad |= b
        out["bad"] = bad
        self.cols.put(out, batch.num_rows)
        if "gpu_id" in names:
            self.ids.append(batch.column(names["gpu_id"]))
        if stamps is not None:
            # times() reads a column as epoch seconds only when every value is a number: a
            # log whose batches disagree is read again as one column (_whole_times).
            self.numeric.add(numeric_text(stamps))


def _whole_times(lines: Lines, names: list[str], name: str, cols: Columns) -> None:
    """The time column converted as one column, as times() reads a whole log (its text read
    again on its own, from the lines the batches were read from)."""
    pa = pa_modules()[0]

    class Texts(list):
        add = list.append

    texts, _ = stream_table(lines, names, [name], Texts)
    v, b = _convert(pa.chunked_array([t.column(0) for t in texts]), "time")
    cols.rows = 0
    cols.put({"time": v, "time_bad": b}, len(v))


def _convert(c, target: str) -> tuple[np.ndarray, np.ndarray]:
    fn = READ.get(target, num)
    if not is_text(c.type):
        v, b = fn(c)
        return v, b | _empty(c)
    if target in BY_VALUE:
        # Each distinct text once (a column holds few: 0-100 %, a handful of clocks).
        r = per_value(c, lambda d: _text(d, fn))
        if r is not None:
            return r
    return _text(c, fn)


def _text(c, fn) -> tuple[np.ndarray, np.ndarray]:
    """(values, bad) of a text column (or of its distinct texts)."""
    if fn is num:
        v = num_fast(c)
        if v is not None:
            return v, np.zeros(len(c), bool)
    return _trimmed(pc().utf8_trim_whitespace(c), fn)


def _trimmed(s, fn) -> tuple[np.ndarray, np.ndarray]:
    """_text of a text column already trimmed of whitespace."""
    v, b = fn(s, trimmed=True)
    # nvidia-smi never writes an empty field: an empty one is a short line.
    return v, b | (to_np(pc().binary_length(s)) == 0)


def _empty(col) -> np.ndarray:
    pa, pc_, _ = pa_modules()
    if hasattr(col, "combine_chunks"):
        col = col.combine_chunks()
    if not is_text(col.type):
        return to_np(pc_.is_null(col))   # a missing trailing field
    length = to_np(pc_.utf8_length(pc_.utf8_trim_whitespace(col)))
    return (length == 0) | np.isnan(length.astype(float))


def gpu_codes(col) -> np.ndarray:
    """GPU identifiers (UUID, bus id) -> 0..n-1 in order of first appearance."""
    pa, pc_, _ = pa_modules()
    arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    arr = pc_.utf8_trim_whitespace(pc_.cast(arr, pa.string()))
    uniq = pc_.unique(arr)
    idx = to_np(pc_.index_in(arr, value_set=uniq))
    return gpu_index(idx.astype(float))[0]


def per_time_order(t: np.ndarray) -> np.ndarray:
    """Without a GPU column: each poll writes one row per GPU, in GPU order, within a few
    milliseconds (POLL_SPREAD_S). The node's GPU count is the usual number of rows in a poll;
    a poll of exactly that many rows sets the GPU of each of its rows, and rows between such
    polls (a torn or short poll) continue the count from the last full one."""
    n = len(t)
    if n == 0:
        return np.zeros(0, np.int64)
    new = np.ones(n, bool)
    new[1:] = np.abs(np.diff(t)) > POLL_SPREAD_S
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, n))
    gpus = int(np.bincount(sizes).argmax())
    full = starts[sizes == gpus]
    if gpus <= 1 or len(full) == 0:
        return np.zeros(n, np.int64)
    sync = np.zeros(n, np.int64)
    sync[full] = full
    sync = np.maximum.accumulate(sync)
    sync[: full[0]] = full[0]
    return (np.arange(n) - sync) % gpus
