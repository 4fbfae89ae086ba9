"""The exporter's HTTP side: clients that vanish or idle, bounded threads and connections,
gzip, /healthz, the warning on an exposed port, and two SIGTERMs in a row.

Load figures (1,100 idle connections against the usual 1,024-descriptor limit) come from
``python -m bench.exporter_load``; these tests check the behaviour, on a small scale."""
import gzip
import http.client
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from gpumon.export_http import (MetricsServer, accepts_gzip, exposure_warning, is_loopback)
from gpumon.httpserver import WORKERS
from test_export import fetch, free_port, wait_for

psutil = pytest.importorskip("psutil")
pytest.importorskip("prometheus_client")


# -- a server in this process ------------------------------------------------------------------
@pytest.fixture
def serve():
    """serve(metrics=..., healthy=..., **kw) -> a running MetricsServer on a free port."""
    servers = []

    def start(metrics=lambda: b"up 1\n", healthy=lambda: True, **kw):
        srv = MetricsServer("127.0.0.1", 0, metrics, healthy, **kw)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv
    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def get(port, path="/metrics", headers=None, method="GET", timeout=3.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def reset(sock):
    """Close with a TCP reset, as a scraper that gave up does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_gzip_healthz_head_and_errors(serve):
    body = b"".join(b"metric_%d 1\n" % i for i in range(2000))
    healthy = [True]
    srv = serve(metrics=lambda: body, healthy=lambda: healthy[0])
    status, hdr, got = get(srv.port, headers={"Accept-Encoding": "gzip"})
    assert status == 200 and hdr["Content-Encoding"] == "gzip" and hdr["Vary"] == "Accept-Encoding"
    assert gzip.decompress(got) == body and len(got) < len(body) / 5
    status, hdr, got = get(srv.port)
    assert status == 200 and "Content-Encoding" not in hdr and got == body
    status, hdr, got = get(srv.port, headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "Content-Encoding" not in hdr and got == body
    status, hdr, got = get(srv.port, method="HEAD")
    assert status == 200 and got == b"" and int(hdr["Content-Length"]) == len(body)
    assert get(srv.port, "/healthz")[::2] == (200, b"ok\n")
    healthy[0] = False
    assert get(srv.port, "/healthz")[0] == 503
    assert get(srv.port, "/nope")[0] == 404

    def broken():
        raise RuntimeError("bug")
    srv = serve(metrics=broken)
    status, _, got = get(srv.port)
    assert status == 500 and b"RuntimeError('bug')" in got


@pytest.mark.parametrize("header,want", [
    ("gzip", True), ("gzip, deflate", True), ("identity", False), ("", False), (None, False),
    ("deflate, gzip;q=0.5", True), ("gzip;q=0", False), ("gzip; q=0.0", False), ("*", True),
    ("GZIP", True)])
def test_accepts_gzip(header, want):
    assert accepts_gzip(header) is want


def test_keep_alive_pipelining_and_a_body_closes(serve):
    srv = serve()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=3) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        got = b""
        while got.count(b"up 1\n") < 2:
            got += s.recv(65536)
        assert got.count(b"HTTP/1.1 200 OK") == 2
        # A request with a body (never read) closes the connection after its answer.
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        assert got.count(b"HTTP/1.1 200 OK") == 1


def test_idle_and_slow_clients_hold_no_worker_and_time_out(serve):
    srv = serve(workers=1, idle_timeout=1.0)
    idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(5)]
    slow = socket.create_connection(("127.0.0.1", srv.port))
    slow.sendall(b"GET /metrics HTTP/1.1\r\n")          # half a header, never finished
    t = time.monotonic()
    assert get(srv.port)[0] == 200                       # one worker, still answering
    assert time.monotonic() - t < 0.5
    kept = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=3)
    kept.request("GET", "/metrics")
    kept.getresponse().read()                            # kept alive, then idle
    for s in idle + [slow, kept.sock]:
        s.settimeout(3.0)
        assert s.recv(1) == b""                          # closed by the server within ~1 s
        s.close()
    assert time.monotonic() - t < 3.0
    end = time.monotonic() + 2
    while srv.held() and time.monotonic() < end:
        time.sleep(0.05)
    assert srv.held() == 0


def test_connection_cap_evicts_the_longest_idle(serve):
    srv = serve(max_connections=8, idle_timeout=30.0)
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(30)]
    assert get(srv.port)[0] == 200                       # the scrape gets in all the same
    assert srv.held() <= 8
    socks[0].settimeout(3.0)
    assert socks[0].recv(1) == b""                       # the oldest was closed
    for s in socks:
        s.close()


def test_vanishing_clients_print_nothing(serve, capfd):
    srv = serve(metrics=lambda: b"x" * 2_000_000)        # large: the write meets the reset
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        reset(s)
        socket.create_connection(("127.0.0.1", srv.port)).close()   # a TCP health check
    assert get(srv.port, "/healthz")[0] == 200
    assert capfd.readouterr().err == ""


def test_exposure_warning():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert exposure_warning("127.0.0.1", 9402, tls=False, auth=False) is None
    w = exposure_warning("0.0.0.0", 9402, tls=False, auth=False)
    assert "every interface (0.0.0.0:9402)" in w and "without TLS and without authentication" in w
    w = exposure_warning("::", 9402, tls=True, auth=False)
    assert "every interface ([::]:9402)" in w and "without authentication" in w
    assert "without TLS" not in w
    assert "10.1.2.3:9402, without TLS" in exposure_warning("10.1.2.3", 9402, tls=False,
                                                            auth=True)
    assert exposure_warning("0.0.0.0", 9402, tls=True, auth=True) is None


# -- the command line ----------------------------------------------------------------------------
def start(gpumon_cmd, env, *args, nofile=None):
    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return subprocess.Popen(gpumon_cmd + ["export", "--sim", "busy:2", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit)


def finish(proc):
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def test_cli_client_disconnects_print_no_traceback(gpumon_cmd, clean_env):
    port = free_port()
    proc = start(gpumon_cmd, clean_env, "--port", str(port), "-q")
    try:
        wait_for(port, proc)
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
            reset(s)                                  # a scrape timeout
            socket.create_connection(("127.0.0.1", port)).close()   # a TCP health check
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /met")
            reset(s)                                  # gone half-way through the request
        time.sleep(0.5)
        assert fetch(port)[0] == 200
    finally:
        err = finish(proc)
    assert proc.returncode == 0 and err == "", err


def test_cli_bounded_threads_and_connections_under_idle_flood(gpumon_cmd, clean_env):
    """400 idle connections against a 256-descriptor limit: the scrape is still answered,
    threads stay bounded, and the idle connections are closed within a few seconds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 600:
        if hard != resource.RLIM_INFINITY and hard < 600:
            pytest.skip(f"needs 600 file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (600, hard))
    port = free_port()
    proc = start(gpumon_cmd, clean_env, "--port", str(port), "-q", nofile=256)
    socks = []
    try:
        wait_for(port, proc)
        for _ in range(400):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        time.sleep(0.5)
        t = time.monotonic()
        status, _, body = fetch(port, timeout=5.0)
        took = time.monotonic() - t
        assert status == 200 and "gpumon_up" in body and took < 2.0, took
        p = psutil.Process(proc.pid)
        assert p.num_threads() <= WORKERS + 6, p.num_threads()
        conns = getattr(p, "net_connections", None) or p.connections
        held = sum(c.status == psutil.CONN_ESTABLISHED for c in conns("tcp"))
        assert held <= 128, held                      # half the descriptor limit
        end = time.monotonic() + 10
        while time.monotonic() < end:
            held = sum(c.status == psutil.CONN_ESTABLISHED for c in conns("tcp"))
            if held == 0:
                break
            time.sleep(0.25)
        assert held == 0, f"{held} idle connections still held"
        assert fetch(port)[0] == 200
    finally:
        for s in socks:
            s.close()
        err = finish(proc)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_cli_gzip_and_healthz(gpumon_cmd, clean_env):
    port = free_port()
    proc = start(gpumon_cmd, clean_env, "--port", str(port), "-q")
    try:
        wait_for(port, proc)
        status, hdr, raw = get(port, headers={"Accept-Encoding": "gzip"})
        assert status == 200 and hdr.get("Content-Encoding") == "gzip"
        assert b'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in gzip.decompress(raw)
        assert get(port, "/healthz")[::2] == (200, b"ok\n")
    finally:
        err = finish(proc)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("listen", ["0.0.0.0:{port}", ":{port}", "[::]:{port}"])
def test_cli_warns_on_every_interface_even_with_q(gpumon_cmd, clean_env, listen):
    port = free_port()
    proc = start(gpumon_cmd, clean_env, "--listen", listen.format(port=port), "-q")
    try:
        wait_for(port, proc)
    finally:
        err = finish(proc)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "warning: listening on every interface" in lines[0], err
    assert "without TLS and without authentication" in lines[0] and "--web-config" in lines[0]
    assert proc.returncode == 0


def test_cli_loopback_with_q_says_nothing(gpumon_cmd, clean_env):
    port = free_port()
    proc = start(gpumon_cmd, clean_env, "--listen", f"127.0.0.1:{port}", "-q")
    try:
        wait_for(port, proc)
    finally:
        err = finish(proc)
    assert err == "" and proc.returncode == 0


def test_cli_two_sigterms_exit_zero(gpumon_cmd, clean_env):
    """GNU timeout sends SIGTERM twice; a service manager may too. The second one, coming
    while the first is being handled, used to end the command with 130."""
    port = free_port()
    proc = start(gpumon_cmd, clean_env, "--port", str(port), "-q")
    try:
        wait_for(port, proc)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.skipif(sys.platform != "linux", reason="GNU timeout")
def test_cli_under_gnu_timeout_exits_zero(gpumon_cmd, clean_env):
    import shutil
    if not shutil.which("timeout"):
        pytest.skip("no timeout(1)")
    r = subprocess.run(["timeout", "--preserve-status", "4"] + gpumon_cmd +
                       ["export", "--sim", "busy:1", "--port", "0", "-q"], env=clean_env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
