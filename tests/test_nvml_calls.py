"""How many NVML calls NvmlSource makes, counted by the fake library (FAKE_NVML_CALL_LOG).

One GetSamples call per GPU per tick at most and no more often than the driver adds samples,
no size query once an array is known, the process list on its own slower cadence, per-process
utilization only where asked for; the direct calls (gpumon.nvml_buffers) give the same samples
as nvidia-ml-py's wrappers and fall back to them when they fail. Each case runs a snippet in a
subprocess whose environment loads the fake library as a driver would be loaded.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import fakenvml_env

SKIP = fakenvml_env.skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason="fake NVML library: %s" % SKIP)

PRELUDE = """\
import json, os, sys, time
import pynvml as N
from gpumon import nvml, nvml_buffers
from gpumon.nvml import NvmlSource
LOG = os.environ["FAKE_NVML_CALL_LOG"]
def counts():
    N.nvmlInit(); N.nvmlShutdown()         # every nvmlShutdown writes the counts
    with open(LOG) as f:
        return {k: int(v) for k, v in (ln.split() for ln in f if not ln.startswith("#"))}
def since(before):
    now = counts()
    return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}
def out(x):
    print(json.dumps(x))
"""


def run_py(code: str, tmp_path, timeout: float = 60, **settings):
    env = fakenvml_env.env(call_log=tmp_path / "calls.txt", **settings)
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_call_log_counts_each_function_once_size_queries_apart(tmp_path):
    r = run_py("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        c0 = counts()
        for _ in range(3):
            N.nvmlDeviceGetPowerUsage(h)
        N.nvmlDeviceGetCount()                  # pynvml: nvmlDeviceGetCount_v2
        N.nvmlLib.nvmlDeviceGetCount(N.byref(N.c_uint()))   # legacy: hands over to _v2
        N.nvmlDeviceGetComputeRunningProcesses(h)           # a size query, then the fill
        try:
            N.nvmlDeviceGetAccountingMode(h)    # a stub: NOT_SUPPORTED
        except N.NVMLError:
            pass
        out(since(c0))
    """, tmp_path, pids={0: [1]})
    assert r["nvmlDeviceGetPowerUsage"] == 3
    assert r["nvmlDeviceGetCount"] == 1 and r["nvmlDeviceGetCount_v2"] == 1
    assert r["nvmlDeviceGetComputeRunningProcesses_v3"] == 2
    assert r["nvmlDeviceGetComputeRunningProcesses_v3(NULL)"] == 1
    assert r["nvmlDeviceGetAccountingMode"] == 1
    # the counting snippet's own nvmlInit/nvmlShutdown pair
    assert r["nvmlInitWithFlags"] == 1 and r["nvmlShutdown"] == 1


TICKS = """
    s = NvmlSource(**READS).open()
    s.read(); time.sleep(0.4); s.read()             # arrays sized, first process list read
    c0 = counts()
    t0, ticks, rows, gpm = time.monotonic(), 0, 0, []
    while time.monotonic() - t0 < SECONDS:
        time.sleep(INTERVAL)
        got = s.read()
        rows += len(got)
        gpm += [r.sm_active_ratio is not None for r in got if r.gpu == 0]
        ticks += 1
    elapsed = time.monotonic() - t0
    out(dict(calls=since(c0), ticks=ticks, rows=rows, elapsed=elapsed, gpm=gpm,
             direct=[q.direct for g in s.gpus for q in g.lists]))
"""


def ticks(tmp_path, reads="{}", seconds=2.0, interval=0.1, gpus=2, **settings):
    code = f"READS, SECONDS, INTERVAL = {reads}, {seconds}, {interval}\n" + textwrap.dedent(TICKS)
    return run_py(code, tmp_path, gpus=gpus, **settings)


def test_one_samples_call_per_gpu_per_tick_no_more_often_than_the_driver(tmp_path):
    r = ticks(tmp_path, seconds=2.0, interval=0.1, gpus=2, pids={"*": [1]})
    calls, gpus = r["calls"], 2
    assert all(r["direct"])
    assert r["rows"] > 0
    asks = calls.get("nvmlDeviceGetSamples", 0)
    assert asks <= r["ticks"] * gpus
    # the driver adds one sample a 1/6 s period: at 10 ticks a second, about 6 asks, not 10
    assert asks <= gpus * (r["elapsed"] * 6 + 2), (asks, r)
    assert "nvmlDeviceGetSamples(NULL)" not in calls       # no size query: the array is kept
    assert "nvmlDeviceGetComputeRunningProcesses_v3(NULL)" not in calls
    # the process list on its own cadence (PROCESS_EVERY_S = 4 s): not in these 2 s
    assert calls.get("nvmlDeviceGetComputeRunningProcesses_v3", 0) == 0
    assert "nvmlDeviceGetProcessUtilization" not in calls   # nobody asked for it
    # GPM at most once a second (GPM_EVERY_S) however fast the polls; the rows between carry
    # the latest read's values: once SM activity shows, no row of the GPU lacks it
    assert 1 * gpus <= calls["nvmlGpmSampleGet"] <= gpus * (r["elapsed"] / 0.95 + 1), calls
    assert calls["nvmlGpmMetricsGet"] <= calls["nvmlGpmSampleGet"]
    gpm = r["gpm"]
    assert any(gpm) and all(gpm[gpm.index(True):]), gpm


def test_at_one_second_every_query_once_per_gpu_per_tick(tmp_path):
    r = ticks(tmp_path, seconds=3.0, interval=1.0, gpus=2, pids={"*": [1]})
    calls, gpus = r["calls"], 2
    for fn in ("nvmlDeviceGetSamples", "nvmlDeviceGetUtilizationRates",
               "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage",
               "nvmlGpmSampleGet", "nvmlGpmMetricsGet"):   # GPM: one sample, one metrics call
        assert calls[fn] == r["ticks"] * gpus, (fn, calls, r["ticks"])
    assert calls.get("nvmlDeviceGetComputeRunningProcesses_v3", 0) <= gpus   # one in 4 s
    assert not any(k.endswith("(NULL)") for k in calls), calls
    assert "nvmlGpmQueryDeviceSupport" not in calls and "nvmlGpmSampleAlloc" not in calls


def test_process_list_and_utilization_where_asked_for(tmp_path):
    r = ticks(tmp_path, reads="dict(process_util=True, process_every_s=1.0)", seconds=3.0,
              interval=0.5, gpus=1, pids={0: [1]})
    calls = r["calls"]
    assert 2 <= calls["nvmlDeviceGetComputeRunningProcesses_v3"] <= 4     # every second
    assert 2 <= calls["nvmlDeviceGetProcessUtilization"] <= 4
    assert not any(k.endswith("(NULL)") for k in calls), calls


def test_skipped_metrics_are_never_read(tmp_path):
    r = ticks(tmp_path, reads="dict(skip=('temp', 'energy', 'pcie'))", seconds=1.5,
              interval=0.5, gpus=1)
    calls = r["calls"]
    assert calls["nvmlDeviceGetPowerUsage"] >= 2
    for fn in ("nvmlDeviceGetTemperature", "nvmlDeviceGetTotalEnergyConsumption",
               "nvmlDeviceGetFieldValues"):
        assert fn not in calls, calls


def test_process_list_read_again_when_used_memory_moves(tmp_path):
    """A memory move of more than PROCESS_MEM_CHANGE_MIB re-reads the list within a second."""
    r = run_py("""
        s = NvmlSource().open()
        s.read()
        g = s.gpus[0]
        time.sleep(1.1)
        c0 = counts()
        s._pids(g, time.monotonic(), g.pids_mem + 10)          # a small move: kept
        small = since(c0).get("nvmlDeviceGetComputeRunningProcesses_v3", 0)
        c0 = counts()
        s._pids(g, time.monotonic(), g.pids_mem + 1000)        # a process came: read
        big = since(c0).get("nvmlDeviceGetComputeRunningProcesses_v3", 0)
        out(dict(small=small, big=big, pids=list(g.pids)))
    """, tmp_path, pids={0: [1]})
    assert r == {"small": 0, "big": 1, "pids": [1]}


SAME = """
    def driver_rows(rows):         # the driver's busy samples (idle fills are 0%)
        return {(round(x.time, 3), x.gpu, x.util_gpu_pct) for x in rows if x.util_gpu_pct}
    a = NvmlSource().open()
    a.read()
    real = nvml_buffers.c_function
    nvml_buffers.c_function = PATCH
    b = NvmlSource().open()
    b.read()
    nvml_buffers.c_function = real
    ra, rb, ends = [], [], []
    c0 = counts()
    for _ in range(25):
        time.sleep(0.1)
        ra += a.read()
        rb += b.read()
    calls = since(c0)
    lo = max(min(x.time for x in ra), min(x.time for x in rb))
    hi = min(max(x.time for x in ra), max(x.time for x in rb)) - 0.5
    sa = {x for x in driver_rows(ra) if lo <= x[0] <= hi}
    sb = {x for x in driver_rows(rb) if lo <= x[0] <= hi}
    out(dict(same=sa == sb, n=len(sa), calls=calls,
             direct_a=[q.direct for g in a.gpus for q in g.lists[:2]],
             direct_b=[q.direct for g in b.gpus for q in g.lists[:2]],
             pids=[x.pids for x in ra[-1:] + rb[-1:]],
             mem=[x.proc_mem for x in ra[-1:] + rb[-1:]]))
"""


@pytest.mark.parametrize("patch,why", [
    ("lambda name: None", "symbol missing"),
    ("lambda name: (lambda *args: 999)", "direct call fails (NVML_ERROR_UNKNOWN)"),
])
def test_wrappers_give_the_same_samples_and_are_the_fallback(tmp_path, patch, why):
    r = run_py(f"PATCH = {patch}\n" + textwrap.dedent(SAME), tmp_path, gpus=2, pids={"*": [1]})
    assert r["same"] and r["n"] >= 4, (why, r)
    assert all(r["direct_a"]), why
    assert not any(r["direct_b"]), why             # b keeps to the wrappers (samples, processes)
    assert r["pids"][0] == r["pids"][1] == [1]
    assert r["mem"][0] == r["mem"][1] and r["mem"][0]
    # only b's wrapper asks for the size first
    assert r["calls"]["nvmlDeviceGetSamples(NULL)"] >= 1


def test_a_gpu_lost_under_a_direct_call_is_marked_lost_and_the_path_kept(tmp_path):
    """GPU_IS_LOST answers the question (the wrapper would say the same): raised as it is."""
    r = run_py("""
        s = NvmlSource().open()
        s.read()
        time.sleep(1.2)
        s.read()
        out(dict(lost=s.lost, direct=[q.direct for q in s.gpus[1].lists]))
    """, tmp_path, gpus=2, lost={1: 1.0})
    assert r["lost"] == [1] and r["direct"][0] is True


def test_a_full_sample_array_grows_and_loses_nothing(tmp_path):
    r = run_py("""
        nvml_buffers.Samples.START = 4
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        q = nvml_buffers.Samples()
        c0 = counts()
        got = q(h, N.NVML_GPU_UTILIZATION_SAMPLES, 0)
        calls = since(c0)
        vt, ref = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, 0)
        ref = [(x.timeStamp, float(x.sampleValue.uiVal)) for x in ref]
        out(dict(n=len(got), differ=len(set(got) ^ set(ref)), size=q.size, calls=calls,
                 increasing=all(a[0] < b[0] for a, b in zip(got, got[1:]))))
    """, tmp_path)
    # the whole ring (a sample may arrive, and the oldest leave, between the two reads)
    assert r["n"] >= 100 and r["differ"] <= 2 and r["increasing"], r
    assert r["size"] > 4
    assert r["calls"]["nvmlDeviceGetSamples"] == 3          # 4, the count of the rest, the rest
    assert r["calls"]["nvmlDeviceGetSamples(NULL)"] == 1


def test_paced_polling_at_100ms_keeps_every_driver_sample(tmp_path):
    """The square wave: each second the driver's three busy samples (100, 100, 40 at 1/6, 2/6,
    3/6 s) and three idle periods filled as 0%, once each, although the ring is asked less often
    than the source is polled."""
    r = run_py("""
        s = NvmlSource().open()
        rows = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.2:
            time.sleep(0.1)
            rows += [(x.time, x.util_gpu_pct) for x in s.read()]
        out(rows)
    """, tmp_path)
    per_second: dict[int, list] = {}
    for t, u in r:
        slot = round(t * 6)                     # driver periods end at k/6 s
        per_second.setdefault(slot // 6, []).append((slot % 6, u))
    full = sorted(per_second)[1:-1]
    assert len(full) >= 3
    for sec in full:
        assert sorted(per_second[sec]) == [(0, 0), (1, 100), (2, 100), (3, 40), (4, 0), (5, 0)], \
            (sec, per_second[sec])


def _command_calls(tmp_path, argv, **settings):
    log = tmp_path / "calls.txt"
    env = fakenvml_env.env(call_log=log, **settings)
    proc = subprocess.run([sys.executable, "-m", *argv], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with open(log) as f:
        return {k: int(v) for k, v in (ln.split() for ln in f if not ln.startswith("#"))}


@pytest.mark.parametrize("argv,absent,present", [
    (["gpumon", "log", "-q", "--duration", "2.5", "-o", "-"],
     ["nvmlDeviceGetProcessUtilization"],
     ["nvmlDeviceGetTemperature", "nvmlDeviceGetTotalEnergyConsumption"]),
    (["gpumon.commands.stream", "--interval", "0.5", "--duration", "2.5"],
     ["nvmlDeviceGetProcessUtilization", "nvmlDeviceGetTemperature",
      "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetFieldValues"],
     ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo"]),
    (["gpumon", "status", "--json", "--sample", "1.5"], [],
     ["nvmlDeviceGetProcessUtilization", "nvmlDeviceGetTemperature"]),
])
def test_each_command_reads_what_it_shows(tmp_path, argv, absent, present):
    calls = _command_calls(tmp_path, argv, gpus=2, pids={"*": [1]})
    for fn in absent:
        assert fn not in calls, (fn, argv)
    for fn in present:
        assert calls.get(fn, 0) > 0, (fn, argv, calls)
    # one process list a GPU (at the first read): 4 s apart, not every second
    assert calls["nvmlDeviceGetComputeRunningProcesses_v3"] <= 2 * 2
    assert not any(k.endswith("(NULL)") for k in calls), calls
