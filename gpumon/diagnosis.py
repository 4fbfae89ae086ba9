"""The verdict type shared by the detector and every consumer (CSV, JSON, Prometheus,
dashboard, dstat/dool column). Like samples.py, it imports nothing of gpumon."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

BUSY = "busy"
IDLE = "idle"
PAUSED = "paused"
DATA_STARVATION = "data_starvation"
SYNC_STALL = "sync_stall"
THROTTLED = "throttled"
INSUFFICIENT_DATA = "insufficient_data"

# The stable verdict strings, in the order tables list them.
VERDICTS = (BUSY, IDLE, PAUSED, DATA_STARVATION, SYNC_STALL, THROTTLED, INSUFFICIENT_DATA)

# The one abbreviation map, for narrow columns (dstat/dool state column, compact rows).
ABBREV = {
    BUSY: "busy", IDLE: "idle", PAUSED: "paus", DATA_STARVATION: "data", SYNC_STALL: "sync",
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
    "rank_host",           # one rank idles while the others spin: its host (input, checkpoint,
                           # logging on that rank); without host counters it cannot be told
    "hang",                # every GPU spins in a collective, none computes, for long
    "held",                # the job holds GPU memory and runs nothing (idle)
    "checkpoint",          # paused: checkpoint-size disk writes during the stop
    "validation",          # paused: more loader workers than training had (its DataLoader)
    "epoch_boundary",      # paused: new loader workers (a new epoch's DataLoader)
    "startup",             # paused: the job's first seconds (model load, compile)
    "unknown",             # paused: a stop after steady work with nothing to say why
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
    rule: str = ""                         # the rule that decided (detect/rules/ RULES)
    because: str = ""                      # why, in numbers a user can check on the screen

    def as_dict(self) -> dict:
        return {
            "start": self.start, "end": self.end, "verdict": self.verdict, "cause": self.cause,
            "gpus": list(self.gpus), "straggler_gpu": self.straggler_gpu,
            "confidence": round(self.confidence, 3), "evidence": self.evidence,
            "advice": self.advice, "missing": list(self.missing), "rule": self.rule,
            "because": self.because,
        }


# Evidence in words, as `analyze` and the dashboard print it: (key, label, format), in order.
EVIDENCE_TEXT = (("duty_cycle", "duty", "{:.0%}"), ("burst_s", "burst", "{:.2f} s"),
                 ("gap_s", "gap", "{:.2f} s"), ("gap_sync", "gaps shared", "{:.0%}"),
                 ("power_frac_busy", "power while busy", "{:.0%} of limit"),
                 ("rel_power_min", "coldest/hottest power", "{:.0%}"),
                 ("busy_cold_share", "cold GPUs", "{:.0%}"),
                 ("clock_frac", "clock", "{:.0%} of max"),
                 ("throttle_share", "throttle", "{:.0%}"),
                 ("loader_cpu_pct", "loader CPU", "{:.0f}%"),
                 ("main_cpu_pct", "main CPU", "{:.0f}%"),
                 ("main_thread_max_pct", "main thread", "{:.0f}%"),
                 ("iowait_pct", "iowait", "{:.1f}%"),
                 ("disk_read_mbps", "disk read", "{:.0f} MB/s"))


def evidence_text(evidence: dict) -> str:
    """"duty 65%, burst 1.19 s, gap 0.59 s": the known evidence numbers in words (keys
    without a label, and values not measured, are left out)."""
    parts = []
    for key, label, fmt in EVIDENCE_TEXT:
        v = evidence.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            parts.append(f"{label} {fmt.format(v)}")
    return ", ".join(parts)
