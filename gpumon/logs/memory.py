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
from typing import Iterator


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
