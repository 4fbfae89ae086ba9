"""GPM (SM activity, SM occupancy, tensor and DRAM activity) over the fake NVML library,
through the real nvidia-ml-py ctypes path: the fake's GPM ABI, NvmlSource's sampling (per GPU
where supported, missing elsewhere, a GPM call failing mid-run) and the faces that show it."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import numpy as np
import pytest

import fakenvml_env

SKIP = fakenvml_env.skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason="fake NVML library: %s" % SKIP)

GPM_COLUMNS = ("sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio",
               "dram_active_ratio")


def run_py(code: str, clean_env, timeout: float = 60, **settings) -> dict:
    env = fakenvml_env.env(base=clean_env, **settings)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpumon(args, clean_env, timeout: float = 60, **settings):
    env = fakenvml_env.env(base=clean_env, **settings)
    return subprocess.run([sys.executable, "-m", "gpumon"] + args, env=env,
                          capture_output=True, text=True, timeout=timeout)



def test_fake_gpm_abi_as_nvml_defines_it(clean_env):
    r = run_py("""
        import json
        import pynvml as N
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        out = {"support": [N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice for h in (h0, h1)]}
        bad = N.c_nvmlGpmSupport_t(); bad.version = 2
        out["version"] = N._nvmlGetFunctionPointer("nvmlGpmQueryDeviceSupport")(h0, N.byref(bad))
        a, b, c = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
        try:
            N.nvmlGpmSampleGet(h1, c)
        except N.NVMLError as exc:
            out["unsupported_get"] = exc.value
        N.nvmlGpmSampleGet(h0, a)
        import time; time.sleep(1.2)
        N.nvmlGpmSampleGet(h0, b)
        mg = N.c_nvmlGpmMetricsGet_t()
        mg.version = N.NVML_GPM_METRICS_GET_VERSION
        ids = [N.NVML_GPM_METRIC_SM_UTIL, N.NVML_GPM_METRIC_SM_OCCUPANCY,
               N.NVML_GPM_METRIC_ANY_TENSOR_UTIL, N.NVML_GPM_METRIC_DRAM_BW_UTIL,
               N.NVML_GPM_METRIC_NVLINK_L3_RX_PER_SEC]
        mg.numMetrics = len(ids)
        for i, m in enumerate(ids):
            mg.metrics[i].metricId = m
        mg.sample1, mg.sample2 = a, b
        N.nvmlGpmMetricsGet(mg)
        out["metrics"] = [(m.nvmlReturn, m.value) for m in mg.metrics[:len(ids)]]
        out["name"] = mg.metrics[0].metricInfo.shortName.decode()
        mg.sample2 = c                      # never taken
        try:
            N.nvmlGpmMetricsGet(mg)
        except N.NVMLError as exc:
            out["untaken"] = exc.value
        for s in (a, b, c):
            N.nvmlGpmSampleFree(s)
        N.nvmlShutdown()
        print(json.dumps(out))
    """, clean_env, gpus=2, unsupported={1: ["gpm"]})
    assert r["support"] == [1, 0]
    assert r["version"] == 25                       # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert r["unsupported_get"] == 3                # NVML_ERROR_NOT_SUPPORTED
    (sm_ret, sm), (occ_ret, occ), (ten_ret, ten), (dram_ret, dram), (nvl_ret, _) = r["metrics"]
    assert sm_ret == occ_ret == ten_ret == dram_ret == 0
    assert nvl_ret == 3                             # per metric: not modelled, not supported
    # square wave: a kernel 0.4 s of every second at 80% SM activity (means over ~1.2 s)
    assert 10 < sm < 60 and 0 < ten < sm and 0 < occ < sm and 0 < dram < sm, r["metrics"]
    assert r["name"] == "sm_util"
    assert r["untaken"] == 2                        # NVML_ERROR_INVALID_ARGUMENT


def test_gpm_per_gpu_where_supported_missing_elsewhere(clean_env, tmp_path):
    out = tmp_path / "run.csv"
    r = gpumon(["log", "--interval", "0.5", "--duration", "3", "-o", str(out)], clean_env,
               gpus=3, unsupported={1: ["gpm"]}, mig=True)
    assert r.returncode == 0, r.stderr
    by = fakenvml_env.rows_by_gpu(out)
    has = [x for x in by[2] if x["sm_active_ratio"]]
    assert len(has) >= len(by[2]) // 2          # from the second poll on
    for x in has:
        for col in GPM_COLUMNS:
            assert 0.0 <= float(x[col]) <= 1.0, (col, x[col])
    assert any(float(x["sm_active_ratio"]) > 0 for x in has)
    for gpu in (0, 1):                          # 0: MIG mode, 1: no GPM
        assert by[gpu] and all(x[c] == "" for x in by[gpu] for c in GPM_COLUMNS)
    assert all(x["util_gpu_pct"] != "" for x in by[1])


def test_gpumon_list_says_per_gpu_whether_it_has_gpm(clean_env):
    r = gpumon(["list", "--json"], clean_env, gpus=3, unsupported={1: ["gpm"]}, mig=True)
    assert r.returncode == 0, r.stderr
    support = [g["supported"]["gpm"] for g in json.loads(r.stdout)["gpus"]]
    assert support == [False, False, True]
    r = gpumon(["list", "--no-color"], clean_env, gpus=2, unsupported={1: ["gpm"]})
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("gpm "))
    assert row.split()[1:] == ["yes", "no"]


def test_a_gpm_call_failing_mid_run_is_missing_said_once_and_the_rest_goes_on(clean_env):
    r = run_py("""
        import json, time
        from gpumon.nvml import NvmlSource
        s = NvmlSource().open()
        seen = {0: [], 1: []}
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            for x in s.read():
                seen[x.gpu].append((time.monotonic() - t0, x.sm_active_ratio, x.util_gpu_pct))
            time.sleep(0.25)
        print(json.dumps({"seen": seen, "errors": s.errors,
                          "supported": [dict(i.supported)["gpm"] for i in s.gpu_infos()]}))
        s.close()
    """, clean_env, gpus=2, gpm_fail={0: 1.5})
    g0, g1 = r["seen"]["0"], r["seen"]["1"]
    assert any(sm is not None for t, sm, _ in g0 if t < 1.4)
    assert all(sm is None for t, sm, _ in g0 if t > 1.8)
    assert any(u is not None for t, _, u in g0 if t > 1.8)          # the rest goes on
    assert any(sm is not None for t, sm, _ in g1 if t > 1.8)        # the other GPU too
    assert r["errors"] == {"gpm:NVMLError_Unknown": 1}              # said once
    assert r["supported"] == [False, True]


def test_simulated_trace_drives_the_fake_gpm(clean_env, tmp_path):
    """The simulator's trace carries each period's GPM and which GPUs have it; the fake serves
    them: a rank spinning in a collective reads ~100% utilization at a few per cent SM
    activity, and demo's GPUs 2 and 3 have no GPM."""
    from gpumon.sim.trace import read_trace, write_trace
    for name, gpus in (("hang", 2), ("demo", 4)):
        with open(tmp_path / f"{name}.trace", "w") as f:
            write_trace(f, name, gpus=gpus, seconds=30)
    tr = read_trace(str(tmp_path / "demo.trace"))
    assert [g[-1] for g in tr.gpus] == [1, 1, 0, 0]
    assert all(("sm_active_pm" in row) == (row["gpu"] < 2) for row in tr.samples)
    code = """
        import json, time
        from gpumon.nvml import NvmlSource
        s = NvmlSource().open()
        s.read(); time.sleep(1.2)
        got = s.read()
        print(json.dumps([(x.gpu, x.util_gpu_pct, x.sm_active_ratio) for x in got]))
    """
    hang = run_py(code, clean_env, scenario=tmp_path / "hang.trace")
    assert hang and all(u >= 95 and 0 < sm < 0.06 for _, u, sm in hang), hang
    demo = run_py(code, clean_env, scenario=tmp_path / "demo.trace")
    assert {g for g, _, sm in demo if sm is not None} == {0, 1}
    assert {g for g, _, sm in demo if sm is None} == {2, 3}


def test_gpm_in_the_jsonl_log(clean_env, tmp_path):
    out = tmp_path / "run.jsonl"
    r = gpumon(["log", "--format", "jsonl", "--interval", "0.5", "--duration", "3", "-o",
                str(out)], clean_env, gpus=2, unsupported={1: ["gpm"]})
    assert r.returncode == 0, r.stderr
    ticks = [json.loads(line) for line in out.read_text().splitlines()]
    gpus = [g for t in ticks for g in t["gpus"]]
    with_gpm = [g for g in gpus if g["gpu"] == 0 and g["sm_active_ratio"] is not None]
    assert len(with_gpm) >= 3
    assert all(0 <= g[c] <= 1 for g in with_gpm for c in GPM_COLUMNS)
    assert all(g["sm_active_ratio"] is None for g in gpus if g["gpu"] == 1)


def test_gpm_in_status_json(clean_env):
    r = gpumon(["status", "--json", "--sample", "2"], clean_env, gpus=2,
               unsupported={1: ["gpm"]})
    assert r.returncode == 0, r.stderr
    g0, g1 = json.loads(r.stdout)["gpus"]
    assert all(0 <= g0[c] <= 1 for c in GPM_COLUMNS) and g0["sm_active_ratio"] > 0
    assert all(g1[c] is None for c in GPM_COLUMNS)
    assert g1["utilization.gpu"] is not None


PROMTOOL = shutil.which("promtool")


def scrape_until(port: int, needle: str, within_s: float = 30.0) -> str:
    """/metrics once it holds ``needle`` (or the last page read when time is up)."""
    text, deadline = "", time.monotonic() + within_s
    while time.monotonic() < deadline and needle not in text:
        time.sleep(0.5)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            pass
    return text


def promtool_findings(text: str) -> list[str]:
    """What promtool's linter finds in the page, but for dcgm-exporter's own conventions (as
    in test_export_prometheus): camelCase labels, an energy counter without _total."""
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode in (0, 3), check.stdout + check.stderr      # 3: lint findings
    return [line for line in (check.stdout + check.stderr).splitlines()
            if "label names should be written in 'snake_case'" not in line
            and not line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter metrics "
                                    "should have \"_total\" suffix")]


@pytest.mark.skipif(PROMTOOL is None, reason="no promtool binary (apt-get install prometheus)")
def test_exporter_gives_dcgm_exporters_gpm_metrics(clean_env, tmp_path):
    """`gpumon export` over the fake library: DCGM_FI_PROF_* with dcgm-exporter's help, for
    the GPU with GPM only; promtool accepts the page."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = fakenvml_env.env(base=clean_env, gpus=2, unsupported={1: ["gpm"]})
    proc = subprocess.Popen([sys.executable, "-m", "gpumon", "export", "--port", str(port),
                             "-q"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        text = scrape_until(port, "DCGM_FI_PROF_SM_ACTIVE{")
    finally:
        proc.terminate()
        err = proc.communicate(timeout=10)[1]
    assert "Traceback" not in err, err
    helps = {"DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned.",
             "DCGM_FI_PROF_SM_OCCUPANCY": "The ratio of number of warps resident on an SM.",
             "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "Ratio of cycles the tensor (HMMA) pipe is "
                                                "active.",
             "DCGM_FI_PROF_DRAM_ACTIVE": "Ratio of cycles the device memory interface is active "
                                         "sending or receiving data."}
    for name, help_ in helps.items():
        assert f"# HELP {name} {help_}\n# TYPE {name} gauge\n" in text, name
        lines = [ln for ln in text.splitlines() if ln.startswith(name + "{")]
        assert len(lines) == 1 and 'gpu="0"' in lines[0], lines
        assert 0 <= float(lines[0].rsplit(" ", 1)[1]) <= 1
    assert "DCGM_FI_PROF_PIPE_FP16_ACTIVE{" not in text      # the fake does not model it
    assert promtool_findings(text) == []


def test_a_csv_log_with_gpm_reads_back(clean_env, tmp_path):
    """The gpumon CSV reader takes the GPM columns back (replay) as they were written."""
    from gpumon.replay import ReplaySource
    out = tmp_path / "demo.csv"
    r = gpumon(["log", "--sim", "demo", "--duration", "3", "-q", "-o", str(out)], clean_env)
    assert r.returncode == 0, r.stderr
    written = {(x["time"], int(x["gpu"])): x["sm_active_ratio"]
               for rows in fakenvml_env.rows_by_gpu(out).values() for x in rows}
    src = ReplaySource(str(out))
    read = {}
    while (tick := src.read()) is not None and tick.gpus:
        read.update({(f"{s.time:.3f}", s.gpu): s.sm_active_ratio for s in tick.gpus})
    assert read and set(read) == set(written)
    for key, value in read.items():
        assert (value is None) == (key[1] >= 2)                    # demo: GPUs 0, 1 have GPM
        assert value is None or f"{value:.3f}" == written[key]


def test_analyze_reads_the_gpm_columns_of_gpumon_csv_and_jsonl_logs(tmp_path):
    """`gpumon log --sim demo` gives GPUs 0 and 1 GPM: its CSV and JSON-lines logs read back
    with their SM activity kept per sample (Log.gpm, by the CSV column's name), the GPUs
    without GPM NaN there, never 0."""
    import subprocess
    import sys
    from gpumon.logs import read_log
    for fmt in ("csv", "jsonl"):
        out = tmp_path / f"demo.{fmt}"
        r = subprocess.run([sys.executable, "-m", "gpumon", "log", "--sim", "demo", "--seed",
                            "0", "--duration", "6", "--interval", "1", "--format", fmt,
                            "-o", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        log = read_log(str(out))
        assert log.gpm is not None and set(GPM_COLUMNS[:4]) <= set(log.gpm)
        sm, gpu = log.gpm["sm_active_ratio"], log.samples.gpu
        assert len(sm) == len(gpu)
        assert np.isnan(sm[gpu >= 2]).all(), fmt
        have = sm[(gpu < 2) & ~np.isnan(sm)]
        assert len(have) and ((have >= 0) & (have <= 1)).all() and have.max() > 0.1, fmt


def test_a_replayed_log_shows_smact_for_the_gpus_it_logged_with_gpm(tmp_path):
    """--replay --plain of a log with SM activity on GPUs 0-1 (the demo node) has the smact
    column, a value for GPUs 0-1 and "-" for 2-3."""
    log = tmp_path / "demo.csv"
    run = [sys.executable, "-m", "gpumon"]
    subprocess.run(run + ["log", "--sim", "demo", "--seed", "0", "--duration", "3", "-o",
                          str(log)], check=True, capture_output=True, timeout=120)
    out = subprocess.run(run + ["watch", "--replay", str(log), "--plain", "--speed", "1000"],
                         capture_output=True, text=True, timeout=120).stdout.splitlines()
    header = next(line for line in out if line.startswith("time"))
    assert header.count("smact") == 4
    row = out[out.index(header) + 1].split("|")
    assert row[1].split()[1].endswith("%") and row[3].split()[1] == "-"
    from gpumon.replay import ReplaySource
    infos = ReplaySource(str(log)).gpu_infos()
    assert [dict(i.supported).get("gpm") for i in infos] == [True, True, False, False]
