"""The hold (the registered rule ``hold``): a live verdict (verdict, cause, straggler) changes
only once another has won ``hold_s`` of verdicts in a row, one per ``step_s``. Its named
cases, each a method of `Hysteresis`: ``first`` (nothing held: taken at once), ``stale``
(insufficient_data waits ``window_s``), ``pause`` (into or out of paused: at once),
``at_once`` (busy to a rule's ``quick`` verdict and a quick stall back: at once), ``sticky``
(an established starvation keeps busy out while the host shows its cause), ``outnumbers`` (a
new cause under the held verdict wins only if seen more in the last ``context_s``).
``settle`` is the hold's hindsight for a whole log: one segment, one cause.
"""
from __future__ import annotations

from collections import deque
from typing import Optional

import numpy as np

from gpumon.diagnosis import (BUSY, CAUSES, DATA_STARVATION, INSUFFICIENT_DATA, PAUSED, SYNC_STALL,
                              VERDICTS)
from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds, bins

_INSUFFICIENT = VERDICTS.index(INSUFFICIENT_DATA)
_BUSY = VERDICTS.index(BUSY)
_STARVED = VERDICTS.index(DATA_STARVATION)
_PAUSED = VERDICTS.index(PAUSED)
_STALL = VERDICTS.index(SYNC_STALL)
_EPS = 1e-9
# Causes that say the host shows none (a starvation whose cause is not known).
_NOT_SHOWN = (CAUSES.index("input_pipeline"),)


class Hysteresis:
    """Keeps the current key (verdict, cause, straggler), codes as the rules give them, until
    another wins the hold (see the module's text for the named cases)."""

    def __init__(self, th: Thresholds = DEFAULT):
        self.hold_s = th.hold_s
        self.stale_s = max(th.window_s, th.hold_s)
        self.step_s = BIN_S                      # time between two verdicts fed in
        self.sticky_s = th.sticky_s
        self.current: Optional[tuple] = None
        self.since: Optional[float] = None       # when ``current``'s verdict was adopted
        self._cand: Optional[tuple] = None       # the key waiting out its hold
        self._cand_since = 0.0
        # The keys fed in over the last context_s since the held verdict was adopted
        # (counted only when outnumbers asks).
        self._recent: deque = deque(maxlen=max(1, bins(th.context_s)))

    def step(self, t: float, key: tuple, sticky: bool = False, quick: bool = False) -> bool:
        """Feed the raw key at time ``t``; True when ``current`` changed. ``sticky``: the host
        still shows the cause of starvation; ``quick``: the rules' ``quick`` (a host-confirmed
        starvation, or a rule that shows at once)."""
        if self.first(key):
            changed = self.current != key
            self._adopt(t, key)
            return changed
        self._recent.append(key)
        if key == self.current or self.sticky(t, key, sticky):
            self._cand = None
            return False
        self._candidate(t, key)
        if t - self._cand_since < self._wait(key, quick) - self.step_s - _EPS:
            return False
        if key[0] != self.current[0]:
            self._adopt(t, key)
            return True
        if self.pause(key) or self.outnumbers(key):
            self.current, self._cand = key, None
            return True
        return False

    # -- the named cases -----------------------------------------------------------------
    def first(self, key: tuple) -> bool:
        """Nothing held yet, or only insufficient_data and ``key`` has data: taken at once."""
        cur = self.current
        return cur is None or (cur[0] == _INSUFFICIENT and key[0] != _INSUFFICIENT)

    def sticky(self, t: float, key: tuple, sticky: bool) -> bool:
        """Busy does not displace a starvation verdict held ``sticky_s`` or longer while the
        host still shows its cause."""
        return (sticky and key[0] == _BUSY and self.current[0] == _STARVED
                and t - self.since >= self.sticky_s)

    def stale(self, key: tuple) -> bool:
        """``key`` is insufficient_data: it waits ``stale_s``, not ``hold_s``."""
        return key[0] == _INSUFFICIENT

    def pause(self, key: tuple) -> bool:
        """A change into or out of paused: no wait."""
        return _PAUSED in (key[0], self.current[0])

    def at_once(self, key: tuple, quick: bool) -> bool:
        """Busy to a starvation the host confirms or a stall of a rule that shows at once,
        or that stall's end: no wait."""
        return quick and (self.current[0] == _BUSY and key[0] in (_STARVED, _STALL)
                          or (self.current[0], key[0]) == (_STALL, _BUSY))

    def outnumbers(self, key: tuple) -> bool:
        """A new cause or straggler that won the hold replaces the held one if that was not
        seen in the last ``context_s`` or the new one was seen more; a cause the host does not
        show (input_pipeline) counts for none against another."""
        cur = self.current
        held = new = 0
        for k in self._recent:          # (each fed in under the held verdict: _adopt)
            if k[0] == cur[0]:
                held += k[1:] == cur[1:]
                new += k[1:] == key[1:]
        if held == 0:
            return True
        if key[1] != cur[1]:
            held, new = _weight(cur, held), _weight(key, new)
        return new > held

    # -- mechanics -----------------------------------------------------------------------
    def _wait(self, key: tuple, quick: bool) -> float:
        """Seconds ``key`` must win in a row to replace the current key."""
        if self.stale(key):
            return self.stale_s
        if self.pause(key) or self.at_once(key, quick):
            return 0.0
        return self.hold_s

    def _adopt(self, t: float, key: tuple) -> None:
        """A new verdict: held from ``t``, its causes tallied afresh."""
        self.current, self.since, self._cand = key, t, None
        self._recent.clear()
        self._recent.append(key)

    def _candidate(self, t: float, key: tuple) -> None:
        """Another verdict keeps winning while its cause or straggler wobble: it counts."""
        if key[0] != self.current[0] and self._cand is not None and key[0] == self._cand[0]:
            self._cand = key
        elif key != self._cand:
            self._cand, self._cand_since = key, t


def _weight(key: tuple, seconds: int) -> int:
    """The seconds a key's cause counts for in the tally (see Hysteresis.outnumbers)."""
    return 0 if key[1] in _NOT_SHOWN else seconds


def settle(held: np.ndarray, keys: list, th: Thresholds) -> np.ndarray:
    """``held`` (per verdict fed in, an index into ``keys``) with, within each run of one held
    verdict other than paused, each cause or straggler held less than context_s in a row
    replaced by the one held longest over that run."""
    if len(held) == 0:
        return held
    span = th.context_s / BIN_S
    cut = np.flatnonzero(held[1:] != held[:-1]) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, len(held)]
    verdict = [keys[held[a]][0] for a in starts.tolist()]
    out = held.copy()
    i = 0
    while i < len(starts):
        j = i + 1
        while j < len(starts) and verdict[j] == verdict[i]:
            j += 1
        if j - i > 1 and verdict[i] != _PAUSED:
            _one_cause(out, held, starts[i:j], ends[i:j], span)
        i = j
    return out


def _one_cause(out: np.ndarray, held: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               span: float) -> None:
    """Within one verdict's stretches (``starts``, ``ends``), the stretches shorter than
    ``span`` take the key held longest over them all."""
    lens = ends - starts
    total: dict = {}
    for a, n in zip(starts.tolist(), lens.tolist()):
        total[int(held[a])] = total.get(int(held[a]), 0) + n
    best = max(total, key=total.get)
    for a, b, n in zip(starts.tolist(), ends.tolist(), lens.tolist()):
        if n < span:
            out[a:b] = best
