"""Dashboard frame time: build (Dashboard.view + layout) and render (rich, to a terminal
stream) one frame of ``gpumon watch``, for 1 and 8 GPUs.

``python -m bench.frame --gpus 1 8 --frames 200`` prints one JSON object per GPU count.
The dashboard is fed synthetic ticks of a training node (bursty input-bound GPUs, a job of
one main and seven loader workers per GPU) and the live detector's verdicts, the way the
Monitor feeds it; each measured frame follows a new tick, so nothing is reused from a cache.
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time

from gpumon.samples import GpuInfo, GpuSample, HostSample, JobProcs, ProcSample, Tick

# Driver samples per second per GPU (NVML's 1/6 s period).
PER_S = 6
# Ticks fed before measuring, so sparklines, the verdict strip and the detector are full.
WARM_TICKS = 120
# The terminal the frame is drawn for (columns x rows), as in the overhead benchmark.
COLS, ROWS = 160, 50
T0 = 1_700_000_000.0


def infos(n: int) -> list[GpuInfo]:
    return [GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-bench-{i:04d}",
                    mem_total_mib=81559.0, power_limit_w=700.0, sm_clock_max_mhz=1980.0)
            for i in range(n)]


def synthetic_tick(n: int, sec: int) -> Tick:
    """Second ``sec`` of an input-bound node with ``n`` GPUs: 0.5 s bursts, then waits."""
    t = T0 + sec + 1
    samples = []
    for g in range(n):
        for k in range(PER_S):
            busy = (k + g) % PER_S < 3
            samples.append(GpuSample(
                time=t - 1 + (k + 1) / PER_S, gpu=g, source="nvml",
                util_gpu_pct=100.0 if busy else 0.0, util_mem_pct=35.0 if busy else 0.0,
                mem_used_mib=40960.0, mem_total_mib=81559.0, power_w=420.0 if busy else 120.0,
                power_limit_w=700.0, sm_clock_mhz=1980.0, sm_clock_max_mhz=1980.0,
                temp_c=60.0 + g, pcie_rx_mbps=800.0, pcie_tx_mbps=5.0, clock_events=0,
                energy_j=1e5 + sec * 300.0, pids=(5000 + 8 * g,)))
    jobs, procs = [], []
    for g in range(n):
        main = 5000 + 8 * g
        jobs.append(JobProcs(gpu=g, main_pid=main, main_cpu_pct=55.0, main_thread_max_pct=None,
                             loader_workers=7, loader_cpu_pct=680.0, loader_busy=7))
        procs.append(ProcSample(pid=main, ppid=1, name="python", role="main", cpu_pct=55.0,
                                gpus=(g,)))
        procs += [ProcSample(pid=main + w, ppid=main, name="python", role="worker",
                             cpu_pct=97.0) for w in range(1, 8)]
    host = HostSample(time=t, cpu_pct=92.0, cpu_max_core_pct=100.0, iowait_pct=0.5,
                      disk_read_mbps=150.0, disk_write_mbps=1.0, cpu_count=64,
                      cpu_cores_pct=tuple(90.0 + (i % 10) for i in range(64)),
                      jobs=tuple(jobs), procs=tuple(procs))
    return Tick(time=t, gpus=tuple(samples), host=host)


def frame_times(n: int, frames: int) -> dict:
    from rich.console import Console
    from gpumon.commands.common import make_detector
    from gpumon.ui.model import Dashboard
    from gpumon.ui.screen import Screen

    detector = make_detector()
    dash = Dashboard(infos(n), kind="nvml", interval=1.0, detector=detector is not None)
    out = io.StringIO()
    console = Console(file=out, width=COLS, height=ROWS, force_terminal=True,
                      color_system="256", legacy_windows=False)
    screen = Screen(dash.view)
    sec = 0

    def feed():
        nonlocal sec
        tick = synthetic_tick(n, sec)
        dash.update(tick, detector.update(tick) if detector is not None else [])
        sec += 1

    for _ in range(WARM_TICKS):
        feed()
    build, total = [], []
    for _ in range(frames):
        feed()
        out.seek(0)
        out.truncate()
        t0 = time.perf_counter()
        console.print(screen)
        t1 = time.perf_counter()
        total.append((t1 - t0) * 1e3)
        # The build part alone (view + layout), for where the time goes.
        from gpumon.ui.screen import layout
        t2 = time.perf_counter()
        layout(dash.view(), COLS, ROWS)
        build.append((time.perf_counter() - t2) * 1e3)
    total.sort()
    return {"gpus": n, "frames": frames, "median_ms": statistics.median(total),
            "p90_ms": total[int(0.9 * (len(total) - 1))], "min_ms": total[0],
            "build_median_ms": statistics.median(build), "bytes": len(out.getvalue()),
            "detector": detector is not None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.frame")
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    p.add_argument("--frames", type=int, default=200)
    args = p.parse_args(argv)
    for n in args.gpus:
        print(json.dumps(frame_times(n, args.frames)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
