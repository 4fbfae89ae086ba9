"""The small peer programs the benchmark runs beside gpumon (nvitop and gpustat run as-is).

``python -m bench.peers bare --interval 1 -o out.csv``: a bare nvidia-ml-py loop reading the
basic fields (utilization, memory, power, temperature, SM clock) of every GPU into a CSV: the
least any monitor can cost.

``python -m bench.peers nvitop-collector --interval 1 -o out.csv``: nvitop's
ResourceMetricCollector taking snapshots every INTERVAL in its daemon thread (host, GPUs and
the job's GPU processes, the job's mains from FAKE_NVML_PIDS), collected and written to a CSV
once a second, as a training script logging with it would.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

# How often the collector's aggregates are collected and written (s), as a training loop
# logging once a second would.
COLLECT_EVERY_S = 1.0


def _ticks(interval: float):
    """Yield on a fixed schedule; a late tick skips ahead instead of bursting."""
    next_at = time.monotonic()
    while True:
        yield
        next_at += interval
        now = time.monotonic()
        if next_at < now:
            next_at = now + interval
        time.sleep(next_at - now)


def bare(interval: float, out: str) -> None:
    import pynvml as N
    N.nvmlInit()
    handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["time", "gpu", "util_gpu_pct", "util_mem_pct", "mem_used_mib", "power_w",
                    "temp_c", "sm_clock_mhz"])
        for _ in _ticks(interval):
            now = f"{time.time():.3f}"
            for i, h in enumerate(handles):
                u = N.nvmlDeviceGetUtilizationRates(h)
                m = N.nvmlDeviceGetMemoryInfo(h)
                w.writerow([now, i, u.gpu, u.memory, m.used >> 20,
                            N.nvmlDeviceGetPowerUsage(h) / 1000.0,
                            N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
                            N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)])
            f.flush()


def job_mains() -> set[int]:
    """The stand-in job's main PIDs, from FAKE_NVML_PIDS ("0:123,456;1:789")."""
    mains = set()
    for part in os.environ.get("FAKE_NVML_PIDS", "").split(";"):
        if ":" in part:
            mains.update(int(p) for p in part.split(":", 1)[1].split(",") if p.strip())
    return mains


def nvitop_collector(interval: float, out: str) -> None:
    from nvitop import Device, ResourceMetricCollector
    collector = ResourceMetricCollector(Device.all(), root_pids=job_mains() or {1},
                                        interval=interval)
    collector.activate(tag="bench")
    writer = None
    with open(out, "w", newline="") as f:
        for _ in _ticks(COLLECT_EVERY_S):
            metrics = collector.collect()
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=sorted(metrics), extrasaction="ignore",
                                        lineterminator="\n")
                writer.writeheader()
            writer.writerow(metrics)
            f.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers")
    p.add_argument("which", choices=("bare", "nvitop-collector"))
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    try:
        (bare if args.which == "bare" else nvitop_collector)(args.interval, args.output)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
