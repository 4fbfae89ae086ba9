"""gpumon's own JSON-lines log (``gpumon log --format jsonl``, jsonlog.py), read as its CSV
is read: each line becomes the rows the CSV log writes for the same poll (csvlog.rows_text)
and the one gpumon-CSV reader (gpumon_csv) reads them, for ``analyze`` and ``--replay``
alike, host and job columns included.

A line keeps a GPU's driver utilization samples of the poll (``util_gpu_samples``) but not
their times: they are spread evenly over the poll, ending at the line's time (a note says
so). A line that is not a tick object of the log (not JSON, no time, a GPU without its
index) is malformed, counted with its line number; a reading that is no number makes the
rows it is in malformed, as its cell in the CSV would.
"""
from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Iterator, Optional

import numpy as np

from gpumon.csvlog import COLUMNS, rows_text
from gpumon.errors import UserError
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, Malformed
from gpumon.samples import GpuSample, HostSample, JobProcs, csv_fields

# GpuSample's CSV fields after time, gpu, source and util_gpu_pct: those before the first
# field the CSV leaves out given by position (the many samples of a day-long log cost half as
# much), the ones after it (GPM) by name.
_ALL = [f.name for f in fields(GpuSample)]
_CSV = {f.name for f in csv_fields(GpuSample)}
_CUT = next((i for i, n in enumerate(_ALL) if n not in _CSV), len(_ALL))
_GPU_POS = _ALL[4:_CUT]
_GPU_KW = [n for n in _ALL[_CUT:] if n in _CSV]
_JOB_FIELDS = [f.name for f in csv_fields(JobProcs)]
_HOST_FIELDS = [f.name for f in csv_fields(HostSample)]
_HEADER = ",".join(COLUMNS) + "\n"
# Seconds a poll is taken to span when its log tells nothing of the interval (one line, or
# lines all at one time): `gpumon log`'s default interval.
DEFAULT_POLL_S = 1.0
SPREAD_NOTE = ("JSON-lines log: each poll's driver samples spread evenly over the poll "
               "(the log keeps their values, not their times)")


class BadLine(ValueError):
    """A line that is not one of the log's tick objects."""


def read(lines: Lines, path: str) -> Log:
    """The log's detector columns, as the gpumon-CSV reader gives them for the same run."""
    from gpumon.logs import gpumon_csv
    csv_lines, names = as_csv(lines, path)
    log = gpumon_csv.read(csv_lines, names, path)
    log.kind = "gpumon-jsonl"
    log.notes.insert(0, SPREAD_NOTE)
    return log


def as_csv(lines: Lines, name: str) -> tuple[Lines, list[str]]:
    """The rows of gpumon's CSV log for these JSON lines, as clean lines (each row's line
    number is its JSON line's), and the CSV's column names. Malformed lines are counted in
    the result's ``malformed`` (which is ``lines.malformed``); when every line is, the file
    is no log of gpumon's (a UserError naming ``name``)."""
    numbers = lines.line_of(np.arange(lines.count())).tolist()
    out = bytearray(_HEADER.encode())
    lnos, counts = [numbers[0] if numbers else 1], [1]     # (each JSON line's CSV rows)
    for lno, rows in _rows(_texts(lines.data), numbers, lines.malformed):
        out += rows.encode("utf-8")
        lnos.append(lno)
        counts.append(rows.count("\n"))
    lines.data = b""                           # (the JSON text can go)
    if numbers and len(lnos) == 1 and lines.malformed.count >= len(numbers):
        raise UserError(f"{name}: JSON lines, but none is a poll of gpumon log --format "
                        "jsonl (an object with its time and GPUs)")
    where = np.repeat(np.array(lnos, np.int64), counts)
    return Lines(bytes(out), where, lines.malformed, len(where)), list(COLUMNS)


def _texts(data: bytes) -> Iterator[str]:
    """The lines of clean text (each ending in a line break), one at a time: a day's log is
    never held as a list of strings."""
    start = 0
    while start < len(data):
        end = data.index(b"\n", start)
        yield data[start:end].decode("utf-8")
        start = end + 1


def _rows(texts: Iterator[str], numbers: list[int], mal: Malformed
          ) -> Iterator[tuple[int, str]]:
    """(line number, CSV rows) of each readable line, in order."""
    spread = _Spread()
    ticks = _objects(texts, numbers, mal)
    cur = next(ticks, None)
    while cur is not None:
        nxt = next(ticks, None)
        lno, obj = cur
        span = spread.span(obj["time"], None if nxt is None else nxt[1]["time"])
        try:
            rows = _tick_rows(obj, span)
        except (BadLine, TypeError, ValueError, OverflowError):
            mal.add(lno)
            rows = ""
        if rows:
            yield lno, rows
        cur = nxt


def _objects(texts: Iterator[str], numbers: list[int], mal: Malformed
             ) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each line that is a JSON object with a finite time and a
    list of GPUs; the other lines are counted malformed."""
    for text, lno in zip(texts, numbers):
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        t = obj.get("time") if isinstance(obj, dict) else None
        if (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                and isinstance(obj.get("gpus"), list)):
            yield lno, obj
        else:
            mal.add(lno)


class _Spread:
    """How long a poll's samples took: the time since the line before, but no more than the
    time between the two lines before that (a pause in logging is not a long poll), and for
    the first line the time to the next; DEFAULT_POLL_S when the log tells nothing."""

    def __init__(self):
        self.t: Optional[float] = None
        self.gap: Optional[float] = None

    def span(self, t: float, t_next: Optional[float]) -> float:
        if self.t is not None:
            gap: Optional[float] = t - self.t
        else:
            gap = None if t_next is None else t_next - t
        gap = gap if gap is not None and gap > 0 else None
        seen = [g for g in (gap, self.gap) if g is not None]
        self.t = t
        self.gap = gap if gap is not None else self.gap
        return min(seen) if seen else DEFAULT_POLL_S


def _tick_rows(obj: dict, span: float) -> str:
    """The CSV rows of one line's samples (no verdict cells: `analyze` judges afresh). Values
    are passed on as they are: the CSV reader judges them, as it judges the CSV's cells."""
    t = float(obj["time"])
    source = obj.get("source")
    source = source if isinstance(source, str) else "nvml"
    samples: list[GpuSample] = []
    jobs = []
    for g in obj["gpus"]:
        if not isinstance(g, dict) or not _index(g.get("gpu")):
            raise BadLine("a GPU without its index")
        samples.extend(_samples(g, t, span, source))
        job = g.get("job")
        if job is not None:
            jobs.append(JobProcs(gpu=g["gpu"], **_values(job, _JOB_FIELDS)))
    if not samples:
        return ""
    host = obj.get("host")
    host = HostSample(time=t, jobs=tuple(jobs),
                      **(_values(host, _HOST_FIELDS) if host is not None else {}))
    samples.sort(key=_in_time)             # (a poll's samples in time order, as sources give)
    return rows_text(samples, host, ())


def _in_time(s: GpuSample) -> tuple:
    return s.time, s.gpu


def _samples(g: dict, t: float, span: float, source: str) -> list[GpuSample]:
    """One GPU's samples of a poll, spread over the ``span`` before ``t``: one per driver
    utilization sample, or one without utilization where the poll brought samples without
    (``samples`` counts them all; their number alone is no reading)."""
    utils = g.get("util_gpu_samples") or []
    n = g.get("samples", len(utils))
    if not isinstance(utils, list) or not _index(n):
        raise BadLine("utilization samples that are not a list")
    utils = utils or [None] * min(n, 1)
    n = len(utils)
    if n == 0:
        return []
    rest = [g.get(n) for n in _GPU_POS]
    pids = g.get("pids")
    if pids is not None:
        if not isinstance(pids, list):
            raise BadLine("PIDs that are not a list")
        rest[_GPU_POS.index("pids")] = tuple(pids)
    kw = {n: g.get(n) for n in _GPU_KW}
    step, gpu = span / n, g["gpu"]
    return [GpuSample(t - span + (k + 1) * step, gpu, source, u, *rest, **kw)
            for k, u in enumerate(utils)]


def _values(obj, names: list[str]) -> dict:
    if not isinstance(obj, dict):
        raise BadLine("readings that are not an object")
    return {n: obj.get(n) for n in names}


def _index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
