"""Memory for `gpumon analyze`'s large arrays in small pages.

numpy asks the kernel for transparent huge pages (madvise) on every array of 4 MiB or more.
Where the kernel then compacts memory to find a free 2 MiB page on the fault (the
``defrag = madvise`` default), a first touch can stall for far longer than faulting the same
memory in 4 KiB pages: on the development VM a day-long log took 0.9-1.1 s with small pages
and 1.1-1.6 s with huge ones (binning and the pause pass most of the difference). The
analysis allocates each large array once and reads it a few times, so huge pages save it
little TLB time; it asks for small pages while it runs, and puts numpy's setting back after.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

# Memory the analysis takes per byte of a log's kept lines, at most (the 72-hour 8-GPU log's
# ~340 MB of lines take under 1 GiB; formats with more text per sample, up to ~4).
COST_PER_BYTE = 4


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's huge-page advice off inside the block (a no-op where numpy has no switch)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage as switch
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage as switch
        except ImportError:
            switch = None
    if switch is None:
        yield
        return
    before = switch(False)
    try:
        yield
    finally:
        switch(before)


def text_budget() -> Optional[int]:
    """The most bytes of log lines this process can analyse with the memory it may still
    take (MemAvailable, and the address-space limit where one is set), or None when
    neither is known."""
    room = [m for m in (_available(), _address_room()) if m is not None]
    return min(room) // COST_PER_BYTE if room else None


def _available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_room() -> Optional[int]:
    """What the address-space limit leaves, where one is set."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, ValueError, OSError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return max(0, soft - int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return None
