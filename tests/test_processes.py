"""The process table (gpumon/ui/processes.py) and `gpumon status`: pure rows and layout, golden
renders at 80 and 120 columns, and both over the fake NVML library with a real process tree."""
import getpass
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from gpumon.samples import GpuSample, HostSample, ProcSample
from gpumon.ui.processes import (NOT_ON_HOST, ProcessTable, fmt_mib, fmt_runtime, proc_rows,
                                 table_lines, text_lines)
from proc_util import own_session

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUMON_UPDATE_GOLDEN") == "1"
NOW = 1_800_000_000.0


def _host():
    procs = (
        ProcSample(4100, 4000, "python", "main", 97.0, (0, 1), user="alice",
                   cmdline="python train.py --epochs 90 --batch-size 256 --data /datasets/in1k",
                   rss_mib=5321.3, started=NOW - 3725),
        ProcSample(5001, 4100, "pt_data_worker", "worker", 88.0, (), user="alice",
                   cmdline="python train.py --epochs 90", rss_mib=812.0, started=NOW - 61),
        ProcSample(5002, 5001, "pt_data_worker", "worker", 45.5, (), user="alice",
                   cmdline="python\ntrain.py", rss_mib=790.0, started=NOW - 61),
        ProcSample(4200, 1, "python3", "main", None, (2,), user=None, cmdline=None,
                   rss_mib=None, started=None),
    )
    return HostSample(time=NOW, procs=procs, unmapped_pids=(777,))


def _samples():
    return [GpuSample(time=NOW, gpu=0, pids=(777, 4100), proc_mem=((777, 512.0), (4100, 30000.0)),
                      proc_util=((4100, 93.0),)),
            GpuSample(time=NOW, gpu=1, pids=(4100,), proc_mem=((4100, 29000.0),),
                      proc_util=((4100, 91.0),)),
            GpuSample(time=NOW, gpu=2, pids=(4200,), proc_mem=())]


def test_rows_group_workers_under_their_main_and_join_nvml_with_the_host():
    rows = proc_rows(_host(), _samples(), NOW)
    assert [(r.pid, r.role, r.job) for r in rows] == [
        (4100, "main", 4100), (5001, "worker", 4100), (5002, "worker", 4100),   # nested worker
        (4200, "main", 4200), (777, "gpu", 777)]
    main = rows[0]
    assert main.gpus == (0, 1) and main.gpu_mem_mib == 59000.0 and main.sm_pct == 92.0
    assert main.user == "alice" and main.runtime_s == 3725 and main.rss_mib == 5321.3
    other = rows[3]            # nothing known is shown as missing, never 0
    assert other.gpu_mem_mib is None and other.sm_pct is None and other.cpu_pct is None
    assert other.command == "python3" and other.runtime_s is None
    assert rows[4].command == NOT_ON_HOST and rows[4].gpu_mem_mib == 512.0


def test_formats():
    assert fmt_runtime(59) == "00:59" and fmt_runtime(3725) == "1:02:05"
    assert fmt_runtime(2 * 86400 + 61) == "2-00:01:01" and fmt_runtime(None) == "-"
    assert fmt_mib(812.4) == "812MiB" and fmt_mib(30000) == "29.3GiB" and fmt_mib(None) == "-"


def test_table_cells_missing_values_and_a_cut_command():
    lines = text_lines(proc_rows(_host(), _samples(), NOW), 80)
    assert lines[0].split() == ["PID", "USER", "GPU", "GPU-MEM", "SM", "CPU", "HOST-MEM", "TIME",
                                "COMMAND"]
    main = lines[1].split()
    assert main[:8] == ["4100", "alice", "0,1", "57.6GiB", "92%", "97%", "5321MiB", "1:02:05"]
    assert lines[1].endswith("…") and len(lines[1]) == 80
    assert "└ python train.py" in lines[2]
    assert "python train.py" in lines[3] and "\n" not in lines[3]     # a newline in argv
    assert lines[4].split() == ["4200", "-", "2", "-", "-", "-", "-", "-", "python3"]
    assert all(len(x) <= 80 for x in lines)
    narrow = text_lines(proc_rows(_host(), _samples(), NOW), 60)
    assert "USER" not in narrow[0] and all(len(x) <= 60 for x in narrow)


def test_short_of_rows_workers_fold_into_one_line_then_the_rest_is_counted():
    rows = proc_rows(_host(), _samples(), NOW)
    five = text_lines(rows, 120, max_rows=5)
    assert len(five) == 5 and "└ 2 loader workers" in five[2]
    assert five[2].split()[:2] == ["134%", "1602MiB"]        # their CPU and RSS, summed
    three = text_lines(rows, 120, max_rows=3)
    assert len(three) == 3 and three[2].strip() == "+4 more processes"
    assert table_lines(rows, 120, max_rows=1) == []


def test_ascii_console_gets_no_unicode():
    lines = text_lines(proc_rows(_host(), _samples(), NOW), 80, ascii=True)
    assert all(ord(c) < 128 for line in lines for c in line)
    assert "`- python" in lines[2] and lines[1].endswith("~")


@pytest.mark.parametrize("width", [80, 120])
def test_golden_process_table(width):
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, legacy_windows=False)
    console.print(ProcessTable(proc_rows(_host(), _samples(), NOW)))
    got = buf.getvalue()
    assert all(len(line) <= width for line in got.splitlines())
    path = GOLDEN / f"processes_{width}.txt"
    if UPDATE or not path.exists():
        path.write_text(got)
    assert got == path.read_text(), (f"{path.name} differs; if the change is intended, "
                                     "regenerate with GPUMON_UPDATE_GOLDEN=1")


# -- over the fake NVML library, with a real process tree ------------------------------------
TREE = r"""
import multiprocessing as mp, sys, time
def worker():
    time.sleep(120)
if __name__ == "__main__":
    kids = [mp.Process(target=worker, daemon=True) for _ in range(2)]
    for k in kids: k.start()
    print(" ".join(str(k.pid) for k in kids), flush=True)
    time.sleep(120)
"""


@pytest.fixture
def job(tmp_path):
    """A main process (tree.py --epochs 3) with two loader workers, and a second GPU user."""
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    with own_session([sys.executable, str(script), "--epochs", "3"]) as main, \
            own_session([sys.executable, "-c", "import time; print(1, flush=True); "
                         "time.sleep(120)"]) as other:
        workers = [int(x) for x in main.stdout.readline().split()]
        other.stdout.readline()
        yield main.pid, workers, other.pid


def _status(gpumon_cmd, env, *extra):
    return subprocess.run(gpumon_cmd + ["status", "--sample", "1", *extra], capture_output=True,
                          text=True, env=env, timeout=60)


def test_status_json_over_fake_nvml_with_a_real_tree(gpumon_cmd, fake_nvml_env, job):
    main, workers, other = job
    env = fake_nvml_env(gpus=2, pids={0: [main], 1: [main, other]},
                        proc_shares={main: 3, other: 1})
    r = _status(gpumon_cmd, env, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "nvml" and doc["hostname"] and doc["query_time"][10] == "T"
    g0, g1 = doc["gpus"]
    assert g0["uuid"].startswith("GPU-") and g0["memory.total"] > g0["memory.used"] > 0
    for key in ("utilization.gpu", "power.draw", "temperature.gpu"):
        assert isinstance(g0[key], int), key
    (p0,) = g0["processes"]
    assert p0["pid"] == main and p0["username"] == getpass.getuser() and p0["role"] == "main"
    assert "tree.py --epochs 3" in p0["full_command"] and p0["command"].startswith("python")
    assert p0["gpu_memory_usage"] == g0["memory.used"]              # alone on GPU 0
    assert p0["sm_utilization"] is not None                         # NVML gives it, even alone
    assert p0["cpu_memory_usage"] > 0 and p0["runtime_s"] >= 0 and p0["gpus"] == [0, 1]
    assert sorted(w["pid"] for w in p0["loader_workers"]) == sorted(workers)
    assert all(w["role"] == "worker" and "tree.py" in w["full_command"]
               for w in p0["loader_workers"])
    mine = {p["pid"]: p for p in g1["processes"]}
    assert set(mine) == {main, other}
    # Per-process memory and SM utilization on GPU 1, split 3:1 by the fake.
    assert abs(mine[main]["gpu_memory_usage"] - 3 * mine[other]["gpu_memory_usage"]) <= 3
    assert mine[main]["sm_utilization"] is not None
    assert mine[main]["sm_utilization"] >= mine[other]["sm_utilization"]
    assert "verdict" in doc and ("rule" in doc["verdict"] if doc["verdict"] else
                                 doc["verdict_note"].startswith("no verdict yet"))


def test_status_text_shows_the_process_table_over_fake_nvml(gpumon_cmd, fake_nvml_env, job):
    main, workers, other = job
    env = fake_nvml_env(gpus=2, pids={0: [main], 1: [main, other]})
    r = _status(gpumon_cmd, env, "--width", "240")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("gpumon ") and "(local)" in lines[0]
    assert lines[1].startswith("[0] ") and " MiB" in lines[1] and " W" in lines[1]
    head = next(i for i, x in enumerate(lines) if x.split()[:2] == ["PID", "USER"])
    table = lines[head + 1:]
    assert table[0].split()[:3] == [str(main), getpass.getuser(), "0,1"]
    assert "tree.py --epochs 3" in table[0]
    assert {int(x.split()[0]) for x in table[1:3]} == set(workers)
    assert all("└ " in x for x in table[1:3])
    assert table[3].split()[:3] == [str(other), getpass.getuser(), "1"]
    assert all(len(x) <= 240 for x in lines)


def test_status_sim_gives_a_verdict_or_says_there_is_none(gpumon_cmd, clean_env):
    r = subprocess.run(gpumon_cmd + ["status", "--sim", "busy:2", "--json"],
                       capture_output=True, text=True, env=clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "sim" and len(doc["gpus"]) == 2
    assert doc["verdict"]["verdict"] == "busy" and doc["verdict"]["rule"] == "busy"
    assert doc["verdict"]["because"] and doc["verdict_note"] == ""
    assert doc["gpus"][0]["processes"][0]["role"] == "main"
    r = subprocess.run(gpumon_cmd + ["status", "--sim", "busy:1", "--sample", "0"],
                       capture_output=True, text=True, env=clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "SIMULATED busy:1" in r.stdout and "no verdict: --sample 0" in r.stdout
    assert "[0] " in r.stdout and " MiB" in r.stdout      # the current readings, even so


@pytest.mark.parametrize("args,want", [
    (["--sample", "-1"], "--sample"), (["--sample", "61"], "60 seconds or less"),
    (["--width", "10"], "--width must be 40 or more")])
def test_status_bad_options_one_line(gpumon_cmd, clean_env, args, want):
    r = subprocess.run(gpumon_cmd + ["status", "--sim", "busy:1", *args], capture_output=True,
                       text=True, env=clean_env, timeout=60)
    assert r.returncode == 2 and want in r.stderr and "Traceback" not in r.stderr


def test_status_without_a_driver_says_so(gpumon_cmd, fake_nvml_env):
    r = subprocess.run(gpumon_cmd + ["status"], capture_output=True, text=True, timeout=60,
                       env=fake_nvml_env(init_error="driver_not_loaded"))
    assert r.returncode != 0 and "--sim" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_fake_rejects_a_bad_share_spec(gpumon_cmd, fake_nvml_env):
    env = fake_nvml_env(gpus=1)
    env["FAKE_NVML_PROC_SHARES"] = "12:x"
    r = subprocess.run(gpumon_cmd + ["status", "--sample", "0"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode != 0 and "FAKE_NVML_PROC_SHARES" in r.stderr
    assert "Traceback" not in r.stderr


def test_host_reads_user_command_line_rss_and_start(job):
    from gpumon.host import HostSource
    main, workers, _ = job
    s = HostSource().read({0: (main,)})
    by = {p.pid: p for p in s.procs}
    assert set(workers) <= set(by)
    me = psutil.Process(main)
    assert by[main].user == getpass.getuser() and "tree.py --epochs 3" in by[main].cmdline
    assert by[main].rss_mib and by[main].rss_mib > 1 and by[main].started == me.create_time()


def test_screen_shows_the_table_in_the_rows_left():
    from gpumon.ui.screen import layout
    from ui_fixtures import dashboard
    v = dashboard(1).view()
    lines = [x.text() for x in layout(v, 80, 30)]
    assert len(lines) <= 30
    head = next(i for i, x in enumerate(lines) if x.split()[:2] == ["PID", "USER"])
    assert lines[head + 1].split()[:4] == ["4100", "alice", "0", "39.5GiB"]
    assert sum("└ python train.py" in x for x in lines[head + 2:]) == 4
    for height in range(12, 40):        # never more rows than the screen has (when it fits)
        got = layout(v, 120, height)
        assert len(got) <= max(height, 15), height
    assert not any("PID" in x.text() for x in layout(v, 80, 14))
