"""The exporter under clients that try to tie up its workers: connections that pipeline
requests and never read their answers, and a crowd guessing passwords against a costly
bcrypt hash. Meanwhile a real scraper's every request must be answered, and soon.

The load figures come from ``python -m bench.exporter_load --scenario ...``; these tests run
the same scenarios on a small scale."""
import http.client
import socket
import subprocess
import threading
import time

import pytest

from bench.exporter_load import Guessers, basic, bcrypt_hash, non_readers
from gpumon.httpserver import WORKERS
from gpumon.webconfig import BasicAuth, bcrypt_checker
from test_export import free_port

pytest.importorskip("prometheus_client")

# A scrape's bound here: Prometheus's default scrape_timeout is 10 s; a scrape that takes a
# tenth of it under attack is still answered in time, whatever the machine's load.
SCRAPE_BOUND_S = 2.0


def scrape(port, auth=None, timeout=SCRAPE_BOUND_S * 2, source=None):
    """(status, seconds) of one GET /metrics on a fresh connection (from ``source``)."""
    t = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": auth} if auth else {})
        r = conn.getresponse()
        r.read()
        return r.status, time.monotonic() - t
    except OSError as exc:
        return type(exc).__name__, time.monotonic() - t
    finally:
        conn.close()


def scrapes(port, n, every_s, auth=None):
    got = []
    for _ in range(n):
        got.append(scrape(port, auth))
        time.sleep(every_s)
    return got


@pytest.fixture
def serve():
    from gpumon.export_http import MetricsServer
    servers = []

    def start(metrics, **kw):
        srv = MetricsServer("127.0.0.1", 0, metrics, **kw)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv
    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_pipelining_clients_that_never_read_hold_no_worker(serve):
    """As many connections as workers pipeline scrapes of a 512 KB page and never read: each
    answer waits for its reader in the selector, not in a worker's blocking send."""
    body = b"".join(b"DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\"} 100\n" % i for i in range(16000))
    srv = serve(lambda: body)
    socks = non_readers(srv.port, WORKERS * 2)   # 400 requests each
    try:
        time.sleep(0.5)                          # every worker has met its non-reader
        got = scrapes(srv.port, 8, 0.2)
    finally:
        for s in socks:
            s.close()
    assert all(status == 200 for status, _ in got), got
    assert max(took for _, took in got) < SCRAPE_BOUND_S, got


def test_a_pipelining_client_gets_every_answer_in_order(serve):
    """The answers a reader gets are whole and in order, however its socket fills."""
    n = [0]

    def metrics():
        n[0] += 1
        return b"n %d\n" % n[0] + b"x" * 200_000
    srv = serve(metrics)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 40)
        time.sleep(0.5)                          # the server's side fills
        got = b""
        while got.count(b"HTTP/1.1 200 OK") < 40 or not got.endswith(b"x" * 1000):
            chunk = s.recv(1 << 20)
            assert chunk, "closed early"
            got += chunk
    numbers = [int(line.split()[1]) for line in got.split(b"\n") if line.startswith(b"n ")]
    assert numbers == list(range(1, 41))


# -- guessed passwords -----------------------------------------------------------------------
def test_basic_auth_budget_for_unverified_passwords():
    """One unverified password is checked at a time, and such checks take at most half the
    time: the others are answered 'busy' at once; a pair that passed is not checked again."""
    calls = []

    def slow(password, hashed):
        calls.append(password)
        time.sleep(0.2)
        return password == "pw"
    auth = BasicAuth({"alice": "H"}, slow)
    assert auth.verify(basic("alice", "pw"), "10.0.0.1") == "ok"
    assert auth.verify(basic("alice", "x"), "10.0.0.2") == "busy"   # resting as it worked
    time.sleep(0.25)
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        auth.verify(basic("alice", "x"), f"10.0.1.{i}"))) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["busy"] * 4 + ["denied"], results
    assert auth.verify(basic("alice", "x"), "10.0.0.3") == "busy"
    assert auth.verify(basic("alice", "pw"), "10.0.0.4") == "ok"   # remembered: at once
    time.sleep(0.25)
    assert auth.verify(basic("mallory", "x"), "10.0.0.5") == "denied"
    assert calls == ["pw", "x", "x"]
    time.sleep(0.25)
    assert auth.check(basic("alice", "pw")) and not auth.check(basic("alice", "y"))


def test_an_address_that_guesses_waits_its_turn():
    """Two wrong passwords are a typo; from the third in a row, the address waits 1 s, then
    2 s, ... before its next unverified password is checked. A right one clears the hold;
    a remembered pair passes even from a held address."""
    calls = []

    def check(password, hashed):
        calls.append(password)
        return password == "pw"
    auth = BasicAuth({"alice": "H"}, check)
    assert auth.verify(basic("alice", "pw"), "10.0.0.9") == "ok"
    said = [auth.verify(basic("alice", f"g{i}"), "10.0.0.1") for i in range(4)]
    assert said == ["denied"] * 3 + ["busy"] and len(calls) == 4
    assert auth.verify(basic("bob", "pw"), "10.0.0.1") == "busy"       # held, whoever
    assert auth.verify(basic("alice", "pw"), "10.0.0.1") == "ok"       # remembered
    assert auth.verify(basic("alice", "g9"), "10.0.0.2") == "denied"   # another address
    time.sleep(1.05)
    assert auth.verify(basic("alice", "g4"), "10.0.0.1") == "denied"   # its turn came
    assert auth.verify(basic("alice", "g5"), "10.0.0.1") == "busy"     # now 2 s


@pytest.mark.skipif(bcrypt_checker() is None, reason="neither bcrypt nor a crypt(3) with it")
def test_guessed_passwords_against_a_costly_hash_leave_scrapes_answered(
        gpumon_cmd, clean_env, tmp_path):
    """120 clients guess passwords against a cost-12 hash (~0.3 s a check) while Prometheus,
    whose password passed once, scrapes: every scrape is answered, within the bound."""
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: "
                                      f"{bcrypt_hash('s3cret', 12)}\n"
                                      f"  newcomer: {bcrypt_hash('n3w', 12)}\n")
    port = free_port()
    proc = subprocess.Popen(gpumon_cmd + ["export", "--sim", "busy:2", "--port", str(port),
                                          "-q", "--web-config", str(tmp_path / "web.yml")],
                            env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    good = basic("prometheus", "s3cret")
    try:
        end = time.monotonic() + 20
        while scrape(port, good)[0] != 200:          # started, and the password checked once
            assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
            time.sleep(0.2)
        with Guessers(port, 120, basic("prometheus", "guess")) as guessers:
            time.sleep(1.0)
            got = scrapes(port, 10, 0.3, good)
            # A newcomer from another address, its password never checked, retrying after
            # the second that 429's Retry-After asks for: in within a few tries.
            login = []
            while len(login) < 6 and 200 not in [status for status, _ in login]:
                login.append(scrape(port, basic("newcomer", "n3w"), source="127.0.0.2"))
                time.sleep(0 if login[-1][0] == 200 else 1.0)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert all(status == 200 for status, _ in got), got
    assert max(took for _, took in got) < SCRAPE_BOUND_S, got
    assert guessers.statuses.get("401") and guessers.statuses.get("429"), guessers.statuses
    assert set(guessers.statuses) <= {"401", "429"}, guessers.statuses
    assert 200 in [status for status, _ in login], login
    assert "Traceback" not in err, err
