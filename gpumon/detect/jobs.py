"""Which GPUs form one job: a verdict is per job (PRODUCT.md).

- A GPU with no process and no memory in use is not part of any job (never a straggler).
- GPUs sharing a process (DataParallel: one process on every GPU) are one job.
- Processes with the same parent (a torchrun / mpirun group) make their GPUs one job, when
  the parent is known (live, from the host's process list).
- When nothing ties any GPUs together (no shared process, no common launcher: a CSV log has
  PIDs but not parents, nvidia-smi logs have neither, ranks started by hand have init as
  parent), every active GPU is taken as one job: the common case of one job per node.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

from gpumon.detect.thresholds import DEFAULT, Thresholds


def active(pids: Optional[tuple], mem_mib: float, duty: float, th: Thresholds = DEFAULT) -> bool:
    """Is this GPU part of a job? Processes or memory say so; without either, activity."""
    if pids:
        return True
    if mem_mib is not None and not math.isnan(mem_mib):
        return mem_mib >= th.mem_active_mib
    if pids is not None:           # the process list is known and empty, memory unknown
        return False
    return duty is not None and not math.isnan(duty) and duty >= th.active_duty


def group(gpus: list[int], pids: Mapping[int, Optional[tuple]], mem: Mapping[int, float],
          duty: Mapping[int, float], ppid: Optional[Mapping[int, int]] = None,
          th: Thresholds = DEFAULT) -> list[tuple[tuple[int, ...], bool]]:
    """Jobs as (GPUs, shared_process) pairs, sorted by first GPU; ``shared_process`` is True
    when one process uses every GPU of the job (the DataParallel picture)."""
    act = [g for g in gpus if active(pids.get(g), mem.get(g, math.nan), duty.get(g, math.nan),
                                     th)]
    if not act:
        return []
    parent = {g: g for g in act}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    # GPUs that share a process, or whose processes share a launcher, are one job.
    owner: dict = {}
    for g in act:
        for pid in pids.get(g) or ():
            keys = [("pid", pid)]
            parent_pid = (ppid or {}).get(pid)
            if parent_pid is not None and parent_pid > 1:   # init is no launcher
                keys.append(("parent", parent_pid))
            for key in keys:
                if key in owner:
                    union(owner[key], g)
                owner[key] = g
    if len({find(g) for g in act}) == len(act):
        # Nothing ties any GPUs together (no shared process, no common launcher): one job per
        # node is the common case, so the active GPUs form one job.
        for g in act[1:]:
            union(act[0], g)
    else:
        # GPUs with memory but no visible process (PIDs from another namespace) join the
        # first job rather than being judged alone.
        for g in act:
            if not pids.get(g):
                union(act[0], g)
    jobs: dict[int, list[int]] = {}
    for g in act:
        jobs.setdefault(find(g), []).append(g)
    out = []
    for members in jobs.values():
        sets = [set(pids.get(g) or ()) for g in members]
        shared = len(members) > 1 and bool(set.intersection(*sets)) if sets else False
        out.append((tuple(sorted(members)), shared))
    return sorted(out)
