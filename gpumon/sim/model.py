"""The simulated training node: an event model of data-parallel training.

Per step every rank takes its next batch from its input pipeline (K loader workers, each
fetching from storage and preprocessing with jitter, `prefetch` batches in flight per worker,
PyTorch's dispatch order), uploads it over PCIe, computes for its step time (scaled by its
clock), and with several GPUs joins the all-reduce: it waits for the slowest rank (NCCL spins a
kernel at low power; gloo waits idle), then communicates. DataParallel, checkpoints, validation
passes, epoch boundaries, restarted runs and launch-bound steps are variations of that loop.

The model writes *segments*: for each GPU, contiguous (start, end, kind, phase) spans of what
the GPU is doing; for each host process, (start, end, cpu, io, read, write) spans. Times are
exact floats (finer than 1 ms). `gpumon.sim.observe` turns segments into what NVML and the
host would report.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gpumon.errors import UserError
from gpumon.samples import CLOCK_EVENT_SW_POWER_CAP, CLOCK_EVENT_SW_THERMAL
from gpumon.sim import params as P
from gpumon.sim.scenarios import ScenarioSpec, check_gpus, scenario, scenario_params

# What a GPU does in a segment. LAUNCH: a launch-bound step, many small kernels with
# microsecond gaps between them while the main thread launches the next (a share
# `launch_duty` of it runs kernels; gpumon.sim.observe spreads that share evenly).
NOJOB, WAIT_DATA, UPLOAD, COMPUTE, SPIN, WAIT_IDLE, COMM, PAUSE, SAVECOPY, LAUNCH = range(10)
NKINDS = 10
# Truth state of each kind: 0 computing, 1 waiting_data, 2 waiting_sync, 3 idle (LAUNCH:
# computing; the observer splits it into computing and waiting for the host's main process).
KIND_STATE = np.array([3, 1, 1, 0, 2, 2, 0, 3, 3, 0])
# A kernel runs (NVML counts the period towards utilization).
# Copying a checkpoint off the GPU (SAVECOPY) reads a few per cent: real 2-GPU and 8-GPU
# logs show rank 0 at 4-10% while it saves, the other ranks at 0 (or spinning at 100%).
# LAUNCH: 1 here, the phase's launch_duty in the observer.
KIND_KERNEL = np.array([0, 0, 0, 1, 1, 0, 1, 0, 0.07, 1], dtype=float)

# Main-process CPU (share of one core) outside computing: blocked on the loader queue or in
# a synchronising CUDA call; small but not zero (Python bookkeeping, NCCL watchdog).
MAIN_WAIT_CPU = 0.05
MAIN_SYNC_CPU = 0.08
# Other threads of the main process (pin-memory thread and friends), cores.
MAIN_EXTRA_CPU = 0.04
# Loader workers starting up (imports, dataset open) use about this share of a core.
WORKER_STARTUP_CPU = 0.6
# Main process while serialising a checkpoint.
CKPT_MAIN_CPU = 0.9
# Main process while a run starts up (imports, CUDA context, building and loading the model).
STARTUP_MAIN_CPU = 0.95
# Run-to-run variation of a restarted job's start-up, training and gap lengths (CV).
RESTART_CV = 0.1
# A loader reconfigured between demo phases starts after this, s.
PHASE_LOADER_STARTUP_S = 0.5
# First PID handed out to simulated processes.
FIRST_PID = 40000
# The GPU's active clock wobbles by this many 15 MHz bins.
CLOCK_BIN_MHZ = 15.0


# Warm-up before t = 0, in batches' preprocessing times (see Node.__init__).
WARMUP_PREPS = 3.0


class Jitter:
    """Mean-one lognormal multipliers from a pre-drawn pool (one numpy call per 4096)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.pool: list = []

    def z(self) -> float:
        if not self.pool:
            self.pool = self.rng.standard_normal(4096).tolist()
        return self.pool.pop()

    def __call__(self, cv: float, z: Optional[float] = None) -> float:
        z = self.z() if z is None else z
        if cv <= 0:
            return 1.0
        s = math.sqrt(math.log1p(cv * cv))
        return math.exp(s * z - 0.5 * s * s)


class Proc:
    """A simulated host process (a rank's main process or a loader worker)."""
    __slots__ = ("pid", "ppid", "name", "role", "gpus", "birth", "death", "segs", "extra")

    def __init__(self, pid, ppid, name, role, gpus, birth, extra=0.0):
        self.pid, self.ppid, self.name, self.role = pid, ppid, name, role
        self.gpus = tuple(gpus)
        self.birth, self.death = birth, math.inf
        self.segs: list = []          # (t0, t1, cpu cores, io blocked, read MB/s, write MB/s)
        self.extra = extra            # cores used by other threads while alive (main only)

    def seg(self, t0, t1, cpu, io=0.0, read=0.0, write=0.0):
        if t1 > t0:
            self.segs.append((t0, t1, cpu, io, read, write))


@dataclass
class Phase:
    """One scenario's workload on this node (a run has one; `demo` cycles through several)."""
    index: int
    spec: ScenarioSpec
    p: dict
    start: float
    seconds: float
    step_s: list = field(default_factory=list)       # per rank, at its clock
    prep_s: list = field(default_factory=list)       # per rank, per batch
    throttled: tuple = ()                            # GPUs throttled in this phase
    straggler: Optional[int] = None                  # truth's straggler GPU

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def mode(self) -> str:
        return self.spec.mode

    def loader_key(self):
        p = self.p
        return (self.mode, p["workers"], p["prefetch"], p["fetch_mb"] > 0)


class Loader:
    """One rank's input pipeline: PyTorch DataLoader dispatch order, K workers, prefetch."""

    def __init__(self, node, ph: Phase, rank: int, main: Proc, workers: list, t0: float,
                 startup: float):
        p = ph.p
        self.node, self.ph, self.rank, self.main, self.workers = node, ph, rank, main, workers
        self.k = len(workers)
        self.ready: deque = deque()
        self.nb = 0
        self.gen = node.loader_gen
        self.disk_free = t0
        self.free = [t0 + startup] * self.k
        for w in workers:
            w.seg(t0, t0 + startup, WORKER_STARTUP_CPU)
        for _ in range(self.k * int(p["prefetch"])):
            self._dispatch(t0)

    def _fetch(self, proc: Proc, t: float) -> float:
        """Read one batch from storage starting at t; the rank's share of the disk is FIFO."""
        p, node = self.ph.p, self.node
        mb = float(p["fetch_mb"])
        if mb <= 0:
            return t
        x0 = max(t + p["disk_latency_ms"] / 1000.0, self.disk_free)
        x1 = x0 + mb / node.disk_share_mbps(self.ph)
        self.disk_free = x1
        cpu = p["worker_io_cpu"]
        proc.seg(t, x0, cpu, 1.0)
        proc.seg(x0, x1, cpu, 1.0, mb / (x1 - x0))
        return x1

    def _dispatch(self, t: float) -> None:
        i = self.nb % self.k
        self.nb += 1
        w = self.workers[i]
        s = max(t, self.free[i])
        s = self._fetch(w, s)
        e = s + self.ph.prep_s[self.rank] * self._prep_jitter(self.nb - 1)
        w.seg(s, e, self.ph.p["worker_cpu"])
        self.free[i] = e
        self.ready.append(e)

    def _prep_jitter(self, b: int) -> float:
        """Batch b's preprocessing-time multiplier: a part common to every rank's batch b
        (the same data mix at the same step), the rest the rank's own."""
        p, node = self.ph.p, self.node
        c = min(1.0, max(0.0, float(p["prep_common"])))
        key = (self.gen, b)
        entry = node.common_z.get(key)
        if entry is None:
            entry = node.common_z[key] = [node.jit.z(), node.ranks(self.ph)]
        zc = entry[0]
        entry[1] -= 1
        if entry[1] <= 0:
            del node.common_z[key]
        z = math.sqrt(c) * zc + math.sqrt(1.0 - c) * node.jit.z()
        return node.jit(p["prep_cv"], z)

    def take(self, t: float) -> float:
        """When the batch the rank asks for at t is in hand."""
        if self.k == 0:   # num_workers=0: the main process fetches and preprocesses now
            s = self._fetch(self.main, t)
            e = s + self.ph.prep_s[self.rank] * self._prep_jitter(self.nb)
            self.nb += 1
            self.main.seg(s, e, 1.0)
            return e
        return self.ready.popleft()

    def consumed(self, t: float) -> None:
        if self.k:
            self._dispatch(t)


class Node:
    """The simulated node: ranks, loaders, processes, and the GPU/host segments they write."""

    def __init__(self, name: str, gpus: int, seed: int = 0, params: Optional[dict] = None,
                 phases: Optional[list] = None):
        spec = scenario(name)
        check_gpus(name, gpus)
        self.spec, self.n, self.seed = spec, int(gpus), int(seed)
        self.rng = np.random.default_rng([self.seed, 0])
        self.jit = Jitter(self.rng)
        overrides = dict(params or {})
        top = scenario_params(name, overrides)
        self.hw = P.finish(top)
        hw = self.hw
        n = self.n
        # Small per-GPU differences between boards of one model.
        hr = np.random.default_rng([self.seed, 2])
        self.idle_w = hw["idle_power_frac"] * hw["power_limit_w"] * hr.uniform(0.95, 1.05, n)
        self.t_amb = hw["temp_ambient_c"] + hr.uniform(-2.0, 2.0, n)
        self.t_load = np.maximum(hw["temp_load_c"] + hr.uniform(-3.0, 3.0, n), self.t_amb + 10)
        self.uuids = [f"GPU-{self._hex(hr, 8)}-{self._hex(hr, 4)}-{self._hex(hr, 4)}-"
                      f"{self._hex(hr, 4)}-{self._hex(hr, 12)}" for _ in range(n)]
        # Power at the same work differs from board to board (after the UUIDs: their draws stay).
        self.chip = 1.0 + float(hw["chip_power_spread"]) * hr.uniform(-1.0, 1.0, n)
        straggler = hw["straggler"]
        if straggler is None:
            straggler = int(self.rng.integers(n))
        elif not 0 <= int(straggler) < n:
            raise UserError(f"straggler {straggler} is not one of the {n} GPUs")
        self.straggler_param = int(straggler)
        # Phases: one, or demo's cycle.
        # A caller's phases: (scenario, seconds[, params]) in order, the last one for ever.
        custom = phases is not None
        entries = [tuple(e) for e in phases] if custom else \
            (spec.phases or ((name, math.inf),))
        if custom:
            if not entries:
                raise UserError("phases: at least one (scenario, seconds) is needed")
            entries[-1] = (entries[-1][0], math.inf) + tuple(entries[-1][2:])
        self.phases: list[Phase] = []
        start = 0.0
        for entry in entries:
            pname, secs = entry[0], float(entry[1])
            pspec = scenario(pname)
            if pspec.phases:
                raise UserError(f"phases: {pname} is itself a sequence of phases")
            if pspec.min_gpus > n:
                if custom:
                    check_gpus(pname, n)
                continue                    # demo on one GPU skips multi-GPU phases
            if not secs > 0:
                raise UserError(f"phases: {pname} needs a duration above 0 s")
            if custom:
                ov = {**overrides, **(entry[2] if len(entry) > 2 and entry[2] else {})}
            else:
                own = set(pspec.params) | set(pspec.ranges)
                ov = {k: v for k, v in overrides.items() if k not in own or not spec.phases}
            pp = P.finish({**scenario_params(pname, ov), **{k: hw[k] for k in P.HARDWARE}})
            self.phases.append(self._make_phase(len(self.phases), pspec, pp, start, secs))
            start += secs
        self.cycle = start if (spec.phases and not custom) else math.inf
        # State of the run.
        # Run the job before t = 0 until its input pipeline is in steady state: every worker
        # starts its first batches together, and with per-batch jitter the slowest of that
        # first wave lands up to ~2x a batch's preprocessing time later. A shorter warm-up
        # showed a healthy scenario's first seconds as ranks waiting for data.
        first = self.phases[0] if self.phases else None
        prep = max(first.prep_s) if first is not None and first.prep_s else 0.0
        self.warmup = max(12.0, 8.0 * self.hw["step_s"], WARMUP_PREPS * prep)
        self.t = -self.warmup
        self.gsegs: list[list] = [[] for _ in range(n)]   # (t0, t1, kind, phase index)
        self.procs: list[Proc] = []
        self.pauses: list = []                            # (t0, t1)
        self.gaps: list = []                              # (t0, t1): between runs, no job
        self.next_pid = FIRST_PID
        self.cur: Optional[Phase] = None
        self.cur_start = -math.inf
        self.mains: list[Proc] = []
        self.loaders: list[Loader] = []
        self.next_event = math.inf
        self.loader_gen = 0
        self.common_z: dict = {}

    @staticmethod
    def _hex(rng, k):
        return "".join("0123456789abcdef"[int(x)] for x in rng.integers(0, 16, k))

    # -- phases ----------------------------------------------------------------------------
    def _make_phase(self, index, spec, p, start, secs) -> Phase:
        n = self.n
        ph = Phase(index, spec, p, start, secs)
        step = [p["step_s"]] * n
        load_clock = p["clock_load_frac"]
        sg = self.straggler_param
        if p["straggler"] is not None:
            sg = int(p["straggler"])
            if not 0 <= sg < n:
                raise UserError(f"straggler {sg} is not one of the {n} GPUs")
        if spec.name == "sync_stall":
            step[sg] *= p["straggler_factor"]
            ph.straggler = sg
        if spec.name == "throttled":
            ph.throttled = tuple(range(n)) if (p["throttle_all"] or n == 1) else (sg,)
            for g in ph.throttled:
                step[g] *= load_clock / p["throttle_clock_frac"]
            if len(ph.throttled) == 1 and n > 1:
                ph.straggler = ph.throttled[0]
        if spec.mode == "dp":
            ph.straggler = 0
        ph.step_s = step
        step_total = p["step_s"] * (1 + (p["comm_frac"] if n > 1 else 0)) + self.upload_s(p)
        k = max(int(p["workers"]), 1)
        prep = [p["prep_load"] * k * step_total] * n
        if p["workers"] == 0:
            prep = [p["main_prep_load"] * step_total] * n
        if spec.name == "rank_data_stall":
            prep[sg] = p["slow_input_load"] * k * step_total
            ph.straggler = sg
        ph.prep_s = prep
        # Storage bandwidth that makes the disk the bottleneck by disk_load.
        p["disk_mbps"] = (n * p["fetch_mb"] / step_total / p["disk_load"]) if p["fetch_mb"] > 0 \
            else math.inf
        return ph

    def upload_s(self, p) -> float:
        share = self.n if self.spec.mode == "dp" else 1
        return p["batch_mb"] / share / (p["pcie_gbps"] * 1000.0)

    def disk_share_mbps(self, ph: Phase) -> float:
        ranks = 1 if ph.mode == "dp" else self.n
        return ph.p["disk_mbps"] / ranks

    def phase_at(self, t: float) -> tuple[Phase, float]:
        """The phase at model time t and when its current occurrence started."""
        if len(self.phases) == 1 or t < 0:
            return self.phases[0], (0.0 if len(self.phases) > 1 else -math.inf)
        c = math.floor(t / self.cycle) if math.isfinite(self.cycle) else 0
        x = t - c * self.cycle if c else t
        for ph in self.phases:
            if x < ph.start + ph.seconds:
                return ph, (c * self.cycle if c else 0.0) + ph.start
        return self.phases[-1], (c * self.cycle if c else 0.0) + self.phases[-1].start

    def phase_end(self, ph: Phase, start: float) -> float:
        return start + ph.seconds if math.isfinite(ph.seconds) else math.inf

    # -- processes -------------------------------------------------------------------------
    def _pid(self) -> int:
        pid = self.next_pid
        self.next_pid += 1
        return pid

    def _end_procs(self, procs, t):
        for pr in procs:
            if pr.death == math.inf:
                pr.death = t

    def _start_job(self, ph: Phase, t: float) -> None:
        n = self.n
        if ph.mode == "dp":
            m = Proc(self._pid(), 1, "python", "main", range(n), t,
                     MAIN_EXTRA_CPU + 0.1 * n)
            self.mains = [m] * n
            self.procs.append(m)
        else:
            self.mains = []
            for r in range(n):
                m = Proc(self._pid(), 1, "python", "main", (r,), t, MAIN_EXTRA_CPU)
                self.mains.append(m)
                self.procs.append(m)

    def ranks(self, ph: Phase) -> int:
        return 1 if ph.mode == "dp" else self.n

    def _new_loaders(self, ph: Phase, t: float, startup: float) -> list:
        self.loader_gen += 1
        ranks = self.ranks(ph)
        loaders = []
        for r in range(ranks):
            main = self.mains[r]
            ws = []
            for _ in range(int(ph.p["workers"])):
                w = Proc(self._pid(), main.pid, "pt_data_worker", "worker", (), t)
                ws.append(w)
                self.procs.append(w)
            loaders.append(Loader(self, ph, r, main, ws, t, startup))
        return loaders

    def _kill_workers(self, loaders, t):
        for ld in loaders:
            self._end_procs(ld.workers, t)

    def _enter(self, ph: Phase, start: float) -> None:
        t = self.t
        prev = self.cur
        if ph.mode == "nojob":
            if prev is not None and prev.mode != "nojob":
                self._end_procs([pr for pr in self.procs if pr.death == math.inf], t)
            self.mains, self.loaders = [], []
        else:
            if prev is None or prev.mode == "nojob" or prev.mode != ph.mode:
                if prev is not None:
                    self._end_procs([pr for pr in self.procs if pr.death == math.inf], t)
                self._start_job(ph, t)
                self.loaders = self._new_loaders(ph, t, 0.0 if prev is None
                                                 else PHASE_LOADER_STARTUP_S)
            elif prev.loader_key() != ph.loader_key() or prev.prep_s != ph.prep_s:
                self._kill_workers(self.loaders, t)
                self.loaders = self._new_loaders(ph, t, PHASE_LOADER_STARTUP_S)
            else:
                for ld in self.loaders:
                    ld.ph = ph
        self.cur, self.cur_start = ph, start
        p = ph.p
        every = {"checkpoint": p["ckpt_every_s"], "rank0_checkpoint": p["ckpt_every_s"],
                 "validation": p["val_every_s"], "epoch_end": p["epoch_s"],
                 "restarts": p["run_s"]}.get(ph.spec.events)
        if every:
            first = max(start, 0.0) + every * float(self.rng.uniform(0.4, 0.9))
            self.next_event = first
        else:
            self.next_event = math.inf

    # -- the step loop ---------------------------------------------------------------------
    def run_until(self, t_end: float) -> None:
        while self.t < t_end:
            ph, start = self.phase_at(self.t)
            if ph is not self.cur or start != self.cur_start:
                self._enter(ph, start)
            if ph.mode == "nojob":
                end = min(self.phase_end(ph, start), self.t + 1.0)
                for g in range(self.n):
                    self._g(g, self.t, end, NOJOB, ph)
                self.t = end
            elif ph.mode in ("hang", "held"):
                self._stuck(ph, start)
            elif self.t >= self.next_event:
                self._event(ph)
            elif ph.mode == "dp":
                self._dp_step(ph)
            else:
                self._ddp_step(ph)

    def _stuck(self, ph: Phase, start: float) -> None:
        """A job that makes no progress. hang: every rank waits in a collective for a rank
        that is not coming (NCCL: spinning, ~100% util at low power). held: the ranks hold
        their GPUs' memory and run nothing (stuck on the host: a deadlock, a dead loader)."""
        end = min(self.phase_end(ph, start), self.t + 1.0)
        kind = SPIN if ph.mode == "hang" else WAIT_IDLE
        for g in range(self.n):
            self._g(g, self.t, end, kind, ph)
        for m in self.mains:
            m.seg(self.t, end, MAIN_SYNC_CPU)
        self.t = end

    def _g(self, g, t0, t1, kind, ph):
        if t1 > t0:
            self.gsegs[g].append((t0, t1, kind, ph.index))

    def _ddp_step(self, ph: Phase) -> None:
        p = ph.p
        t = self.t
        loaders = self.loaders
        up = self.upload_s(p)
        ends = []
        for r in range(self.n):
            ld = loaders[r]
            main = self.mains[r]
            ready = ld.take(t)
            c0 = ready if ready > t else t
            if ld.k:
                main.seg(t, c0, MAIN_WAIT_CPU)
            u1 = c0 + up
            ce = u1 + ph.step_s[r] * self.jit(p["step_cv"])
            self._g(r, t, c0, WAIT_DATA, ph)
            self._g(r, c0, u1, UPLOAD, ph)
            self._g(r, u1, ce, LAUNCH if ph.mode == "launch" else COMPUTE, ph)
            main.seg(c0, ce, p["launch_cpu"])
            ld.consumed(c0)
            ends.append(ce)
        if self.n > 1:
            b = max(ends)
            comm = p["step_s"] * p["comm_frac"]
            wait = SPIN if p["backend"] == "nccl" else WAIT_IDLE
            for r, ce in enumerate(ends):
                self._g(r, ce, b, wait, ph)
                self._g(r, b, b + comm, COMM, ph)
                self.mains[r].seg(ce, b + comm, MAIN_SYNC_CPU)
            self.t = b + comm
        else:
            self.t = ends[0]

    def _dp_step(self, ph: Phase) -> None:
        p = ph.p
        t = self.t
        ld, main, n = self.loaders[0], self.mains[0], self.n
        ready = ld.take(t)
        c0 = ready if ready > t else t
        if ld.k:
            main.seg(t, c0, MAIN_WAIT_CPU)
        u1 = c0 + self.upload_s(p)
        extra = p["dp_gpu0_extra"] * p["step_s"]
        x1, x2 = 0.4 * extra, 0.6 * extra
        fwd = [u1 + ph.step_s[g] / 3.0 * self.jit(p["step_cv"]) for g in range(n)]
        gather = max(fwd)
        bs = gather + x1
        bwd = [bs + ph.step_s[g] * 2.0 / 3.0 * self.jit(p["step_cv"]) for g in range(n)]
        red = max(bwd)
        end = red + x2
        for g in range(n):
            self._g(g, t, c0, WAIT_DATA, ph)
            self._g(g, c0, u1, UPLOAD, ph)
            self._g(g, u1, fwd[g], COMPUTE, ph)
            self._g(g, fwd[g], gather, WAIT_IDLE, ph)
            self._g(g, gather, bs, COMPUTE if g == 0 else WAIT_IDLE, ph)
            self._g(g, bs, bwd[g], COMPUTE, ph)
            self._g(g, bwd[g], red, WAIT_IDLE, ph)
            self._g(g, red, end, COMPUTE if g == 0 else WAIT_IDLE, ph)
        # One Python thread per GPU in parallel_apply: the GIL keeps the busiest near a core.
        main.seg(c0, end, min(1.0, p["launch_cpu"] * 1.6))
        ld.consumed(c0)
        self.t = end

    # -- pauses that are not starvation ----------------------------------------------------
    def _event(self, ph: Phase) -> None:
        kind = ph.spec.events
        if kind in ("checkpoint", "rank0_checkpoint"):
            self._checkpoint(ph, kind)
        elif kind == "validation":
            self._validation(ph)
        elif kind == "epoch_end":
            self._epoch_end(ph)
        elif kind == "restarts":
            self._restart(ph)

    def _checkpoint(self, ph: Phase, kind: str) -> None:
        """Rank 0 saves (model and optimizer to disk). checkpoint: every rank stops
        meanwhile; rank0_checkpoint: the other ranks have gone on to the next all-reduce and
        wait there for it (NCCL: spinning)."""
        p, t = ph.p, self.t
        ck = p["ckpt_s"]
        # torch.save moves the tensors to host memory one by one while it pickles them:
        # in the real logs, about the first half of the save.
        copy = 0.5 * ck
        self._g(0, t, t + copy, SAVECOPY, ph)
        self._g(0, t + copy, t + ck, PAUSE, ph)
        others = PAUSE if kind == "checkpoint" else (
            SPIN if p["backend"] == "nccl" else WAIT_IDLE)
        for g in range(1, self.n):
            self._g(g, t, t + ck, others, ph)
        seen = set()
        for r, m in enumerate(self.mains):
            if id(m) in seen:
                continue
            seen.add(id(m))
            if r == 0:
                m.seg(t, t + ck, CKPT_MAIN_CPU, 0.3, 0.0, p["ckpt_write_mbps"])
            else:
                m.seg(t, t + ck, MAIN_SYNC_CPU)
        self.pauses.append((t, t + ck))
        self.t = t + ck
        self.next_event = self.t + p["ckpt_every_s"]

    def _validation(self, ph: Phase) -> None:
        p, t = ph.p, self.t
        vloaders = self._new_loaders(ph, t, p["val_startup_s"])
        ends = []
        for r in range(self.n):
            tr = t
            while tr < t + p["val_s"]:
                tr = self._rank_val_step(ph, r, vloaders[r], tr)
            ends.append(tr)
        b = max(ends)
        wait = SPIN if (p["backend"] == "nccl" and self.n > 1) else WAIT_IDLE
        for r, e in enumerate(ends):
            self._g(r, e, b, wait, ph)
            self.mains[r].seg(e, b, MAIN_SYNC_CPU)
        self._kill_workers(vloaders, b)
        self.pauses.append((t, b))
        self.t = b
        self.next_event = b + p["val_every_s"]

    def _epoch_end(self, ph: Phase) -> None:
        p, t = ph.p, self.t
        self._kill_workers(self.loaders, t)
        self.loaders = self._new_loaders(ph, t, p["worker_startup_s"])
        self.pauses.append((t, self._first_batch(t)))
        self.next_event = t + p["epoch_s"]
        self._ddp_step(ph) if ph.mode != "dp" else self._dp_step(ph)

    def _first_batch(self, t: float) -> float:
        """When the new loaders' first batch is ready on every rank (t without workers)."""
        return max(ld.ready[0] for ld in self.loaders if ld.ready) \
            if any(ld.k for ld in self.loaders) else t

    def _restart(self, ph: Phase) -> None:
        """A benchmark-style run ends and the same job starts again: its processes exit (their
        GPU memory freed), nothing runs for about gap_s, then new processes (new PIDs, every
        rank together) start up for about startup_s (CUDA context, model load: memory held,
        GPUs idle, the main process busy on the CPU), start their loader workers and train
        for about run_s from their first batch."""
        p, t = ph.p, self.t
        self._end_procs([pr for pr in self.procs if pr.death == math.inf], t)
        begin = t + p["gap_s"] * self.jit(RESTART_CV)
        booted = begin + p["startup_s"] * self.jit(RESTART_CV)
        for g in range(self.n):
            self._g(g, t, begin, NOJOB, ph)
            self._g(g, begin, booted, PAUSE, ph)
        self.gaps.append((t, begin))
        self._start_job(ph, begin)
        for m in {id(m): m for m in self.mains}.values():
            m.seg(begin, booted, STARTUP_MAIN_CPU)
        self.loaders = self._new_loaders(ph, booted, PHASE_LOADER_STARTUP_S)
        first = self._first_batch(booted)
        self.pauses.append((begin, first))
        self.t = booted
        self.next_event = first + p["run_s"] * self.jit(RESTART_CV)

    def _rank_val_step(self, ph: Phase, r: int, ld: Loader, t: float) -> float:
        p = ph.p
        main = self.mains[r]
        ready = ld.take(t)
        c0 = ready if ready > t else t
        if ld.k:
            main.seg(t, c0, MAIN_WAIT_CPU)
        u1 = c0 + self.upload_s(p)
        ce = u1 + ph.step_s[r] * p["val_compute_frac"] * self.jit(p["step_cv"])
        self._g(r, t, c0, WAIT_DATA, ph)
        self._g(r, c0, u1, UPLOAD, ph)
        self._g(r, u1, ce, COMPUTE, ph)
        main.seg(c0, ce, p["launch_cpu"])
        ld.consumed(c0)
        return ce

    # -- housekeeping ----------------------------------------------------------------------
    def trim(self, before: float) -> None:
        """Forget segments and processes that ended before `before` (model time)."""
        for segs in self.gsegs:
            i = 0
            while i < len(segs) and segs[i][1] < before:
                i += 1
            if i:
                del segs[:i]
        keep = []
        for pr in self.procs:
            if pr.death < before:
                continue
            i = 0
            while i < len(pr.segs) and pr.segs[i][1] < before:
                i += 1
            if i:
                del pr.segs[:i]
            keep.append(pr)
        self.procs = keep
        self.pauses = [pz for pz in self.pauses if pz[1] >= before]
        self.gaps = [gp for gp in self.gaps if gp[1] >= before]


def event_bits(ph: Phase, g: int) -> int:
    """Clock-event bits a GPU raises while active in this phase (besides GpuIdle)."""
    if g not in ph.throttled:
        return 0
    return CLOCK_EVENT_SW_POWER_CAP if ph.p["throttle_reason"] == "power_cap" \
        else CLOCK_EVENT_SW_THERMAL
