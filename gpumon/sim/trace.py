"""Trace files for the fake NVML library: the simulated node's driver samples as text.

    python -m gpumon.sim.trace --all --out DIR            # DIR/<scenario>.trace, every scenario
    python -m gpumon.sim.trace --scenario NAME --out FILE [--gpus N] [--seconds S]

Format (one record per line, TAB-separated, integers only, `#` lines are comments):

    H  gpumon-trace  1  <ngpus>  <period_us>  <duration_us>
    G  <index> <name> <uuid> <pci_bus_id> <mem_total_mib> <power_limit_mw>
       <sm_clock_max_mhz> <mem_clock_max_mhz> [<gpm 0|1>]
    S  <t_us> <gpu> <util_gpu_pct> <util_mem_pct> <power_mw> <sm_clock_mhz> <temp_c>
       <clock_events> <mem_used_mib> <pcie_rx_kbps> <pcie_tx_kbps> <energy_mj> <active> <pids>
       [<sm_active_pm> <sm_occupancy_pm> <tensor_active_pm> <dram_active_pm>]

S lines are sorted by t_us = k * period_us (k = 0 .. duration_us / period_us - 1), all GPUs of
one instant adjacent. util_gpu_pct is the driver sample for the period ending at t_us,
power_mw the 1 s average at t_us, energy_mj cumulative from the trace start, active 1 when a
kernel ran in the period (the driver's utilization ring grows), pids comma-separated or `-`.
A GPU with GPM (G's gpm 1) has its S lines end in the period's GPM means, per mille; a G line
without the gpm field, or an S line without those four, is a GPU without GPM.
PCIe rates are KB/s with 1 KB = 1024 bytes (as NVML and the fake library count). The
library loops the trace (position = wall-clock microseconds mod duration_us).

Comment lines `# truth <t_us> <verdict> <cause|-> <straggler|-> <pause 0|1>` carry the ground
truth of each second (for end-to-end scoring through the NVML path); readers may ignore them.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Optional, TextIO

from gpumon.errors import UserError
from gpumon.sim.scenarios import SCENARIOS, check_gpus, scenario
from gpumon.sim.source import Stream

MAGIC = "gpumon-trace"
VERSION = 1
PERIOD_US = 166667
DEFAULT_SECONDS = 120.0
DEFAULT_GPUS = 2
# GpuSample's MB/s (10**6 bytes) to the trace's KB/s (1024 bytes).
MB_TO_KB = 1e6 / 1024


def write_trace(out: TextIO, name: str, gpus: int = DEFAULT_GPUS,
                seconds: float = DEFAULT_SECONDS, seed: int = 0,
                params: Optional[dict] = None, period_us: int = PERIOD_US) -> int:
    """Write one scenario's trace to `out`; returns the number of S lines."""
    check_gpus(name, gpus)
    nsamp = max(1, int(round(seconds * 1e6 / period_us)))
    duration_us = nsamp * period_us
    period = period_us / 1e6
    stream = Stream(name, gpus, seed, params, period, 0.0)
    infos = stream.gpu_infos()
    hw = stream.node.hw
    w = out.write
    w(f"# gpumon simulated node: scenario {name}, {gpus} GPUs, seed {seed}, "
      f"{duration_us / 1e6:.3f} s\n")
    w(f"H\t{MAGIC}\t{VERSION}\t{gpus}\t{period_us}\t{duration_us}\n")
    for gi in infos:
        w(f"G\t{gi.index}\t{gi.name}\t{gi.uuid}\t{gi.pci_bus_id}\t{int(gi.mem_total_mib)}\t"
          f"{int(round(gi.power_limit_w * 1000))}\t{int(gi.sm_clock_max_mhz)}\t"
          f"{int(hw['mem_clock_max_mhz'])}\t{int(dict(gi.supported)['gpm'])}\n")
    energy0: list = [None] * gpus
    rows = 0
    per_tick = max(1, int(round(1.0 / period)))
    k = 0
    while k < nsamp:
        kend = min(nsamp, k + per_tick)
        tick = stream.tick(kend, kend * period)
        tr = tick.truth
        w(f"# truth\t{k * period_us}\t{tr.verdict}\t{tr.cause or '-'}\t"
          f"{'-' if tr.straggler_gpu is None else tr.straggler_gpu}\t{int(tr.pause)}\n")
        chunk = stream.buf
        for i in range(0, len(tick.gpus), gpus):
            for s in tick.gpus[i:i + gpus]:
                if energy0[s.gpu] is None:
                    energy0[s.gpu] = s.energy_j - s.power_w * period
                w(_s_line(s, k * period_us, s.energy_j - energy0[s.gpu],
                          chunk.gpm[s.gpu, :, k - chunk.k0]))
                rows += 1
            k += 1
    return rows


def _s_line(s, t_us: int, energy_j: float, gpm) -> str:
    """One S record: GPU sample ``s`` at ``t_us`` (energy since the trace's start), and the
    period's GPM levels (per mille) where the GPU has GPM (``gpm`` not NaN)."""
    util = int(s.util_gpu_pct)
    pids = ",".join(str(p) for p in s.pids) if s.pids else "-"
    line = (f"S\t{t_us}\t{s.gpu}\t{util}\t{int(s.util_mem_pct)}\t"
            f"{int(round(s.power_w * 1000))}\t{int(s.sm_clock_mhz)}\t{int(s.temp_c)}\t"
            f"{int(s.clock_events)}\t{int(s.mem_used_mib)}\t"
            f"{int(round(s.pcie_rx_mbps * MB_TO_KB))}\t{int(round(s.pcie_tx_mbps * MB_TO_KB))}\t"
            f"{int(round(energy_j * 1000))}\t{int(util > 0)}\t{pids}")
    if not math.isnan(gpm[0]):
        line += "".join(f"\t{int(round(v * 1000))}" for v in gpm)
    return line + "\n"


# -- reading (tests, tools) --------------------------------------------------------------
@dataclass
class Trace:
    ngpus: int
    period_us: int
    duration_us: int
    gpus: list = field(default_factory=list)      # G rows as tuples
    samples: list = field(default_factory=list)   # S rows: dict per line
    truth: list = field(default_factory=list)     # (t_us, verdict, cause, straggler, pause)


S_FIELDS = ("t_us", "gpu", "util_gpu_pct", "util_mem_pct", "power_mw", "sm_clock_mhz", "temp_c",
            "clock_events", "mem_used_mib", "pcie_rx_kbps", "pcie_tx_kbps", "energy_mj",
            "active")
# The optional GPM fields at the end of an S line (per mille).
S_GPM_FIELDS = ("sm_active_pm", "sm_occupancy_pm", "tensor_active_pm", "dram_active_pm")


def _truth(parts: list[str]) -> tuple:
    _, t, v, c, s, p = parts
    return (int(t), v, None if c == "-" else c, None if s == "-" else int(s), bool(int(p)))


def _header(parts: list[str]) -> Trace:
    if parts[1] != MAGIC or int(parts[2]) != VERSION or len(parts) != 6:
        raise ValueError("bad header")
    return Trace(int(parts[3]), int(parts[4]), int(parts[5]))


def _sample(parts: list[str]) -> dict:
    row = dict(zip(S_FIELDS, (int(x) for x in parts[1:14])))
    row["pids"] = () if parts[14] == "-" else tuple(int(x) for x in parts[14].split(","))
    row.update(zip(S_GPM_FIELDS, (int(x) for x in parts[15:])))
    return row


def _record(tr: Optional[Trace], parts: list[str]) -> Optional[Trace]:
    """Adds one record to ``tr`` (the H record makes it); ValueError when malformed."""
    kind = parts[0]
    if kind == "H":
        return _header(parts)
    if kind == "G" and tr is not None and len(parts) in (9, 10):
        tr.gpus.append((int(parts[1]), parts[2], parts[3], parts[4]) +
                       tuple(int(x) for x in parts[5:]))
    elif kind == "S" and tr is not None and len(parts) in (15, 15 + len(S_GPM_FIELDS)):
        tr.samples.append(_sample(parts))
    else:
        raise ValueError(f"unexpected record {kind!r}")
    return tr


def read_trace(path: str) -> Trace:
    """Parse a trace file strictly (integers where integers are due); UserError if malformed."""
    tr: Optional[Trace] = None
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            try:
                if line.startswith("# truth\t"):
                    if tr is not None:
                        tr.truth.append(_truth(line.split("\t")))
                elif line and not line.startswith("#"):
                    tr = _record(tr, line.split("\t"))
            except ValueError as exc:
                raise UserError(f"{path}:{no}: malformed trace line ({exc})") from None
    if tr is None:
        raise UserError(f"{path}: not a gpumon trace (no H line)")
    return tr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpumon.sim.trace",
                                 description="Write simulated-node trace files for the fake "
                                 "NVML library.")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every scenario, DIR/<name>.trace")
    which.add_argument("--scenario", metavar="NAME", help="one scenario")
    ap.add_argument("--out", required=True, help="directory (--all) or file (--scenario)")
    ap.add_argument("--gpus", type=int, default=DEFAULT_GPUS)
    ap.add_argument("--seconds", type=float, default=None,
                    help=f"trace length (default {DEFAULT_SECONDS:.0f} s; demo: one full cycle)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        names = list(SCENARIOS) if args.all else [scenario(args.scenario).name]
        if args.seconds is not None and not 1 <= args.seconds <= 86400:
            raise UserError("--seconds must be within 1..86400")
        if args.all:
            os.makedirs(args.out, exist_ok=True)
        for name in names:
            spec = SCENARIOS[name]
            gpus = max(args.gpus, spec.min_gpus) if args.all else args.gpus
            secs = args.seconds
            if secs is None:
                cycle = sum(s for _, s in spec.phases) if spec.phases else 0
                secs = max(DEFAULT_SECONDS, cycle)
            path = os.path.join(args.out, f"{name}.trace") if args.all else args.out
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                write_trace(f, name, gpus, secs, args.seed)
            os.replace(tmp, path)
            print(f"{path}: {name}, {gpus} GPUs, {secs:g} s", file=sys.stderr)
    except UserError as exc:
        print(f"gpumon: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        print(f"gpumon: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
