"""When a reading taken at a cadence (every N seconds, whatever the poll interval) is due."""
from __future__ import annotations

from typing import Optional

# A reading due at most this early is taken now (s): polls at exactly the period would
# otherwise skip a reading whenever a wait ends a hair before the period is up.
EARLY_S = 0.05


def due(now: float, last: Optional[float], every: float) -> bool:
    """Whether a reading last taken at ``last`` (monotonic s; None: never) is due at ``now``,
    ``every`` s later (less EARLY_S)."""
    return last is None or now - last >= every - EARLY_S
