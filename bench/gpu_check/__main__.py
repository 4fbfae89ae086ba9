"""`make gpu-check`: gpumon against real GPUs and reference workloads, in at most 5 minutes.

Run as ``sh bench/gpu_check.sh`` (which picks a Python with torch and pynvml, and sets
PYTHONPATH) or ``python -m bench.gpu_check`` from the repository root.

Steps, each tolerant (a failing step records FAIL/ERROR in one line and the next one runs):
``gpumon list``; the NVML assumptions checked at idle (NOT_FOUND); the latency of every
NVML call gpumon makes; GPM (support per GPU, the cost of gpumon's GPM read of one GPU, SM
activity on GPU 0 under a matmul loop and under a rank spinning in a collective); then each
single-GPU workload under ``gpumon run --log``, scored from
``gpumon analyze --format json`` against the workload's own ground truth. Beside ``busy`` it
measures gpumon's own CPU cost (``gpumon log --duration``), checks that gpumon never shows as a
compute process, and reads the driver's sample ring (period, depth, clock); beside ``spin`` it
reads the power the waiting kernel draws. Results go to ``$GPU_CHECK_OUT``, else ``$OUT``,
else ``bench/results/``, as they come: ``gpu-check.md`` (the table, rewritten after every
step) and ``gpu-check/`` (logs, CSVs, truth files, JSON).

Environment:
  GPU_CHECK_CPU=1        no GPU: each workload runs a few seconds on the CPU (--tiny) under
                         ``gpumon run --sim``, NVML and GPM steps are SKIP (exercises the
                         whole script)
  GPU_CHECK_SCENARIOS    comma list (default: every scenario this machine can show)
  GPU_CHECK_SECONDS      workload seconds (default 15 on a GPU, 3 on the CPU)
  GPU_CHECK_BUSY_SECONDS the busy run, long enough to fill the sample ring (default 25)
  GPU_CHECK_BUDGET_S     total time allowed (default 290); steps that no longer fit are SKIP
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from typing import Optional

from bench.gpu_check import score as scoring

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORDER = ("busy", "data_starvation", "io_fetch", "main_process", "spin", "checkpoint",
         "sync_stall", "rank_data_stall", "dataparallel")
DDP = ("sync_stall", "rank_data_stall")
# Seconds a workload needs beyond --seconds: interpreter and torch start, CUDA init,
# calibration, io_fetch's files, DDP's second process; the step is SKIP when it cannot fit.
WORKLOAD_OVERHEAD_S = {"gpu": 12.0, "cpu": 8.0}
DEFAULT_BUDGET_S = 290.0


class Check:
    def __init__(self, out_root: str, cpu: bool, budget_s: float, python: str):
        self.cpu = cpu
        self.python = python
        self.root = out_root
        self.dir = os.path.join(out_root, "gpu-check")
        os.makedirs(self.dir, exist_ok=True)
        self.table = os.path.join(out_root, "gpu-check.md")
        self.rows: list[dict] = []
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.title = ""
        self.env = dict(os.environ)
        paths = [ROOT] + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        self.env.setdefault("NO_COLOR", "1")

    # -- bookkeeping
    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def add(self, step: str, result: str, detail: str) -> None:
        detail = " ".join(str(detail).split())
        r = {"step": step, "result": result, "detail": detail,
             "t": round(time.monotonic() - self.t0, 1)}
        self.rows.append(r)
        print(f"[{r['t']:6.1f}s] {result:5} {step}: {detail}", flush=True)
        with open(os.path.join(self.dir, "rows.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(r) + "\n")
        self.write_table()

    def add_rows(self, rows: list[dict], prefix: str = "") -> None:
        for r in rows:
            self.add(prefix + r["step"], r["result"], r["detail"])

    def fits(self, step: str, need_s: float) -> bool:
        if self.left() >= need_s:
            return True
        self.add(step, "SKIP", f"time budget: {self.left():.0f} s left, needs ~{need_s:.0f} s")
        return False

    def markdown(self) -> str:
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r["result"]] = counts.get(r["result"], 0) + 1
        lines = [f"# gpumon gpu-check: {self.title}", "",
                 f"{datetime.datetime.now().isoformat(timespec='seconds')}, "
                 f"{time.monotonic() - self.t0:.0f} s; "
                 + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
        if self.cpu:
            lines += ["**CPU MODE**: workloads ran on the CPU under `gpumon run --sim`; verdicts "
                      "are the simulator's, not evidence about real GPUs.", ""]
        lines += ["| step | result | detail |", "|---|---|---|"]
        for r in self.rows:
            detail = r["detail"].replace("|", "\\|")
            lines.append(f"| {r['step']} | {r['result']} | {detail} |")
        return "\n".join(lines) + "\n"

    def write_table(self) -> None:
        tmp = self.table + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(self.markdown())
        os.replace(tmp, self.table)

    # -- running things
    def run(self, name: str, cmd: list[str], timeout: float) -> tuple[Optional[int], str]:
        """Runs cmd with output to gpu-check/<name>.log; (exit code or None on timeout,
        the last non-empty output line)."""
        log = os.path.join(self.dir, f"{name}.log")
        with open(log, "w", encoding="utf-8") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            try:
                rc: Optional[int] = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                                   cwd=ROOT, env=self.env,
                                                   timeout=max(1.0, timeout)).returncode
            except subprocess.TimeoutExpired:
                rc = None
        return rc, last_line(log)

    def py(self, *args: str) -> list[str]:
        return [self.python, *args]


def last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [ln.strip() for ln in fh if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def probe(python: str, env: dict) -> dict:
    """torch/CUDA/GPU facts from a child (this process never imports torch)."""
    code = ("import json,sys\nd={'python': sys.version.split()[0]}\n"
            "try:\n import torch\n d['torch']=torch.__version__\n"
            " d['cuda']=torch.cuda.is_available()\n"
            " d['gpus']=torch.cuda.device_count() if d['cuda'] else 0\n"
            "except Exception as e:\n d['torch']=None; d['torch_error']=str(e)\n"
            "try:\n import pynvml as N\n N.nvmlInit()\n h=N.nvmlDeviceGetHandleByIndex(0)\n"
            " n=N.nvmlDeviceGetName(h); d['gpu_name']=n if isinstance(n,str) else n.decode()\n"
            " v=N.nvmlSystemGetDriverVersion(); d['driver']=v if isinstance(v,str) else v.decode()\n"
            " d['nvml_gpus']=N.nvmlDeviceGetCount()\nexcept Exception as e:\n"
            " d['nvml_error']=type(e).__name__\nprint(json.dumps(d))\n")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                             timeout=60).stdout
        return json.loads(out.strip().splitlines()[-1])
    except Exception as exc:  # noqa: BLE001 - any failure is reported, never raised
        return {"probe_error": f"{type(exc).__name__}: {exc}"}


def sim_for(scenario: str) -> str:
    """CPU mode: the simulated node gpumon watches while the workload runs on the CPU."""
    if scenario == "spin":
        return "sync_stall:2"
    return f"{scenario}:2" if scenario in DDP + ("dataparallel",) else f"{scenario}:1"


def run_scenario(c: Check, scn: str, seconds: float, gpus: int) -> None:
    step = f"scenario {scn}"
    if scn == "dataparallel" and not c.cpu and gpus < 2:
        c.add(step, "SKIP", "one GPU: DataParallel over one device is the busy run again")
        return
    if scn == "spin" and c.cpu:
        # still run it: the workload must say why it skips
        pass
    overhead = WORKLOAD_OVERHEAD_S["cpu" if c.cpu else "gpu"] * (1.6 if scn in DDP else 1.0)
    if not c.fits(step, seconds + overhead + 5):
        return
    csv = os.path.join(c.dir, f"{scn}.csv")
    truth = os.path.join(c.dir, f"{scn}.truth.jsonl")
    for p in (csv, truth):
        if os.path.exists(p):
            os.remove(p)
    work = c.py("-m", "workloads.train", "--scenario", scn, "--seconds", f"{seconds:g}",
                "--out", truth)
    if c.cpu:
        work += ["--device", "cpu", "--tiny"]
    cmd = c.py("-m", "gpumon", "run", "--log", csv)
    if c.cpu:
        cmd += ["--sim", sim_for(scn)]
    cmd += ["--", *work]
    log = os.path.join(c.dir, f"{scn}.run.log")
    side: Optional[subprocess.Popen] = None
    side_out = None
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=c.env)
        if scn == "busy":
            obs = ["observe", "--out", c.dir, "--seconds", str(BUSY_COST_S(c)), "--watch-pid",
                   str(proc.pid), "--truth", truth,
                   "--ring-after-s", str(max(1.0, seconds - 3))]
            if c.cpu:
                obs += ["--sim", "busy:1", "--warmup-s", "2"]
            side_out = os.path.join(c.dir, "observe.json")
        elif scn == "spin" and not c.cpu:
            side_out = os.path.join(c.dir, "power.json")
            obs = ["power", "--seconds", str(seconds + 6), "--out", side_out]
        if side_out:
            if os.path.exists(side_out):
                os.remove(side_out)
            side = subprocess.Popen(c.py("-m", "bench.gpu_check.nvml_checks", *obs),
                                    stdout=open(os.path.join(c.dir, f"{scn}.side.log"), "w"),
                                    stderr=subprocess.STDOUT, cwd=ROOT, env=c.env)
        try:
            rc: Optional[int] = proc.wait(timeout=max(5.0, min(c.left(), seconds + 3 * overhead)))
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            rc = None
    if side is not None:
        try:
            side.wait(timeout=max(5.0, min(c.left(), 40)))
        except subprocess.TimeoutExpired:
            side.kill()
        try:
            with open(side_out, encoding="utf-8") as fh:
                side_rows = json.load(fh)["rows"]
        except (OSError, ValueError, KeyError) as exc:
            side_rows = [{"step": f"{scn}: side checks", "result": "ERROR",
                          "detail": f"no result ({type(exc).__name__})"}]
        if scn == "spin" and _truth_steps(truth) == 0:  # the readings were not of the spin
            side_rows = [dict(r, result="SKIP", detail="the spin workload did not run")
                         for r in side_rows]
        c.add_rows(side_rows)
    tail = last_line(log)
    if rc is None:
        c.add(step, "ERROR", f"timed out; last line: {tail}")
        return
    skipped = [ln for ln in _text(log).splitlines() if "workloads:" in ln and "skipped:" in ln]
    if rc == 0 and skipped and _truth_steps(truth) == 0:
        c.add(step, "SKIP", skipped[-1].split("skipped:", 1)[1].strip())
        return
    if rc != 0:
        c.add(step, "ERROR", f"gpumon run exited {rc}; last line: {tail}")
        return
    analysis = os.path.join(c.dir, f"{scn}.analyze.json")
    if not c.fits(f"{step}: analyze", 10):
        return
    arc, atail = c.run(f"{scn}.analyze", c.py("-m", "gpumon", "analyze", "--format", "json",
                                              csv), timeout=min(c.left(), 60))
    if arc != 0:
        c.add(step, "ERROR", f"gpumon analyze exited {arc}; last line: {atail}")
        return
    _split_json_log(os.path.join(c.dir, f"{scn}.analyze.log"), analysis)
    try:
        res = scoring.score_files(analysis, truth)
    except scoring.ScoreError as exc:
        c.add(step, "ERROR", f"score: {exc}")
        return
    with open(os.path.join(c.dir, f"{scn}.score.json"), "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=1, sort_keys=True)
    note = f" [{res['note']}]" if res.get("note") else ""
    c.add(step, res["result"], res["detail"] + note)


def BUSY_COST_S(c: Check) -> float:  # noqa: N802 - reads like the constant it stands for
    return 8.0 if c.cpu else 30.0


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _truth_steps(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return max(0, sum(1 for ln in fh if ln.strip()) - 1)
    except OSError:
        return 0


def _split_json_log(log: str, out: str) -> None:
    """The analyze log holds the command line then the JSON document: keep the JSON."""
    text = _text(log)
    start = text.find("{")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text[start:] if start >= 0 else "")


def environment_step(c: Check, facts: dict) -> None:
    gpus = int(facts.get("nvml_gpus") or 0)
    c.title = ("CPU mode" if c.cpu else f"{facts.get('gpu_name', 'no GPU found')} x{gpus}, "
               f"driver {facts.get('driver', '?')}") + f" ({platform.node()})"
    c.add("environment", "INFO", ", ".join(f"{k} {v}" for k, v in facts.items()))
    if not c.cpu and not gpus:
        c.add("driver", "ERROR", f"NVML found no GPU ({facts.get('nvml_error', '?')}); "
              "use GPU_CHECK_CPU=1 on a machine without one")
    if not c.cpu and not facts.get("cuda"):
        c.add("torch", "ERROR", f"torch {facts.get('torch')} sees no CUDA device: the "
              "workloads cannot run on the GPU")


def list_step(c: Check) -> None:
    if not c.fits("gpumon list", 10):
        return
    rc, tail = c.run("gpumon-list", c.py("-m", "gpumon", "list"), timeout=30)
    if rc == 0:
        c.add("gpumon list", "PASS", _first_gpu_line(os.path.join(c.dir, "gpumon-list.log")))
    elif c.cpu and rc is not None and "no NVIDIA driver" in tail:
        c.add("gpumon list", "SKIP", f"skipped: no GPU (CPU mode): {tail}")
    else:
        c.add("gpumon list", "FAIL" if rc is not None else "ERROR", f"exit {rc}: {tail}")


# The NVML steps (bench/gpu_check/nvml_checks.py) and the seconds each needs at most.
NVML_STEPS = (("idle", 20), ("latency", 45), ("gpm", 75))


def nvml_steps(c: Check) -> None:
    """NVML at idle, the latency of every call, GPM: each in a child, its rows kept."""
    for what, need in NVML_STEPS:
        step = f"nvml {what}"
        if c.cpu:
            c.add(step, "SKIP", "skipped: no GPU (CPU mode, no driver)")
            continue
        if not c.fits(step, need):
            continue
        out = os.path.join(c.dir, f"nvml-{what}.json")
        rc, tail = c.run(f"nvml-{what}", c.py("-m", "bench.gpu_check.nvml_checks", what,
                                              "--out", out), timeout=min(c.left(), need * 2))
        try:
            with open(out, encoding="utf-8") as fh:
                c.add_rows(json.load(fh)["rows"])
        except (OSError, ValueError, KeyError):
            c.add(step, "ERROR", f"exit {rc}: {tail}")


def workload_steps(c: Check, gpus: int) -> None:
    seconds = float(os.environ.get("GPU_CHECK_SECONDS") or (3 if c.cpu else 15))
    busy_s = float(os.environ.get("GPU_CHECK_BUSY_SECONDS") or (seconds if c.cpu else 25))
    wanted = [s.strip() for s in os.environ.get("GPU_CHECK_SCENARIOS", "").split(",")
              if s.strip()] or list(ORDER)
    for scn in wanted:
        if scn not in ORDER:
            c.add(f"scenario {scn}", "ERROR", f"unknown scenario (known: {', '.join(ORDER)})")
            continue
        try:
            run_scenario(c, scn, busy_s if scn == "busy" else seconds, gpus)
        except Exception as exc:  # noqa: BLE001 - one step's failure never stops the rest
            c.add(f"scenario {scn}", "ERROR", f"{type(exc).__name__}: {exc}")


def main() -> int:
    cpu = os.environ.get("GPU_CHECK_CPU", "") not in ("", "0")
    out_root = os.environ.get("GPU_CHECK_OUT") or os.environ.get("OUT") or os.path.join(
        ROOT, "bench", "results")
    budget = float(os.environ.get("GPU_CHECK_BUDGET_S") or (600 if cpu else DEFAULT_BUDGET_S))
    c = Check(out_root, cpu, budget, os.environ.get("GPU_CHECK_PYTHON") or sys.executable)
    facts = probe(c.python, c.env)
    environment_step(c, facts)
    list_step(c)
    nvml_steps(c)
    workload_steps(c, int(facts.get("nvml_gpus") or 0))
    c.write_table()
    print()
    print(c.markdown())
    print(f"gpu-check: table in {c.table}, files in {c.dir}")
    return 0


def _first_gpu_line(log: str) -> str:
    lines = [ln.strip() for ln in _text(log).splitlines()[1:] if ln.strip()]
    return " / ".join(lines[:3])[:300] if lines else "(no output)"


if __name__ == "__main__":
    raise SystemExit(main())
