"""`gpumon log --format jsonl`: one JSON object per tick, for scripts.

Each object (one line):

    {"time": 1700000000.123, "local": "2026-12-02T03:04:05.123+01:00", "source": "nvml",
     "gpus": [{"gpu": 0, "lost": false, "samples": 6, "util_gpu_samples": [100, 100, 40, ...],
               "util_gpu_pct": 82.0, "util_mem_pct": 31.0, "power_w": 250.0, ...,
               "job": {"main_pid": 4242, "main_cpu_pct": 97.0, ...}}],
     "host": {"cpu_pct": 23.0, "iowait_pct": 0.4, ...},
     "verdicts": [{"verdict": "data_starvation", "gpus": [0, 1], "cause": "cpu_preprocessing",
                   "straggler_gpu": null, "confidence": 0.9, "rule": "duty_low",
                   "because": "...", "advice": "..."}]}

The reading fields, their names and units are those of the CSV columns (gpumon/samples.py
describes each once); per GPU they are the tick's latest sample, except ``util_gpu_pct``
(the mean of the tick's driver samples, each in ``util_gpu_samples``). A missing value is
null. ``local`` is the same moment in local time, marked with its UTC offset. A poll that
brought no sample (a simulation's start) writes no line.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Sequence

from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError
from gpumon.logfile import (JSONL_START, TAIL_BYTES, AppendSink, cut_partial_end,
                            refuse_other_format)
from gpumon.samples import GpuSample, HostSample, JobProcs, Tick, csv_fields

_GPU_FIELDS = [f.name for f in csv_fields(GpuSample) if f.name not in ("time", "gpu", "source")]
_JOB_FIELDS = [f.name for f in csv_fields(JobProcs)]
_HOST_FIELDS = [f.name for f in csv_fields(HostSample)]
VERDICT_KEYS = ("verdict", "gpus", "cause", "straggler_gpu", "confidence", "rule", "because",
                "advice")


def local_time(t: float, timespec: str = "milliseconds") -> str:
    """``t`` (Unix seconds) in local time, ISO 8601 with its UTC offset."""
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec=timespec)


def _value(v):
    if isinstance(v, float):
        return round(v, 3)
    if isinstance(v, tuple):
        return list(v)
    return v


def _fields(obj, names: Sequence[str]) -> dict:
    return {n: _value(getattr(obj, n)) for n in names}


def gpu_object(gpu: int, samples: Sequence[GpuSample], tick: Tick) -> dict:
    """One GPU in one tick: its latest readings, every utilization sample, its job."""
    utils = [s.util_gpu_pct for s in samples if s.util_gpu_pct is not None]
    out = {"gpu": gpu, "lost": gpu in tick.lost, "samples": len(samples),
           "util_gpu_samples": [_value(u) for u in utils]}
    out.update(_fields(samples[-1], _GPU_FIELDS) if samples else dict.fromkeys(_GPU_FIELDS))
    out["util_gpu_pct"] = round(sum(utils) / len(utils), 1) if utils else None
    job = tick.host.job_on(gpu) if tick.host is not None else None
    out["job"] = _fields(job, _JOB_FIELDS) if job is not None else None
    return out


def verdict_object(d: Diagnosis) -> dict:
    full = d.as_dict()
    return {k: full[k] for k in VERDICT_KEYS}


def tick_object(tick: Tick, diagnoses: Sequence[Diagnosis], gpus: Sequence[int],
                source: str) -> dict:
    """The JSON object of one tick; ``gpus``: every GPU to list, with samples or not."""
    by_gpu: dict[int, list] = {g: [] for g in gpus}
    for s in tick.gpus:
        by_gpu.setdefault(s.gpu, []).append(s)
    return {"time": round(tick.time, 3), "local": local_time(tick.time), "source": source,
            "gpus": [gpu_object(g, by_gpu[g], tick) for g in sorted(by_gpu)],
            "host": _fields(tick.host, _HOST_FIELDS) if tick.host is not None else None,
            "verdicts": [verdict_object(d) for d in diagnoses]}


class JsonlSink(AppendSink):
    """Appends one JSON line per tick to a file (or standard output, ``-``). With ``append``
    the file must be a JSON-lines log of gpumon's (a CSV log is refused in one line), and a
    partial last line (a write cut short) is cut off first; a line a failed write cuts short
    is taken out, the lines before it stay."""

    UNIT = "lines"

    def __init__(self, path: str, *, source: str, gpus: Sequence[int] = (),
                 force: bool = False, append: bool = False):
        super().__init__(path, force=force, append=append)
        self.source = source
        self.gpus = set(gpus)

    def _continue(self, size: int) -> None:
        self.cut = prepare_append(self.path, size)

    def write(self, tick: Tick, diagnoses: Sequence[Diagnosis]) -> None:
        if not tick.gpus and not tick.lost:
            return                         # (a poll with nothing new: a simulation's start)
        self._reopen_if_asked()
        self.gpus.update(s.gpu for s in tick.gpus)
        obj = tick_object(tick, diagnoses, sorted(self.gpus), self.source)
        self._emit_records((json.dumps(obj, separators=(",", ":")) + "\n").encode())


def _is_tick_line(line: bytes) -> bool:
    """A whole line of gpumon's JSON-lines log: an object with its time and GPUs."""
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and "time" in obj and "gpus" in obj


def prepare_append(path: str, size: int) -> int:
    """Checks that ``path`` is gpumon's JSON-lines log and cuts a partial last line off (so
    the next line does not glue onto it); returns the bytes cut."""
    try:
        with open(path, "r+b") as f:
            first = f.readline(TAIL_BYTES)
            refuse_other_format(path, first, "jsonl")
            whole = first.endswith(b"\n")
            if not (_is_tick_line(first) if whole else first.startswith(JSONL_START)):
                raise UserError(f"{path} is not a JSON-lines log of gpumon's; log to a new "
                                "file instead")
            return cut_partial_end(f, size)[2]
    except OSError as exc:
        raise UserError(f"cannot append to {path}: {exc.strerror or exc}; log to a new file "
                        "instead") from None
