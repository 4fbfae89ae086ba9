"""gpumon's own JSON-lines log (`gpumon log --format jsonl`) read by `analyze`, `analyze_log()`
and `watch --replay` as the CSV log of the same run is read, host and job columns included."""
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import gpumon
from gpumon.analyze import analyze_file
from gpumon.csvlog import CsvSink
from gpumon.jsonlog import JsonlSink
from gpumon.logs import read_log
from gpumon.logs.log import HOST_COLUMNS, JOB_COLUMNS, SAMPLE_COLUMNS
from gpumon.replay import ReplaySource
from gpumon.sim import simulate
from samples_util import tick


def nvml_shaped(t):
    """A simulated tick as NVML gives one: a GPU's samples of a poll share every reading but
    their time and utilization (the GPU's latest)."""
    last = {s.gpu: s for s in t.gpus}
    return dataclasses.replace(t, gpus=tuple(
        dataclasses.replace(last[s.gpu], time=s.time, util_gpu_pct=s.util_gpu_pct)
        for s in t.gpus))


def both(tmp_path, ticks, name="run"):
    """The same ticks through both writers: (CSV path, JSON-lines path)."""
    c, j = tmp_path / f"{name}.csv", tmp_path / f"{name}.jsonl"
    csv_sink, jsonl_sink = CsvSink(str(c)), JsonlSink(str(j), source="sim")
    for t in ticks:
        csv_sink.write(t, [])
        jsonl_sink.write(t, [])
    csv_sink.close()
    jsonl_sink.close()
    return str(c), str(j)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return both(tmp_path_factory.mktemp("demo"),
                (nvml_shaped(t) for t in simulate("demo", seconds=320, seed=0)))


def _order(log):
    return np.lexsort((log.samples.time, log.samples.gpu))


def test_the_demo_reads_as_its_csv_samples_jobs_and_host(demo):
    a, b = read_log(demo[0]), read_log(demo[1])
    assert (a.kind, b.kind) == ("gpumon", "gpumon-jsonl")
    assert b.malformed.count == 0 and len(b.samples.time) == len(a.samples.time) == 7680
    ia, ib = _order(a), _order(b)
    for cols, names in ((lambda x: x.samples, SAMPLE_COLUMNS), (lambda x: x.jobs, JOB_COLUMNS),
                        (lambda x: x.host, HOST_COLUMNS)):
        for n in names:
            x, y = getattr(cols(a), n)[ia], getattr(cols(b), n)[ib]
            if n == "power":      # (the JSON line keeps 3 decimals, the CSV cell none)
                assert np.nanmax(np.abs(x - y)) <= 1.0, n
            else:
                assert np.array_equal(x, y, equal_nan=True), n
    assert a.pids == b.pids and a.sources == b.sources == ("sim",)


def test_the_demo_gets_the_verdicts_of_its_csv(demo):
    _, ta = analyze_file(demo[0])
    log, tb = analyze_file(demo[1])
    seg = [(d.start, d.end, d.verdict, d.cause, d.straggler_gpu) for d in ta.segments]
    assert seg == [(d.start, d.end, d.verdict, d.cause, d.straggler_gpu) for d in tb.segments]
    assert {"data_starvation", "sync_stall", "throttled"} <= {s[2] for s in seg}
    assert any("spread evenly" in n for n in log.notes)


def test_analyze_and_analyze_log_read_it(demo, clean_env):
    r = subprocess.run([sys.executable, "-m", "gpumon", "analyze", demo[1]],
                       capture_output=True, text=True, timeout=120, env=clean_env)
    assert r.returncode == 0, r.stderr
    assert "gpumon-jsonl log" in r.stdout and "data_starvation" in r.stdout
    report = gpumon.analyze_log(demo[1])
    assert report.kind == "gpumon-jsonl"
    assert [s.verdict for s in report.segments] == [
        s.verdict for s in gpumon.analyze_log(demo[0]).segments]


def test_replay_plays_the_ticks_of_its_csv(demo):
    def played(path):
        src = ReplaySource(path, speed=1e9)
        out = []
        while not src.done:
            t = src.read()
            out.append((t.time, [(s.time, s.gpu, s.util_gpu_pct, s.source) for s in t.gpus],
                        [(j.gpu, j.loader_cpu_pct) for j in t.host.jobs], t.host.cpu_pct))
        return out, [i.index for i in src.gpu_infos()], src.bad.count
    assert played(demo[1]) == played(demo[0])


def test_host_counters_reach_the_verdict(tmp_path):
    """Without host columns a starved job's cause would be the input pipeline; with them
    the log says the loader workers are CPU-bound."""
    path = both(tmp_path, (nvml_shaped(t) for t in simulate("data_starvation", gpus=2,
                                                           seconds=180, seed=1)))[1]
    log, tl = analyze_file(path)
    assert log.jobs is not None and np.isfinite(log.jobs.loader_cpu).any()
    assert ("data_starvation", "cpu_preprocessing") in [(d.verdict, d.cause)
                                                       for d in tl.segments]


def test_a_polls_samples_spread_over_the_poll_and_a_pause_is_not_a_poll(tmp_path):
    ticks = [tick(1000.0 + k) for k in range(5)] + [tick(5000.0 + k) for k in range(3)]
    path = both(tmp_path, ticks)[1]
    log = read_log(path)
    t = np.sort(log.samples.time[log.samples.gpu == 0])
    first = t[:6]
    assert np.allclose(first, 999.0 + np.arange(1, 7) / 6, atol=1e-3)   # a first line too
    after = t[30:36]                                  # the first poll after the pause
    assert np.allclose(after, 4999.0 + np.arange(1, 7) / 6, atol=1e-3)


def test_malformed_lines_are_counted_and_the_rest_read(tmp_path, clean_env):
    path = both(tmp_path, [tick(1000.0 + k) for k in range(20)])[1]
    lines = open(path).read().splitlines()
    obj = json.loads(lines[4])
    obj["gpus"][0]["gpu"] = "zero"
    lines[4] = json.dumps(obj)                        # a GPU without its index
    lines[7] = "garbage"
    obj = json.loads(lines[9])
    obj["gpus"][1]["power_w"] = "a lot"               # a reading that is no number
    lines[9] = json.dumps(obj)
    lines[-1] = lines[-1][:40]                        # a last write cut short
    with open(path, "w") as f:
        f.write("\n".join(lines))
    log = read_log(path)
    assert log.malformed.first_line == 5
    # Lines 5, 8 and 20 whole; line 10's GPU 1 is six rows of the CSV it becomes.
    assert log.malformed.count == 3 + 6
    assert len(log.samples.time) == (20 - 3) * 12 - 6
    r = subprocess.run([sys.executable, "-m", "gpumon", "analyze", path],
                       capture_output=True, text=True, timeout=60, env=clean_env)
    assert "Traceback" not in r.stderr and "malformed" in r.stdout + r.stderr


@pytest.mark.parametrize("text", ['{"time": 1, "gpus": "none"}\n', "{\n", '{"a": 1}\n',
                                  '{"time": 1700000000.1, "gpu_util": 42, "power": 65}\n'])
def test_a_json_file_that_is_no_gpumon_log_is_a_one_line_error(tmp_path, clean_env, text):
    path = tmp_path / "x.jsonl"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-m", "gpumon", "analyze", str(path)],
                       capture_output=True, text=True, timeout=60, env=clean_env)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(path) in r.stderr
    assert "none is a poll of gpumon log --format jsonl" in r.stderr
    with pytest.raises(gpumon.errors.UserError, match="none is a poll"):
        ReplaySource(str(path))
