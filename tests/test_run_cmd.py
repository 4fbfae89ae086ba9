"""`gpumon run -- CMD`: exit codes, forwarded signals, the diagnosis at the end."""
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from gpumon.commands.run import exit_code


def test_exit_code_convention():
    assert exit_code(0) == 0 and exit_code(3) == 3
    assert exit_code(-signal.SIGKILL) == 137 and exit_code(-signal.SIGINT) == 130


def test_child_exit_code_and_starvation_summary(gpumon_cmd, clean_env):
    """The issue's "done when": exits 3 and the summary names the starvation."""
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "data_starvation:2", "--", "sh", "-c",
                                     "echo child says hi; sleep 6; exit 3"],
                       capture_output=True, text=True, env=clean_env, timeout=40)
    assert r.returncode == 3, r.stderr
    assert r.stdout == "child says hi\n"             # CMD's own output, and only it
    summary = r.stderr.splitlines()[-1]
    assert summary.startswith("gpumon ran `sh -c 'echo child says hi; sleep 6; exit 3'` on 2 "
                              "SIMULATED GPUs")
    assert "Main finding: data_starvation" in summary and "Advice:" in summary
    assert summary.endswith("The command exited with code 3.")


def test_stdout_is_the_commands_alone(gpumon_cmd, clean_env):
    """`gpumon run -- train.py | tee out`: gpumon's lines and summary go to stderr."""
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--interval", "0.2", "--", "sh",
                                     "-c", "echo TRAIN-LINE-1; sleep 1; echo TRAIN-LINE-2"],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "TRAIN-LINE-1\nTRAIN-LINE-2\n"
    assert "gpumon ran `sh -c" in r.stderr and "\nTRAIN-LINE" not in r.stderr


def test_child_killed_by_a_signal(gpumon_cmd, clean_env):
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--", "sh", "-c",
                                     "sleep 1; kill -9 $$"],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode == 137, r.stderr
    assert "killed by SIGKILL (exit code 137)" in r.stderr


def _default_sigint():
    # A shell that started pytest in the background may have left SIGINT ignored, which
    # the command would inherit (gpumon passes dispositions on, as a shell does).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_are_forwarded_to_the_command(gpumon_cmd, clean_env, tmp_path, sig):
    """The child is in its own process group: it dies of the signal only if gpumon forwards it."""
    marker = tmp_path / "got"
    # (a background job ignores SIGINT in a non-interactive shell: the trap ends it)
    script = (f"trap 'echo {sig.name} > {marker}; kill $!; exit 9' {sig.name[3:]}; "
              "sleep 30 & wait")
    p = subprocess.Popen(gpumon_cmd + ["run", "--sim", "busy:1", "--", "sh", "-c", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env, preexec_fn=_default_sigint)
    for _ in range(3):                                   # header lines, first reading
        p.stderr.readline()
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    assert marker.read_text().strip() == sig.name, err
    assert p.returncode == 9
    assert "The command exited with code 9." in err and "Traceback" not in err


def test_plain_sleep_killed_by_forwarded_sigterm(gpumon_cmd, clean_env):
    p = subprocess.Popen(gpumon_cmd + ["run", "--sim", "busy:1", "--", "sleep", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env)
    for _ in range(3):
        p.stderr.readline()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "killed by SIGTERM" in err


def test_command_that_cannot_start(gpumon_cmd, clean_env, tmp_path):
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--", str(tmp_path / "nope")],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode == 127
    assert r.stderr.strip().startswith("gpumon: cannot start") and r.stderr.count("\n") == 1


def test_no_command(gpumon_cmd, clean_env):
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1"], capture_output=True, text=True,
                       env=clean_env, timeout=30)
    assert r.returncode == 2 and "no command given" in r.stderr


def test_run_in_a_terminal_shows_output_above_the_screen(clean_env):
    import shutil
    import uuid
    if not shutil.which("tmux"):
        pytest.skip("tmux not installed")
    sock = f"gpumon-test-{uuid.uuid4().hex[:8]}"
    tm = lambda *a: subprocess.run(["tmux", "-L", sock, *a], capture_output=True,  # noqa: E731
                                   text=True, timeout=10)
    cmd = " ".join(shlex.quote(a) for a in [
        sys.executable, "-m", "gpumon", "run", "--sim", "busy:2", "--", "sh", "-c",
        "for i in 1 2 3; do echo step $i; sleep 1; done; exit 4"])
    env = f"env PYTHONPATH={shlex.quote(clean_env['PYTHONPATH'])}"
    try:
        tm("new-session", "-d", "-s", "t", "-x", "100", "-y", "30",
           f"{env} {cmd}; echo EXIT=$?; sleep 60")
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline and "EXIT=" not in text:
            time.sleep(0.5)
            text = tm("capture-pane", "-p", "-t", "t").stdout
        assert "EXIT=4" in text, text
        assert "step 3" in text and "SIMULATED busy:2" in text     # output, then the last frame
        assert text.index("step 3") < text.index("SIMULATED busy:2")
        assert "The command exited with code 4." in text.replace("\n", " ")
    finally:
        tm("kill-server")


def test_no_driver_fails_before_the_command_starts(gpumon_cmd, clean_env, tmp_path):
    if subprocess.run(gpumon_cmd + ["list"], capture_output=True, env=clean_env,
                      timeout=30).returncode not in (9, 12):
        pytest.skip("an NVIDIA driver is present here")
    marker = tmp_path / "started"
    r = subprocess.run(gpumon_cmd + ["run", "--", "touch", str(marker)], capture_output=True,
                       text=True, env=clean_env, timeout=30)
    assert r.returncode in (9, 12) and "no NVIDIA driver" in r.stderr
    assert not marker.exists()


# -- what CMD leaves behind, and gpumon's own death ------------------------------------------

def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_what_the_command_leaves_in_its_group_is_ended(gpumon_cmd, clean_env, tmp_path):
    pidfile = tmp_path / "pid"
    script = f"sleep 301 >/dev/null 2>&1 & echo $! > {pidfile}; exit 5"
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--", "sh", "-c", script],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    pid = int(pidfile.read_text())
    try:
        assert r.returncode == 5, r.stderr
        assert _gone_within(pid, 5)
        assert "left 1 process(es) in its process group; ended them" in r.stderr
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_keep_group_leaves_them_running(gpumon_cmd, clean_env, tmp_path):
    pidfile = tmp_path / "pid"
    script = f"sleep 302 >/dev/null 2>&1 & echo $! > {pidfile}; exit 0"
    r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--keep-group", "--", "sh",
                                     "-c", script],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    pid = int(pidfile.read_text())
    try:
        assert r.returncode == 0 and _alive(pid), r.stderr
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_command_gets_sigterm_when_gpumon_is_killed(gpumon_cmd, clean_env, tmp_path):
    pidfile = tmp_path / "pid"
    p = subprocess.Popen(gpumon_cmd + ["run", "--sim", "busy:1", "--", "sh", "-c",
                                       f"echo $$ > {pidfile}; exec sleep 303 >/dev/null 2>&1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env)
    pid = None
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        p.kill()                                         # SIGKILL: gpumon can do nothing
        p.wait()
        assert _gone_within(pid, 5)
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
        p.kill()
        p.communicate()


def test_a_huge_line_is_read_in_bounded_parts():
    """A command that prints one 8 MB line: gpumon holds it in parts of LINE_MAX characters,
    never the whole line (a 300 MB line drove gpumon to 894 MB)."""
    from gpumon.relay import LINE_MAX, LineFeed
    r, w = os.pipe()
    p = subprocess.Popen(["sh", "-c", "head -c 8000000 /dev/zero | tr '\\0' x; echo; "
                          "printf 'a\\rb\\nlast'"], stdout=w)
    os.close(w)
    feed = LineFeed(r).start()
    lines = []
    while not feed.join(0.05):
        lines += feed.take()
    lines += feed.take()
    assert p.wait() == 0
    assert max(map(len, lines)) <= LINE_MAX
    assert lines[-2:] == ["b", "last"] and set("".join(lines[:-2])) == {"x"}
