"""Ground truth of a training run, as JSON lines.

Line 1 is the header: what the run is and what gpumon is expected to say about it::

    {"scenario": "data_starvation", "expected_verdict": "data_starvation",
     "expected_cause": "cpu_preprocessing", "straggler": null, "device": "cuda",
     "gpus": 1, "accept_verdicts": [...], "note": "...", "intended": {...}, ...}

Every other line is one training step of one rank::

    {"t_start": 1712345678.123, "t_end": 1712345678.301, "rank": 0, "step": 17,
     "wait_data_s": 0.002, "compute_s": 0.170, "wait_sync_s": 0.0, "checkpoint_s": 0.0}

``t_start``/``t_end`` are Unix epoch seconds. The three (four) parts are measured, not
derived: the clock is read after ``torch.cuda.synchronize()`` on a GPU (so queued kernels are
counted where they run) and with ``time.perf_counter`` on the CPU; whatever is left of
``t_end - t_start`` is loop overhead.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import IO, Iterable, Optional

HEADER_KEYS = ("scenario", "expected_verdict", "expected_cause", "straggler", "device", "gpus")
STEP_KEYS = ("t_start", "t_end", "rank", "step", "wait_data_s", "compute_s", "wait_sync_s")


@dataclass
class StepRecord:
    rank: int
    step: int
    t_start: float
    t_end: float = 0.0
    wait_data_s: float = 0.0
    compute_s: float = 0.0
    wait_sync_s: float = 0.0
    checkpoint_s: float = 0.0

    def as_dict(self) -> dict:
        return {
            "t_start": round(self.t_start, 6), "t_end": round(self.t_end, 6),
            "rank": self.rank, "step": self.step,
            "wait_data_s": round(self.wait_data_s, 6), "compute_s": round(self.compute_s, 6),
            "wait_sync_s": round(self.wait_sync_s, 6),
            "checkpoint_s": round(self.checkpoint_s, 6),
        }


class PhaseClock:
    """Times the phases of one step. ``sync`` is called before every reading so that work
    queued on a GPU is charged to the phase that queued it (a no-op on the CPU)."""

    def __init__(self, sync=None):
        self._sync = sync or (lambda: None)
        self._last = 0.0

    def start(self) -> float:
        """Begins a step; returns its epoch start time."""
        self._sync()
        self._last = time.perf_counter()
        return time.time()

    def lap(self) -> float:
        """Seconds since the previous lap (or start), after synchronising."""
        self._sync()
        now = time.perf_counter()
        spent, self._last = now - self._last, now
        return spent


@dataclass
class TruthWriter:
    """Writes the header at once and every step as it ends, flushed line by line, so a run
    that is cut off still leaves a usable file."""
    path: Optional[str]
    _fh: Optional[IO[str]] = field(default=None, repr=False)

    def open(self, header: Optional[dict]) -> "TruthWriter":
        if self.path:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            self._fh = open(self.path, "w", buffering=1, encoding="utf-8")
            if header is not None:
                self._fh.write(json.dumps(header, sort_keys=True) + "\n")
        return self

    def step(self, rec: StepRecord) -> None:
        if self._fh:
            self._fh.write(json.dumps(rec.as_dict()) + "\n")

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


def read_truth(path: str) -> tuple[dict, list[dict]]:
    """The header and the step lines of a truth file. A torn last line (a run killed while
    writing) is dropped; anything else malformed raises ValueError naming the line."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    header: Optional[dict] = None
    steps: list[dict] = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i == last:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON line")
        if header is None:
            missing = [k for k in HEADER_KEYS if k not in obj]
            if missing:
                raise ValueError(f"{path}:{i + 1}: header lacks {', '.join(missing)}")
            header = obj
            continue
        missing = [k for k in STEP_KEYS if k not in obj]
        if missing:
            raise ValueError(f"{path}:{i + 1}: step lacks {', '.join(missing)}")
        steps.append(obj)
    if header is None:
        raise ValueError(f"{path}: empty truth file")
    return header, steps


def merge_rank_files(out: str, header: dict, rank_paths: Iterable[str]) -> int:
    """Writes ``out`` as the header then every rank's steps ordered by start time; returns
    the number of steps. Rank files are removed afterwards."""
    steps: list[dict] = []
    paths = list(rank_paths)
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p, encoding="utf-8") as fh:
            for line in fh:
                try:
                    steps.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a rank killed mid-line
    steps.sort(key=lambda s: (s["t_start"], s["rank"]))
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(header, sort_keys=True) + "\n")
        for s in steps:
            fh.write(json.dumps(s) + "\n")
    for p in paths:
        if os.path.exists(p):
            os.remove(p)
    return len(steps)


def summarize(steps: list[dict]) -> dict:
    """Shares of step time per phase over all ranks, and the median step length."""
    if not steps:
        return {"steps": 0}
    total = sum(s["t_end"] - s["t_start"] for s in steps)
    durations = sorted(s["t_end"] - s["t_start"] for s in steps)

    def share(key: str) -> Optional[float]:
        return round(sum(s.get(key, 0.0) for s in steps) / total, 4) if total > 0 else None

    return {
        "steps": len(steps),
        "ranks": len({s["rank"] for s in steps}),
        "span_s": round(max(s["t_end"] for s in steps) - min(s["t_start"] for s in steps), 3),
        "median_step_ms": round(1000 * durations[len(durations) // 2], 2),
        "data_share": share("wait_data_s"),
        "compute_share": share("compute_s"),
        "sync_share": share("wait_sync_s"),
        "checkpoint_share": share("checkpoint_s"),
    }
