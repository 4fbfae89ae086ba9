"""Offline analysis benchmark: ``gpumon analyze`` on a day-long 8-GPU nvidia-smi log at 1 Hz.

The log (86,400 s x 8 GPUs = 691,200 rows) is what
``nvidia-smi --query-gpu=... --format=csv -l 1`` writes, generated once into build/bench/
from a synthetic day of training: phases of steady compute, input-bound bursts, a straggler
with the others spinning cold in a collective, a throttled GPU, and idle gaps. It is timed
beside ``pandas.read_csv`` loading the same file; each runs in its own process, so its peak
RSS (ru_maxrss from wait4) is its own.

The same day three times over (72 hours, 2,073,600 rows, ~340 MB) checks that memory stays
under 1 GiB and that time stays linear in rows (rows/s of 72 h against 24 h):
``python -m bench.analysis`` prints both, and the day against pandas.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

DAY_S = 86_400
GPUS = 8
# Bump when the generated content changes, so a stale file is regenerated.
GENERATOR_VERSION = 1
START = 1_714_521_600  # 2024-05-01 00:00:00 UTC
HEADER = ("timestamp, index, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], "
          "memory.used [MiB], memory.total [MiB], power.draw [W], power.limit [W], "
          "clocks.sm [MHz], clocks.max.sm [MHz], temperature.gpu, "
          "clocks_event_reasons.active")
# Phases of the synthetic day, cycled: (name, minutes).
PHASES = (("busy", 50), ("starved", 30), ("busy", 40), ("sync_stall", 25), ("idle", 10),
          ("throttled", 20), ("starved", 35), ("busy", 30))
POWER_LIMIT_W = 700.0
MEM_TOTAL_MIB = 81559


# The long log: three days, for memory (< 1 GiB peak RSS) and linear time.
LONG_S = 3 * DAY_S
# The targets: the whole command at most this many times the whole pandas command's
# (`python -c "import pandas; pandas.read_csv(F)"`), and its peak RSS at most this (MiB).
MAX_RATIO = 2.0
MAX_RSS_MIB = 1024.0


def day_path(build_dir: str, seconds: int = DAY_S) -> str:
    span = "day" if seconds == DAY_S else f"{seconds // 3600}h"
    return os.path.join(build_dir, f"nvsmi-{span}-8gpu-v{GENERATOR_VERSION}.csv")


def phase_of_second(seconds: int) -> np.ndarray:
    """The phase index (into PHASES) of every second of the day."""
    spans = np.array([m * 60 for _, m in PHASES])
    cycle = spans.sum()
    pos = np.arange(seconds) % cycle
    return np.searchsorted(np.cumsum(spans), pos, side="right")


def day_columns(seconds: int = DAY_S, gpus: int = GPUS, seed: int = 9) -> dict[str, np.ndarray]:
    """Per row (second-major, then GPU) values of the synthetic day, as arrays."""
    rng = np.random.default_rng(seed)
    n = seconds * gpus
    sec = np.repeat(np.arange(seconds), gpus)
    gpu = np.tile(np.arange(gpus), seconds)
    names = np.array([p for p, _ in PHASES])
    phase = names[phase_of_second(seconds)][sec]
    util = np.clip(rng.normal(97, 2, n), 0, 100)
    power = np.clip(rng.normal(0.86, 0.03, n), 0, 1) * POWER_LIMIT_W
    clock = np.full(n, 1980.0)
    events = np.zeros(n, dtype=np.int64)
    # Input-bound: every GPU computes ~3 s then waits ~4 s for the next batch, together.
    starved = phase == "starved"
    wait = (sec % 7) >= 3
    util[starved & wait] = 0.0
    power[starved] = np.where(wait[starved], 0.25, 0.7) * POWER_LIMIT_W
    # Sync stall: GPU 3 computes in bursts; the others spin in the collective, cold.
    stall = phase == "sync_stall"
    straggler = stall & (gpu == 3)
    util[straggler] = np.where((sec[straggler] % 5) < 3, 100.0, 0.0)
    others = stall & (gpu != 3)
    util[others] = 100.0
    power[others] = np.clip(rng.normal(0.28, 0.03, others.sum()), 0, 1) * POWER_LIMIT_W
    idle = phase == "idle"
    util[idle], power[idle], clock[idle], events[idle] = 0.0, 70.0, 345.0, 0x1
    thr = (phase == "throttled") & (gpu == 5)
    clock[thr], events[thr] = 1410.0, 0x20
    temp = np.where(thr, 88, 55 + gpu + (util > 50) * 10)
    mem_util = np.round(util * 0.35)
    mem_used = np.where(idle, 0, 40960 + 512 * gpu)
    return {"sec": sec, "gpu": gpu, "util": np.round(util), "mem_util": mem_util,
            "mem_used": mem_used, "power": power, "clock": clock, "temp": temp,
            "events": events}


def write_day(path: str, seconds: int = DAY_S, gpus: int = GPUS) -> int:
    """Write the nvidia-smi CSV (atomically); returns the number of data rows."""
    c = day_columns(seconds, gpus)
    stamps = [time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(START + s)) + ".000"
              for s in range(seconds)]
    name = "NVIDIA H100 80GB HBM3"
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(tmp, "w") as f:
        f.write(HEADER + "\n")
        rows = zip(c["sec"].tolist(), c["gpu"].tolist(), c["util"].tolist(),
                   c["mem_util"].tolist(), c["mem_used"].tolist(), c["power"].tolist(),
                   c["clock"].tolist(), c["temp"].tolist(), c["events"].tolist())
        f.writelines(
            f"{stamps[s]}, {g}, {name}, 00000000:{g + 1:02X}:00.0, {u:.0f} %, {mu:.0f} %, "
            f"{used} MiB, {MEM_TOTAL_MIB} MiB, {p:.2f} W, {POWER_LIMIT_W:.2f} W, {clk:.0f} MHz, "
            f"1980 MHz, {t}, 0x{ev:016X}\n"
            for s, g, u, mu, used, p, clk, t, ev in rows)
    os.replace(tmp, path)
    return seconds * gpus


def ensure_day(build_dir: str, seconds: int = DAY_S) -> tuple[str, int, float]:
    """The day-long log (or ``seconds`` long), generated if absent: (path, rows, seconds spent
    generating)."""
    path = day_path(build_dir, seconds)
    if os.path.exists(path):
        return path, seconds * GPUS, 0.0
    t0 = time.monotonic()
    rows = write_day(path, seconds)
    return path, rows, time.monotonic() - t0


@dataclass
class Timed:
    """Repeated runs of one command: wall seconds (or the time it reports) and peak RSS."""
    label: str
    seconds: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)      # the whole command, start-up included
    rss_mib: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)       # user + system CPU seconds
    error: Optional[str] = None

    @property
    def best(self) -> Optional[float]:
        return min(self.seconds) if self.seconds else None


def run_into(t: Timed, argv: Sequence[str], *, cwd: str, env=None,
             reported: bool = False) -> bool:
    """One run of ``argv`` recorded into ``t``: its wall time (or, ``reported``, the seconds
    it prints last), wall time and peak RSS. False, with ``t.error`` set, when it failed."""
    try:
        wall, rss, rc, out, cpu = rusage_run(argv, cwd=cwd, env=env)
    except RuntimeError as exc:
        t.error = str(exc)
        return False
    if rc != 0:
        t.error = f"exit {rc}: {' '.join(out.split())[-300:]}"
        return False
    t.seconds.append(float(out.strip().splitlines()[-1]) if reported else wall)
    t.wall.append(wall)
    t.rss_mib.append(rss)
    t.cpu.append(cpu)
    return True


def rusage_run(argv: Sequence[str], *, cwd: str, env=None,
               timeout: float = 300.0) -> tuple[float, float, int, str, float]:
    """Run argv to completion: (wall seconds, its own peak RSS in MiB, exit code, output, its
    CPU seconds, user and system)."""
    import tempfile
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                raise RuntimeError(f"{' '.join(argv[:4])}... took over {timeout:g} s")
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return wall, ru.ru_maxrss / 1024.0, p.returncode, text[-2000:], ru.ru_utime + ru.ru_stime


PANDAS_LOAD = ("import sys, time, pandas\n"
               "t = time.perf_counter()\n"
               "df = pandas.read_csv(sys.argv[1])\n"
               "assert len(df) > 0\n"
               "print(f'{time.perf_counter() - t:.6f}')\n")


# The same jobs timed inside one process each, from before their imports (the interpreter's
# own start-up left out on both sides): pandas.read_csv; `gpumon analyze FILE --format json`
# through the command's entry point (what the command does, its memory settings included,
# output to a discarded buffer); and the library calls alone (analyze_file, to_json).
INPROC = ("import sys, time\n"
          "t = time.perf_counter()\n"
          "if sys.argv[1] == 'pandas':\n"
          "    import pandas\n"
          "    assert len(pandas.read_csv(sys.argv[2])) > 0\n"
          "elif sys.argv[1] == 'command':\n"
          "    import contextlib, io\n"
          "    from gpumon.cli import main\n"
          "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
          "        assert main(['analyze', sys.argv[2], '--format', 'json']) == 0\n"
          "    assert out.getvalue().startswith('{')\n"
          "else:\n"
          "    import json\n"
          "    from gpumon.analyze import analyze_file\n"
          "    from gpumon.report import to_json\n"
          "    json.dumps(to_json(analyze_file(sys.argv[2])[1]), indent=2)\n"
          "print(f'{time.perf_counter() - t:.6f}')\n")


def compile_gpumon(python: str, cwd: str) -> None:
    """Write gpumon's bytecode (__pycache__, ignored by git) before timing it, as installing a
    package does: pandas and numpy are timed with theirs, and where PYTHONDONTWRITEBYTECODE
    is set (this project's sandboxes) gpumon would otherwise compile its ~40 modules from
    source on every run (~25 ms)."""
    import gpumon
    subprocess.run([python, "-m", "compileall", "-q", os.path.dirname(gpumon.__file__)],
                   cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def bench_inprocess(path: str, *, python: str, cwd: str, repeats: int = 3,
                    env=None) -> tuple[Timed, Timed, Timed]:
    """(gpumon analyze's command, pandas.read_csv, gpumon's library calls) each timed inside
    its process, imports included, runs interleaved so a busy machine weighs on all alike."""
    compile_gpumon(python, cwd)
    ours, pandas = Timed("gpumon analyze (in-process)"), Timed("pandas (in-process)")
    lib = Timed("analyze_file + to_json (in-process)")
    for _ in range(repeats):
        for t, what in ((ours, "command"), (pandas, "pandas"), (lib, "library")):
            run_into(t, [python, "-c", INPROC, what, path], cwd=cwd, env=env, reported=True)
    return ours, pandas, lib


def only_lines(ours: Timed, pandas: Timed, inproc: tuple[Timed, Timed], max_ratio: float,
               rows: int) -> list[str]:
    """`python -m bench.run --analysis-only`: the analysis alone, every basis of comparison."""
    def spread(v):
        return f"{min(v):.3f} s (runs {', '.join(f'{x:.2f}' for x in v)})" if v else "n/a"
    out = [f"gpumon analyze of the day-long 8-GPU nvidia-smi log ({rows:,} rows), best of runs:"]
    for t in (ours, pandas) + tuple(inproc):
        if t.error:
            out.append(f"  {t.label}: failed: {t.error}")
    if ours.wall and pandas.seconds and pandas.wall:
        a = min(ours.wall)
        out += [f"  gpumon analyze, whole command:        {spread(ours.wall)}; peak RSS "
                f"{max(ours.rss_mib):.0f} MiB",
                f"  pandas.read_csv call alone:           {spread(pandas.seconds)}",
                f"  pandas.read_csv, whole command:       {spread(pandas.wall)}",
                f"  ratio to the read_csv call:           {a / min(pandas.seconds):.2f}x "
                f"(target {max_ratio:g}x)",
                f"  ratio to the whole pandas command:    {a / min(pandas.wall):.2f}x"]
    io, ip = inproc[:2]
    if io.seconds and ip.seconds:
        out += [f"  in-process, imports included: gpumon analyze {spread(io.seconds)}, "
                f"pandas {spread(ip.seconds)}: {min(io.seconds) / min(ip.seconds):.2f}x"]
    lib = inproc[2] if len(inproc) > 2 else None
    if lib is not None and lib.seconds and ip.seconds:
        out += [f"  in-process, the library calls alone (analyze_file, to_json): "
                f"{spread(lib.seconds)}: {min(lib.seconds) / min(ip.seconds):.2f}x"]
    return out


# Further runs of `gpumon analyze` are skipped once its runs have taken this long (s), so a
# slow analyzer cannot push `make bench` past its 10 minutes.
ANALYZE_BUDGET_S = 45.0


def bench_analysis(path: str, *, python: str, cwd: str, repeats: int = 3,
                   env=None) -> tuple[Timed, Timed]:
    """(gpumon analyze, pandas.read_csv) timings of ``path``."""
    compile_gpumon(python, cwd)
    ours = Timed("gpumon analyze")
    for _ in range(repeats):
        if sum(ours.seconds) > ANALYZE_BUDGET_S or not run_into(
                ours, [python, "-m", "gpumon", "analyze", path, "--format", "json"],
                cwd=cwd, env=env):
            break
    pandas = Timed("pandas.read_csv")
    for _ in range(repeats):
        if not run_into(pandas, [python, "-c", PANDAS_LOAD, path], cwd=cwd, env=env,
                        reported=True):
            break
    return ours, pandas


def bench_scaling(build_dir: str, *, python: str, cwd: str, repeats: int = 2,
                  env=None) -> list[tuple[str, int, Timed]]:
    """`gpumon analyze` of the 24-hour and the 72-hour log: [(label, rows, timings)]."""
    compile_gpumon(python, cwd)
    out = []
    for label, seconds in (("24 h", DAY_S), ("72 h", LONG_S)):
        path, rows, _ = ensure_day(build_dir, seconds)
        t = Timed(f"gpumon analyze, {label}")
        for _ in range(repeats):
            if not run_into(t, [python, "-m", "gpumon", "analyze", path, "--format", "json"],
                            cwd=cwd, env=env):
                break
        out.append((label, rows, t))
    return out


def scaling_lines(results: list[tuple[str, int, Timed]]) -> list[str]:
    """Time, rows/s and peak RSS per log length, and whether time stays linear in rows (by
    wall time, and by CPU time, which a busy machine disturbs less)."""
    out = ["gpumon analyze by log length (8 GPUs at 1 Hz), best of runs:"]
    rates, cpu_rates = [], []
    for label, rows, t in results:
        if t.error or not t.seconds:
            out.append(f"  {label}: failed: {t.error}")
            continue
        rate = rows / t.best
        rates.append(rate)
        cpu = f"; CPU {min(t.cpu):.2f} s" if t.cpu else ""
        if t.cpu:
            cpu_rates.append(rows / min(t.cpu))
        peak = max(t.rss_mib)
        out.append(f"  {label}: {rows:,} rows in {t.best:.2f} s = {rate:,.0f} rows/s{cpu}; peak "
                   f"RSS {peak:.0f} MiB ({'under' if peak < MAX_RSS_MIB else 'OVER'} "
                   f"{MAX_RSS_MIB:.0f} MiB)")
    if len(rates) == 2:
        by_cpu = (f", by CPU time {cpu_rates[1] / cpu_rates[0]:.2f}" if len(cpu_rates) == 2
                  else "")
        out.append(f"  rows/s of 72 h over 24 h: {rates[1] / rates[0]:.2f}{by_cpu} (1.00: time "
                   "linear in rows)")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python -m bench.analysis", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="runs of each (default 2)")
    ap.add_argument("--build", default=os.path.join("build", "bench"),
                    help="where the logs are generated (default build/bench)")
    ap.add_argument("--no-pandas", action="store_true", help="skip the day against pandas")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    cwd = os.getcwd()
    if not args.no_pandas:
        path, rows, _ = ensure_day(args.build)
        ours, pandas = bench_analysis(path, python=sys.executable, cwd=cwd,
                                      repeats=args.repeats)
        inproc = bench_inprocess(path, python=sys.executable, cwd=cwd, repeats=args.repeats)
        print("\n".join(only_lines(ours, pandas, inproc, MAX_RATIO, rows)), flush=True)
    print("\n".join(scaling_lines(bench_scaling(args.build, python=sys.executable, cwd=cwd,
                                               repeats=args.repeats))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
