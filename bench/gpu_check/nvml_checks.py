"""NVML checks for `make gpu-check`, run straight on the driver (pynvml), never through torch.

    python -m bench.gpu_check.nvml_checks latency --out latency.json
    python -m bench.gpu_check.nvml_checks idle --out idle.json
    python -m bench.gpu_check.nvml_checks gpm --out gpm.json
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

from bench.callcost import PROFILE as CALL_COST_PROFILE
from gpumon.nvml import GPM_METRICS

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


# ---- idle -----------------------------------------------------------------------

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
        return rows
    finally:
        N.nvmlShutdown()


# ---- GPM: support per GPU, the cost of gpumon's read, SM activity under load -----------

# gpumon's GPM read of one GPU a poll: one nvmlGpmSampleGet, one nvmlGpmMetricsGet of these.
GPM_METRIC_NAMES = tuple(mid for _, mid in GPM_METRICS)
GPM_COST_REPS = 100
# What the simulator assumes (gpumon/sim/observe.py SPIN_GPM, gpumon/sim/params.py
# sm_active_compute): a rank spinning in a collective keeps a few per cent of the SMs active,
# computing keeps 40-95%. Spin at most this share, work at least that.
SPIN_SM_ACTIVE_MAX = 0.10
WORK_SM_ACTIVE_MIN = 0.40
# Seconds of GPM readings under each load, and the most a load may take to start.
GPM_LOAD_S = 6.0
GPM_LOAD_START_S = 45.0


def profile_gpm_us(profile: str = CALL_COST_PROFILE) -> float:
    """What the call-cost bench charges one GPM read: nvmlGpmSampleGet at the profile's gpm
    figure, nvmlGpmMetricsGet at its plain per-call figure (µs)."""
    plain, groups = 0.0, {}
    for item in profile.split(","):
        name, _, us = item.rpartition("=")
        if name:
            groups[name] = float(us)
        else:
            plain = float(us)
    return groups.get("gpm", plain) + plain


def gpm_support(N, h) -> tuple[bool, str]:
    try:
        sup = N.nvmlGpmQueryDeviceSupport(h)
    except Exception as exc:
        return False, f"query: {_errname(exc)}"
    return bool(sup.isSupportedDevice), f"isSupportedDevice={sup.isSupportedDevice}"


def _gpm_get(N, names=GPM_METRIC_NAMES):
    mg = N.c_nvmlGpmMetricsGet_t()
    mg.version = N.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(names)
    for i, name in enumerate(names):
        mg.metrics[i].metricId = getattr(N, name)
    mg.sample1, mg.sample2 = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
    return mg


def _gpm_free(N, mg) -> None:
    for s in (mg.sample1, mg.sample2):
        try:
            N.nvmlGpmSampleFree(s)
        except Exception:
            pass


def gpm_cost(N, h, reps: int = GPM_COST_REPS) -> dict:
    """Times gpumon's GPM read of one GPU, call by call: {call: stats}, with the metrics that
    answered on the last read."""
    mg = _gpm_get(N)
    try:
        N.nvmlGpmSampleGet(h, mg.sample2)
        get, metrics, both = [], [], []
        for _ in range(reps):
            mg.sample1, mg.sample2 = mg.sample2, mg.sample1
            t0 = time.perf_counter()
            N.nvmlGpmSampleGet(h, mg.sample2)
            t1 = time.perf_counter()
            N.nvmlGpmMetricsGet(mg)
            t2 = time.perf_counter()
            get.append(t1 - t0)
            metrics.append(t2 - t1)
            both.append(t2 - t0)
        ok = sum(1 for m in mg.metrics[:mg.numMetrics] if m.nvmlReturn == 0)
    finally:
        _gpm_free(N, mg)
    return {"nvmlGpmSampleGet": _stats(get, {}), "nvmlGpmMetricsGet": _stats(metrics, {}),
            "read": _stats(both, {}), "metrics_ok": ok, "metrics": len(GPM_METRIC_NAMES)}


def gpm_gpu_rows(N, i: int, reps: int) -> tuple[list[dict], Optional[dict]]:
    """Support and, where supported, the cost of one read, of GPU i."""
    h = N.nvmlDeviceGetHandleByIndex(i)
    ok, why = gpm_support(N, h)
    if not ok:
        return [row(f"GPM GPU {i}: support", "INFO", f"not supported ({why}): gpumon leaves "
                    "its GPM columns empty on this GPU")], None
    rows = [row(f"GPM GPU {i}: support", "PASS", f"supported ({why})")]
    try:
        cost = gpm_cost(N, h, reps)
    except Exception as exc:
        return rows + [row(f"GPM GPU {i}: cost of one read", "FAIL",
                           f"supported, but a read failed: {_errname(exc)}")], None
    get, met, read = cost["nvmlGpmSampleGet"], cost["nvmlGpmMetricsGet"], cost["read"]
    dear = profile_gpm_us()
    rows.append(row(f"GPM GPU {i}: cost of one read",
                    "PASS" if read["median_us"] <= dear else "FAIL",
                    f"nvmlGpmSampleGet median {get['median_us']} us (p95 {get['p95_us']}), "
                    f"nvmlGpmMetricsGet of {cost['metrics']} metrics median "
                    f"{met['median_us']} us; both {read['median_us']} us (p95 "
                    f"{read['p95_us']}), n={read['n']}; {cost['metrics_ok']}/"
                    f"{cost['metrics']} metrics answered; the call-cost bench charges "
                    f"{dear:g} us"))
    return rows, cost


def gpm_check(reps: int = GPM_COST_REPS) -> dict:
    """GPM support and read cost of every GPU."""
    N = _nvml()
    N.nvmlInit()
    rows, costs = [], {}
    try:
        for i in range(N.nvmlDeviceGetCount()):
            got, cost = gpm_gpu_rows(N, i, reps)
            rows += got
            if cost:
                costs[i] = cost
    finally:
        N.nvmlShutdown()
    return {"rows": rows, "cost": costs}


# The metrics read under load: SM activity, SM occupancy, tensor activity (GPM per cent).
LOAD_METRICS = ("NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_SM_OCCUPANCY",
                "NVML_GPM_METRIC_ANY_TENSOR_UTIL")


def gpm_seconds(N, h, seconds: float) -> list[tuple[float, ...]]:
    """(SM activity, occupancy, tensor activity as fractions, utilization %) of each second."""
    mg = _gpm_get(N, LOAD_METRICS)
    out = []
    try:
        N.nvmlGpmSampleGet(h, mg.sample2)
        end = time.time() + seconds
        while time.time() < end:
            time.sleep(1.0)
            mg.sample1, mg.sample2 = mg.sample2, mg.sample1
            N.nvmlGpmSampleGet(h, mg.sample2)
            N.nvmlGpmMetricsGet(mg)
            vals = [m.value / 100.0 if m.nvmlReturn == 0 else float("nan")
                    for m in mg.metrics[:mg.numMetrics]]
            out.append((*vals, float(N.nvmlDeviceGetUtilizationRates(h).gpu)))
    finally:
        _gpm_free(N, mg)
    return out


def start_load(load: str, seconds: float, python: str, ready: str) -> subprocess.Popen:
    if os.path.exists(ready):
        os.remove(ready)
    return subprocess.Popen([python, "-m", "bench.gpu_check.gpm_load", load, "--seconds",
                             f"{seconds:g}", "--ready", ready], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(proc: subprocess.Popen, ready: str, within_s: float) -> dict:
    end = time.time() + within_s
    while time.time() < end:
        if os.path.exists(ready):
            with open(ready, encoding="utf-8") as fh:
                return json.load(fh)
        if proc.poll() is not None:
            return {"error": f"the load exited {proc.returncode} before it ran"}
        time.sleep(0.2)
    return {"error": f"the load did not start within {within_s:g} s"}


def stop_load(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass


def activity_row(load: str, how: str, secs: list[tuple[float, ...]]) -> dict:
    step = f"GPM SM activity under {load}"
    if len(secs) < 2:
        return row(step, "ERROR", f"{how}: only {len(secs)} readings")
    sm, occ, tensor, util = (statistics.median(col) for col in zip(*secs))
    if load == "spin":
        good = sm <= SPIN_SM_ACTIVE_MAX and util >= SPIN_UTIL_MIN_PCT
        want = f"want utilization >= {SPIN_UTIL_MIN_PCT}% at SM activity <= {SPIN_SM_ACTIVE_MAX}"
    else:
        good = sm >= WORK_SM_ACTIVE_MIN
        want = f"want SM activity >= {WORK_SM_ACTIVE_MIN}"
    return row(step, "PASS" if good else "FAIL",
               f"{how}: SM activity {sm:.3f}, occupancy {occ:.3f}, tensor {tensor:.3f} at "
               f"utilization {util:.0f}% (medians of {len(secs)} one-second GPM readings, "
               f"GPU 0); {want}")


def gpm_activity(python: str, seconds: float = GPM_LOAD_S, out_dir: str = ".") -> list[dict]:
    """SM activity on GPU 0 under the matmul loop (work), then under a spinning wait (spin)."""
    N = _nvml()
    N.nvmlInit()
    rows = []
    try:
        h = N.nvmlDeviceGetHandleByIndex(0)
        ok, why = gpm_support(N, h)
        for load in ("work", "spin"):
            if not ok:
                rows.append(row(f"GPM SM activity under {load}", "SKIP", f"GPU 0: {why}"))
                continue
            ready = os.path.join(out_dir, f"gpm-{load}.ready.json")
            proc = start_load(load, seconds + GPM_LOAD_START_S, python, ready)
            try:
                state = wait_ready(proc, ready, GPM_LOAD_START_S)
                if "how" in state:
                    time.sleep(1.0)                     # past the load's first kernels
                    rows.append(activity_row(load, state["how"], gpm_seconds(N, h, seconds)))
                else:
                    rows.append(row(f"GPM SM activity under {load}",
                                    "SKIP" if "skip" in state else "ERROR",
                                    state.get("skip") or state.get("error")))
            finally:
                stop_load(proc)
    finally:
        N.nvmlShutdown()
    return rows


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
    s = sub.add_parser("gpm")
    s.add_argument("--reps", type=int, default=GPM_COST_REPS)
    s.add_argument("--load-seconds", type=float, default=GPM_LOAD_S,
                   help="seconds of readings under each load (0: no loads)")
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
        elif args.what == "gpm":
            doc = gpm_check(args.reps)
            if args.load_seconds > 0:
                where = os.path.dirname(os.path.abspath(args.out or "."))
                doc["rows"] += gpm_activity(sys.executable, args.load_seconds, where)
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
