"""What NVML and the host would report about the simulated node, derived from its segments.

For driver sample k (at model time k * period) and GPU g:
- util_gpu = share of the period (k-1, k] with a kernel running (a launch-bound step: its
  launch_duty, spread evenly: the gaps between its kernels are microseconds); util_mem
  likewise for memory;
- power = 1 s trailing average of instantaneous power (Ampere and newer drivers);
- SM clock = load clock while a kernel ran in the last `clock_hold_s`, idle clock otherwise
  (then the GpuIdle clock-event bit is set); throttled GPUs raise thermal / power-cap bits;
- temperature = first-order lag towards ambient + R * power;
- PCIe rx/tx = bytes moved in the period / period; energy = integral of power;
- GPM (on the GPUs that have it, else NaN): SM activity, SM occupancy, tensor and DRAM
  activity = the period's mean of each kind's level (computing at the workload's levels, a
  rank spinning in a collective on a few SMs, idle 0).
Host figures are per period too: each process's CPU (share of a core), io-blocked count,
disk reads and writes. Everything is computed from cumulative integrals of piecewise-constant
segments with np.interp: exact, and vectorised over samples.

Observation noise is keyed by sample index (blocks of NOISE_BLOCK samples), so the output
does not depend on how the stream is cut into chunks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpumon.samples import CLOCK_EVENT_GPU_IDLE
from gpumon.sim import model as M
from gpumon.sim import params as P

# Power reading noise, share of the limit (sensor and regulator ripple).
POWER_NOISE_FRAC = 0.003
# Memory the driver shows in use on a GPU without processes, MiB.
NOJOB_MEM_MIB = 1.0
# Other ops' small device-to-host traffic while computing (loss.item(), metrics), MB/s.
COMPUTE_TX_MBPS = 1.0
# Window of the driver's power average, s (Ampere and newer).
POWER_AVG_S = 1.0
NOISE_BLOCK = 360
# Lowest reading, share of a GPU's idle power: no-context idle (0.92) less sensor noise.
POWER_FLOOR_FRAC = 0.85
# GPM levels (SM activity, SM occupancy, tensor activity, DRAM activity) outside computing.
# NCCL spinning in a collective: its kernel holds a few SMs with a warp or two each.
SPIN_GPM = (0.03, 0.01, 0.0, 0.005)
# NCCL moving the all-reduce's data: its channels' SMs (16-32 of 108-132), DRAM busy.
COMM_GPM = (0.18, 0.05, 0.0, 0.35)
# Copying a batch up or a checkpoint off: copy engines, SMs almost idle.
COPY_GPM = (0.01, 0.005, 0.0, 0.10)
# DRAM activity while computing, per unit of the memory utilization NVML reports.
DRAM_OF_MEM_UTIL = 0.7
# A launch-bound step's small kernels fill this share of the SMs a full step fills.
LAUNCH_SM_SHARE = 0.5


@dataclass
class ProcRows:
    proc: M.Proc
    thread: np.ndarray     # cores, main thread / the worker
    total: np.ndarray      # cores, the whole process
    alive: np.ndarray      # share of the period alive


@dataclass
class Chunk:
    """Samples k0+1 .. k0+m (arrays indexed 0..m-1)."""
    k0: int
    m: int
    util: np.ndarray; mem_util: np.ndarray; power: np.ndarray; clock: np.ndarray
    temp: np.ndarray; events: np.ndarray; mem_used: np.ndarray; rx: np.ndarray
    tx: np.ndarray; energy: np.ndarray; temp_state: np.ndarray
    gpm: np.ndarray        # (gpu, 4, m) SM activity, occupancy, tensor, DRAM; NaN: no GPM
    pids: list             # [gpu][i] -> tuple of PIDs
    states: np.ndarray     # (gpu, 4, m) shares of computing, waiting_data, waiting_sync, idle
    phase: np.ndarray      # phase index at each sample
    pause: np.ndarray      # share of each period inside a pause
    gap: np.ndarray        # share of each period between two runs of a job (no job)
    procs: list            # ProcRows of processes alive in the chunk
    blocked: np.ndarray    # io-blocked processes (mean count)
    read: np.ndarray       # MB/s
    write: np.ndarray      # MB/s
    bg: np.ndarray         # background cores


class Observer:
    """Turns a Node's segments into per-sample readings, chunk by chunk."""

    def __init__(self, node: M.Node, period: float):
        self.node, self.period = node, float(period)
        hw, n = node.hw, node.n
        self.limit = float(hw["power_limit_w"])
        self.smax = float(hw["sm_clock_max_mhz"])
        self.sidle = float(hw["sm_clock_idle_mhz"])
        self.hold = float(hw["clock_hold_s"])
        self.mem_total = float(hw["mem_total_mib"])
        nph = len(node.phases)
        self.power = np.zeros((n, nph, M.NKINDS))
        self.memact = np.zeros((nph, M.NKINDS))
        self.rx = np.zeros((nph, M.NKINDS))
        self.tx = np.zeros((nph, M.NKINDS))
        self.clock_on = np.zeros((n, nph))
        self.bits = np.zeros((n, nph), dtype=np.int64)
        self.resist = np.zeros((n, nph))       # C per W
        self.has_gpm = P.gpm_gpus(hw["gpm"], n)
        self.gpm = np.zeros((4, nph, M.NKINDS))
        self.mem_job = np.zeros(nph)
        # Per phase and kind: share of the time a kernel runs, and the truth states' shares.
        self.kernel = np.tile(M.KIND_KERNEL, (nph, 1))
        self.shares = np.tile(np.eye(4)[M.KIND_STATE], (nph, 1, 1))
        for ph in node.phases:
            p, j = ph.p, ph.index
            pcie = p["pcie_gbps"] * 1000.0
            self.memact[j, [M.COMPUTE, M.UPLOAD, M.SPIN, M.COMM, M.SAVECOPY]] = \
                [p["mem_util_compute"], 0.3, 0.01, 0.25, 0.3]
            self.rx[j, M.UPLOAD] = pcie
            self.tx[j, M.SAVECOPY] = 2.0 * p["ckpt_write_mbps"]     # (copied in half the save)
            self.tx[j, M.COMPUTE] = self.tx[j, M.LAUNCH] = COMPUTE_TX_MBPS
            duty = float(p["launch_duty"])
            self.kernel[j, M.LAUNCH] = duty
            self.memact[j, M.LAUNCH] = duty * p["mem_util_compute"]
            # The GPU waits for the main process to launch the next kernel the rest of the time.
            self.shares[j, M.LAUNCH] = [duty, 1.0 - duty, 0.0, 0.0]
            self.mem_job[j] = round(p["mem_used_frac"] * self.mem_total)
            self._gpm_levels(j, p)
            for g in range(n):
                self._gpu_phase(ph, g, duty)
        self.noise_blocks: dict = {}

    def _gpu_phase(self, ph: M.Phase, g: int, duty: float) -> None:
        """GPU g's power by kind, load clock, clock-event bits and thermal resistance in
        phase ``ph`` (a throttled GPU's lower clock and power)."""
        node, p, j, L = self.node, ph.p, ph.index, self.limit
        comp_nominal = p["compute_power_frac"] * L
        idle, chip = node.idle_w[g], node.chip[g]
        comp = comp_nominal * chip
        clock = p["clock_load_frac"] * self.smax
        r = (node.t_load[g] - node.t_amb[g]) / comp_nominal
        if g in ph.throttled:
            clock = p["throttle_clock_frac"] * self.smax
            if p["throttle_reason"] == "power_cap":
                comp = 0.99 * L
            else:
                ratio = p["throttle_clock_frac"] / p["clock_load_frac"]
                comp = comp_nominal * ratio ** 1.5
                comp = max(comp, p["comm_power_frac"] * L + 0.03 * L)
                r = (p["temp_slowdown_c"] - node.t_amb[g]) / comp
        self.power[g, j] = [0.92 * idle, idle, idle + 0.04 * L, comp,
                            chip * p["spin_power_frac"] * L, idle,
                            chip * p["comm_power_frac"] * L,
                            idle, idle + 0.04 * L, idle + duty * (comp - idle)]
        self.clock_on[g, j] = _clock_bin(clock)
        self.bits[g, j] = M.event_bits(ph, g)
        self.resist[g, j] = r

    def _gpm_levels(self, j: int, p: dict) -> None:
        """Phase j's GPM level of each kind (zero where nothing runs on the SMs)."""
        compute = np.array([p["sm_active_compute"], p["sm_occupancy_compute"],
                            p["tensor_active_compute"],
                            DRAM_OF_MEM_UTIL * p["mem_util_compute"]])
        launch = float(p["launch_duty"]) * compute * np.array([LAUNCH_SM_SHARE] * 3 + [1.0])
        for kind, level in ((M.COMPUTE, compute), (M.SPIN, SPIN_GPM), (M.COMM, COMM_GPM),
                            (M.UPLOAD, COPY_GPM), (M.SAVECOPY, COPY_GPM), (M.LAUNCH, launch)):
            self.gpm[:, j, kind] = level

    # -- noise keyed by sample index -------------------------------------------------------
    def _noise(self, k0: int, m: int, n: int):
        """(power gaussian (n, m), clock wobble bins (n, m), background factor (m,))"""
        out_p, out_c, out_b = [], [], []
        k = k0
        while k < k0 + m:
            b = k // NOISE_BLOCK
            blk = self.noise_blocks.get(b)
            if blk is None:
                r = np.random.default_rng([self.node.seed, 1, b])
                blk = (r.standard_normal((n, NOISE_BLOCK)), r.integers(-1, 2, (n, NOISE_BLOCK)),
                       r.standard_normal(NOISE_BLOCK))
                if len(self.noise_blocks) > 8:
                    self.noise_blocks.clear()
                self.noise_blocks[b] = blk
            i0 = k - b * NOISE_BLOCK
            i1 = min(NOISE_BLOCK, i0 + (k0 + m - k))
            out_p.append(blk[0][:, i0:i1])
            out_c.append(blk[1][:, i0:i1])
            out_b.append(blk[2][i0:i1])
            k += i1 - i0
        return np.concatenate(out_p, 1), np.concatenate(out_c, 1), np.concatenate(out_b)

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Temperature at model time 0 (steady state of the warm-up's mean power) and the
        energy counter (J since the driver loaded: some arbitrary hours)."""
        node = self.node
        node.run_until(0.0)
        n = node.n
        temp = np.zeros(n)
        for g in range(n):
            s = np.array(node.gsegs[g])
            x, cum, _ = self._cums(g, s)
            t0 = max(x[0], -10.0)
            pmean = (np.interp(0.0, x, cum[0]) - np.interp(t0, x, cum[0])) / max(1e-9, -t0)
            ph = node.phase_at(0.0)[0].index
            temp[g] = node.t_amb[g] + self.resist[g, ph] * pmean
        energy = np.random.default_rng([node.seed, 3]).uniform(1e6, 5e7, n)
        return temp, energy

    def _cums(self, g: int, s: np.ndarray):
        """Edges and cumulative integrals (power, kernel, mem, rx, tx, 4 states, and the 4 GPM
        levels on a GPU with GPM) of a GPU."""
        t0, t1 = s[:, 0], s[:, 1]
        kd, ph = s[:, 2].astype(np.int64), s[:, 3].astype(np.int64)
        d = t1 - t0
        sh = self.shares[ph, kd]                                   # (segments, 4)
        rows = [self.power[g, ph, kd], self.kernel[ph, kd], self.memact[ph, kd],
                self.rx[ph, kd], self.tx[ph, kd], sh[:, 0], sh[:, 1], sh[:, 2], sh[:, 3]]
        if self.has_gpm[g]:
            rows += [self.gpm[i, ph, kd] for i in range(4)]
        vals = np.stack(rows)
        cum = np.zeros((vals.shape[0], len(d) + 1))
        np.cumsum(vals * d, axis=1, out=cum[:, 1:])
        x = np.append(t0, t1[-1])
        return x, cum, (kd, ph)

    def observe(self, k0: int, m: int, temp0: np.ndarray, energy0: np.ndarray) -> Chunk:
        node, per = self.node, self.period
        n, kk = node.n, np.arange(k0 + 1, k0 + m + 1)
        T, B = kk * per, np.arange(k0, k0 + m + 1) * per
        node.run_until(float(T[-1]) + 1e-9)
        pn, cn, bn = self._noise(k0, m, n)
        util = np.zeros((n, m)); mem_util = np.zeros((n, m)); power = np.zeros((n, m))
        clock = np.zeros((n, m)); events = np.zeros((n, m), dtype=np.int64)
        mem_used = np.zeros((n, m)); rx = np.zeros((n, m)); tx = np.zeros((n, m))
        energy = np.zeros((n, m)); pmean = np.zeros((n, m)); states = np.zeros((n, 4, m))
        gpm, res = np.full((n, 4, m), np.nan), np.zeros((n, m))
        phase = np.zeros(m, dtype=np.int64)
        pids: list = []
        for g in range(n):
            s = np.array(node.gsegs[g])
            x, cum, (kd, ph) = self._cums(g, s)
            cb = np.stack([np.interp(B, x, c) for c in cum])     # (9 or 13, m+1)
            dif = np.diff(cb, axis=1) / per
            if self.has_gpm[g]:
                gpm[g] = np.clip(dif[9:13], 0, 1)
            util[g] = np.rint(np.clip(dif[1], 0, 1) * 100)
            mem_util[g] = np.rint(np.clip(dif[2], 0, 1) * 100)
            rx[g], tx[g] = dif[3], dif[4]
            states[g] = dif[5:9]
            pmean[g] = dif[0]
            energy[g] = energy0[g] + np.cumsum(dif[0] * per)
            pw = (cb[0, 1:] - np.interp(T - POWER_AVG_S, x, cum[0])) / POWER_AVG_S
            power[g] = np.clip(pw + pn[g] * POWER_NOISE_FRAC * self.limit,
                               POWER_FLOOR_FRAC * node.idle_w[g], self.limit)
            active = (cb[1, 1:] - np.interp(T - self.hold, x, cum[1])) > 1e-9
            idx = np.clip(np.searchsorted(x, T, "right") - 1, 0, len(kd) - 1)
            kd_t, ph_t = kd[idx], ph[idx]
            if g == 0:
                phase[:] = ph_t
            on = self.clock_on[g, ph_t] + cn[g] * M.CLOCK_BIN_MHZ
            clock[g] = np.where(active, np.minimum(on, self.smax), self.sidle)
            events[g] = np.where(active, self.bits[g, ph_t], CLOCK_EVENT_GPU_IDLE)
            job = kd_t != M.NOJOB
            mem_used[g] = np.where(job, self.mem_job[ph_t], NOJOB_MEM_MIB)
            res[g] = self.resist[g, ph_t]
            pids.append(self._pids(g, T, job))
        temp = _temperature(node.t_amb[:, None] + res * pmean, temp0,
                            math.exp(-per / node.hw["temp_tau_s"]))
        pause, gap = _share_inside(node.pauses, B), _share_inside(node.gaps, B)
        procs, blocked, read, write = self._host(B)
        bg = np.maximum(0.0, node.hw["background_cores"] * (1 + 0.15 * bn))
        return Chunk(k0, m, util, mem_util, power, clock, np.rint(temp), events, mem_used, rx,
                     tx, energy, temp, gpm, pids, states, phase, pause, gap, procs, blocked,
                     read, write, bg)

    def _pids(self, g, T, job) -> list:
        mains = [pr for pr in self.node.procs if pr.role == "main" and g in pr.gpus]
        out = []
        for t, j in zip(T.tolist(), job.tolist()):
            pid = ()
            if j:
                for pr in mains:
                    if pr.birth <= t < pr.death:
                        pid = (pr.pid,)
                        break
            out.append(pid)
        return out

    def _host(self, B):
        per = self.period
        m = len(B) - 1
        b0, b1 = B[0], B[-1]
        rows = []
        blocked, read, write = np.zeros(m), np.zeros(m), np.zeros(m)
        for pr in self.node.procs:
            if not (pr.birth < b1 and pr.death > b0):
                continue
            alive = np.clip(np.minimum(B[1:], pr.death) - np.maximum(B[:-1], pr.birth),
                            0, None) / per
            if pr.segs:
                s = np.array(pr.segs)
                d = s[:, 1] - s[:, 0]
                cum = np.cumsum(s[:, 2:6] * d[:, None], axis=0)      # (n, 4)
                prev = np.vstack([np.zeros(4), cum[:-1]])
                x = np.empty(2 * len(s)); x[0::2] = s[:, 0]; x[1::2] = s[:, 1]
                dif = []
                for c in range(4):
                    y = np.empty(2 * len(s)); y[0::2] = prev[:, c]; y[1::2] = cum[:, c]
                    dif.append(np.diff(np.interp(B, x, y)) / per)
                cpu, io, rd, wr = dif
            else:
                cpu = io = rd = wr = np.zeros(m)
            total = cpu + pr.extra * alive
            rows.append(ProcRows(pr, cpu, total, alive))
            blocked += io
            read += rd
            write += wr
        return rows, blocked, read, write


def _temperature(eq: np.ndarray, temp0, a: float) -> np.ndarray:
    """Temperature: a first-order lag per period (factor ``a``) from ``temp0`` towards the
    equilibrium ``eq`` (gpu, m): ambient + R * mean power."""
    temp = np.zeros(eq.shape)
    cur = np.array(temp0, dtype=float)
    for i in range(eq.shape[1]):
        cur = eq[:, i] + (cur - eq[:, i]) * a
        temp[:, i] = cur
    return temp


def _share_inside(spans, B: np.ndarray) -> np.ndarray:
    """Share of each period (B[i], B[i+1]] inside the (t0, t1) spans."""
    out = np.zeros(len(B) - 1)
    for (t0, t1) in spans:
        out += np.clip(np.minimum(B[1:], t1) - np.maximum(B[:-1], t0), 0, None)
    return np.clip(out / (B[1] - B[0]), 0, 1)


def _clock_bin(mhz: float) -> float:
    """SM clocks move in 15 MHz bins."""
    return round(mhz / M.CLOCK_BIN_MHZ) * M.CLOCK_BIN_MHZ
