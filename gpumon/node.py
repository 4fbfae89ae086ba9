"""NvmlNode: the real machine as one source, NVML for the GPUs plus psutil for the host."""
from __future__ import annotations

import sys
import time
from typing import Optional, Sequence

from gpumon.errors import EveryGpuLostError, NoGpuError
from gpumon.host import HostSource
from gpumon.nvml import NvmlSource
from gpumon.samples import GpuInfo, Tick
from gpumon.selection import select_gpus


def open_selected(keys: Optional[Sequence[str]] = None, **reads) -> NvmlSource:
    """An open NvmlSource of the GPUs ``keys`` name (--gpus: indices, UUIDs or the start of
    one), checked by select_gpus against every GPU: a prefix of several UUIDs is an error,
    never all of them. (NVML stays initialized from one source to the next.) ``reads``:
    NvmlSource's flags for what the command shows."""
    every = NvmlSource(**reads).open()
    if not keys:
        return every
    try:
        chosen = select_gpus(every.gpu_infos(), keys)
        return NvmlSource([str(i) for i in chosen], **reads).open()
    finally:
        every.close()


def require_gpus(src: NvmlSource) -> NvmlSource:
    """``src`` if it has a GPU to read; else NVML is closed and the error says why: none
    found (NoGpuError, exit 2 as without a driver) or every one lost (EveryGpuLostError)."""
    gpus = src.gpus
    if gpus and not all(g.lost for g in gpus):
        return src
    src.close()
    if gpus:
        raise EveryGpuLostError(g.index for g in gpus)
    raise NoGpuError()


def _to_stderr(text: str) -> None:
    """A note, as the commands print theirs: one line on stderr."""
    try:
        print(f"gpumon: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):       # stderr closed or gone: nobody to tell
        pass


class NvmlNode:
    kind = "nvml"

    def __init__(self, gpus: Optional[Sequence[str]] = None, **reads):
        self.keys = gpus
        self.reads = reads          # NvmlSource's flags: what the command shows
        self.nvml = NvmlSource(**reads)
        self.host = HostSource()
        self._pids: dict[int, Optional[tuple[int, ...]]] = {}
        self.notes: list[str] = []        # said once each on stderr (notify)
        self.notify = _to_stderr

    def open(self) -> "NvmlNode":
        self.nvml = require_gpus(open_selected(self.keys, **self.reads))
        return self

    def gpu_infos(self) -> list[GpuInfo]:
        return self.nvml.gpu_infos()

    def versions(self) -> dict[str, str]:
        return self.nvml.versions()

    def extras(self) -> dict:
        return self.nvml.extras()

    @property
    def errors(self) -> dict[str, int]:
        return self.nvml.errors

    def read(self) -> Tick:
        t0 = time.monotonic()
        samples = self.nvml.read()
        if self.nvml.slow and not self.notes:
            self._note(self.nvml.slow_note(time.monotonic() - t0))
        for s in samples:
            self._pids[s.gpu] = s.pids
        for lost in self.nvml.lost:
            self._pids.pop(lost, None)
        now = time.time()
        host = self.host.read(self._pids, now)
        return Tick(time=now, gpus=tuple(samples), host=host, lost=tuple(self.nvml.lost))

    def _note(self, text: str) -> None:
        self.notes.append(text)
        self.notify(text)

    def process_tree(self, root: int):
        """``root``'s process tree (gpumon run: CMD's), read from the host's /proc view."""
        return self.host.tree(root)

    def close(self) -> None:
        self.nvml.close()
