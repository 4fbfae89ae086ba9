"""Paused: the job stopped after steady work, as the pause tracker (pauses.py) read it."""
from __future__ import annotations

import numpy as np

from gpumon.detect.rules import rule
from gpumon.detect.rules.words import Window
from gpumon.detect.windows import C, Windows
from gpumon.diagnosis import CAUSES, PAUSED
from gpumon.detect.thresholds import bins

# Why a pause, by its cause (the pause tracker's reading of the host, pauses.py).
_WHY = {
    "checkpoint": ("a checkpoint: the host writes to disk at checkpoint rate, or one rank "
                   "works alone at a trickle (copying its state off the GPU) while the others "
                   "run nothing"),
    "validation": ("more DataLoader workers than training had appeared: a validation pass "
                   "with its own loader"),
    "epoch_boundary": "new DataLoader workers started: an epoch boundary",
    "unknown": ("this is not the burst-then-idle rhythm of starved input, and nothing in "
                "the counters says why (no disk writes, no new loader workers known)"),
}


def _pause(x: Window) -> str:
    code = int(x.f["pause_cause"][x.e])
    cause = CAUSES[code] if code >= 0 else "unknown"
    secs = int(x.f["pause_len"][x.e])
    wm = bins(x.th.context_s)
    ago = f"{secs} s ago" if secs <= wm else f"more than {wm} s ago"
    if cause == "startup":
        return f"the job started {ago}: its ranks load and get their first batches"
    return (f"the job stopped after steady work {ago} (every GPU, or all but one working "
            f"alone, or one rank while the others wait for it); "
            f"{_WHY.get(cause, _WHY['unknown'])}")


@rule(PAUSED, 30, "every GPU stopped after steady work (or all but one rank, alone at a "
      "trickle: a checkpoint), not at a starved rhythm; a start until every GPU has worked "
      "{context_s:.0f} s", _pause,
      cause="checkpoint, validation, epoch_boundary, startup, unknown")
def pause(w: Windows) -> None:
    """A stop after steady work, as the pause tracker read it, with its cause."""
    pc = w.f["pause_cause"]
    w.decide(pause, w.f["pause"], c=np.where(pc >= 0, pc, C["unknown"]), cf=0.6)
