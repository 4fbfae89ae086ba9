"""The Prometheus exporter without a server: families from hand-made data, the text format,
the collector over a Monitor, and the command line (bind address, errors)."""
import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from gpumon.diagnosis import VERDICTS, Diagnosis
from gpumon.errors import UserError
from gpumon.export import MonitorCollector, Snapshot, families, make_registry, render
from gpumon.export_http import DEFAULT_ADDR, DEFAULT_PORT, parse_listen
from gpumon.monitor import Monitor
from gpumon.samples import GpuInfo
from samples_util import gpu_sample, tick

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

# dcgm-exporter's default counters (etc/default-counters.csv) and the DCP fields it documents
# (dcp-metrics-included.csv): name -> (type, unit). gpumon must agree wherever it exports one.
DCGM_DEFAULTS = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "MHz"),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "C"),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "W"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "mJ"),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "%"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "%"),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "MiB"),
    "DCGM_FI_DEV_FB_USED": ("gauge", "MiB"),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gauge", "B/s"),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gauge", "B/s"),
}


def infos(n=2):
    return {i: GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:08d}",
                       pci_bus_id=f"00000000:{0x10 + i:02X}:00.0") for i in range(n)}


def snap(**kw):
    t = tick(100.0, gpus=2)
    latest = {}
    for s in t.gpus:
        latest[s.gpu] = s
    base = dict(now=100.2, latest=latest, tick_time=100.0, ticks=7, host_jobs=t.host.jobs,
                interval=1.0, source_kind="nvml")
    base.update(kw)
    return Snapshot(**base)


def parse(fams):
    """Render, then parse with prometheus_client's own parser: {name: family}."""
    text = render(fams).decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def samples_of(text, name):
    """(labels, value) of every sample named ``name`` (the parser adds ``_total`` to a
    counter's samples that lack it; the raw text is checked for that separately)."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name or (fam.type == "counter" and fam.name == name
                                  and s.name == name + "_total"):
                out.append((s.labels, s.value))
    return out


def test_dcgm_names_types_units_and_labels():
    text, fams = parse(families(snap(), infos(), "node7"))
    for name, (typ, unit) in DCGM_DEFAULTS.items():
        assert f"# TYPE {name} {typ}\n" in text, name
        got = samples_of(text, name)
        assert len(got) == 2, name
        labels = got[0][0]
        assert tuple(labels) == LABELS
        assert labels["device"] == "nvidia0" and labels["Hostname"] == "node7"
        assert labels["UUID"] == "GPU-00000000" and labels["modelName"].startswith("NVIDIA H100")
        assert labels["pci_bus_id"] == "00000000:10:00.0"
    value = {n: dict((lab["gpu"], v) for lab, v in samples_of(text, n)) for n in DCGM_DEFAULTS}
    assert value["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]["0"] == 10.0 * 1000   # J -> mJ
    assert value["DCGM_FI_DEV_FB_FREE"]["1"] == 81559.0 - 4000.0
    assert value["DCGM_FI_PROF_PCIE_RX_BYTES"]["0"] == 100.0 * 1e6         # MB/s -> B/s
    assert value["DCGM_FI_DEV_POWER_USAGE"]["0"] == 300.0
    # The counter keeps dcgm-exporter's name: no _total on the samples or the TYPE line.
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    assert len(re.findall(r"^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{", text, re.M)) == 2
    assert "# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge" in text


@pytest.mark.parametrize("kind", ["sim", "replay"])
def test_simulated_data_says_so_on_every_series(kind):
    """Not only gpumon_info: every DCGM_* and gpumon_* series of simulated (or replayed) GPUs
    carries source=KIND, dcgm-exporter's labels unchanged beside it."""
    d = Diagnosis("sync_stall", gpus=(0, 1), cause="straggler", straggler_gpu=1, confidence=0.8,
                  evidence={"duty_cycle": 0.5})
    text, _ = parse(families(snap(source_kind=kind, diagnoses=(d,), lost=()), infos(), "n"))
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) > 50 and any(ln.startswith("DCGM_FI_DEV_GPU_UTIL{") for ln in lines)
    assert all(f'source="{kind}"' in ln for ln in lines), \
        [ln for ln in lines if f'source="{kind}"' not in ln][:3]
    labels = samples_of(text, "DCGM_FI_DEV_GPU_UTIL")[0][0]
    assert tuple(labels) == LABELS + ("source",)
    # A real node's series keep dcgm-exporter's label set exactly.
    text, _ = parse(families(snap(source_kind="nvml"), infos(), "n"))
    assert [ln for ln in text.splitlines() if "source=" in ln] == \
        [ln for ln in text.splitlines() if ln.startswith("gpumon_info{")]


def test_missing_values_are_left_out_never_zero():
    s = snap()
    latest = dict(s.latest)
    latest[1] = gpu_sample(99.9, 1, None, power_w=None, mem_total_mib=None, temp_c=None,
                           energy_j=None, clock_events=None, pcie_rx_mbps=None)
    text, _ = parse(families(snap(latest=latest), infos(), "n"))
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_PROF_PCIE_RX_BYTES"):
        gpus = [lab["gpu"] for lab, _ in samples_of(text, name)]
        assert gpus == ["0"], name
    assert [lab["gpu"] for lab, _ in samples_of(text, "gpumon_clock_event_active")
            if lab["reason"] == "hw_thermal"] == ["0"]
    # still there: what GPU 1 did report
    assert [lab["gpu"] for lab, _ in samples_of(text, "DCGM_FI_DEV_FB_USED")] == ["0", "1"]
    # NaN from a source is missing too
    latest[1] = gpu_sample(99.9, 1, float("nan"))
    text, _ = parse(families(snap(latest=latest), infos(), "n"))
    assert [lab["gpu"] for lab, _ in samples_of(text, "DCGM_FI_DEV_GPU_UTIL")] == ["0"]


def test_clock_event_reasons_one_by_one():
    s = snap()
    latest = dict(s.latest)
    latest[0] = gpu_sample(99.9, 0, 100.0, clock_events=0x4 | 0x40)   # sw power cap, hw thermal
    text, _ = parse(families(snap(latest=latest), infos(), "n"))
    active = {(lab["gpu"], lab["reason"])
              for lab, v in samples_of(text, "gpumon_clock_event_active") if v == 1}
    assert active == {("0", "sw_power_cap"), ("0", "hw_thermal")}
    assert len(samples_of(text, "gpumon_clock_event_active")) == 2 * 8


def diagnosis(verdict="sync_stall", **kw):
    base = dict(verdict=verdict, gpus=(0, 1), cause="imbalance", straggler_gpu=1,
                confidence=0.8, evidence={"duty_cycle": 0.97, "busy_cold_share": 0.5,
                                          "gap_s": None, "burst_s": float("nan"),
                                          "loader_cpu_pct": 250.0, "main_cpu_pct": 99.0,
                                          "some_future_key": 3.0, "pause": 0.0})
    base.update(kw)
    return Diagnosis(**base)


def test_verdict_one_for_current_zero_for_others_with_cause_and_straggler():
    text, fams = parse(families(snap(diagnoses=(diagnosis(),)), infos(), "n"))
    got = samples_of(text, "gpumon_verdict")
    assert sorted(lab["verdict"] for lab, _ in got) == sorted(VERDICTS)
    ones = [(lab, v) for lab, v in got if v == 1]
    assert len(ones) == 1
    lab = ones[0][0]
    assert lab["verdict"] == "sync_stall" and lab["cause"] == "imbalance"
    assert lab["straggler_gpu"] == "1" and lab["job_gpus"] == "0,1" and lab["Hostname"] == "n"
    assert all("job" not in lab for lab, _ in got)   # Prometheus owns the `job` label
    assert fams["gpumon_verdict"].type == "gauge"
    ev = {n: samples_of(text, n) for n in ("gpumon_duty_cycle", "gpumon_busy_cold_ratio",
                                           "gpumon_gap_seconds", "gpumon_burst_seconds",
                                           "gpumon_loader_cpu_cores",
                                           "gpumon_main_process_cpu_cores")}
    assert ev["gpumon_duty_cycle"][0][1] == 0.97
    assert ev["gpumon_busy_cold_ratio"][0][1] == 0.5
    assert ev["gpumon_gap_seconds"] == [] and ev["gpumon_burst_seconds"] == []   # None, NaN
    assert ev["gpumon_loader_cpu_cores"][0][1] == 2.5
    assert ev["gpumon_main_process_cpu_cores"][0][1] == 0.99
    assert "some_future_key" not in text
    assert samples_of(text, "gpumon_verdict_confidence")[0][1] == 0.8


def test_verdict_without_cause_two_jobs_and_no_detector():
    d1 = diagnosis("data_starvation", gpus=(0,), cause=None, straggler_gpu=None, evidence={})
    d2 = diagnosis("busy", gpus=(1,), cause=None, straggler_gpu=None, evidence=None)
    text, _ = parse(families(snap(diagnoses=(d1, d2)), infos(), "n"))
    ones = {lab["job_gpus"]: lab for lab, v in samples_of(text, "gpumon_verdict") if v == 1}
    assert ones["0"]["verdict"] == "data_starvation" and ones["1"]["verdict"] == "busy"
    assert ones["0"].get("cause", "") == "" and ones["0"].get("straggler_gpu", "") == ""
    assert "gpumon_duty_cycle" not in text
    # A verdict string this exporter does not know still gets its 1.
    text, _ = parse(families(snap(diagnoses=(diagnosis("new_verdict"),)), infos(), "n"))
    ones = [lab["verdict"] for lab, v in samples_of(text, "gpumon_verdict") if v == 1]
    assert ones == ["new_verdict"]
    # No verdict yet (or no detector): no verdict series at all, not a row of zeros.
    text, _ = parse(families(snap(diagnoses=()), infos(), "n"))
    assert "gpumon_verdict" not in text


def test_up_age_ticks_lost_and_errors():
    text, _ = parse(families(snap(), infos(), "n"))
    assert samples_of(text, "gpumon_up") == [({"Hostname": "n"}, 1.0)]
    assert samples_of(text, "gpumon_ticks_total")[0][1] == 7
    ages = {lab["gpu"]: v for lab, v in samples_of(text, "gpumon_sample_age_seconds")}
    assert ages["0"] == pytest.approx(0.2) and ages["1"] == pytest.approx(0.2)
    assert {lab["gpu"]: v for lab, v in samples_of(text, "gpumon_gpu_lost")} == {"0": 0, "1": 0}
    assert "gpumon_nvml_errors_total" not in text          # a source without error counters
    # Stale: the newest tick is older than max(5 s, 5 intervals).
    text, _ = parse(families(snap(now=106.0), infos(), "n"))
    assert samples_of(text, "gpumon_up")[0][1] == 0
    text, _ = parse(families(snap(now=104.0), infos(), "n"))
    assert samples_of(text, "gpumon_up")[0][1] == 1
    text, _ = parse(families(snap(sampler_ok=False), infos(), "n"))
    assert samples_of(text, "gpumon_up")[0][1] == 0
    text, _ = parse(families(snap(tick_time=None, latest={}, host_jobs=()), infos(), "n"))
    assert samples_of(text, "gpumon_up")[0][1] == 0
    assert "DCGM_FI_DEV_GPU_UTIL" not in text
    # GPU 1 lost: its last readings are not exported, the loss is.
    text, _ = parse(families(snap(lost=(1,), errors={"power:NVMLError_Unknown": 3}),
                             infos(), "n"))
    assert {lab["gpu"] for lab, _ in samples_of(text, "DCGM_FI_DEV_GPU_UTIL")} == {"0"}
    assert {lab["gpu"]: v for lab, v in samples_of(text, "gpumon_gpu_lost")} == {"0": 0, "1": 1}
    assert samples_of(text, "gpumon_nvml_errors_total") == [
        ({"Hostname": "n", "metric": "power", "error": "NVMLError_Unknown"}, 3.0)]
    assert "# TYPE gpumon_nvml_errors_total counter" in text
    assert samples_of(text, "gpumon_up")[0][1] == 1          # GPU 0 is left


def test_up_is_0_when_every_gpu_is_lost():
    text, _ = parse(families(snap(lost=(0, 1)), infos(), "n"))
    assert samples_of(text, "gpumon_up")[0][1] == 0
    assert {lab["gpu"]: v for lab, v in samples_of(text, "gpumon_gpu_lost")} == {"0": 1, "1": 1}


def test_host_side_per_gpu():
    text, _ = parse(families(snap(), infos(), "n"))
    assert "gpumon_unmapped_gpu_processes" not in text     # no host data: left out
    text, _ = parse(families(snap(unmapped_pids=3), infos(), "n"))
    assert samples_of(text, "gpumon_unmapped_gpu_processes") == [({"Hostname": "n"}, 3.0)]
    got = {lab["gpu"]: v for lab, v in samples_of(text, "gpumon_gpu_loader_cpu_cores")}
    assert got == {"0": 1.2, "1": 1.2}
    assert samples_of(text, "gpumon_gpu_main_thread_cpu_cores") == []   # None in the sample


def test_render_escapes_and_parses():
    odd = {0: GpuInfo(index=0, name='Model "X"\\Y\nZ', uuid="GPU-0")}
    text, fams = parse(families(snap(latest={0: gpu_sample(100.0, 0, 50.0)}, host_jobs=()),
                                odd, "h"))
    lab = samples_of(text, "DCGM_FI_DEV_GPU_UTIL")[0][0]
    assert lab["modelName"] == 'Model "X"\\Y\nZ'
    for line in text.splitlines():
        assert line.startswith("#") or line.count(" ") >= 1
    # Every family has HELP and TYPE once, and its samples are contiguous.
    names = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(names) == len(set(names))


class CountingSource:
    """A source that counts every call: a scrape must cause none."""
    kind = "sim"

    def __init__(self, n=2):
        self.reads = 0
        self.info_calls = 0
        self.t = 1000.0
        self.n = n

    def gpu_infos(self):
        self.info_calls += 1
        return list(infos(self.n).values())

    def read(self):
        self.reads += 1
        self.t += 1.0
        return tick(self.t, gpus=self.n)

    def close(self):
        pass


def test_collector_reads_monitor_only_never_the_source():
    src = CountingSource()
    m = Monitor(src, interval=1.0)
    m.step()
    c = MonitorCollector(m, src.gpu_infos(), "n", clock=lambda: src.t + 0.5)
    reg = make_registry(c)
    m.step()
    reads, info_calls = src.reads, src.info_calls
    for _ in range(50):
        text = render(reg.collect()).decode()
    assert (src.reads, src.info_calls) == (reads, info_calls)
    assert samples_of(text, "gpumon_ticks_total")[0][1] == 2
    assert samples_of(text, "gpumon_up")[0][1] == 1
    # A tick without samples of GPU 1 (polled faster than its driver): its last sample stays.
    from gpumon.samples import Tick
    t = tick(src.t + 1, gpus=1)
    src.read = lambda: Tick(time=t.time, gpus=t.gpus, host=t.host)
    m.step()
    text = render(reg.collect()).decode()
    assert {lab["gpu"] for lab, _ in samples_of(text, "DCGM_FI_DEV_GPU_UTIL")} == {"0", "1"}


def test_collector_reports_sampler_failure():
    src = CountingSource()
    m = Monitor(src, interval=1.0)
    m.step()
    c = MonitorCollector(m, src.gpu_infos(), "n", clock=lambda: src.t)
    m.error = RuntimeError("NVML went away")
    text = render(make_registry(c).collect()).decode()
    assert samples_of(text, "gpumon_up")[0][1] == 0


@pytest.mark.parametrize("text,want", [
    ("127.0.0.1:9402", ("127.0.0.1", 9402)), ("0.0.0.0:1", ("0.0.0.0", 1)),
    (":9402", ("0.0.0.0", 9402)), ("[::1]:80", ("::1", 80)), ("[::]:0", ("::", 0)),
    ("localhost:9402", ("localhost", 9402))])
def test_parse_listen(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9402", "host:", "host:abc", "1.2.3.4:70000", "::1:9402",
                                  "[::1]9402"])
def test_parse_listen_rejects(text):
    with pytest.raises(UserError) as e:
        parse_listen(text)
    assert "\n" not in str(e.value)


def test_default_port_is_not_dcgm_exporters():
    assert DEFAULT_PORT != 9400 and DEFAULT_ADDR == "127.0.0.1"


# -- the command line --------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(port, path="/metrics", host="127.0.0.1", timeout=2.0):
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def wait_for(port, proc, want="DCGM_FI_DEV_GPU_UTIL{", deadline=15.0):
    """The first /metrics answer that holds ``want`` (the first samples take a moment)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"gpumon export exited: {proc.stderr.read()}")
        try:
            got = fetch(port)
            if want in got[2]:
                return got
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gpumon export did not answer with {want!r}")


def non_loopback_ip():
    """An address of this host that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))          # TEST-NET: no packet is sent
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def test_cli_binds_loopback_by_default_and_serves(gpumon_cmd, clean_env):
    port = free_port()
    proc = subprocess.Popen(gpumon_cmd + ["export", "--sim", "busy:2", "--port", str(port)],
                            env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        status, ctype, body = wait_for(port, proc)
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in body and "gpumon_up" in body
        assert 'gpumon_info{Hostname=' in body and 'source="sim"' in body
        assert all('source="sim"' in ln for ln in body.splitlines() if ln[:1] not in "#")
        import psutil
        p = psutil.Process(proc.pid)
        conns = getattr(p, "net_connections", None) or p.connections   # psutil < 6
        addrs = {c.laddr for c in conns("inet") if c.status == psutil.CONN_LISTEN}
        assert addrs == {("127.0.0.1", port)}, addrs
        ip = non_loopback_ip()
        if ip is not None:
            with pytest.raises(OSError):
                fetch(port, host=ip, timeout=1.0)
        assert fetch(port, "/")[0] == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            fetch(port, "/nope")
        assert e.value.code == 404
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert f"127.0.0.1:{port}/metrics" in err and "SIMULATED" in err
    assert "Traceback" not in err


def test_cli_port_in_use_is_one_line(gpumon_cmd, clean_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run(gpumon_cmd + ["export", "--sim", "busy:1", "--port", str(port)],
                           env=clean_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], r.stderr


def test_cli_bad_listen_is_one_line(gpumon_cmd, clean_env):
    r = subprocess.run(gpumon_cmd + ["export", "--sim", "busy:1", "--listen", "9402"],
                       env=clean_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--listen" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(gpumon_cmd + ["export", "--port", "1", "--listen", "x:1"],
                       env=clean_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_cli_without_prometheus_client_says_how_to_install(gpumon_cmd, clean_env, tmp_path):
    # A module that fails to import shadows the installed prometheus_client.
    (tmp_path / "prometheus_client").mkdir()
    (tmp_path / "prometheus_client" / "__init__.py").write_text(
        "raise ImportError('No module named prometheus_client')\n")
    clean_env["PYTHONPATH"] = f"{tmp_path}:{clean_env['PYTHONPATH']}"
    r = subprocess.run(gpumon_cmd + ["export", "--sim", "busy:1", "--port", "0"],
                       env=clean_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'gpumon-dl[export]'" in lines[0], r.stderr


# -- contrib/ speaks the exporter's names ------------------------------------------------------
CONTRIB = Path(__file__).resolve().parent.parent / "contrib"
NAME = re.compile(r"\b((?:DCGM_FI_|gpumon_)[A-Za-z0-9_]+)")


def exported_names():
    s = snap(diagnoses=(diagnosis(evidence={k: 0.5 for k in (
        "duty_cycle", "busy_cold_share", "burst_s", "gap_s", "loader_cpu_pct",
        "main_cpu_pct")}),), errors={"power:NVMLError_Unknown": 1})
    text = render(families(s, infos(), "n")).decode()
    return {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")}


def test_dashboard_and_rules_use_only_exported_metrics():
    have = exported_names()
    dash = json.loads((CONTRIB / "grafana" / "gpumon-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used and used <= have, used - have
    titles = [p["title"] for p in dash["panels"]]
    assert titles[0] == "Verdict timeline" and dash["panels"][0]["type"] == "state-timeline"
    rules = (CONTRIB / "prometheus" / "gpumon-rules.yml").read_text()
    used = {n for n in NAME.findall(rules)}
    assert used and used <= have, used - have


def test_cli_over_fake_nvml_unsupported_and_lost_gpu(gpumon_cmd, clean_env):
    """The real NVML path (pynvml over the fake library): an unsupported metric is left out,
    a lost GPU's readings go away and gpumon_gpu_lost says so."""
    import fakenvml_env
    reason = fakenvml_env.skip_reason()
    if reason:
        pytest.skip(reason)
    env = fakenvml_env.env(base=clean_env, gpus=2, unsupported={1: ["power"]}, lost={1: 4.0})
    port = free_port()
    proc = subprocess.Popen(gpumon_cmd + ["export", "--port", str(port), "-q",
                                          "--interval", "0.5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, _, body = wait_for(port, proc)
        power = {lab["gpu"] for lab, _ in samples_of(body, "DCGM_FI_DEV_POWER_USAGE")}
        assert power == {"0"}
        assert {lab["gpu"] for lab, _ in samples_of(body, "DCGM_FI_DEV_SM_CLOCK")} == {"0", "1"}
        info = samples_of(body, "gpumon_info")[0][0]
        assert info["source"] == "nvml"
        uuid = {lab["gpu"]: lab["UUID"] for lab, _ in samples_of(body, "DCGM_FI_DEV_GPU_UTIL")}
        assert uuid["0"].startswith("GPU-") and uuid["0"] != uuid["1"]
        _, _, body = wait_for(port, proc, want='gpumon_gpu_lost{gpu="1"', deadline=1)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            _, _, body = fetch(port)
            lost = {lab["gpu"]: v for lab, v in samples_of(body, "gpumon_gpu_lost")}
            if lost.get("1") == 1:
                break
            time.sleep(0.2)
        assert lost == {"0": 0, "1": 1}, lost
        assert {lab["gpu"] for lab, _ in samples_of(body, "DCGM_FI_DEV_GPU_UTIL")} == {"0"}
        assert samples_of(body, "gpumon_up")[0][1] == 1
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_cli_over_fake_nvml_every_gpu_lost(gpumon_cmd, clean_env):
    """Every GPU lost: the exporter goes on serving, says so once, gpumon_up turns 0 and the
    last verdict is not kept."""
    import fakenvml_env
    reason = fakenvml_env.skip_reason()
    if reason:
        pytest.skip(reason)
    env = fakenvml_env.env(base=clean_env, gpus=2, lost={0: 4.0, 1: 4.0})
    port = free_port()
    proc = subprocess.Popen(gpumon_cmd + ["export", "--port", str(port), "--interval", "0.5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, _, body = wait_for(port, proc, want="gpumon_verdict{", deadline=4)
        assert samples_of(body, "gpumon_up")[0][1] == 1
        _, _, body = wait_for(port, proc, want='gpumon_gpu_lost{gpu="1"', deadline=8)
        end = time.monotonic() + 8
        while time.monotonic() < end:
            _, _, body = fetch(port)
            lost = {lab["gpu"]: v for lab, v in samples_of(body, "gpumon_gpu_lost")}
            if lost == {"0": 1, "1": 1}:
                break
            time.sleep(0.2)
        time.sleep(1.5)                          # a few more polls with no GPU left
        _, _, body = fetch(port)
        assert samples_of(body, "gpumon_up")[0][1] == 0
        assert [lab for lab, v in samples_of(body, "gpumon_verdict") if v == 1] == []
        assert proc.poll() is None               # still serving
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert sum("no GPU is left" in x for x in err.splitlines()) == 1, err
