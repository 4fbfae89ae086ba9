"""NvmlNode: the real machine as one source, NVML for the GPUs plus psutil for the host."""
from __future__ import annotations

import time
from typing import Optional, Sequence

from gpumon.host import HostSource
from gpumon.nvml import NvmlSource
from gpumon.samples import GpuInfo, Tick


class NvmlNode:
    kind = "nvml"

    def __init__(self, gpus: Optional[Sequence[str]] = None):
        self.nvml = NvmlSource(gpus)
        self.host = HostSource()
        self._pids: dict[int, Optional[tuple[int, ...]]] = {}

    def open(self) -> "NvmlNode":
        self.nvml.open()
        return self

    def gpu_infos(self) -> list[GpuInfo]:
        return self.nvml.gpu_infos()

    @property
    def errors(self) -> dict[str, int]:
        return self.nvml.errors

    def read(self) -> Tick:
        samples = self.nvml.read()
        for s in samples:
            self._pids[s.gpu] = s.pids
        for lost in self.nvml.lost:
            self._pids.pop(lost, None)
        now = time.time()
        host = self.host.read(self._pids, now)
        return Tick(time=now, gpus=tuple(samples), host=host, lost=tuple(self.nvml.lost))

    def process_tree(self, root: int):
        """``root``'s process tree (gpumon run: CMD's), read from the host's /proc view."""
        return self.host.tree(root)

    def close(self) -> None:
        self.nvml.close()
