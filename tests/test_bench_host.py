"""The host sampler's costs that the benchmark found (issue 9): one /proc scan for every
job's children, per-process CPU read at most every PROC_CPU_EVERY_S, a rescan when a worker
ends."""
import os
import signal
import time

import pytest

from gpumon import host as H
from bench.proctree import ProcTree


def test_one_scan_finds_the_workers_of_every_main(monkeypatch):
    scans = []
    real = H._children_by_parent
    monkeypatch.setattr(H, "_children_by_parent", lambda: scans.append(1) or real())
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


def test_process_cpu_is_read_at_most_every_period():
    fake = _FakeProc()
    p = H._Proc(fake)
    assert p.cpu_pct(100.0) is None                 # no rate from one reading
    assert p.cpu_pct(100.0 + H.PROC_CPU_EVERY_S / 2) is None and fake.reads == 1
    assert p.cpu_pct(101.0) == pytest.approx(50.0)  # 0.5 s of CPU in 1 s
    assert p.cpu_pct(101.5) == pytest.approx(50.0) and fake.reads == 2   # held, not read


def test_a_worker_that_ends_makes_the_next_read_rescan(monkeypatch):
    monkeypatch.setattr(H, "PROC_CPU_EVERY_S", 0.1)
    with ProcTree(mains=1, workers=3) as tree:
        main = tree.mains[0]
        hs = H.HostSource()
        assert hs.read({0: (main,)}).job_on(0).loader_workers == 3
        os.kill(tree.workers[main][0], signal.SIGKILL)
        time.sleep(0.3)                              # reaped by the main (SIGCHLD ignored)
        hs.read({0: (main,)})                        # reading the gone worker fails
        assert hs.read({0: (main,)}).job_on(0).loader_workers == 2
