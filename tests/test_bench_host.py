"""The host sampler's costs that the benchmark found (issue 9): one /proc scan for every
job's children, per-process CPU read at most every PROC_CPU_EVERY_S, a rescan when a worker
ends."""
import os
import signal
import time

import pytest

from gpumon import cadence
from gpumon import host as H
from bench.proctree import ProcTree


def test_one_scan_finds_the_workers_of_every_main(monkeypatch):
    scans = []
    real = H._ParentMap.children
    monkeypatch.setattr(H._ParentMap, "children",
                        lambda self, mono: scans.append(1) or real(self, mono))
    with ProcTree(mains=3, workers=2) as tree:
        hs = H.HostSource()
        s = hs.read({g: (m,) for g, m in enumerate(tree.mains)})
        assert len(scans) == 1                      # not one per main
        for g, m in enumerate(tree.mains):
            job = s.job_on(g)
            assert job.main_pid == m and job.loader_workers == 2
        hs.read({g: (m,) for g, m in enumerate(tree.mains)})
        assert len(scans) == 1                      # within CHILDREN_REFRESH_S: no rescan


class _FakeProc:
    def __init__(self):
        self.reads = 0
        self.cpu = 0.0

    def create_time(self):          # as psutil.Process: the start, Unix epoch seconds
        return 1_700_000_000.0

    def cpu_times(self):
        self.reads += 1
        self.cpu += 0.5

        class T:
            user, system = self.cpu, 0.0
        return T

    def name(self):
        return "python"

    def ppid(self):
        return 1

    def username(self):
        return "alice"

    def cmdline(self):
        return ["python", "train.py"]

    def memory_info(self):
        self.reads_mem = getattr(self, "reads_mem", 0) + 1

        class M:
            rss = 512 * 1048576
        return M


def test_process_cpu_is_read_at_most_every_period(monkeypatch):
    monkeypatch.setattr(H, "_read_stat", None)       # psutil's way (no /proc)
    fake = _FakeProc()
    p = H._Proc(fake)
    assert p.cpu_pct(100.0) is None                 # no rate from one reading
    assert p.cpu_pct(100.0 + H.PROC_CPU_EVERY_S / 2) is None and fake.reads == 1
    assert p.cpu_pct(101.0) == pytest.approx(50.0)  # 0.5 s of CPU in 1 s
    assert p.cpu_pct(101.5) == pytest.approx(50.0) and fake.reads == 2   # held, not read
    assert p.rss_mib == 512.0 and fake.reads_mem == 2       # RSS read with the CPU, as rarely
    assert (p.user, p.cmdline) == ("alice", "python train.py")


def test_parent_map_reads_only_new_pids(monkeypatch):
    opened = []
    real_open = open

    def counting_open(path, *a, **k):
        if str(path).startswith("/proc/") and str(path).endswith("/stat"):
            opened.append(path)
        return real_open(path, *a, **k)
    pm = H._ParentMap()
    with ProcTree(mains=1, workers=2) as tree:
        main = tree.mains[0]
        assert sorted(pm.children(0.0)[main]) == sorted(tree.workers[main])
        monkeypatch.setattr("builtins.open", counting_open)
        kids = pm.children(1.0)
        assert sorted(kids[main]) == sorted(tree.workers[main])
        assert len(opened) < 10                       # only PIDs born since the first scan
        opened.clear()
        pm.children(1.0 + H.PPID_FULL_SCAN_S)         # and all of them now and then
        assert len(opened) >= len(tree.all_pids)


@pytest.mark.parametrize("procfs", [True, False])
def test_disk_is_read_at_most_every_period(monkeypatch, procfs):
    calls = []
    hs = H.HostSource()
    if procfs:
        real = hs._diskstats.read
        monkeypatch.setattr(hs._diskstats, "read", lambda: calls.append(1) or real())
    else:
        hs._diskstats = None
        real = H.psutil.disk_io_counters
        monkeypatch.setattr(H.psutil, "disk_io_counters", lambda: calls.append(1) or real())
    assert hs._disk(10.0) == (None, None)
    assert hs._disk(10.0 + H.DISK_EVERY_S / 2) == (None, None) and len(calls) == 1
    r = hs._disk(11.0)
    assert len(calls) == 2
    assert r[0] is None or r[0] >= 0
    assert hs._disk(11.5) == r and len(calls) == 2


def test_a_worker_that_ends_makes_the_next_read_rescan(monkeypatch):
    monkeypatch.setattr(H, "PROC_CPU_EVERY_S", 0.1)
    monkeypatch.setattr(H, "WORKER_CPU_EVERY_S", 0.1)
    monkeypatch.setattr(cadence, "EARLY_S", 0.0)
    with ProcTree(mains=1, workers=3) as tree:
        main = tree.mains[0]
        hs = H.HostSource()
        assert hs.read({0: (main,)}).job_on(0).loader_workers == 3
        os.kill(tree.workers[main][0], signal.SIGKILL)
        time.sleep(0.3)                              # reaped by the main (SIGCHLD ignored)
        hs.read({0: (main,)})                        # reading the gone worker fails
        assert hs.read({0: (main,)}).job_on(0).loader_workers == 2


def test_job_processes_are_read_once_per_period_at_fast_polls(monkeypatch):
    reads = []
    real = H.HostSource._jobs
    monkeypatch.setattr(H.HostSource, "_jobs",
                        lambda self, p, mono: reads.append(mono) or real(self, p, mono))
    with ProcTree(mains=2, workers=2) as tree:
        pids = {g: (m,) for g, m in enumerate(tree.mains)}
        hs = H.HostSource()
        first = hs.read(pids)
        again = hs.read(dict(pids))                  # same PIDs, within the period: reused
        assert len(reads) == 1 and again.jobs == first.jobs and again.procs == first.procs
        assert again.job_on(1).loader_workers == 2
        hs.read({0: pids[0]})                        # the GPUs' PIDs changed: read now
        assert len(reads) == 2


def test_a_process_sample_is_reused_while_its_reading_stands(monkeypatch):
    monkeypatch.setattr(H, "_read_stat", None)       # psutil's way, with a fake process
    p = H._Proc(_FakeProc())
    p.cpu_pct(100.0)
    first = p.sample(7, "worker", p.cpu_pct(101.0), ())
    assert first.cpu_pct == pytest.approx(50.0) and first.rss_mib == 512.0
    assert p.sample(7, "worker", p.cpu_pct(101.5), ()) is first    # held: the same object
    assert p.sample(7, "main", p.cpu_pct(101.5), (0,)) is not first  # its role changed
    later = p.sample(7, "main", p.cpu_pct(103.0), (0,))            # read again: 0.5 s in 2 s
    assert later.cpu_pct == pytest.approx(25.0) and later.role == "main"
