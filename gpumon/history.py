"""History: the ring of recent ticks the consumers read (the newest for the exporter).

Bounded two ways: by the ticks' own timestamps (``seconds``) and by count (``max_ticks``), so
a run of any length, or a source whose clock stands still, keeps a fixed amount.
"""
from __future__ import annotations

from collections import deque
from typing import Iterator, Optional

from gpumon.samples import Tick


class History:
    """Ticks of the last ``seconds`` of data (by their own timestamps), at most ``max_ticks``
    of them, oldest first."""

    def __init__(self, seconds: float = 600.0, max_ticks: Optional[int] = None):
        self.seconds = seconds
        self._ticks: deque[Tick] = deque(maxlen=max_ticks)

    def add(self, tick: Tick) -> None:
        self._ticks.append(tick)
        horizon = tick.time - self.seconds
        while self._ticks and self._ticks[0].time < horizon:
            self._ticks.popleft()

    def window(self, seconds: Optional[float] = None) -> list[Tick]:
        if seconds is None or not self._ticks:
            return list(self._ticks)
        horizon = self._ticks[-1].time - seconds
        return [t for t in self._ticks if t.time >= horizon]

    def util_series(self, gpu: int, seconds: float) -> list[tuple[float, Optional[float]]]:
        """(time, util %) of every sample of one GPU over the last ``seconds``."""
        return [(s.time, s.util_gpu_pct) for t in self.window(seconds) for s in t.gpus
                if s.gpu == gpu]

    def __iter__(self) -> Iterator[Tick]:
        return iter(self._ticks)

    def __len__(self) -> int:
        return len(self._ticks)

    @property
    def latest(self) -> Optional[Tick]:
        return self._ticks[-1] if self._ticks else None
