"""`gpumon run -- CMD`: CMD's output reaches gpumon's terminal or pipe whole and as it comes;
gpumon's own lines go between CMD's lines, never inside one."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from gpumon.relay import HOLD_S, LineGate, Relay

# gpumon's plain lines: its header, one line per reading, its own "gpumon: ..." lines and the
# summary ("gpumon ran ...").
GPUMON_LINE = re.compile(rb"(gpumon[ :].*|time    \|.*|\d\d:\d\d:\d\d\|.*)\n\Z")


def _run(gpumon_cmd, clean_env, script: str, tmp_path, timeout=60, extra=()):
    path = tmp_path / "cmd.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--interval", "0.05",
                                        *extra, "--", sys.executable, str(path)],
                          capture_output=True, env=clean_env, timeout=timeout)


def _without_gpumon(data: bytes) -> tuple[bytes, int]:
    """CMD's bytes: ``data`` less the whole lines gpumon put in (each after a newline)."""
    kept, dropped = [], 0
    for part in data.splitlines(keepends=True):
        if GPUMON_LINE.match(part) and (not kept or kept[-1].endswith(b"\n")):
            dropped += 1
            continue
        kept.append(part)
    return b"".join(kept), dropped


def test_gpumon_lines_never_land_inside_a_line_of_cmd(gpumon_cmd, clean_env, tmp_path):
    """A line CMD writes in two parts 0.3 s apart stays one line ("A1 gpumon 0.1.0: ..."
    then "B1" before)."""
    r = _run(gpumon_cmd, clean_env, """
        import sys, time
        for i in range(4):
            sys.stderr.write(f"A{i}"); sys.stderr.flush(); time.sleep(0.3)
            sys.stderr.write(f"B{i}\\n"); sys.stderr.flush()
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.decode().splitlines()
    assert [x for x in lines if x.startswith("A")] == [f"A{i}B{i}" for i in range(4)], lines
    assert sum(1 for x in lines if re.match(r"\d\d:\d\d:\d\d\|", x)) >= 4   # gpumon's, between


def test_many_lines_in_odd_chunks_come_out_intact(gpumon_cmd, clean_env, tmp_path):
    """`seq 1 300000 >&2`, written in chunks that cut lines anywhere, comes out line by line
    (two lines came out corrupted)."""
    r = _run(gpumon_cmd, clean_env, """
        import os, time
        data = "".join(f"{i}\\n" for i in range(1, 300001)).encode()
        for k in range(0, len(data), 997):
            os.write(2, data[k:k + 997])
            if k % (997 * 2) == 0:
                time.sleep(0.001)
        """, tmp_path)
    assert r.returncode == 0, r.stderr[-500:]
    cmd_bytes, dropped = _without_gpumon(r.stderr)
    assert cmd_bytes == "".join(f"{i}\n" for i in range(1, 300001)).encode()
    assert dropped >= 3                          # gpumon did say things meanwhile


def test_binary_output_passes_byte_exact(gpumon_cmd, clean_env, tmp_path):
    """Random bytes on stderr reach it unchanged; gpumon's lines only follow a newline of
    CMD's (one came at byte 327,680, inside the stream)."""
    blob = os.urandom(1_500_000)
    (tmp_path / "blob").write_bytes(blob)
    r = _run(gpumon_cmd, clean_env, f"""
        import os, time
        data = open({str(tmp_path / 'blob')!r}, "rb").read()
        for k in range(0, len(data), 4099):
            os.write(2, data[k:k + 4099])
            time.sleep(0.002)
        os.write(2, b"\\n")
        """, tmp_path)
    assert r.returncode == 0
    cmd_bytes, dropped = _without_gpumon(r.stderr)
    assert cmd_bytes == blob + b"\n" and dropped >= 5


def test_stdout_to_a_file_is_left_to_cmd(gpumon_cmd, clean_env, tmp_path):
    """Only the stream gpumon writes to goes through gpumon: CMD's stdout, a file of its own,
    is the file itself."""
    script = tmp_path / "cmd.py"
    script.write_text('import os; print(os.readlink("/proc/self/fd/1"))')
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        r = subprocess.run(gpumon_cmd + ["run", "--sim", "busy:1", "--", sys.executable,
                                         str(script)], stdout=f, stderr=subprocess.PIPE,
                           env=clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.read_text().strip() == str(out)


# -- the Relay itself ----------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _relay(clock):
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    relay = Relay(src_r, dst_w, clock=clock).start()
    return relay, src_w, dst_r, dst_w


def _drain(fd):
    os.set_blocking(fd, False)
    out = b""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
    except BlockingIOError:
        pass
    return out


def _settle():
    time.sleep(0.3)


def test_relay_holds_a_line_until_cmds_line_ends_then_bounds_the_wait():
    clock = Clock()
    relay, src_w, dst_r, dst_w = _relay(clock)
    try:
        os.write(src_w, b"A1")
        _settle()
        relay.say(b"gpumon: one\n")
        _settle()
        assert _drain(dst_r) == b"A1"                    # held: CMD's line is unfinished
        os.write(src_w, b"B1\nA2")
        _settle()
        assert _drain(dst_r) == b"B1\ngpumon: one\nA2"   # right after CMD's newline
        relay.say(b"gpumon: two\n")
        clock.t += HOLD_S + 0.1
        time.sleep(1.5)                                  # (the relay looks again within 1 s)
        assert _drain(dst_r) == b"\ngpumon: two\n"       # in a pipe: a newline goes first
        os.write(src_w, b"B2\n")
        _settle()
        relay.say(b"gpumon: three\n")
        assert _drain(dst_r) == b"B2\ngpumon: three\n"   # at a line's end: at once
    finally:
        os.close(src_w)
        relay.join(5)
        os.close(dst_r)
        os.close(dst_w)


def test_relay_end_puts_held_lines_after_a_newline():
    clock = Clock()
    relay, src_w, dst_r, dst_w = _relay(clock)
    gate = LineGate(relay, sys.stderr)
    os.write(src_w, b"no newline at the end")
    _settle()
    gate.write("gpumon: the sum")
    gate.write("mary\n")
    os.close(src_w)
    assert relay.join(5)
    assert _drain(dst_r) == b"no newline at the end\ngpumon: the summary\n"
    os.close(dst_r)
    os.close(dst_w)


def test_relay_keeps_cmds_bytes_in_order_under_concurrent_lines():
    clock = Clock()
    relay, src_w, dst_r, dst_w = _relay(clock)
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(_read_all(dst_r)))
    reader.start()
    data = b"".join(b"line %d\n" % i for i in range(20000))

    def talk():
        for i in range(200):
            relay.say(b"gpumon: %d\n" % i)
    speaker = threading.Thread(target=talk)
    speaker.start()
    for k in range(0, len(data), 333):
        os.write(src_w, data[k:k + 333])
    speaker.join()
    os.close(src_w)
    assert relay.join(10)
    os.close(dst_w)
    reader.join(10)
    lines = bytes(got).splitlines(keepends=True)
    assert b"".join(x for x in lines if not x.startswith(b"gpumon")) == data
    assert sum(1 for x in lines if x.startswith(b"gpumon")) == 200
    os.close(dst_r)


def _read_all(fd):
    out = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return out
        out += chunk


# -- on a terminal -----------------------------------------------------------------------------

class Tmux:
    def __init__(self):
        if not shutil.which("tmux"):
            pytest.skip("tmux not installed")
        self.sock = f"gpumon-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args):
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True,
                              text=True, timeout=10)

    def start(self, command: str):
        self("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", command)

    def wait_for(self, text: str, seconds: float = 20) -> str:
        deadline = time.monotonic() + seconds
        screen = ""
        while time.monotonic() < deadline:
            screen = self("capture-pane", "-p", "-t", "t").stdout
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on the screen:\n{screen}")


@pytest.fixture
def tmux():
    t = Tmux()
    yield t
    t("kill-server")


BAR = """
import sys, time
print("isatty", sys.stdout.isatty(), sys.stderr.isatty(), flush=True)
for pct in (10, 50):
    sys.stderr.write(f"\\rbar {pct}%"); sys.stderr.flush(); time.sleep(3)
sys.stderr.write("\\rbar 100%\\n")
"""


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "screen"])
def test_a_progress_bar_shows_before_its_newline(tmux, clean_env, tmp_path, plain):
    """tqdm-style `\\r` redraws show as they come (on the screen they stayed invisible until
    their final newline), and CMD sees a terminal."""
    script = tmp_path / "bar.py"
    script.write_text(BAR)
    argv = [sys.executable, "-m", "gpumon", "run", "--sim", "busy:1",
            *(["--plain"] if plain else []), "--", sys.executable, str(script)]
    env = f"env PYTHONPATH={shlex.quote(clean_env['PYTHONPATH'])}"
    tmux.start(f"{env} {shlex.join(argv)}; echo EXIT=$?; sleep 60")
    screen = tmux.wait_for("bar 10%", 15)
    assert "isatty True True" in screen
    assert "bar 100%" not in screen
    screen = tmux.wait_for("bar 50%", 10)
    assert "bar 100%" not in screen
    screen = tmux.wait_for("EXIT=0", 20)
    assert "bar 100%" in screen and "The command exited with code 0." in \
        screen.replace("\n", " ")


def test_cmd_follows_the_terminals_size(tmux, clean_env, tmp_path):
    """CMD's pseudo-terminal has the terminal's size, and a resize reaches CMD (SIGWINCH,
    the new size), as in the terminal itself."""
    script = tmp_path / "size.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        show = lambda *a: print("size", os.get_terminal_size(2).columns, flush=True)
        signal.signal(signal.SIGWINCH, show)
        show()
        time.sleep(6)
        """))
    argv = [sys.executable, "-m", "gpumon", "run", "--sim", "busy:1", "--plain", "--",
            sys.executable, str(script)]
    env = f"env PYTHONPATH={shlex.quote(clean_env['PYTHONPATH'])}"
    tmux.start(f"{env} {shlex.join(argv)}; echo EXIT=$?; sleep 60")
    tmux.wait_for("size 100", 15)
    tmux("resize-window", "-t", "t", "-x", "90", "-y", "30")
    tmux.wait_for("size 90", 10)
