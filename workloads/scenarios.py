"""The scenarios and what gpumon should say about each (PRODUCT.md's verdicts and causes).

What one GPU can and cannot show:

- ``sync_stall`` and ``rank_data_stall`` are DDP runs. Their real picture (one rank late, the
  others spinning in an NCCL collective at ~100% utilization and low power) needs one GPU per
  rank, so at least two GPUs and NCCL. NCCL refuses two ranks on one GPU, so where there are
  fewer GPUs than ranks the ranks share GPU 0 with the gloo backend, which waits on the CPU: the
  GPU then shows the straggler's work (sync_stall) or the slow rank's input gaps
  (rank_data_stall), and the two ranks can only be told apart by per-process utilization.
- ``dataparallel`` (``nn.DataParallel``) over one device is a plain module call: GPU 0
  gathering while the others wait needs two GPUs or more.
- ``spin`` runs ``torch.cuda._sleep``, a kernel that waits on the GPU without working: what a
  rank waiting in an NCCL collective looks like to NVML (utilization ~100%, power low), shown on
  one GPU. gpumon must not call it healthy ``busy``; the verdict it gives is recorded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

BUSY, DATA, SYNC, THROTTLED = "busy", "data_starvation", "sync_stall", "throttled"


@dataclass(frozen=True)
class Scenario:
    name: str
    ddp: bool          # runs as several processes (torch.distributed)
    summary: str
    verdict: str       # PRODUCT.md's verdict on the hardware the scenario is meant for
    cause: Optional[str] = None
    straggler_rank: Optional[int] = None   # the rank the others wait for, if any


SCENARIOS = {s.name: s for s in (
    Scenario("busy", False, "data already on the GPU; compute-bound", BUSY),
    Scenario("data_starvation", False,
             "heavy per-sample CPU transform, too few DataLoader workers", DATA,
             "cpu_preprocessing"),
    Scenario("io_fetch", False,
             "samples read from files on disk, page cache dropped after each read", DATA,
             "io_fetch"),
    Scenario("main_process", False, "the transform runs in the main process (num_workers=0)",
             DATA, "main_process"),
    Scenario("sync_stall", True, "DDP; one rank does extra work every step", SYNC,
             "imbalance", straggler_rank=1),
    Scenario("rank_data_stall", True, "DDP; one rank's DataLoader is slow", DATA,
             "cpu_preprocessing", straggler_rank=1),
    Scenario("dataparallel", False, "nn.DataParallel over every visible GPU", SYNC,
             "dataparallel", straggler_rank=0),
    Scenario("checkpoint", False, "healthy run saving a checkpoint every few seconds", BUSY),
    Scenario("spin", False, "torch.cuda._sleep: a kernel waiting without working "
             "(a collective wait, seen on one GPU)", SYNC),
)}


def expectation(scn: Scenario, device: str, gpus: int, ranks: int = 1,
                straggler_rank: Optional[int] = None) -> dict:
    """The header fields saying what gpumon should answer for this run on this hardware.

    ``expected_*`` are for the hardware at hand (scoring uses them and ``accept_verdicts``);
    ``intended`` is PRODUCT.md's answer on the hardware the scenario is meant for.
    """
    srank = straggler_rank if (scn.ddp and straggler_rank is not None) else scn.straggler_rank
    intended = {"verdict": scn.verdict, "cause": scn.cause,
                "straggler": srank if scn.straggler_rank is not None else None}
    verdict, cause, straggler, note = scn.verdict, scn.cause, None, ""
    accept = [verdict]
    if scn.ddp:
        if gpus >= ranks and gpus > 1:
            straggler = srank            # rank r runs on GPU r
        else:
            straggler = None             # one GPU: no other GPU waits for it
            if scn.name == "sync_stall":
                verdict, cause = BUSY, None
                note = ("ranks share one GPU (gloo waits on the CPU): the device stays busy "
                        "with the straggler's extra work; the imbalance shows only in "
                        "per-process utilization; sync_stall needs >= 2 GPUs with NCCL")
            else:
                note = ("ranks share one GPU (gloo): the slow rank's input gaps idle the "
                        "device; naming the straggler needs >= 2 GPUs with NCCL")
            accept = [verdict]
    elif scn.name == "dataparallel":
        if gpus > 1:
            straggler = 0
        else:
            verdict, cause = BUSY, None
            accept = [verdict]
            note = "DataParallel over one device is a plain module call; GPU 0 gathering needs >= 2 GPUs"
    elif scn.name == "spin":
        # util ~100% at low power; anything but healthy busy (or idle) is acceptable on one GPU
        accept = [SYNC, DATA, THROTTLED]
        note = ("busy-but-cold: a kernel spins at ~100% utilization and low power; gpumon "
                "must not call it busy; the verdict it gives is recorded")
    elif scn.name == "checkpoint":
        note = "checkpoint pauses are not starvation"
    if device == "cpu":
        note = (note + "; " if note else "") + "ran on the CPU: no GPU evidence to score"
    return {
        "expected_verdict": verdict, "expected_cause": cause, "straggler": straggler,
        "accept_verdicts": accept, "note": note, "intended": intended,
    }
