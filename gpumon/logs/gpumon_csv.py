"""gpumon's own CSV log (written by csvlog.CsvSink), read back: the one reader, for
``gpumon analyze`` (columns) and for ``--replay`` (ticks). Columns are matched by name, so
older or newer logs with extra or missing columns read."""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from gpumon.detect.bins import HostCols, JobCols, SampleCols
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, bad_values, finish, gpu_index
from gpumon.logs.table import read_cells
from gpumon.logs.values import hex_or_num, num
from gpumon.samples import GPM_FIELDS, GpuSample, HostSample, JobProcs, Tick, csv_fields

TEXT_COLUMNS = ("source", "pids", "verdict", "cause")
# Detector column -> CSV column.
SAMPLE_CSV = {"util": "util_gpu_pct", "power": "power_w", "power_limit": "power_limit_w",
              "clock": "sm_clock_mhz", "clock_max": "sm_clock_max_mhz",
              "events": "clock_events", "mem": "mem_used_mib"}
JOB_CSV = {"loader_cpu": "loader_cpu_pct", "main_cpu": "main_cpu_pct",
           "main_thread": "main_thread_max_pct", "workers": "loader_workers",
           "loader_busy": "loader_busy", "loader_age": "loader_age_s"}
HOST_CSV = {"iowait": "iowait_pct", "disk_read": "disk_read_mbps",
            "disk_write": "disk_write_mbps", "cpu": "cpu_pct"}
# Ticks are rebuilt from rows in spans of this many seconds when a log is replayed.
READ_TICK_S = 1.0


def is_header(names: list[str]) -> bool:
    return [n.strip() for n in names[:3]] == ["time", "gpu", "source"]


class Columns:
    """Every column of a gpumon CSV by name: numbers as float arrays (NaN missing), text as
    a list of str; ``bad`` marks rows with an unreadable cell."""

    def __init__(self, lines: Lines, names: list[str]):
        self.cols, self.body = read_cells(lines, names, names, _convert)
        self.n = self.cols.rows
        self.bad = self.cols.get("bad") if self.n else np.zeros(0, bool)

    def has(self, name: str) -> bool:
        return name in self.cols

    def num(self, name: str, hexa: bool = False) -> np.ndarray:
        v = self.cols.get(name) if name not in TEXT_COLUMNS else None
        return np.full(self.n, np.nan) if v is None else v

    def text(self, name: str) -> Optional[list]:
        if name not in TEXT_COLUMNS or not self.has(name):
            return None
        return self.cols.get(name).tolist()


def _convert(cells: dict, texts: bool = True) -> dict:
    """One block's cells: numbers (NaN missing); ``bad`` marks rows with an unreadable number;
    ``has_pid`` 1.0 where a row lists a PID, NaN where it lists none (an empty cell is "not
    known": the log writes None and no process alike as ""). TEXT_COLUMNS as the rows' texts
    (``texts``), or only what analyze keeps of them: the PIDs seen on each GPU (``pids``) and
    the sources (``source``), as the block's summaries (batches.Columns.extra)."""
    out = {}
    bad = np.zeros(len(next(iter(cells.values()))), bool)
    for name, c in cells.items():
        if name not in TEXT_COLUMNS:
            out[name], b = (hex_or_num if name == "clock_events" else num)(c)
            bad |= b
        elif texts:
            out[name] = np.array(c.texts(), object)
    if "pids" in cells:
        out["has_pid"] = np.where(cells["pids"].length > 0, 1.0, np.nan)
    if not texts:
        if "pids" in cells:
            out["pids"] = {}
            _add_pids(out["pids"], out.get("gpu", np.full(len(bad), np.nan)),
                      cells["pids"].texts())
        if "source" in cells:
            out["source"] = set(cells["source"].distinct()[0])
    out["bad"] = bad
    return out


# The columns `gpumon analyze` reads (the others, such as temperature or the verdicts logged
# live, are not parsed).
DETECTOR_CSV = ("time", "gpu", "source", "pids", *SAMPLE_CSV.values(), *JOB_CSV.values(),
                *HOST_CSV.values(), *GPM_FIELDS)


def read(lines: Lines, names: list[str], path: str) -> Log:
    """A gpumon CSV as detector columns (for ``gpumon analyze``), read and converted a block
    of rows at a time."""
    want = [n for n in names if n in DETECTOR_CSV]
    cols, body = read_cells(lines, names, want, lambda cells: _convert(cells, texts=False))
    lines.data, lines.ends = b"", None     # (the text can go: every value is read)
    c = _Read(cols)
    log = finish(_detector_log(c, path, body.malformed), c.bad, body.line_of)
    pids: dict[int, set] = {}
    for block in cols.extra.get("pids", []):
        for g, v in block.items():
            pids.setdefault(g, set()).update(v)
    log.pids = {g: tuple(sorted(v)) for g, v in pids.items()}
    log.sources = tuple(sorted(set().union(*cols.extra.get("source", [])) - {""}))
    if log.simulated:
        log.notes.append("simulated data: recorded with --sim, on simulated GPUs, not a "
                         "real machine's")
    return log


class _Read:
    """The converted columns with Columns' reading interface (num, has, bad, n)."""

    def __init__(self, cols):
        self._cols = cols
        self.n = cols.rows
        self.bad = cols.get("bad") if "bad" in cols else np.zeros(0, bool)

    def has(self, name: str) -> bool:
        return name in self._cols

    def num(self, name: str, hexa: bool = False) -> np.ndarray:
        v = self._cols.get(name) if name not in TEXT_COLUMNS else None
        return np.full(self.n, np.nan) if v is None else v


def _add_pids(out: dict, gpu: np.ndarray, texts: list) -> None:
    """Each row's PIDs into ``out[gpu]`` (rows without a GPU index leave theirs out)."""
    index, bad = gpu_index(gpu)      # (NaN, inf, -1, 1e12: no GPU, no PIDs)
    for g, ptxt in zip(np.where(bad, -1, index).tolist(), texts):
        if g >= 0 and ptxt:
            out.setdefault(g, set()).update(int(x) for x in ptxt.split() if x.isdigit())


def _detector_log(c, path: str, malformed) -> Log:
    """The detector's columns of ``c`` (Columns, or _Read)."""
    t = c.num("time")
    gpu, bad_gpu = gpu_index(c.num("gpu"))
    c.bad |= bad_gpu
    s = {k: c.num(v, hexa=(k == "events")) for k, v in SAMPLE_CSV.items()}
    samples = SampleCols(t, gpu, has_pid=_has_pid(c), **s)
    jobs = JobCols(t, gpu, **{k: c.num(v) for k, v in JOB_CSV.items()})
    host = HostCols(t, **{k: c.num(v) for k, v in HOST_CSV.items()})
    log = Log(path, "gpumon", samples, jobs, host, {}, malformed, c.n)
    # (GPM columns with a value: a log of GPUs without GPM, or from before them, has none.)
    log.gpm = {k: v for k in GPM_FIELDS if c.has(k) for v in (c.num(k),)
               if not np.isnan(v).all()} or None
    return log


def _has_pid(c) -> np.ndarray:
    """1.0 where a row lists a PID, NaN where it lists none (see _convert)."""
    return c.num("has_pid")


# -- replay -----------------------------------------------------------------------------------
_GPU_FIELDS = csv_fields(GpuSample)
_JOB_FIELDS = csv_fields(JobProcs)
_HOST_FIELDS = csv_fields(HostSample)
_INT = {f.name for f in _GPU_FIELDS + _JOB_FIELDS + _HOST_FIELDS if f.metadata.get("fmt") == "d"}


def ticks(lines: Lines, names: list[str], source: Optional[str] = "replay",
          tick_s: float = READ_TICK_S) -> tuple[Iterator[Tick], "Columns"]:
    """The log rebuilt into Ticks, rows grouped into spans of ``tick_s`` seconds (a span also
    ends where time goes back by more than a minute: a second run in the same file), and the
    columns (their ``body.malformed`` counts the rows left out)."""
    c = Columns(lines, names)
    log = _detector_log(c, "", c.body.malformed)
    t, gpu = log.samples.time, log.samples.gpu
    c.bad |= bad_values(log)
    vals = {f.name: c.num(f.name, hexa=(f.name == "clock_events"))
            for f in _GPU_FIELDS + _JOB_FIELDS + _HOST_FIELDS
            if f.name not in ("time", "gpu", "source", "pids")}
    if c.bad.any():
        rows = np.flatnonzero(c.bad)
        c.body.malformed.add(int(c.body.line_of(rows[:1])[0]), len(rows))
    pids = c.text("pids")
    src = c.text("source")
    return _tick_iter(c, t, gpu, vals, pids, src, source, tick_s), c


def _row_values(vals: dict, i: int, names) -> dict:
    out = {}
    for f in names:
        v = vals[f.name][i]
        out[f.name] = None if v != v else (int(v) if f.name in _INT else float(v))
    return out


def _tick_iter(c: Columns, t, gpu, vals, pids, src, source, tick_s) -> Iterator[Tick]:
    gpu_f = [f for f in _GPU_FIELDS if f.name not in ("time", "gpu", "source", "pids")]
    pending: list = []
    tick_end = last = None
    for i in np.flatnonzero(~c.bad).tolist():
        ti = float(t[i])
        g = _row_values(vals, i, gpu_f)
        ptxt = pids[i] if pids is not None else None
        g["pids"] = tuple(int(p) for p in ptxt.split() if p.isdigit()) if ptxt else None
        sample = GpuSample(time=ti, gpu=int(gpu[i]),
                           source=source if source is not None else (src[i] if src else "nvml"),
                           **g)
        job = _row_values(vals, i, _JOB_FIELDS)
        host = _row_values(vals, i, _HOST_FIELDS)
        if tick_end is None:
            tick_end = ti + tick_s
        if pending and (ti >= tick_end or (last is not None and ti < last - 60)):
            yield _tick(pending)
            pending = []
            tick_end = ti + tick_s
        last = ti
        pending.append((sample, job, host))
    if pending:
        yield _tick(pending)


def _tick(rows: list) -> Tick:
    samples = tuple(sorted((r[0] for r in rows), key=lambda s: (s.gpu, s.time)))
    end = max(s.time for s in samples)
    last_job: dict[int, dict] = {}
    last_host: dict = {}
    for s, job, host in rows:
        last_job[s.gpu] = job
        last_host = host
    jobs = tuple(JobProcs(gpu=g, **j) for g, j in sorted(last_job.items()))
    return Tick(time=end, gpus=samples, host=HostSample(time=end, jobs=jobs, **last_host))
