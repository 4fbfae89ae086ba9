"""NVML checks for `make gpu-check`, run straight on the driver (pynvml), never through torch.

    python -m bench.gpu_check.nvml_checks latency --out latency.json
    python -m bench.gpu_check.nvml_checks idle --out idle.json
    python -m bench.gpu_check.nvml_checks observe --out DIR --watch-pid PID --truth T.jsonl
    python -m bench.gpu_check.nvml_checks power --seconds 15 --out power.json

Each writes ``{"rows": [{"step", "result", "detail"}, ...], ...}``: PASS/FAIL for each
assumption the fake NVML library (tests/fakenvml) makes about the real driver, INFO for
measured figures. Any failure becomes an ERROR row; these never raise to the caller.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Optional

# ---- what the fake library assumes (tests/fakenvml, NVML-NOTES.md) -----------------------
# nvmlDeviceGetSamples' period: 1/6 s on most products; accepted band around it, seconds.
SAMPLE_PERIOD_BAND_S = (0.10, 0.25)
# Ring depth: "on the order of 100+" (~120 at 1/6 s = 20 s of history); accepted band.
RING_DEPTH_BAND = (80, 200)
# A sample timestamp "matches" a clock when it lies this close behind that clock's now (the
# GPU is busy while we look, so the newest sample is well under a second old).
CLOCK_MATCH_S = 5.0
# Spin (a waiting kernel) draws a fraction of the power limit in this band (issue 3's range
# for the simulator's NCCL-style wait; public reports 18-27%).
SPIN_POWER_BAND = (0.10, 0.50)
# Utilization above which a power reading counts as "while spinning".
SPIN_UTIL_MIN_PCT = 90
# Per-call latency: at most this many calls, and at most this long, per NVML function.
LATENCY_REPS = 200
LATENCY_BUDGET_S = 0.75
# gpumon's own CPU cost: skip its start-up before measuring (imports, NVML init).
COST_WARMUP_S = 5.0


def row(step: str, result: str, detail: str) -> dict:
    return {"step": step, "result": result, "detail": detail}


def _nvml():
    import pynvml
    return pynvml


def _errname(exc: BaseException) -> str:
    return type(exc).__name__.replace("NVMLError_", "") or str(exc)


def _write(path: Optional[str], doc: dict) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True, default=str)


# ---- per-call latency -------------------------------------------------------------------

def latency_calls(N, h) -> list[tuple[str, Callable[[], object]]]:
    """Every NVML call gpumon makes (gpumon/nvml.py), on GPU 0."""
    seen = {"samples": 0, "putil": 0}

    def samples():
        try:
            _vt, got = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, seen["samples"])
            if got:
                seen["samples"] = got[-1].timeStamp
        except N.NVMLError_NotFound:
            pass  # nothing new since the last call: what gpumon meets most of the time

    def proc_util():
        try:
            got = N.nvmlDeviceGetProcessUtilization(h, seen["putil"])
            if got:
                seen["putil"] = max(s.timeStamp for s in got)
        except N.NVMLError_NotFound:
            pass

    fields = [N.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, N.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
              N.NVML_FI_DEV_POWER_INSTANT]
    return [
        ("nvmlInit", None),  # timed specially (shutdown untimed, init timed)
        ("nvmlDeviceGetCount", N.nvmlDeviceGetCount),
        ("nvmlDeviceGetHandleByIndex", lambda: N.nvmlDeviceGetHandleByIndex(0)),
        ("nvmlDeviceGetName", lambda: N.nvmlDeviceGetName(h)),
        ("nvmlDeviceGetUUID", lambda: N.nvmlDeviceGetUUID(h)),
        ("nvmlDeviceGetPciInfo", lambda: N.nvmlDeviceGetPciInfo(h)),
        ("nvmlDeviceGetMemoryInfo", lambda: N.nvmlDeviceGetMemoryInfo(h)),
        ("nvmlDeviceGetUtilizationRates", lambda: N.nvmlDeviceGetUtilizationRates(h)),
        ("nvmlDeviceGetSamples(util)", samples),
        ("nvmlDeviceGetPowerUsage", lambda: N.nvmlDeviceGetPowerUsage(h)),
        ("nvmlDeviceGetEnforcedPowerLimit", lambda: N.nvmlDeviceGetEnforcedPowerLimit(h)),
        ("nvmlDeviceGetClockInfo(SM)", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)),
        ("nvmlDeviceGetMaxClockInfo(SM)",
         lambda: N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM)),
        ("nvmlDeviceGetTemperature",
         lambda: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)),
        ("nvmlDeviceGetCurrentClocksEventReasons",
         lambda: N.nvmlDeviceGetCurrentClocksEventReasons(h)),
        ("nvmlDeviceGetTotalEnergyConsumption",
         lambda: N.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("nvmlDeviceGetFieldValues(pcie rx/tx, power instant)",
         lambda: N.nvmlDeviceGetFieldValues(h, fields)),
        ("nvmlDeviceGetPcieThroughput(rx)",
         lambda: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES)),
        ("nvmlDeviceGetComputeRunningProcesses(v3)",
         lambda: N.nvmlDeviceGetComputeRunningProcesses(h)),
        ("nvmlDeviceGetProcessUtilization", proc_util),
        ("nvmlDeviceGetMigMode", lambda: N.nvmlDeviceGetMigMode(h)),
    ]


def _time_call(fn: Callable[[], object], reps: int, budget_s: float) -> dict:
    times, errors = [], {}
    stop = time.perf_counter() + budget_s
    for _ in range(reps):
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # the latency of an error return is a latency too
            errors[_errname(exc)] = errors.get(_errname(exc), 0) + 1
        times.append(time.perf_counter() - t0)
        if t0 > stop:
            break
    return _stats(times, errors)


def _stats(times: list[float], errors: dict) -> dict:
    times = sorted(times)
    return {"n": len(times), "median_us": round(1e6 * statistics.median(times), 1),
            "p95_us": round(1e6 * times[min(len(times) - 1, int(0.95 * len(times)))], 1),
            "max_us": round(1e6 * times[-1], 1), "errors": errors}


def measure_latency(reps: int = LATENCY_REPS, budget_s: float = LATENCY_BUDGET_S) -> dict:
    N = _nvml()
    N.nvmlInit()
    out = {}
    h = N.nvmlDeviceGetHandleByIndex(0)
    for name, fn in latency_calls(N, h):
        if name == "nvmlInit":
            times, stop = [], time.perf_counter() + budget_s
            for _ in range(min(reps, 20)):  # init can take 100s of ms without persistence mode
                N.nvmlShutdown()
                t0 = time.perf_counter()
                N.nvmlInit()
                times.append(time.perf_counter() - t0)
                if time.perf_counter() > stop:
                    break
            h = N.nvmlDeviceGetHandleByIndex(0)
            out[name] = _stats(times, {})
            continue
        out[name] = _time_call(fn, reps, budget_s)
    N.nvmlShutdown()
    return out


def latency_rows(stats: dict) -> list[dict]:
    rows = []
    for name, s in stats.items():
        err = ", ".join(f"{k} x{v}" for k, v in s["errors"].items())
        if err and len(s["errors"]) == 1 and s["errors"].get(list(s["errors"])[0]) == s["n"]:
            rows.append(row(f"latency {name}", "INFO",
                            f"median {s['median_us']} us (every call: {err})"))
            continue
        rows.append(row(f"latency {name}", "INFO",
                        f"median {s['median_us']} us, p95 {s['p95_us']} us, max "
                        f"{s['max_us']} us, n={s['n']}" + (f"; errors {err}" if err else "")))
    return rows


# ---- the sample ring --------------------------------------------------------------------

def read_ring(N, h, last_seen: int = 0) -> tuple[Optional[list], Optional[str]]:
    """(samples, None) or (None, error name)."""
    try:
        _vt, got = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, last_seen)
        return list(got), None
    except N.NVMLError as exc:
        return None, _errname(exc)


def clocks_now() -> dict:
    return {"boottime": time.clock_gettime(time.CLOCK_BOOTTIME),
            "monotonic": time.clock_gettime(time.CLOCK_MONOTONIC), "epoch": time.time()}


def ring_rows(samples: list, now: dict, while_busy: bool = True) -> list[dict]:
    """PASS/FAIL rows for the ring's period, depth and clock, from one full read."""
    rows = []
    if len(samples) < 3:
        return [row("samples: period/depth/clock", "FAIL",
                    f"only {len(samples)} samples in the ring after a busy run")]
    ts = [s.timeStamp for s in samples]
    gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
    period = statistics.median(gaps)
    lo, hi = SAMPLE_PERIOD_BAND_S
    rows.append(row("samples: period ~1/6 s", "PASS" if lo <= period <= hi else "FAIL",
                    f"median gap {period:.4f} s (min {min(gaps):.4f}, max {max(gaps):.4f}), "
                    f"band {lo}-{hi} s"))
    span = (ts[-1] - ts[0]) / 1e6
    lo_n, hi_n = RING_DEPTH_BAND
    full = " (ring may not be full yet)" if not while_busy else ""
    rows.append(row("samples: ring depth ~120", "PASS" if lo_n <= len(ts) <= hi_n else "FAIL",
                    f"{len(ts)} samples spanning {span:.1f} s{full}, band {lo_n}-{hi_n}"))
    newest = ts[-1] / 1e6
    lags = {name: now[name] - newest for name in now}
    matches = [n for n, lag in lags.items() if -1.0 <= lag <= CLOCK_MATCH_S]
    lag_txt = ", ".join(f"{n} {lag:+.3f} s" for n, lag in lags.items())
    same = abs(now["boottime"] - now["monotonic"]) < 1.0
    note = "; BOOTTIME and MONOTONIC agree on this machine (never suspended): not told apart" \
        if same else ""
    rows.append(row("samples: timestamps on CLOCK_BOOTTIME",
                    "PASS" if "boottime" in matches else "FAIL",
                    f"newest sample lags each clock's now by: {lag_txt}; matches "
                    f"{', '.join(matches) or 'none'}{note}"))
    values = [s.sampleValue.uiVal for s in samples]
    rows.append(row("samples: values while busy", "INFO",
                    f"util samples min {min(values)} median {statistics.median(values)} "
                    f"max {max(values)} %"))
    return rows


# ---- idle and GPM -----------------------------------------------------------------------

def idle_check(wait_s: float = 2.0) -> list[dict]:
    N = _nvml()
    N.nvmlInit()
    try:
        h = N.nvmlDeviceGetHandleByIndex(0)
        rows = []
        util = N.nvmlDeviceGetUtilizationRates(h).gpu
        try:
            procs = N.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception:
            procs = []
        if util > 0 or procs:
            rows.append(row("samples: NOT_FOUND while idle", "SKIP",
                            f"GPU 0 not idle (util {util}%, {len(procs)} compute processes)"))
        else:
            first, err1 = read_ring(N, h, 0)
            last_seen = first[-1].timeStamp if first else 0
            time.sleep(wait_s)
            again, err2 = read_ring(N, h, last_seen)
            before = f"first read: {len(first)} old samples" if first is not None else \
                f"first read: {err1}"
            if err2 == "NotFound":
                rows.append(row("samples: NOT_FOUND while idle", "PASS",
                                f"{before}; after {wait_s:g} s idle: NOT_FOUND"))
            elif again is not None:
                vals = [s.sampleValue.uiVal for s in again]
                rows.append(row("samples: NOT_FOUND while idle", "FAIL",
                                f"{before}; after {wait_s:g} s idle: {len(again)} new samples "
                                f"(max {max(vals) if vals else '-'}%): the ring keeps filling"))
            else:
                rows.append(row("samples: NOT_FOUND while idle", "FAIL",
                                f"{before}; after {wait_s:g} s idle: {err2}"))
        rows.append(gpm_check(N, h))
        return rows
    finally:
        N.nvmlShutdown()


def gpm_check(N, h) -> dict:
    step = "GPM metrics (nvmlGpmQueryDeviceSupport)"
    try:
        sup = N.nvmlGpmQueryDeviceSupport(h)
    except Exception as exc:
        return row(step, "FAIL", f"query: {_errname(exc)}")
    if not sup.isSupportedDevice:
        return row(step, "FAIL", "isSupportedDevice=0")
    s1 = s2 = None
    try:
        s1, s2 = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
        N.nvmlGpmSampleGet(h, s1)
        time.sleep(0.2)
        N.nvmlGpmSampleGet(h, s2)
        mg = N.c_nvmlGpmMetricsGet_t()
        mg.version = N.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = 1
        mg.sample1, mg.sample2 = s1, s2
        mg.metrics[0].metricId = N.NVML_GPM_METRIC_SM_UTIL
        N.nvmlGpmMetricsGet(mg)
        m = mg.metrics[0]
        if m.nvmlReturn != 0:
            return row(step, "FAIL", f"supported, but SM_UTIL returned error {m.nvmlReturn}")
        return row(step, "PASS", f"supported; SM util over 0.2 s idle = {m.value:.2f}%")
    except Exception as exc:
        return row(step, "FAIL", f"supported, but sampling failed: {_errname(exc)}")
    finally:
        for s in (s1, s2):
            if s is not None:
                try:
                    N.nvmlGpmSampleFree(s)
                except Exception:
                    pass


# ---- observe: gpumon's own CPU cost, compute processes, the ring while busy --------------

def cpu_ticks(pid: int) -> Optional[int]:
    """utime + stime of a process, in clock ticks (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])   # utime, stime (stat fields 14, 15)


def rss_mib(pid: int) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as fh:
                text = fh.read().decode("ascii", "replace")
            ppid = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def pid_alive(pid: Optional[int]) -> bool:
    """True while the process runs (a zombie waiting to be reaped counts as gone)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return False
    return text[text.rindex(")") + 2:].split()[0] not in ("Z", "X")


def first_step_time(truth: Optional[str]) -> Optional[float]:
    if not truth or not os.path.exists(truth):
        return None
    with open(truth, encoding="utf-8") as fh:
        fh.readline()
        line = fh.readline()
    try:
        return float(json.loads(line)["t_start"])
    except (ValueError, KeyError, TypeError):
        return None


def cost_row(samples: list[tuple[float, int]], peak_rss: Optional[float], source: str,
             warmup_s: float = COST_WARMUP_S) -> dict:
    step = f"gpumon CPU cost (gpumon log, {source})"
    if len(samples) < 2 or samples[-1][0] - samples[0][0] < 3:
        return row(step, "ERROR", "gpumon log did not run long enough to measure")
    (t1, c1), (t2, c2) = samples[0], samples[-1]
    pct = 100.0 * (c2 - c1) / os.sysconf("SC_CLK_TCK") / (t2 - t1)
    rss = f", RSS {peak_rss:.0f} MiB" if peak_rss else ""
    return row(step, "INFO", f"{pct:.2f}% of one core over {t2 - t1:.1f} s after "
                             f"{warmup_s:g} s warm-up (utime+stime){rss}")


def observe(out_dir: str, seconds: float, watch_pid: Optional[int], truth: Optional[str],
            ring_after_s: float, python: str, sim: Optional[str],
            warmup_s: float = COST_WARMUP_S) -> dict:
    """Starts `gpumon log --duration SECONDS` beside a running workload and measures."""
    csv = os.path.join(out_dir, "gpumon-cost.csv")
    cmd = [python, "-m", "gpumon", "log", "--duration", f"{seconds:g}", "-o", csv, "--force"]
    if sim:
        cmd += ["--sim", sim]
    errlog = open(os.path.join(out_dir, "gpumon-cost.log"), "w")
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=errlog, stderr=subprocess.STDOUT)
    N = None
    if not sim:
        try:
            N = _nvml()
            N.nvmlInit()
        except Exception as exc:
            N = None
            nvml_err = _errname(exc)
    cost: list[tuple[float, int]] = []
    peak_rss: Optional[float] = None
    seen_pids: set[int] = set()
    workload_pids: set[int] = set()
    proc_errors: dict = {}
    ring: Optional[list[dict]] = None
    last_proc_check = 0.0
    while time.time() - t0 < seconds + 60:
        now = time.time()
        log_alive = proc.poll() is None
        # the ring is read once the workload has been busy long enough, even if that comes
        # after gpumon log has finished
        ring_pending = N is not None and ring is None and pid_alive(watch_pid)
        if not log_alive and not ring_pending:
            break
        if now - t0 >= warmup_s and now - t0 <= seconds - 1:
            c = cpu_ticks(proc.pid)
            if c is not None:
                cost.append((time.monotonic(), c))
            r = rss_mib(proc.pid)
            if r is not None:
                peak_rss = max(peak_rss or 0, r)
        if N is not None and log_alive and now - last_proc_check >= 2.0:
            last_proc_check = now
            if watch_pid:
                workload_pids |= descendants(watch_pid)
            for i in range(N.nvmlDeviceGetCount()):
                try:
                    hi = N.nvmlDeviceGetHandleByIndex(i)
                    seen_pids |= {p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(hi)}
                except Exception as exc:
                    proc_errors[_errname(exc)] = proc_errors.get(_errname(exc), 0) + 1
        if N is not None and ring is None:
            first = first_step_time(truth)
            if first is not None and now >= first + ring_after_s:
                h = N.nvmlDeviceGetHandleByIndex(0)
                samples, err = read_ring(N, h, 0)
                clocks = clocks_now()
                ring = ring_rows(samples, clocks) if samples is not None else [
                    row("samples: period/depth/clock", "FAIL", f"read while busy: {err}")]
        time.sleep(0.5)
    try:
        rc = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "killed"
    errlog.close()
    source = f"sim {sim}, not the driver" if sim else "NVML"
    rows = [cost_row(cost, peak_rss, source, warmup_s)]
    if rc != 0:
        rows[0]["detail"] += f"; gpumon log exited {rc} (see gpumon-cost.log)"
        if rows[0]["result"] == "INFO":
            rows[0]["result"] = "ERROR"
    if sim:
        rows.append(row("gpumon never a compute process", "SKIP", "CPU mode: no driver"))
        rows.append(row("samples: period/depth/clock", "SKIP", "CPU mode: no driver"))
    elif N is None:
        rows.append(row("gpumon never a compute process", "ERROR", f"nvmlInit: {nvml_err}"))
    else:
        rows.append(compute_process_row(proc.pid, watch_pid, seen_pids, workload_pids,
                                        proc_errors))
        rows.extend(ring or [row("samples: period/depth/clock", "ERROR",
                                 "the workload's first step never came (no truth file?)")])
        N.nvmlShutdown()
    return {"rows": rows, "gpumon_log_pid": proc.pid, "gpumon_run_pid": watch_pid,
            "seen_pids": sorted(seen_pids), "workload_pids": sorted(workload_pids)}


def compute_process_row(log_pid: int, run_pid: Optional[int], seen: set[int],
                        workload: set[int], errors: dict) -> dict:
    step = "gpumon never a compute process"
    ours = {log_pid} | ({run_pid} if run_pid else set())
    if errors and not seen:
        return row(step, "ERROR", "process list: " + ", ".join(f"{k} x{v}" for k, v in
                                                              errors.items()))
    if ours & seen:
        return row(step, "FAIL", f"gpumon PID(s) {sorted(ours & seen)} listed by "
                                 f"nvmlDeviceGetComputeRunningProcesses")
    if workload & seen:
        return row(step, "PASS", f"workload PID(s) {sorted(workload & seen)} listed, gpumon "
                                 f"PIDs {sorted(ours)} never")
    return row(step, "INFO", f"gpumon PIDs {sorted(ours)} never listed, but neither was the "
                             f"workload (NVML listed {sorted(seen) or 'none'}: another PID "
                             "namespace?): inconclusive")


# ---- spin power -------------------------------------------------------------------------

def power_watch(seconds: float, interval: float = 0.25) -> list[dict]:
    """Polls GPU 0 while the spin workload runs: power (1 s average and instantaneous) as a
    fraction of the enforced limit, over the readings with utilization >= SPIN_UTIL_MIN_PCT."""
    N = _nvml()
    N.nvmlInit()
    try:
        h = N.nvmlDeviceGetHandleByIndex(0)
        limit_w = N.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        avg, inst, clocks = [], [], []
        end = time.time() + seconds
        while time.time() < end:
            util = N.nvmlDeviceGetUtilizationRates(h).gpu
            if util >= SPIN_UTIL_MIN_PCT:
                avg.append(N.nvmlDeviceGetPowerUsage(h) / 1000.0)
                try:
                    fv = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_POWER_INSTANT])[0]
                    if fv.nvmlReturn == 0:
                        inst.append(fv.value.uiVal / 1000.0)
                except Exception:
                    pass
                try:
                    clocks.append(N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM))
                except Exception:
                    pass
            time.sleep(interval)
    finally:
        N.nvmlShutdown()
    step = "spin power fraction of the limit"
    if len(avg) < 3:
        return [row(step, "ERROR", f"only {len(avg)} readings at >= {SPIN_UTIL_MIN_PCT}% util "
                                   "(did the spin kernel run?)")]
    frac = statistics.median(avg) / limit_w
    lo, hi = SPIN_POWER_BAND
    inst_txt = f", instantaneous {statistics.median(inst) / limit_w:.2f}" if inst else ""
    clk = f", SM clock {statistics.median(clocks):.0f} MHz" if clocks else ""
    return [row(step, "PASS" if lo <= frac <= hi else "FAIL",
                f"{frac:.2f} of {limit_w:.0f} W (median of {len(avg)} readings at util >= "
                f"{SPIN_UTIL_MIN_PCT}%){inst_txt}{clk}; sim band {lo}-{hi}")]


# ---- command line -----------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check.nvml_checks")
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("latency")
    s.add_argument("--reps", type=int, default=LATENCY_REPS)
    s.add_argument("--out")
    s = sub.add_parser("idle")
    s.add_argument("--out")
    s = sub.add_parser("observe")
    s.add_argument("--out", required=True, help="folder for the cost CSV and observe.json")
    s.add_argument("--seconds", type=float, default=30.0)
    s.add_argument("--watch-pid", type=int)
    s.add_argument("--truth")
    s.add_argument("--ring-after-s", type=float, default=22.0)
    s.add_argument("--sim", help="CPU mode: run gpumon log on this simulated scenario")
    s.add_argument("--warmup-s", type=float, default=COST_WARMUP_S,
                   help="gpumon start-up left out of the CPU cost")
    s = sub.add_parser("power")
    s.add_argument("--seconds", type=float, default=15.0)
    s.add_argument("--out")
    args = p.parse_args(argv)
    doc: dict
    try:
        if args.what == "latency":
            stats = measure_latency(args.reps)
            doc = {"rows": latency_rows(stats), "latency": stats}
        elif args.what == "idle":
            doc = {"rows": idle_check()}
        elif args.what == "observe":
            doc = observe(args.out, args.seconds, args.watch_pid, args.truth,
                          args.ring_after_s, sys.executable, args.sim, args.warmup_s)
            args.out = os.path.join(args.out, "observe.json")
        else:
            doc = {"rows": power_watch(args.seconds)}
    except Exception as exc:
        doc = {"rows": [row(args.what, "ERROR", f"{type(exc).__name__}: {exc}")]}
    _write(args.out, doc)
    for r in doc["rows"]:
        print(f"{r['result']:5} {r['step']}: {r['detail']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
