"""Measure, on a machine with an NVIDIA GPU, the driver behaviour the fake NVML library assumes.

Each numbered assumption in tests/fakenvml/README.md gets one line: what was measured and whether
it matches the fake (CONFIRMED), does not (DIFFERS), or could not be observed (UNOBSERVED, e.g. no
busy or no idle period during the run). Keep a GPU workload running for part of the window and
idle for part (a training job that pauses, or start one midway), e.g.:

    python tests/fakenvml/check_driver.py --gpu 0 --seconds 12

It only reads NVML (no CUDA context). Run against the fake library it confirms the fake's own
assumptions, which is how the test suite checks this script.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time

# What the fake does (README.md "Assumptions"): the values compared against.
FAKE_SAMPLE_PERIOD_S = 1 / 6
FAKE_RING_DEPTH = 120
# How close a timestamp must be to a clock to say it is on that clock (s).
CLOCK_MATCH_S = 5.0
# A poll interval well under the sample period, so every sample arrives on its own.
POLL_S = 0.05


def boot_us() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6


def epoch_us() -> float:
    return time.time() * 1e6


def which_clock(ts_us: float) -> str:
    if abs(ts_us - boot_us()) < CLOCK_MATCH_S * 1e6:
        return "boot"
    if abs(ts_us - epoch_us()) < CLOCK_MATCH_S * 1e6:
        return "epoch"
    return "other (%.0f s from boot clock, %.0f s from epoch)" % ((ts_us - boot_us()) / 1e6,
                                                                   (ts_us - epoch_us()) / 1e6)


def check(N, gpu: int, seconds: float) -> list[dict]:
    out: list[dict] = []

    def report(num, name, measured, verdict):
        out.append(dict(assumption=num, name=name, measured=measured, verdict=verdict))

    h = N.nvmlDeviceGetHandleByIndex(gpu)
    lib = N.nvmlLib

    # 2, 6: ring depth and the NULL-buffer sizing call.
    vt, count = ctypes.c_int(-1), ctypes.c_uint(0)
    rc_null = lib.nvmlDeviceGetSamples(h, 1, ctypes.c_ulonglong(0), ctypes.byref(vt), ctypes.byref(count), None)
    try:
        vtype, ring = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, 0)
    except N.NVMLError as exc:
        vtype, ring = None, []
        report(2, "ring depth", "GetSamples(lastSeen=0) failed: %s" % exc, "UNOBSERVED")
    if ring:
        report(2, "ring depth", "%d samples (fake %d)" % (len(ring), FAKE_RING_DEPTH),
               "CONFIRMED" if abs(len(ring) - FAKE_RING_DEPTH) <= 2 else "DIFFERS")
        report(6, "GetSamples sizing", "NULL buffer: rc %d count %d; then %d samples; value type %s"
               % (rc_null, count.value, len(ring), vtype),
               "CONFIRMED" if rc_null == 0 and abs(count.value - len(ring)) <= 1 and vtype == 1 else "DIFFERS")
        report(4, "sample timestamp clock", which_clock(ring[-1].timeStamp),
               "CONFIRMED" if which_clock(ring[-1].timeStamp) == "boot" else "DIFFERS")

    # 1, 3, 7: watch the ring and the utilization rate for a while.
    last = ring[-1].timeStamp if ring else 0
    new: list[tuple[int, int]] = []
    idle_polls = idle_growth = busy_notfound = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rate = N.nvmlDeviceGetUtilizationRates(h).gpu
        try:
            _, s = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, last)
            got = [(x.timeStamp, x.sampleValue.uiVal) for x in s]
            new += got
            last = got[-1][0]
            if rate == 0:
                idle_polls += 1
                idle_growth += sum(1 for _, v in got if v == 0)
        except N.NVMLError_NotFound:
            if rate == 0:
                idle_polls += 1
            else:
                busy_notfound += 1
        time.sleep(POLL_S)
    gaps = [(b[0] - a[0]) / 1e6 for a, b in zip(new, new[1:]) if 0 < b[0] - a[0] < 0.5e6]
    if len(gaps) >= 5:
        period = statistics.median(gaps)
        report(1, "sample period", "%.1f ms median over %d gaps (fake %.1f ms)"
               % (period * 1e3, len(gaps), FAKE_SAMPLE_PERIOD_S * 1e3),
               "CONFIRMED" if abs(period - FAKE_SAMPLE_PERIOD_S) < 0.01 else "DIFFERS")
    else:
        report(1, "sample period", "too few busy samples (%d)" % len(new), "UNOBSERVED")
    if idle_polls >= 10:
        report(3, "no samples while idle", "%d idle polls, %d zero-valued samples added" % (idle_polls, idle_growth),
               "CONFIRMED" if idle_growth == 0 else "DIFFERS")
    else:
        report(3, "no samples while idle", "only %d idle polls" % idle_polls, "UNOBSERVED")
    zero_samples = sum(1 for _, v in new if v == 0)
    report(7, "utilization rate while idle", "%d idle polls read 0%%; %d zero samples in the ring"
           % (idle_polls, zero_samples), "CONFIRMED" if idle_polls else "UNOBSERVED")

    # 5: process-utilization timestamps.
    try:
        samples = N.nvmlDeviceGetProcessUtilization(h, 0)
        clock = which_clock(max(x.timeStamp for x in samples)) if samples else None
        report(5, "process utilization timestamp clock", clock or "no samples",
               "UNOBSERVED" if clock is None else "CONFIRMED" if clock == "epoch" else "DIFFERS")
    except N.NVMLError as exc:
        report(5, "process utilization timestamp clock", str(exc), "UNOBSERVED")

    # 8: power average vs instant, energy counter update interval.
    try:
        f = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_POWER_INSTANT, N.NVML_FI_DEV_POWER_AVERAGE])
        e0, t0, changes = N.nvmlDeviceGetTotalEnergyConsumption(h), time.monotonic(), []
        while time.monotonic() - t0 < 1.0:
            e = N.nvmlDeviceGetTotalEnergyConsumption(h)
            if e != e0:
                changes.append(time.monotonic())
                e0 = e
            time.sleep(0.002)
        step = statistics.median([b - a for a, b in zip(changes, changes[1:])]) * 1e3 if len(changes) > 2 else None
        report(8, "power and energy", "usage %d mW, instant field %s mW (rc %d), average field %s mW (rc %d); "
               "energy updates every %s ms" % (N.nvmlDeviceGetPowerUsage(h), f[0].value.uiVal, f[0].nvmlReturn,
                                              f[1].value.uiVal, f[1].nvmlReturn,
                                              "%.0f" % step if step else "?"), "REPORTED")
    except N.NVMLError as exc:
        report(8, "power and energy", str(exc), "UNOBSERVED")

    # 9: PCIe counters vs throughput (rough: both sampled over about a second).
    try:
        def rx_bytes():
            return N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_PCIE_COUNT_RX_BYTES])[0].value.ullVal
        b0, t0, kbps = rx_bytes(), time.monotonic(), []
        while time.monotonic() - t0 < 1.0:
            kbps.append(N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES))
            time.sleep(0.03)
        b1, t1 = rx_bytes(), time.monotonic()
        counter_rate = (b1 - b0) / (t1 - t0)
        report(9, "PCIe KB", "counter %.0f B/s vs throughput mean %.0f KB/s (ratio %.0f)"
               % (counter_rate, statistics.mean(kbps), counter_rate / max(statistics.mean(kbps), 1)), "REPORTED")
    except N.NVMLError as exc:
        report(9, "PCIe KB", str(exc), "UNOBSERVED")

    # 10: call costs.
    calls = {
        "GetUtilizationRates": lambda: N.nvmlDeviceGetUtilizationRates(h),
        "GetMemoryInfo": lambda: N.nvmlDeviceGetMemoryInfo(h),
        "GetPowerUsage": lambda: N.nvmlDeviceGetPowerUsage(h),
        "GetSamples(recent)": lambda: _quiet(N, N.nvmlDeviceGetSamples, h, 1, last),
        "GetFieldValues(3)": lambda: N.nvmlDeviceGetFieldValues(h, [186, 197, 198]),
        "GetComputeRunningProcesses": lambda: N.nvmlDeviceGetComputeRunningProcesses(h),
        "GetPcieThroughput": lambda: N.nvmlDeviceGetPcieThroughput(h, 1),
    }
    costs = []
    for name, fn in calls.items():
        n = 20 if "Processes" in name or "Pcie" in name else 200
        t = time.perf_counter()
        try:
            for _ in range(n):
                fn()
            costs.append("%s %.1f us" % (name, (time.perf_counter() - t) / n * 1e6))
        except N.NVMLError as exc:
            costs.append("%s: %s" % (name, exc))
    report(10, "call costs", "; ".join(costs), "REPORTED")
    if busy_notfound:
        out.append(dict(assumption=3, name="NOT_FOUND while busy (polling faster than the period)",
                        measured="%d polls" % busy_notfound, verdict="REPORTED"))
    return out


def _quiet(N, fn, *args):
    try:
        return fn(*args)
    except N.NVMLError_NotFound:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check the fake NVML library's driver assumptions on a real GPU.")
    ap.add_argument("--gpu", type=int, default=0, help="NVML index (default 0)")
    ap.add_argument("--seconds", type=float, default=12.0, help="how long to watch the sample ring (default 12)")
    ap.add_argument("--json", action="store_true", help="one JSON list instead of text lines")
    args = ap.parse_args(argv)
    import pynvml as N

    try:
        N.nvmlInit()
    except N.NVMLError as exc:
        print("check_driver: no NVIDIA driver: %s" % exc, file=sys.stderr)
        return 2
    try:
        if not 0 <= args.gpu < N.nvmlDeviceGetCount():
            print("check_driver: no GPU %d" % args.gpu, file=sys.stderr)
            return 2
        info = "driver %s, %s" % (N.nvmlSystemGetDriverVersion(),
                                  N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(args.gpu)))
        results = check(N, args.gpu, args.seconds)
    finally:
        N.nvmlShutdown()
    if args.json:
        print(json.dumps(dict(info=info, results=results)))
    else:
        print(info)
        for r in results:
            print("%2d %-36s %-10s %s" % (r["assumption"], r["name"], r["verdict"], r["measured"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
