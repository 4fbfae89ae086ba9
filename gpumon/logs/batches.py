"""Columns of a log read a block of rows at a time (table.read_cells), written end to end into
arrays allocated once for the whole log.

Joining each batch's arrays at the end would hold the log's columns twice, and the batches'
small arrays, freed, stay with the allocator (by threads, in pieces) rather than going back
to the system; filling arrays sized from the log's line count up front does neither.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


class Columns:
    """numpy columns, batch after batch: ``put`` one batch's arrays (all the same length),
    ``get`` a whole column. ``capacity``: the most rows expected (more still fit, by growing).
    A value that is no array (a batch's summary) is kept in ``extra[name]``, batch by batch."""

    def __init__(self, capacity: int):
        self.capacity = max(0, int(capacity))
        self.rows = 0
        self._arrays: dict[str, np.ndarray] = {}
        self.extra: dict[str, list] = {}

    def put(self, cols: dict, n: int) -> None:
        a, b = self.rows, self.rows + n
        for name, v in cols.items():
            if not isinstance(v, np.ndarray):
                self.extra.setdefault(name, []).append(v)
                continue
            arr = self._arrays.get(name)
            if arr is None:
                arr = np.empty(max(self.capacity, b), v.dtype)
            elif arr.dtype != v.dtype:
                arr = arr.astype(np.result_type(arr.dtype, v.dtype))
            if len(arr) < b:            # more rows than lines were counted: grow (twice)
                arr = np.concatenate([arr, np.empty(max(b, 2 * len(arr)) - len(arr),
                                                    arr.dtype)])
            arr[a:b] = v
            self._arrays[name] = arr
        self.rows = b

    def put_column(self, name: str, v: np.ndarray) -> None:
        """A whole column (``rows`` long) in place of the one put batch by batch."""
        self._arrays[name] = v

    def get(self, name: str) -> Optional[np.ndarray]:
        arr = self._arrays.get(name)
        return None if arr is None else arr[:self.rows]

    def __contains__(self, name: str) -> bool:
        return name in self._arrays
