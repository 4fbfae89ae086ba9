"""gpumon.Monitor: the live sampler for notebooks and scripts.

A background thread polls NVML (or simulated GPUs) and feeds the detector of `gpumon watch`
(gpumon.monitor.Monitor with the Detector); the caller reads the current verdict and
the samples so far at any time:

    with gpumon.Monitor(interval=1) as m:
        train()
    m.verdict, m.diagnoses, m.history()
"""
from __future__ import annotations

import collections
import math
import re
import threading
import time
from typing import Optional, Sequence

from gpumon.commands.common import MAX_INTERVAL_S, MIN_INTERVAL_S
from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError
from gpumon.samples import GpuSample, csv_fields

# Samples kept for history() by default: a day of 8 GPUs at ~6 samples/s is far more; the
# oldest go first.
MAX_ROWS = 200_000
# history()'s columns: the CSV log's GPU columns without the PID list (single values), then
# the verdict of the GPU's job at the time.
ROW_FIELDS = tuple(f.name for f in csv_fields(GpuSample) if f.name != "pids")


# The command-line options whose values Monitor takes as parameters of the same name.
_OPTION = re.compile(r"(?:^|(?<=[\s(`]))--(sim|gpus|interval|seed)\b(:?)( SCENARIO| (?='))?")


def python_names(message: str) -> str:
    """A message of the commands' open_source with each option named as Monitor's
    parameter: "--gpus: no GPU '9'" -> "Monitor(gpus=...): no GPU '9'", "use --sim
    SCENARIO" -> "use sim='SCENARIO'"."""
    def one(m: re.Match) -> str:
        name, colon, value = m.groups()
        if colon:
            return f"Monitor({name}=...):"
        return f"{name}='SCENARIO'" if value == " SCENARIO" else f"{name}="
    return _OPTION.sub(one, message)


def _check(interval, speed, sim, seed) -> None:
    """Monitor's parameters, each refused with a ValueError that names it."""
    if not (isinstance(interval, (int, float)) and
            MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S):
        raise ValueError(f"interval must be {MIN_INTERVAL_S} to {MAX_INTERVAL_S:g} s, "
                         f"not {interval!r}")
    if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
        raise ValueError(f"speed must be a positive number, not {speed!r}")
    if speed != 1.0 and sim is None:
        raise ValueError("speed needs sim=: real GPUs run at the wall clock's speed")
    if sim is not None and not (isinstance(sim, str) and sim.strip()):
        raise ValueError(f"sim must name a scenario (see `gpumon sim list`), not {sim!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a whole number 0 or more, not {seed!r}")


class Monitor:
    """Samples the GPUs every ``interval`` s in a background thread while started (``with``,
    or ``start()``/``stop()``). ``gpus``: NVML indices or UUIDs (default all). ``sim``: a
    simulated scenario (``gpumon sim list``; ``"name:GPUS"`` too) instead of NVML, whose clock
    runs ``speed`` times faster than the wall clock."""

    def __init__(self, interval: float = 1.0, *, gpus: Optional[Sequence] = None,
                 sim: Optional[str] = None, seed: int = 0, speed: float = 1.0,
                 max_rows: int = MAX_ROWS):
        _check(interval, speed, sim, seed)
        self.interval, self.speed, self.sim, self.seed = float(interval), speed, sim, seed
        self.gpus = None if gpus is None else [str(g) for g in gpus]
        self._rows: collections.deque = collections.deque(maxlen=max_rows)
        self._lock = threading.Lock()
        self._core = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "Monitor":
        if self._thread is not None:
            raise RuntimeError("this Monitor has already been started")
        from gpumon.detect import Detector
        from gpumon.monitor import Monitor as Core
        try:
            source = self._open_source()
        except UserError as exc:
            exc.args = (python_names(str(exc)),)
            raise
        self._core = Core(source, interval=self.interval / self.speed,
                          detector=Detector())
        self._core.listeners.append(self._record)
        self._thread = self._core.start_thread()
        return self

    def _open_source(self):
        """The source the CLI's options would open (commands.common.open_source): simulated
        GPUs on their own clock, one interval per read, or NVML and the host."""
        from types import SimpleNamespace
        from gpumon.commands.common import open_source
        return open_source(SimpleNamespace(sim=self.sim, gpus=self.gpus, seed=self.seed,
                                           interval=self.interval),
                           process_util=True)        # (history() has proc_util)

    def stop(self) -> None:
        """Stop sampling (what was gathered stays readable); re-raises a sampler error."""
        if self._core is None:
            return
        self._core.stop()
        if self._thread is not None:
            self._thread.join()
        self._core.close()
        if self._core.error is not None:
            if isinstance(self._core.error, UserError):
                self._core.error.args = (python_names(str(self._core.error)),)
            raise self._core.error

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _record(self, tick, diagnoses) -> None:
        of = {g: d for d in diagnoses for g in d.gpus}
        rows = []
        for s in tick.gpus:
            row = {name: getattr(s, name) for name in ROW_FIELDS}
            d = of.get(s.gpu)
            row["verdict"] = None if d is None else d.verdict
            row["cause"] = None if d is None else d.cause
            rows.append(row)
        with self._lock:
            self._rows.extend(rows)

    @property
    def ticks(self) -> int:
        """Polls done so far."""
        return 0 if self._core is None else self._core.ticks

    @property
    def diagnoses(self) -> list[Diagnosis]:
        """The current Diagnosis of each job (empty until the detector has seen enough)."""
        if self._core is None:
            return []
        with self._core.lock:
            return list(self._core.diagnoses)

    @property
    def verdict(self) -> Optional[str]:
        """The current verdict of the job on the most GPUs; None before the first one."""
        ds = self.diagnoses
        return max(ds, key=lambda d: (len(d.gpus), -min(d.gpus, default=0))).verdict \
            if ds else None

    def wait(self, ticks: int, timeout: Optional[float] = None) -> bool:
        """Block until ``ticks`` polls are done (True) or ``timeout`` s passed (False)."""
        if self._core is None:
            raise RuntimeError("start the Monitor first")
        ev = self._core.stop_event
        end = None if timeout is None else time.monotonic() + timeout
        while self.ticks < ticks:
            if ev.is_set() or (end is not None and time.monotonic() >= end):
                return self.ticks >= ticks
            ev.wait(min(0.02, self.interval / self.speed))
        return True

    def history(self, frame: Optional[bool] = None):
        """Every sample so far as rows (dicts: GpuSample's fields, verdict, cause), oldest
        first. ``frame=None``: a pandas DataFrame if pandas is installed, else the list;
        True: a DataFrame (ImportError without pandas); False: the list."""
        with self._lock:
            rows = list(self._rows)
        if frame is False:
            return rows
        try:
            import pandas
        except ImportError:
            if frame:
                raise ImportError("Monitor.history(frame=True) needs pandas "
                                  "(pip install pandas)") from None
            return rows
        return pandas.DataFrame(rows, columns=[*ROW_FIELDS, "verdict", "cause"])

