"""A log read for analysis: the detector's columns, whatever file they came from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gpumon.detect.bins import HostCols, JobCols, SampleCols


@dataclass
class Malformed:
    """Lines that could not be read: how many, and the first one's line number."""
    count: int = 0
    first_line: Optional[int] = None

    def add(self, line: Optional[int], n: int = 1) -> None:
        self.count += n
        if line is not None and (self.first_line is None or line < self.first_line):
            self.first_line = line


@dataclass
class Log:
    path: str
    kind: str                         # gpumon | nvidia-smi | dmon | plain
    samples: SampleCols
    jobs: Optional[JobCols] = None
    host: Optional[HostCols] = None
    pids: dict = field(default_factory=dict)   # gpu -> tuple of every PID seen (None unknown)
    malformed: Malformed = field(default_factory=Malformed)
    rows: int = 0

    @property
    def empty(self) -> bool:
        return len(self.samples.time) == 0 or bool(np.isnan(self.samples.util).all())


def empty_samples() -> SampleCols:
    z = np.zeros(0)
    return SampleCols(z, np.zeros(0, dtype=np.int64), z)
