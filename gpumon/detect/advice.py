"""One line of advice per verdict and cause: what the user should try first."""
from __future__ import annotations

from typing import Optional

from gpumon.diagnosis import (BUSY, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, PAUSED,
                              SYNC_STALL, THROTTLED)

_STARVATION = {
    "cpu_preprocessing": "loader workers are saturated: raise DataLoader num_workers, "
                         "cheapen per-sample transforms, or preprocess once and cache",
    "io_fetch": "storage cannot keep up: cache the dataset on local NVMe or in RAM, use "
                "larger sequential shards, or raise prefetching",
    "main_process": "the input pipeline runs in the main process: move preprocessing off it "
                    "(DataLoader num_workers > 0, pin_memory=True)",
    "input_pipeline": "waiting for input: add DataLoader workers, prefetch more, or profile "
                      "the input pipeline; a checkpoint or evaluation that runs this often "
                      "looks the same on the GPUs (host counters, as gpumon logs them, tell "
                      "them apart)",
}


_PAUSED = {
    "checkpoint": "a checkpoint: fine if rare; if frequent or long, save less often or "
                  "asynchronously (torch.distributed.checkpoint async_save)",
    "validation": "a validation pass: fine; if long, validate less often or on a subset",
    "epoch_boundary": "an epoch boundary: new DataLoader workers start; persistent_workers=True "
                      "keeps them across epochs",
    "startup": "start-up: model load and first batches; nothing to do unless it is long",
    "unknown": "the job stopped after steady work (a checkpoint, validation pass, epoch "
               "boundary or start-up): fine if short and rare",
}


def _starvation(cause: Optional[str], straggler: Optional[int]) -> str:
    line = _STARVATION.get(cause or "input_pipeline", _STARVATION["input_pipeline"])
    if straggler is not None:
        return f"GPU {straggler}'s rank starves and the others wait for it: {line}"
    return line


def _stall(cause: Optional[str], straggler: Optional[int]) -> str:
    if cause == "rank_host":
        who = f"GPU {straggler}'s rank" if straggler is not None else "one rank"
        return (f"the others wait for {who}, held up on its host: look at what only that "
                "rank does (rank-0 checkpoint saves or logging: make them asynchronous or "
                "less frequent) and at its input pipeline")
    if cause == "hang":
        return ("a collective never completes: a rank died or diverged; check every "
                "rank's log, set NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
                "with a timeout")
    if cause == "dataparallel":
        return ("torch.nn.DataParallel makes GPU 0 gather for everyone: use "
                "DistributedDataParallel (one process per GPU)")
    if straggler is not None:
        return (f"the other GPUs wait for GPU {straggler}: balance the work per rank "
                f"(batch/sequence sizes), and check GPU {straggler}'s clocks and link")
    return "GPUs wait for each other: balance the work per rank"


def _throttled(cause: Optional[str], straggler: Optional[int]) -> str:
    which = f"GPU {straggler}" if straggler is not None else "the GPUs"
    if cause == "power_cap":
        return f"{which} run at the power cap: check the power limit (nvidia-smi -pl)"
    return f"check {which}'s clocks and cooling (airflow, fans, ambient temperature)"


def _idle(cause: Optional[str], straggler: Optional[int]) -> str:
    if cause == "held":
        return ("the job holds GPU memory and runs nothing: it may be stuck on the host "
                "(py-spy dump --pid PID) or waiting for input that never comes")
    return "no work on the GPUs"


_BY_VERDICT = {
    DATA_STARVATION: _starvation, SYNC_STALL: _stall, THROTTLED: _throttled, IDLE: _idle,
    PAUSED: lambda cause, s: _PAUSED.get(cause or "unknown", _PAUSED["unknown"]),
    BUSY: lambda cause, s: "the GPUs are kept fed; to go faster, look at the model itself",
    INSUFFICIENT_DATA: lambda cause, s: "not enough samples yet",
}


def advice(verdict: str, cause: Optional[str], straggler: Optional[int]) -> str:
    fn = _BY_VERDICT.get(verdict)
    return fn(cause, straggler) if fn else ""
