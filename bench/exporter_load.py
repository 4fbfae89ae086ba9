"""`gpumon export` under a flood of idle connections (scrapers that connect and never ask,
half-open health checks, a misbehaving client), at the usual 1,024-descriptor limit.

Starts `gpumon export --sim sync_stall:8` with RLIMIT_NOFILE 1024, opens ``conns`` idle TCP
connections to it (loopback only), then for ``load_s`` seconds scrapes /metrics on a fresh
connection every ``scrape_every_s`` while the idle ones stay open, and reports: connections
and threads the exporter holds, the scrape's latency (median, max) and failures, the
exporter's CPU (% of one core over the load) and RSS; then how many connections it still
holds ``after_s`` seconds later (idle ones time out). Bounded: about 25 s in all.

    python -m bench.exporter_load [--conns 1100] [--json]

Two attacks on its workers, each while a real scraper scrapes every ``scrape_every_s``:

    python -m bench.exporter_load --attack pipeline   # 16 connections pipelining scrapes,
                                                      # never reading an answer
    python -m bench.exporter_load --attack guess      # 120 clients guessing passwords
                                                      # against a cost-12 bcrypt hash

(the scraper's password passed once before; the figures add how long a newcomer with the
right password, never checked, from another address, waits for its first 200, retrying on
429).

``run(**kw) -> dict`` is the entry point for bench/run.py; ``run_attack(attack, **kw)`` for
the attacks; ``format_result(dict)`` the text of either.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
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
# The attacks: non-reading pipelining connections (twice the exporter's 8 workers) and the
# requests each sends at once; password guessers, and the bcrypt cost of the hash they face.
PIPELINERS, PIPELINED = 16, 400
GUESSERS, GUESS_COST = 120, 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int, auth: Optional[str] = None,
            source: Optional[str] = None) -> tuple[bool, float, str]:
    t = time.monotonic()
    headers = {"Accept-Encoding": "gzip"}
    if auth:
        headers["Authorization"] = auth
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SCRAPE_TIMEOUT_S,
                                          source_address=(source, 0) if source else None)
        try:
            conn.request("GET", "/metrics", headers=headers)
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
        _stop(proc, out)
    return out


# -- attacks on the workers ------------------------------------------------------------------
def basic(user: str, password: str) -> str:
    """An Authorization header for basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bcrypt_hash(password: str, cost: int = GUESS_COST) -> str:
    """A bcrypt hash (the bcrypt package's, else crypt(3)'s, as gpumon checks them)."""
    salt = base64.b64encode(os.urandom(16), b"./")[:22].decode()
    try:
        import bcrypt
        return bcrypt.hashpw(password.encode(), f"$2b${cost:02d}${salt}".encode()).decode()
    except ImportError:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
        return crypt.crypt(password, f"$2b${cost:02d}${salt}")


def non_readers(port: int, n: int = PIPELINERS, requests: int = PIPELINED) -> list:
    """``n`` connections that send ``requests`` pipelined scrapes each and never read."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        try:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * requests)
        except BlockingIOError:
            pass
        socks.append(s)
    return socks


class Guessers:
    """``n`` keep-alive connections asking for /metrics with a wrong password, each asking
    again as soon as its answer comes (one thread, a selector); ``statuses`` counts the
    answers by status. A context manager."""

    def __init__(self, port: int, n: int = GUESSERS, header: str = basic("prometheus", "guess")):
        self.port, self.n = port, n
        self.request = (f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {header}\r\n\r\n"
                        .encode())
        self.statuses: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _open(self, sel) -> None:
        s = socket.create_connection(("127.0.0.1", self.port))
        s.sendall(self.request)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for _ in range(self.n):
            self._open(sel)
        while not self._stop.is_set():
            for key, _ in sel.select(0.1):
                self._answered(sel, key.fileobj)
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()

    def _answered(self, sel, s) -> None:
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        for part in data.split(b"HTTP/1.1 ")[1:]:
            status = part[:3].decode()
            self.statuses[status] = self.statuses.get(status, 0) + 1
            try:
                s.sendall(self.request)
            except OSError:
                data = b""
        if not data:
            sel.unregister(s)
            s.close()
            self._open(sel)


def _first_login(port: int, auth: str, within_s: float = 10.0) -> tuple[Optional[float], int]:
    """Seconds until ``auth`` (never checked before) gets a 200 from another address than the
    guessers' (127.0.0.2), retrying on 429 after the second its Retry-After asks; and the
    tries. None if not within ``within_s``."""
    t0, tries = time.monotonic(), 0
    while time.monotonic() - t0 < within_s:
        tries += 1
        ok, _, _ = _scrape(port, auth, source="127.0.0.2")
        if ok:
            return time.monotonic() - t0, tries
        time.sleep(1.0)
    return None, tries


def run_attack(attack: str = "pipeline", load_s: float = LOAD_S,
               python: Optional[str] = None, scenario: str = "sync_stall:8") -> dict:
    """A real scraper's scrapes while ``attack`` ("pipeline" or "guess") goes on."""
    port = _free_port()
    out: dict = {"attack": attack, "scenario": scenario, "load_s": load_s}
    auth = basic("prometheus", "s3cret") if attack == "guess" else None
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--port", str(port), "-q"]
        if attack == "guess":
            web = Path(tmp, "web.yml")
            web.write_text(f"basic_auth_users:\n  prometheus: {bcrypt_hash('s3cret')}\n"
                           f"  newcomer: {bcrypt_hash('n3w')}\n")
            args += ["--web-config", str(web)]
        env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
        proc = subprocess.Popen([python or sys.executable, "-m", "gpumon", "export", "--sim",
                                 scenario] + args, cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_started(proc, port, auth)
            out["idle_latency_ms"] = statistics.median(
                _scrape(port, auth)[1] for _ in range(10)) * 1e3
            _attacked(out, attack, port, auth, load_s)
        finally:
            _stop(proc, out)
    return out


def _wait_started(proc, port: int, auth: Optional[str]) -> None:
    end = time.monotonic() + START_TIMEOUT_S
    while not _scrape(port, auth)[0]:
        if proc.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"gpumon export did not start: {proc.stderr.read()[-500:]}")
        time.sleep(0.2)


def _attacked(out: dict, attack: str, port: int, auth: Optional[str], load_s: float) -> None:
    """The scrapes (and, for "guess", a newcomer's first login) under ``attack``."""
    if attack == "pipeline":
        socks = non_readers(port)
        out["attackers"] = f"{len(socks)} connections pipelining {PIPELINED} scrapes, never reading"
        try:
            time.sleep(1.0)
            _scrapes(out, port, auth, load_s)
        finally:
            for s in socks:
                s.close()
        return
    with Guessers(port) as guessers:
        out["attackers"] = f"{guessers.n} clients guessing against a cost-{GUESS_COST} hash"
        time.sleep(1.0)
        _scrapes(out, port, auth, load_s)
        out["newcomer_login_s"], out["newcomer_tries"] = _first_login(
            port, basic("newcomer", "n3w"))
    out["attacker_answers"] = dict(sorted(guessers.statuses.items()))


def _scrapes(out: dict, port: int, auth: Optional[str], load_s: float) -> None:
    lat, fails = [], {}
    end = time.monotonic() + load_s
    while time.monotonic() < end:
        ok, took, why = _scrape(port, auth)
        if ok:
            lat.append(took)
        else:
            fails[why] = fails.get(why, 0) + 1
        time.sleep(max(0.0, SCRAPE_EVERY_S - took))
    out["scrapes_ok"], out["scrapes_failed"], out["failures"] = len(lat), sum(fails.values()), fails
    out["latency_median_ms"] = statistics.median(lat) * 1e3 if lat else None
    out["latency_max_ms"] = max(lat) * 1e3 if lat else None


def _stop(proc, out: dict) -> None:
    """Ends the exporter (SIGTERM, SIGKILL 10 s later) and records its exit code and how many
    tracebacks it printed."""
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


def format_attack(r: dict) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.1f} ms"
    fails = ", ".join(f"{k} x{v}" for k, v in r.get("failures", {}).items()) or "none"
    lines = [f"gpumon export --sim {r['scenario']} under attack: {r['attackers']}, "
             f"for {r['load_s']:g} s",
             f"  /metrics (a scraper every {SCRAPE_EVERY_S:g} s): {r['scrapes_ok']} ok, "
             f"{r['scrapes_failed']} failed ({fails}); median {ms(r['latency_median_ms'])}, "
             f"max {ms(r['latency_max_ms'])} (before the attack: {ms(r['idle_latency_ms'])})"]
    if "attacker_answers" in r:
        login = r["newcomer_login_s"]
        lines.append(f"  the guessers' answers: {r['attacker_answers']}; a newcomer with the "
                     f"right password: " + (f"in after {login:.1f} s ({r['newcomer_tries']} "
                                            "tries)" if login is not None else
                                            f"not in after {r['newcomer_tries']} tries"))
    lines.append(f"  exit code {r['exit_code']}, tracebacks {r['tracebacks']}")
    return "\n".join(lines)


def format_result(r: dict) -> str:
    if "attack" in r:
        return format_attack(r)

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
    ap.add_argument("--attack", choices=("pipeline", "guess"), default=None,
                    help="instead of idle connections, this attack on the workers")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    if args.attack:
        r = run_attack(args.attack, load_s=args.load_s, python=args.python)
    else:
        r = run(conns=args.conns, load_s=args.load_s, python=args.python)
    print(json.dumps(r, indent=1) if args.json else format_result(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
