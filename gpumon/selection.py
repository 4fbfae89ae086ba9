"""What `--gpus` names: NVML indices, UUIDs, or the start of a UUID, checked against the GPUs
there are. One function for NVML and for simulated GPUs."""
from __future__ import annotations

from typing import Sequence

from gpumon.errors import UserError
from gpumon.samples import GpuInfo

# A key that starts like this names GPUs by the start of their UUID (nvidia-smi -L prints
# them; a MIG instance's start with "MIG-").
UUID_PREFIXES = ("GPU-", "MIG-")


def _matches(key: str, infos: Sequence[GpuInfo]) -> list[GpuInfo]:
    exact = [i for i in infos if key == str(i.index) or key == i.uuid]
    if exact or not key.startswith(UUID_PREFIXES):
        return exact
    return [i for i in infos if i.uuid.startswith(key)]


def select_gpus(infos: Sequence[GpuInfo], keys: Sequence[str], where: str = "this machine has"
                ) -> list[int]:
    """The indices of the GPUs ``keys`` name, sorted. A key that names no GPU, or the start of
    several UUIDs, is a UserError (exit 2) that lists what there is to choose from."""
    chosen: set[int] = set()
    for key in keys:
        match = _matches(key, infos)
        if not match:
            have = ", ".join(str(i.index) for i in infos) or "none"
            raise UserError(f"--gpus: no GPU '{key}' ({where}: {have})", 2)
        if len(match) > 1:
            listed = "; ".join(f"{i.index}: {i.uuid}" for i in match)
            raise UserError(f"--gpus: '{key}' is the start of {len(match)} GPUs' UUIDs "
                            f"({listed}); give more of the UUID, or the index", 2)
        chosen.add(match[0].index)
    return sorted(chosen)
