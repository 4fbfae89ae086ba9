"""Pauses of a healthy run (checkpoint, validation pass, epoch boundary) are not starvation.

A pause starts when (almost) every GPU of a job stops after a stretch of steady work: the
``context_s`` before it was busy (duty >= duty_starved) and had no such stop. It lasts while
the job is not healthy again (a checkpoint's idle seconds, a validation pass's different
rhythm, new loader workers starting), at most ``pause_max_s``. Starvation stops the GPUs
again and again: a second all-idle stretch after work resumed ends the "pause" at once, so a
starving job is called starving one cycle later than it would be otherwise.

``PauseTracker.step`` is fed one completed second at a time, live and offline alike, so both
mark the same seconds.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from gpumon.detect.thresholds import DEFAULT, Thresholds

# A bin in which the job's duty reaches this counts as work resumed inside a pause.
ACTIVE_DUTY = 0.5
# Bins of steady work that end a pause (the mean duty over them >= duty_starved).
RESUME_BINS = 4


class PauseTracker:
    def __init__(self, th: Thresholds = DEFAULT):
        self.th = th
        self.ctx = max(2, int(round(th.context_s / th.bin_s)))
        self.pmax = int(round(th.pause_max_s / th.bin_s))
        self.hist: deque = deque(maxlen=self.ctx)   # (n, u, stop) of bins outside pauses
        self.recent: deque = deque(maxlen=RESUME_BINS)
        self.in_pause = False
        self.length = 0
        self.resumed = False

    def step(self, duties: np.ndarray, n: float, u: float) -> bool:
        """Feed one bin: per-GPU duty (NaN without data), job sample count and busy sum.
        Returns True when this bin is part of a pause."""
        th = self.th
        have = ~np.isnan(duties)
        G = int(have.sum())
        if G == 0 or n <= 0:
            if self.in_pause:
                self.length += 1
                if self.length >= self.pmax:
                    self.in_pause = False
            return self.in_pause
        idle = int((duties[have] < th.idle_duty).sum())
        all_idle = idle == G
        stop = all_idle
        duty = u / n
        self.recent.append(duty)
        if self.in_pause:
            self.length += 1
            if self.length >= self.pmax or (all_idle and self.resumed):
                self.in_pause = False           # too long, or starving: judge it normally
            elif (len(self.recent) == RESUME_BINS
                  and sum(self.recent) / RESUME_BINS >= th.duty_starved):
                self.in_pause = False           # back to steady work
            else:
                if duty >= ACTIVE_DUTY:
                    self.resumed = True
                # A pause blocks the next one for context_s: a job stopping every few seconds
                # starves, it does not checkpoint.
                self.hist.append((0.0, 0.0, True))
                return True
        elif stop and self._healthy_context():
            self.in_pause, self.length, self.resumed = True, 1, False
            self.recent.clear()
            self.hist.append((0.0, 0.0, True))
            return True
        self.hist.append((n, u, stop))
        return False

    def _healthy_context(self) -> bool:
        h = self.hist
        if len(h) < self.ctx // 2:
            return False
        sn = su = 0.0
        for n, u, stop in h:
            if stop:
                return False
            sn += n
            su += u
        return sn > 0 and su / sn >= self.th.duty_starved


def pause_flags(duty: np.ndarray, n: np.ndarray, u: np.ndarray,
                th: Thresholds = DEFAULT) -> np.ndarray:
    """Pause flags of every bin of a job: per-GPU duty (G, T), job n and u sums (T,)."""
    tr = PauseTracker(th)
    out = np.zeros(len(n), dtype=bool)
    cols = duty.T
    for i in range(len(n)):
        out[i] = tr.step(cols[i], float(n[i]), float(u[i]))
    return out
