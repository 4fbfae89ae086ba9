"""`gpumon run -- CMD`: what can fail is tried before CMD starts; exit codes as a shell's;
Ctrl-C passed on, SIGKILL only after a grace, and the end told as it happened."""
import os
import signal
import subprocess
import sys
import time

import pytest

from gpumon.commands.run import KILL_GRACE_S


@pytest.mark.parametrize("log", ["existing", "missing-dir", "a-dir"])
def test_an_unusable_log_stops_before_cmd_starts(gpumon_cmd, clean_env, tmp_path, log):
    """--log FILE that exists (no --force/--append), in a missing directory, or a directory:
    one line, CMD never started (it ran unmonitored: "no diagnosis (monitoring failed)")."""
    path = {"existing": tmp_path / "run.csv", "missing-dir": tmp_path / "nope" / "run.csv",
            "a-dir": tmp_path}[log]
    if log == "existing":
        path.write_text("timestamp,gpu,util\n1,0,50\n")
    marker = tmp_path / "started"
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--log", str(path), "--",
                                     "touch", str(marker)],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode == 1, r.stderr
    assert not marker.exists()
    assert r.stderr.startswith("gpumon: ") and r.stderr.count("\n") == 1, r.stderr
    if log == "existing":
        assert path.read_text() == "timestamp,gpu,util\n1,0,50\n"      # untouched


def test_a_bad_gpu_selection_stops_before_cmd_starts(gpumon_cmd, clean_env, tmp_path):
    marker = tmp_path / "started"
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--gpus", "5", "--",
                                     "touch", str(marker)],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
    assert not marker.exists()


def test_the_log_is_written_when_it_is_usable(gpumon_cmd, clean_env, tmp_path):
    path = tmp_path / "run.csv"
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--interval", "0.2", "--log",
                                     str(path), "--", "sleep", "1"],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode == 0, r.stderr
    rows = path.read_text().splitlines()
    assert rows[0].startswith("time,gpu,") and len(rows) >= 3


@pytest.mark.parametrize("what,code", [("not-executable", 126), ("directory", 126),
                                       ("bad-interpreter", 127), ("missing", 127),
                                       ("not-on-path", 127)])
def test_cannot_start_codes_are_a_shells(gpumon_cmd, clean_env, tmp_path, what, code):
    """126: found but cannot be executed; 127: not found, CMD or its #! interpreter (a file
    without x exited 127)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    if what == "bad-interpreter":
        script.write_text("#!/nonexistent/interpreter\necho hi\n")
        script.chmod(0o755)
    name = {"not-executable": str(script), "directory": str(tmp_path),
            "bad-interpreter": str(script), "missing": str(tmp_path / "nope"),
            "not-on-path": "no-such-command-here"}[what]
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--", name],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    shell = subprocess.run(["sh", "-c", '"$0"', name], capture_output=True, env=clean_env)
    assert (r.returncode, shell.returncode) == (code, code), r.stderr
    assert r.stderr.startswith("gpumon: cannot start ") and r.stderr.count("\n") == 1


# -- Ctrl-C ----------------------------------------------------------------------------------

def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(gpumon_cmd, clean_env, script):
    p = subprocess.Popen(gpumon_cmd + ["run", "--sim", "busy:1", "--", sys.executable, "-c",
                                       script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env, preexec_fn=_default_sigint)
    assert p.stdout.readline() == "ready\n"
    return p


def _presses(p, n, gap=0.05):
    for _ in range(n):
        p.send_signal(signal.SIGINT)
        time.sleep(gap)


# CMD saves for 1 s on Ctrl-C, however often it comes, then exits 7.
SAVES = """
import signal, sys, time
hits = []
signal.signal(signal.SIGINT, lambda *a: hits.append(1))
print("ready", flush=True)
while not hits:
    time.sleep(0.05)
time.sleep(1.0)
print("saved after", len(hits), "interrupts", flush=True)
sys.exit(7)
"""


def test_five_quick_ctrl_cs_are_passed_on_not_a_sigkill(gpumon_cmd, clean_env):
    """Five Ctrl-Cs 50 ms apart: each reaches CMD, none turns into SIGKILL; gpumon says how
    CMD really ended and exits with its code (it said "killed by SIGKILL" and exited 130)."""
    p = _start(gpumon_cmd, clean_env, SAVES)
    _presses(p, 5)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 7, err
    assert out == "saved after 5 interrupts\n"
    assert "The command exited with code 7." in err and "SIGKILL" not in err.split(
        "gpumon ran")[-1]
    assert "press Ctrl-C again once" in err and "Traceback" not in err


def test_a_ctrl_c_after_the_grace_kills_a_stuck_command(gpumon_cmd, clean_env):
    p = _start(gpumon_cmd, clean_env, """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
""")
    _presses(p, 5)
    time.sleep(KILL_GRACE_S)
    assert p.poll() is None                   # quick presses alone never kill it
    _presses(p, 1)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 137, err
    assert "The command was killed by SIGKILL (exit code 137); gpumon sent the SIGKILL on a " \
        "Ctrl-C" in err.replace("\n", " ")


def test_a_command_ended_by_ctrl_c_exits_130_and_says_so(gpumon_cmd, clean_env):
    p = _start(gpumon_cmd, clean_env, """
import time
print("ready", flush=True)
time.sleep(60)
""")
    _presses(p, 5)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "killed by SIGINT (exit code 130)" in err or "exited with code 1." in err, err
    assert "SIGKILL" not in err
