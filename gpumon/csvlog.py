"""The CSV log: CsvSink writes it (gpumon.logs.gpumon_csv reads it back, for replay and
`gpumon analyze`).

Tidy format: one row per GPU per utilization sample, at the wall-clock time the driver took
it; columns `time,gpu,source`, the GPU metrics, that GPU's job processes, the host, and the
verdict of the job the GPU belongs to. Empty cell = missing. No comment lines: plain csv and
pandas read it. The columns come from the field metadata in samples.py, nowhere else.
"""
from __future__ import annotations

import csv
import io
import math
import operator
import os
from typing import Optional, Sequence

from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError
from gpumon.logfile import AppendSink, cut_partial_end, refuse_other_format
from gpumon.samples import (GpuSample, HostSample, JobProcs, Tick, csv_fields)

_GPU_FIELDS = csv_fields(GpuSample)
_JOB_FIELDS = csv_fields(JobProcs)
_HOST_FIELDS = csv_fields(HostSample)
VERDICT_COLUMNS = ["verdict", "cause", "straggler_gpu", "confidence"]
COLUMNS = ([f.name for f in _GPU_FIELDS] + [f.name for f in _JOB_FIELDS]
           + [f.name for f in _HOST_FIELDS] + VERDICT_COLUMNS)


_NUMBER = (int, float)


def _formatter(f):
    fmt = f.metadata.get("fmt", "")
    if f.name == "pids":
        return lambda v: "" if v is None else " ".join(map(str, v))
    if fmt == "d":
        return lambda v: "" if v is None else str(int(v))
    if fmt:                            # (format(v, fmt) is "{:fmt}".format(v), parsed once)
        return lambda v: "" if v is None else (format(v, fmt) if isinstance(v, _NUMBER)
                                               else str(v))
    return lambda v: "" if v is None else str(v)


_GPU_FMT = [(f.name, _formatter(f)) for f in _GPU_FIELDS]
# A source gives a GPU's samples of one tick the same readings but for these (NVML: one
# driver utilization sample each); the other cells are formatted once per GPU and reused.
_PER_SAMPLE = ("time", "util_gpu_pct")
_GPU_PER = [(i, name, fmt) for i, (name, fmt) in enumerate(_GPU_FMT) if name in _PER_SAMPLE]
_GPU_SHARED = [(i, fmt) for i, (name, fmt) in enumerate(_GPU_FMT) if name not in _PER_SAMPLE]
_gpu_shared_values = operator.attrgetter(*(name for name, _ in _GPU_FMT
                                           if name not in _PER_SAMPLE))
_JOB_FMT = [(f.name, _formatter(f)) for f in _JOB_FIELDS]
_HOST_FMT = [(f.name, _formatter(f)) for f in _HOST_FIELDS]


_HEADER = (",".join(COLUMNS) + "\n").encode()
_TIME_CELL = dict(_GPU_FMT)["time"]


def _verdict_cells(d: Optional[Diagnosis]) -> list[str]:
    if d is None:
        return ["", "", "", ""]
    return [d.verdict, d.cause or "", "" if d.straggler_gpu is None else str(d.straggler_gpu),
            f"{d.confidence:.2f}"]


def last_times(lines: Sequence[bytes]) -> dict[int, float]:
    """The latest `time` of each `gpu` in these rows of a gpumon log (others are skipped)."""
    out: dict[int, float] = {}
    for line in lines:
        cells = line.split(b",", 2)
        try:
            t, gpu = float(cells[0]), int(cells[1])
        except (ValueError, IndexError):
            continue                       # the header, a malformed row
        if t > out.get(gpu, -math.inf):
            out[gpu] = t
    return out


def prepare_append(path: str, size: int) -> tuple[dict[int, float], int]:
    """Checks that ``path`` is a gpumon log of these columns and makes it ready to continue:
    a partial last row (a write cut short by a full disk or a power loss) is cut off, so the
    next row does not glue onto it. Returns the last time of each GPU in the file and the
    bytes cut."""
    try:
        with open(path, "r+b") as f:
            first = f.readline(64 * 1024)
            refuse_other_format(path, first, "csv")
            if first.rstrip(b"\r\n") != _HEADER.rstrip(b"\n"):
                raise UserError(f"{path} is not a gpumon log of this version (its columns "
                                "differ); log to a new file instead")
            tail, start, cut = cut_partial_end(f, size)
    except OSError as exc:
        raise UserError(f"cannot append to {path}: {exc.strerror or exc}; log to a new file "
                        "instead") from None
    lines = tail.split(b"\n")
    return last_times(lines[1:] if start else lines), cut


class CsvSink(AppendSink):
    """Appends ticks (and the verdicts of the moment) to a CSV file.

    One write per tick, at once, with O_APPEND: logrotate's `copytruncate` works (the next
    tick starts the cut file again with the header), and `reopen()` (SIGUSR1, logrotate's
    `postrotate`) continues in a new file of the same name after a rename. With ``append``
    a partial last row is cut off first, and samples at or before the file's last time of
    their GPU are skipped (the driver's recent past, already logged). A full disk or an
    unwritable path raises UserError with one line that counts the rows written; a row the
    failure cut short is taken out, the rows before it stay.
    """

    def __init__(self, path: str, *, force: bool = False, append: bool = False):
        self._after: dict[int, float] = {}
        self._header_said = False      # (on stdout: the header once, whatever the fd's size)
        super().__init__(path, force=force, append=append)
        self._emit(b"")

    def _continue(self, size: int) -> None:
        self._after, self.cut = prepare_append(self.path, size)

    def reopen(self) -> None:
        super().reopen()
        if not self.stdout:
            self._emit(b"")                # (the header, if the new file is empty)

    def _emit(self, data: bytes) -> None:
        """Writes ``data`` (whole rows), after the header when the file is empty (new, or cut
        to nothing by copytruncate); counts the rows that reached the file."""
        try:
            head = _HEADER if self._header_due() else b""
        except OSError as exc:
            self._fail(exc)
        self._emit_records(data, head)

    def _header_due(self) -> bool:
        """Before the first row of a new or emptied file; on standard output, once."""
        if self.stdout:
            due, self._header_said = not self._header_said, True
            return due
        return os.fstat(self._fd).st_size == 0

    def _new_samples(self, samples: Sequence[GpuSample]) -> Sequence[GpuSample]:
        """Without the samples an appended file already holds: at or before their GPU's last
        time there, as written."""
        if not self._after:
            return samples
        out = []
        for s in samples:
            last = self._after.get(s.gpu)
            if last is None:
                out.append(s)
            elif float(_TIME_CELL(s.time)) > last:
                del self._after[s.gpu]     # later samples of this GPU are newer still
                out.append(s)
        return out

    def write(self, tick: Tick, diagnoses: Sequence[Diagnosis] = ()) -> None:
        self._reopen_if_asked()
        samples = self._new_samples(tick.gpus)
        if not samples:
            return
        self._emit(rows_text(samples, tick.host, diagnoses).encode())


def rows_text(samples: Sequence[GpuSample], host, diagnoses: Sequence[Diagnosis]) -> str:
    """The CSV text of one row per sample, as csv.writer writes ``_rows``, byte for byte.

    Each GPU's row is text fixed for the tick around its per-sample cells (time, util), so
    a row costs two cell formats and a join rather than a list of cells for csv.writer. A
    cell that csv would quote (a comma, a quote, a line break in it) shows in the counts of
    the result: that tick is written by csv.writer instead."""
    text = _joined(samples, host, diagnoses)
    n = len(samples)
    if (text.count(",") == n * (len(COLUMNS) - 1) and text.count("\n") == n
            and '"' not in text and "\r" not in text):
        return text
    buf = io.StringIO()
    # (A NUL in a cell is dropped: gpumon's reader skips a line holding one, as the hole a
    # copytruncate leaves, and Python 3.10's csv cannot write one.)
    csv.writer(buf, lineterminator="\n").writerows(
        [c.replace("\0", "") for c in row] for row in _rows(samples, host, diagnoses))
    return buf.getvalue()


def _tails(host, diagnoses: Sequence[Diagnosis]):
    """A function of a GPU to its job, host and verdict cells (formatted once per GPU)."""
    by_gpu = {g: d for d in diagnoses for g in d.gpus}
    host_cells = ([fmt(getattr(host, name)) for name, fmt in _HOST_FMT] if host
                  else [""] * len(_HOST_FMT))
    tails: dict[int, list[str]] = {}

    def tail(gpu: int) -> list[str]:
        done = tails.get(gpu)
        if done is None:
            job = host.job_on(gpu) if host else None
            done = tails[gpu] = (
                ([fmt(getattr(job, name)) for name, fmt in _JOB_FMT] if job
                 else [""] * len(_JOB_FMT))
                + host_cells + _verdict_cells(by_gpu.get(gpu)))
        return done
    return tail


# Marks a per-sample cell in a GPU's row text while it is cut into pieces around them.
_SLOT = "\0"


def _joined(samples: Sequence[GpuSample], host, diagnoses: Sequence[Diagnosis]) -> str:
    """The rows joined by commas, no cell quoted (rows_text checks that none needed it)."""
    tail = _tails(host, diagnoses)
    pieces: dict[int, tuple[tuple, list[str]]] = {}   # per GPU: (shared values, text pieces)
    out: list[str] = []
    for s in samples:
        values = _gpu_shared_values(s)
        done = pieces.get(s.gpu)
        if done is None or done[0] != values:
            cells = [_SLOT] * len(_GPU_FMT)
            for (i, fmt), v in zip(_GPU_SHARED, values):
                cells[i] = fmt(v)
            parts = (",".join(cells + tail(s.gpu)) + "\n").split(_SLOT)
            if len(parts) != len(_GPU_PER) + 1:       # a NUL in a cell: csv.writer's way
                return ""
            done = pieces[s.gpu] = (values, parts)
        parts = done[1]
        out.append(parts[0])
        for (_, name, fmt), after in zip(_GPU_PER, parts[1:]):
            out.append(fmt(getattr(s, name)))
            out.append(after)
    return "".join(out)


def _rows(samples: Sequence[GpuSample], host, diagnoses: Sequence[Diagnosis]) -> list[list[str]]:
    """The cells of one row per sample; the cells shared by a GPU's samples formatted once."""
    tail = _tails(host, diagnoses)
    shared: dict[int, tuple[tuple, list[str]]] = {}
    rows = []
    for s in samples:
        values = _gpu_shared_values(s)
        done = shared.get(s.gpu)
        if done is None or done[0] != values:
            cells = [""] * len(_GPU_FMT)
            for (i, fmt), v in zip(_GPU_SHARED, values):
                cells[i] = fmt(v)
            done = shared[s.gpu] = (values, cells)
        cells = done[1].copy()
        for i, name, fmt in _GPU_PER:
            cells[i] = fmt(getattr(s, name))
        rows.append(cells + tail(s.gpu))
    return rows


# -- reading a gpumon log back ----------------------------------------------------------------
