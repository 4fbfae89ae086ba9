"""NvmlSource over the fake NVML library, through the real nvidia-ml-py ctypes path.

Each case runs gpumon as a user would (a subprocess with LD_LIBRARY_PATH pointing at
build/fakenvml), so nvidia-ml-py loads the fake libnvidia-ml.so.1 exactly as it loads the real one.
"""
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from fakenvml_env import rows_by_gpu

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "build" / "fakenvml"
pytestmark = pytest.mark.skipif(not (FAKE / "libnvidia-ml.so.1").exists(),
                                reason="fake NVML library not built (make fakenvml)")


def fake_env(clean_env, gpus=1, **knobs):
    env = dict(clean_env)
    env["LD_LIBRARY_PATH"] = str(FAKE)
    env["FAKE_NVML_GPUS"] = str(gpus)
    for k, v in knobs.items():
        env[f"FAKE_NVML_{k.upper()}"] = str(v)
    return env


def gpumon(args, env, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "gpumon"] + args, env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)



def assert_square_wave(rows):
    """0.4 s at 100%, 0.6 s idle: every whole second shows a burst and an idle reading."""
    per_second = defaultdict(list)
    for r in rows:
        per_second[int(float(r["time"]))].append(float(r["util_gpu_pct"]))
    full = sorted(per_second)[1:-1]          # whole seconds only
    assert len(full) >= 3
    for sec in full:
        vals = per_second[sec]
        assert max(vals) >= 90 and min(vals) <= 10, (sec, vals)
    # Bursts sit in the first 0.4 s of each second (+ one driver period of smear).
    for r in rows:
        t, u = float(r["time"]), float(r["util_gpu_pct"])
        if u >= 90:
            assert (t % 1.0) <= 0.4 + 1 / 6 + 0.05, (t, u)


@pytest.mark.parametrize("interval", ["0.1", "1"])
def test_eight_gpus_square_wave_sample_by_sample(clean_env, tmp_path, interval):
    out = tmp_path / "run.csv"
    t0 = time.time()
    r = gpumon(["log", "--interval", interval, "--duration", "6", "-o", str(out)],
               fake_env(clean_env, gpus=8))
    t1 = time.time()
    assert r.returncode == 0, r.stderr
    by = rows_by_gpu(out)
    assert sorted(by) == list(range(8))
    for gpu, rows in by.items():
        times = [float(x["time"]) for x in rows]
        assert times == sorted(times), "time went back"
        assert t0 - 20 <= times[0] and times[-1] <= t1 + 1, "driver clock not mapped to wall clock"
        assert {x["source"] for x in rows} == {"nvml"}
        # about 3 driver samples in each 0.4 s burst + idle readings: several rows a second
        assert len(rows) >= 6 * 2.5, len(rows)
        assert_square_wave(rows)


def test_contract_every_field_typed_or_missing(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--interval", "0.5", "--duration", "2", "-o", str(out)],
               fake_env(clean_env, gpus=2))
    assert r.returncode == 0, r.stderr
    for rows in rows_by_gpu(out).values():
        for x in rows:
            for col in ("util_gpu_pct", "util_mem_pct"):
                assert 0 <= float(x[col]) <= 100
            assert float(x["power_w"]) <= float(x["power_limit_w"])
            assert float(x["sm_clock_mhz"]) <= float(x["sm_clock_max_mhz"])
            assert float(x["mem_used_mib"]) <= float(x["mem_total_mib"])
            int(x["clock_events"])


def test_unsupported_metrics_are_missing_not_zero(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    env = fake_env(clean_env, gpus=2, unsupported="power,temp")
    r = gpumon(["log", "--duration", "2", "-o", str(out)], env)
    assert r.returncode == 0, r.stderr
    rows = [x for rs in rows_by_gpu(out).values() for x in rs]
    assert rows and all(x["power_w"] == "" and x["temp_c"] == "" for x in rows)
    assert all(x["util_gpu_pct"] != "" and x["sm_clock_mhz"] != "" for x in rows)
    r = gpumon(["list", "--json"], env)
    assert r.returncode == 0, r.stderr
    import json
    gpus = json.loads(r.stdout)["gpus"]
    assert gpus[0]["supported"]["power"] is False and gpus[0]["supported"]["util"] is True


def test_without_driver_samples_the_rates_are_logged(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--interval", "0.5", "--duration", "3", "-o", str(out)],
               fake_env(clean_env, unsupported="samples"))
    assert r.returncode == 0, r.stderr
    rows = rows_by_gpu(out)[0]
    assert len(rows) >= 5 and all(x["util_gpu_pct"] != "" for x in rows)


def test_lost_gpu_others_go_on(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--interval", "0.5", "--duration", "4", "-o", str(out)],
               fake_env(clean_env, gpus=2, lost="1@1.5"))
    assert r.returncode == 0, r.stderr
    assert "GPU 1 is lost" in r.stderr and "Traceback" not in r.stderr
    by = rows_by_gpu(out)
    last0 = float(by[0][-1]["time"])
    last1 = float(by[1][-1]["time"])
    assert last0 - last1 >= 1.5, (last0, last1)


def test_driver_not_loaded_is_one_line(clean_env, tmp_path):
    r = gpumon(["log", "-o", str(tmp_path / "x.csv")],
               fake_env(clean_env, init_error="driver_not_loaded"))
    assert r.returncode == 9        # driver not loaded, as nvidia-smi
    assert r.stderr.strip().count("\n") == 0 and "driver is not loaded" in r.stderr


def test_list_shows_gpus_versions_and_support(clean_env):
    r = gpumon(["list", "--no-color"], fake_env(clean_env, gpus=8))
    assert r.returncode == 0, r.stderr
    for i in range(8):
        assert f"GPU {i}" in r.stdout
    assert "driver" in r.stdout and "NVML" in r.stdout and "supported metrics" in r.stdout
    assert "CUDA_VISIBLE_DEVICES" in r.stdout


def test_gpus_selection_by_index_and_uuid(clean_env, tmp_path):
    env = fake_env(clean_env, gpus=4)
    import json
    uuid2 = json.loads(gpumon(["list", "--json"], env).stdout)["gpus"][2]["uuid"]
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--gpus", f"0,{uuid2}", "--duration", "1.5", "-o", str(out)], env)
    assert r.returncode == 0, r.stderr
    assert sorted(rows_by_gpu(out)) == [0, 2]
    r = gpumon(["log", "--gpus", "7", "--duration", "1", "-o", str(tmp_path / "y.csv")], env)
    assert r.returncode == 2 and "no GPU '7'" in r.stderr


def test_sigterm_closes_the_log_cleanly(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    p = subprocess.Popen([sys.executable, "-m", "gpumon", "log", "--interval", "0.2", "-o",
                          str(out)], env=fake_env(clean_env, gpus=2), stderr=subprocess.PIPE,
                         text=True)
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "Traceback" not in err
    rows = rows_by_gpu(out)
    assert len(rows[0]) >= 5 and len(rows[1]) >= 5
    lines = out.read_text().splitlines()
    assert all(line.count(",") == lines[0].count(",") for line in lines)  # no torn last row


def test_job_processes_attributed_from_nvml_pids(clean_env, tmp_path):
    child = subprocess.Popen([sys.executable, "-c",
                              "import multiprocessing as mp, time\n"
                              "if __name__ == '__main__':\n"
                              "    ps=[mp.Process(target=time.sleep, args=(30,)) for _ in range(3)]\n"
                              "    [p.start() for p in ps]\n    time.sleep(30)\n"])
    try:
        time.sleep(1.0)
        out = tmp_path / "run.csv"
        r = gpumon(["log", "--duration", "3", "-o", str(out)],
                   fake_env(clean_env, gpus=1, pids=f"0:{child.pid}"))
        assert r.returncode == 0, r.stderr
        last = rows_by_gpu(out)[0][-1]
        assert last["pids"] == str(child.pid) and last["main_pid"] == str(child.pid)
        assert int(last["loader_workers"]) >= 3
    finally:
        child.kill()
        child.wait()


def test_mig_gpu_is_listed_and_logged_with_what_it_has(clean_env, tmp_path):
    import json
    env = fake_env(clean_env, gpus=2, mig=1)
    r = gpumon(["list", "--json"], env)
    assert r.returncode == 0, r.stderr
    g0, g1 = json.loads(r.stdout)["gpus"]
    assert g0["mig"] is True and g0["supported"]["util"] is False and g1["mig"] is False
    r = gpumon(["list", "--no-color"], env)
    assert "[MIG]" in r.stdout
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--interval", "0.5", "--duration", "2", "-o", str(out)], env)
    assert r.returncode == 0, r.stderr
    by = rows_by_gpu(out)
    assert by[0] and all(x["util_gpu_pct"] == "" and x["mem_used_mib"] != "" for x in by[0])
    assert all(x["util_gpu_pct"] != "" for x in by[1])


def test_per_process_utilization_where_processes_share_a_gpu(clean_env):
    a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        code = ("import time\nfrom gpumon.nvml import NvmlSource\n"
                "s = NvmlSource(process_util=True).open()\ntime.sleep(0.5)\nx = s.read()\n"
                "time.sleep(1.1)\n"
                "x = s.read()\nprint(sorted(dict(x[-1].proc_util)), x[-1].pids)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=fake_env(clean_env, pids=f"0:{a.pid},{b.pid}"), timeout=30)
        assert r.returncode == 0, r.stderr
        want = sorted([a.pid, b.pid])
        assert r.stdout.strip() == f"{want} {tuple(want)}"
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_pids_not_on_this_host_are_said_once(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--interval", "0.5", "--duration", "2", "-o", str(out)],
               fake_env(clean_env, pids="0:4194000"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("not visible on this host") == 1
    assert rows_by_gpu(out)[0][-1]["main_pid"] == ""


# -- lost GPUs, zero GPUs, NVML that cannot start (issue 20) ---------------------------------

def _lost_lines(stderr, gpu):
    return [x for x in stderr.splitlines() if f"GPU {gpu} is lost" in x]


@pytest.mark.parametrize("when", ["0.001", "0"])
def test_a_gpu_lost_while_listing_is_one_line_and_the_others_are_listed(clean_env, when):
    """Lost between nvmlInit and the first listing (identify, PCI info, probe): one stderr line,
    the others listed, exit 0."""
    import json
    env = fake_env(clean_env, gpus=8, lost=f"3@{when}")
    r = gpumon(["list", "--no-color"], env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == _lost_lines(r.stderr, 3), r.stderr
    assert len(_lost_lines(r.stderr, 3)) == 1 and "GPU 3 " not in r.stdout
    assert all(f"GPU {i}" in r.stdout for i in (0, 1, 2, 4, 5, 6, 7))
    r = gpumon(["list", "--json"], env)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["lost"] == [3]
    assert [g["index"] for g in doc["gpus"]] == [0, 1, 2, 4, 5, 6, 7]


@pytest.mark.parametrize("cmd", [["log", "-o", "{tmp}/run.csv"], ["watch", "--plain"],
                                 ["export", "--port", "0"]])
def test_a_gpu_lost_while_starting_is_one_line_and_the_others_go_on(clean_env, tmp_path, cmd):
    """Each NVML call takes 1 ms, so GPU 7 is lost while gpumon opens and lists the GPUs."""
    env = fake_env(clean_env, gpus=8, call_us=1000, lost="7@0.05")
    args = [a.format(tmp=tmp_path) for a in cmd] + ["--interval", "0.5", "--duration", "2"]
    r = gpumon(args, env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert len(_lost_lines(r.stderr, 7)) == 1, r.stderr
    if cmd[0] == "log":
        by = rows_by_gpu(tmp_path / "run.csv")
        assert sorted(by) == list(range(7)) and all(len(by[g]) >= 2 for g in by)
    if cmd[0] == "watch":
        last = [x for x in r.stdout.splitlines() if x.count("|") >= 8][-1].split("|")
        assert last[8].strip() == "lost" and last[1].strip() != "lost", last


def test_every_gpu_lost_stops_the_log_with_one_line(clean_env, tmp_path):
    """Nothing is left to log: one line, exit 15, the rows written before are kept whole."""
    out = tmp_path / "run.csv"
    t0 = time.monotonic()
    r = gpumon(["log", "--interval", "0.2", "--duration", "15", "-o", str(out)],
               fake_env(clean_env, gpus=2, lost="0@1,1@2"))
    assert r.returncode == 15 and "Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 12
    lines = r.stderr.strip().splitlines()
    assert len(_lost_lines(r.stderr, 0)) == 1 and "logging the others" in lines[-2]
    assert lines[-1].startswith("gpumon: every GPU is lost") and "rows" in lines[-1], lines
    by = rows_by_gpu(out)
    assert len(by[0]) >= 3 and len(by[1]) > len(by[0])
    text = out.read_text().splitlines()
    assert all(x.count(",") == text[0].count(",") for x in text)


@pytest.mark.parametrize("cmd", [["list"], ["log", "-o", "{tmp}/run.csv"], ["watch"],
                                 ["export", "--port", "0"]])
def test_zero_gpus_is_one_line_and_exit_6(clean_env, tmp_path, cmd):
    args = [a.format(tmp=tmp_path) for a in cmd] + (["--duration", "1"] if len(cmd) > 1 else [])
    r = gpumon(args, fake_env(clean_env, gpus=0))
    assert r.returncode == 6, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines() == ["gpumon: no NVIDIA GPU found (NVML lists none)"]
    assert not (tmp_path / "run.csv").exists()


@pytest.mark.parametrize("error, says, code", [
    ("no_permission", "NVML: insufficient permissions (is /dev/nvidia* readable by this user?", 9),
    ("lib_rm_version_mismatch", "NVML: driver/library version mismatch", 9),
    ("driver_not_loaded", "no NVIDIA driver: the NVIDIA kernel driver is not loaded", 9),
    ("library_not_found", "no NVIDIA driver: libnvidia-ml.so.1 not found", 12),
    ("unknown", "NVML: nvmlInit failed: Unknown Error (NVML error 999)", 9),
])
@pytest.mark.parametrize("cmd", [["list"], ["log", "-o", "{tmp}/run.csv"]])
def test_nvml_that_cannot_start_names_the_reason(clean_env, tmp_path, error, says, code, cmd):
    r = gpumon([a.format(tmp=tmp_path) for a in cmd], fake_env(clean_env, init_error=error))
    assert r.returncode == code, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("gpumon: " + says), line
    # (a hint to --sim where there is one: `gpumon list` shows real GPUs only)
    assert ("--sim" in line) == (line.startswith("gpumon: no NVIDIA driver") and cmd != ["list"])
