"""`gpumon watch`: piped lines, signals, --log, replay, and the live screen inside tmux."""
import csv
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from gpumon.csvlog import CsvSink
from gpumon.errors import UserError
from gpumon.replay import ReplaySource
from ui_fixtures import diagnosis_at, ticks

LINE = re.compile(r"^\d\d:\d\d:\d\d\|.*\|(busy|idle|data|sync|thrm|----)")

def _utc_env(env):
    return dict(env, TZ="UTC")


def test_piped_prints_plain_lines_as_they_come(gpumon_cmd, clean_env):
    p = subprocess.Popen(gpumon_cmd + ["watch", "--sim", "busy:2", "--duration", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env)
    head = [p.stdout.readline(), p.stdout.readline()]
    assert "2 SIMULATED GPUs (busy:2)" in head[0]
    assert head[1].startswith("time    |g0 util smact power|g1 util smact power|verdict")
    first = p.stdout.readline()
    assert LINE.match(first), first
    assert p.poll() is None                       # flushed while still running
    out, err = p.communicate(timeout=20)
    lines = out.splitlines()
    assert p.returncode == 0, err
    assert sum(1 for x in [first] + lines if LINE.match(x)) >= 3
    assert lines[-1].startswith("gpumon watched 2 SIMULATED GPUs (0,1, busy:2) for 0:00:0")
    assert "busy" in lines[-1]
    assert "\x1b[" not in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_with_summary(gpumon_cmd, clean_env, sig):
    p = subprocess.Popen(gpumon_cmd + ["watch", "--sim", "busy:1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=clean_env)
    for _ in range(3):
        p.stdout.readline()                        # header, header, first line
    p.send_signal(sig)
    out, err = p.communicate(timeout=15)
    assert p.returncode == 0, err
    assert out.splitlines()[-1].startswith("gpumon watched 1 SIMULATED GPU")
    assert "Traceback" not in err


def test_log_option_writes_the_csv(gpumon_cmd, clean_env, tmp_path):
    path = tmp_path / "run.csv"
    r = subprocess.run(gpumon_cmd + ["watch", "--sim", "busy:2", "--duration", "2", "--log",
                                     str(path)], capture_output=True, text=True, env=clean_env,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(path.open()))
    assert len(rows) >= 12 and {row["gpu"] for row in rows} == {"0", "1"}
    assert {row["source"] for row in rows} == {"sim"}
    again = subprocess.run(gpumon_cmd + ["watch", "--sim", "busy:2", "--duration", "1", "--log",
                                         str(path)], capture_output=True, text=True,
                           env=clean_env, timeout=30)
    assert again.returncode == 1 and "exists" in again.stderr and "Traceback" not in again.stderr


def _write_log(path, n=2, seconds=8):
    sink = CsvSink(str(path))
    for sec, t in enumerate(ticks(n, seconds)):
        sink.write(t, diagnosis_at(sec, n))
    sink.close()


def test_replay_plays_a_log_through_the_same_path(gpumon_cmd, clean_env, tmp_path):
    path = tmp_path / "small.csv"
    _write_log(path)
    t0 = time.monotonic()
    r = subprocess.run(gpumon_cmd + ["watch", "--replay", str(path), "--speed", "20"],
                       capture_output=True, text=True, env=_utc_env(clean_env), timeout=30)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 10
    lines = r.stdout.splitlines()
    assert "2 REPLAYED GPUs (small.csv x20)" in lines[0]
    data = [x for x in lines if LINE.match(x)]
    # The log's own clock (fixture times start at 22:13:21 UTC), a line per logged second,
    # even where a loaded machine falls behind x20 (the seconds due are stepped one by one).
    assert data[0].startswith("22:13:21|") and data[-1].startswith("22:13:28|")
    assert len(data) == 8
    assert lines[-1].startswith("gpumon watched 2 replayed GPUs (0,1, small.csv x20)")


def test_replay_source_follows_its_clock(tmp_path):
    path = tmp_path / "small.csv"
    _write_log(path, n=1, seconds=5)
    now = [100.0]
    src = ReplaySource(str(path), speed=2.0, clock=lambda: now[0])
    assert src.kind == "replay" and [i.index for i in src.gpu_infos()] == [0]
    first = src.read()
    assert {s.source for s in first.gpus} == {"replay"} and len(first.gpus) == 6
    # The log starts at its first sample (1/6 s before the first tick's end); 1 s of wall
    # time at speed 2 is 2 s of log time: the second tick is due, the third not yet.
    now[0] += 1.0
    second = src.read()
    assert len(second.gpus) == 6 and second.time == first.time + 1
    now[0] += 1.0                                  # ticks 3 and 4: one per read
    third = src.read()
    assert src.behind and len(third.gpus) == 6 and third.time == first.time + 2
    fourth = src.read()
    assert not src.behind and fourth.time == first.time + 3
    now[0] += 100
    rest = src.read()
    assert src.done and not src.behind and len(rest.gpus) == 6
    assert src.read().gpus == ()
    src.close()


def test_replay_bad_input_is_one_line(tmp_path, gpumon_cmd, clean_env):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(UserError, match="not a gpumon CSV"):
        ReplaySource(str(empty))
    with pytest.raises(UserError, match="cannot read"):
        ReplaySource(str(tmp_path / "missing.csv"))
    r = subprocess.run(gpumon_cmd + ["watch", "--replay", str(empty)], capture_output=True,
                       text=True, env=clean_env, timeout=30)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = subprocess.run(gpumon_cmd + ["watch", "--replay", str(empty), "--sim", "busy"],
                       capture_output=True, text=True, env=clean_env, timeout=30)
    assert r.returncode == 2 and "cannot be used together" in r.stderr


# -- the live screen, in a real terminal --------------------------------------------------------
class Tmux:
    """A private tmux server with one pane of a fixed size."""

    def __init__(self, width=100, height=30):
        self.sock = f"gpumon-test-{uuid.uuid4().hex[:8]}"
        self.size = (width, height)

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True,
                              check=check, timeout=10)

    def start(self, command: str, env: dict):
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                           if k in ("PYTHONPATH", "PATH", "HOME", "TZ"))
        self.run("new-session", "-d", "-s", "t", "-x", str(self.size[0]), "-y",
                 str(self.size[1]), f"env {exports} {command}; echo EXIT=$?; sleep 60")

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "t").stdout

    def wait_for(self, predicate, timeout=15.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if predicate(text) or time.monotonic() > deadline:
                return text
            time.sleep(0.3)

    def close(self):
        self.run("kill-server", check=False)


@pytest.fixture
def tmux():
    if not shutil.which("tmux"):
        pytest.skip("tmux not installed")
    t = Tmux()
    yield t
    t.close()


def test_live_screen_in_tmux(tmux, clean_env):
    """The issue's "done when": all four GPUs and the sync_stall verdict in a 100x30 pane."""
    env = dict(clean_env)
    env.pop("NO_COLOR", None)
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "gpumon", "watch", "--sim",
                                           "sync_stall:4"])
    tmux.start(cmd, env)
    spark = re.compile(r"[▁▂▃▄▅▆▇█]{12}")
    text = tmux.wait_for(lambda s: "SYNC STALL" in s and len(spark.findall(s)) >= 4)
    lines = text.splitlines()
    assert "SIMULATED sync_stall:4" in lines[0], text
    for g in range(4):        # utilization, then SM activity (every simulated GPU has GPM)
        assert any(re.match(rf"\s*{g} \S.* \d+% +\d+% ", line) for line in lines), text
    assert " util smact " in text, text
    assert "SYNC STALL" in text, text
    assert len(spark.findall(text)) >= 4                   # a sparkline per GPU
    assert all(len(line) <= 100 for line in lines)
    tmux.run("send-keys", "-t", "t", "C-c")
    after = tmux.wait_for(lambda s: "EXIT=" in s, timeout=10)
    assert "EXIT=0" in after, after
    assert "gpumon watched 4 SIMULATED GPUs" in after      # the summary, on the normal screen
    assert "╭" not in after and "SIMULATED sync_stall:4   4 GPUs" not in after  # screen left


def test_q_key_quits_and_no_color(tmux, clean_env):
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "gpumon", "--sim", "busy:1",
                                           "--no-color"])
    tmux.start(cmd, clean_env)
    text = tmux.wait_for(lambda s: "BUSY" in s or "NO VERDICT" in s)
    assert "SIMULATED busy:1" in text, text
    tmux.run("send-keys", "-t", "t", "q")
    after = tmux.wait_for(lambda s: "EXIT=" in s, timeout=10)
    assert "EXIT=0" in after and "gpumon watched 1 SIMULATED GPU" in after, after
    assert "q" not in after.splitlines()[0]                # the key was not echoed


def test_nvml_path_on_the_fake_library(gpumon_cmd, clean_env):
    """The real NVML code path (ctypes into the fake library): a metric the GPU does not
    support shows as missing, a GPU lost mid-run says so, and watching goes on."""
    import fakenvml_env
    why = fakenvml_env.skip_reason()
    if why:
        pytest.skip(why)
    env = fakenvml_env.env(clean_env, gpus=2, unsupported={1: ["power"]}, lost={1: 1.5})
    r = subprocess.run(gpumon_cmd + ["watch", "--duration", "3"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "2 GPUs" in lines[0] and "SIMULATED" not in lines[0]
    data = [x.split("|") for x in lines if LINE.match(x)]
    assert len(data) >= 3
    assert lines[1].startswith("time    |g0 util smact power|g1 util smact power|")
    assert data[0][2].split()[-1] == "-"                 # GPU 1 has no power reading: "-", not 0
    assert re.fullmatch(r"\d+W", data[0][1].split()[-1])
    assert data[0][1].split()[1] == "-"                  # no SM activity before two GPM samples
    assert re.fullmatch(r"\d+%", data[1][1].split()[1])
    assert data[-1][2].strip() == "lost" and data[-1][1].strip() != "lost"
    assert lines[-1].startswith("gpumon watched 2 GPUs (0,1) for 0:00:0")


def test_plain_lines_without_gpm_have_no_sm_column(gpumon_cmd, clean_env):
    """GPUs without GPM (before Hopper): NVML is asked before the header is written, so the
    lines keep utilization and power only, no column of dashes."""
    import fakenvml_env
    why = fakenvml_env.skip_reason()
    if why:
        pytest.skip(why)
    env = fakenvml_env.env(clean_env, gpus=2, unsupported={0: ["gpm"], 1: ["gpm"]})
    r = subprocess.run(gpumon_cmd + ["watch", "--duration", "2"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == "time    |g0 util power|g1 util power|verdict"


def test_every_gpu_lost_drops_the_verdict_and_says_so_once(gpumon_cmd, clean_env):
    """The last verdict does not stand for GPUs that are gone: the lines show "lost" and no
    verdict, one stderr line says no GPU is left, and watching goes on to the end."""
    import fakenvml_env
    why = fakenvml_env.skip_reason()
    if why:
        pytest.skip(why)
    env = fakenvml_env.env(clean_env, gpus=2, lost={0: 4.0, 1: 4.0})
    r = subprocess.run(gpumon_cmd + ["watch", "--duration", "7"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    data = [x.split("|") for x in r.stdout.splitlines() if LINE.match(x)]
    before = [d for d in data if d[1].strip() != "lost"]
    after = [d for d in data if d[1].strip() == "lost" and d[2].strip() == "lost"]
    assert any(d[3] != "----" for d in before) and len(after) >= 2, data
    assert all(d[3] == "----" for d in after), after
    said = [x for x in r.stderr.splitlines() if "lost" in x]
    assert said[-1].startswith("gpumon: GPU ") and said[-1].endswith(
        "lost (NVML: GPU is lost, it fell off the bus): no GPU is left; no verdict from now on")
    assert sum("no GPU is left" in x for x in said) == 1 and len(said) <= 2, said


def test_replay_names_every_gpu_of_an_nvml_log(tmp_path):
    """A poll through NVML writes one GPU's samples before the next GPU's, and a first read
    reaches back into the driver's history: GPU 0's first rows span more than a tick, so the
    log's first tick holds GPU 0 alone. Every GPU of the log is replayed all the same."""
    from dataclasses import replace
    from gpumon.commands.common import SelectGpus
    path = tmp_path / "nvml.csv"
    sink = CsvSink(str(path))
    for k, t in enumerate(ticks(2, 4)):
        if k == 0:          # GPU 0 from 1.5 s back, then GPU 1's last second
            early = tuple(replace(s, time=s.time - 0.5 - (5 - i) * 0.1)
                          for i, s in enumerate(x for x in t.gpus if x.gpu == 0))
            t = replace(t, gpus=early + tuple(s for s in t.gpus if s.gpu == 1))
        sink.write(t, diagnosis_at(k, 2))
    sink.close()
    src = ReplaySource(str(path), speed=1e6)
    assert [i.index for i in src.gpu_infos()] == [0, 1]
    assert src.gpu_infos()[1].mem_total_mib is not None
    one = SelectGpus(ReplaySource(str(path), speed=1e6), ["1"], "GPUs of the log")
    assert [i.index for i in one.gpu_infos()] == [1]
    assert {s.gpu for s in one.read().gpus} <= {1}
