"""Independent pieces of `gpumon analyze`'s work on every core: numpy releases the GIL
inside its loops, so blocks of a log's rows, groups of its GPUs' samples (binned), or
chunks of its windows are worked side by side. Results come back in order, exactly what a
plain loop gives."""
from __future__ import annotations

import os
from typing import Callable, Sequence

# At most this many threads (a day-long log has ~28 blocks of rows, 8 GPUs and ~20 chunks of
# windows; more threads than cores only add switching).
MAX_THREADS = 4


def map_threads(fn: Callable, items: Sequence) -> list:
    """[fn(x) for x in items], spread over the cores when there are several items."""
    workers = min(len(items), os.cpu_count() or 1, MAX_THREADS)
    if workers < 2:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))
