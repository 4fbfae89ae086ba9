"""`make gpu-check` without a GPU: the scoring of `gpumon analyze` JSON against a workload's
ground truth, the NVML checks' judgements (and their calls through the fake NVML library), and
the whole script in CPU mode."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.gpu_check import nvml_checks as nc
from bench.gpu_check import score as sc

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "build" / "fakenvml"

T0 = 1_700_000_000.0


def truth_file(tmp_path, header=None, steps=20, step_s=1.0, data_s=0.6, sync_s=0.0):
    head = {"scenario": "data_starvation", "expected_verdict": "data_starvation",
            "expected_cause": "cpu_preprocessing", "straggler": None, "device": "cuda",
            "gpus": 1, "accept_verdicts": ["data_starvation"], "note": ""}
    head.update(header or {})
    lines = [json.dumps(head)]
    for i in range(steps):
        lines.append(json.dumps({
            "t_start": T0 + i * step_s, "t_end": T0 + (i + 1) * step_s, "rank": 0, "step": i,
            "wait_data_s": data_s, "compute_s": step_s - data_s - sync_s,
            "wait_sync_s": sync_s, "checkpoint_s": 0.0}))
    p = tmp_path / "truth.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def analysis(verdict="data_starvation", cause="cpu_preprocessing", straggler=None,
             segments=None):
    return {"summary": {"verdict": verdict, "cause": cause, "gpus": [0],
                        "straggler_gpu": straggler, "confidence": 0.8,
                        "fractions": {verdict: 0.9, "busy": 0.1}},
            "segments": segments if segments is not None else [
                {"start": T0, "end": T0 + 10, "verdict": "busy", "cause": None, "gpus": [0],
                 "confidence": 0.5, "evidence": {}, "advice": ""},
                {"start": T0 + 10, "end": T0 + 20, "verdict": verdict, "cause": cause,
                 "gpus": [0], "confidence": 0.9, "evidence": {}, "advice": ""}]}


def write_json(tmp_path, doc, name="a.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_score_pass_with_exact_time_share(tmp_path):
    res = sc.score_files(str(write_json(tmp_path, analysis())), str(truth_file(tmp_path)))
    assert res["result"] == "PASS"
    assert res["checks"] == {"verdict": True, "cause": True}
    # truth spans T0..T0+20, the first 5 s set aside: 5 s of busy, 10 s of starvation
    assert res["accepted_time_share"] == pytest.approx(10 / 15, abs=1e-4)
    assert res["truth"]["data_share"] == 0.6 and res["truth"]["steps"] == 20
    assert res["detail"].startswith("expected data_starvation/cpu_preprocessing; got "
                                    "data_starvation/cpu_preprocessing (conf 0.80)")
    assert "67% of run time in an accepted verdict" in res["detail"]
    assert "truth: data 60% compute 40% sync 0%, step 1000.0 ms x20" in res["detail"]


@pytest.mark.parametrize("doc,failed", [
    (analysis(verdict="busy", cause=None), "verdict"),
    (analysis(cause="io_fetch"), "cause"),
])
def test_score_fails_on_wrong_verdict_or_cause(tmp_path, doc, failed):
    res = sc.score_files(str(write_json(tmp_path, doc)), str(truth_file(tmp_path)))
    assert res["result"] == "FAIL" and res["checks"][failed] is False


def test_score_straggler_on_several_gpus(tmp_path):
    head = {"scenario": "sync_stall", "expected_verdict": "sync_stall", "expected_cause": None,
            "straggler": 1, "gpus": 2, "accept_verdicts": ["sync_stall"]}
    truth = truth_file(tmp_path, head, data_s=0.0, sync_s=0.4)
    right = sc.score_files(str(write_json(tmp_path, analysis("sync_stall", "imbalance", 1))),
                           str(truth))
    wrong = sc.score_files(str(write_json(tmp_path, analysis("sync_stall", "imbalance", 0))),
                           str(truth))
    assert right["result"] == "PASS" and wrong["result"] == "FAIL"
    assert wrong["checks"]["straggler"] is False
    assert "straggler 1; got sync_stall/imbalance straggler 0" in wrong["detail"]
    # several GPUs and nobody to wait for: naming a straggler is wrong
    busy = truth_file(tmp_path, {"expected_verdict": "busy", "expected_cause": None,
                                 "accept_verdicts": ["busy"], "gpus": 2})
    named = sc.score_files(str(write_json(tmp_path, analysis("busy", None, 1))), str(busy))
    assert named["result"] == "FAIL" and named["checks"]["straggler"] is False


def test_score_accepts_any_listed_verdict_for_spin(tmp_path):
    truth = truth_file(tmp_path, {"scenario": "spin", "expected_verdict": "sync_stall",
                                  "expected_cause": None,
                                  "accept_verdicts": ["sync_stall", "data_starvation",
                                                      "throttled"]}, data_s=0.0, sync_s=1.0)
    ok = sc.score_files(str(write_json(tmp_path, analysis("data_starvation", "x"))), str(truth))
    bad = sc.score_files(str(write_json(tmp_path, analysis("busy", None))), str(truth))
    assert ok["result"] == "PASS" and bad["result"] == "FAIL"


def test_score_rejects_unusable_input(tmp_path):
    truth = truth_file(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(sc.ScoreError, match="not JSON"):
        sc.score_files(str(bad), str(truth))
    with pytest.raises(sc.ScoreError, match="no 'summary' object"):
        sc.score_files(str(write_json(tmp_path, {"segments": []})), str(truth))
    with pytest.raises(sc.ScoreError, match="no steps recorded"):
        sc.score_files(str(write_json(tmp_path, analysis())), str(truth_file(tmp_path, steps=0)))
    with pytest.raises(sc.ScoreError, match="missing.jsonl"):
        sc.score_files(str(write_json(tmp_path, analysis())), str(tmp_path / "missing.jsonl"))


def test_score_command_line_exit_codes(tmp_path):
    truth = str(truth_file(tmp_path))
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def cli(doc):
        a = str(write_json(tmp_path, doc))
        return subprocess.run([sys.executable, "-m", "bench.gpu_check.score", a, truth,
                               "--json", str(tmp_path / "r.json")], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    good = cli(analysis())
    assert good.returncode == 0 and good.stdout.startswith("PASS data_starvation: expected")
    assert json.loads((tmp_path / "r.json").read_text())["result"] == "PASS"
    assert cli(analysis(verdict="idle", cause=None)).returncode == 1
    broken = cli({"nothing": 1})
    assert broken.returncode == 2 and broken.stderr.startswith("score: ")


# ---- NVML judgements on made-up readings ------------------------------------------------

def samples(n, period_s, t_end_s):
    start = t_end_s - (n - 1) * period_s
    return [SimpleNamespace(timeStamp=int(round((start + i * period_s) * 1e6)),
                            sampleValue=SimpleNamespace(uiVal=100)) for i in range(n)]


def by_step(rows):
    return {r["step"]: r for r in rows}


def test_ring_rows_pass_for_what_the_fake_library_assumes():
    now = nc.clocks_now()
    rows = by_step(nc.ring_rows(samples(120, 1 / 6, now["boottime"] - 0.1), now))
    assert rows["samples: period ~1/6 s"]["result"] == "PASS"
    assert rows["samples: ring depth ~120"]["result"] == "PASS"
    assert rows["samples: timestamps on CLOCK_BOOTTIME"]["result"] == "PASS"
    assert "120 samples spanning 19.8 s" in rows["samples: ring depth ~120"]["detail"]


def test_ring_rows_fail_on_epoch_stamps_a_1s_period_or_a_short_ring():
    now = nc.clocks_now()
    rows = by_step(nc.ring_rows(samples(30, 1.0, now["epoch"] - 0.2), now))
    assert rows["samples: period ~1/6 s"]["result"] == "FAIL"
    assert rows["samples: ring depth ~120"]["result"] == "FAIL"
    clock = rows["samples: timestamps on CLOCK_BOOTTIME"]
    assert clock["result"] == "FAIL" and "matches epoch" in clock["detail"]
    assert nc.ring_rows(samples(2, 1 / 6, now["boottime"]), now)[0]["result"] == "FAIL"


def test_compute_process_row():
    assert nc.compute_process_row(10, 11, {50, 51}, {50}, {})["result"] == "PASS"
    assert nc.compute_process_row(10, 11, {10, 50}, {50}, {})["result"] == "FAIL"
    other_ns = nc.compute_process_row(10, 11, {999}, {50}, {})
    assert other_ns["result"] == "INFO" and "inconclusive" in other_ns["detail"]
    assert nc.compute_process_row(10, None, set(), set(), {"NoPermission": 3})["result"] == "ERROR"


def test_cost_row_from_tick_readings():
    hz = os.sysconf("SC_CLK_TCK")
    r = nc.cost_row([(100.0, 50), (110.0, 50 + hz // 10)], 40.0, "NVML")
    assert r["result"] == "INFO" and r["detail"].startswith("1.00% of one core over 10.0 s")
    assert nc.cost_row([(100.0, 1)], None, "NVML")["result"] == "ERROR"


def test_own_cpu_ticks_and_descendants():
    assert nc.cpu_ticks(os.getpid()) >= 0 and nc.cpu_ticks(2 ** 22 + 7) is None
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        deadline = time.time() + 5
        while child.pid not in nc.descendants(os.getpid()) and time.time() < deadline:
            time.sleep(0.05)
        assert child.pid in nc.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()


# ---- the real NVML calls, through the fake library -------------------------------------

needs_fake = pytest.mark.skipif(not (FAKE / "libnvidia-ml.so.1").exists(),
                                reason="fake NVML library not built (make fakenvml)")


def fake_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML")}
    env.update(PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=str(FAKE))
    return env


@needs_fake
def test_latency_and_idle_checks_through_the_fake_library(tmp_path):
    out = tmp_path / "lat.json"
    r = subprocess.run([sys.executable, "-m", "bench.gpu_check.nvml_checks", "latency",
                        "--reps", "5", "--out", str(out)], cwd=ROOT, env=fake_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    steps = [row["step"] for row in doc["rows"]]
    for call in ("nvmlInit", "nvmlDeviceGetSamples(util)", "nvmlDeviceGetFieldValues(pcie rx/tx,"
                 " power instant)", "nvmlDeviceGetComputeRunningProcesses(v3)",
                 "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetTotalEnergyConsumption"):
        assert any(s.startswith(f"latency {call}") for s in steps), call
    assert all(row["result"] == "INFO" for row in doc["rows"])
    assert doc["latency"]["nvmlDeviceGetPowerUsage"]["n"] == 5
    idle = subprocess.run([sys.executable, "-m", "bench.gpu_check.nvml_checks", "idle",
                           "--out", str(tmp_path / "idle.json")], cwd=ROOT, env=fake_env(),
                          capture_output=True, text=True, timeout=60)
    rows = by_step(json.loads((tmp_path / "idle.json").read_text())["rows"])
    assert idle.returncode == 0
    assert set(rows) == {"samples: NOT_FOUND while idle"}


def gpm_check(tmp_path, name, **env):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "bench.gpu_check.nvml_checks", "gpm", "--reps",
                        "5", "--out", str(out)], cwd=ROOT, env={**fake_env(), **env},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


@needs_fake
def test_gpm_support_and_read_cost_through_the_fake_library(tmp_path):
    doc = gpm_check(tmp_path, "gpm", FAKE_NVML_GPUS="2", FAKE_NVML_UNSUPPORTED="1:gpm")
    rows = by_step(doc["rows"])
    assert rows["GPM GPU 0: support"]["result"] == "PASS"
    cost = rows["GPM GPU 0: cost of one read"]
    assert cost["result"] == "PASS", cost                       # free calls: under 305 us
    assert "nvmlGpmSampleGet median" in cost["detail"] and "charges 305 us" in cost["detail"]
    assert doc["cost"]["0"]["read"]["n"] == 5
    # the fake models 4 of gpumon's 7 metrics (no FP64/32/16): each answers on its own
    assert doc["cost"]["0"]["metrics_ok"] == 4 and doc["cost"]["0"]["metrics"] == 7
    # a GPU without GPM is said, not a failure, and gets no cost row
    assert rows["GPM GPU 1: support"]["result"] == "INFO"
    assert "not supported" in rows["GPM GPU 1: support"]["detail"]
    assert "GPM GPU 1: cost of one read" not in rows
    # no CUDA here: the loads say why they did not run
    for load in ("work", "spin"):
        skip = rows[f"GPM SM activity under {load}"]
        assert skip["result"] == "SKIP" and "no CUDA" in skip["detail"], skip


@needs_fake
def test_gpm_read_dearer_than_the_call_cost_bench_charges_fails(tmp_path):
    doc = gpm_check(tmp_path, "dear", FAKE_NVML_GPUS="1", FAKE_NVML_CALL_US="5,gpm=600")
    cost = by_step(doc["rows"])["GPM GPU 0: cost of one read"]
    assert cost["result"] == "FAIL" and doc["cost"]["0"]["nvmlGpmSampleGet"]["median_us"] >= 600


def test_call_cost_profile_figure_for_one_gpm_read():
    assert nc.profile_gpm_us("5,samples=300,gpm=300,memory=12") == 305
    assert nc.profile_gpm_us("7,samples=300") == 14                # no gpm group: plain twice


def test_activity_rows_judge_spin_and_work_against_the_simulator():
    spin = [(0.02, 0.01, 0.0, 100.0)] * 5
    work = [(0.7, 0.4, 0.5, 100.0)] * 5
    assert nc.activity_row("spin", "kernel", spin)["result"] == "PASS"
    assert nc.activity_row("work", "matmul", work)["result"] == "PASS"
    assert nc.activity_row("spin", "kernel", work)["result"] == "FAIL"     # SMs busy
    assert nc.activity_row("work", "matmul", spin)["result"] == "FAIL"
    idle = nc.activity_row("spin", "kernel", [(0.0, 0.0, 0.0, 10.0)] * 5)
    assert idle["result"] == "FAIL"              # not at high utilization: no spin was seen
    assert nc.activity_row("work", "matmul", work[:1])["result"] == "ERROR"
    detail = nc.activity_row("work", "matmul", work)["detail"]
    assert detail.startswith("matmul: SM activity 0.700, occupancy 0.400, tensor 0.500 at "
                             "utilization 100%")


# ---- the whole script, CPU mode ---------------------------------------------------------

def test_gpu_check_script_in_cpu_mode(tmp_path):
    try:
        import torch  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but torch is not installed (pip install torch==2.13.0+cpu)")
        pytest.skip("torch is not installed: the workloads need it")
    env = dict(os.environ, GPU_CHECK_CPU="1", GPU_CHECK_OUT=str(tmp_path),
               GPU_CHECK_SCENARIOS="busy,spin,nope", GPU_CHECK_SECONDS="2",
               PYTHON=sys.executable)
    env.pop("OUT", None)
    r = subprocess.run(["sh", str(ROOT / "bench" / "gpu_check.sh")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    table = (tmp_path / "gpu-check.md").read_text()
    assert "**CPU MODE**" in table and "| step | result | detail |" in table
    rows = {}
    for line in (tmp_path / "gpu-check" / "rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["step"]] = row
        assert f"| {row['step']} | {row['result']} |" in table
    assert rows["nvml idle"]["result"] == "SKIP" and rows["nvml latency"]["result"] == "SKIP"
    assert rows["nvml gpm"]["result"] == "SKIP"
    assert rows["nvml gpm"]["detail"].startswith("skipped: no GPU")
    assert rows["scenario spin"]["result"] == "SKIP"
    assert "spin needs CUDA" in rows["scenario spin"]["detail"]
    assert rows["scenario nope"]["result"] == "ERROR"
    assert rows["gpumon never a compute process"]["result"] == "SKIP"
    # busy ran under gpumon run: its truth was written; the row says how analyze/scoring went
    header, *steps = (tmp_path / "gpu-check" / "busy.truth.jsonl").read_text().splitlines()
    assert json.loads(header)["scenario"] == "busy" and len(steps) > 10
    assert rows["scenario busy"]["result"] in ("PASS", "FAIL", "ERROR")
    assert rows["scenario busy"]["result"] != "ERROR" or "gpumon" in rows["scenario busy"]["detail"]
    assert r.stdout.rstrip().endswith(f"files in {tmp_path / 'gpu-check'}")


def test_score_reports_the_evidence_of_the_main_segment(tmp_path):
    doc = analysis()
    doc["segments"][1]["evidence"] = {"duty_cycle": 0.31, "iowait_pct": 42.4, "gap_s": None,
                                      "loader_cpu_pct": 198.0}
    doc["segments"][0]["evidence"] = {"duty_cycle": 0.99}   # overlaps the run less
    doc["segments"][0]["end"] = doc["segments"][1]["start"] = T0 + 6
    res = sc.score_files(str(write_json(tmp_path, doc)), str(truth_file(tmp_path)))
    assert res["evidence"] == "duty 0.31, iowait 42%, loader CPU 198%"
    assert res["detail"].endswith("; gpumon saw: duty 0.31, iowait 42%, loader CPU 198%")
