"""`gpumon export` against the real thing: a Prometheus server scraping it every second,
promtool on the shipped rules, and 50 concurrent scrapers while sampling goes on.

Needs Debian's `prometheus` package (/usr/bin/prometheus, /usr/bin/promtool); .ci/run installs
it. Without it these tests are skipped, saying why.
"""
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "contrib" / "prometheus" / "gpumon-rules.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "tests" / "gpumon-rules.test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "gpumon-dashboard.json"
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus"
                                            if os.path.exists("/usr/bin/prometheus") else None)
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool"
                                        if os.path.exists("/usr/bin/promtool") else None)
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary "
                                      "(apt-get install prometheus; .ci/run does)")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="no promtool binary "
                                    "(apt-get install prometheus; .ci/run does)")

# The promise: the right verdict on /metrics within this long of start.
VERDICT_WITHIN_S = 10.0
# Load test: scrapers, seconds, and the bounds they must keep.
SCRAPERS = 50
LOAD_S = 20.0
P99_BOUND_S = 2.0          # 50 clients on 2 shared cores: ~1 ms CPU each, queued behind 49
RSS_GROWTH_BOUND_MB = 40.0  # 50 connection threads and their buffers, not a leak
MIN_TICK_SHARE = 0.6       # the sampler keeps at least this share of its 1 s ticks meanwhile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=3.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def start_exporter(gpumon_cmd, env, sim, port, *extra):
    return subprocess.Popen(gpumon_cmd + ["export", "--sim", sim, "--port", str(port), "-q",
                                          *extra],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.stderr.read() if proc.stderr else ""


def metric_value(text, name, **labels):
    """Value of the first sample line of ``name`` whose labels include ``labels``."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def prometheus(tmp_path):
    """A Prometheus server on loopback; call it with the exporter port to start it."""
    procs = []

    def start(target_port):
        port = free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n  - job_name: gpumon\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n"
            "        labels: {train_job: test}\n")
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {proc.stderr.read()}")
            try:
                get(base + "/-/ready", timeout=1.0)
                return base
            except OSError:
                time.sleep(0.2)
        raise AssertionError("prometheus did not become ready")

    yield start
    for p in procs:
        stop(p)


def query(base, expr):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(get(url))
    assert body["status"] == "success", body
    return body["data"]["result"]


def poll_query(base, expr, deadline_s, proc):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"gpumon export exited: {proc.stderr.read()}"
        got = query(base, expr)
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"no result for {expr} within {deadline_s} s")


@needs_prometheus
def test_prometheus_scrapes_dcgm_names_and_the_sync_stall_verdict(gpumon_cmd, clean_env,
                                                                   prometheus):
    port = free_port()
    t0 = time.monotonic()
    exporter = start_exporter(gpumon_cmd, clean_env, "sync_stall:4", port)
    try:
        base = prometheus(port)
        # On /metrics itself: the right verdict within 10 s of start.
        seen = None
        while time.monotonic() - t0 < VERDICT_WITHIN_S + 5:
            try:
                text = get(f"http://127.0.0.1:{port}/metrics", timeout=1.0)
            except OSError:
                text = ""
            if metric_value(text, "gpumon_verdict", verdict="sync_stall") == 1:
                seen = time.monotonic() - t0
                break
            time.sleep(0.2)
        print(f"sync_stall on /metrics {seen} s after start")
        assert seen is not None and seen <= VERDICT_WITHIN_S, seen

        # Through Prometheus: the verdict, the GPU metrics under dcgm-exporter's names.
        got = poll_query(base, 'gpumon_verdict{verdict="sync_stall"} == 1', 30, exporter)
        lab = got[0]["metric"]
        assert lab["job_gpus"] == "0,1,2,3" and lab["job"] == "gpumon"
        assert "exported_job" not in lab
        util = poll_query(base, "DCGM_FI_DEV_GPU_UTIL", 10, exporter)
        assert sorted(r["metric"]["gpu"] for r in util) == ["0", "1", "2", "3"]
        for r in util:
            m = r["metric"]
            assert m["UUID"].startswith("GPU-") and m["device"] == f"nvidia{m['gpu']}"
            assert m["modelName"] and m["Hostname"] and m["pci_bus_id"]
        for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
                     "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEM_COPY_UTIL",
                     "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_PROF_PCIE_RX_BYTES"):
            assert len(query(base, name)) == 4, name
        assert query(base, "gpumon_up")[0]["value"][1] == "1"
        assert query(base, "up")[0]["value"][1] == "1"
        # The energy counter works with rate(): mJ/s / 1000 is watts, near the power gauge.
        # (Once the window is full: rate() extrapolates a window holding two samples.)
        poll_query(base, "count(count_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[8s]) >= 7)"
                   " == 4", 20, exporter)
        ratio = query(base, "(rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[8s]) / 1000)"
                      " / avg_over_time(DCGM_FI_DEV_POWER_USAGE[8s])")
        assert len(ratio) == 4
        for r in ratio:
            assert 0.7 < float(r["value"][1]) < 1.4, ratio
        meta = json.loads(get(base + "/api/v1/metadata?metric="
                              "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"))["data"]
        assert meta["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0]["type"] == "counter"
        meta = json.loads(get(base + "/api/v1/metadata?metric=DCGM_FI_DEV_GPU_UTIL"))["data"]
        assert meta["DCGM_FI_DEV_GPU_UTIL"][0]["type"] == "gauge"
        # The shipped recording rules load in a real server and see the verdict (4 = sync).
        code = poll_query(base, "gpumon:verdict_code == 4", 15, exporter)
        assert code[0]["metric"]["Hostname"] == lab["Hostname"]
        nodes = poll_query(base, "gpumon:train_job_nodes:count", 15, exporter)
        assert nodes[0]["metric"]["train_job"] == "test" and nodes[0]["value"][1] == "1"
        # Every query of the Grafana dashboard runs; the verdict timeline shows sync_stall.
        dash = json.loads(DASHBOARD.read_text())
        for panel in dash["panels"]:
            for target in panel["targets"]:
                expr = (target["expr"].replace("$Hostname", ".*")
                        .replace("$__rate_interval", "5s"))
                got = query(base, expr)
                if panel["title"] == "Verdict timeline":
                    assert [r["value"][1] for r in got] == ["4"], got
                elif panel["title"] in ("GPU utilization", "Power draw", "Evidence: duty cycle "
                                        "and busy-but-cold share", "Current verdict, cause and "
                                        "straggler"):
                    assert got, panel["title"]
    finally:
        err = stop(exporter)
    assert "Traceback" not in err, err


@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules(tmp_path):
    r = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    # The unit tests do catch a broken rule: starvation firing after 1 minute fails them.
    broken = tmp_path / "gpumon-rules.yml"
    text = RULES.read_text()
    starv = text.index("alert: GpumonDataStarvation")
    broken.write_text(text[:starv] + text[starv:].replace("for: 10m", "for: 1m", 1))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    r = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "tests" / RULE_TESTS.name)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "GpumonDataStarvation" in r.stdout + r.stderr


@needs_promtool
def test_example_prometheus_config_is_valid():
    r = subprocess.run([PROMTOOL, "check", "config", str(RULES.parent / "prometheus.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_unit_verifies(tmp_path):
    unit = (ROOT / "contrib" / "systemd" / "gpumon-export.service").read_text()
    assert "--listen ${GPUMON_LISTEN}" in unit and "GPUMON_LISTEN=127.0.0.1:9402" in unit
    gpumon = shutil.which("gpumon") or str(Path(os.sys.executable).parent / "gpumon")
    if not os.path.exists(gpumon):
        pytest.skip("no gpumon console script to point the unit at")
    (tmp_path / "gpumon-export.service").write_text(unit.replace("/usr/local/bin/gpumon", gpumon))
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "gpumon-export.service")],
                       capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines()
                if "gpumon-export.service" in ln]
    assert r.returncode == 0 and not problems, r.stdout + r.stderr


def test_daemonset_uses_host_pids_and_no_gpu_request():
    text = (ROOT / "contrib" / "kubernetes" / "gpumon-daemonset.yaml").read_text()
    assert "hostPID: true" in text and "nvidia.com/gpu:" not in text.replace(
        "nvidia.com/gpu.present", "")
    assert '"--listen", "0.0.0.0:9402"' in text and "fieldPath: spec.nodeName" in text


def _scraper(port, stop_at, latencies, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while time.monotonic() < stop_at:
        t = time.monotonic()
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200 or b"gpumon_up" not in body:
                errors.append(f"status {resp.status}")
        except (OSError, http.client.HTTPException) as exc:
            errors.append(repr(exc))
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            continue
        latencies.append(time.monotonic() - t)
    conn.close()


def test_fifty_concurrent_scrapers_for_twenty_seconds(gpumon_cmd, clean_env):
    port = free_port()
    exporter = start_exporter(gpumon_cmd, clean_env, "sync_stall:8", port)
    try:
        base = f"http://127.0.0.1:{port}/metrics"
        end = time.monotonic() + 15
        text = ""
        while time.monotonic() < end and "DCGM_FI_DEV_GPU_UTIL{" not in text:
            try:
                text = get(base, timeout=1.0)
            except OSError:
                time.sleep(0.1)
        assert "DCGM_FI_DEV_GPU_UTIL{" in text, exporter.stderr
        if PROMTOOL:
            # promtool's linter finds nothing but what dcgm-exporter's conventions bring:
            # camelCase labels (UUID, modelName, Hostname), an energy counter without _total.
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=60)
            for line in (r.stdout + r.stderr).splitlines():
                assert ("label names should be written in 'snake_case'" in line
                        or line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter "
                                           "metrics should have \"_total\" suffix")), line
        proc = psutil.Process(exporter.pid)
        rss0 = proc.memory_info().rss
        ticks0 = metric_value(text, "gpumon_ticks_total")
        t_start = time.monotonic()
        stop_at = t_start + LOAD_S
        latencies: list = []
        errors: list = []
        threads = [threading.Thread(target=_scraper, args=(port, stop_at, latencies, errors))
                   for _ in range(SCRAPERS)]
        for t in threads:
            t.start()
        rss_peak = rss0
        while time.monotonic() < stop_at:
            rss_peak = max(rss_peak, proc.memory_info().rss)
            time.sleep(0.5)
        for t in threads:
            t.join(timeout=30)
        elapsed = time.monotonic() - t_start
        text = get(base)
        ticks1 = metric_value(text, "gpumon_ticks_total")
        cpu = proc.cpu_times()
    finally:
        err = stop(exporter)
    lat = sorted(latencies)
    p50 = statistics.median(lat)
    p99 = lat[int(0.99 * (len(lat) - 1))]
    growth_mb = (rss_peak - rss0) / 2**20
    ticks = ticks1 - ticks0
    print(f"\n{len(lat)} scrapes by {SCRAPERS} clients in {elapsed:.1f} s "
          f"({len(lat) / elapsed:.0f}/s): p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
          f"max {lat[-1] * 1e3:.1f} ms; RSS {rss0 / 2**20:.1f} -> peak {rss_peak / 2**20:.1f} "
          f"MiB; {ticks:.0f} ticks; exporter CPU {cpu.user + cpu.system:.1f} s; "
          f"errors {len(errors)}")
    assert not errors, errors[:5]
    assert len(lat) >= SCRAPERS * 5               # every client kept being answered
    assert p99 < P99_BOUND_S, p99
    assert growth_mb < RSS_GROWTH_BOUND_MB, growth_mb
    assert ticks >= MIN_TICK_SHARE * LOAD_S, ticks
    assert "Traceback" not in err, err
