"""Stop signals and SIGUSR1 at any moment of `gpumon log` and `gpumon watch --log`, from the
console script's first line to the last: one line at most, exit 130 before the first sample
(0 after it, "stopped"), never a traceback, never a cut file; a second signal while stopping
changes nothing; SIGUSR1 (logrotate's postrotate) never kills it.

Real processes, started through the console script's entry point as setup.cfg names it.
A signal at a chosen moment of the start-up is sent by the process to itself from an import
hook, as the named module is looked for (the moments a signal from outside hits at random);
later moments are reached by signals sent from here after measured delays.
"""
import configparser
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")


def _entry() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    target, = [line.split("=", 1)[1].strip() for line in lines
               if line.split("=", 1)[0].strip() == "gpumon"]
    return target


# The console script as pip writes it, with an import hook that sends SIGNALS to this very
# process when MODULE is first looked for.
SCRIPT = """\
import os, sys
module, signals = {module!r}, {signals!r}
class Hook:
    fired = False
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == module and not cls.fired:
            cls.fired = True
            for s in signals:
                os.kill(os.getpid(), s)
        return None
sys.meta_path.insert(0, Hook)
sys.argv[0] = "gpumon"
from {entry_module} import {entry_func} as main
sys.exit(main())
"""


def _script(module: str, signals) -> str:
    mod, func = _entry().split(":")
    return SCRIPT.format(module=module, signals=[int(s) for s in signals], entry_module=mod,
                         entry_func=func)


def _start(argv, env, cwd, code=None, **kw):
    code = code or _script("", [])
    return subprocess.Popen([sys.executable, "-c", code] + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **kw)


def _finish(p, timeout=30):
    try:
        return p.communicate(timeout=timeout)
    finally:
        p.kill()
        p.wait()


def _assert_clean_end(p, out, err, path: Path):
    """130 and one line before the first sample, 0 and "stopped" after it; the file whole."""
    assert "Traceback" not in err and "Error" not in err, err
    lines = [x for x in err.splitlines() if not x.startswith("gpumon: logging ")]
    assert len(lines) == 1, err
    if p.returncode == 130:
        assert lines[0].startswith("gpumon: interrupted"), err
    else:
        assert p.returncode == 0 and lines[0].startswith("gpumon: stopped: "), (p.returncode,
                                                                                err)
    data = path.read_bytes() if path.exists() else b""
    assert data == b"" or data.endswith(b"\n"), data[-200:]


# Moments of the start-up: the console script's import of the command line, the command's
# module imported under the command line's hold, the source's numpy (while `log` opens its
# source) and the datetime module numpy's C code imports (a KeyboardInterrupt there was
# numpy's "bad install" ImportError traceback), the detector's modules (after the file was
# opened).
MOMENTS = ["gpumon.cli", "gpumon.commands.log", "numpy", "datetime", "gpumon.detect"]


@pytest.mark.parametrize("module", MOMENTS)
@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM], [signal.SIGHUP],
                                     [signal.SIGTERM, signal.SIGINT]],
                         ids=["INT", "TERM", "HUP", "TERM+INT"])
def test_a_stop_signal_at_start_up_is_one_line_and_130(module, signals, clean_env, tmp_path):
    path = tmp_path / "run.csv"
    p = _start(["log", "-o", str(path), "--sim", "busy:1"], clean_env, tmp_path,
               code=_script(module, signals))
    out, err = _finish(p)
    assert p.returncode == 130, (p.returncode, err)
    _assert_clean_end(p, out, err, path)


@pytest.mark.parametrize("module", MOMENTS)
def test_sigusr1_at_start_up_is_harmless(module, clean_env, tmp_path):
    """logrotate's postrotate may signal a gpumon that is just starting: it goes on."""
    path = tmp_path / "run.csv"
    p = _start(["log", "-o", str(path), "--sim", "busy:1", "--interval", "0.2"], clean_env,
               tmp_path, code=_script(module, [signal.SIGUSR1]))
    try:
        assert p.stderr.readline().startswith("gpumon: logging "), p.communicate()[1]
        deadline = time.monotonic() + 20
        while path.read_bytes().count(b"\n") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, err = _finish(p)
    finally:
        p.kill()
    assert p.returncode == 0 and "gpumon: stopped: " in err, (p.returncode, err)
    assert path.read_bytes().count(b"\n") >= 2


def test_a_signal_before_the_first_sample_is_130_not_a_header_only_success(clean_env,
                                                                            tmp_path):
    """A simulation's first poll brings no sample: a SIGTERM then has logged nothing."""
    path = tmp_path / "run.csv"
    p = _start(["log", "-o", str(path), "--sim", "busy:1", "--interval", "3"], clean_env,
               tmp_path)
    assert p.stderr.readline().startswith("gpumon: logging ")
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    out, err = _finish(p)
    assert p.returncode == 130, err
    assert err == f"gpumon: interrupted before the first sample; nothing logged to {path}\n"


def _two_signals(argv, env, tmp_path, first, second, delay, gap, ready):
    p = _start(argv, env, tmp_path)
    try:
        assert ready(p), p.communicate()[1]
        time.sleep(delay)
        p.send_signal(first)
        time.sleep(gap)
        p.send_signal(second)
        return p, _finish(p)
    finally:
        p.kill()


def test_two_signals_close_together_end_it_once(clean_env, tmp_path):
    """A second signal 0-50 ms after the first, at moments across the first second (before
    and after the first sample): the same clean end as one signal."""
    rnd = random.Random(7)
    pairs = [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGINT),
             (signal.SIGTERM, signal.SIGINT), (signal.SIGHUP, signal.SIGTERM)]
    for k in range(12):
        path = tmp_path / f"run{k}.csv"
        first, second = pairs[k % len(pairs)]
        p, (out, err) = _two_signals(
            ["log", "-o", str(path), "--sim", "busy:2", "--interval", "0.25"], clean_env,
            tmp_path, first, second, rnd.uniform(0, 0.6), rnd.uniform(0, 0.05),
            ready=lambda p: p.stderr.readline().startswith("gpumon: logging "))
        assert p.returncode in (0, 130), (k, p.returncode, err)
        _assert_clean_end(p, out, err, path)


@pytest.mark.parametrize("module", ["gpumon.commands.watch", "numpy", "rich"])
@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGHUP, signal.SIGINT]],
                         ids=["TERM", "HUP+INT"])
def test_watch_log_stop_signal_at_start_up(module, signals, clean_env, tmp_path):
    path = tmp_path / "run.csv"
    p = _start(["watch", "--plain", "--sim", "busy:1", "--log", str(path)], clean_env,
               tmp_path, code=_script(module, signals))
    out, err = _finish(p)
    assert p.returncode == 130 and err == "gpumon: interrupted\n", (p.returncode, err)
    data = path.read_bytes() if path.exists() else b""
    assert data == b"" or data.endswith(b"\n")


def test_watch_log_sigusr1_at_start_up_is_harmless(clean_env, tmp_path):
    path = tmp_path / "run.csv"
    p = _start(["watch", "--plain", "--sim", "busy:1", "--log", str(path), "--duration", "1"],
               clean_env, tmp_path, code=_script("gpumon.commands.watch", [signal.SIGUSR1]))
    out, err = _finish(p)
    assert p.returncode == 0, (p.returncode, err)
    assert path.read_bytes().count(b"\n") > 1


def test_watch_log_two_signals_close_together(clean_env, tmp_path):
    rnd = random.Random(11)
    for k in range(6):
        path = tmp_path / f"run{k}.csv"
        p, (out, err) = _two_signals(
            ["watch", "--plain", "--sim", "busy:1", "--interval", "0.25", "--log", str(path)],
            clean_env, tmp_path, signal.SIGTERM, signal.SIGINT, rnd.uniform(0, 0.4),
            rnd.uniform(0, 0.05), ready=lambda p: bool(p.stdout.readline()))
        assert "Traceback" not in err and p.returncode in (0, 130), (k, p.returncode, err)
        data = path.read_bytes() if path.exists() else b""
        assert data == b"" or data.endswith(b"\n")


def test_a_commands_own_held_imports_keep_its_signals_held(clean_env):
    """A command that reads its stop signals between polls imports lazily under
    held_interrupts (its source, its detector): that must not hand the signals back to
    KeyboardInterrupt, which would cut a poll."""
    code = """\
import os, signal
from gpumon import interrupts
interrupts.install()
with interrupts.held_interrupts():
    pass                                   # (the command's module)
with interrupts.held_stops():
    with interrupts.held_interrupts():
        import json                        # (a lazy import of the command's)
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)
    assert interrupts.wait(5) and interrupts.stop_signal() == signal.SIGTERM
print("held")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=clean_env, timeout=30)
    assert r.returncode == 0 and r.stdout == "held\n", r.stderr
