"""`gpumon export` under a flood of idle connections (scrapers that connect and never ask,
half-open health checks, a misbehaving client), at the usual 1,024-descriptor limit.

Starts `gpumon export --sim sync_stall:8` with RLIMIT_NOFILE 1024, opens ``conns`` idle TCP
connections to it (loopback only), then for ``load_s`` seconds scrapes /metrics on a fresh
connection every ``scrape_every_s`` while the idle ones stay open, and reports: connections
and threads the exporter holds, the scrape's latency (median, max) and failures, the
exporter's CPU (% of one core over the load) and RSS; then how many connections it still
holds ``after_s`` seconds later (idle ones time out). Bounded: about 25 s in all.

    python -m bench.exporter_load [--conns 1100] [--json]

``run(**kw) -> dict`` is the entry point for bench/run.py; ``format_result(dict)`` the text.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
# The limit most distributions give a service or a login shell.
EXPORTER_NOFILE = 1024
# Idle connections: enough to exhaust that limit with a thread-per-connection server.
CONNS = 1100
# They are opened in batches, a pause between, so the server can accept them as they come
# (all at once, most would wait in the kernel's backlog, which proves nothing about the server).
OPEN_BATCH, OPEN_PAUSE_S = 50, 0.05
# How long the idle connections are held while scraping (s), how often the scrape comes.
LOAD_S = 10.0
SCRAPE_EVERY_S = 0.25
# One scrape's limit (s): Prometheus's default scrape_timeout is 10 s; past this it failed.
SCRAPE_TIMEOUT_S = 5.0
# After the load, how long until the held connections are counted again (s).
AFTER_S = 7.0
# Start-up (imports, the first sample) must end within this long (s).
START_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> tuple[bool, float, str]:
    t = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SCRAPE_TIMEOUT_S)
        try:
            conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            r = conn.getresponse()
            r.read()
            ok, why = r.status == 200, f"status {r.status}"
        finally:
            conn.close()
    except (OSError, http.client.HTTPException) as exc:
        ok, why = False, type(exc).__name__
    return ok, time.monotonic() - t, "" if ok else why


def _open_idle(port: int, n: int, deadline_s: float = 4.0) -> tuple[list, int]:
    """``n`` non-blocking connects at once, all kept open; and how many were established
    within ``deadline_s`` (the others wait in the kernel's backlog or retry their SYN)."""
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(n):
        if i and i % OPEN_BATCH == 0:
            time.sleep(OPEN_PAUSE_S)
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE)
        socks.append(s)
    done, end = 0, time.monotonic() + deadline_s
    while sel.get_map() and time.monotonic() < end:
        for key, _ in sel.select(0.1):
            sel.unregister(key.fileobj)
            done += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    sel.close()
    return socks, done


def _held(proc) -> int:
    """The exporter's established TCP connections."""
    import psutil
    conns = getattr(proc, "net_connections", None) or proc.connections
    return sum(c.status == psutil.CONN_ESTABLISHED for c in conns("tcp"))


def run(conns: int = CONNS, load_s: float = LOAD_S, after_s: float = AFTER_S,
        python: Optional[str] = None, scenario: str = "sync_stall:8") -> dict:
    import psutil
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = conns + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (EXPORTER_NOFILE, max(EXPORTER_NOFILE, hard)
                                                    if hard != resource.RLIM_INFINITY
                                                    else resource.RLIM_INFINITY))
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    proc = subprocess.Popen([python or sys.executable, "-m", "gpumon", "export", "--sim",
                             scenario, "--port", str(port), "-q"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit)
    out: dict = {"conns_opened": conns, "exporter_nofile": EXPORTER_NOFILE,
                 "scenario": scenario, "load_s": load_s}
    idle: list = []
    try:
        end = time.monotonic() + START_TIMEOUT_S
        while not _scrape(port)[0]:
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"gpumon export did not start: {proc.stderr.read()[-500:]}")
            time.sleep(0.2)
        p = psutil.Process(proc.pid)
        base = [_scrape(port)[1] for _ in range(10)]
        out["idle_latency_ms"] = statistics.median(base) * 1e3
        cpu0, t0 = p.cpu_times(), time.monotonic()
        idle, out["conns_established"] = _open_idle(port, conns)
        time.sleep(0.5)
        out["held_after_open"] = _held(p)
        out["threads_after_open"] = p.num_threads()
        out["fds_after_open"] = p.num_fds()
        lat, fails, rss = [], {}, p.memory_info().rss
        end = t0 + load_s
        while time.monotonic() < end:
            ok, took, why = _scrape(port)
            if ok:
                lat.append(took)
            else:
                fails[why] = fails.get(why, 0) + 1
            rss = max(rss, p.memory_info().rss)
            time.sleep(max(0.0, SCRAPE_EVERY_S - took))
        cpu1, t1 = p.cpu_times(), time.monotonic()
        out["held_end_of_load"] = _held(p)
        out["threads_end_of_load"] = p.num_threads()
        out["scrapes_ok"], out["scrapes_failed"] = len(lat), sum(fails.values())
        out["failures"] = fails
        out["latency_median_ms"] = statistics.median(lat) * 1e3 if lat else None
        out["latency_max_ms"] = max(lat) * 1e3 if lat else None
        used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        out["cpu_pct"] = 100.0 * used / (t1 - t0)
        out["rss_peak_mib"] = rss / 2**20
        time.sleep(after_s)
        out["after_s"] = after_s
        out["held_later"] = _held(p)
    finally:
        for s in idle:
            s.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out["exit_code"] = proc.returncode
        err = proc.stderr.read() if proc.stderr else ""
        out["tracebacks"] = err.count("Traceback")
    return out


def format_result(r: dict) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.1f} ms"
    fails = ", ".join(f"{k} x{v}" for k, v in r.get("failures", {}).items()) or "none"
    return "\n".join([
        f"gpumon export --sim {r['scenario']}, RLIMIT_NOFILE {r['exporter_nofile']}, "
        f"{r['conns_opened']} idle connections ({r['conns_established']} established within "
        f"4 s) for {r['load_s']:g} s",
        f"  held by the exporter: {r['held_after_open']} after opening, "
        f"{r['held_end_of_load']} at the end of the load, {r['held_later']} "
        f"{r['after_s']:g} s later",
        f"  exporter threads: {r['threads_after_open']} after opening, "
        f"{r['threads_end_of_load']} at the end; fds {r['fds_after_open']}",
        f"  /metrics: {r['scrapes_ok']} ok, {r['scrapes_failed']} failed ({fails}); median "
        f"{ms(r['latency_median_ms'])}, max {ms(r['latency_max_ms'])} "
        f"(idle: {ms(r['idle_latency_ms'])})",
        f"  exporter CPU {r['cpu_pct']:.1f}% of one core during the load, RSS peak "
        f"{r['rss_peak_mib']:.1f} MiB; exit code {r['exit_code']}, tracebacks "
        f"{r['tracebacks']}"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.exporter_load", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", type=int, default=CONNS)
    ap.add_argument("--load-s", type=float, default=LOAD_S)
    ap.add_argument("--python", default=None, help="the interpreter that runs gpumon")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    r = run(conns=args.conns, load_s=args.load_s, python=args.python)
    print(json.dumps(r, indent=1) if args.json else format_result(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
