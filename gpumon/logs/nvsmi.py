"""``nvidia-smi --query-gpu=... --format=csv[,nounits] -l N`` logs: values with units
(``92 %``, ``150.23 W``, ``1024 MiB``), any subset and order of fields, ``[N/A]`` for
unsupported, timestamps like ``2024/01/15 10:00:01.123``, ``-l``/``-lms`` intervals."""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.errors import UserError
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, empty_samples, finish, gpu_index, row_times
from gpumon.logs.table import read_cells
from gpumon.logs.values import hex_or_num, key, num, time_columns, whole_times

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
# How a detector column is read (the others: num); the time column is read whole (times).
READ = {"events": hex_or_num}


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
    # Only the fields the detector reads are converted (the rest only count as fields),
    # a block of rows at a time.
    want = list(dict.fromkeys(cols.values()))
    got, body = read_cells(lines, names, want, lambda c: _convert(cols, c))
    n = got.rows
    if n == 0:
        return Log(path, "nvidia-smi", empty_samples(), malformed=body.malformed)
    if "time" in cols:
        whole_times(lines, names, cols["time"], got)
    lines.data, lines.ends = b"", None     # (the text can go: every value is read)
    bad = got.get("bad")
    col = got.get
    t, gpu = _time_and_gpu(cols, got, bad, interval)
    samples = SampleCols(t, gpu, col("util"), col("power"), col("power_limit"), col("clock"),
                         col("clock_max"), col("events"), col("mem"), None)
    log = Log(path, "nvidia-smi", samples, None, None, {}, body.malformed, n)
    return finish(log, bad, body.line_of)


def _time_and_gpu(cols: dict, got, bad: np.ndarray, interval: Optional[float]):
    """(times, GPU indices) of the rows; rows with a bad GPU or time marked in ``bad``."""
    n = got.rows
    if "gpu" in cols:
        gpu, bad_gpu = gpu_index(got.get("gpu"))
        bad |= bad_gpu
    elif "gpu_id" in cols:
        gpu = gpu_codes(got.get("gpu_id"))
    else:
        gpu = None
    if "time" not in cols:
        gpu = np.zeros(n, np.int64) if gpu is None else gpu
        return row_times(gpu, interval or 1.0), gpu
    t = got.get("time")
    bad |= got.get("time_bad")
    if gpu is None:
        gpu, bad_gpu = gpu_index(per_time_order(np.nan_to_num(t)).astype(float))
        bad |= bad_gpu
    return t, gpu


def _convert(cols: dict, cells: dict) -> dict:
    """One block's detector columns as numbers, and ``bad``: rows with a bad or empty value
    (nvidia-smi never writes an empty field: an empty one is a short line); the time column's
    apart (values.time_columns)."""
    out = {}
    bad = np.zeros(len(next(iter(cells.values()))), bool)
    for x, name in cols.items():
        c = cells[name]
        if x == "gpu_id":
            out[x] = np.array(c.texts(), object)
        elif x == "time":
            out.update(time_columns(c))
        else:
            v, b = READ.get(x, num)(c)
            out[x] = v
            bad |= b | (c.length == 0)
    out["bad"] = bad
    return out


def gpu_codes(ids: np.ndarray) -> np.ndarray:
    """GPU identifiers (UUID, bus id) -> 0..n-1 in order of first appearance."""
    index: dict = {}
    codes = np.array([index.setdefault(x, len(index)) for x in ids.tolist()], float)
    return gpu_index(codes)[0]


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
