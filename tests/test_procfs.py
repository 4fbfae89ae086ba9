"""gpumon.procfs, the /proc reader of the job's processes: against psutil's values on live
processes, and processes that vanish, are zombies, reuse a PID, or are hidden."""
import os
import subprocess
import sys
import time
import types

import psutil
import pytest

from gpumon import host as H
from gpumon import procfs
from bench.proctree import ProcTree

pytestmark = pytest.mark.skipif(not procfs.available(), reason="no Linux /proc")


@pytest.fixture
def sleeper():
    # Asleep once it says so: its counters then stand still (a fixed delay was not always
    # past its start-up on a loaded machine: its RSS still grew between the two reads).
    p = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(60)"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    p.stdout.readline()
    time.sleep(0.05)
    yield p
    p.kill()
    p.wait()
    p.stdout.close()


def _same_as_psutil(pid: int) -> None:
    st = procfs.read_stat(pid)
    ps = psutil.Process(pid)
    t = ps.cpu_times()
    assert st.ppid == ps.ppid()
    assert st.cpu_s == pytest.approx(t.user + t.system, abs=0.011)   # one clock tick
    assert st.rss_mib == pytest.approx(ps.memory_info().rss / 1048576.0, abs=0.5)
    start = psutil.boot_time() + st.start_ticks / procfs.CLK_TCK
    assert start == pytest.approx(ps.create_time(), abs=0.05)


def test_stat_of_live_processes_matches_psutil(sleeper):
    _same_as_psutil(sleeper.pid)       # asleep: every counter still
    with ProcTree(mains=1, workers=2) as tree:
        for pid in tree.all_pids:
            _same_as_psutil(pid)
    st = procfs.read_stat(os.getpid())  # this busy process: CPU only moves forward
    t = psutil.Process().cpu_times()
    assert st.cpu_s <= t.user + t.system + 0.011


def test_threads_match_psutil():
    ours = procfs.thread_cpu(os.getpid())
    theirs = {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}
    assert set(ours) == set(theirs)
    for tid, cpu in ours.items():
        assert cpu == pytest.approx(theirs[tid], abs=0.05)


def test_a_name_with_spaces_and_parentheses():
    code = ("import time; open('/proc/self/comm', 'w').write('a) 1 (2'); print(flush=True); "
            "time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        p.stdout.readline()
        assert psutil.Process(p.pid).name() == "a) 1 (2"
        _same_as_psutil(p.pid)
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


def test_vanished_and_zombie_processes_read_as_gone():
    p = subprocess.Popen(["true"])
    time.sleep(0.3)
    assert procfs.read_stat(p.pid) is None           # ended, not reaped: a zombie
    p.wait()
    assert procfs.read_stat(p.pid) is None           # reaped: no /proc entry
    assert procfs.thread_cpu(p.pid) is None


def test_a_reused_pid_reads_as_gone(sleeper):
    p = H._Proc(psutil.Process(sleeper.pid))
    assert p.cpu_pct(10.0) is None and p.start_ticks is not None
    p.start_ticks += 1                               # as if another process had this PID
    with pytest.raises(psutil.NoSuchProcess):
        p.cpu_pct(12.0)


def test_a_hidden_process_has_no_rate_and_no_traceback(monkeypatch, sleeper):
    def hidden(pid):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(H, "_read_stat", hidden)
    host = H.HostSource()
    for _ in range(2):
        job = host.read({0: (sleeper.pid,)}).job_on(0)
        assert job.main_pid == sleeper.pid and job.main_cpu_pct is None


def test_main_every_period_workers_every_two(monkeypatch):
    reads = []
    real = H._read_stat
    monkeypatch.setattr(H, "_read_stat", lambda pid: reads.append(pid) or real(pid))
    clock = [1000.0]
    monkeypatch.setattr(H, "time", types.SimpleNamespace(monotonic=lambda: clock[0],
                                                         time=time.time))
    with ProcTree(mains=1, workers=3) as tree:
        main = tree.mains[0]
        host = H.HostSource()
        for _ in range(41):                           # 4 s at 0.1 s
            s = host.read({0: (main,)})
            clock[0] += 0.1
        assert reads.count(main) == 5                 # at 0, 1, 2, 3, 4 s
        for w in tree.workers[main]:
            assert reads.count(w) == 3                # at 0, 2, 4 s
        job = s.job_on(0)
        assert job.loader_workers == 3 and job.loader_cpu_pct is not None


def test_disk_counters_match_psutil():
    c = psutil.disk_io_counters()
    if c is None:
        pytest.skip("no disks")
    ours = procfs.DiskCounters().read()
    assert ours[0] >= c.read_bytes and ours[1] >= c.write_bytes
    assert ours[0] - c.read_bytes < 64 << 20 and ours[1] - c.write_bytes < 64 << 20


def test_disk_counters_skip_partitions(tmp_path):
    stats = tmp_path / "diskstats"
    stats.write_text(" 8 0 sda 10 0 100 5 20 0 200 7 0 0 0\n"
                     " 8 1 sda1 10 0 100 5 20 0 200 7 0 0 0\n"
                     " 259 0 nvme0n1 1 0 8 1 2 0 16 1 0 0 0\n"
                     " short line\n")
    block = tmp_path / "block"
    (block / "sda").mkdir(parents=True)
    (block / "nvme0n1").mkdir()
    assert procfs.DiskCounters(str(stats), str(block)).read() == (108 * 512, 216 * 512)
    assert procfs.DiskCounters(str(tmp_path / "none"), str(block)).read() is None
