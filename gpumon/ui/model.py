"""Dashboard: what the screen shows, fed tick by tick by the Monitor (a listener).

``update`` runs in the sampling thread and does the per-tick work once (sparkline
characters, marks, the verdict strip, time per verdict); ``view`` hands the drawing thread
an immutable snapshot, so drawing never holds up sampling and sampling never tears a frame.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from gpumon.detect.seconds import busy_cold, held_down
from gpumon.diagnosis import (BUSY, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, SYNC_STALL,
                              THROTTLED, Diagnosis)
from gpumon.samples import (CLOCK_EVENTS_THROTTLE, GpuInfo, GpuSample, HostSample, Tick,
                            clock_event_names)
from gpumon.ui.spark import Sparkline
from gpumon.ui.style import STRIP_CHAR

# Verdict intervals kept for the strip of past verdicts (one character each).
STRIP_KEEP = 512

# An environment variable whose value the screen shows on its title line (`make run` says
# there why it runs the simulated demo).
NOTE_ENV = "GPUMON_SCREEN_NOTE"

# Which diagnosis the banner shows when several jobs have one: the most actionable first.
_RANK = {DATA_STARVATION: 0, SYNC_STALL: 1, THROTTLED: 2, BUSY: 3, IDLE: 4, INSUFFICIENT_DATA: 5}


def primary(diagnoses: Sequence[Diagnosis]) -> Optional[Diagnosis]:
    """The diagnosis to headline: the most actionable verdict, then the one with most GPUs."""
    if not diagnoses:
        return None
    return min(diagnoses, key=lambda d: (_RANK.get(d.verdict, 9), -len(d.gpus)))


def cold_gpus(gpus: Sequence[tuple[int, Optional[float], Optional[GpuSample]]],
              groups: Sequence[tuple[int, ...]]) -> frozenset[int]:
    """The GPUs marked COLD: busy but cold as the detector compares them (detect/seconds.py),
    within each job's GPUs (``groups``; none: every GPU together). ``gpus``: (index, mean
    utilization, latest sample)."""
    util = {g: u for g, u, _ in gpus}
    power = {g: s.power_w if s else None for g, _, s in gpus}
    limit = {g: s.power_limit_w if s else None for g, _, s in gpus}
    held = {g: _held_down(s) for g, _, s in gpus}
    out: set[int] = set()
    for group in groups or (tuple(util),):
        out |= busy_cold({g: util.get(g) for g in group}, {g: power.get(g) for g in group},
                         {g: limit.get(g) for g in group}, held=held,
                         sm_active={g: s.sm_active_ratio for g, _, s in gpus
                                    if s is not None and g in group})
    return frozenset(out)


def _held_down(s: Optional[GpuSample]) -> bool:
    """The sample's clocks held down (detect.seconds.held_down: a throttled GPU computes
    slowly, it is not cold)."""
    if s is None or s.clock_events is None:
        return False
    share = 1.0 if s.clock_events & CLOCK_EVENTS_THROTTLE else 0.0
    clk, top = s.sm_clock_mhz, s.sm_clock_max_mhz
    frac = clk / top if clk is not None and top else float("nan")
    return bool(held_down(share, frac))


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    """The mean of the known values; None where none is known (missing, never 0)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def throttle_reasons(mask: Optional[int]) -> tuple[str, ...]:
    """The clock-event reasons that hold the clocks down (heat, power), not idleness."""
    if not mask:
        return ()
    return tuple(clock_event_names(mask & CLOCK_EVENTS_THROTTLE))


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    sample: Optional[GpuSample]       # the latest reading (None: none yet)
    util: Optional[float]             # mean utilization over the last interval
    spark: str                        # recent utilization, one character per driver sample
    spark_ascii: str                  # the same in ASCII, for terminals without unicode
    sm_active: Optional[float] = None  # mean SM activity (0-1) over the interval; None: no GPM
    cold: bool = False
    throttle: tuple[str, ...] = ()
    lost: bool = False
    other: bool = False               # gpumon run: another job's GPU, not judged


@dataclass(frozen=True)
class View:
    """One frame's worth of data."""
    kind: str                         # nvml, sim, replay
    label: str                        # scenario or log name, "" for real GPUs
    gpus: tuple[GpuView, ...]
    host: Optional[HostSample]
    diagnosis: Optional[Diagnosis]
    diagnoses: tuple[Diagnosis, ...]
    strip: str                        # one character per interval, oldest first
    strip_verdicts: tuple[str, ...]   # the verdict of each strip character ("" for none)
    time: Optional[float]             # the latest tick's time (the log's clock on replay)
    elapsed: float                    # seconds of data seen
    interval: float
    sample_s: Optional[float]         # seconds per sparkline character (driver sample period)
    detector: bool                    # a detector is running
    version: int                      # changes whenever the data changes
    ticks: int = 0
    judged: Optional[tuple[int, ...]] = None   # judged GPUs (gpumon run: CMD's); None: all
    truth: Any = None                 # simulated sources: the phase running (sim Truth)
    note: str = ""                    # a line for the screen (why this source: `make run`)
    gpm: bool = False                 # some GPU has given an SM activity reading so far


class Dashboard:
    """The live model behind the screen, the plain lines and the summary."""

    def __init__(self, infos: Sequence[GpuInfo], *, kind: str = "nvml", label: str = "",
                 interval: float = 1.0, detector: bool = True, note: Optional[str] = None):
        self.infos = {i.index: i for i in infos}
        self.kind = kind
        self.label = label
        self.interval = interval
        self.detector = detector
        self.note = os.environ.get(NOTE_ENV, "") if note is None else note
        self._truth: Any = None
        self._lock = threading.Lock()
        self._sparks = {i.index: Sparkline() for i in infos}
        self._latest: dict[int, GpuSample] = {}
        self._util: dict[int, Optional[float]] = {}
        self._sm: dict[int, Optional[float]] = {}
        self._gpm = False
        self._lost: set[int] = set()
        self._host: Optional[HostSample] = None
        self._judged: Optional[tuple[int, ...]] = None
        self._diagnoses: tuple[Diagnosis, ...] = ()
        self._strip: list[str] = []
        self._strip_verdicts: list[str] = []
        self._first: Optional[float] = None
        self._time: Optional[float] = None
        self._sample_s: Optional[float] = None
        self._version = 0
        self.ticks = 0
        # For the summary: seconds per verdict, and per (verdict, cause) the count and the
        # latest diagnosis (its evidence and advice).
        self.verdict_s: dict[str, float] = {}
        self.cause_counts: dict[tuple[str, Optional[str]], int] = {}
        self.last_by_key: dict[tuple[str, Optional[str]], Diagnosis] = {}
        self.no_verdict_s = 0.0

    # -- the Monitor's listener (sampling thread) ---------------------------------------------
    def update(self, tick: Tick, diagnoses: Sequence[Diagnosis]) -> None:
        by_gpu: dict[int, list[GpuSample]] = {}
        for s in tick.gpus:
            by_gpu.setdefault(s.gpu, []).append(s)
        main = primary(diagnoses)
        with self._lock:
            dt = (tick.time - self._time) if self._time is not None else self.interval
            dt = dt if 0 < dt < 10 * self.interval + 60 else self.interval
            if self._first is None:
                self._first = tick.time - self.interval
            for gpu, samples in by_gpu.items():
                self._take(gpu, samples)
            self._lost.update(tick.lost)
            self._judged = tick.judged
            if tick.host is not None:
                self._host = tick.host
            self._diagnoses = tuple(diagnoses)
            if tick.truth is not None:
                self._truth = tick.truth
            self._count(main, dt)
            self._time = tick.time
            self.ticks += 1
            self._version += 1

    def _take(self, gpu: int, samples: list[GpuSample]) -> None:
        """One GPU's samples of a tick: its sparkline, latest reading and interval means."""
        if gpu not in self._sparks:          # a GPU the infos did not name
            self._sparks[gpu] = Sparkline()
        self._sparks[gpu].extend(s.util_gpu_pct for s in samples)
        self._latest[gpu] = samples[-1]
        self._util[gpu] = _mean([s.util_gpu_pct for s in samples])
        self._sm[gpu] = _mean([s.sm_active_ratio for s in samples])
        self._gpm = self._gpm or self._sm[gpu] is not None
        if len(samples) >= 2 and samples[-1].time > samples[0].time:
            self._sample_s = (samples[-1].time - samples[0].time) / (len(samples) - 1)

    def _count(self, main: Optional[Diagnosis], dt: float) -> None:
        """The tick's verdict on the strip and in the time per verdict (and per cause)."""
        # No diagnosis and insufficient_data are one thing on screen: no verdict.
        verdict = main.verdict if main else INSUFFICIENT_DATA
        self._strip.append(STRIP_CHAR.get(verdict, "?"))
        self._strip_verdicts.append(verdict)
        if len(self._strip) > STRIP_KEEP:
            del self._strip[:-STRIP_KEEP]
            del self._strip_verdicts[:-STRIP_KEEP]
        if main is None or verdict == INSUFFICIENT_DATA:
            self.no_verdict_s += dt
            return
        self.verdict_s[verdict] = self.verdict_s.get(verdict, 0.0) + dt
        key = (verdict, main.cause)
        self.cause_counts[key] = self.cause_counts.get(key, 0) + 1
        self.last_by_key[key] = main

    __call__ = update

    # -- the drawing thread ---------------------------------------------------------------------
    def view(self) -> View:
        with self._lock:
            gpus = []
            indexes = sorted(set(self.infos) | set(self._sparks))
            cold = cold_gpus([(i, self._util.get(i), self._latest.get(i)) for i in indexes
                              if i not in self._lost], [d.gpus for d in self._diagnoses])
            for index in indexes:
                info = self.infos.get(index)
                s = self._latest.get(index)
                util = self._util.get(index)
                gpus.append(GpuView(
                    index=index, name=info.name if info else f"GPU {index}", sample=s,
                    util=util, sm_active=self._sm.get(index), spark=self._sparks[index].text,
                    spark_ascii=self._sparks[index].ascii,
                    cold=index in cold,
                    throttle=throttle_reasons(s.clock_events if s else None),
                    lost=index in self._lost,
                    other=(self._judged is not None and index not in self._judged
                           and bool(s is not None and s.pids))))
            return View(
                kind=self.kind, label=self.label, gpus=tuple(gpus), host=self._host,
                diagnosis=primary(self._diagnoses), diagnoses=self._diagnoses,
                strip="".join(self._strip), strip_verdicts=tuple(self._strip_verdicts),
                time=self._time,
                elapsed=(self._time - self._first) if self._time is not None else 0.0,
                interval=self.interval, sample_s=self._sample_s, detector=self.detector,
                version=self._version, ticks=self.ticks, judged=self._judged,
                truth=self._truth, note=self.note, gpm=self._gpm)

    @property
    def version(self) -> int:
        return self._version
