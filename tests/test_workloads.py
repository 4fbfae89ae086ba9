"""CPU smoke tests of the reference training workloads (workloads/): a few steps of each
scenario with the CPU build of torch, and the ground truth they write.

Without torch these are skipped, except in CI (CI=true), which installs the CPU build and where
a missing torch is a failure."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

NO_TORCH = ("torch is not installed: the workloads need it (CI installs the CPU build: "
            "pip install torch==2.13.0+cpu)")


# tests that need no torch: they run everywhere
TORCH_FREE = {"test_truth_reader_drops_a_torn_last_line_and_names_bad_ones"}


@pytest.fixture(autouse=True)
def _torch_required(request):
    if not HAVE_TORCH and request.node.originalname not in TORCH_FREE:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but " + NO_TORCH)
        pytest.skip(NO_TORCH)


def run_main(args):
    from workloads.train import main
    return main(args)


def read(path):
    from workloads.truth import read_truth
    return read_truth(str(path))


SMOKE = ["--device", "cpu", "--tiny", "--seconds", "60"]
STEP_FIELDS = {"t_start", "t_end", "rank", "step", "wait_data_s", "compute_s", "wait_sync_s",
               "checkpoint_s"}
HEADER_FIELDS = {"scenario", "expected_verdict", "expected_cause", "straggler", "device", "gpus",
                 "accept_verdicts", "note", "intended", "batch", "compute_step_ms"}


def check_truth(path, scenario, steps_per_rank, ranks=1):
    header, steps = read(path)
    assert HEADER_FIELDS <= set(header), HEADER_FIELDS - set(header)
    assert header["scenario"] == scenario
    assert header["device"] == "cpu" and header["gpus"] == 0
    assert header["expected_verdict"] in header["accept_verdicts"] or scenario == "spin"
    assert len(steps) == steps_per_rank * ranks
    for s in steps:
        assert set(s) == STEP_FIELDS
        assert s["t_end"] >= s["t_start"] > 1.6e9          # Unix epoch seconds
        parts = s["wait_data_s"] + s["compute_s"] + s["wait_sync_s"] + s["checkpoint_s"]
        assert all(s[k] >= 0 for k in STEP_FIELDS - {"rank", "step"})
        assert parts <= (s["t_end"] - s["t_start"]) + 0.01   # measured parts fit in the step
    assert sorted({s["rank"] for s in steps}) == list(range(ranks))
    for r in range(ranks):
        assert sorted(s["step"] for s in steps if s["rank"] == r) == list(range(steps_per_rank))
    return header, steps


def total(steps, key, rank=None):
    return sum(s[key] for s in steps if rank is None or s["rank"] == rank)


@pytest.mark.parametrize("scenario,verdict,cause", [
    ("busy", "busy", None),
    ("data_starvation", "data_starvation", "cpu_preprocessing"),
    ("main_process", "data_starvation", "main_process"),
])
def test_single_process_scenarios(tmp_path, scenario, verdict, cause):
    out = tmp_path / "truth.jsonl"
    assert run_main(["--scenario", scenario, "--steps", "4", "--out", str(out), *SMOKE]) == 0
    header, steps = check_truth(out, scenario, 4)
    assert (header["expected_verdict"], header["expected_cause"]) == (verdict, cause)
    assert header["straggler"] is None
    if scenario == "busy":
        assert total(steps, "wait_data_s") < total(steps, "compute_s")   # data already there
    else:
        # the loader is made 3x slower than compute: most of the time goes to waiting for it
        assert total(steps, "wait_data_s") > total(steps, "compute_s")
        assert header["transform_ms_per_sample"] > 0
        assert header["workers"] == (0 if scenario == "main_process" else 2)


def test_io_fetch_reads_files_then_removes_them(tmp_path):
    out = tmp_path / "truth.jsonl"
    data = tmp_path / "data"
    data.mkdir()
    assert run_main(["--scenario", "io_fetch", "--steps", "3", "--out", str(out),
                     "--data-dir", str(data), *SMOKE]) == 0
    header, steps = check_truth(out, "io_fetch", 3)
    assert header["expected_cause"] == "io_fetch"
    assert header["io_files"] == 2 * header["batch"] and header["io_file_kb"] == 16
    assert header["data_dir"].startswith(str(data))
    assert list(data.iterdir()) == []                       # the sample files are gone
    assert total(steps, "wait_data_s") > 0


def test_checkpoint_pauses_are_recorded(tmp_path):
    out = tmp_path / "truth.jsonl"
    assert run_main(["--scenario", "checkpoint", "--steps", "3", "--ckpt-every-s", "0",
                     "--data-dir", str(tmp_path), "--out", str(out), *SMOKE]) == 0
    header, steps = check_truth(out, "checkpoint", 3)
    assert header["expected_verdict"] == "busy" and "not starvation" in header["note"]
    assert all(s["checkpoint_s"] > 0 for s in steps)
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".pt"]   # checkpoint removed


def test_dataparallel_on_cpu_is_a_plain_call(tmp_path):
    out = tmp_path / "truth.jsonl"
    assert run_main(["--scenario", "dataparallel", "--steps", "3", "--out", str(out),
                     *SMOKE]) == 0
    header, _ = check_truth(out, "dataparallel", 3)
    assert header["intended"] == {"verdict": "sync_stall", "cause": "dataparallel",
                                  "straggler": 0}
    assert header["expected_verdict"] == "busy" and ">= 2 GPUs" in header["note"]


def test_spin_skips_on_cpu_with_a_reason(tmp_path, capsys):
    out = tmp_path / "truth.jsonl"
    assert run_main(["--scenario", "spin", "--steps", "2", "--out", str(out), *SMOKE]) == 0
    assert "skipped: spin needs CUDA" in capsys.readouterr().err
    assert not out.exists()


def test_ddp_sync_stall_two_gloo_ranks(tmp_path):
    out = tmp_path / "truth.jsonl"
    assert run_main(["--scenario", "sync_stall", "--steps", "4", "--out", str(out),
                     *SMOKE]) == 0
    header, steps = check_truth(out, "sync_stall", 4, ranks=2)
    assert header["backend"] == "gloo" and header["ranks"] == 2
    assert header["intended"] == {"verdict": "sync_stall", "cause": "imbalance", "straggler": 1}
    assert header["straggler_extra_forwards"] == 3
    # rank 1 does three extra forward passes a step; rank 0 waits for it in the collective
    assert total(steps, "compute_s", rank=1) > total(steps, "compute_s", rank=0)


def test_ddp_rank_data_stall_two_gloo_ranks(tmp_path):
    out = tmp_path / "truth.jsonl"
    assert run_main(["--scenario", "rank_data_stall", "--steps", "3", "--out", str(out),
                     *SMOKE]) == 0
    header, steps = check_truth(out, "rank_data_stall", 3, ranks=2)
    assert header["intended"]["straggler"] == 1 and header["expected_verdict"] == "data_starvation"
    # rank 1's loader is the slow one: it waits for data, rank 0 waits for rank 1
    assert total(steps, "wait_data_s", rank=1) > total(steps, "wait_data_s", rank=0)
    assert total(steps, "wait_sync_s", rank=0) > total(steps, "wait_sync_s", rank=1)


def test_command_line_entry_point(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    listed = subprocess.run([sys.executable, "-m", "workloads.train", "--list"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0
    names = [ln.split()[0] for ln in listed.stdout.splitlines()]
    assert names == ["busy", "data_starvation", "io_fetch", "main_process", "sync_stall",
                     "rank_data_stall", "dataparallel", "checkpoint", "spin"]
    out = tmp_path / "t.jsonl"
    ran = subprocess.run([sys.executable, "-m", "workloads.train", "--scenario", "busy",
                          "--steps", "2", "--out", str(out), *SMOKE], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "busy: 2 steps" in ran.stderr
    assert json.loads(out.read_text().splitlines()[0])["scenario"] == "busy"


@pytest.mark.parametrize("args,message", [
    (["--scenario", "sync_stall", "--ranks", "1"], "--ranks must be at least 2"),
    (["--scenario", "sync_stall", "--straggler-rank", "2"], "--straggler-rank must be below"),
    (["--scenario", "busy", "--device", "cuda"], "sees no CUDA device"),
    (["--scenario", "sync_stall", "--backend", "nccl", "--device", "cpu"], "NCCL needs CUDA"),
    ([], "--scenario NAME is required"),
])
def test_bad_input_is_one_line(capsys, args, message):
    if "--device" in args and "cuda" in args:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this torch has CUDA")
    assert run_main(args + ["--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_truth_reader_drops_a_torn_last_line_and_names_bad_ones(tmp_path):
    from workloads.truth import read_truth
    head = {"scenario": "busy", "expected_verdict": "busy", "expected_cause": None,
            "straggler": None, "device": "cpu", "gpus": 0}
    step = {"t_start": 1.0, "t_end": 2.0, "rank": 0, "step": 0, "wait_data_s": 0.1,
            "compute_s": 0.8, "wait_sync_s": 0.0}
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(head) + "\n" + json.dumps(step) + "\n" + '{"t_start": 2.0, "t_e')
    assert read_truth(str(p)) == (head, [step])
    p.write_text(json.dumps(head) + "\n" + '{"t_start": 2.0}\n' + json.dumps(step) + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:2: step lacks t_end"):
        read_truth(str(p))
    p.write_text(json.dumps({"scenario": "busy"}) + "\n")
    with pytest.raises(ValueError, match="header lacks expected_verdict"):
        read_truth(str(p))
