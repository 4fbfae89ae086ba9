"""The live detector's CPU cost per tick (target: <= 2 ms for 8 GPUs at the default 1 s).

Feeds ``Detector.update`` the ticks of a simulated run (``simulate``, 1 s interval,
seeded) and reads the CPU time (``time.process_time``) of the updates after a warm-up of
``WARMUP_S`` seconds, when the store holds every bin a window needs. The simulator stops at 8
GPUs: 16 and 64 GPUs are an 8-GPU run's ticks tiled, each copy of a GPU given a new index
(with PIDs of its own: one job of 16 or 64 GPUs, as the 8 simulated ones are). Each count is
measured ``repeats`` times on the same ticks with a fresh detector; the best repeat is the
cost, the median beside it shows the noise of a shared machine. For 8 GPUs, also the median
cost of single updates 0.5 s apart (``paced_ms``): what a live monitor pays, its caches cold.

    python -m bench.detector_cost [--gpus 1,8,16,64] [--scenarios data_starvation,busy]
                                  [--seconds 300] [--repeats 3] [--json]

``run(**kw) -> list[dict]`` is the entry point for bench/run.py; ``format_result`` the text.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from typing import Sequence

from gpumon.detect import Detector
from gpumon.samples import Tick
from gpumon.sim import simulate

GPU_COUNTS = (1, 8, 16, 64)
SCENARIOS = ("data_starvation", "busy")
SIM_MAX_GPUS = 8          # the simulator's largest node
PID_STEP = 1_000_000      # PIDs of a tiled copy k are the original's + k * PID_STEP
WARMUP_S = 120.0          # ticks left out before timing: the store and windows full
SECONDS = 300.0
REPEATS = 3
SEED = 1
TARGET_MS = 2.0           # per tick, 8 GPUs, default interval
# Updates timed one by one, this far apart, as a live monitor makes them (see paced_ms): the
# GPU counts so timed, and how many updates.
PACED_GAP_S = 0.5
PACED_GPUS = (8,)
PACED_TICKS = 20


def tile(tick: Tick, copies: int, width: int) -> Tick:
    """``tick`` with its GPUs (indices 0..width-1) repeated ``copies`` times: copy k's GPU i
    is index k * width + i, its processes (PIDs, parents, host readings) are copy k's own
    (PIDs moved by k * PID_STEP), so nothing ties a copy to the others and the detector
    judges the GPUs as one job, as it does the simulated node's."""
    if copies <= 1:
        return tick

    def pid(p, k):
        return p + k * PID_STEP if p is not None and p > 1 else p

    gpus = tuple(replace(s, gpu=s.gpu + k * width,
                         pids=None if s.pids is None else tuple(pid(x, k) for x in s.pids))
                 for k in range(copies) for s in tick.gpus)
    host = tick.host
    if host is not None:
        host = replace(
            host,
            jobs=tuple(replace(j, gpu=j.gpu + k * width, main_pid=pid(j.main_pid, k))
                       for k in range(copies) for j in host.jobs),
            procs=tuple(replace(p, pid=pid(p.pid, k), ppid=pid(p.ppid, k),
                                gpus=tuple(g + k * width for g in p.gpus))
                        for k in range(copies) for p in host.procs))
    return replace(tick, gpus=gpus, host=host)


def ticks_for(scenario: str, gpus: int, seconds: float = SECONDS, seed: int = SEED,
              interval: float = 1.0) -> list[Tick]:
    """A simulated run's ticks on ``gpus`` GPUs (tiled past SIM_MAX_GPUS, see tile)."""
    if gpus <= SIM_MAX_GPUS:
        return list(simulate(scenario, gpus=gpus, seconds=seconds, seed=seed,
                             interval=interval))
    if gpus % SIM_MAX_GPUS:
        raise ValueError(f"GPU counts above {SIM_MAX_GPUS} must be multiples of it")
    base = simulate(scenario, gpus=SIM_MAX_GPUS, seconds=seconds, seed=seed, interval=interval)
    return [tile(t, gpus // SIM_MAX_GPUS, SIM_MAX_GPUS) for t in base]


def cost_ms(ticks: Sequence[Tick], warmup: int) -> float:
    """CPU milliseconds per ``update`` over ``ticks[warmup:]`` (a fresh detector)."""
    det = Detector()
    for t in ticks[:warmup]:
        det.update(t)
    rest = ticks[warmup:]
    t0 = time.process_time()
    for t in rest:
        det.update(t)
    return 1e3 * (time.process_time() - t0) / max(1, len(rest))


def paced_ms(ticks: Sequence[Tick], warmup: int, n: int = PACED_TICKS,
             gap_s: float = PACED_GAP_S) -> float:
    """Median CPU milliseconds of one ``update`` when updates come ``gap_s`` apart, as in a
    monitor that judges once a second and sleeps between: its code and data are no longer in
    the CPU's caches (on this machine 2-3x the back-to-back cost)."""
    det = Detector()
    for t in ticks[:warmup]:
        det.update(t)
    out = []
    for t in ticks[warmup:warmup + n]:
        time.sleep(gap_s)
        t0 = time.process_time()
        det.update(t)
        out.append(time.process_time() - t0)
    return 1e3 * statistics.median(out) if out else float("nan")


def run(gpus: Sequence[int] = GPU_COUNTS, scenarios: Sequence[str] = SCENARIOS,
        seconds: float = SECONDS, repeats: int = REPEATS, interval: float = 1.0,
        log=None) -> list[dict]:
    """One row per (scenario, GPU count): best and median ms per tick over ``repeats``."""
    rows = []
    warmup = int(round(min(WARMUP_S, seconds / 2) / interval))
    for sc in scenarios:
        for n in gpus:
            ticks = ticks_for(sc, n, seconds, interval=interval)
            ms = [cost_ms(ticks, warmup) for _ in range(max(1, repeats))]
            row = {"scenario": sc, "gpus": n, "interval_s": interval,
                   "ticks": len(ticks) - warmup, "best_ms": min(ms),
                   "median_ms": statistics.median(ms), "repeats": len(ms),
                   "paced_ms": paced_ms(ticks, warmup) if n in PACED_GPUS else None}
            rows.append(row)
            if log:
                log(f"  detector {sc:16} {n:3} GPUs  {row['best_ms']:.3f} ms/tick "
                    f"(median {row['median_ms']:.3f})")
    return rows


def format_result(rows: Sequence[dict]) -> list[str]:
    """A markdown table of ``run``'s rows."""
    out = ["| scenario | GPUs | interval | ms per tick (best) | median | ticks x repeats | "
           f"paced ({PACED_GAP_S:g} s apart), median |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        paced = r.get("paced_ms")
        out.append(f"| {r['scenario']} | {r['gpus']} | {r['interval_s']:g} s | "
                   f"{r['best_ms']:.3f} | {r['median_ms']:.3f} | {r['ticks']} x {r['repeats']} | "
                   f"{'' if paced is None else f'{paced:.3f}'} |")
    return out


def target(rows: Sequence[dict]):
    """bench/run.py's target line: the costliest 8-GPU scenario against TARGET_MS."""
    from bench.report import Target
    worst = max((r["best_ms"] for r in rows if r["gpus"] == 8), default=None)
    paced = max((r["paced_ms"] for r in rows if r["gpus"] == 8 and r.get("paced_ms")),
                default=None)
    got = "not run" if worst is None else f"{worst:.2f} ms" + (
        "" if paced is None else f" back to back; {paced:.2f} ms paced {PACED_GAP_S:g} s apart")
    return Target("live detector per tick, 8 GPUs (`bench.detector_cost`)",
                  f"<= {TARGET_MS:g} ms", got, None if worst is None else worst <= TARGET_MS)


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}") from None
    if not out or min(out) < 1 or any(n > SIM_MAX_GPUS and n % SIM_MAX_GPUS for n in out):
        raise argparse.ArgumentTypeError(
            f"GPU counts must be 1-{SIM_MAX_GPUS} or multiples of {SIM_MAX_GPUS}: {text!r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.detector_cost",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=_ints, default=list(GPU_COUNTS),
                    help="comma-separated GPU counts (default 1,8,16,64)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated simulated scenarios (default data_starvation,busy)")
    ap.add_argument("--seconds", type=float, default=SECONDS,
                    help=f"simulated seconds per run (default {SECONDS:g})")
    ap.add_argument("--interval", type=float, default=1.0, help="tick interval, s (default 1)")
    ap.add_argument("--repeats", type=int, default=REPEATS,
                    help=f"timed passes per GPU count (default {REPEATS})")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.interval <= 0 or args.repeats < 1:
        ap.error("--seconds and --interval must be > 0, --repeats >= 1")
    from gpumon.errors import UserError
    try:
        rows = run(args.gpus, [s for s in args.scenarios.split(",") if s], args.seconds,
                   args.repeats, args.interval, log=None if args.json else print)
    except UserError as exc:
        ap.error(str(exc))
    print(json.dumps(rows, indent=1) if args.json else "\n".join(format_result(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
