"""The hold (the registered rule ``hold``; its reason text lives with the rules): a live
verdict is (verdict, cause, straggler), and it changes only once another has won ``hold_s``
of data in a row, so a noisy boundary does not flap. Verdicts come once per ``step_s``: a
hold of 2 s is two verdicts in a row.

Its exceptions, each one named case of `Hysteresis` (a method of that name):

- ``first``: the first verdict, and the first with data after ``insufficient_data``, is
  taken at once (there is nothing to hold).
- ``stale``: ``insufficient_data`` displaces a verdict only once it has won ``stale_s`` in a
  row (a whole window with too few samples: the held verdict's data has left it).
- ``pause``: a change into or out of ``paused`` is taken at once: the pause tracker decides a
  pause second by second with its own history, not from a window whose edge wobbles.
- ``host_confirmed``: busy gives way to ``data_starvation`` after ``host_hold_s`` when the
  host shows the cause now (the rules' ``quick`` on a starvation verdict): the GPUs waiting
  and the loaders, main process or storage behind them agree.
- ``at_once``: a rule that shows at once (the rules' ``shows_at_once``, also ``quick``) takes
  over from busy, and busy from it, without the hold: evidence from two signals that agree.
- ``sticky``: an established starvation verdict (held ``sticky_s``) is not given up for busy
  while its host cause persists (``sticky``): a starving job whose GPUs run flat out for a
  while is eating its prefetched batches, and will starve again.
"""
from __future__ import annotations

from typing import Optional

from gpumon.diagnosis import BUSY, DATA_STARVATION, INSUFFICIENT_DATA, PAUSED, SYNC_STALL, VERDICTS
from gpumon.detect.thresholds import DEFAULT

_INSUFFICIENT = VERDICTS.index(INSUFFICIENT_DATA)
_BUSY = VERDICTS.index(BUSY)
_STARVED = VERDICTS.index(DATA_STARVATION)
_PAUSED = VERDICTS.index(PAUSED)
_STALL = VERDICTS.index(SYNC_STALL)
_EPS = 1e-9


class Hysteresis:
    """Keeps the current key (verdict, cause, straggler), codes as the rules give them, until
    another wins the hold (see the module's text for the named cases)."""

    def __init__(self, hold_s: float, step_s: float = 1.0, host_hold_s: float = 0.0,
                 sticky_s: float = 10.0, stale_s: float = DEFAULT.window_s):
        self.hold_s = hold_s
        self.stale_s = max(stale_s, hold_s)
        self.host_hold_s = min(host_hold_s, hold_s)
        self.step_s = step_s                     # time between two verdicts fed in
        self.sticky_s = sticky_s
        self.current: Optional[tuple] = None
        self.since: Optional[float] = None       # when ``current`` was adopted
        self._cand: Optional[tuple] = None       # the key waiting out its hold
        self._cand_since = 0.0

    def settled(self, key: tuple) -> bool:
        """True when feeding ``key`` again changes nothing: it is the current verdict and no
        other is waiting out its hold (a run of equal keys can then be skipped)."""
        return self.current == key and self._cand is None

    def step(self, t: float, key: tuple, sticky: bool = False, quick: bool = False) -> bool:
        """Feed the raw key at time ``t``; True when ``current`` changed. ``sticky``: the host
        still shows the cause of starvation; ``quick``: the rules' ``quick`` (a host-confirmed
        starvation, or a rule that shows at once)."""
        if self.first(key):
            changed = self.current != key
            self._adopt(t, key)
            return changed
        if key == self.current or self.sticky(t, key, sticky):
            self._cand = None
            return False
        self._candidate(t, key)
        if t - self._cand_since >= self._wait(key, quick) - self.step_s - _EPS:
            self._adopt(t, key)
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

    def host_confirmed(self, key: tuple, quick: bool) -> bool:
        """Busy to a starvation the host confirms: it waits ``host_hold_s``."""
        return quick and key[0] == _STARVED and self.current[0] == _BUSY

    def at_once(self, key: tuple, quick: bool) -> bool:
        """Busy to a stall of a rule that shows at once, or that rule's end: no wait."""
        return quick and {key[0], self.current[0]} == {_BUSY, _STALL}

    # -- mechanics -----------------------------------------------------------------------
    def _wait(self, key: tuple, quick: bool) -> float:
        """Seconds ``key`` must win in a row to replace the current key."""
        if self.stale(key):
            return self.stale_s
        if self.pause(key) or self.at_once(key, quick):
            return 0.0
        if self.host_confirmed(key, quick):
            return self.host_hold_s
        return self.hold_s

    def _adopt(self, t: float, key: tuple) -> None:
        self.current, self.since, self._cand = key, t, None

    def _candidate(self, t: float, key: tuple) -> None:
        """Another verdict keeps winning while its cause or straggler wobble: it counts."""
        if key[0] != self.current[0] and self._cand is not None and key[0] == self._cand[0]:
            self._cand = key
        elif key != self._cand:
            self._cand, self._cand_since = key, t
