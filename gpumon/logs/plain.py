"""A plain log: a utilization column and maybe time, GPU, power and memory columns, as
people's own loops and scripts write them (headers.py: where the header is; columns.py:
which columns are which, or as --columns names them). Without a GPU column it is one GPU,
GPU 0; without a time column its rows are one second apart; a wide log (a column per GPU
per field) gives each GPU's samples at the time of its row."""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.logs.columns import (EPOCH_MIN, TIME_UNITS, Choice, choose, fractions, named,
                                 time_unit)
from gpumon.logs.headers import as_csv, locate, note, sample_rows
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, empty_samples, finish, gpu_index, row_times
from gpumon.logs.table import header, read_cells
from gpumon.logs.values import num, time_columns, whole_times

# The fields a wide log has a column of for each GPU.
_ROLE_COLUMNS = ("util", "power", "power_limit", "mem")


def read(lines: Lines, path: str, columns: Optional[dict] = None) -> Log:
    """The plain log in ``lines``; ``columns``: role -> column name, as the user named them
    (else chosen by columns.choose)."""
    from gpumon.logs import SNIFF_LINES         # (the package's: imported once it is loaded)
    head = lines.head(SNIFF_LINES)
    form = locate(head)
    notes = [n for n in (note(form),) if n]
    lines = as_csv(lines, form)
    names = header(lines)
    ch = named(names, columns, path) if columns else choose(names, sample_rows(head, form))
    notes += ch.notes
    got, body = _cells(lines, names, ch)
    if got.rows == 0:
        return Log(path, "plain", empty_samples(), malformed=body.malformed, notes=notes)
    n = got.rows
    bad = np.zeros(n, bool)
    t_at = ch.at.get("time")

    def col(i):
        if i is None:
            return None
        k = "time" if i == t_at else str(i)
        bad[:] |= got.get(k + "_bad")
        return got.get(k)

    t = _seconds(col(t_at), names[ch.at.get("time", 0)], notes)
    if ch.per_gpu:
        samples, line_of = _wide(ch, col, t, n, bad, body.line_of, notes)
    else:
        samples, line_of = _long(ch, col, t, n, bad, body.line_of, notes)
    _time_notes(samples, names[ch.at["time"]] if "time" in ch.at else None, notes)
    samples.util = _percent(samples.util, notes)
    log = Log(path, "plain", samples, None, None, {}, body.malformed, n, notes)
    return finish(log, np.repeat(bad, len(samples.time) // max(n, 1)), line_of)


def _cells(lines: Lines, names: list[str], ch: Choice):
    """The chosen columns read: each as numbers (``"<index>"``, ``"<index>_bad"``), the
    time column as times (``"time"``, ``"time_bad"``)."""
    t_at = ch.at.get("time")
    want = {i: names[i] for i in ch.indices()}

    def convert(cells: dict) -> dict:
        out = {}
        for i, name in want.items():
            if i == t_at:
                out.update(time_columns(cells[name]))
            else:
                out[str(i)], out[f"{i}_bad"] = num(cells[name])
        return out

    got, body = read_cells(lines, names, list(dict.fromkeys(want.values())), convert)
    if t_at is not None and got.rows:
        whole_times(lines, names, names[t_at], got)
    return got, body


def _long(ch: Choice, col, t, n: int, bad: np.ndarray, line_of, notes: list):
    """One sample per row: the GPU from its column (else GPU 0)."""
    at = ch.at
    util = col(at.get("util"))
    g = col(at.get("gpu"))
    gpu, bad_gpu = gpu_index(np.zeros(n) if g is None else g)
    bad |= bad_gpu
    if "gpu" not in at:
        notes.append("no GPU column: read as one GPU, GPU 0")
    if t is None:
        t = row_times(gpu, 1.0)
    return (SampleCols(t, gpu, util, col(at.get("power")), col(at.get("power_limit")), None,
                       None, None, col(at.get("mem")), None), line_of)


def _wide(ch: Choice, col, t, n: int, bad: np.ndarray, line_of, notes: list):
    """A column per GPU per field: each row is one sample of every GPU (sample k of row
    k // GPUs), each GPU's missing fields NaN."""
    gpus = sorted(ch.per_gpu)
    k = len(gpus)
    notes.append(f"a column per GPU per field: GPUs {', '.join(map(str, gpus))} read from "
                 "each row")
    if t is None:
        t = np.arange(n, dtype=float)
    cols = {}
    for role in _ROLE_COLUMNS:
        got = [col(ch.per_gpu[g].get(role)) for g in gpus]
        if all(v is None for v in got):
            cols[role] = None
        else:
            cols[role] = np.column_stack([np.full(n, np.nan) if v is None else v
                                          for v in got]).ravel()
    gpu = np.tile(np.array(gpus, dtype=np.int64), n)
    samples = SampleCols(np.repeat(t, k), gpu, cols["util"], cols["power"],
                         cols["power_limit"], None, None, None, cols["mem"], None)
    return samples, (lambda rows: line_of(np.asarray(rows) // k))


def _seconds(t: Optional[np.ndarray], name: str, notes: list) -> Optional[np.ndarray]:
    """A time column whose name gives a unit under the second, in seconds."""
    unit = None if t is None else time_unit(name)
    if unit is None:
        return t
    notes.append(f"time column {name!r} in {unit}: converted to seconds")
    return t * TIME_UNITS[unit]


def _time_notes(samples: SampleCols, name: Optional[str], notes: list) -> None:
    t = samples.time
    if name is None:
        notes.append("no time column: rows read as 1 s apart")
    elif len(t) and np.isfinite(t).any() and np.nanmax(t) < EPOCH_MIN:
        notes.append(f"time column {name!r} read as seconds since the start")


def _percent(util: Optional[np.ndarray], notes: list) -> Optional[np.ndarray]:
    """Utilization written as fractions of 1 -> percent."""
    if util is None or not fractions(util):
        return util
    notes.append("utilization written as fractions of 1 (0.35 for 35%): scaled to percent")
    return util * 100.0
