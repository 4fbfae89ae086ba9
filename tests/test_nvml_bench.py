"""The benchmark's call-cost profile (bench/callcost.py) and its NVML call counting
(bench/overhead.py over FAKE_NVML_CALL_LOG). Not the benchmark itself."""
from __future__ import annotations

import os
import sys

import pytest

import fakenvml_env
from bench import callcost, overhead, report
from bench.overhead import Measurement, Subject


def _m(name, setting, cpu, ours=False, calls=None):
    m = Measurement(Subject(name, setting, 8, ("x",), ours=ours))
    m.cpu_pct = list(cpu)
    m.calls = calls or {}
    return m


def test_call_log_readings_give_calls_per_second(tmp_path):
    log = tmp_path / "calls"
    log.write_text("# fakenvml call counts: pid 7 at CLOCK_MONOTONIC 100.000000000 s\n"
                   "nvmlDeviceGetSamples 10\nnvmlDeviceGetSamples(NULL) 4\n")
    first = overhead.call_counts(str(log))
    log.write_text("# fakenvml call counts: pid 7 at CLOCK_MONOTONIC 104.000000000 s\n"
                   "nvmlDeviceGetSamples 50\nnvmlDeviceGetSamples(NULL) 4\n"
                   "nvmlDeviceGetPowerUsage 8\n")
    last = overhead.call_counts(str(log))
    assert first == (100.0, {"nvmlDeviceGetSamples": 10, "nvmlDeviceGetSamples(NULL)": 4})
    rates = overhead.call_rates(first, last)
    assert rates == {"nvmlDeviceGetSamples": 10.0, "nvmlDeviceGetPowerUsage": 2.0}
    assert list(rates) == ["nvmlDeviceGetSamples", "nvmlDeviceGetPowerUsage"]  # busiest first
    assert overhead.call_counts(str(tmp_path / "none")) is None
    assert overhead.call_rates(None, last) == {} and overhead.call_rates(last, last) == {}
    m = _m("gpumon log", "1 s", [1.0], calls={"a": 3.0, "a(NULL)": 1.0, "b": 2.0})
    assert m.calls_per_s == 5.0               # size queries are among their function's calls


def test_targets_and_ratios_compare_each_pair_in_the_same_run():
    ms = [_m("gpustat", "-i 1", [2.0, 2.2]), _m("gpumon log", "1 s", [0.9, 1.1], ours=True),
          _m("gpustat", "-i 0.1", [6.0]), _m("gpumon log", "0.1 s", [3.6], ours=True),
          _m("nvitop screen", "default (2 s)", [3.0])]
    tg = callcost.targets(ms)
    # log 1 s 0.48x, watch not measured; the 0.1 s pair (0.60x) is a ratio, not a target
    assert [t.ok for t in tg] == [True, None]
    assert "0.48x" in tg[0].measured and "gpustat -i 1" in tg[0].what
    assert tg[1].verdict == "not measured" and "nvitop" in tg[1].what
    assert not any("0.1" in t.what for t in tg)
    rs = callcost.ratios(ms)
    assert [round(r.value(), 2) for r in rs] == [0.48, 0.6]
    failed = _m("gpustat", "-i 1", [])
    failed.error = "could not start"
    assert callcost.targets([failed, ms[1]])[0].ok is None


def test_calls_table_lists_the_busiest_functions_of_every_program():
    ms = [_m("gpumon log", "1 s", [1], ours=True, calls={"GetSamples": 8.0, "GetPower": 8.0}),
          _m("gpustat", "-i 1", [2], calls={"GetProcs": 16.0, "GetProcs(NULL)": 8.0})]
    lines = callcost.calls_table(ms)
    assert lines[0] == "| NVML function | gpumon log 1 s | gpustat -i 1 |"
    body = "\n".join(lines)
    assert "| `GetProcs` |  | 16 |" in body and "| `GetSamples` | 8.0 |  |" in body
    assert lines[-1] == "| **all calls** | 16 | 16 |"
    assert callcost.calls_table([_m("x", "y", [1])]) == []


def test_calls_table_always_shows_the_gpm_calls():
    busy = {f"Call{i}": 100.0 - i for i in range(callcost.TOP_CALLS)}
    ms = [_m("gpumon log", "1 s", [1], ours=True,
             calls={**busy, "nvmlGpmSampleGet": 8.0, "nvmlGpmMetricsGet": 8.0})]
    body = "\n".join(callcost.calls_table(ms))
    assert "| `nvmlGpmSampleGet` | 8.0 |" in body and "| `nvmlGpmMetricsGet` | 8.0 |" in body
    assert "| `Call0` | 100 |" in body


def test_subjects_cover_the_issue_pairs_with_costs(tmp_path):
    subs = callcost.subjects(sys.executable, str(tmp_path), "7")
    got = {(s.name, s.setting) for s in subs}
    for ours, peer in callcost.PAIRS:
        assert ours in got and peer in got
    assert all(s.costs == "7" and s.gpus == 8 for s in subs)
    assert {s.name for s in subs if s.ours} == {"gpumon log", "gpumon watch"}
    env = callcost.environment({"A": "1"}, "7", "/x")
    assert env == {"A": "1", "FAKE_NVML_CALL_US": "7", "FAKE_NVML_CALL_LOG": "/x"}
    # gpumon log once more with GPM hidden: the difference is what GPM costs
    assert ("gpumon log", callcost.NO_GPM) in got
    hidden = callcost.environment({"FAKE_NVML_UNSUPPORTED": "1:temp"}, "7", "/x", True)
    assert hidden["FAKE_NVML_UNSUPPORTED"] == "1:temp,gpm"
    assert callcost.environment({}, "7", "/x", True)["FAKE_NVML_UNSUPPORTED"] == "gpm"


@pytest.mark.skipif(fakenvml_env.skip_reason() is not None, reason="fake NVML library")
def test_measure_counts_a_programs_nvml_calls(monkeypatch, tmp_path):
    monkeypatch.setattr(overhead, "WARMUP_MIN_S", 0.3)
    script = tmp_path / "poll.py"
    # 50 power readings a second, one process-list query (size, then fill) every 0.1 s
    script.write_text("import time, pynvml as N\nN.nvmlInit()\n"
                      "h = N.nvmlDeviceGetHandleByIndex(0)\nwhile True:\n"
                      "    for _ in range(5):\n        N.nvmlDeviceGetPowerUsage(h)\n"
                      "    N.nvmlDeviceGetComputeRunningProcesses(h)\n    time.sleep(0.1)\n")
    s = Subject("poll", "", 1, (sys.executable, str(script)), costs="1")
    env = callcost.environment(fakenvml_env.env(gpus=1, pids={0: [os.getpid()]}), s.costs,
                               str(tmp_path / "calls"))
    m = overhead.measure(s, env, str(tmp_path), window_s=2.5, repeats=1)
    assert m.error is None
    power = m.calls["nvmlDeviceGetPowerUsage"]
    procs = m.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    assert 20 < power < 55, m.calls              # below 50 a second when the machine is busy
    assert procs == pytest.approx(2 * m.calls["nvmlDeviceGetComputeRunningProcesses_v3(NULL)"],
                                  rel=0.25)
    assert report.pct(m.calls_per_s)
