"""The gpumon column in the real hosts: Debian's /usr/bin/dstat (on the system python, which
cannot import gpumon or nvidia-ml-py) and pip's dool, over the fake NVML library.

Every case gets a clean HOME where `gpumon plugin install` ran, then runs the host as a user
would and reads its real output. The cases run a few at a time, so the file takes about
half a minute rather than the sum of them.
"""
import csv
import ctypes.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import fakenvml_env

ROOT = Path(__file__).resolve().parent.parent
DSTAT = "/usr/bin/dstat"
SYSTEM_PYTHON = "/usr/bin/python3"
DOOL = shutil.which("dool") or str(Path(sys.executable).parent / "dool")
HOSTS = {"dstat": DSTAT, "dool": DOOL}
STATES = {"busy", "idle", "paus", "data", "sync", "thrm", "----", "lost"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SEPARATORS = re.compile(r"[|:\u250a\u2502]")     # ascii and dool's unicode frame characters
MISSED = re.compile(r"missed \d+ ticks")
PARALLEL = 6
REAL_DRIVER = ctypes.util.find_library("nvidia-ml") is not None
TAG = "gpumon-test-" + uuid.uuid4().hex           # marks every process these tests start
SCENARIOS = ("data_starvation", "sync_stall")
ROTATE = {"data_starvation"}     # scenarios whose trace has busy stretches (see starving_second)


@dataclass
class Case:
    host: str
    args: list
    fake: dict | None = field(default_factory=lambda: {"gpus": 2})   # None: no driver at all
    env: dict = field(default_factory=dict)
    python: str | None = None          # replace the recorded interpreter with this path


def _cases():
    cases = {}
    for host in HOSTS:
        cases[(host, "one")] = Case(host, ["--gpumon", "1", "3"], {"gpus": 1})
        cases[(host, "two")] = Case(host, ["--gpumon", "1", "3"])
        cases[(host, "full")] = Case(host, ["-f", "--gpumon", "1", "3"])
        cases[(host, "csv")] = Case(host, ["--gpumon", "--output", "{home}/out.csv", "1", "3"])
        cases[(host, "zero")] = Case(host, ["-c", "--gpumon", "1", "2"], {"gpus": 0})
        cases[(host, "nodriver")] = Case(host, ["--gpumon", "1", "2"], None)
        cases[(host, "death")] = Case(host, ["--gpumon", "1", "4"], python="{home}/fakepython")
        for scenario in SCENARIOS:
            cases[(host, scenario)] = Case(host, ["--gpumon", "1", "10"],
                                           {"scenario": scenario, "gpus": 2})
    cases[("dool", "hang")] = Case("dool", ["--gpumon", "1", "9"], python="{home}/hungpython")
    cases[("dstat", "sim")] = Case("dstat", ["--gpumon", "1", "3"], None,
                                   {"GPUMON_PLUGIN_SIM": "sync_stall:2"})
    cases[("dstat", "select")] = Case("dstat", ["-f", "--gpumon", "1", "2"], {"gpus": 2},
                                      {"GPUMON_PLUGIN_GPUS": "1"})
    cases[("dool", "lost")] = Case("dool", ["-f", "--gpumon", "1", "6"],
                                   {"gpus": 2, "lost": {1: 2.0}})
    cases[("dstat", "nopython")] = Case("dstat", ["--gpumon", "1", "2"],
                                        python="/nonexistent/python3")
    return cases


CASES = _cases()


@dataclass
class Result:
    rc: int
    out: str
    err: str
    csv: str | None
    home: Path
    install: str


def _base_env(home: Path) -> dict:
    drop = ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("FAKE_NVML", "XDG_", "GPUMON_"))}
    env.update(HOME=str(home), TERM="dumb", GPUMON_TEST_TAG=TAG)
    return env


# A stand-in for gpumon's interpreter: one reading, then the stream dies.
FAKE_PYTHON = """#!/bin/sh
echo '{"type":"hello","protocol":1,"source":"nvml","interval":1,"gpus":[{"gpu":0,"name":"x"}]}'
echo '{"type":"tick","time":1,"verdict":"busy","state":"busy","gpus":[{"gpu":0,"util":42.0,"mem":7.0,"verdict":"busy","state":"busy","lost":false}]}'
sleep 1.5
echo 'boom: the stream broke'
exit 3
"""


def starving_second(trace: Path, window_s: int = 30) -> int:
    """The second of the trace where the most of the next `window_s` seconds have every GPU
    waiting some of the time (each GPU's mean utilization that second under 90%): the
    simulated ranks take turns spinning in the all-reduce, and the test must not land in a
    stretch where one rank looks busy throughout."""
    util: dict[tuple[int, int], list[float]] = {}
    for line in trace.read_text().splitlines():
        f = line.split("\t")
        if f[0] == "S":
            util.setdefault((int(f[1]) // 1_000_000, int(f[2])), []).append(float(f[3]))
    seconds = sorted({sec for sec, _gpu in util})
    low = [all(sum(v) / len(v) < 90 for (sec, _g), v in util.items() if sec == s)
           for s in seconds]
    scores = [sum(low[s:s + window_s]) for s in range(max(1, len(low) - window_s))]
    return scores.index(max(scores))


def rotate_trace(src: Path, dst: Path, second: int, at: float) -> None:
    """Write `src` shifted in time so that the fake library, which plays position
    (wall-clock mod duration), plays `src`'s `second` at wall-clock time `at`."""
    lines = src.read_text().splitlines()
    head = [line for line in lines if not line.startswith("S\t")]
    _h, _magic, _ver, _n, period, duration = next(
        line for line in head if line.startswith("H\t")).split("\t")[:6]
    period, duration = int(period), int(duration)
    shift = (int(at * 1e6) - second * 1_000_000) % duration
    shift -= shift % period                       # stay on the driver's sample grid
    rows = [line.split("\t") for line in lines if line.startswith("S\t")]
    # The samples from the cut on come first now: their energy counter (field 12, which the
    # library wants never to decrease) restarts from the cut, the others continue after them.
    cut = duration - shift
    before = {f[2]: int(f[12]) for f in rows if int(f[1]) < cut}      # last value before it
    after = {f[2]: int(f[12]) for f in rows if int(f[1]) >= cut}       # last value of all
    for f in rows:
        t, gpu, energy = int(f[1]), f[2], int(f[12])
        if t >= cut:
            f[12] = str(energy - before.get(gpu, 0))
        else:
            f[12] = str(energy + after.get(gpu, 0) - before.get(gpu, 0))
        f[1] = str((t + shift) % duration)
    rows.sort(key=lambda f: (int(f[1]), int(f[2])))
    dst.write_text("\n".join(head + ["\t".join(f) for f in rows]) + "\n")


# The rotated trace reaches its starving stretch this many seconds before the host starts, so
# the driver's sample history that gpumon reads first already holds some of it.
LEAD_S = 8.0


# ... and one that gives one reading, then hangs (a driver call that never returns).
HUNG_PYTHON = FAKE_PYTHON.replace("sleep 1.5\necho 'boom: the stream broke'\nexit 3",
                                  "exec sleep 60")


def _run(case: Case, home: Path, trace_dir: Path | None) -> Result:
    home.mkdir(parents=True)
    env = _base_env(home)
    inst = subprocess.run([sys.executable, "-m", "gpumon", "plugin", "install"],
                          env={**env, "PYTHONPATH": str(ROOT)}, cwd=home, capture_output=True,
                          text=True, timeout=60)
    if inst.returncode != 0:
        return Result(inst.returncode, "", inst.stderr, None, home, inst.stdout)
    if case.python:
        python = case.python.format(home=home)
        if python.startswith(str(home)):
            Path(python).write_text(HUNG_PYTHON if "hung" in python else FAKE_PYTHON)
            Path(python).chmod(0o755)
        cfg = home / ".config" / "gpumon" / "plugin.json"
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "python": python}))
    if case.fake is not None:
        settings = dict(case.fake)
        if settings.get("scenario") in ROTATE:
            name = settings.pop("scenario")
            src = trace_dir / f"{name}.trace"
            rotated = home / f"{name}.trace"
            rotate_trace(src, rotated, starving_second(src), time.time() - LEAD_S)
            settings["scenario"] = rotated
        elif "scenario" in settings:
            settings["trace_dir"] = trace_dir
        env = fakenvml_env.env(base=env, **settings)
    env.update(case.env)
    args = [a.format(home=home) for a in case.args]
    r = subprocess.run([HOSTS[case.host]] + args, env=env, cwd=home, capture_output=True,
                       text=True, timeout=120)
    out_csv = home / "out.csv"
    return Result(r.returncode, r.stdout, r.stderr,
                  out_csv.read_text() if out_csv.exists() else None, home, inst.stdout)


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    """Trace files of the scenarios, from the simulator; None where it cannot write them."""
    out = tmp_path_factory.mktemp("traces")
    for name in SCENARIOS:
        r = subprocess.run([sys.executable, "-m", "gpumon.sim.trace", "--scenario", name,
                            "--gpus", "2", "--out", str(out / f"{name}.trace")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return None
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory, trace_dir):
    """Every case, run a few at a time; a case whose host or inputs are missing is absent."""
    reason = fakenvml_env.skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("homes")
    todo = {}
    for key, case in CASES.items():
        if not os.access(HOSTS[case.host], os.X_OK):
            continue
        if case.fake and "scenario" in case.fake and trace_dir is None:
            continue
        todo[key] = case
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {key: pool.submit(_run, case, root / "-".join(key), trace_dir)
                   for key, case in todo.items()}
        return {key: f.result() for key, f in futures.items()}


def result(results, host, name) -> Result:
    if (host, name) not in results:
        what = HOSTS[host] if not os.access(HOSTS[host], os.X_OK) else "the scenario traces"
        pytest.skip(f"{what} not available")
    r = results[(host, name)]
    assert "recorded" in r.install, r.err
    return r


def rows(text: str, ncells: int) -> list[list[str]]:
    """The last `ncells` cells of every data row (titles and subtitles left out)."""
    out = []
    for line in ANSI.sub("", text).splitlines():
        if not line.strip() or re.search(r"gpu|util|usr", line):
            continue
        cells = SEPARATORS.sub(" ", MISSED.sub("", line)).split()
        if len(cells) >= ncells:
            out.append(cells[-ncells:])
    return out


def check_cells(row: list[str]) -> None:
    for k in range(0, len(row), 3):
        util, mem, state = row[k:k + 3]
        for value in (util, mem):
            assert value == "-" or (value.isdigit() and 0 <= int(value) <= 100), row
        assert state in STATES, row


def titles(text: str) -> str:
    return "\n".join(line for line in ANSI.sub("", text).splitlines() if "gpu" in line)


def load_reasons(err: str) -> list[str]:
    """The host's "failed to load (reason)" lines about the gpumon module."""
    return re.findall(r"gpumon\S* failed to load\.? \((.*)\)", ANSI.sub("", err))


# -- the hosts' own interpreter ------------------------------------------------------------
@pytest.mark.skipif(not os.access(DSTAT, os.X_OK), reason="Debian's dstat is not installed")
def test_dstat_runs_on_a_python_without_gpumon_or_nvml():
    with open(DSTAT) as f:
        assert f.readline().strip() in ("#!/usr/bin/python3", "#! /usr/bin/python3")
    env = _base_env(Path("/"))
    for module in ("pynvml", "gpumon"):
        r = subprocess.run([SYSTEM_PYTHON, "-c", f"import {module}"], env=env, cwd="/",
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, module


# -- readings ------------------------------------------------------------------------------
@pytest.mark.parametrize("host", HOSTS)
def test_compact_column_over_two_gpus(results, host):
    r = result(results, host, "two")
    assert r.rc == 0, r.err
    assert "gpumon 2 gpus" in titles(r.out).replace("-", " ").replace("\u2504", " ")
    got = rows(r.out, 3)
    assert len(got) == 3, r.out
    for row in got:
        check_cells(row)
    assert any(row[0] not in ("-", "0") for row in got), got   # the fake GPUs are working
    assert not load_reasons(r.err) and "Traceback" not in r.err


@pytest.mark.parametrize("host", HOSTS)
def test_compact_column_over_one_gpu(results, host):
    r = result(results, host, "one")
    assert r.rc == 0, r.err
    head = titles(r.out)
    assert "gpumon" in head and "gpus" not in head
    got = rows(r.out, 3)
    assert len(got) == 3 and all(row[0] != "-" for row in got), r.out
    for row in got:
        check_cells(row)


@pytest.mark.parametrize("host", HOSTS)
def test_full_column_shows_every_gpu(results, host):
    r = result(results, host, "full")
    assert r.rc == 0, r.err
    head = titles(r.out)
    assert "gpu0" in head and "gpu1" in head
    got = rows(r.out, 6)
    assert len(got) == 3, r.out
    for row in got:
        check_cells(row)
        assert row[0] != "-" and row[3] != "-"


@pytest.mark.parametrize("host", HOSTS)
def test_csv_output_has_the_columns(results, host):
    r = result(results, host, "csv")
    assert r.rc == 0, r.err
    assert "Traceback" not in r.err and r.csv is not None
    table = list(csv.reader(io.StringIO(r.csv)))
    (head,) = [i for i, row in enumerate(table) if row[-3:] == ["util", "mem", "stat"]]
    assert "gpumon 2 gpus" in table[head - 1]
    data = [row for row in table[head + 1:] if row]
    assert len(data) == 3, r.csv
    for row in data:
        util, mem, state = row[-3:]
        for value in (util, mem):
            assert value == "" or 0.0 <= float(value) <= 100.0
        assert state in STATES
    assert any(row[-3] not in ("", "0.0") for row in data)


# -- reasons, and a host that keeps running -------------------------------------------------
@pytest.mark.parametrize("host", HOSTS)
def test_zero_gpus_is_a_reason_and_the_host_goes_on(results, host):
    r = result(results, host, "zero")
    assert load_reasons(r.err) == ["no NVIDIA GPU found (NVML lists none)"], r.err
    assert r.rc == 0 and len(rows(r.out, 5)) == 2, r.out        # the cpu column, 2 rows
    assert "Traceback" not in r.err


@pytest.mark.skipif(REAL_DRIVER, reason="this machine has a real NVIDIA driver")
@pytest.mark.parametrize("host", HOSTS)
def test_no_driver_is_one_clear_reason(results, host):
    r = result(results, host, "nodriver")
    assert load_reasons(r.err) == ["no NVIDIA driver: libnvidia-ml.so.1 not found"], r.err
    assert len([line for line in r.err.splitlines() if "gpumon" in line]) == 1
    assert "Traceback" not in r.err


def test_missing_interpreter_is_a_reason(results):
    r = result(results, "dstat", "nopython")
    assert load_reasons(r.err) == ["gpumon's Python /nonexistent/python3 is missing: run "
                                   "`gpumon plugin install` again"], r.err


@pytest.mark.parametrize("host", HOSTS)
def test_a_dying_stream_shows_dashes_and_the_host_goes_on(results, host):
    r = result(results, host, "death")
    assert r.rc == 0, r.err
    got = rows(r.out, 3)
    assert len(got) == 4, r.out
    assert got[0] == ["42", "7", "busy"]
    assert got[-1] == ["-", "-", "----"]
    assert "boom: the stream broke" in r.err and "Traceback" not in r.err


def test_a_hung_stream_shows_dashes_not_old_numbers(results):
    r = result(results, "dool", "hang")
    assert r.rc == 0, r.err
    got = rows(r.out, 3)
    assert len(got) == 9, r.out
    assert got[0] == ["42", "7", "busy"]        # fresh
    assert got[-1] == ["-", "-", "----"]        # 8 s later: stale, shown as missing
    assert "Traceback" not in r.err


def test_simulated_gpus_are_titled_as_such(results):
    r = result(results, "dstat", "sim")
    assert r.rc == 0, r.err
    assert "sim 2 gpus" in titles(r.out).replace("-", " ")
    got = rows(r.out, 3)
    assert len(got) == 3
    for row in got:
        check_cells(row)


def test_gpu_selection_passes_to_gpumon(results):
    r = result(results, "dstat", "select")
    assert r.rc == 0, r.err
    head = titles(r.out)
    assert "gpu1" in head and "gpu0" not in head
    got = rows(r.out, 3)
    assert len(got) == 2 and all(row[0] != "-" for row in got), r.out


def test_a_lost_gpu_shows_dashes_and_the_host_goes_on(results):
    r = result(results, "dool", "lost")
    assert r.rc == 0, r.err
    got = rows(r.out, 6)
    assert len(got) == 6, r.out
    assert got[0][3] != "-"                       # GPU 1 works at first ...
    assert got[-1][3:] == ["-", "-", "lost"]      # ... then falls off the bus
    assert got[-1][0] != "-"                      # GPU 0 goes on
    assert "Traceback" not in r.err


# -- verdicts from gpumon's detector --------------------------------------------------------
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("scenario, state", [("data_starvation", "data"),
                                             ("sync_stall", "sync")])
def test_state_column_names_the_scenario(results, host, scenario, state):
    r = result(results, host, scenario)
    assert r.rc == 0, r.err
    states = [row[2] for row in rows(r.out, 3)]
    assert len(states) == 10, r.out
    assert state in states, states


def test_no_stream_outlives_its_host(results):
    """Every child the plugin started has ended with its host (checked by the test's tag)."""
    deadline = time.monotonic() + 5
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if TAG.encode() in (entry / "environ").read_bytes():
                    alive.append(entry.name)
            except OSError:
                continue
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive, f"processes still running: {alive}"
