"""The simulated node's physical parameters: defaults, documented ranges, random draws.

Every number the model uses is a named parameter here, with a unit, a default, the range
`draw_params` draws it from, and why that range. A scenario overrides some defaults and
some ranges (`ScenarioSpec.params` / `.ranges`); `simulate(..., params={...})` overrides
anything. Ranges marked "log" are drawn log-uniformly, "int" as integers, "choice" from a
tuple of values.

Hardware (from a preset GPU model, constant for the whole node):
  gpu_model          preset name, choice of GPU_MODELS
                                               sets name, memory, power limit, max clocks
  power_limit_w      W     250..700 (from the preset)
                                               enforced limit of public data-centre parts
  sm_clock_max_mhz   MHz   from the preset     highest SM clock
  sm_clock_idle_mhz  MHz   210..420            clock an idle GPU falls to
  clock_load_frac    1     0.90..1.00          SM clock under load / max clock (boost headroom)
  clock_hold_s       s     0.05..1.0           the clock stays up this long after the last kernel
  idle_power_frac    1     0.07..0.20          idle power / limit (A100 ~55 of 400 W)
  compute_power_frac 1     0.65..0.97          power while computing / limit
  spin_power_frac    1     0.15..0.45          power while spinning in an NCCL collective / limit
                                               (public reports: 44/250, 152/700, 77/300 W)
  comm_power_frac    1     0.35..0.65          power while the all-reduce moves data / limit
  chip_power_spread  1     0.005..0.03         boards of one model draw up to this share more or
                                               less at the same work (+-3%: 2x TITAN X 5-6% apart,
                                               8x H100 TP 4%; capped boards hide it)
                           0.07..0.125         ddp_spread: 8x A100 DDP logs read 11-25% apart
  mem_util_compute   1     0.20..0.80          share of compute time device memory is busy
  mem_used_frac      1     0.30..0.95          memory the job holds / total
  temp_ambient_c     C     22..40              temperature at zero power (inlet air)
  temp_load_c        C     55..82              steady temperature at compute power
  temp_tau_s         s     10..60              thermal time constant (first-order lag)
  host_cores         1     32..192 (int)       logical CPUs of the host
  background_cores   cores 0.1..2.0            CPU the rest of the host uses
  gpm                -     all | none | "0,1"  GPUs with GPM (SM activity and friends; Hopper
                                               and newer, not in MIG mode): every one, none, or
                                               those listed (others: values missing)

Workload:
  step_s             s     0.05..2.0 (log)     compute time of one step at load clock
  step_cv            1     0.005..0.06         step-to-step compute jitter (coefficient of
                                               variation)
  comm_frac          1     0.02..0.20          exposed all-reduce time / step_s
  backend            -     nccl | gloo         nccl waits spinning (util 100 %), gloo waits idle
  workers            1     2..12 (int)         DataLoader workers per rank (0 = main process loads)
  prefetch           1     2..4 (int)          batches in flight per worker (prefetch_factor)
  prep_load          1     0.20..0.75 healthy  CPU preprocessing per batch / (workers * step time):
                           1.5..4.0 starved    above 1 the loaders cannot keep up
  prep_cv            1     0.03..0.40          per-batch preprocessing jitter (a batch averages many
                                               samples, so its CV is small)
  prep_common        1     0.3..1.0            share of that jitter's variance common to every rank
                                               at the same step (same data mix); the rest lets ranks
                                               drift apart, and the one behind gates the rest
  worker_cpu         1     0.95..1.00          share of a core a preprocessing worker uses
  worker_io_cpu      1     0.02..0.15          share of a core a worker uses while reading storage
  fetch_mb           MB    0 (cached) or 20..300
                                               read from storage per batch
  disk_load          1     1.4..3.5            storage demand at full speed / disk bandwidth
  disk_latency_ms    ms    0.1..10 (log)       per-request storage latency
  batch_mb           MB    5..200 (log)        bytes uploaded to the GPU per batch (PCIe rx)
  pcie_gbps          GB/s  10..25              host-to-device bandwidth
  launch_cpu         1     0.15..0.70          main thread CPU while the GPU computes (launching
                           0.7..1.0 main_proc. kernels, then waiting in a CUDA sync; a synchronous
                                               num_workers=0 loop spins there)
  main_prep_load     1     0.6..2.5            main-process preprocessing per step / step time
  straggler          index None = drawn from the seed
                                               the GPU others wait for
  straggler_factor   1     1.4..3.0            straggler's compute time / the others'
  slow_input_load    1     1.4..3.5            the slow rank's prep_load (rank_data_stall)
  throttle_clock_frac 1    0.45..0.80          SM clock of a throttled GPU / max
  throttle_reason    -     thermal | power_cap which clock-event bits are raised
  throttle_all       -     False | True        every GPU throttled (no straggler) or one
  temp_slowdown_c    C     83..93              temperature a thermally throttled GPU sits at
  dp_gpu0_extra      1     0.3..1.2            GPU 0's solo work per DataParallel step / step_s
  ckpt_every_s       s     30..300 (log)       time between checkpoints
  ckpt_s             s     2..30               a checkpoint's pause
  ckpt_write_mbps    MB/s  200..3000           disk write rate while saving
  val_every_s        s     40..300             time between validation passes
  val_s              s     5..40               a validation pass
  val_compute_frac   1     0.25..0.45          forward-only compute / step_s
  val_startup_s      s     0.5..5              validation loader start-up
  epoch_s            s     40..600 (log)       an epoch
  worker_startup_s   s     2..20               new loader workers' start-up at an epoch boundary
  startup_s          s     2..12 (restarts)    a run's start-up before its loaders start: CUDA
                                               context, NCCL init, model load (GPU memory held,
                                               GPUs idle)
  run_s              s     20..90 (restarts)   a benchmark-style run's training, start to exit
  gap_s              s     3..20 (restarts)    nothing on the GPUs between one run's exit and
                                               the next run's start
  launch_duty        1     0.30..0.65          share of a launch-bound step the GPU runs kernels
                           (launch_bound)      (small kernels; it idles microseconds between
                                               them while the main thread launches the next)

The last four are drawn only for the scenarios that use them (their ranges are the scenario's),
so adding them changed no other scenario's draws.

GPM levels while computing (drawn only for small_batch, from its ranges; elsewhere None
derives them from the draws above, so adding them changed no draw; a caller may set them):
  sm_active_compute  1     0.40..0.95          share of SMs with a warp while a step computes;
                                               None: from compute_power_frac (a hotter workload
                                               keeps more SMs busy)
                           0.15..0.35          small_batch: small kernels fill few SMs
  sm_occupancy_compute 1   0..1                resident warps / the SMs' maximum while computing;
                                               None: 0.6 x sm_active_compute
                           0.04..0.15          small_batch
  tensor_active_compute 1  0..1                tensor pipes' active share while computing;
                                               None: 0.55 x sm_active_compute
                           0.02..0.15          small_batch
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from gpumon.errors import UserError

# name: (memory MiB, power limit W, max SM clock MHz, max memory clock MHz)
GPU_MODELS: dict[str, tuple[int, int, int, int]] = {
    "NVIDIA A100-SXM4-80GB": (81920, 400, 1410, 1593),
    "NVIDIA A100-PCIE-40GB": (40960, 250, 1410, 1215),
    "NVIDIA H100 80GB HBM3": (81559, 700, 1980, 2619),
    "NVIDIA L40S": (46068, 350, 2520, 9001),
    "NVIDIA RTX A6000": (49140, 300, 2100, 8001),
    "Tesla V100-SXM2-32GB": (32768, 300, 1530, 877),
    "NVIDIA GeForce RTX 3090": (24576, 350, 2100, 9751),
}

# name -> (default, draw range). A range is (lo, hi), (lo, hi, "log"), (lo, hi, "int"),
# ("choice", (values...)), or None (not drawn).
PARAMS: dict[str, tuple[Any, Any]] = {
    "gpu_model": ("NVIDIA A100-SXM4-80GB", ("choice", tuple(GPU_MODELS))),
    "power_limit_w": (None, None),        # None: the preset's
    "sm_clock_max_mhz": (None, None),     # None: the preset's
    "sm_clock_idle_mhz": (210.0, (210.0, 420.0)),
    "clock_load_frac": (0.97, (0.90, 1.0)),
    "clock_hold_s": (0.3, (0.05, 1.0)),
    "idle_power_frac": (0.13, (0.07, 0.20)),
    "compute_power_frac": (0.85, (0.65, 0.97)),
    "spin_power_frac": (0.28, (0.15, 0.45)),
    "comm_power_frac": (0.50, (0.35, 0.65)),
    "mem_util_compute": (0.45, (0.20, 0.80)),
    "mem_used_frac": (0.75, (0.30, 0.95)),
    "temp_ambient_c": (30.0, (22.0, 40.0)),
    "temp_load_c": (68.0, (55.0, 82.0)),
    "temp_tau_s": (30.0, (10.0, 60.0)),
    "host_cores": (64, (32, 192, "int")),
    "background_cores": (0.5, (0.1, 2.0)),
    "step_s": (0.25, (0.05, 2.0, "log")),
    "step_cv": (0.02, (0.005, 0.06)),
    "comm_frac": (0.08, (0.02, 0.20)),
    "backend": ("nccl", ("choice", ("nccl", "nccl", "nccl", "gloo"))),
    "workers": (4, (2, 12, "int")),
    "prefetch": (2, (2, 4, "int")),
    "prep_load": (0.5, (0.20, 0.75)),
    "prep_cv": (0.15, (0.03, 0.40)),
    "prep_common": (0.8, (0.3, 1.0)),
    "worker_cpu": (0.98, (0.95, 1.0)),
    "worker_io_cpu": (0.06, (0.02, 0.15)),
    "fetch_mb": (0.0, None),
    "disk_load": (2.0, (1.4, 3.5)),
    "disk_latency_ms": (2.0, (0.1, 10.0, "log")),
    "batch_mb": (40.0, (5.0, 200.0, "log")),
    "pcie_gbps": (20.0, (10.0, 25.0)),
    "launch_cpu": (0.35, (0.15, 0.70)),
    "main_prep_load": (1.2, (0.6, 2.5)),
    "straggler": (None, None),
    "straggler_factor": (2.0, (1.4, 3.0)),
    "slow_input_load": (2.2, (1.4, 3.5)),
    "throttle_clock_frac": (0.62, (0.45, 0.80)),
    "throttle_reason": ("thermal", ("choice", ("thermal", "thermal", "power_cap"))),
    "throttle_all": (False, None),
    "temp_slowdown_c": (88.0, (83.0, 93.0)),
    "dp_gpu0_extra": (0.6, (0.3, 1.2)),
    "ckpt_every_s": (50.0, (30.0, 300.0, "log")),
    "ckpt_s": (8.0, (2.0, 30.0)),
    "ckpt_write_mbps": (800.0, (200.0, 3000.0)),
    "val_every_s": (50.0, (40.0, 300.0)),
    "val_s": (15.0, (5.0, 40.0)),
    "val_compute_frac": (0.33, (0.25, 0.45)),
    "val_startup_s": (2.0, (0.5, 5.0)),
    "epoch_s": (50.0, (40.0, 600.0, "log")),
    "worker_startup_s": (6.0, (2.0, 20.0)),
    # Drawn only where a scenario gives a range (after every other parameter, so that the
    # other scenarios' draws stay what they were).
    "startup_s": (6.0, None),
    "run_s": (45.0, None),
    "gap_s": (8.0, None),
    "launch_duty": (0.45, None),
    # Drawn for every scenario, last so that the draws above stay what they were.
    "chip_power_spread": (0.03, (0.005, 0.03)),
    # Not drawn (see the module's docstring): the draws above stay what they were.
    "gpm": ("all", None),
    "sm_active_compute": (None, None),
    "sm_occupancy_compute": (None, None),
    "tensor_active_compute": (None, None),
}

# Parameters of the node's hardware: the same in every phase of a run (`demo` switches the
# workload between phases, not the GPUs).
HARDWARE = ("gpu_model", "power_limit_w", "sm_clock_max_mhz", "sm_clock_idle_mhz",
            "clock_load_frac", "clock_hold_s", "idle_power_frac", "compute_power_frac",
            "spin_power_frac", "comm_power_frac", "mem_util_compute", "temp_ambient_c",
            "temp_load_c", "temp_tau_s", "host_cores", "background_cores", "chip_power_spread",
            "gpm")

# sm_active_compute derived from compute_power_frac: its draw range maps linearly onto
# SM_ACTIVE_RANGE.
SM_ACTIVE_RANGE = (0.40, 0.95)
COMPUTE_POWER_RANGE = (0.65, 0.97)
# Occupancy and tensor activity as shares of the SM activity, where not given.
OCCUPANCY_OF_ACTIVE = 0.6
TENSOR_OF_ACTIVE = 0.55

# Smallest gap between the idle and the spinning power fractions: a spinning SM burns more
# than an idle one, or the physics is wrong.
MIN_SPIN_ABOVE_IDLE = 0.03


def _draw_one(rng: np.random.Generator, spec: Any) -> Any:
    if spec[0] == "choice":
        values = spec[1]
        return values[int(rng.integers(len(values)))]
    lo, hi = spec[0], spec[1]
    kind = spec[2] if len(spec) > 2 else ""
    if kind == "int":
        return int(rng.integers(int(lo), int(hi) + 1))
    if kind == "log":
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    return float(rng.uniform(lo, hi))


def defaults(overrides: Optional[dict] = None) -> dict:
    """The base defaults with a scenario's (or a caller's) overrides applied."""
    p = {name: d for name, (d, _) in PARAMS.items()}
    for name, value in (overrides or {}).items():
        if name not in PARAMS:
            raise UserError(f"unknown sim parameter {name!r} (known: {', '.join(sorted(PARAMS))})")
        p[name] = value
    return p


def draw(rng: np.random.Generator, base: dict, ranges: dict) -> dict:
    """Every drawable parameter drawn from its range (scenario ranges first)."""
    p = dict(base)
    for name, (_, rng_spec) in PARAMS.items():
        spec = ranges.get(name, rng_spec)
        if spec is not None:
            p[name] = _draw_one(rng, spec)
    return p


def finish(p: dict) -> dict:
    """Fill in the preset's hardware numbers and make the draws physically consistent."""
    p = dict(p)
    if p["gpu_model"] not in GPU_MODELS:
        raise UserError(f"unknown gpu_model {p['gpu_model']!r} (known: {', '.join(GPU_MODELS)})")
    mem, limit, smax, mmax = GPU_MODELS[p["gpu_model"]]
    p.setdefault("mem_total_mib", mem)
    p["mem_total_mib"] = p.get("mem_total_mib") or mem
    p["mem_clock_max_mhz"] = mmax
    if p["power_limit_w"] is None:
        p["power_limit_w"] = float(limit)
    if p["sm_clock_max_mhz"] is None:
        p["sm_clock_max_mhz"] = float(smax)
    if not 50 <= float(p["power_limit_w"]) <= 1500:
        raise UserError(f"power_limit_w {p['power_limit_w']} is outside 50..1500 W")
    if not 0.01 <= float(p["step_s"]) <= 60:
        raise UserError(f"step_s {p['step_s']} is outside 0.01..60 s")
    if not 0.05 <= float(p["launch_duty"]) <= 1:
        raise UserError(f"launch_duty {p['launch_duty']} is outside 0.05..1")
    for name in ("startup_s", "run_s", "gap_s"):
        if not 0 < float(p[name]) <= 86400:
            raise UserError(f"{name} {p[name]} is outside 0..86400 s (above 0)")
    p["spin_power_frac"] = max(p["spin_power_frac"], p["idle_power_frac"] + MIN_SPIN_ABOVE_IDLE)
    p["comm_power_frac"] = max(p["comm_power_frac"], p["spin_power_frac"])
    p["compute_power_frac"] = max(p["compute_power_frac"], p["comm_power_frac"] + 0.05)
    p["sm_clock_idle_mhz"] = min(p["sm_clock_idle_mhz"], 0.5 * p["sm_clock_max_mhz"])
    p["temp_load_c"] = max(p["temp_load_c"], p["temp_ambient_c"] + 15)
    p["workers"] = int(p["workers"])
    p["prefetch"] = int(p["prefetch"])
    p["host_cores"] = int(p["host_cores"])
    if p["backend"] not in ("nccl", "gloo"):
        raise UserError(f"backend must be nccl or gloo, not {p['backend']!r}")
    if p["throttle_reason"] not in ("thermal", "power_cap"):
        raise UserError("throttle_reason must be thermal or power_cap, "
                        f"not {p['throttle_reason']!r}")
    return _gpm_levels(p)


def _gpm_levels(p: dict) -> dict:
    """The GPM levels while computing, derived where not given, and ``gpm`` checked."""
    if p["sm_active_compute"] is None:
        lo, hi = COMPUTE_POWER_RANGE
        x = min(1.0, max(0.0, (p["compute_power_frac"] - lo) / (hi - lo)))
        lo, hi = SM_ACTIVE_RANGE
        p["sm_active_compute"] = lo + x * (hi - lo)
    active = float(p["sm_active_compute"])
    if p["sm_occupancy_compute"] is None:
        p["sm_occupancy_compute"] = OCCUPANCY_OF_ACTIVE * active
    if p["tensor_active_compute"] is None:
        p["tensor_active_compute"] = TENSOR_OF_ACTIVE * active
    for name in ("sm_active_compute", "sm_occupancy_compute", "tensor_active_compute"):
        if not 0 <= float(p[name]) <= 1:
            raise UserError(f"{name} {p[name]} is outside 0..1")
    gpm_gpus(p["gpm"], 1)
    return p


def gpm_gpus(spec, n: int) -> tuple[bool, ...]:
    """Which of ``n`` GPUs have GPM by the ``gpm`` parameter: "all", "none", or GPU indices
    ("0,1" or a sequence; indices past the node's GPUs name none)."""
    if spec in ("all", "none"):
        return (spec == "all",) * n
    try:
        listed = {int(x) for x in (spec.split(",") if isinstance(spec, str) else spec)}
    except (TypeError, ValueError):
        raise UserError(f"gpm must be all, none or GPU indices like 0,1, not {spec!r}") from None
    return tuple(g in listed for g in range(n))
