"""gpumon's public Python API (re-exported by ``gpumon``; the names in ``gpumon.__all__``).

    import gpumon
    report = gpumon.analyze_log("run.csv")       # any log `gpumon analyze` reads
    report.summary.verdict, report.segments      # Summary, tuple of Diagnosis
    report = gpumon.diagnose(df)                 # a DataFrame or arrays: time, gpu, util, ...
    with gpumon.Monitor(interval=1) as m:        # live, in a background thread
        ...
    m.verdict, m.history()

Both offline entry points run the pipeline of `gpumon analyze` (gpumon.analyze.timeline);
Monitor runs the live detector of `gpumon watch`. Bad input raises ValueError or TypeError
with a one-line message; a log that cannot be read, no driver or an unknown simulated scenario
raise UserError (gpumon.UserError), as the commands print them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from gpumon.analyze import analyze_file
from gpumon.report import to_json, to_text
from gpumon.analyze.timeline import Timeline, summary, timeline
from gpumon.detect.bins import SampleCols
from gpumon.detect.thresholds import DEFAULT, Thresholds
from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError
from gpumon.logs.columns import check_roles, fractions
from gpumon.logs.log import Log, finish, gpu_index
from gpumon.sampler import Monitor

# diagnose()'s columns: name -> the other names it accepts (Monitor.history()'s and the CSV
# log's, so a history or a read gpumon CSV goes straight back in).
COLUMNS = {
    "time": (),
    "gpu": (),
    "util": ("util_gpu_pct",),                     # %
    "power": ("power_w",),                         # W
    "power_limit": ("power_limit_w",),             # W
    "clock": ("sm_clock_mhz",),                    # MHz
    "clock_max": ("sm_clock_max_mhz",),            # MHz
    "events": ("clock_events",),                   # NVML clock event (throttle) bitmask
    "mem": ("mem_used_mib",),                      # MiB
}


@dataclass(frozen=True)
class Summary:
    """The verdict that explains most of the run (start-up and shutdown set aside)."""
    verdict: str
    cause: Optional[str]
    gpus: tuple[int, ...]
    straggler_gpu: Optional[int]
    confidence: float                       # 0..1
    fractions: dict                         # verdict -> share of the main job's time, 0..1


@dataclass(frozen=True)
class Report:
    """A diagnosed log: its segments (one Diagnosis per span of one verdict, per job) and
    its summary; ``to_dict()`` is `gpumon analyze --format json`, ``text()`` its text report."""
    source: str                             # the path, or "<data>" for diagnose()
    kind: str                               # gpumon | nvidia-smi | dmon | plain | data
    segments: tuple[Diagnosis, ...]
    summary: Summary
    start: Optional[float]                  # s, the log's first and last sample time
    end: Optional[float]
    gaps: tuple[tuple[float, float], ...]   # (start, end) where nothing was logged
    malformed: int                          # lines (or rows) skipped as unreadable
    notes: tuple[str, ...]                  # what the reader assumed
    _log: Log = field(repr=False, compare=False)
    _timeline: Timeline = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"file": self.source, **to_json(self._timeline, self._log)}

    def text(self, explain: bool = False) -> str:
        return to_text(self._log, self._timeline, explain)


def analyze_log(path: str, interval: Optional[float] = None,
                thresholds: Thresholds = DEFAULT, columns: Optional[Mapping[str, str]] = None
                ) -> Report:
    """Diagnose a log file (gpumon CSV, nvidia-smi --query-gpu CSV, nvidia-smi dmon, a plain
    CSV or whitespace table with a utilization column; gzip too). ``interval``: seconds
    between rows of a log without times. ``columns``: which column is which, role -> name
    (``{"time": "elapsed_sec", "util": "gpu_util_pct"}``; roles: time, gpu, util, power,
    power_limit, mem), for a log whose columns gpumon does not tell by itself."""
    log, tl = analyze_file(path, interval, thresholds, _roles(columns))
    return _report(log, tl)


def _roles(columns: Optional[Mapping[str, str]]) -> Optional[dict]:
    if columns is None:
        return None
    try:
        return check_roles(dict(columns))
    except ValueError as exc:
        raise ValueError(f"analyze_log(columns=...): {exc}") from None


def diagnose(data: Any = None, *, thresholds: Thresholds = DEFAULT, **columns) -> Report:
    """Diagnose samples given as columns: a pandas DataFrame, a dict of sequences, and/or
    keyword arrays (which win over ``data``'s). ``time`` (s, or datetime64) and ``util`` (%)
    are needed; ``gpu`` (NVML index; absent: all GPU 0), ``power``, ``power_limit`` (W),
    ``clock``, ``clock_max`` (MHz), ``events`` (clock event bitmask) and ``mem`` (MiB) help.
    Rows with a value outside its physical range are skipped and counted in ``malformed``.
    ``util`` given as fractions (every value 0 to 1, some between: 0.35 for 35%) raises
    ValueError rather than read as under 1% (idle); values of 0 and 1 alone are percent."""
    cols = _columns(data, columns)
    _check_percent(cols["util"])
    n = len(cols["util"])
    gpu, bad = gpu_index(cols["gpu"] if "gpu" in cols else np.zeros(n))
    samples = SampleCols(cols["time"], gpu, cols["util"], cols.get("power"),
                         cols.get("power_limit"), cols.get("clock"), cols.get("clock_max"),
                         cols.get("events"), cols.get("mem"), None)
    log = finish(Log("<data>", "data", samples, rows=n), bad, lambda rows: rows + 1)
    if log.empty:
        raise ValueError(f"no usable samples: {log.malformed.count} of {n} row(s) are "
                         "malformed and the rest have no utilization")
    return _report(log, timeline(log, thresholds))


def _check_percent(util: np.ndarray) -> None:
    """ValueError when ``util`` reads as 0-1 fractions, not percent (see diagnose)."""
    if fractions(util):
        u = util[np.isfinite(util)]
        raise ValueError("diagnose(): util holds fractions (every value 0 to 1, e.g. "
                         f"{float(u[(u > 0) & (u < 1)][0]):g}); it takes percent, 0-100: "
                         "pass util * 100")


def _columns(data: Any, kw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    unknown = sorted(set(kw) - set(COLUMNS))
    if unknown:
        raise TypeError(f"diagnose() got unknown column(s) {unknown}; it takes "
                        f"{', '.join(COLUMNS)}")
    given = _named(data)
    given.update({k: v for k, v in kw.items() if v is not None})
    out = {}
    for name, aliases in COLUMNS.items():
        found = [n for n in (name, *aliases) if n in given]
        if found:
            out[name] = _numbers(name, given[found[0]])
    for need in ("time", "util"):
        if need not in out:
            raise ValueError(f"diagnose() needs a '{need}' column")
    lengths = {k: len(v) for k, v in out.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"diagnose(): columns of different lengths {lengths}")
    return out


def _named(data: Any) -> dict:
    """Columns by name from a DataFrame (anything with ``columns``) or a mapping."""
    if data is None:
        return {}
    if hasattr(data, "columns") and hasattr(data, "__getitem__"):
        return {str(c): data[c] for c in data.columns}
    if isinstance(data, Mapping):
        return dict(data)
    raise TypeError(f"diagnose() takes a DataFrame or a dict of columns, not "
                    f"{type(data).__name__}")


def _numbers(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values)
    if arr.ndim != 1:
        raise ValueError(f"diagnose(): column '{name}' is not one-dimensional")
    if np.issubdtype(arr.dtype, np.datetime64):
        ns = arr.astype("datetime64[ns]")
        return np.where(np.isnat(ns), np.nan, ns.astype(np.int64) / 1e9)
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"diagnose(): column '{name}' holds values that are not numbers "
                         "(or None)") from None


def _report(log: Log, tl: Timeline) -> Report:
    sm = summary(tl)
    return Report(
        source=log.path, kind=log.kind, segments=tuple(tl.segments),
        summary=Summary(sm["verdict"], sm["cause"], tuple(sm["gpus"]), sm["straggler_gpu"],
                        sm["confidence"], dict(sm["fractions"])),
        start=tl.start, end=tl.end, gaps=tuple(tl.gaps), malformed=log.malformed.count,
        notes=tuple(log.notes), _log=log, _timeline=tl)


__all__ = ["analyze_log", "diagnose", "Monitor", "Report", "Summary", "Diagnosis",
           "UserError"]
