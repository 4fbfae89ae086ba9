"""Sparklines of GPU utilization, built incrementally: one character per driver sample.

A driver sample covers about 1/6 s on NVML, so bursts and the gaps between them stay
visible. Characters are appended as samples arrive; drawing only slices the tail.
"""
from __future__ import annotations

from typing import Iterable, Optional

from gpumon.ui.style import SPARK_ASCII, SPARK_BLOCKS, SPARK_MISSING

# Characters kept per GPU: more than any terminal is wide.
SPARK_KEEP = 512


def spark_char(util: Optional[float], blocks: str = SPARK_BLOCKS) -> str:
    """One utilization reading (0-100 %) as a block of 8 heights; None is a blank."""
    if util is None:
        return SPARK_MISSING
    level = int(max(0.0, min(100.0, util)) * len(blocks) / 100.0)
    return blocks[min(level, len(blocks) - 1)]


class Sparkline:
    """The recent utilization of one GPU as text, in both unicode and ASCII."""

    def __init__(self, keep: int = SPARK_KEEP):
        self.keep = keep
        self.text = ""
        self.ascii = ""

    def extend(self, utils: Iterable[Optional[float]]) -> None:
        utils = list(utils)
        if not utils:
            return
        self.text = (self.text + "".join(spark_char(u) for u in utils))[-self.keep:]
        self.ascii = (self.ascii + "".join(spark_char(u, SPARK_ASCII) for u in utils))[-self.keep:]

    def tail(self, width: int, ascii: bool = False) -> str:
        """The last ``width`` characters, right-aligned (blank-padded on the left)."""
        s = self.ascii if ascii else self.text
        return s[-width:].rjust(width) if width > 0 else ""
