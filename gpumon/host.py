"""HostSource: the host's CPU, iowait and disk, and the training job's process tree.

The job's processes are read from /proc directly (gpumon.procfs: one file per process, half
psutil's cost) where there is one; psutil reads what is read once per process (name, user,
command line), the machine-wide counters, and everything on systems without /proc.

Rates come from the previous and the current reading kept here (no psutil hidden state:
``cpu_percent()``'s first call returns nonsense). The first read after start reports
None for every rate, since nothing is known yet.
"""
from __future__ import annotations

import os
import time
from typing import Iterable, Mapping, Optional, Sequence

import psutil

from gpumon import procfs
from gpumon.cadence import due
from gpumon.samples import HostSample, JobProcs, ProcSample

# Finding a process's children means scanning every process on the machine (~2 ms for 200
# processes): refresh that tree at most this often, s (DataLoader workers live for an epoch,
# not for a tick), and at once when a new main appears or a known worker has gone.
CHILDREN_REFRESH_S = 5.0
# Per-process CPU is read at most this often, s: the kernel counts CPU time in 10 ms ticks, so
# a rate over 0.1 s moves in steps of 10% of a core; between readings the last rate stands.
PROC_CPU_EVERY_S = 1.0
# Loader workers' CPU is read at most this often, s: there are many of them (7 per rank is
# common) and the detector judges them over its windows of several seconds, while the main
# process, one per rank, is read every PROC_CPU_EVERY_S.
WORKER_CPU_EVERY_S = 2.0
# Disk counters are read at most this often, s (from /proc/diskstats, 0.04 ms; psutil's
# 0.2-0.3 ms looked up every disk in /sys on each call); between readings the last rates
# stand.
DISK_EVERY_S = 1.0
# A process's parent does not change while both live: the /proc scan for children reads the
# parent of new PIDs only, and every PID afresh this often, s (a PID reused meanwhile).
PPID_FULL_SCAN_S = 60.0
# Ancestors followed at most when placing a PID in a process tree (a guard against a cycle
# in a parent map read while processes come and go; real trees are a few levels deep).
TREE_MAX_DEPTH = 64
# A loader worker at or above this share of one core is saturated (it is the bottleneck).
WORKER_BUSY_PCT = 90.0
# Per-thread CPU is read only when the main process uses at least this much of one core: a
# thread at one full core (a GIL-bound loader) cannot hide in a process using less.
THREAD_SCAN_MIN_PCT = 85.0


# The per-process reader: /proc where there is one (None: psutil's way).
_read_stat = procfs.read_stat if procfs.available() else None
_thread_cpu = procfs.thread_cpu if procfs.available() else None


class _Proc:
    """One process of a job and its previous CPU times, for rates.

    Its name, parent, user and command line are read once (psutil); its CPU and memory at
    each reading from /proc/PID/stat (``_read_stat``). A PID that now names another process
    (its start differs from the first reading) reads as gone, as a process that has ended."""
    __slots__ = ("proc", "prev", "last", "threads_prev", "threads_last", "name", "ppid",
                 "started", "user", "cmdline", "rss_mib", "start_ticks", "last_sample")

    def __init__(self, proc: psutil.Process):
        self.proc = proc
        self.prev: Optional[tuple[float, float]] = None   # (monotonic, cpu seconds)
        self.last: Optional[float] = None                 # the last rate, % of one core
        self.threads_prev: Optional[tuple[float, dict[int, float]]] = None
        self.threads_last: Optional[float] = None
        self.start_ticks: Optional[int] = None            # /proc's start of this PID's process
        try:
            self.name = proc.name()
            self.ppid = proc.ppid()
            self.started: Optional[float] = proc.create_time()   # Unix epoch seconds
        except psutil.Error:
            self.name, self.ppid, self.started = "?", 0, None
        self.user, self.cmdline = _identity(proc)
        self.rss_mib: Optional[float] = None              # read with the CPU rate
        self.last_sample: Optional[ProcSample] = None

    def _times(self) -> tuple[float, Optional[float]]:
        """(CPU seconds so far, RSS MiB); psutil.NoSuchProcess where the process is gone."""
        if _read_stat is None:
            t = self.proc.cpu_times()
            try:
                rss: Optional[float] = self.proc.memory_info().rss / 1048576.0
            except psutil.Error:
                rss = None
            return t.user + t.system, rss
        st = _read_stat(self.proc.pid)
        if st is None or self.start_ticks not in (None, st.start_ticks):
            raise psutil.NoSuchProcess(self.proc.pid)
        self.start_ticks = st.start_ticks
        return st.cpu_s, st.rss_mib

    def cpu_pct(self, mono: float, every: float = PROC_CPU_EVERY_S) -> Optional[float]:
        """% of one core since the previous reading (read at most every ``every`` s).
        psutil.NoSuchProcess where it has gone; None (no rate) where /proc hides it."""
        prev = self.prev
        if prev is not None and not due(mono, prev[0], every):
            return self.last
        try:
            cpu, self.rss_mib = self._times()
        except (PermissionError, psutil.AccessDenied):
            self.prev, self.last, self.rss_mib = None, None, None
            return None
        self.prev = (mono, cpu)
        if prev is None or mono <= prev[0]:
            self.last = None
        else:
            self.last = max(0.0, 100.0 * (cpu - prev[1]) / (mono - prev[0]))
        return self.last

    def sample(self, pid: int, role: str, cpu: Optional[float],
               gpus: tuple[int, ...]) -> ProcSample:
        """The process as a ProcSample; the last one again while nothing in it changed (a
        worker's rate stands for WORKER_CPU_EVERY_S: most of a read's samples are so)."""
        last = self.last_sample
        if (last is not None and last.cpu_pct == cpu and last.rss_mib == self.rss_mib
                and last.role == role and last.gpus == gpus and last.pid == pid):
            return last
        self.last_sample = ProcSample(
            pid=pid, ppid=self.ppid, name=self.name, role=role, cpu_pct=cpu, gpus=gpus,
            user=self.user, cmdline=self.cmdline, rss_mib=self.rss_mib, started=self.started)
        return self.last_sample

    def _thread_times(self) -> dict[int, float]:
        if _thread_cpu is None:
            return {th.id: th.user_time + th.system_time for th in self.proc.threads()}
        now = _thread_cpu(self.proc.pid)
        if now is None:
            raise psutil.NoSuchProcess(self.proc.pid)
        return now

    def max_thread_pct(self, mono: float) -> Optional[float]:
        """The busiest thread's % of one core since the previous reading (as cpu_pct)."""
        prev = self.threads_prev
        if prev is not None and not due(mono, prev[0], PROC_CPU_EVERY_S):
            return self.threads_last
        now = self._thread_times()
        self.threads_prev = (mono, now)
        if prev is None or mono <= prev[0]:
            self.threads_last = None
        else:
            dt = mono - prev[0]
            self.threads_last = max((100.0 * (c - prev[1][i]) / dt for i, c in now.items()
                                     if i in prev[1]), default=None)
        return self.threads_last


def _identity(proc: psutil.Process) -> tuple[Optional[str], Optional[str]]:
    """(user, command line) of a process, read once: neither changes for a forked worker.
    A user with no name shows as its uid; a kernel thread's empty command line as None."""
    try:
        user: Optional[str] = proc.username()
    except KeyError:                 # a uid with no passwd entry (containers)
        try:
            user = str(proc.uids().real)
        except psutil.Error:
            user = None
    except psutil.Error:
        user = None
    try:
        cmdline = " ".join(proc.cmdline()) or None
    except psutil.Error:
        cmdline = None
    return user, cmdline


class _ParentMap:
    """Every process's children, from a pass over /proc that reads only new PIDs' parents."""

    def __init__(self) -> None:
        self.ppid: dict[int, int] = {}
        self.full_at = -1e9

    def parents(self, mono: float) -> Optional[dict[int, int]]:
        """{pid: parent pid} of every process now; None where there is no /proc."""
        try:
            names = os.listdir("/proc")
        except OSError:
            return None
        if mono - self.full_at >= PPID_FULL_SCAN_S:
            self.ppid, self.full_at = {}, mono
        known, ppid = self.ppid, {}
        for name in names:
            if not name.isdigit():
                continue
            pid = int(name)
            parent = known.get(pid)
            if parent is None:
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        data = f.read()
                    parent = int(data[data.rindex(b")") + 2:].split(None, 2)[1])
                except (OSError, ValueError, IndexError):
                    continue   # gone while scanning
            ppid[pid] = parent
        self.ppid = ppid
        return ppid

    def children(self, mono: float) -> Optional[dict[int, list[int]]]:
        """{parent: [children]}; None where there is no /proc."""
        ppid = self.parents(mono)
        if ppid is None:
            return None
        kids: dict[int, list[int]] = {}
        for pid, parent in ppid.items():
            kids.setdefault(parent, []).append(pid)
        return kids


class ProcessTree:
    """A root process and its descendants (``gpumon run``: CMD, its ranks, their workers).

    Only PIDs that show up on a GPU matter, so the tree is never walked downwards: a PID not
    placed yet is placed by following its parents up (one pass over /proc, shared with the
    host's other uses through the parent map, reading only new PIDs' parents) and the answer
    is kept while that PID lives: a process's ancestry is fixed at fork, and a member whose
    parent exits (reparented to init) stays a member.
    """

    def __init__(self, root: int, parents: Optional[_ParentMap] = None):
        self.root = root
        self._parents = parents if parents is not None else _ParentMap()
        self._placed: dict[int, bool] = {}

    def members(self, pids: Iterable[int], mono: Optional[float] = None) -> set[int]:
        """Which of ``pids`` are the root or its descendants."""
        pids = set(pids)
        todo = [p for p in pids if p not in self._placed]
        if todo:
            mono = time.monotonic() if mono is None else mono
            ppid = self._parents.parents(mono)
            for pid in todo:
                self._placed[pid] = self._descends(pid, ppid)
        for pid in [p for p in self._placed if p not in pids]:
            del self._placed[pid]       # gone from the GPUs: placed again if it comes back
        return {p for p in pids if self._placed[p]}

    def _descends(self, pid: int, ppid: Optional[dict[int, int]]) -> bool:
        if ppid is None:                # no /proc: psutil's way
            try:
                proc = psutil.Process(pid)
                return pid == self.root or any(p.pid == self.root for p in proc.parents())
            except psutil.Error:
                return False
        for _ in range(TREE_MAX_DEPTH):
            if pid == self.root:
                return True
            parent = ppid.get(pid)
            if parent is None or parent == pid or pid <= 1:
                return False
            pid = parent
        return False


class HostSource:
    """Reads the host and the processes using the GPUs (their PIDs come from the GPU source)."""

    def __init__(self) -> None:
        self._cpu_prev = None
        self._disk_prev = None
        self._procs: dict[int, _Proc] = {}
        self._children: dict[int, tuple[int, ...]] = {}
        self._children_at = -1e9
        self._children_gone = False     # a known worker has exited: rescan at the next read
        self._parents = _ParentMap()
        self._job_cache: Optional[tuple] = None   # (PIDs key, monotonic, (jobs, procs, unmapped))
        self._disk_last: tuple[Optional[float], Optional[float]] = (None, None)
        self._diskstats = procfs.DiskCounters() if procfs.available() else None
        self.unmapped: tuple[int, ...] = ()

    def tree(self, root: int) -> ProcessTree:
        """The process tree of ``root``, sharing this source's view of /proc."""
        return ProcessTree(root, self._parents)

    # -- machine-wide ---------------------------------------------------------------------
    def _cpu(self):
        per = psutil.cpu_times(percpu=True)
        prev, self._cpu_prev = self._cpu_prev, per
        if prev is None or len(prev) != len(per):
            return None, None, None, ()
        cores = []
        busy_all = total_all = iowait_all = 0.0
        for a, b in zip(prev, per):
            total = sum(b) - sum(a)
            idle = (b.idle - a.idle) + (getattr(b, "iowait", 0) - getattr(a, "iowait", 0))
            # Float sums of counters (and kernels whose idle count steps back) can leave busy a
            # hair below 0 or above total: a share is clamped to 0..100.
            busy = min(max(total - idle, 0.0), max(total, 0.0))
            cores.append(100.0 * busy / total if total > 0 else 0.0)
            busy_all += busy
            total_all += total
            iowait_all += getattr(b, "iowait", 0) - getattr(a, "iowait", 0)
        if total_all <= 0:
            return None, None, None, ()
        return (100.0 * busy_all / total_all, max(cores),
                min(100.0, 100.0 * max(iowait_all, 0) / total_all),
                tuple(round(c, 1) for c in cores))

    def _disk(self, mono: float):
        prev = self._disk_prev
        if prev is not None and not due(mono, prev[0], DISK_EVERY_S):
            return self._disk_last
        d = self._disk_bytes()
        if d is None:
            self._disk_last = (None, None)
            return self._disk_last
        self._disk_prev = (mono, d[0], d[1])
        if prev is None or mono <= prev[0]:
            self._disk_last = (None, None)
        else:
            dt = mono - prev[0]
            self._disk_last = (max(0, d[0] - prev[1]) / dt / 1e6,
                               max(0, d[1] - prev[2]) / dt / 1e6)
        return self._disk_last

    def _disk_bytes(self) -> Optional[tuple[int, int]]:
        """(bytes read, bytes written) by the disks so far: /proc/diskstats, else psutil."""
        d = self._diskstats.read() if self._diskstats is not None else None
        if d is not None:
            return d
        try:
            c = psutil.disk_io_counters()
        except Exception:
            return None
        return None if c is None else (c.read_bytes, c.write_bytes)

    # -- the job's processes --------------------------------------------------------------
    def _proc(self, pid: int) -> Optional[_Proc]:
        p = self._procs.get(pid)
        if p is None:
            try:
                p = _Proc(psutil.Process(pid))
            except psutil.Error:
                return None
            self._procs[pid] = p
        return p

    def _refresh_children(self, mains: Sequence[int], mono: float) -> None:
        if (mono - self._children_at < CHILDREN_REFRESH_S and not self._children_gone
                and all(m in self._children for m in mains)):
            return
        self._children_at = mono
        self._children_gone = False
        by_parent = self._parents.children(mono) if mains else {}
        kids: dict[int, tuple[int, ...]] = {}
        for m in mains:
            if by_parent is None:   # no /proc: psutil's way, one scan per main
                p = self._proc(m)
                try:
                    kids[m] = tuple(c.pid for c in p.proc.children(recursive=True)) if p else ()
                except psutil.Error:
                    kids[m] = ()
                continue
            found, todo = [], list(by_parent.get(m, ()))
            while todo:
                pid = todo.pop(0)
                found.append(pid)
                todo.extend(by_parent.get(pid, ()))
            kids[m] = tuple(found)
        self._children = kids

    def read(self, pids_by_gpu: Mapping[int, Optional[Sequence[int]]],
             now: Optional[float] = None) -> HostSample:
        now = time.time() if now is None else now
        mono = time.monotonic()
        cpu, core_max, iowait, cores = self._cpu()
        read_mbps, write_mbps = self._disk(mono)
        # The job's processes are read every PROC_CPU_EVERY_S: in between, and while the GPUs
        # report the same PIDs, the last reading stands (polls at 0.1 s cost a tenth).
        key = tuple(sorted((g, tuple(p) if p is not None else None)
                           for g, p in pids_by_gpu.items()))
        cached = self._job_cache
        if (cached is not None and cached[0] == key and not self._children_gone
                and not due(mono, cached[1], PROC_CPU_EVERY_S)):
            jobs, procs, unmapped = cached[2]
        else:
            jobs, procs, unmapped = self._jobs(pids_by_gpu, mono)
            self._job_cache = (key, mono, (jobs, procs, unmapped))
        return HostSample(time=now, cpu_pct=cpu, cpu_max_core_pct=core_max, iowait_pct=iowait,
                          disk_read_mbps=read_mbps, disk_write_mbps=write_mbps,
                          cpu_count=len(cores) or os.cpu_count(), cpu_cores_pct=cores,
                          jobs=jobs, procs=procs, unmapped_pids=unmapped)

    def _jobs(self, pids_by_gpu: Mapping[int, Optional[Sequence[int]]], mono: float):
        """(jobs, procs, unmapped PIDs) of the processes the GPUs report, read now."""
        wall = time.time()
        gpu_pids = {pid for pids in pids_by_gpu.values() if pids for pid in pids}
        unmapped = tuple(sorted(pid for pid in gpu_pids if self._proc(pid) is None))
        self.unmapped = unmapped
        # Mains: GPU processes whose parent is not itself a GPU process (a DataParallel
        # process uses every GPU; a torchrun rank's parent is the launcher, not a GPU user).
        mains = sorted(pid for pid in gpu_pids if pid not in unmapped
                       and self._procs[pid].ppid not in gpu_pids)
        self._refresh_children(mains, mono)

        cpu_of: dict[int, Optional[float]] = {}
        procs: list[ProcSample] = []
        gpus_of = {pid: tuple(sorted(g for g, pids in pids_by_gpu.items() if pids and pid in pids))
                   for pid in gpu_pids}
        for m in mains:
            for pid, role in [(m, "main")] + [(c, "worker") for c in self._children.get(m, ())
                                               if c not in gpu_pids]:
                p = self._proc(pid)
                if p is None:
                    self._children_gone |= role == "worker"
                    continue
                try:
                    cpu_of[pid] = p.cpu_pct(mono, PROC_CPU_EVERY_S if role == "main"
                                            else WORKER_CPU_EVERY_S)
                except (psutil.Error, OSError):      # gone (or its PID reused) meanwhile
                    self._procs.pop(pid, None)
                    self._children_gone |= role == "worker"
                    continue
                procs.append(p.sample(pid, role, cpu_of[pid], gpus_of.get(pid, ())))

        jobs = []
        for gpu, pids in sorted(pids_by_gpu.items()):
            job_main = next((m for m in mains if pids and m in pids), None)
            if job_main is None:
                jobs.append(JobProcs(gpu=gpu))
                continue
            workers = [c for c in self._children.get(job_main, ()) if c in cpu_of]
            wcpu = [cpu_of[c] for c in workers if cpu_of[c] is not None]
            main_cpu = cpu_of.get(job_main)
            thread_max = None
            if main_cpu is not None and main_cpu >= THREAD_SCAN_MIN_PCT:
                try:
                    thread_max = self._procs[job_main].max_thread_pct(mono)
                except (psutil.Error, OSError):
                    thread_max = None
            born = [self._procs[c].started for c in workers]
            youngest = (max(0.0, wall - max(born))
                        if born and all(b is not None for b in born) else None)
            jobs.append(JobProcs(
                gpu=gpu, main_pid=job_main, main_cpu_pct=main_cpu,
                main_thread_max_pct=thread_max, loader_workers=len(workers),
                loader_cpu_pct=sum(wcpu) if len(wcpu) == len(workers) else None,
                loader_busy=sum(1 for c in wcpu if c >= WORKER_BUSY_PCT),
                loader_age_s=None if youngest is None else round(youngest, 1)))

        # Forget processes that are gone.
        live = set(cpu_of) | gpu_pids
        for pid in [p for p in self._procs if p not in live]:
            del self._procs[pid]
        return tuple(jobs), tuple(procs), unmapped
