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

from typing import Mapping, Optional

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.bins import GI, Store
from gpumon.detect.thresholds import DEFAULT, Thresholds, bins

NAN = float("nan")


def in_use(pids, mem, kernel, th: Thresholds = DEFAULT):
    """Whether a GPU is part of a job (arrays of any one shape): a process on it (``pids``:
    how many, or the share of ticks that saw one) or mem_active_mib of its memory held
    (``mem``, MiB: memory held by processes it cannot see, in another PID namespace, counts),
    where either is known (NaN: unknown); where neither is, ``kernel``: whether it ran a
    kernel over the caller's span (the window's share of samples with one at idle_duty,
    one within idle_after_s; the seconds table, which reads one second: True)."""
    said = (pids > 0) | (mem >= th.mem_active_mib)       # (NaN compares False, silently)
    return np.where(np.isnan(pids) & np.isnan(mem), kernel, said)


def group_active(act: list[int], pids: Mapping[int, Optional[tuple]],
                 ppid: Optional[Mapping[int, int]] = None) -> list[tuple[tuple[int, ...], bool]]:
    """Jobs as (GPUs, shared_process) pairs, sorted by first GPU, of the GPUs ``act`` found
    active; ``shared_process``: one process uses every GPU of the job (DataParallel)."""
    if not act:
        return []
    parent = {g: g for g in act}      # union-find over the active GPUs
    # GPUs that share a process, or whose processes share a launcher, are one job.
    _tie_by_process(parent, act, pids, ppid or {})
    if len({_find(parent, g) for g in act}) == len(act):
        # Nothing ties any GPUs together (no shared process, no common launcher): one job per
        # node is the common case, so the active GPUs form one job.
        loose = act[1:]
    else:
        # GPUs with memory but no visible process (PIDs from another namespace) join the
        # first job rather than being judged alone.
        loose = [g for g in act if not pids.get(g)]
    for g in loose:
        _union(parent, act[0], g)
    return _jobs(parent, act, pids)


def _find(parent: dict, x: int) -> int:
    """The root of ``x`` in the union-find ``parent`` (halving the path on the way)."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _union(parent: dict, a: int, b: int) -> None:
    """Join the sets of ``a`` and ``b``; the lower root becomes the root."""
    ra, rb = _find(parent, a), _find(parent, b)
    if ra != rb:
        parent[max(ra, rb)] = min(ra, rb)


def _tie_by_process(parent: dict, act: list[int], pids: Mapping[int, Optional[tuple]],
                    ppid: Mapping[int, int]) -> None:
    """Join the GPUs that share a process or a launcher (a parent process other than init)."""
    owner: dict = {}
    for g in act:
        for pid in pids.get(g) or ():
            launcher = ppid.get(pid)
            for key in [("pid", pid)] + ([("parent", launcher)] if launcher is not None
                                         and launcher > 1 else []):   # (init is no launcher)
                if key in owner:
                    _union(parent, owner[key], g)
                owner[key] = g


def _jobs(parent: dict, act: list[int], pids: Mapping[int, Optional[tuple]]
          ) -> list[tuple[tuple[int, ...], bool]]:
    """The union-find's sets as sorted (GPUs, shared_process) pairs (see group_active)."""
    jobs: dict[int, list[int]] = {}
    for g in act:
        jobs.setdefault(_find(parent, g), []).append(g)
    out = []
    for members in jobs.values():
        sets = [set(pids.get(g) or ()) for g in members]
        shared = len(members) > 1 and bool(set.intersection(*sets))
        out.append((tuple(sorted(members)), shared))
    return sorted(out)


class GroupMemo:
    """group_active's last answer, kept while the active GPUs, their PIDs and parents stay."""

    def __init__(self):
        self.key: Optional[tuple] = None
        self.jobs: list = []

    def __call__(self, act: list[int], pids: Mapping[int, Optional[tuple]],
                 ppid: Optional[Mapping[int, int]] = None) -> list[tuple[tuple[int, ...], bool]]:
        ppid = ppid or {}
        gpu_pids = tuple(pids.get(g) for g in act)
        key = (tuple(act), gpu_pids, [ppid.get(p) for ps in gpu_pids for p in ps or ()])
        if key != self.key:
            self.key = key
            self.jobs = group_active(act, pids, ppid)
        return list(self.jobs)


def store_jobs(store: Store, stop: int, w: int, pids: dict, ppid: dict,
               th: Thresholds = DEFAULT, memo: Optional[GroupMemo] = None,
               latest: bool = False, recent: frozenset = frozenset(),
               gone: frozenset = frozenset()):
    """Jobs from the last ``w`` bins before ``stop`` (memory, activity) and the PIDs seen;
    ``memo``: a GroupMemo; ``latest``: each GPU read in its own last bin with samples;
    ``recent``: GPUs with a kernel within idle_after_s (in use without process or memory
    info); ``gone``: GPUs lost, in no job."""
    lo = max(0, stop - w)
    s = store.g[_JOB_ROWS, :, lo:stop]
    if latest:
        has = s[0] > 0                                    # (G, T): a sample in the bin
        last = s.shape[2] - 1 - np.argmax(has[:, ::-1], axis=1)
        s = np.where(has.any(axis=1), s[:, np.arange(s.shape[1]), last], 0.0)
    else:
        s = s.sum(axis=2)
    n, quiet, memn, mem = s
    pid = np.array([NAN if pids.get(gpu) is None else len(pids[gpu]) for gpu in store.gpus])
    with np.errstate(invalid="ignore", divide="ignore"):
        kernel = np.array([gpu in recent for gpu in store.gpus], bool) | (
            (n - quiet) / n >= th.idle_duty)
        use = in_use(pid, N.div(mem, memn), kernel, th).tolist()
    act = [gpu for i, gpu in enumerate(store.gpus) if use[i] and gpu not in gone]
    return (memo or group_active)(act, pids, ppid)


_JOB_ROWS = [GI["n"], GI["idle"], GI["memn"], GI["mem"]]


def kernels(g: np.ndarray) -> np.ndarray:
    """(G, T): whether each GPU had a sample showing a kernel (above idle_util_pct) in each
    of the bins ``g``."""
    return (g[GI["n"]] - g[GI["idle"]]) > 0


def active_since(g: np.ndarray, th: Thresholds = DEFAULT) -> int:
    """First bin of the last unbroken stretch in which every GPU of the job was in use."""
    with np.errstate(invalid="ignore", divide="ignore"):
        pid = N.div(g[GI["pid"]], g[GI["pidn"]])
        mem = N.div(g[GI["mem"]], g[GI["memn"]])
    k = kernels(g)
    at = np.arange(k.shape[-1])
    since_k = at - np.maximum.accumulate(np.where(k, at, -(1 << 30)), axis=-1)
    ran = since_k < bins(th.idle_after_s)
    act = in_use(pid, mem, ran, th)
    allact = act.all(axis=0)
    off = np.flatnonzero(~allact)
    return int(off[-1] + 1) if len(off) else 0
