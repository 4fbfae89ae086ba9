"""Ticks from the simulated node: `simulate` (fast, model time) and `SimSource` (real time)."""
from __future__ import annotations

import math
import time
from typing import Callable, Iterator, Optional

import numpy as np

from gpumon.diagnosis import BUSY, IDLE, PAUSED
from gpumon.errors import UserError
from gpumon.samples import (GPM_FIELDS, GpuInfo, GpuSample, HostSample, JobProcs, ProcSample,
                            Tick)
from gpumon.sim import model as M
from gpumon.sim.observe import Chunk, Observer
from gpumon.sim.scenarios import STATES, Truth, scenario

# The driver's utilization sample period, s (about 6 samples per second).
DRIVER_PERIOD_S = 1.0 / 6.0
# Samples observed at once: bigger chunks amortise numpy overhead, smaller ones bound latency.
CHUNK_SAMPLES = 360
# A worker at or above this share of a core counts as saturated (JobProcs.loader_busy).
LOADER_BUSY_PCT = 90.0
# The cause of a healthy job's pause, by the scenario's events.
PAUSE_CAUSE = {"checkpoint": "checkpoint", "rank0_checkpoint": "checkpoint",
               "validation": "validation", "epoch_end": "epoch_boundary", "restarts": "startup"}
# A tick is a pause interval when at least this share of it lies inside a pause (and,
# with restarts, idle when that share of it lies between two runs).
PAUSE_SHARE = 0.5
DEFAULT_START_TIME = 1_700_000_000.0
# PCI bus numbers of the GPUs of an 8-GPU HGX board.
PCI_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
METRICS = ("util_gpu_pct", "util_mem_pct", "mem_used_mib", "power_w", "sm_clock_mhz",
           "temp_c", "pcie_rx_mbps", "pcie_tx_mbps", "clock_events", "energy_j", "pids")
# The GPM fields the simulator models, in the order of Chunk.gpm's rows (not the FP pipes).
SIM_GPM_FIELDS = GPM_FIELDS[:4]


class Stream:
    """A node, its observer, and a cursor: hands out samples in order, in any cut."""

    def __init__(self, name: str, gpus: Optional[int], seed: int, params: Optional[dict],
                 period: float, start_time: float, phases: Optional[list] = None):
        spec = scenario(name)
        self.n = int(gpus if gpus is not None else spec.default_gpus)
        self.node = M.Node(name, self.n, seed, params, phases)
        self.obs = Observer(self.node, period)
        self.period, self.start_time = float(period), float(start_time)
        self.cursor = 0
        self.state = self.obs.initial_state()
        self.buf: Optional[Chunk] = None
        self.lists: dict = {}

    # -- chunking ------------------------------------------------------------------------
    def _state_at(self, k: int):
        b = self.buf
        if b is None or k == b.k0:
            return self.state
        i = k - b.k0 - 1
        return b.temp_state[:, i].copy(), b.energy[:, i].copy()

    def _ensure(self, k_end: int) -> None:
        b = self.buf
        if b is not None and b.k0 <= self.cursor and k_end <= b.k0 + b.m:
            return
        state = self._state_at(self.cursor) if b is not None and b.k0 <= self.cursor <= b.k0 + b.m \
            else self.state
        self.state = state
        m = max(k_end - self.cursor, CHUNK_SAMPLES)
        self.node.trim(self.cursor * self.period - 3.0)
        self.buf = self.obs.observe(self.cursor, m, state[0], state[1])
        c = self.buf
        self.lists = {
            "util": c.util.tolist(), "mem_util": c.mem_util.tolist(), "power": c.power.tolist(),
            "clock": c.clock.tolist(), "temp": c.temp.tolist(), "events": c.events.tolist(),
            "mem_used": c.mem_used.tolist(), "rx": c.rx.tolist(), "tx": c.tx.tolist(),
            "energy": c.energy.tolist(),
        }

    def samples_until(self, k_end: int):
        """(chunk, i0, i1): samples cursor+1..k_end as chunk rows i0..i1-1."""
        k_end = max(k_end, self.cursor)
        self._ensure(k_end)
        b = self.buf
        i0, i1 = self.cursor - b.k0, k_end - b.k0
        self.cursor = k_end
        return b, i0, i1

    # -- ticks ---------------------------------------------------------------------------
    def tick(self, k_end: int, tick_time: float) -> Tick:
        c, i0, i1 = self.samples_until(k_end)
        hw, n, per, st = self.node.hw, self.n, self.period, self.start_time
        L = self.lists
        limit, smax, mtot = float(hw["power_limit_w"]), float(hw["sm_clock_max_mhz"]), \
            float(hw["mem_total_mib"])
        gs = []
        gpm = self._gpm(c, i0, i1)
        for i in range(i0, i1):
            t = st + (c.k0 + 1 + i) * per
            for g in range(n):
                gs.append(GpuSample(
                    time=t, gpu=g, source="sim", util_gpu_pct=L["util"][g][i],
                    util_mem_pct=L["mem_util"][g][i], mem_used_mib=L["mem_used"][g][i],
                    mem_total_mib=mtot, power_w=L["power"][g][i], power_limit_w=limit,
                    sm_clock_mhz=L["clock"][g][i], sm_clock_max_mhz=smax,
                    temp_c=L["temp"][g][i], pcie_rx_mbps=L["rx"][g][i],
                    pcie_tx_mbps=L["tx"][g][i], clock_events=L["events"][g][i],
                    energy_j=L["energy"][g][i], pids=c.pids[g][i], **gpm[g]))
        j0, j1 = (i0, i1) if i1 > i0 else (max(i1 - 1, 0), max(i1, 1))
        host = self._host(c, j0, j1, tick_time)
        truth = self._truth(c, j0, j1)
        return Tick(time=tick_time, gpus=tuple(gs), host=host, truth=truth)

    def _gpm(self, c: Chunk, i0: int, i1: int) -> list[dict]:
        """Each GPU's GPM fields over the tick's samples (as NVML's GPM gives the mean since
        the poll before); {} on a GPU without GPM or a tick without samples."""
        if i1 <= i0:
            return [{}] * self.n
        means = c.gpm[:, :, i0:i1].mean(axis=2).tolist()
        return [{} if math.isnan(m[0]) else dict(zip(SIM_GPM_FIELDS, m)) for m in means]

    def _host(self, c: Chunk, i0: int, i1: int, t: float) -> HostSample:
        hw = self.node.hw
        cores = int(hw["host_cores"])
        per_core = np.full(cores, 100.0 * float(c.bg[i0:i1].mean()) / cores)
        procs, rows = [], {}
        job_cores = 0.0
        for r in c.procs:
            if r.alive[i1 - 1] <= 0:
                continue
            pr = r.proc
            cpu = float(r.total[i0:i1].mean())
            job_cores += cpu
            pct = round(cpu * 100.0, 1)
            rows[pr.pid] = (r, pct, round(float(r.thread[i0:i1].mean()) * 100.0, 1))
            per_core[(pr.pid * 7) % cores] += pct
            procs.append(ProcSample(pid=pr.pid, ppid=pr.ppid, name=pr.name, role=pr.role,
                                    cpu_pct=pct, gpus=pr.gpus))
        np.minimum(per_core, 100.0, out=per_core)
        busy = job_cores + float(c.bg[i0:i1].mean())
        blocked = float(c.blocked[i0:i1].mean())
        iowait = min(blocked, max(0.0, cores - busy)) / cores * 100.0
        jobs = []
        for g in range(self.n):
            main = next((rows[p.pid] for p in (r.proc for r in c.procs)
                         if p.role == "main" and g in p.gpus and p.pid in rows), None)
            if main is None:
                continue
            mp = main[0].proc
            workers = [v for v in rows.values() if v[0].proc.ppid == mp.pid]
            jobs.append(JobProcs(
                gpu=g, main_pid=mp.pid, main_cpu_pct=main[1], main_thread_max_pct=main[2],
                loader_workers=len(workers),
                loader_cpu_pct=round(sum(w[1] for w in workers), 1),
                loader_busy=sum(1 for w in workers if w[1] >= LOADER_BUSY_PCT),
                loader_age_s=round(max(0.0, (t - self.start_time)
                                       - max(w[0].proc.birth for w in workers)), 1)
                if workers else None))
        return HostSample(
            time=t, cpu_pct=round(min(100.0, busy / cores * 100.0), 2),
            cpu_max_core_pct=round(float(per_core.max()), 1),
            iowait_pct=round(iowait, 2),
            disk_read_mbps=round(float(c.read[i0:i1].mean()), 2),
            disk_write_mbps=round(float(c.write[i0:i1].mean()), 2),
            cpu_count=cores, cpu_cores_pct=tuple(np.round(per_core, 1).tolist()),
            jobs=tuple(jobs), procs=tuple(procs))

    def _truth(self, c: Chunk, i0: int, i1: int) -> Truth:
        ph = self.node.phases[int(c.phase[(i0 + i1 - 1) // 2])]
        spec = ph.spec
        states = {g: {name: float(c.states[g, s, i0:i1].mean()) for s, name in enumerate(STATES)}
                  for g in range(self.n)}
        straggler = ph.straggler if spec.names_straggler else None
        cause = spec.cause
        if spec.name == "throttled" and ph.p["throttle_reason"] == "power_cap":
            cause = "power_cap"
        pause = bool(c.pause[i0:i1].mean() >= PAUSE_SHARE)
        verdict = spec.verdict
        if pause and verdict == BUSY:      # a healthy job stopped: a checkpoint, an epoch end
            verdict, cause = PAUSED, PAUSE_CAUSE.get(spec.events, "unknown")
            if spec.events == "rank0_checkpoint":
                straggler = 0              # the rank the others wait for
        elif c.gap[i0:i1].mean() >= PAUSE_SHARE:    # between two runs: no job at all
            verdict, cause, straggler = IDLE, None, None
        return Truth(scenario=spec.name, verdict=verdict, cause=cause,
                     straggler_gpu=straggler, gpus=tuple(range(self.n)), states=states,
                     pause=pause)

    def gpu_infos(self) -> list[GpuInfo]:
        hw = self.node.hw
        sup = tuple((name, True) for name in METRICS)
        gpm = self.obs.has_gpm
        return [GpuInfo(index=g, name=str(hw["gpu_model"]), uuid=self.node.uuids[g],
                        pci_bus_id=f"00000000:{PCI_BUSES[g % 8]:02X}:00.0",
                        mem_total_mib=float(hw["mem_total_mib"]),
                        power_limit_w=float(hw["power_limit_w"]),
                        sm_clock_max_mhz=float(hw["sm_clock_max_mhz"]),
                        supported=sup + (("gpm", gpm[g]),))
                for g in range(self.n)]


def simulate(scenario_name: str, gpus: Optional[int] = None, seconds: float = 60.0,
             seed: int = 0, interval: float = 1.0, params: Optional[dict] = None,
             start_time: float = DEFAULT_START_TIME, period: float = DRIVER_PERIOD_S,
             phases: Optional[list] = None) -> Iterator[Tick]:
    """One Tick per `interval` of model time, as fast as the CPU allows (deterministic).

    `phases` (optional): [(scenario, seconds[, params]), ...] run one after another in one job
    (the last for ever), e.g. a healthy lead-in then the scenario under test; `params`
    applies to every phase (hardware always), a phase's own dict on top of it."""
    if interval <= 0 or seconds < 0:
        raise UserError("interval must be > 0 and seconds >= 0")
    stream = Stream(scenario_name, gpus, seed, params, period, start_time, phases)
    nt = int(math.floor(seconds / interval + 1e-9))
    for i in range(1, nt + 1):
        t = i * interval
        yield stream.tick(int(math.floor(t / period + 1e-9)), start_time + t)


class SimSource:
    """Simulated GPUs for `--sim`: read() returns the samples up to now. With ``step_s`` the
    simulation runs on its own clock, ``step_s`` further at each read (the monitor reads once
    per interval), so the same seed gives the same samples, and the same verdicts, however
    the machine schedules the monitor; without it, up to the wall clock's now."""
    kind = "sim"

    def __init__(self, scenario_name: str, gpus: Optional[int] = None, seed: int = 0,
                 params: Optional[dict] = None, clock: Callable[[], float] = time.time,
                 period: float = DRIVER_PERIOD_S, phases: Optional[list] = None,
                 step_s: Optional[float] = None):
        self.clock = clock
        self.step_s = step_s
        self.reads = 0
        # On its own clock the simulation starts on a whole second, so its samples fall in
        # the detector's per-second bins the same way every run.
        self.t0 = float(math.floor(clock())) if step_s is not None else float(clock())
        self.scenario = scenario_name
        self.stream = Stream(scenario_name, gpus, seed, params, period, self.t0, phases)
        self.gpus = self.stream.n
        self.closed = False

    def gpu_infos(self) -> list[GpuInfo]:
        return self.stream.gpu_infos()

    def read(self) -> Tick:
        if self.step_s is not None:
            now = self.t0 + self.reads * self.step_s
            self.reads += 1
        else:
            now = float(self.clock())
        k = int(math.floor((now - self.t0) / self.stream.period + 1e-9))
        return self.stream.tick(k, now)

    def close(self) -> None:
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
