"""The CSV log: CsvSink writes it (gpumon.logs.gpumon_csv reads it back, for replay and
`gpumon analyze`).

Tidy format: one row per GPU per utilization sample, at the wall-clock time the driver took
it; columns `time,gpu,source`, the GPU metrics, that GPU's job processes, the host, and the
verdict of the job the GPU belongs to. Empty cell = missing. No comment lines: plain csv and
pandas read it. The columns come from the field metadata in samples.py, nowhere else.
"""
from __future__ import annotations

import csv
import errno
import io
import math
import operator
import os
from typing import Optional, Sequence

from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError
from gpumon.samples import (GpuSample, HostSample, JobProcs, Tick, csv_fields)

_GPU_FIELDS = csv_fields(GpuSample)
_JOB_FIELDS = csv_fields(JobProcs)
_HOST_FIELDS = csv_fields(HostSample)
VERDICT_COLUMNS = ["verdict", "cause", "straggler_gpu", "confidence"]
COLUMNS = ([f.name for f in _GPU_FIELDS] + [f.name for f in _JOB_FIELDS]
           + [f.name for f in _HOST_FIELDS] + VERDICT_COLUMNS)


def _formatter(f):
    fmt = f.metadata.get("fmt", "")
    if f.name == "pids":
        return lambda v: "" if v is None else " ".join(map(str, v))
    if fmt == "d":
        return lambda v: "" if v is None else str(int(v))
    if fmt:
        spec = "{:" + fmt + "}"
        return lambda v: "" if v is None else (spec.format(v) if isinstance(v, (int, float))
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


# Bytes read back from the end of a log that --append continues: its last row of every GPU
# is in them (8 GPUs write about 7 KB a second).
TAIL_BYTES = 1 << 18
# The path that means standard output (`gpumon log -o -`).
STDOUT = "-"
_HEADER = (",".join(COLUMNS) + "\n").encode()
_TIME_CELL = dict(_GPU_FMT)["time"]


def _verdict_cells(d: Optional[Diagnosis]) -> list[str]:
    if d is None:
        return ["", "", "", ""]
    return [d.verdict, d.cause or "", "" if d.straggler_gpu is None else str(d.straggler_gpu),
            f"{d.confidence:.2f}"]


def _size_of(path: str) -> int:
    """Bytes in ``path`` (0: missing or empty); a directory is refused in one line."""
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory; give a file in it, e.g. "
                        f"{os.path.join(path, 'run.csv')}")
    try:
        return os.path.getsize(path)
    except (FileNotFoundError, NotADirectoryError):
        return 0                           # (opening it says what is wrong)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def _open_append(path: str, *, truncate: bool = False) -> int:
    """``path`` opened for appending (O_APPEND: every write lands at the end, also after
    logrotate's copytruncate cut the file to nothing)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags | (os.O_TRUNC if truncate else 0), 0o666)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


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
            if f.readline(64 * 1024).rstrip(b"\r\n") != _HEADER.rstrip(b"\n"):
                raise UserError(f"{path} is not a gpumon log of this version (its columns "
                                "differ); log to a new file instead")
            start = max(0, size - TAIL_BYTES)
            f.seek(start)
            tail = f.read()
            cut = 0
            if not tail.endswith(b"\n"):
                end = tail.rfind(b"\n") + 1
                if end:
                    cut = len(tail) - end
                    f.truncate(start + end)
                else:                      # a last row longer than the tail: end it here
                    f.seek(0, os.SEEK_END)
                    f.write(b"\n")
                tail = tail[:end]
    except OSError as exc:
        raise UserError(f"cannot append to {path}: {exc.strerror or exc}; log to a new file "
                        "instead") from None
    lines = tail.split(b"\n")
    return last_times(lines[1:] if start else lines), cut


class CsvSink:
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
        self.path = path
        self.rows = 0
        self.cut = 0                   # bytes of a partial last row cut off before appending
        self._after: dict[int, float] = {}
        self._reopen = False
        self.stdout = path == STDOUT
        self._header_said = False      # (on stdout: the header once, whatever the fd's size)
        if self.stdout:
            if append:
                raise UserError("--append cannot continue standard output (-o -)", 2)
            self._fd = os.dup(1)
        else:
            self._fd = self._open_file(path, force, append)
        self._buf = io.StringIO()
        self._w = csv.writer(self._buf, lineterminator="\n")
        self._emit(b"")

    def _open_file(self, path: str, force: bool, append: bool) -> int:
        size = _size_of(path)
        if size and not (force or append):
            raise UserError(f"{path} exists; use --force to overwrite it or --append to "
                            "continue it")
        if append and size:
            self._after, self.cut = prepare_append(path, size)
        return _open_append(path, truncate=force)

    @property
    def name(self) -> str:
        """What to call the log in messages."""
        return "standard output" if self.stdout else self.path

    def request_reopen(self) -> None:
        """Reopen the file at the next tick (safe in a signal handler)."""
        self._reopen = True

    def reopen(self) -> None:
        """Continue in the file now at ``path`` (the old one was renamed: log rotation)."""
        self._reopen = False
        if self.stdout:
            return                         # (nothing to reopen: a pipe or a terminal)
        fd = _open_append(self.path)
        os.close(self._fd)
        self._fd = fd
        self._emit(b"")

    def _emit(self, data: bytes) -> None:
        """Writes ``data`` (whole rows), after the header when the file is empty (new, or cut
        to nothing by copytruncate); counts the rows that reached the file."""
        try:
            head = _HEADER if self._header_due() else b""
            _write_all(self._fd, head + data)
        except _ShortWrite as short:
            data, done = head + data, short.done
            self.rows += data.count(b"\n", len(head), done)
            self._cut_partial(done - (data.rfind(b"\n", 0, done) + 1))
            self._fail(short.error)
        except OSError as exc:
            self._fail(exc)
        self.rows += data.count(b"\n")

    def _header_due(self) -> bool:
        """Before the first row of a new or emptied file; on standard output, once."""
        if self.stdout:
            due, self._header_said = not self._header_said, True
            return due
        return os.fstat(self._fd).st_size == 0

    def _cut_partial(self, nbytes: int) -> None:
        if nbytes and not self.stdout:
            try:
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - nbytes)
            except OSError:
                pass

    def _fail(self, exc: OSError) -> None:
        if self.stdout and exc.errno == errno.EPIPE:
            raise BrokenPipeError(exc.errno, exc.strerror)  # (`| head`: the CLI leaves quietly)
        why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise UserError(f"cannot write {self.name}: {why} ({self.rows} rows were written "
                        "before this)") from None

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
        if self._reopen:
            self.reopen()
        samples = self._new_samples(tick.gpus)
        if not samples:
            return
        self._buf.seek(0)
        self._buf.truncate()
        self._w.writerows(_rows(samples, tick.host, diagnoses))
        self._emit(self._buf.getvalue().encode())

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1


class _ShortWrite(Exception):
    def __init__(self, done: int, error: OSError):
        self.done, self.error = done, error


def _write_all(fd: int, data: bytes) -> int:
    """Every byte of ``data`` to ``fd``; _ShortWrite says how many went before an error."""
    view, done = memoryview(data), 0
    while done < len(data):
        try:
            done += os.write(fd, view[done:])
        except OSError as exc:
            raise _ShortWrite(done, exc) from None
    return done


def _rows(samples: Sequence[GpuSample], host, diagnoses: Sequence[Diagnosis]) -> list[list[str]]:
    """The cells of one row per sample; the cells shared by a GPU's samples formatted once."""
    by_gpu = {g: d for d in diagnoses for g in d.gpus}
    host_cells = ([fmt(getattr(host, name)) for name, fmt in _HOST_FMT] if host
                  else [""] * len(_HOST_FMT))
    tails: dict[int, list[str]] = {}    # per GPU: its job, host and verdict cells
    shared: dict[int, tuple[tuple, list[str]]] = {}
    rows = []
    for s in samples:
        tail = tails.get(s.gpu)
        if tail is None:
            job = host.job_on(s.gpu) if host else None
            tail = tails[s.gpu] = (
                ([fmt(getattr(job, name)) for name, fmt in _JOB_FMT] if job
                 else [""] * len(_JOB_FMT))
                + host_cells + _verdict_cells(by_gpu.get(s.gpu)))
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
        rows.append(cells + tail)
    return rows


# -- reading a gpumon log back ----------------------------------------------------------------
