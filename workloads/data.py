"""Input pipelines: ready batches on the device, a CPU-heavy synthetic dataset, and files read
from disk past the page cache."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Iterator, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from workloads.model import NUM_CLASSES

def device_batches(batch: int, image: int, device: torch.device, count: int = 4,
                   seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches that already live on the device: the GPU never waits for input."""
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randint(0, 256, (batch, 3, image, image), generator=gen, dtype=torch.uint8)
          .to(device) for _ in range(count)]
    ys = [torch.randint(0, NUM_CLASSES, (batch,), generator=gen).to(device) for _ in range(count)]
    i = 0
    while True:
        yield xs[i % count], ys[i % count]
        i += 1


def burn_cpu(x: np.ndarray, seconds: float) -> np.ndarray:
    """Real arithmetic on the image for about ``seconds`` of one core (what a heavy decode or
    augmentation costs); returns the transformed image."""
    if seconds <= 0:
        return x
    work = x.astype(np.float32)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        # a bounded map that cannot be optimised away: values stay in 0..255
        np.sin(work, out=work)
        np.abs(work, out=work)
        np.multiply(work, 255.0, out=work)
    return np.clip(work, 0, 255).astype(np.uint8)


class SyntheticImages(Dataset):
    """Random images whose per-sample transform costs ``transform_s`` of CPU."""

    def __init__(self, length: int, image: int, transform_s: float, seed: int = 0):
        self.length, self.image, self.transform_s, self.seed = length, image, transform_s, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        rng = np.random.default_rng(self.seed + i)
        img = rng.integers(0, 256, (3, self.image, self.image), dtype=np.uint8)
        img = burn_cpu(img, self.transform_s)
        return torch.from_numpy(img), int(rng.integers(0, NUM_CLASSES))


def data_dir_fs(path: str) -> Optional[str]:
    """File-system type of the mount holding ``path`` (from /proc/mounts), or None."""
    try:
        real = os.path.realpath(path)
        best, fstype = "", None
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and (real == parts[1] or real.startswith(
                        parts[1].rstrip("/") + "/")) and len(parts[1]) >= len(best):
                    best, fstype = parts[1], parts[2]
        return fstype
    except OSError:
        return None


def pick_data_root(requested: Optional[str]) -> str:
    """Where io_fetch writes its files: the requested folder, else the temp folder unless it
    is memory-backed (tmpfs: no disk to read from), else the current folder."""
    if requested:
        return requested
    tmp = tempfile.gettempdir()
    if data_dir_fs(tmp) in ("tmpfs", "ramfs"):
        return os.getcwd()
    return tmp


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class ImageFiles:
    """A folder of sample files written once, then read back from disk on every access."""

    def __init__(self, root: str, count: int, file_bytes: int, seed: int = 0):
        self.dir = tempfile.mkdtemp(prefix="io_fetch-", dir=root)
        self.file_bytes = file_bytes
        self.paths = []
        rng = np.random.default_rng(seed)
        for i in range(count):
            path = os.path.join(self.dir, f"{i:06d}.bin")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, rng.integers(0, 256, file_bytes, dtype=np.uint8).tobytes())
                os.fsync(fd)       # pages must be clean before they can be dropped
                _drop_cache(fd)
            finally:
                os.close(fd)
            self.paths.append(path)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class FileImages(Dataset):
    """Reads each sample's file in small chunks with read-ahead off, then drops it from the
    page cache (POSIX_FADV_DONTNEED), so every epoch reads from the disk again: the loader
    waits on storage, not on the CPU."""

    def __init__(self, paths: list[str], image: int, chunk_bytes: int):
        self.paths, self.image, self.chunk_bytes = paths, image, chunk_bytes

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        fd = os.open(self.paths[i], os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            parts = []
            while True:
                chunk = os.read(fd, self.chunk_bytes)
                if not chunk:
                    break
                parts.append(chunk)
            _drop_cache(fd)
        finally:
            os.close(fd)
        raw = b"".join(parts)
        need = 3 * self.image * self.image
        img = np.frombuffer(raw[:need], dtype=np.uint8)
        if img.size < need:  # a file smaller than one image: repeat it
            img = np.resize(img, need)
        return torch.from_numpy(img.reshape(3, self.image, self.image).copy()), i % NUM_CLASSES


def _worker_init(_worker_id: int) -> None:
    torch.set_num_threads(1)  # one core per loader worker, as a real preprocessing worker


def loader(dataset: Dataset, batch: int, workers: int, pin: bool) -> DataLoader:
    kwargs = {}
    if workers > 0:
        kwargs = {"persistent_workers": True, "prefetch_factor": 2,
                  "worker_init_fn": _worker_init}
    return DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                      pin_memory=pin, drop_last=True, **kwargs)


def endless(dl: DataLoader) -> Iterator:
    while True:
        yield from dl
