"""Monitor: the sampling loop. source -> history -> detector -> sinks, on a fixed schedule.

Consumers that draw (the dashboard) run in another thread and read ``latest`` /
``diagnoses`` / ``history``: rendering never blocks sampling.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol, Sequence

from gpumon.diagnosis import Diagnosis
from gpumon.history import History
from gpumon.samples import GpuInfo, Tick


class Source(Protocol):
    kind: str

    def gpu_infos(self) -> list[GpuInfo]: ...
    def read(self) -> Tick: ...
    def close(self) -> None: ...


class Sink(Protocol):
    def write(self, tick: Tick, diagnoses: Sequence[Diagnosis]) -> None: ...
    def close(self) -> None: ...


class Monitor:
    def __init__(self, source: Source, *, interval: float = 1.0, detector=None,
                 sinks: Sequence[Sink] = (), history_s: float = 600.0,
                 duration: Optional[float] = None):
        self.source = source
        self.interval = interval
        self.detector = detector
        self.sinks = list(sinks)
        self.history = History(history_s)
        self.duration = duration
        self.diagnoses: list[Diagnosis] = []
        self.listeners: list[Callable[[Tick, list[Diagnosis]], None]] = []
        self.ticks = 0
        self.started = time.time()
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.error: Optional[BaseException] = None

    @property
    def latest(self) -> Optional[Tick]:
        return self.history.latest

    def step(self) -> Tick:
        tick = self.source.read()
        diagnoses = self.detector.update(tick) if self.detector is not None else []
        with self.lock:
            self.history.add(tick)
            self.diagnoses = list(diagnoses)
            self.ticks += 1
        for sink in self.sinks:
            sink.write(tick, self.diagnoses)
        for listener in self.listeners:
            listener(tick, self.diagnoses)
        return tick

    def run(self) -> None:
        """Sample until ``duration`` has passed or ``stop()`` is called."""
        start = time.monotonic()
        deadline = start + self.duration if self.duration is not None else None
        next_at = start
        while not self.stop_event.is_set():
            self.step()
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:            # fell behind (a slow call): skip, don't burst
                next_at = now + self.interval
            if deadline is not None and next_at > deadline + 1e-6:
                if deadline > now:
                    self.stop_event.wait(deadline - now)
                    if not self.stop_event.is_set():
                        self.step()
                break
            self.stop_event.wait(next_at - now)

    def start_thread(self) -> threading.Thread:
        """Run in a daemon thread; an error there is kept in ``error`` and stops the loop."""
        def target():
            try:
                self.run()
            except BaseException as exc:  # handed to the thread that draws
                self.error = exc
                self.stop_event.set()
        thread = threading.Thread(target=target, name="gpumon-sampler", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.source.close()
