"""`make bench`: gpumon's own cost beside nvitop, gpustat and a bare nvidia-ml-py loop.

Runs, in order, over the fake NVML library (build/fakenvml) with the fake GPUs reporting a
spawned stand-in job of 8 mains x 7 loader workers:
  1. monitor overhead: steady-state CPU (per window, so the spread shows) and peak RSS of
     `gpumon log` and `gpumon watch` (1 and 8 GPUs, default interval and 0.1 s) and of the
     peers (8 GPUs): nvitop's screen and collector, gpustat -i, a bare nvidia-ml-py loop;
     then the call-cost profile (bench/callcost.py): NVML calls that cost driver time, each
     program's calls counted by function, gpumon's CPU over gpustat's and nvitop's;
  2. dashboard frame time for 1 and 8 GPUs;
  3. `gpumon analyze` on a day-long 8-GPU nvidia-smi log beside pandas.read_csv;
  4. the detector table of `make bench-detect` (bench/results/detect.md), when present;
  5. where a CPU target is missed, a py-spy profile of the miss;
  6. peak RSS of `gpumon log` and `gpumon watch` over a simulated hour at 0.1 s and 1 s,
     8 GPUs, faster than real time (bench/memory.py);
  7. `gpumon export` under 1,100 idle connections, then under clients that pipeline and never
     read and clients guessing passwords (bench/exporter_load.py);
  8. a fuzz run of `gpumon analyze` over 1,000 mutated logs (bench/fuzz_logs.py).
Writes bench/results/latest.md and prints it.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
import time
from typing import Optional, Sequence

from bench import (analysis, callcost, detector_cost, exporter_load, fuzz_logs, install_size,
                   memory,
                   overhead, profile, report)
from bench.overhead import Measurement, Subject
from bench.proctree import ProcTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_DIR = os.path.join(ROOT, "build", "fakenvml")
BUILD_DIR = os.path.join(ROOT, "build", "bench")
RESULTS = os.path.join(ROOT, "bench", "results")

# The issue's targets (issue 9), each with its unit.
LOG_DEFAULT_MAX_PCT = 0.3       # % of one core, `gpumon log` at the default interval, 8 GPUs
LOG_FAST_MAX_PCT = 1.5          # % of one core, `gpumon log --interval 0.1`, 8 GPUs
STREAM_MAX_PCT = 0.3            # % of one core, the dool column's `gpumon stream` at 1 s, 8 GPUs
RSS_MAX_MIB = 80.0              # peak RSS of `log` and `watch`, for any duration
RSS_GROWTH_MAX_MIB = 5.0        # ... and no more growth than this once settled (flat)
FRAME_MAX_MS = 10.0             # one dashboard frame, 8 GPUs
ANALYZE_MAX_RATIO = analysis.MAX_RATIO        # `gpumon analyze` time / pandas.read_csv time
ANALYZE_MAX_RSS_MIB = analysis.MAX_RSS_MIB    # peak RSS of `gpumon analyze`, day-long log
# The issue's peer figures on this kind of machine (% of one core, 8 GPUs), for comparison.
ISSUE_PEERS = {("bare nvidia-ml-py loop", "1 s"): 0.03, ("bare nvidia-ml-py loop", "0.1 s"): 0.30,
               ("gpustat", "-i 1"): 0.40, ("gpustat", "-i 0.1"): 0.53,
               ("nvitop screen", "default (2 s)"): 0.67, ("nvitop screen", "--interval 0.25"): 1.77}
# How long a py-spy profile of a missed target records (s): at 0.1 s and at the default
# interval (a tenth of the CPU, so longer for as many samples).
PROFILE_S = 20
PROFILE_SLOW_S = 30


def subjects(py: str, gpus_list: Sequence[int], peers_gpus: Sequence[int]) -> list[Subject]:
    """Everything measured, interleaved by setting so a drift in the machine hits all alike."""
    def log(g, iv):
        out = os.path.join(BUILD_DIR, f"log-{g}gpu-{iv or 'default'}.csv")
        argv = [py, "-m", "gpumon", "log", "-q", "--force", "-o", out]
        return Subject("gpumon log", f"--interval {iv}" if iv else "default (1 s)", g,
                       tuple(argv + (["--interval", iv] if iv else [])), ours=True)

    def watch(g, iv):
        argv = [py, "-m", "gpumon", "watch"] + (["--interval", iv] if iv else [])
        return Subject("gpumon watch", f"--interval {iv}" if iv else "default (1 s)", g,
                       tuple(argv), tmux=True, ours=True)

    def peers(g, fast):
        iv = "0.1" if fast else "1"
        bare_out = os.path.join(BUILD_DIR, f"bare-{g}gpu-{iv}.csv")
        col_out = os.path.join(BUILD_DIR, f"nvitop-collector-{g}gpu-{iv}.csv")
        return [
            Subject("bare nvidia-ml-py loop", f"{iv} s", g,
                    (py, "-m", "bench.peers", "bare", "--interval", iv, "-o", bare_out)),
            Subject("gpustat", f"-i {iv}", g, (py, "-m", "gpustat", "-i", iv), tmux=True),
            Subject("nvitop collector", f"{iv} s snapshots", g,
                    (py, "-m", "bench.peers", "nvitop-collector", "--interval", iv,
                     "-o", col_out)),
            Subject("nvitop screen", "--interval 0.25" if fast else "default (2 s)", g,
                    (py, "-m", "nvitop") + (("--interval", "0.25") if fast else ()),
                    tmux=True),
        ]

    def stream(g):
        # What the dstat/dool plugin starts for `dool --gpumon 1` (plugins/gpumon_plugin.py),
        # without --stop-on-eof: here nothing holds its stdin open.
        return Subject("gpumon stream", "1 s (the dool column's child)", g,
                       (py, "-m", "gpumon.commands.stream", "--interval", "1"), ours=True)

    out = []
    for g in sorted(set(gpus_list) | set(peers_gpus), reverse=True):
        if g == 8 and g in gpus_list:
            out.append(stream(g))
        for fast in (False, True):
            if g in peers_gpus:
                out += peers(g, fast)
            if g in gpus_list:
                iv = "0.1" if fast else None
                out += [log(g, iv), watch(g, iv)]
    return out


def ensure_fake_library() -> str:
    lib = os.path.join(FAKE_DIR, "libnvidia-ml.so.1")
    build = os.path.join(ROOT, "tests", "fakenvml", "build.sh")
    if os.path.exists(build):
        p = subprocess.run(["sh", build, FAKE_DIR], cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0 and not os.path.exists(lib):
            sys.exit(f"bench: could not build the fake NVML library: {p.stderr.strip()}")
    if not os.path.exists(lib):
        sys.exit(f"bench: {lib} is missing (run `make fakenvml`)")
    return lib


def env_for(gpus: int, tree: ProcTree) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.update(LD_LIBRARY_PATH=os.pathsep.join(filter(None, [FAKE_DIR,
                                                             env.get("LD_LIBRARY_PATH")])),
               FAKE_NVML_GPUS=str(gpus), FAKE_NVML_PIDS=tree.fake_pids(gpus),
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")])))
    env.pop("NO_COLOR", None)
    return env


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1048576:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    import gpumon
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{cpu}, {os.cpu_count()} logical CPUs, {mem} RAM, Linux "
                   f"{platform.release()}",
        "python": platform.python_version(),
        "gpumon": f"{gpumon.__version__} (commit {commit})",
        "packages": ", ".join(f"{d} {_version(d)}" for d in (
            "nvidia-ml-py", "psutil", "numpy", "rich", "nvitop", "gpustat", "pandas")),
        "NVML": "fake library build/fakenvml/libnvidia-ml.so.1 (tests/fakenvml), through "
                "nvidia-ml-py",
    }


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def frame_bench(py: str, frames: int) -> tuple[list[dict], Optional[str]]:
    p = subprocess.run([py, "-W", "ignore", "-m", "bench.frame", "--gpus", "1", "8",
                        "--frames", str(frames)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        return [], " ".join(p.stderr.split())[-300:] or f"exit {p.returncode}"
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")], None


def find(ms: Sequence[Measurement], name: str, setting: str, gpus: int) -> Optional[Measurement]:
    for m in ms:
        s = m.subject
        if s.name == name and s.setting == setting and s.gpus == gpus and not m.error:
            return m
    return None


def ratios(ms: Sequence[Measurement]) -> list[report.Ratio]:
    pairs = [
        (("gpumon log", "default (1 s)"), [("bare nvidia-ml-py loop", "1 s"), ("gpustat", "-i 1"),
                                          ("nvitop collector", "1 s snapshots")]),
        (("gpumon log", "--interval 0.1"), [("bare nvidia-ml-py loop", "0.1 s"),
                                            ("gpustat", "-i 0.1"),
                                            ("nvitop collector", "0.1 s snapshots")]),
        (("gpumon watch", "default (1 s)"), [("nvitop screen", "default (2 s)"),
                                            ("gpustat", "-i 1")]),
        (("gpumon watch", "--interval 0.1"), [("nvitop screen", "--interval 0.25"),
                                             ("gpustat", "-i 0.1")]),
    ]
    out = []
    for g in sorted({m.subject.gpus for m in ms}, reverse=True):
        for (on, os_), peers in pairs:
            ours = find(ms, on, os_, g)
            for pn, ps in peers:
                peer = find(ms, pn, ps, g)
                if ours and peer:
                    out.append(report.Ratio(ours, peer))
    return out


def memory_target(rows) -> report.Target:
    """Peak RSS over the simulated run at most RSS_MAX_MIB, and flat once settled."""
    hours = rows[0]["seconds"] / 3600.0 if rows else 1.0
    what = (f"peak RSS of `log`, `watch`, `export` and `stream` over a simulated {hours:g} h "
            "(0.1 s and 1 s, 8 GPUs)")
    limit = f"<= {RSS_MAX_MIB:g} MiB, growth once settled <= {RSS_GROWTH_MAX_MIB:g} MiB"
    w = memory.worst(rows)
    if w is None:
        return report.Target(what, limit, "n/a", None)
    grown = max(r["growth_mib"] or 0.0 for r in rows if not r.get("error"))
    ok = (w["peak_mib"] <= RSS_MAX_MIB and grown <= RSS_GROWTH_MAX_MIB
          and not any(r.get("error") for r in rows))
    return report.Target(what, limit, f"{w['peak_mib']:.0f} MiB (largest: {w['command']} "
                         f"--interval {w['interval']:g}); growth once settled at most "
                         f"{grown:+.1f} MiB", ok)


def targets(ms, frames, ours_an, pandas_an) -> list[report.Target]:
    t = []

    def cpu_target(name, setting, limit, label):
        m = find(ms, name, setting, 8)
        t.append(report.Target(label, f"<= {limit:g}% of one core",
                               f"{report.cpu_cell(m)}%" if m else "n/a",
                               None if m is None else m.mean <= limit))
    for setting, limit in (("default (1 s)", LOG_DEFAULT_MAX_PCT),
                           ("--interval 0.1", LOG_FAST_MAX_PCT)):
        cpu_target("gpumon log", setting, limit, f"`gpumon log` {setting}, 8 GPUs")
    cpu_target("gpumon stream", "1 s (the dool column's child)", STREAM_MAX_PCT,
               "the dool column's child (`gpumon stream`) at 1 s, 8 GPUs")
    w = find(ms, "gpumon watch", "default (1 s)", 8)
    nv = find(ms, "nvitop screen", "default (2 s)", 8)
    t.append(report.Target("`gpumon watch` default, 8 GPUs", "below nvitop's screen at its "
                           "default" + (f" ({report.pct(nv.mean)}%)" if nv else ""),
                           f"{report.cpu_cell(w)}%" + (
                               f"; with the terminal {report.pct(w.mean + (w.term_mean or 0))}% vs "
                               f"{report.pct(nv.mean + (nv.term_mean or 0))}%" if w and nv else "")
                           if w else "n/a",
                           None if not (w and nv) else w.mean < nv.mean))
    rss = [m for m in ms if m.subject.ours and m.rss_mib is not None]
    worst = max(rss, key=lambda m: m.rss_mib) if rss else None
    t.append(report.Target("peak RSS of `log` and `watch`", f"<= {RSS_MAX_MIB:g} MiB",
                           f"{worst.rss_mib:.0f} MiB (largest: {worst.subject.name} "
                           f"{worst.subject.setting}, {worst.subject.gpus} GPUs)" if worst
                           else "n/a", None if worst is None else worst.rss_mib <= RSS_MAX_MIB))
    f8 = next((f for f in frames if f["gpus"] == 8), None)
    t.append(report.Target("dashboard frame, 8 GPUs", f"<= {FRAME_MAX_MS:g} ms",
                           f"{f8['median_ms']:.2f} ms median (p90 {f8['p90_ms']:.2f})" if f8
                           else "n/a", None if f8 is None else f8["median_ms"] <= FRAME_MAX_MS))
    # Issue 18's definition: the whole command against the whole command (`python -c "import
    # pandas; pandas.read_csv(F)"`), both with their start-up and imports; the read_csv call
    # alone is shown beside it.
    ok = (ours_an is not None and ours_an.best is not None and pandas_an.best
          and pandas_an.wall)
    ratio = ours_an.best / min(pandas_an.wall) if ok else None
    call = (f"; {ours_an.best / pandas_an.best:.1f}x the read_csv call alone "
            f"({pandas_an.best:.2f} s)" if ratio else "")
    t.append(report.Target("`gpumon analyze`, day-long 8-GPU log", f"<= {ANALYZE_MAX_RATIO:g}x "
                           "the whole pandas command", f"{ratio:.1f}x (`gpumon analyze` "
                           f"{ours_an.best:.2f} s vs `python -c 'import pandas; "
                           f"pandas.read_csv(...)'` {min(pandas_an.wall):.2f} s){call}"
                           if ratio else (ours_an.error if ours_an and ours_an.error else "n/a"),
                           None if ratio is None else ratio <= ANALYZE_MAX_RATIO))
    peak = max(ours_an.rss_mib) if ours_an and ours_an.rss_mib else None
    t.append(report.Target("`gpumon analyze` peak RSS", f"<= {ANALYZE_MAX_RSS_MIB:g} MiB",
                           f"{peak:.0f} MiB" if peak else "n/a",
                           None if peak is None else peak <= ANALYZE_MAX_RSS_MIB))
    return t


def readme_block(ms, frames, ours_an, pandas_an, meta, mem=()) -> list[str]:
    """A compact table for the README."""
    rows = []
    for name, setting, g in (("gpumon log", "default (1 s)", 8), ("gpumon log", "--interval 0.1", 8),
                             ("gpumon watch", "default (1 s)", 8),
                             ("bare nvidia-ml-py loop", "1 s", 8),
                             ("bare nvidia-ml-py loop", "0.1 s", 8), ("gpustat", "-i 1", 8),
                             ("gpustat", "-i 0.1", 8), ("nvitop screen", "default (2 s)", 8),
                             ("nvitop screen", "--interval 0.25", 8),
                             ("nvitop collector", "1 s snapshots", 8)):
        m = find(ms, name, setting, g)
        if m:
            rows.append([f"`{name}` {setting}", f"{report.pct(m.mean)}%", report.mib(m.rss_mib)])
    out = [f"Measured by `make bench` on {meta['machine']}, 8 fake GPUs through nvidia-ml-py, "
           f"a 64-process job ({meta['date']}):", ""]
    out += report.table(["program (8 GPUs)", "CPU, % of one core", "peak RSS MiB"], rows)
    f8 = next((f for f in frames if f["gpus"] == 8), None)
    extra = []
    if f8:
        extra.append(f"dashboard frame (8 GPUs) {f8['median_ms']:.2f} ms")
    if ours_an and ours_an.best and pandas_an and pandas_an.best:
        extra.append(f"`gpumon analyze` of a day-long 8-GPU log (691,200 rows) "
                     f"{ours_an.best:.1f} s ({691_200 / ours_an.best:,.0f} rows/s, "
                     f"{max(ours_an.rss_mib):.0f} MiB) vs pandas.read_csv {pandas_an.best:.2f} s")
    w = memory.worst(mem)
    if w:
        hours = w["seconds"] / 3600.0
        extra.append(f"peak RSS over a simulated {hours:g} h (8 GPUs, 0.1 s and 1 s): "
                     + ", ".join(f"`{r['command']}` {r['interval']:g} s {r['peak_mib']:.0f} MiB"
                                 for r in mem if not r.get("error")))
    if extra:
        out += ["", "; ".join(extra) + "."]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=float, default=4.0,
                    help="seconds per measured window (default 4: a multiple of every interval "
                         "measured, nvitop's 2 s included)")
    ap.add_argument("--repeats", type=int, default=3, help="windows per program (default 3)")
    ap.add_argument("--only", default=None, help="measure only programs whose name contains this")
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 8],
                    help="GPU counts for gpumon (default 1 8)")
    ap.add_argument("--peer-gpus", type=int, nargs="*", default=[8],
                    help="GPU counts for the peers (default 8)")
    ap.add_argument("--no-analysis", action="store_true")
    ap.add_argument("--analysis-repeats", type=int, default=2,
                    help="runs of `gpumon analyze` and of pandas.read_csv (default 2)")
    ap.add_argument("--analysis-only", action="store_true",
                    help="time only `gpumon analyze` of the day-long log against pandas (as "
                    "the whole command, the read_csv call, and both in-process with their "
                    "imports); prints, writes no report")
    ap.add_argument("--no-install-size", action="store_true",
                    help="skip the install sizes (the core and each extra, in fresh venvs)")
    ap.add_argument("--no-profile", action="store_true", help="no py-spy profile of misses")
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--memory-hours", type=float, default=1.0,
                    help="simulated hours of `log`, `watch`, `export` and `stream` for peak "
                    "RSS (default 1; 0: none)")
    ap.add_argument("--no-exporter-load", action="store_true",
                    help="skip `gpumon export` under 1,100 idle connections")
    ap.add_argument("--fuzz-count", type=int, default=1000,
                    help="mutated logs through `gpumon analyze` (default 1000; 0: none)")
    ap.add_argument("--call-costs", default=callcost.PROFILE, metavar="SPEC",
                    help="FAKE_NVML_CALL_US of the call-cost profile (default: issue 22's "
                    f"{callcost.PROFILE}); 'none' skips it")
    ap.add_argument("--overhead-only", action="store_true",
                    help="the monitor overhead only (free calls and the call-cost profile): no "
                    "frames, analysis, profiles, memory, exporter load, fuzzing or detector "
                    "cost")
    ap.add_argument("--out", default=os.path.join(RESULTS, "latest.md"))
    args = ap.parse_args(argv)
    detector_cost_too = not args.overhead_only
    if args.overhead_only:
        args.no_analysis = args.no_profile = args.no_exporter_load = True
        args.no_install_size = True
        args.memory_hours, args.fuzz_count, args.frames = 0, 0, 0

    started = time.monotonic()
    py = sys.executable
    os.makedirs(BUILD_DIR, exist_ok=True)
    if args.analysis_only:
        path, day_rows, _ = analysis.ensure_day(BUILD_DIR)
        ours_an, pandas_an = analysis.bench_analysis(path, python=py, cwd=ROOT,
                                                     repeats=args.analysis_repeats)
        inproc = analysis.bench_inprocess(path, python=py, cwd=ROOT,
                                          repeats=args.analysis_repeats)
        print("\n".join(analysis.only_lines(ours_an, pandas_an, inproc, ANALYZE_MAX_RATIO,
                                             day_rows)))
        print(f"load average at the end: {loadavg()}")
        return 0
    ensure_fake_library()
    meta = machine()
    load_before = loadavg()
    todo = subjects(py, args.gpus, args.peer_gpus)
    if args.only:
        todo = [s for s in todo if args.only in s.name]
    print(f"bench: {len(todo)} programs x ({args.repeats} x {args.window:g} s after warm-up); "
          f"then frames, analysis", flush=True)
    ms: list[Measurement] = []
    profiles: list[str] = []
    with ProcTree(mains=8, workers=7) as tree:
        for i, s in enumerate(todo):
            t0 = time.monotonic()
            m = overhead.measure(s, env_for(s.gpus, tree), ROOT, window_s=args.window,
                                 repeats=args.repeats, tag=str(i))
            ms.append(m)
            print(f"  {s.name:24} {s.setting:18} {s.gpus} GPU  cpu {report.cpu_cell(m):24} "
                  f"rss {report.mib(m.rss_mib):>4} MiB  ({time.monotonic() - t0:.0f} s) "
                  f"{m.error or m.note}", flush=True)

        cc: list[Measurement] = []
        if args.call_costs != "none":
            cc_todo = [s for s in callcost.subjects(py, BUILD_DIR, args.call_costs)
                       if not args.only or args.only in s.name]
            print(f"bench: call-cost profile, {len(cc_todo)} programs", flush=True)
            cc = callcost.run(cc_todo, lambda g: env_for(g, tree), ROOT, window_s=args.window,
                              repeats=args.repeats, log=lambda m: print(m, flush=True))

        frames, frame_err = (frame_bench(py, args.frames) if args.frames > 0
                             else ([], "not run (--frames 0)"))
        print(f"  frames: {frame_err or [(f['gpus'], round(f['median_ms'], 2)) for f in frames]}",
              flush=True)

        ours_an = pandas_an = None
        day_rows = gen_s = 0
        if not args.no_analysis:
            path, day_rows, gen_s = analysis.ensure_day(BUILD_DIR)
            ours_an, pandas_an = analysis.bench_analysis(path, python=py, cwd=ROOT,
                                                         env=env_for(8, tree),
                                                         repeats=args.analysis_repeats)
            print(f"  analyze: {ours_an.error or ours_an.seconds}  pandas: "
                  f"{pandas_an.error or pandas_an.seconds}", flush=True)

        tgs = targets(ms, frames, ours_an, pandas_an) + callcost.targets(cc)
        if not args.no_profile:
            for tg, (name, setting) in zip(tgs[:3], (("gpumon log", "default (1 s)"),
                                                     ("gpumon log", "--interval 0.1"),
                                                     ("gpumon watch", "default (1 s)"))):
                if tg.ok is False and not any(name in p and setting in p for p in profiles):
                    s = next((x for x in todo if x.name == name and x.setting == setting
                              and x.gpus == 8), None)
                    if s is None:
                        continue
                    secs = PROFILE_S if "0.1" in setting else PROFILE_SLOW_S
                    print(f"  profiling {name} {setting} (8 GPUs) for {secs} s", flush=True)
                    try:
                        stacks, cpu = overhead.run_profiled(s, env_for(8, tree), ROOT, secs)
                        summ = profile.summarize(stacks)
                        profiles.append(f"### `{name}` {setting}, 8 GPUs ({cpu:.2f}% of one core "
                                        f"while recorded)\n\n" + "\n".join(
                                            profile.markdown(summ, cpu)))
                    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                        profiles.append(f"### `{name}` {setting}: no profile ({exc})")

    sizes = []
    if not args.no_install_size:
        print("  install sizes: the core and each extra, in fresh venvs", flush=True)
        sizes = install_size.install_sizes(py)
        print("\n".join("    " + ln for ln in install_size.lines(sizes)), flush=True)
        tgs.append(install_size.target(sizes))
    mem: list[dict] = []
    if args.memory_hours > 0:
        mem = memory.run(hours=args.memory_hours, python=py,
                         log=lambda m: print(m, flush=True))
        tgs.append(memory_target(mem))
    load_text = None
    if not args.no_exporter_load:
        print("  exporter under 1,100 idle connections", flush=True)
        try:
            load_text = exporter_load.format_result(exporter_load.run(conns=1100, load_s=10.0))
        except Exception as exc:      # a failed measurement is reported, not fatal
            load_text = f"failed: {type(exc).__name__}: {exc}"
        for attack in ("pipeline", "guess"):
            print(f"  exporter under attack: {attack}", flush=True)
            try:
                load_text += "\n" + exporter_load.format_result(
                    exporter_load.run_attack(attack, load_s=5.0))
            except Exception as exc:
                load_text += f"\n{attack}: failed: {type(exc).__name__}: {exc}"
        print("\n".join("    " + ln for ln in load_text.splitlines()), flush=True)
    fuzz = fuzz_logs.fuzz(count=args.fuzz_count, log=lambda m: print(m, flush=True)) \
        if args.fuzz_count > 0 else None
    if fuzz:
        tgs.append(report.Target(f"`gpumon analyze` on {fuzz.count} mutated logs and the "
                                 "memory bombs", "no traceback, hang or > 1 GiB",
                                 fuzz.measured(), fuzz.ok))
    det_rows = []
    if detector_cost_too:
        print("  live detector per tick (1, 8, 16, 64 GPUs)", flush=True)
        det_rows = detector_cost.run(log=lambda m: print(m, flush=True))
        tgs.append(detector_cost.target(det_rows))
    detect_md = None
    dpath = os.path.join(RESULTS, "detect.md")
    if os.path.exists(dpath):
        with open(dpath) as f:   # its headings one level below "## Detector"
            detect_md = "\n".join("##" + ln if ln.startswith("#") else ln
                                   for ln in f.read().strip().splitlines())
    elapsed = time.monotonic() - started

    lines = ["# gpumon benchmark", "",
             f"- date: {meta['date']}", f"- machine: {meta['machine']}",
             f"- load average: {load_before} at the start, {loadavg()} at the end "
             "(other work on the machine shows here)",
             f"- Python {meta['python']}; gpumon {meta['gpumon']}", f"- {meta['packages']}",
             f"- NVML: {meta['NVML']}",
             "- job: 8 mains x 7 loader workers (64 processes, asleep but for a moment a "
             "second); GPU i reports main i (FAKE_NVML_PIDS)",
             f"- `make bench` took {elapsed / 60:.1f} min", "",
             "## Targets", ""]
    lines += report.target_table(tgs)
    lines += ["", "## Monitor overhead", "",
              f"Steady state: CPU time from /proc (utime+stime, checked against per-thread "
              f"schedstat) over {args.repeats} consecutive windows of {args.window:g} s after "
              "the start-up, as % of one core: mean (min-max over the windows). Screens run in "
              f"a {overhead.TERM_COLS}x{overhead.TERM_ROWS} tmux terminal of their own; the tmux "
              "server's CPU (the terminal's work drawing them) is beside. Peak RSS is VmHWM.", ""]
    lines += report.overhead_table(ms)
    rs = ratios(ms)
    if rs:
        lines += ["", "### gpumon vs peers (CPU, same GPUs, same fake library, same run)", ""]
        lines += report.ratio_table(rs)
    peer_rows = [[m.subject.name, m.subject.setting, report.pct(m.mean),
                  report.pct(ISSUE_PEERS[(m.subject.name, m.subject.setting)])]
                 for m in ms if m.subject.gpus == 8 and not m.error
                 and (m.subject.name, m.subject.setting) in ISSUE_PEERS]
    if peer_rows:
        lines += ["", "Peers here vs the figures in issue 9 (8 GPUs, % of one core):", ""]
        lines += report.table(["peer", "setting", "here", "issue 9"], peer_rows)
    lines += ["", "### With NVML call costs (`python -m bench.run --overhead-only`)", ""]
    lines += (callcost.report_lines(cc, args.call_costs, args.window, args.repeats) if cc
              else ["Not run (--call-costs none)."])
    lines += ["", "## Dashboard frame", "",
              f"Build (Dashboard.view, layout) and render (rich, {frames[0]['frames'] if frames else 0} "
              f"frames, 256 colours, {overhead.TERM_COLS}x{overhead.TERM_ROWS}) of one frame, "
              "each after a new tick." if frames else f"Not measured: {frame_err}", ""]
    if frames:
        lines += report.frame_table(frames)
    lines += ["", "## Analysis", ""]
    if ours_an is None:
        lines += ["Not run (--no-analysis)."]
    else:
        lines += [f"A day-long 8-GPU `nvidia-smi --query-gpu ... --format=csv` log at 1 Hz "
                  f"({day_rows:,} rows, {os.path.getsize(analysis.day_path(BUILD_DIR)) / 1e6:.0f} "
                  f"MB, build/bench/; generated in {gen_s:.1f} s this run). `gpumon analyze` is "
                  "timed as a whole command (start-up included); pandas.read_csv as the call "
                  "alone (import excluded).", ""]
        rows = []
        for t in (ours_an, pandas_an):
            if t.error:
                rows.append([t.label, "failed: " + t.error, "", "", ""])
            else:
                rows.append([t.label, " / ".join(f"{s:.2f}" for s in t.seconds),
                             " / ".join(f"{s:.2f}" for s in t.wall),
                             f"{day_rows / t.best:,.0f}", f"{max(t.rss_mib):.0f}"])
        lines += report.table(["", "seconds per run (timed part)", "whole command, s",
                               "rows/s (best)", "peak RSS MiB"], rows)
    lines += ["", "## Install size (`python -m bench.install_size`)", ""]
    lines += (install_size.lines(sizes, ours_an.best if ours_an and not ours_an.error else None)
              if sizes else ["Not run (--no-install-size)."])
    lines += ["", "## Memory over a simulated hour (`python -m bench.memory`)", ""]
    lines += memory.format_result(mem) if mem else ["Not run (--memory-hours 0)."]
    lines += ["", "## Exporter under load (`python -m bench.exporter_load`)", ""]
    lines += ["```", load_text, "```"] if load_text else ["Not run (--no-exporter-load)."]
    lines += ["", "## Log fuzzing (`python -m bench.fuzz_logs`)", ""]
    lines += fuzz_logs.report_lines(fuzz) if fuzz else ["Not run (--fuzz-count 0)."]
    lines += ["", "## Live detector per tick (`python -m bench.detector_cost`)", ""]
    lines += detector_cost.format_result(det_rows)
    lines += ["", "## Detector", ""]
    lines += [detect_md] if detect_md else ["bench/results/detect.md is absent: run "
                                            "`make bench-detect`."]
    if profiles:
        lines += ["", "## Profiles of the misses (py-spy)", ""]
        lines += ["Share of the samples each part and function took (on-CPU Python stacks), and "
                  "that share as % of one core.", ""]
        lines += ["\n\n".join(profiles)]
    lines += ["", "## README summary", ""]
    lines += readme_block(ms, frames, ours_an, pandas_an, meta, mem)
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print()
    print(text)
    print(f"bench: written to {os.path.relpath(args.out, ROOT)} in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
