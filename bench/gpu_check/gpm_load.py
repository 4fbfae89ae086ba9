"""The two loads `make gpu-check` reads GPM SM activity under, on GPU 0 (torch, CUDA):

    python -m bench.gpu_check.gpm_load work --seconds 8 --ready READY.json
    python -m bench.gpu_check.gpm_load spin --seconds 8 --ready READY.json

``work``: a loop of bf16 matmuls (the SMs compute). ``spin``: a rank waiting in a collective.
With two GPUs or more, a two-process NCCL all-reduce in which rank 1 (GPU 1) sleeps between its
all-reduces, so rank 0's kernel on GPU 0 spins waiting for it. With one GPU two NCCL ranks cannot
share the device, so a waiting kernel (torch.cuda._sleep: one block spinning on the clock) stands
for the collective. Once the load runs, READY.json gets ``{"how": ...}``, the load measured;
without CUDA it gets ``{"skip": reason}`` and the process exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import time

MATMUL_N = 8192
SPIN_MS = 50              # one waiting kernel's length
RANK1_SLEEP_S = 0.5       # rank 1's pause between all-reduces: rank 0 spins this long
NCCL_PORT = 29517


def _ready(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def work(seconds: float, ready: str) -> None:
    import torch
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    torch.cuda.synchronize()
    _ready(ready, {"how": f"matmul loop, {MATMUL_N}x{MATMUL_N} bf16"})
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(8):
            a = torch.matmul(a, b).clamp_(-1, 1)
        torch.cuda.synchronize()


def _spin_cycles(torch) -> int:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(20_000_000)
    stop.record()
    torch.cuda.synchronize()
    return int(20_000_000 / max(start.elapsed_time(stop), 1e-3) * SPIN_MS)


def spin_kernel(seconds: float, ready: str) -> None:
    import torch
    cycles = _spin_cycles(torch)
    _ready(ready, {"how": "one GPU: a waiting kernel (torch.cuda._sleep) stands for the "
                          "collective; NCCL needs a GPU per rank"})
    end = time.time() + seconds
    while time.time() < end:
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()


def _nccl_rank(rank: int, seconds: float, ready: str) -> None:
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{NCCL_PORT}", rank=rank,
                            world_size=2)
    x = torch.ones(1 << 20, device=f"cuda:{rank}")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if rank == 0:
        _ready(ready, {"how": f"NCCL all-reduce, 2 processes on GPUs 0-1; rank 1 sleeps "
                              f"{RANK1_SLEEP_S:g} s between all-reduces, GPU 0 read"})
    end = time.time() + seconds
    go = torch.ones(1, device=f"cuda:{rank}")
    while True:
        if rank == 1:
            time.sleep(RANK1_SLEEP_S)
        go.fill_(1.0 if time.time() < end else 0.0)
        dist.all_reduce(go, op=dist.ReduceOp.MIN)   # both ranks stop on the same round
        if go.item() == 0.0:
            break
    dist.destroy_process_group()


def spin(seconds: float, ready: str) -> None:
    import torch
    if torch.cuda.device_count() < 2:
        spin_kernel(seconds, ready)
        return
    import torch.multiprocessing as mp
    try:
        mp.spawn(_nccl_rank, args=(seconds, ready), nprocs=2, join=True)
    except Exception as exc:  # noqa: BLE001 - NCCL failing is said, and the fallback runs
        if os.path.exists(ready):
            raise                    # it ran, then failed: the readings are not of a spin
        print(f"gpm_load: NCCL all-reduce failed ({type(exc).__name__}); a waiting kernel "
              "instead", flush=True)
        spin_kernel(seconds, ready)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check.gpm_load")
    p.add_argument("load", choices=("work", "spin"))
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--ready", required=True, help="JSON file written once the load runs")
    args = p.parse_args(argv)
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        _ready(args.ready, {"skip": "no CUDA device (torch)"})
        return 0
    (work if args.load == "work" else spin)(args.seconds, args.ready)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
