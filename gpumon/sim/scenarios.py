"""The simulated scenarios (names are a contract), their true verdicts, and `Truth`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gpumon import diagnosis as dx
from gpumon.errors import UserError
from gpumon.sim import params as P

MAX_GPUS = 8
STATES = ("computing", "waiting_data", "waiting_sync", "idle")


@dataclass(frozen=True)
class Truth:
    """What really happened in one interval (see sim_api.md)."""
    scenario: str
    verdict: str
    cause: Optional[str]
    straggler_gpu: Optional[int]
    gpus: tuple[int, ...]
    states: dict = field(default_factory=dict)   # gpu -> {state: share of the interval}
    pause: bool = False


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    description: str
    verdict: str
    cause: Optional[str] = None
    default_gpus: int = 2
    min_gpus: int = 1
    # Which GPU the verdict names: "" none, "straggler" the `straggler` parameter's GPU,
    # "gpu0" GPU 0 (DataParallel), "throttle" the throttled GPU when one holds the rest back.
    names_straggler: str = ""
    # ddp | dp (DataParallel) | nojob | hang | held | launch (DDP, launch-bound steps)
    mode: str = "ddp"
    # "" | checkpoint | rank0_checkpoint | validation | epoch_end | restarts
    events: str = ""
    params: dict = field(default_factory=dict)   # default overrides
    ranges: dict = field(default_factory=dict)   # draw-range overrides
    phases: tuple = ()                     # demo: ((scenario, seconds), ...), looped

    @property
    def pauses(self) -> bool:
        return bool(self.events)


_STARVED = {"prep_load": (1.5, 4.0)}
# Small batches: few SMs busy at low occupancy, moderate power (spinning and the all-reduce
# below it, as the physics needs).
_SMALL = {"sm_active_compute": 0.25, "sm_occupancy_compute": 0.08,
          "tensor_active_compute": 0.08, "compute_power_frac": 0.50,
          "comm_power_frac": 0.35, "spin_power_frac": 0.22, "step_s": 0.08}
_SMALL_RANGES = {"sm_active_compute": (0.15, 0.35), "sm_occupancy_compute": (0.04, 0.15),
                 "tensor_active_compute": (0.02, 0.15), "compute_power_frac": (0.40, 0.60),
                 "comm_power_frac": (0.30, 0.40), "spin_power_frac": (0.15, 0.28),
                 "step_s": (0.03, 0.3, "log")}

SCENARIOS: dict[str, ScenarioSpec] = {s.name: s for s in (
    ScenarioSpec("busy", "healthy compute-bound training: loaders keep up, GPUs hot and busy",
                 dx.BUSY, default_gpus=2),
    ScenarioSpec("idle", "no job: GPUs idle at idle clocks and power, no processes",
                 dx.IDLE, default_gpus=2, mode="nojob"),
    ScenarioSpec("data_starvation", "too few loader workers for the CPU preprocessing: GPUs "
                 "burst then wait for batches (with NCCL, a rank that got its batch first spins "
                 "in the all-reduce meanwhile), loader workers at 100% CPU on every rank",
                 dx.DATA_STARVATION, "cpu_preprocessing", default_gpus=2,
                 params={"prep_load": 2.2}, ranges=_STARVED),
    ScenarioSpec("io_fetch", "storage-bound input: workers wait on disk reads (iowait, disk at "
                 "its limit), GPUs idle between batches", dx.DATA_STARVATION, "io_fetch",
                 default_gpus=2, params={"fetch_mb": 120.0, "prep_load": 0.3},
                 ranges={"fetch_mb": (20.0, 300.0, "log"), "prep_load": (0.1, 0.5)}),
    ScenarioSpec("main_process", "preprocessing in the main process (num_workers=0): main "
                 "process at one full core while the GPU waits", dx.DATA_STARVATION,
                 "main_process", default_gpus=1, params={"workers": 0, "launch_cpu": 0.9},
                 ranges={"workers": None, "launch_cpu": (0.7, 1.0)}),
    ScenarioSpec("sync_stall", "one GPU computes longer (imbalance); the others spin in the "
                 "all-reduce: ~100% util at low power", dx.SYNC_STALL, "imbalance",
                 default_gpus=4, min_gpus=2, names_straggler="straggler"),
    ScenarioSpec("rank_data_stall", "one rank's input pipeline is too slow; that GPU starves "
                 "and the others wait for it in the all-reduce", dx.DATA_STARVATION,
                 "cpu_preprocessing", default_gpus=4, min_gpus=2, names_straggler="straggler"),
    ScenarioSpec("hang", "a collective that never completes: every rank waits in it for a "
                 "rank that is not coming (NCCL: ~100% util at low power, no progress)",
                 dx.SYNC_STALL, "hang", default_gpus=4, min_gpus=2, mode="hang",
                 # The waits reported in NCCL hangs: 44/250, 70/300, 77-80/300, 152/700 W.
                 params={"backend": "nccl"}, ranges={"backend": None,
                                                     "spin_power_frac": (0.15, 0.30)}),
    ScenarioSpec("held", "a job that holds its GPUs' memory and runs nothing (stuck on the "
                 "host)", dx.IDLE, "held", default_gpus=2, mode="held"),
    ScenarioSpec("throttled", "one GPU thermally throttled (clock-event bits, low SM clock, "
                 "slower steps); with several GPUs the others wait for it",
                 dx.THROTTLED, "thermal", default_gpus=2, names_straggler="throttle"),
    ScenarioSpec("dataparallel", "torch.nn.DataParallel: one process drives every GPU (same "
                 "PID), GPU 0 gathers and computes the loss while the others idle",
                 dx.SYNC_STALL, "dataparallel", default_gpus=4, min_gpus=2, mode="dp",
                 names_straggler="gpu0"),
    ScenarioSpec("checkpoint", "healthy run pausing every ckpt_every_s for ckpt_s to write a "
                 "checkpoint: GPUs idle, disk writes (not starvation)", dx.BUSY,
                 default_gpus=2, events="checkpoint"),
    ScenarioSpec("rank0_checkpoint", "healthy DDP run whose rank 0 alone saves a checkpoint "
                 "every ckpt_every_s for ckpt_s while the other ranks wait for it in the next "
                 "all-reduce (NCCL: ~100% util at low power); disk writes on the host",
                 dx.BUSY, default_gpus=4, min_gpus=2, events="rank0_checkpoint",
                 params={"ckpt_every_s": 40.0}),
    ScenarioSpec("validation", "healthy run with periodic forward-only validation passes of a "
                 "different rhythm (not starvation)", dx.BUSY, default_gpus=2,
                 events="validation"),
    ScenarioSpec("epoch_end", "healthy run whose loader workers restart at each epoch "
                 "boundary: a gap while new workers start (not starvation)", dx.BUSY,
                 default_gpus=2, events="epoch_end"),
    ScenarioSpec("restarts", "benchmark-style runs: the same training job started again and "
                 "again; each run starts up (CUDA context, model load: GPU memory held, GPUs "
                 "idle), trains for run_s, exits (memory freed, processes gone), and nothing "
                 "runs for gap_s before the next run (new PIDs); DDP ranks start and stop "
                 "together", dx.BUSY, default_gpus=2, events="restarts",
                 ranges={"startup_s": (2.0, 12.0), "run_s": (20.0, 90.0),
                         "gap_s": (3.0, 20.0)}),
    ScenarioSpec("launch_bound", "launch-bound training: no loader workers, the main process "
                 "at a full core launching many small kernels; the GPU idles microseconds "
                 "between them: utilization flat and low, moderate power (with DDP, every "
                 "rank so)", dx.DATA_STARVATION, "main_process", default_gpus=1, mode="launch",
                 params={"workers": 0, "launch_cpu": 0.97, "main_prep_load": 0.05,
                         "step_s": 0.1},
                 ranges={"workers": None, "launch_cpu": (0.9, 1.0),
                         "main_prep_load": (0.02, 0.08), "step_s": (0.03, 0.5, "log"),
                         "launch_duty": (0.30, 0.65)}),
    # Drawn from the ranges below only for these two (their PARAMS ranges are drawn last or
    # not at all), so adding them changed no other scenario's draws.
    ScenarioSpec("ddp_spread", "healthy DDP on 4-8 GPUs of one model whose boards draw "
                 "different power at the same work (each within 7-12.5% of nominal: mostly "
                 "10-25% apart): every GPU at ~100% utilization, loaders keep up (NCCL)",
                 dx.BUSY, default_gpus=8, min_gpus=4,
                 params={"backend": "nccl", "chip_power_spread": 0.1},
                 ranges={"backend": None, "chip_power_spread": (0.07, 0.125)}),
    ScenarioSpec("small_batch", "compute-bound training of small batches: small kernels back "
                 "to back keep utilization high while few SMs have work (SM activity "
                 "0.15-0.35, low occupancy) at moderate power; loaders keep up",
                 dx.BUSY, default_gpus=2, params=_SMALL, ranges=_SMALL_RANGES),
    ScenarioSpec("demo", "a run that passes through busy, data_starvation, sync_stall, "
                 "throttled, io_fetch and idle phases (truth per phase); GPUs 0 and 1 have "
                 "GPM (SM activity), the others not", dx.BUSY,
                 default_gpus=4, min_gpus=1, params={"gpm": "0,1"},
                 phases=(("busy", 40), ("data_starvation", 60), ("busy", 30),
                         ("sync_stall", 60), ("throttled", 60), ("io_fetch", 45),
                         ("idle", 25))),
)}


def scenario(name: str) -> ScenarioSpec:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UserError(f"unknown sim scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def parse_sim_spec(text: str) -> tuple[str, int]:
    """`NAME` or `NAME:GPUS` -> (name, gpus); a one-line UserError when it is wrong."""
    name, _, count = str(text).strip().partition(":")
    spec = scenario(name)
    if not count:
        return name, spec.default_gpus
    try:
        gpus = int(count)
    except ValueError:
        raise UserError(f"bad GPU count {count!r} in --sim {text!r}: want an integer "
                        f"{spec.min_gpus}..{MAX_GPUS}") from None
    check_gpus(name, gpus)
    return name, gpus


def check_gpus(name: str, gpus: int) -> None:
    spec = scenario(name)
    if not spec.min_gpus <= gpus <= MAX_GPUS:
        why = " (it needs several GPUs)" if spec.min_gpus > 1 else ""
        raise UserError(f"scenario {name} takes {spec.min_gpus}..{MAX_GPUS} GPUs, not {gpus}{why}")


def scenario_params(name: str, overrides: Optional[dict] = None) -> dict:
    """The scenario's default parameters (hardware included), with overrides."""
    spec = scenario(name)
    p = P.defaults(spec.params)
    for k, v in (overrides or {}).items():
        if k not in P.PARAMS:
            raise UserError(f"unknown sim parameter {k!r} (known: {', '.join(sorted(P.PARAMS))})")
        p[k] = v
    return p


def draw_params(name: str, rng) -> dict:
    """Every physical parameter of scenario `name` drawn at random from its documented range
    (see gpumon.sim.params). `rng` is a numpy Generator or an int seed."""
    spec = scenario(name)
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    p = P.draw(rng, P.defaults(spec.params), spec.ranges)
    if spec.name == "throttled":
        p["throttle_all"] = bool(rng.random() < 0.25)
    return p
