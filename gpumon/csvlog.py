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
import operator
import os
from typing import IO, Optional, Sequence

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


def _verdict_cells(d: Optional[Diagnosis]) -> list[str]:
    if d is None:
        return ["", "", "", ""]
    return [d.verdict, d.cause or "", "" if d.straggler_gpu is None else str(d.straggler_gpu),
            f"{d.confidence:.2f}"]


class CsvSink:
    """Appends ticks (and the verdicts of the moment) to a CSV file.

    Flushed after every tick (at least once a second at the default interval). A full disk or
    an unwritable path raises UserError with one line; rows already written stay written.
    """

    def __init__(self, path: str, *, force: bool = False, append: bool = False):
        self.path = path
        self.rows = 0
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if exists and not (force or append):
            raise UserError(f"{path} exists; use --force to overwrite it or --append to continue it")
        if append and exists:
            with open(path, newline="") as f:
                header = f.readline().strip().split(",")
            if header != COLUMNS:
                raise UserError(f"{path} is not a gpumon log of this version (its columns "
                                "differ); log to a new file instead")
        try:
            self._f: IO[str] = open(path, "a" if append else "w", newline="", buffering=1 << 16)
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        self._w = csv.writer(self._f, lineterminator="\n")
        if not (append and exists):
            self._guard(lambda: (self._w.writerow(COLUMNS), self._f.flush()))

    def _guard(self, fn) -> None:
        try:
            fn()
        except OSError as exc:
            why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            raise UserError(f"cannot write {self.path}: {why} ({self.rows} rows were logged "
                            "before this)") from None

    def write(self, tick: Tick, diagnoses: Sequence[Diagnosis] = ()) -> None:
        if not tick.gpus:
            return
        by_gpu = {g: d for d in diagnoses for g in d.gpus}
        host = tick.host
        host_cells = ([fmt(getattr(host, name)) for name, fmt in _HOST_FMT] if host
                      else [""] * len(_HOST_FMT))
        tails: dict[int, list[str]] = {}    # per GPU: its job, host and verdict cells
        shared: dict[int, tuple[tuple, list[str]]] = {}
        rows = []
        for s in tick.gpus:
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
        self._guard(lambda: (self._w.writerows(rows), self._f.flush()))
        self.rows += len(rows)

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass


# -- reading a gpumon log back ----------------------------------------------------------------
