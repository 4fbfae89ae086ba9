"""The public Python API (README "Python API"), through the names in gpumon.__all__ only."""
import datetime as dt
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpumon

DATA = Path(__file__).resolve().parent / "data" / "analyze"
LOGS = ("gpumon.csv", "nvsmi_starved.csv", "nvsmi_nounits.csv", "dmon.log", "plain.csv")


def run_py(code: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_all_names_resolve_and_import_stays_light(clean_env):
    for name in gpumon.__all__:
        assert getattr(gpumon, name) is not None, name
    with pytest.raises(AttributeError):
        gpumon.no_such_name
    r = run_py("import sys, gpumon; print(sorted(m for m in ('numpy', 'gpumon.api', 'rich') "
               "if m in sys.modules))", clean_env)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.parametrize("name", LOGS)
def test_analyze_log_matches_the_analyze_command(name, gpumon_cmd, clean_env):
    report = gpumon.analyze_log(str(DATA / name))
    cli = subprocess.run(gpumon_cmd + ["analyze", "--format", "json", str(DATA / name)],
                         env=clean_env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    want = json.loads(cli.stdout)
    assert json.loads(json.dumps(report.to_dict())) == want
    assert isinstance(report.summary, gpumon.Summary)
    assert report.summary.verdict == want["summary"]["verdict"]
    assert report.summary.gpus == tuple(want["summary"]["gpus"])
    assert [d.verdict for d in report.segments] == [s["verdict"] for s in want["segments"]]
    assert all(isinstance(d, gpumon.Diagnosis) for d in report.segments)
    # (Segments are on whole-second bins.)
    assert report.start - 1 <= report.segments[0].start < report.segments[-1].end
    assert report.segments[-1].end <= report.end + 1
    assert report.source.endswith(name) and report.kind in ("gpumon", "nvidia-smi", "dmon",
                                                             "plain")
    assert report.text().splitlines()[0].startswith(report.source)


def test_analyze_log_bad_file_is_a_one_line_error(tmp_path):
    with pytest.raises(gpumon.UserError) as e:
        gpumon.analyze_log(str(tmp_path / "missing.csv"))
    assert "missing.csv" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(gpumon.UserError, match="empty, nothing to analyse"):
        gpumon.analyze_log(str(DATA / "empty.csv"))


def pattern(kind: str, seconds: int = 90, gpus: int = 2, rate: int = 6) -> dict:
    """Samples of ``gpus`` GPUs: "busy" at 100 % and high power, "starved" in 0.5 s bursts
    with 0.5 s gaps at zero."""
    t = np.repeat(np.arange(seconds * rate) / rate + 1.7e9, gpus)
    g = np.tile(np.arange(gpus), seconds * rate)
    on = np.ones(len(t), bool) if kind == "busy" else (np.floor(t * 2) % 2 == 0)
    return {"time": t, "gpu": g, "util": np.where(on, 100.0, 0.0),
            "power": np.where(on, 380.0, 80.0), "power_limit": np.full(len(t), 400.0)}


def test_diagnose_arrays_tells_busy_from_starved():
    busy = gpumon.diagnose(**pattern("busy"))
    starved = gpumon.diagnose(**pattern("starved"))
    assert busy.summary.verdict == "busy" and busy.summary.gpus == (0, 1)
    assert starved.summary.verdict == "data_starvation", starved.text()
    assert busy.kind == starved.kind == "data" and busy.malformed == 0


def test_diagnose_takes_a_dataframe_and_a_dict_the_same_way():
    pd = pytest.importorskip("pandas")
    cols = pattern("starved")
    frame = pd.DataFrame(cols)
    frame["time"] = pd.to_datetime(frame["time"], unit="s")     # datetimes work too
    frame["comment"] = "ignored"                                # unknown columns are ignored
    a, b = gpumon.diagnose(frame), gpumon.diagnose(cols)
    assert a.to_dict()["segments"] == b.to_dict()["segments"]
    assert a.summary == b.summary


def test_diagnose_skips_rows_out_of_range_and_counts_them():
    cols = pattern("busy")
    cols["util"] = cols["util"].copy()
    cols["util"][:5] = 1e308
    cols["gpu"] = cols["gpu"].astype(float)
    cols["gpu"][5] = -1
    r = gpumon.diagnose(cols)
    assert r.malformed == 6 and r.summary.verdict == "busy"


@pytest.mark.parametrize("kw, err, text", [
    ({"time": [1, 2]}, ValueError, "needs a 'util' column"),
    ({"time": [1, 2], "util": [1]}, ValueError, "different lengths"),
    ({"time": [1, 2], "util": ["a", "b"]}, ValueError, "column 'util'"),
    ({"time": [1, 2], "util": [1, 2], "utl": [1, 2]}, TypeError, "unknown column"),
    ({"time": [1, 2], "util": [np.nan, np.nan]}, ValueError, "no usable samples"),
])
def test_diagnose_bad_input_is_one_clear_error(kw, err, text):
    with pytest.raises(err, match=text) as e:
        gpumon.diagnose(**kw)
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="DataFrame or a dict"):
        gpumon.diagnose([1, 2, 3])


@pytest.mark.parametrize("scenario", ["data_starvation", "sync_stall", "busy"])
def test_monitor_on_simulated_gpus_gives_the_scenario_verdict(scenario):
    with gpumon.Monitor(interval=1, sim=scenario, speed=40) as m:
        assert m.wait(45, timeout=120)
    assert m.verdict == scenario
    assert all(isinstance(d, gpumon.Diagnosis) for d in m.diagnoses)
    rows = m.history(frame=False)
    assert rows and {"time", "gpu", "util_gpu_pct", "power_w", "verdict"} <= set(rows[0])
    assert {r["source"] for r in rows} == {"sim"}
    assert rows[-1]["verdict"] == scenario
    assert all(a["time"] <= b["time"] for a, b in zip(rows[::2], rows[2::2]))
    # The history goes straight back into diagnose().
    cols = {k: [r[k] for r in rows] for k in ("time", "gpu", "util_gpu_pct", "power_w",
                                               "power_limit_w", "sm_clock_mhz")}
    assert gpumon.diagnose(cols).summary.verdict == scenario


def test_monitor_history_as_a_dataframe_and_a_bounded_list():
    pd = pytest.importorskip("pandas")
    with gpumon.Monitor(interval=0.5, sim="busy:3", speed=20, max_rows=50) as m:
        assert m.wait(20, timeout=60)
    frame = m.history()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 50
    assert sorted(frame["gpu"].unique()) == [0, 1, 2] and m.ticks >= 20


@pytest.mark.parametrize("kw, text", [
    ({"interval": 0}, "interval must be"), ({"interval": "1"}, "interval must be"),
    ({"speed": 10}, "speed needs sim="), ({"sim": "busy", "speed": -1}, "positive"),
])
def test_monitor_bad_arguments(kw, text):
    with pytest.raises(ValueError, match=text):
        gpumon.Monitor(**kw)


def test_monitor_unknown_scenario_and_no_driver_are_clear(clean_env):
    with pytest.raises(gpumon.UserError, match="unknown sim scenario 'nosuch'"):
        gpumon.Monitor(sim="nosuch").start()
    code = """
        import gpumon
        try:
            gpumon.Monitor().start()
        except Exception as e:
            print(type(e).__name__, e)
    """
    env = dict(clean_env, LD_LIBRARY_PATH="/nonexistent")
    r = run_py(code, env)
    if "no NVIDIA driver" not in r.stdout:
        pytest.skip("this machine has an NVIDIA driver: " + r.stdout.strip())
    assert r.stdout.startswith("NoDriverError") and r.returncode == 0


def test_monitor_samples_nvml_through_the_fake_library(fake_nvml_env):
    code = """
        import json, gpumon
        with gpumon.Monitor(interval=0.2, gpus=[1]) as m:
            ok = m.wait(8, timeout=60)
        rows = m.history(frame=False)
        print(json.dumps({"ok": ok, "gpus": sorted({r["gpu"] for r in rows}),
                          "source": sorted({r["source"] for r in rows}), "n": len(rows)}))
    """
    r = run_py(code, fake_nvml_env(gpus=2))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out == dict(out, ok=True, gpus=[1], source=["nvml"]) and out["n"] >= 8


def test_diagnose_refuses_fractions_for_percent():
    t = np.arange(120.0)
    with pytest.raises(ValueError, match=r"fractions .*percent, 0-100: pass util \* 100") as e:
        gpumon.diagnose(time=t, util=np.tile([0.9, 0.95, 0.2], 40))
    assert "\n" not in str(e.value)
    # The same numbers in percent are judged; 0% and 1% alone are percent (a GPU at rest).
    assert gpumon.diagnose(time=t, util=np.tile([90.0, 95.0, 20.0], 40)).summary.verdict
    assert gpumon.diagnose(time=t, util=np.tile([0.0, 1.0, 0.0], 40)).summary.verdict == "idle"


@pytest.mark.parametrize("kw, err, text", [
    ({"sim": "nosuch"}, gpumon.UserError, r"^Monitor\(sim=\.\.\.\): unknown sim scenario"),
    ({"sim": "busy:x"}, gpumon.UserError, r"in sim='busy:x'"),
    ({"sim": "busy", "gpus": [9]}, gpumon.UserError, r"^Monitor\(gpus=\.\.\.\): no GPU '9'"),
    ({"sim": ""}, ValueError, "sim must name a scenario"),
    ({"sim": "busy", "seed": -1}, ValueError, "seed must be a whole number"),
    ({"interval": 0}, ValueError, "^interval must be"),
])
def test_monitor_errors_name_its_parameters(kw, err, text):
    with pytest.raises(err, match=text) as e:
        gpumon.Monitor(**kw).start().stop()
    assert "--" not in str(e.value), str(e.value)


def test_monitor_without_a_driver_names_sim_not_the_flag(clean_env):
    import subprocess
    import sys
    code = ("import gpumon\ntry:\n    gpumon.Monitor().start()\n"
            "except gpumon.UserError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env, capture_output=True,
                         text=True, timeout=60).stdout
    assert "use sim='SCENARIO'" in out and "--sim" not in out, out
