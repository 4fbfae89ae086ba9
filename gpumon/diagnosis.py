"""The verdict type shared by the detector and every consumer (CSV, JSON, Prometheus,
dashboard, dstat/dool column). Like samples.py, it imports nothing of gpumon."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

BUSY = "busy"
IDLE = "idle"
DATA_STARVATION = "data_starvation"
SYNC_STALL = "sync_stall"
THROTTLED = "throttled"
INSUFFICIENT_DATA = "insufficient_data"

# The stable verdict strings, in the order tables list them.
VERDICTS = (BUSY, IDLE, DATA_STARVATION, SYNC_STALL, THROTTLED, INSUFFICIENT_DATA)

# The one abbreviation map, for narrow columns (dstat/dool state column, compact rows).
ABBREV = {
    BUSY: "busy", IDLE: "idle", DATA_STARVATION: "data", SYNC_STALL: "sync",
    THROTTLED: "thrm", INSUFFICIENT_DATA: "----",
}

# Causes a verdict may carry.
CAUSES = (
    "cpu_preprocessing",   # loader workers saturated by per-sample CPU work
    "io_fetch",            # storage: iowait, disk at its limit
    "main_process",        # the input pipeline runs in the main process (num_workers=0)
    "input_pipeline",      # starvation whose host cause is not known (no host counters)
    "dataparallel",        # torch.nn.DataParallel: GPU 0 gathers, the others wait
    "imbalance",           # one rank computes longer than the others
    "thermal",
    "power_cap",
    "hw_slowdown",
)


@dataclass(frozen=True)
class Diagnosis:
    """One verdict for one job over a span of time."""
    verdict: str
    gpus: tuple[int, ...] = ()
    cause: Optional[str] = None
    straggler_gpu: Optional[int] = None
    confidence: float = 0.0
    evidence: dict = field(default_factory=dict)
    advice: str = ""
    start: Optional[float] = None
    end: Optional[float] = None
    missing: tuple[str, ...] = ()          # signals that were not available

    def as_dict(self) -> dict:
        return {
            "start": self.start, "end": self.end, "verdict": self.verdict, "cause": self.cause,
            "gpus": list(self.gpus), "straggler_gpu": self.straggler_gpu,
            "confidence": round(self.confidence, 3), "evidence": self.evidence,
            "advice": self.advice, "missing": list(self.missing),
        }
