"""A log read for analysis: the detector's columns, whatever file they came from.

Also the one record of malformed lines every reader fills, and the physical range of every
column: a value outside it (a 1e308 % utilization, a 38-digit wattage, GPU -1) makes its line
malformed, as an unreadable one does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

from gpumon.detect.bins import HostCols, JobCols, SampleCols

# Highest GPU index a log may name (NVML numbers a node's GPUs from 0; no node has 1024).
MAX_GPU_INDEX = 1023
# Physical range of each detector column, inclusive, in its unit. Beyond it a value is not a
# reading but a corrupt cell.
RANGES = {
    "time": (0.0, 1e11),            # s: Unix epoch (to year 5138) or seconds since a start
    "util": (0.0, 100.0),           # %
    "power": (0.0, 1e5),            # W
    "power_limit": (0.0, 1e5),      # W
    "clock": (0.0, 1e5),            # MHz
    "clock_max": (0.0, 1e5),        # MHz
    "events": (0.0, 2.0 ** 64),     # bitmask
    "mem": (0.0, 1e8),              # MiB
    "loader_cpu": (0.0, 1e6),       # % of one core, summed over workers
    "main_cpu": (0.0, 1e6),         # % of one core (one process on many cores)
    "main_thread": (0.0, 1e3),      # % of one core
    "workers": (0.0, 1e6),          # processes
    "loader_busy": (0.0, 1e6),      # processes
    "loader_age": (0.0, 1e10),      # s
    "iowait": (0.0, 100.0),         # %
    "disk_read": (0.0, 1e7),        # MB/s
    "disk_write": (0.0, 1e7),       # MB/s
    "cpu": (0.0, 100.0),            # %
}
SAMPLE_COLUMNS = ("time", "gpu", "util", "power", "power_limit", "clock", "clock_max",
                  "events", "mem", "has_pid")
JOB_COLUMNS = ("time", "gpu", "loader_cpu", "main_cpu", "main_thread", "workers",
               "loader_busy", "loader_age")
HOST_COLUMNS = ("time", "iowait", "disk_read", "disk_write", "cpu")


@dataclass
class Malformed:
    """Lines that could not be read: how many, and the first one's line number."""
    count: int = 0
    first_line: Optional[int] = None

    def add(self, line: Optional[int], n: int = 1) -> None:
        if n <= 0:
            return
        self.count += n
        if line is not None and (self.first_line is None or line < self.first_line):
            self.first_line = line

    def merge(self, other: "Malformed") -> None:
        self.add(other.first_line, other.count)


@dataclass
class Log:
    path: str
    kind: str                         # logs.sniff.KINDS
    samples: SampleCols
    jobs: Optional[JobCols] = None
    host: Optional[HostCols] = None
    pids: dict = field(default_factory=dict)   # gpu -> tuple of every PID seen (None unknown)
    malformed: Malformed = field(default_factory=Malformed)
    rows: int = 0
    notes: list = field(default_factory=list)  # what the reader assumed, for the report
    sources: tuple = ()               # what made the samples, where the log says (gpumon's
                                      # source column: "nvml", "sim", "replay")
    # GPM activity of each sample, where the log has it (gpumon's GPM columns, DCGM's
    # profiling fields): the CSV column's name (samples.GPM_FIELDS; DCGM's GRACT as
    # "gr_active_ratio") -> 0-1 fractions aligned with ``samples``; the detector reads
    # sm_active_ratio.
    gpm: Optional[dict] = None

    @property
    def simulated(self) -> bool:
        return "sim" in self.sources

    @property
    def empty(self) -> bool:
        return len(self.samples.time) == 0 or bool(np.isnan(self.samples.util).all())

    def take(self, idx: np.ndarray) -> "Log":
        """A log of these rows (a boolean mask or indices) of every column."""
        return Log(self.path, self.kind, _take(self.samples, SAMPLE_COLUMNS, idx),
                   None if self.jobs is None else _take(self.jobs, JOB_COLUMNS, idx),
                   None if self.host is None else _take(self.host, HOST_COLUMNS, idx),
                   self.pids, self.malformed, self.rows, self.notes, self.sources,
                   None if self.gpm is None else {k: v[idx] for k, v in self.gpm.items()})


def _take(cols, names: tuple, idx: np.ndarray):
    kw = {n: (None if getattr(cols, n) is None else getattr(cols, n)[idx]) for n in names}
    return type(cols)(**kw)


def empty_samples() -> SampleCols:
    z = np.zeros(0)
    return SampleCols(z, np.zeros(0, dtype=np.int64), z)


def out_of_range(name: str, v: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """Rows whose value of column ``name`` is present and outside its physical range (or not
    finite); None when the column is absent or has no range."""
    if v is None or name not in RANGES:
        return None
    lo, hi = RANGES[name]
    with np.errstate(invalid="ignore"):
        return ~np.isnan(v) & ~((v >= lo) & (v <= hi))


def gpu_index(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPU indices read as floats -> (int64 indices, bad rows): missing, fractional, negative
    or above MAX_GPU_INDEX are bad (their index reads -1)."""
    with np.errstate(invalid="ignore"):
        ok = (v >= 0) & (v <= MAX_GPU_INDEX) & (v == np.floor(v))
    return np.where(ok, v, -1).astype(np.int64), ~ok


def bad_values(log: Log) -> np.ndarray:
    """Rows with a value outside its column's physical range, in any column."""
    bad = np.zeros(len(log.samples.time), bool)
    for cols, names in ((log.samples, SAMPLE_COLUMNS), (log.jobs, JOB_COLUMNS),
                        (log.host, HOST_COLUMNS)):
        if cols is None:
            continue
        for n in names:
            b = out_of_range(n, getattr(cols, n))
            if b is not None:
                bad |= b
    bad |= np.isnan(log.samples.time)
    return bad


def finish(log: Log, bad: np.ndarray, line_of) -> Log:
    """``log`` without its bad rows and rows with values out of range, counted as malformed;
    ``line_of(rows)`` gives the file line numbers of row indices."""
    bad = bad | bad_values(log)
    if not bad.any():
        return log
    rows = np.flatnonzero(bad)
    log.malformed.add(int(line_of(rows[:1])[0]), len(rows))
    out = log.take(~bad)
    return out


def row_times(gpu: np.ndarray, step: float) -> np.ndarray:
    """Without a time column: the k-th row of each GPU is at k * step."""
    t = np.zeros(len(gpu))
    for g in np.unique(gpu):
        m = gpu == g
        t[m] = np.arange(int(m.sum())) * step
    return t


def runs(log: Log, gap_s: float, window_s: Optional[float] = None,
         min_samples: int = 3) -> Iterator[Log]:
    """The log cut where logging stopped: at a jump back in time of more than ``gap_s`` (a
    second run appended to the file) and, within each, at every pause between samples longer
    than ``gap_s``; in a run sampled too sparsely for a window of ``window_s`` to hold
    ``min_samples`` samples at its usual (median) interval, at every pause longer than
    ``window_s`` too. Each run is in time order. The detector bins a run by the second, so
    a sparse log (a sample a minute, an hour, or a year between two) costs what its samples
    cost, not its span. Runs are made one at a time, as they are asked for."""
    t = log.samples.time
    if len(t) < 2:
        if len(t):
            yield log
        return
    back = np.flatnonzero(np.diff(t) < -gap_s) + 1
    if len(back) and _grouped(log.samples.gpu, back):
        # Each GPU's samples in a block of their own (per-GPU logs joined, or rows sorted by
        # GPU): one run in time order, not one run per GPU.
        log.notes.append("rows grouped by GPU: each GPU's samples put in time order")
        back = back[:0]
    for a, b in zip(np.r_[0, back], np.r_[back, len(t)]):
        ts = t[a:b]
        ordered = bool((ts[1:] >= ts[:-1]).all())     # in time order already (the usual log)
        if ordered:
            idx = np.arange(a, b)
        else:
            idx = a + np.argsort(ts, kind="stable")
            ts = t[idx]
        step = np.diff(ts)
        cut = np.flatnonzero(step > _limit(step, gap_s, window_s, min_samples)) + 1
        if ordered and len(back) == 0 and len(cut) == 0:
            yield log       # one run, in order already: the log itself, not a copy
            return
        for c, d in zip(np.r_[0, cut], np.r_[cut, len(idx)]):
            yield log.take(idx[c:d])


def _grouped(gpu: np.ndarray, back: np.ndarray) -> bool:
    """Whether the blocks between the jumps back in time ``back`` hold disjoint sets of GPUs
    (rows grouped by GPU), rather than the same GPUs again (a second run appended)."""
    seen: set = set()
    for a, b in zip(np.r_[0, back].tolist(), np.r_[back, len(gpu)].tolist()):
        block = set(np.unique(gpu[a:b]).tolist())
        if block & seen:
            return False
        seen |= block
    return True


def _limit(step: np.ndarray, gap_s: float, window_s: Optional[float], min_samples: int
           ) -> float:
    """The longest pause within a run (see runs)."""
    if window_s is None or window_s >= gap_s or not (step > window_s).any():
        return gap_s            # (the usual log: no median of a day's steps to take)
    pos = step[step > 0]        # (a poll's GPUs share their time)
    sparse = len(pos) and float(np.median(pos)) * (min_samples - 1) > window_s
    return window_s if sparse else gap_s
