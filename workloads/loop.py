"""The training loops: one process (every scenario but the DDP ones) and one DDP rank."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from workloads import data as wdata
from workloads.model import SIZES, SmallCNN, to_input
from workloads.scenarios import SCENARIOS, expectation
from workloads.truth import PhaseClock, StepRecord, TruthWriter

# Calibration: the batch is scaled so a compute step takes --target-step-ms, within these.
MIN_BATCH, MAX_BATCH = 8, 512   # 512 of the gpu size: ~46 GB of activations
# How much slower than a compute step the starved input pipelines deliver a batch (3x: the
# GPU computes about a third of the time, well inside "starved" for any sensible detector).
DEFAULT_STARVE_RATIO = 3.0


class Skip(Exception):
    """The scenario cannot run here (e.g. spin without CUDA); the message says why."""


@dataclass
class RunConfig:
    scenario: str
    seconds: float = 20.0
    steps: Optional[int] = None
    device: str = "cpu"
    size: str = "small"
    batch: Optional[int] = None
    target_step_ms: Optional[float] = None
    workers: int = 2
    starve_ratio: float = DEFAULT_STARVE_RATIO
    io_file_kb: int = 256
    io_chunk_kb: int = 4
    data_dir: Optional[str] = None
    ckpt_every_s: float = 5.0
    ckpt_mb: int = 512
    spin_ms: float = 100.0
    ranks: int = 2
    backend: str = "auto"
    straggler_rank: int = 1
    straggler_extra: float = 1.0
    seed: int = 0
    out: Optional[str] = None


def log(msg: str) -> None:
    print(f"workloads: {msg}", file=sys.stderr, flush=True)


def make_sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               y: torch.Tensor) -> None:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def build(cfg: RunConfig, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(cfg.seed)
    model = SmallCNN(SIZES[cfg.size].width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, opt


def time_steps(model, opt, device, batch: int, image: int, n: int) -> float:
    """Median seconds of a compute step on data already on the device (after one warm-up)."""
    sync = make_sync(device)
    it = wdata.device_batches(batch, image, device, count=1)
    xu8, y = next(it)
    x = xu8.float().div_(255.0)
    train_step(model, opt, x, y)  # warm-up: allocator, cudnn autotune
    sync()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        train_step(model, opt, x, y)
        sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def calibrate(cfg: RunConfig, model, opt, device) -> tuple[int, float]:
    """The batch to use and the compute step time at that batch. With a target step time the
    batch is scaled once from a first measurement, then measured again."""
    image = SIZES[cfg.size].image
    batch = cfg.batch or SIZES[cfg.size].batch
    step_s = time_steps(model, opt, device, batch, image, 2)
    if cfg.target_step_ms and not cfg.batch:
        scaled = int(round(batch * cfg.target_step_ms / 1000.0 / max(step_s, 1e-6)))
        scaled = max(MIN_BATCH, min(MAX_BATCH, scaled))
        if scaled != batch:
            batch = scaled
            step_s = time_steps(model, opt, device, batch, image, 2)
    return batch, step_s


def transform_seconds(cfg: RunConfig, batch: int, step_s: float, workers: int) -> float:
    """Per-sample CPU cost that makes the loader ``starve_ratio`` times slower than compute."""
    return cfg.starve_ratio * step_s * max(workers, 1) / batch


def _header(cfg: RunConfig, device: torch.device, gpus: int, extra: dict) -> dict:
    scn = SCENARIOS[cfg.scenario]
    ranks = cfg.ranks if scn.ddp else 1
    head = {
        "scenario": cfg.scenario, "device": device.type, "gpus": gpus, "ranks": ranks,
        "size": cfg.size, "started": round(time.time(), 3), "pid": os.getpid(),
        "torch": torch.__version__,
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("out",)},
    }
    head.update(expectation(scn, device.type, gpus, ranks, cfg.straggler_rank))
    head.update(extra)
    return head


def _spin_cycles_per_ms(device: torch.device) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # warm-up
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    torch.cuda.synchronize(device)
    return 50_000_000 / max(start.elapsed_time(end), 1e-3)


def run_single(cfg: RunConfig) -> dict:
    """Runs one non-DDP scenario; returns the header written (and logs a summary)."""
    device = torch.device(cfg.device)
    if cfg.scenario == "spin" and device.type != "cuda":
        raise Skip("spin needs CUDA (torch.cuda._sleep); nothing to show on the CPU")
    if device.type == "cpu":
        # one compute thread: on a shared machine, OpenMP threads spinning against loader
        # workers make a tiny step hundreds of times slower
        torch.set_num_threads(1)
    gpus = 0
    if device.type == "cuda":
        gpus = torch.cuda.device_count() if cfg.scenario == "dataparallel" else 1
    sync = make_sync(device)
    model, opt = build(cfg, device)
    if cfg.scenario == "dataparallel":
        model = nn.DataParallel(model)  # over every visible GPU; a plain call on the CPU
    batch, step_s = calibrate(cfg, model, opt, device)
    image = SIZES[cfg.size].image
    pin = device.type == "cuda"
    extra: dict = {"batch": batch, "compute_step_ms": round(1000 * step_s, 2)}
    cleanup: list[Callable[[], None]] = []

    writer = TruthWriter(None)
    try:  # files and checkpoints are removed however the run ends
        fetch: Iterator
        if cfg.scenario in ("busy", "checkpoint", "dataparallel", "spin"):
            fetch = wdata.device_batches(batch, image, device, seed=cfg.seed)
            workers = 0
        elif cfg.scenario in ("data_starvation", "main_process"):
            workers = cfg.workers if cfg.scenario == "data_starvation" else 0
            t_s = transform_seconds(cfg, batch, step_s, workers)
            extra.update(workers=workers, transform_ms_per_sample=round(1000 * t_s, 3))
            ds = wdata.SyntheticImages(batch * 64, image, t_s, seed=cfg.seed)
            fetch = wdata.endless(wdata.loader(ds, batch, workers, pin))
        elif cfg.scenario == "io_fetch":
            workers = cfg.workers
            root = wdata.pick_data_root(cfg.data_dir)
            file_bytes = max(cfg.io_file_kb * 1024, 3 * image * image)
            t0 = time.perf_counter()
            files = wdata.ImageFiles(root, count=2 * batch, file_bytes=file_bytes, seed=cfg.seed)
            cleanup.append(files.remove)
            extra.update(workers=workers, io_files=len(files.paths), io_file_kb=file_bytes // 1024,
                         io_chunk_kb=cfg.io_chunk_kb, data_dir=files.dir,
                         data_dir_fs=wdata.data_dir_fs(files.dir),
                         io_setup_s=round(time.perf_counter() - t0, 3))
            ds = wdata.FileImages(files.paths, image, cfg.io_chunk_kb * 1024)
            fetch = wdata.endless(wdata.loader(ds, batch, workers, pin))
        else:
            raise ValueError(f"not a single-process scenario: {cfg.scenario}")

        spin_cycles = 0
        if cfg.scenario == "spin":
            spin_cycles = int(_spin_cycles_per_ms(device) * cfg.spin_ms)
            extra.update(spin_ms=cfg.spin_ms, spin_cycles=spin_cycles)

        ckpt_path, filler = None, None
        if cfg.scenario == "checkpoint":
            root = wdata.pick_data_root(cfg.data_dir)
            ckpt_path = os.path.join(root, f"workloads-ckpt-{os.getpid()}.pt")
            cleanup.append(lambda: os.path.exists(ckpt_path) and os.remove(ckpt_path))
            # stands for the weights of a real model: what makes a checkpoint take seconds
            filler = torch.zeros(cfg.ckpt_mb * (1 << 20) // 4, dtype=torch.float32, device=device)
            extra.update(ckpt_every_s=cfg.ckpt_every_s, ckpt_mb=cfg.ckpt_mb, ckpt_path=ckpt_path)

        header = _header(cfg, device, gpus, extra)
        writer = TruthWriter(cfg.out).open(header)
        clock = PhaseClock(sync)
        log(f"{cfg.scenario}: device={device.type} batch={batch} "
            f"compute step {1000 * step_s:.1f} ms; running {cfg.seconds:g} s")
        deadline = time.time() + cfg.seconds
        last_ckpt = time.time()
        step = 0
        while True:
            rec = StepRecord(rank=0, step=step, t_start=clock.start())
            if cfg.scenario == "spin":
                rec.wait_data_s = clock.lap()
                torch.cuda._sleep(spin_cycles)
                rec.wait_sync_s = clock.lap()
            else:
                xu8, y = next(fetch)
                x, y = to_input(xu8, device), y.to(device, non_blocking=True)
                rec.wait_data_s = clock.lap()
                train_step(model, opt, x, y)
                rec.compute_s = clock.lap()
            if ckpt_path and time.time() - last_ckpt >= cfg.ckpt_every_s:
                state = {"model": model.state_dict(), "optim": opt.state_dict(),
                         "weights": filler}
                with open(ckpt_path, "wb") as fh:
                    torch.save(state, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                rec.checkpoint_s = clock.lap()
                last_ckpt = time.time()
            rec.t_end = time.time()
            writer.step(rec)
            step += 1
            if time.time() >= deadline or (cfg.steps is not None and step >= cfg.steps):
                break
    finally:
        writer.close()
        for fn in cleanup:
            fn()
    header["steps_run"] = step
    return header


# ---- DDP ---------------------------------------------------------------------------------

def ddp_layout(cfg: RunConfig) -> tuple[str, int, bool]:
    """(backend, GPUs used, ranks share one GPU) for this config on this machine."""
    if cfg.device == "cuda":
        n = torch.cuda.device_count()
        if n >= cfg.ranks and n > 1:
            backend = "nccl" if cfg.backend == "auto" else cfg.backend
            return backend, cfg.ranks, False
        if cfg.backend == "nccl":
            raise ValueError(f"NCCL needs one GPU per rank: {cfg.ranks} ranks, {n} GPU(s)")
        return "gloo", 1, True
    if cfg.backend == "nccl":
        raise ValueError("NCCL needs CUDA devices; use --backend gloo on the CPU")
    return "gloo", 0, False


def _no_forward_buffer_sync() -> dict:
    """DDP's keyword for "no buffer broadcast in forward": `forward_sync_buffers` from the
    torch versions that deprecate `broadcast_buffers`."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel as DDP
    if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def run_rank(rank: int, cfg: RunConfig, port: int) -> None:
    """One DDP rank (the target of torch.multiprocessing.spawn)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # ranks (and their loaders) share the host's cores
    backend, gpus, shared = ddp_layout(cfg)
    if cfg.device == "cuda":
        device = torch.device("cuda", 0 if shared else rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=cfg.ranks)
    sync = make_sync(device)
    model, opt = build(cfg, device)
    straggler = rank == cfg.straggler_rank
    try:
        batch, step_s = calibrate(cfg, model, opt, device)
        # every rank uses the smallest calibrated batch, and the slowest step for the loader
        coll_dev = device if backend == "nccl" else torch.device("cpu")  # NCCL: GPU tensors
        agree = torch.tensor([float(batch), -step_s], device=coll_dev)
        dist.all_reduce(agree, op=dist.ReduceOp.MIN)
        batch, step_s = int(agree[0].item()), -float(agree[1].item())
        # no buffer sync in forward: otherwise every forward starts with a collective
        # (BatchNorm buffers) and the wait for a late rank would be charged to compute
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                  **_no_forward_buffer_sync())
        image = SIZES[cfg.size].image
        extra: dict = {"backend": backend, "shared_gpu": shared, "batch": batch,
                       "compute_step_ms": round(1000 * step_s, 2),
                       "straggler_rank": cfg.straggler_rank}
        slow_input = cfg.scenario == "rank_data_stall" and straggler
        if slow_input:
            t_s = transform_seconds(cfg, batch, step_s, cfg.workers)
            ds = wdata.SyntheticImages(batch * 64, image, t_s, seed=cfg.seed + rank)
            fetch = wdata.endless(wdata.loader(ds, batch, cfg.workers, device.type == "cuda"))
        else:
            fetch = wdata.device_batches(batch, image, device, seed=cfg.seed + rank)
        if cfg.scenario == "rank_data_stall":
            t_s = transform_seconds(cfg, batch, step_s, cfg.workers)
            extra.update(workers=cfg.workers, transform_ms_per_sample=round(1000 * t_s, 3))
        extra_fwd = round(3 * cfg.straggler_extra) if (
            cfg.scenario == "sync_stall" and straggler) else 0
        if cfg.scenario == "sync_stall":
            extra["straggler_extra_forwards"] = round(3 * cfg.straggler_extra)
        if rank == 0:
            header = _header(cfg, device, gpus, extra)
            TruthWriter(cfg.out).open(header).close()
        dist.barrier()
        writer = TruthWriter(None)
        if cfg.out:
            writer._fh = open(cfg.out, "a", buffering=1, encoding="utf-8")
        clock = PhaseClock(sync)
        if rank == 0:
            log(f"{cfg.scenario}: {cfg.ranks} ranks, backend={backend}, device={device.type}"
                f"{' (shared)' if shared else ''}, batch={batch}, compute step "
                f"{1000 * step_s:.1f} ms; running {cfg.seconds:g} s")
        deadline = time.time() + cfg.seconds
        step = 0
        while True:
            rec = StepRecord(rank=rank, step=step, t_start=clock.start())
            xu8, y = next(fetch)
            x, y = to_input(xu8, device), y.to(device, non_blocking=True)
            rec.wait_data_s = clock.lap()
            loss = nn.functional.cross_entropy(ddp(x), y)
            if extra_fwd:
                with torch.no_grad():
                    for _ in range(extra_fwd):
                        ddp.module(x)
            a = clock.lap()
            # The collective every rank joins each step: it absorbs the wait for the slowest
            # rank (and carries the stop decision), so the gradient all-reduce in backward()
            # starts with every rank present.
            done = time.time() >= deadline or (cfg.steps is not None and step + 1 >= cfg.steps)
            flag = torch.tensor([1.0 if done else 0.0], device=coll_dev)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            rec.wait_sync_s = clock.lap()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            rec.compute_s = a + clock.lap()
            rec.t_end = time.time()
            writer.step(rec)
            step += 1
            if flag.item() > 0:
                break
        writer.close()
        # Leave together: a rank that tears gloo down while its peer is still finishing the
        # last gradient all-reduce can abort the peer ("terminate called without an active
        # exception", SIGABRT), seen about once in eight CPU runs.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ddp(cfg: RunConfig) -> dict:
    import socket
    import signal

    import torch.multiprocessing as mp

    backend, gpus, shared = ddp_layout(cfg)  # checks the layout before spawning anything
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.spawn(run_rank, args=(cfg, port), nprocs=cfg.ranks, join=False)

    def stop(signum, _frame):
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not ctx.join():
            pass
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return {"scenario": cfg.scenario, "backend": backend, "gpus": gpus, "shared_gpu": shared}


def run(cfg: RunConfig) -> dict:
    if SCENARIOS[cfg.scenario].ddp:
        return run_ddp(cfg)
    return run_single(cfg)

