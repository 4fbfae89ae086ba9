"""Independent pieces of `gpumon analyze`'s work on every core: numpy releases the GIL
inside its loops, so blocks of a log's rows, groups of its GPUs' samples (binned), or
chunks of its windows are worked side by side. Results come back in order, exactly what a
plain loop gives."""
from __future__ import annotations

import os
from collections import deque
from itertools import islice
from typing import Callable, Iterator, Sequence

# At most this many threads (a day-long log has ~28 blocks of rows, 8 GPUs and ~20 chunks of
# windows; more threads than cores only add switching).
MAX_THREADS = 4


def map_threads(fn: Callable, items: Sequence) -> list:
    """[fn(x) for x in items], spread over the cores when there are several items."""
    return list(imap_threads(fn, items))


def imap_threads(fn: Callable, items: Sequence) -> Iterator:
    """fn(x) for x in items, in order, spread over the cores: while the caller takes one
    result the next items are worked on, at most as many ahead as there are threads (the
    results waiting to be taken stay few)."""
    workers = min(len(items), os.cpu_count() or 1, MAX_THREADS)
    if workers < 2:
        yield from map(fn, items)
        return
    from concurrent.futures import ThreadPoolExecutor
    rest = iter(items)
    with ThreadPoolExecutor(workers) as pool:
        ahead = deque(pool.submit(fn, x) for x in islice(rest, workers))
        while ahead:
            done = ahead.popleft().result()
            for x in islice(rest, 1):
                ahead.append(pool.submit(fn, x))
            yield done
