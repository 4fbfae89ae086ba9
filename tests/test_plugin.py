"""The dstat/dool column's parts without a host: the stream's records, the stream process over
the fake NVML library, and `gpumon plugin install | path | uninstall`."""
import argparse
import io
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import fakenvml_env
from samples_util import tick
from gpumon.commands import plugin, stream
from gpumon.diagnosis import ABBREV, Diagnosis
from gpumon.errors import NoDriverError, UserError
from gpumon.samples import Tick

ROOT = Path(__file__).resolve().parent.parent
STREAM = [sys.executable, "-m", "gpumon.commands.stream"]


# -- records -------------------------------------------------------------------------------
def test_tick_record_means_per_gpu_and_keeps_missing_as_null():
    t = tick(100.0, gpus=2, util=60.0)
    # GPU 1: memory utilization not supported -> None, never 0
    t = Tick(time=t.time, host=t.host, lost=(),
             gpus=tuple(s if s.gpu == 0 else replace(s, util_mem_pct=None) for s in t.gpus))
    rec = stream.tick_record(t, [], gpus=[0, 1, 2])
    assert rec["type"] == "tick" and rec["verdict"] is None and rec["state"] == "----"
    g0, g1, g2 = rec["gpus"]
    assert g0 == {"gpu": 0, "util": 60.0, "mem": 20.0, "verdict": None, "state": "----",
                  "lost": False}
    assert g1["util"] == 60.0 and g1["mem"] is None
    assert g2["util"] is None and g2["mem"] is None          # no sample this tick
    json.dumps(rec)                                          # plain JSON, nothing exotic


def test_tick_record_verdicts_per_gpu_and_overall_by_priority():
    t = tick(100.0, gpus=3)
    t = Tick(time=t.time, gpus=t.gpus, host=t.host, lost=(2,))
    diags = [Diagnosis("busy", gpus=(0,)), Diagnosis("sync_stall", gpus=(1,)),
             Diagnosis("insufficient_data", gpus=(1,))]
    rec = stream.tick_record(t, diags, gpus=[0, 1, 2])
    assert rec["verdict"] == "sync_stall" and rec["state"] == ABBREV["sync_stall"] == "sync"
    assert [g["state"] for g in rec["gpus"]] == ["busy", "sync", "----"]
    assert [g["lost"] for g in rec["gpus"]] == [False, False, True]


def test_overall_verdict_prefers_a_problem_to_a_healthy_job():
    assert stream.overall_verdict([Diagnosis("idle"), Diagnosis("data_starvation")]) == \
        "data_starvation"
    assert stream.overall_verdict([Diagnosis("busy"), Diagnosis("throttled")]) == "throttled"
    assert stream.overall_verdict([]) is None
    assert stream.abbrev(None) == "----"
    assert {stream.abbrev(v) for v in ABBREV} == {"busy", "idle", "paus", "data", "sync", "thrm",
                                                  "----"}


def test_error_record_keeps_the_reason_only():
    rec = stream.error_record(NoDriverError("libnvidia-ml.so.1 not found"))
    assert rec == {"type": "error", "code": 12,        # library not found, as nvidia-smi
                   "message": "no NVIDIA driver: libnvidia-ml.so.1 not found"}
    assert stream.error_record(UserError("bad", 3))["code"] == 3
    assert stream.error_record(ValueError("x"))["message"] == "ValueError: x"


def test_stream_run_on_simulated_gpus_writes_hello_then_ticks():
    parser = argparse.ArgumentParser()
    stream.add_options(parser)
    args = parser.parse_args(["--sim", "sync_stall:2", "--interval", "0.2", "--duration", "0.7"])
    out = io.StringIO()
    assert stream.run(args, out=out) == 0
    recs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert recs[0]["type"] == "hello" and recs[0]["source"] == "sim"
    assert [g["gpu"] for g in recs[0]["gpus"]] == [0, 1]
    ticks = recs[1:]
    assert len(ticks) >= 3 and all(r["type"] == "tick" for r in ticks)
    assert any(g["util"] is not None for r in ticks for g in r["gpus"])


# -- the stream process over the fake library -----------------------------------------------
@pytest.fixture(scope="module")
def fake():
    reason = fakenvml_env.skip_reason()
    if reason:
        pytest.skip(reason)
    return fakenvml_env


def _env(base_env):
    env = {k: v for k, v in base_env.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_stream_process_reads_two_fake_gpus(fake):
    env = _env(fake.env(gpus=2))
    r = subprocess.run(STREAM + ["--interval", "0.3", "--duration", "1"], env=env, cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert recs[0]["type"] == "hello" and [g["gpu"] for g in recs[0]["gpus"]] == [0, 1]
    assert recs[0]["source"] == "nvml"
    utils = [g["util"] for rec in recs[1:] for g in rec["gpus"]]
    assert utils and all(u is None or 0 <= u <= 100 for u in utils)
    assert any(u is not None for u in utils)


@pytest.mark.parametrize("settings, code, words", [
    ({"gpus": 0}, 6, "no NVIDIA GPU found"),
    ({"init_error": "driver_not_loaded"}, 9, "no NVIDIA driver: the NVIDIA kernel driver is not"),
])
def test_stream_process_says_why_in_one_record(fake, settings, code, words):
    r = subprocess.run(STREAM + ["--interval", "0.3"], env=_env(fake.env(**settings)), cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == code
    (rec,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert rec["type"] == "error" and rec["code"] == code and words in rec["message"]
    assert "--sim" not in rec["message"] and "Traceback" not in r.stderr


def test_stream_every_gpu_lost_drops_the_verdict(fake):
    """dool's column: once every GPU is lost, no verdict stands for them ("----"), the GPUs
    say "lost" and the stream goes on."""
    r = subprocess.run(STREAM + ["--interval", "0.5", "--duration", "6"],
                       env=_env(fake.env(gpus=2, lost={0: 3.5, 1: 3.5})), cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    ticks = [json.loads(line) for line in r.stdout.splitlines()][1:]
    before = [t for t in ticks if not any(g["lost"] for g in t["gpus"])]
    after = [t for t in ticks if all(g["lost"] for g in t["gpus"])]
    assert any(t["verdict"] for t in before) and len(after) >= 3
    assert all(t["verdict"] is None and t["state"] == "----" for t in after), after[-1]
    assert all(g["verdict"] is None for t in after for g in t["gpus"])


def test_stream_process_ends_when_its_stdin_closes(fake):
    proc = subprocess.Popen(STREAM + ["--interval", "0.5", "--stop-on-eof"],
                            env=_env(fake.env(gpus=1)), cwd="/", stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        first = proc.stdout.readline()
        assert json.loads(first)["type"] == "hello"
        proc.stdin.close()                       # the host went away
        started = time.monotonic()
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- gpumon plugin install | path | uninstall ------------------------------------------------
@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return tmp_path


def test_path_is_the_checkout_plugin_file():
    assert plugin.plugin_file() == ROOT / "plugins" / "gpumon_plugin.py"


def test_path_finds_an_installed_share_folder(tmp_path, monkeypatch):
    site_pkgs = tmp_path / "lib" / "site-packages" / "gpumon"
    site_pkgs.mkdir(parents=True)
    shared = tmp_path / "share" / "gpumon" / "plugins" / "gpumon_plugin.py"
    shared.parent.mkdir(parents=True)
    shared.write_text(plugin.MARKER + " test\n")
    monkeypatch.setattr(plugin.gpumon, "__file__", str(site_pkgs / "__init__.py"))
    monkeypatch.setattr(plugin.sys, "prefix", str(tmp_path))
    assert plugin.plugin_file() == shared


def test_path_missing_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setattr(plugin.gpumon, "__file__", str(tmp_path / "gpumon" / "__init__.py"))
    monkeypatch.setattr(plugin.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(plugin.sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(plugin.site, "USER_BASE", str(tmp_path))
    with pytest.raises(UserError, match="plugin file is missing"):
        plugin.plugin_file()


def test_install_links_both_hosts_and_records_the_interpreter(home):
    lines = plugin.install()
    src = ROOT / "plugins" / "gpumon_plugin.py"
    for name in (".dstat/dstat_gpumon.py", ".dool/dool_gpumon.py"):
        dest = home / name
        assert dest.is_symlink() and dest.resolve() == src
        assert any(str(dest) in line for line in lines)
    cfg = json.loads((home / ".config" / "gpumon" / "plugin.json").read_text())
    assert cfg["python"] == sys.executable and cfg["plugin"] == str(src)
    # run from the checkout (not pip-installed): the checkout goes on the child's PYTHONPATH
    assert cfg["pythonpath"] in (None, str(ROOT))
    plugin.install()                                       # again: replaces its own links
    assert (home / ".dstat" / "dstat_gpumon.py").is_symlink()


def test_install_copy_then_uninstall_removes_only_what_it_made(home):
    (home / ".dstat").mkdir()
    (home / ".dstat" / "dstat_other.py").write_text("# another plugin\n")
    plugin.install(copy=True)
    copy = home / ".dool" / "dool_gpumon.py"
    assert copy.is_file() and not copy.is_symlink() and plugin.is_ours(copy)
    lines = plugin.uninstall()
    assert not (home / ".dstat" / "dstat_gpumon.py").exists() and not copy.exists()
    assert (home / ".dstat" / "dstat_other.py").exists()      # not ours: kept
    assert not (home / ".dool").exists()                        # install made it: gone
    assert not (home / ".config" / "gpumon" / "plugin.json").exists()
    assert any("removed" in line for line in lines)
    assert plugin.uninstall() == ["nothing to remove: the plugin is not installed"]


def test_install_refuses_to_replace_a_foreign_file(home):
    (home / ".dool").mkdir()
    (home / ".dool" / "dool_gpumon.py").write_text("# someone else's gpumon plugin\n")
    with pytest.raises(UserError, match="not gpumon's plugin"):
        plugin.install()
    assert "someone else" in (home / ".dool" / "dool_gpumon.py").read_text()


def test_cli_plugin_commands(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "gpumon", "plugin"]

    def run(*args):
        return subprocess.run(cmd + list(args), env=env, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
    r = run("path")
    assert r.returncode == 0 and r.stdout.strip() == str(ROOT / "plugins" / "gpumon_plugin.py")
    r = run("install")
    assert r.returncode == 0 and str(tmp_path / ".dstat" / "dstat_gpumon.py") in r.stdout
    assert "recorded " + sys.executable in r.stdout
    r = run("uninstall")
    assert r.returncode == 0 and "removed" in r.stdout
    r = run()
    assert r.returncode == 2 and "install | path | uninstall" in r.stderr
    assert "Traceback" not in r.stderr


def test_stream_is_a_hidden_sub_command():
    parser = argparse.ArgumentParser(prog="gpumon")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugin.register(sub)
    stream.register(sub)
    args = parser.parse_args(["stream", "--interval", "2", "--stop-on-eof"])
    assert args.func is stream.run and args.interval == 2.0 and args.stop_on_eof
    listing = parser.format_help()
    assert "plugin" in listing and "stream" not in listing and "SUPPRESS" not in listing


def test_stream_without_nvidia_ml_py_says_so(monkeypatch):
    import gpumon.nvml
    monkeypatch.setattr(gpumon.nvml, "N", None)          # as if pynvml were not installed
    parser = argparse.ArgumentParser()
    stream.add_options(parser)
    out = io.StringIO()
    assert stream.run(parser.parse_args([]), out=out) == 12      # library not found
    (rec,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rec["message"] == "no NVIDIA driver: nvidia-ml-py (module pynvml) is not installed"
