"""Reference training workloads: ``python -m workloads.train --scenario NAME --seconds S``.

Each run reproduces one situation gpumon must recognise and writes its own ground truth
(``--out truth.jsonl``: see workloads/truth.py). ``--list`` describes the scenarios.
"""
from __future__ import annotations

import argparse
import signal
import sys

from workloads.scenarios import SCENARIOS

# Size-dependent defaults: (io file KiB, checkpoint MiB, seconds between checkpoints)
_SIZE_DEFAULTS = {"tiny": (16, 1, 0.5), "small": (64, 16, 2.0), "gpu": (256, 1024, 5.0)}
# Default compute-step target on a GPU: inside the 50-500 ms range real jobs span.
DEFAULT_TARGET_STEP_MS = 150.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=sorted(SCENARIOS), help="what to reproduce")
    p.add_argument("--list", action="store_true", help="describe the scenarios and exit")
    p.add_argument("--seconds", type=float, default=20.0, help="training time (default 20)")
    p.add_argument("--steps", type=int, help="stop after this many steps (per rank)")
    p.add_argument("--out", help="ground-truth JSON lines file")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    p.add_argument("--size", choices=("tiny", "small", "gpu"),
                   help="model/input size (default: gpu on CUDA, small on the CPU)")
    p.add_argument("--tiny", action="store_true", help="same as --size tiny (CPU smoke tests)")
    p.add_argument("--batch", type=int, help="batch size (default: calibrated on a GPU)")
    p.add_argument("--target-step-ms", type=float,
                   help=f"scale the batch to this compute step (default {DEFAULT_TARGET_STEP_MS:g} "
                   "on CUDA; off on the CPU)")
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader workers of the starved pipelines (default 2)")
    p.add_argument("--starve-ratio", type=float, default=3.0,
                   help="how many times slower than compute the starved loader is (default 3)")
    p.add_argument("--io-file-kb", type=int, help="io_fetch: size of each sample file")
    p.add_argument("--io-chunk-kb", type=int, default=4, help="io_fetch: read size (default 4)")
    p.add_argument("--data-dir", help="io_fetch/checkpoint: where files go (default: temp "
                   "folder unless it is tmpfs, else the current folder)")
    p.add_argument("--ckpt-every-s", type=float, help="checkpoint: seconds between saves")
    p.add_argument("--ckpt-mb", type=int, help="checkpoint: size of the saved state")
    p.add_argument("--spin-ms", type=float, default=100.0, help="spin: length of each kernel")
    p.add_argument("--ranks", type=int, default=2, help="DDP scenarios: processes (default 2)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="DDP backend (auto: NCCL with a GPU per rank, else gloo)")
    p.add_argument("--straggler-rank", type=int, default=1)
    p.add_argument("--straggler-extra", type=float, default=1.0,
                   help="sync_stall: extra work of the straggler, in compute steps (default 1)")
    p.add_argument("--seed", type=int, default=0)
    return p


def config_from_args(args: argparse.Namespace):
    import torch

    from workloads.loop import RunConfig

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this torch build sees no CUDA device")
    size = "tiny" if args.tiny else (args.size or ("gpu" if device == "cuda" else "small"))
    file_kb, ckpt_mb, ckpt_every = _SIZE_DEFAULTS[size]
    target = args.target_step_ms
    if target is None and device == "cuda":
        target = DEFAULT_TARGET_STEP_MS
    if args.seconds < 0 or (args.steps is not None and args.steps < 1):
        raise ValueError("--seconds must be >= 0 and --steps >= 1")
    if args.ranks < 2:
        raise ValueError("--ranks must be at least 2")
    if SCENARIOS[args.scenario].ddp and not 0 <= args.straggler_rank < args.ranks:
        raise ValueError(f"--straggler-rank must be below --ranks ({args.ranks})")
    return RunConfig(
        scenario=args.scenario, seconds=args.seconds, steps=args.steps, device=device,
        size=size, batch=args.batch, target_step_ms=target, workers=args.workers,
        starve_ratio=args.starve_ratio, io_file_kb=args.io_file_kb or file_kb,
        io_chunk_kb=args.io_chunk_kb, data_dir=args.data_dir,
        ckpt_every_s=args.ckpt_every_s if args.ckpt_every_s is not None else ckpt_every,
        ckpt_mb=args.ckpt_mb if args.ckpt_mb is not None else ckpt_mb,
        spin_ms=args.spin_ms, ranks=args.ranks, backend=args.backend,
        straggler_rank=args.straggler_rank, straggler_extra=args.straggler_extra,
        seed=args.seed, out=args.out)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name, scn in SCENARIOS.items():
            print(f"{name:16} {scn.summary} -> {scn.verdict}"
                  f"{' (' + scn.cause + ')' if scn.cause else ''}")
        return 0
    if not args.scenario:
        print("workloads: --scenario NAME is required (see --list)", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        print("workloads: torch is not installed (pip install torch; the CPU build is enough "
              "for smoke tests)", file=sys.stderr)
        return 2
    from workloads.loop import Skip, log, run
    from workloads.truth import read_truth, summarize

    def terminated(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds, so temporary files are removed

    signal.signal(signal.SIGTERM, terminated)
    try:
        cfg = config_from_args(args)
        run(cfg)
    except Skip as exc:
        print(f"workloads: {args.scenario}: skipped: {exc}", file=sys.stderr)
        return 0
    except ValueError as exc:
        print(f"workloads: {exc}", file=sys.stderr)
        return 2
    if cfg.out:
        _, steps = read_truth(cfg.out)
        s = summarize(steps)
        log(f"{cfg.scenario}: {s.get('steps', 0)} steps, median {s.get('median_step_ms')} ms; "
            f"data {s.get('data_share')}, compute {s.get('compute_share')}, "
            f"sync {s.get('sync_share')}, checkpoint {s.get('checkpoint_share')} of step time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
