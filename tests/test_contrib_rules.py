"""The fleet files in contrib/ against the exporter: every verdict gpumon exports has one code in
the recording rule, the Grafana timeline and docs/fleet.md; promtool's unit tests catch the
rules going wrong; the DaemonSet's liveness probe asks a path that fails when sampling stops;
and a real Prometheus loads the rules over what the exporter renders (every verdict, a sync
stall and a hang, a straggler node whose train_job comes from kube-state-metrics).

promtool and prometheus come from Debian's `prometheus` package; without them those tests are
skipped, saying why.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from gpumon.diagnosis import VERDICTS, Diagnosis

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "contrib" / "prometheus" / "gpumon-rules.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "tests" / "gpumon-rules.test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "gpumon-dashboard.json"
DAEMONSET = ROOT / "contrib" / "kubernetes" / "gpumon-daemonset.yaml"
FLEET_DOC = ROOT / "docs" / "fleet.md"


def _tool(name):
    return shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                  else None)


PROMTOOL, PROMETHEUS = _tool("promtool"), _tool("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="no promtool binary "
                                    "(apt-get install prometheus; .ci/run does)")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary "
                                      "(apt-get install prometheus; .ci/run does)")

# `(gpumon_verdict{...verdict="NAME"} == 1) * CODE` in the rule and the dashboard's query.
CODE_TERM = re.compile(r'verdict="([a-z_]+)"\} == 1\) \* (\d+)')
# "1 busy, 2 idle, ..." in the rule's comment and in docs/fleet.md.
CODE_WORDS = re.compile(r"\b(\d+) ([a-z]+(?:_[a-z]+)*)\b")


def load_rules():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(RULES.read_text())


def rule(name):
    for group in load_rules()["groups"]:
        for r in group["rules"]:
            if r.get("record") == name or r.get("alert") == name:
                return r
    raise AssertionError(f"no rule {name} in {RULES}")


def codes_in(expr):
    return {v: int(c) for v, c in CODE_TERM.findall(expr)}


def timeline_panel():
    dash = json.loads(DASHBOARD.read_text())
    panel = dash["panels"][0]
    assert panel["title"] == "Verdict timeline" and panel["type"] == "state-timeline"
    return panel


def timeline_mappings():
    """The dashboard's value mappings: {code: verdict}."""
    (mapping,) = timeline_panel()["fieldConfig"]["defaults"]["mappings"]
    return {int(code): opt["text"] for code, opt in mapping["options"].items()}


def _sentence_with(text, marker):
    """The 400 characters of ``text`` after ``marker``, on one line."""
    at = text.index(marker) + len(marker)
    return " ".join(text[at:at + 400].split())


def rule_codes():
    """{verdict: code} of the recording rule gpumon:verdict_code."""
    return codes_in(rule("gpumon:verdict_code")["expr"])


def test_every_exported_verdict_has_one_code_in_the_rule_and_the_dashboard():
    """The exporter's verdict list (gpumon.diagnosis.VERDICTS, what gpumon_verdict carries)
    is the one list: the recording rule, the dashboard's query and its value mappings give
    each verdict the same code, and codes never repeat."""
    codes = rule_codes()
    assert set(codes) == set(VERDICTS), set(VERDICTS) ^ set(codes)
    assert sorted(codes.values()) == list(range(1, len(VERDICTS) + 1)), codes
    # The six codes recorded before paused existed keep their meaning in stored history.
    assert sorted(codes, key=codes.get)[:6] == [
        "busy", "idle", "data_starvation", "sync_stall", "throttled", "insufficient_data"]
    panel = timeline_panel()
    assert codes_in(panel["targets"][0]["expr"]) == codes
    assert timeline_mappings() == {c: v for v, c in codes.items()}
    assert all(v in panel["description"] for v in VERDICTS), panel["description"]


def codes_said(text, marker):
    """{verdict: code} as "1 busy, 2 idle, ..." says it after ``marker`` in ``text``."""
    words = _sentence_with(text, marker).split(";")[0].split(", for")[0]
    return {v: int(c) for c, v in CODE_WORDS.findall(words) if v in VERDICTS}


def test_the_rules_comment_and_the_docs_say_the_same_codes():
    codes = rule_codes()
    assert codes_said(RULES.read_text(), "One number per node and job for state "
                      "timelines:") == codes
    assert codes_said(FLEET_DOC.read_text(), "`gpumon:verdict_code` (") == codes
    verdict_row = next(ln for ln in FLEET_DOC.read_text().splitlines()
                       if ln.startswith("| `gpumon_verdict` |"))
    assert all(f"`{v}`" in verdict_row for v in VERDICTS), verdict_row


# -- promtool: the rule unit tests pass, and fail on each mistake they are there to catch -------
def promtool_test(rules_text, tmp_path):
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / RULES.name).write_text(rules_text)
    test = tmp_path / "tests" / RULE_TESTS.name
    test.write_text(RULE_TESTS.read_text())
    return subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True,
                          text=True, timeout=120)


def _drop_line(text, needle):
    lines = text.splitlines(keepends=True)
    hits = [i for i, ln in enumerate(lines) if needle in ln]
    assert len(hits) == 1, needle
    return "".join(lines[:hits[0]] + lines[hits[0] + 1:])


def _in_rule(text, name, old, new):
    """``text`` with ``old`` replaced by ``new`` once, within rule ``name``'s entry."""
    at = text.index(name)
    end = text.find("\n      - ", at)
    end = len(text) if end < 0 else end
    assert old in text[at:end], (name, old)
    return text[:at] + text[at:end].replace(old, new, 1) + text[end:]


MISTAKES = {
    # What each fix guards against: the rules before it, one mistake at a time.
    "paused_gap": (lambda t: _drop_line(t, 'verdict="paused"'), "gpumon:verdict_code"),
    "unrelated_jobs_compared": (lambda t: t.replace('{train_job!=""}', ""),
                                "GpumonStragglerNode"),
    "no_sync_stall_alert": (lambda t: _in_rule(t, "alert: GpumonSyncStall", "for: 15m",
                                               "for: 1h"), "GpumonSyncStall"),
    "hang_counted_as_sync_stall": (lambda t: _in_rule(
        t, "alert: GpumonSyncStall", 'cause="hang"', 'cause="nothing"'), "GpumonSyncStall"),
    "no_hang_alert": (lambda t: _in_rule(t, "alert: GpumonHang", 'cause="hang"',
                                         'cause="nothing"'), "GpumonHang"),
    "straggler_unnamed": (lambda t: _in_rule(t, "alert: GpumonSyncStall", "Labels.straggler_gpu",
                                             "Labels.cause"), "GpumonSyncStall"),
    "two_jobs_on_a_node": (lambda t: _in_rule(t, "record: gpumon:node_train_job", "> 1", "> 2"),
                           "gpumon:node_train_job"),
    "finished_pods_count": (lambda t: t.replace('phase="Running"', 'phase=~".+"'),
                            "gpumon:node_train_job"),
}


@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules(tmp_path):
    r = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = promtool_test(RULES.read_text(), tmp_path)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@needs_promtool
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_rule_unit_tests_catch(mistake, tmp_path):
    mutate, named = MISTAKES[mistake]
    broken = mutate(RULES.read_text())
    assert broken != RULES.read_text()
    r = promtool_test(broken, tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and named in out, out


# -- the DaemonSet's probes ------------------------------------------------------------------
def daemonset_container():
    yaml = pytest.importorskip("yaml")
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return container


def probe_status(path, healthy):
    pytest.importorskip("prometheus_client")
    from gpumon.export_http import MetricsServer
    srv = MetricsServer("127.0.0.1", 0, lambda: b"gpumon_up 1\n", lambda: healthy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
    finally:
        srv.shutdown()
        srv.server_close()


def test_liveness_probe_fails_once_the_sampler_stops():
    """The kubelet restarts a pod whose liveness probe fails: the probe must ask the exporter
    something that fails when sampling has stopped (a path answered 200 always restarts
    nothing)."""
    container = daemonset_container()
    live = container["livenessProbe"]["httpGet"]
    assert live["port"] in ("metrics", 9402)
    assert probe_status(live["path"], healthy=True) == 200
    assert probe_status(live["path"], healthy=False) == 503
    ready = container["readinessProbe"]["httpGet"]["path"]
    assert probe_status(ready, healthy=True) == 200


def test_no_advice_to_relabel_the_job_from_gpumons_own_pod():
    """gpumon's pod is gpumon's: its labels never name the training job on the node."""
    texts = {p: p.read_text() for p in (FLEET_DOC, DAEMONSET, RULES)}
    for path, text in texts.items():
        flat = " ".join(text.split())
        assert "relabelling from a pod label" not in flat, path
        assert "from a pod or node label your scheduler writes" not in flat, path
    assert "kube-state-metrics" in " ".join(FLEET_DOC.read_text().split())
    assert "metric-labels-allowlist=pods=[train_job]" in FLEET_DOC.read_text()


# -- a real Prometheus over what the exporter renders ----------------------------------------
KSM_TEXT = """\
kube_pod_labels{namespace="ml",pod="gpt-0",uid="u0",label_train_job="gpt"} 1
kube_pod_labels{namespace="ml",pod="gpt-1",uid="u1",label_train_job="gpt"} 1
kube_pod_labels{namespace="monitoring",pod="gpumon-export-a",uid="u2"} 1
kube_pod_info{namespace="ml",pod="gpt-0",uid="u0",node="k1",host_ip="10.0.0.1"} 1
kube_pod_info{namespace="ml",pod="gpt-1",uid="u1",node="k2",host_ip="10.0.0.2"} 1
kube_pod_info{namespace="monitoring",pod="gpumon-export-a",uid="u2",node="k1"} 1
kube_pod_status_phase{namespace="ml",pod="gpt-0",uid="u0",phase="Running"} 1
kube_pod_status_phase{namespace="ml",pod="gpt-1",uid="u1",phase="Running"} 1
kube_pod_status_phase{namespace="monitoring",pod="gpumon-export-a",uid="u2",phase="Running"} 1
"""
HANG_JOB = "7,8"


def verdict_node_diagnoses():
    """Node v: one job per verdict on GPU i (the sync stall's straggler is its GPU), and a
    hang on GPUs 7,8."""
    out = [Diagnosis(v, gpus=(i,), cause="imbalance" if v == "sync_stall" else None,
                     straggler_gpu=i if v == "sync_stall" else None)
           for i, v in enumerate(VERDICTS)]
    return tuple(out) + (Diagnosis("sync_stall", gpus=(7, 8), cause="hang"),)


def serve_text(text_of):
    """gpumon's own HTTP server on a free loopback port, answering /metrics with text_of()."""
    from gpumon.export_http import MetricsServer
    srv = MetricsServer("127.0.0.1", 0, text_of)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def serve_exporter(hostname, diagnoses):
    """The exporter's rendering of a snapshot holding these verdicts, as a scrape target."""
    from gpumon.export import Snapshot, families, render
    snap = Snapshot(now=10.0, latest={}, tick_time=10.0, ticks=3, diagnoses=diagnoses,
                    source_kind="nvml")
    return serve_text(lambda: render(families(snap, {}, hostname)))


def prometheus_config(gpumon_ports, ksm_port):
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in gpumon_ports)
    return ("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n"
            f"  - job_name: gpumon\n    static_configs:\n      - targets: [{targets}]\n"
            "  - job_name: kube-state-metrics\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{ksm_port}']\n")


def start_prometheus(tmp_path, config):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "prometheus.yml").write_text(config)
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, f"http://127.0.0.1:{port}"


def api(base, path, **params):
    url = f"{base}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read().decode())
    assert body["status"] == "success", body
    return body["data"]


def wait_for(check, proc, deadline_s=60.0):
    """check() until it returns something true (errors while Prometheus starts are retried)."""
    end, last = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        assert proc.poll() is None, f"prometheus exited: {proc.stderr.read()}"
        try:
            got = check()
            if got:
                return got
            last = got
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{check.__doc__}: {last!r}")


@pytest.fixture
def fleet(tmp_path):
    """A real Prometheus with gpumon's rules over three exporter targets (v: every verdict;
    k1, k2: one job at duty 0.97 and 0.50) and a kube-state-metrics stand-in saying both
    nodes run pods of train_job gpt."""
    pytest.importorskip("prometheus_client")
    busy = lambda duty: (Diagnosis("busy", gpus=(0, 1), evidence={  # noqa: E731
        "duty_cycle": duty, "busy_cold_share": 0.0}),)
    servers = [serve_exporter("v", verdict_node_diagnoses()),
               serve_exporter("k1", busy(0.97)), serve_exporter("k2", busy(0.50)),
               serve_text(lambda: KSM_TEXT.encode())]
    proc, base = start_prometheus(tmp_path, prometheus_config(
        [s.port for s in servers[:3]], servers[3].port))
    yield proc, base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _codes_by_job(base):
    """gpumon:verdict_code of node v, by job"""
    got = api(base, "query", query='gpumon:verdict_code{Hostname="v"}')["result"]
    return {r["metric"]["job_gpus"]: int(float(r["value"][1])) for r in got}


@needs_prometheus
def test_real_prometheus_codes_every_verdict_and_the_dashboard_names_it(fleet):
    proc, base = fleet
    codes = rule_codes()
    want = {str(i): codes[v] for i, v in enumerate(VERDICTS)}
    want[HANG_JOB] = codes["sync_stall"]
    assert wait_for(lambda: _codes_by_job(base) == want or None, proc)
    expr = (timeline_panel()["targets"][0]["expr"].replace("$Hostname", "v"))
    got = api(base, "query", query=expr)["result"]
    shown = {r["metric"]["job_gpus"]: timeline_mappings()[int(float(r["value"][1]))]
             for r in got}
    assert shown == {**{str(i): v for i, v in enumerate(VERDICTS)}, HANG_JOB: "sync_stall"}


def _pending(base):
    """the alerts pending, by name"""
    out = {}
    for a in api(base, "alerts")["alerts"]:
        out.setdefault(a["labels"]["alertname"], []).append(a)
    return out if {"GpumonSyncStall", "GpumonHang", "GpumonStragglerNode"} <= set(out) else None


@needs_prometheus
def test_real_prometheus_alerts_on_stall_hang_and_a_straggler_from_kube_state_metrics(fleet):
    proc, base = fleet
    alerts = wait_for(lambda: _pending(base), proc)
    (stall,) = alerts["GpumonSyncStall"]
    sync_job = str(VERDICTS.index("sync_stall"))
    assert stall["labels"]["job_gpus"] == sync_job and stall["state"] == "pending"
    assert stall["annotations"]["summary"] == f"GPUs {sync_job} on v wait for GPU {sync_job}"
    assert "(cause: imbalance)" in stall["annotations"]["description"]
    (hang,) = alerts["GpumonHang"]
    assert hang["labels"]["job_gpus"] == HANG_JOB and hang["labels"]["severity"] == "critical"
    (straggler,) = alerts["GpumonStragglerNode"]
    assert (straggler["labels"]["Hostname"], straggler["labels"]["train_job"]) == ("k2", "gpt")
    got = api(base, "query", query="gpumon:node_train_job")["result"]
    assert sorted((r["metric"]["Hostname"], r["metric"]["train_job"]) for r in got) == [
        ("k1", "gpt"), ("k2", "gpt")]
    # Node v has no train_job from either source: it is never compared with anything.
    got = api(base, "query", query='gpumon:node_duty_cycle:avg{Hostname="v"}')["result"]
    assert all("train_job" not in r["metric"] for r in got), got
