"""`gpumon run -- CMD` judges CMD's own job: its process tree's GPUs, not every job on the node.

The end-to-end test runs two jobs on a 4-GPU fake node (tests/fakenvml): CMD's tree on GPUs
0-1 (a starved job) and a foreign tree on GPUs 2-3 (a sync-stalled one). CMD's ranks start
after gpumon does, so the fake learns their PIDs from FAKE_NVML_PIDS_FILE, which CMD writes.
"""
import csv
import io
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from gpumon.host import ProcessTree
from gpumon.monitor import EVERY, OWN, WAITING, CommandScope, Monitor, command_gpus
from proc_util import own_session
from gpumon.samples import GpuSample, HostSample, JobProcs, ProcSample, Tick

# A launcher and two ranks that sleep; prints the PIDs (launcher first) and waits.
LAUNCHER = r"""
import subprocess, sys, time
ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
print(" ".join(str(p) for p in [__import__("os").getpid()] + [r.pid for r in ranks]), flush=True)
time.sleep(120)
"""


@pytest.fixture
def foreign(tmp_path):
    """Another user's job: a launcher with two ranks, in its own session."""
    script = tmp_path / "foreign.py"
    script.write_text(LAUNCHER)
    with own_session([sys.executable, str(script)]) as p:
        pids = [int(x) for x in p.stdout.readline().split()]
        yield SimpleNamespace(launcher=pids[0], ranks=pids[1:])


# -- the process tree ------------------------------------------------------------------------
def test_process_tree_holds_descendants_only(foreign, tmp_path):
    """Root -> ranks are members; another tree, this process and unknown PIDs are not."""
    tree = ProcessTree(foreign.launcher)
    r0, r1 = foreign.ranks
    assert tree.members([r0, r1, foreign.launcher, os.getpid(), 4_000_000]) == \
        {r0, r1, foreign.launcher}
    assert ProcessTree(r0).members([r0, r1, foreign.launcher]) == {r0}


def test_process_tree_keeps_a_member_whose_parent_exited(tmp_path):
    """A rank placed while its launcher lived stays CMD's after the launcher dies (orphaned)."""
    script = tmp_path / "mid.py"
    script.write_text(LAUNCHER)
    # root (sh) -> launcher -> ranks; the launcher is killed, the ranks go to init.
    # (Orphaned ranks keep the session's process group: the session's end kills them too.)
    with own_session(["sh", "-c", f"{sys.executable} {script}; sleep 60"]) as root:
        launcher, r0, r1 = (int(x) for x in root.stdout.readline().split())
        tree = ProcessTree(root.pid)
        assert tree.members([r0]) == {r0}
        os.kill(launcher, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(f"/proc/{r0}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != launcher:
                    break
            time.sleep(0.05)
        # r0 is remembered. (Whether r1 counts depends on whether the parent map read it
        # before the launcher died: both answers are right, so only r0 is asserted.)
        assert r0 in tree.members([r0, r1])


# -- which GPUs are CMD's --------------------------------------------------------------------
def test_command_gpus_rules():
    mine = {10, 11}
    pids = {0: (10,), 1: (11, 99), 2: (50,), 3: (), 4: None}
    assert command_gpus(pids, mine, ()) == (0, 1)
    # A GPU that was CMD's stays while empty or unknown, not once others took it.
    assert command_gpus({0: (10,), 1: (), 2: None, 3: (50,)}, mine, (1, 2, 3)) == (0, 1, 2)


def _tick(t, pids, unmapped=(), procs=()):
    gpus = tuple(GpuSample(time=t, gpu=g, util_gpu_pct=50.0, pids=p) for g, p in pids.items())
    jobs = tuple(JobProcs(gpu=g, main_pid=(p or (None,))[0]) for g, p in pids.items())
    host = HostSample(time=t, jobs=jobs, procs=tuple(procs), unmapped_pids=tuple(unmapped))
    return Tick(time=t, gpus=gpus, host=host)


def test_scope_waits_then_judges_cmds_gpus_only():
    scope = CommandScope(lambda pids: {p for p in pids if p < 100})   # CMD's tree: PIDs < 100
    part = scope(_tick(1.0, {0: (), 1: (), 2: (500,), 3: (501,)}))
    assert scope.state == WAITING and part.gpus == () and part.judged == ()
    assert scope.others == (2, 3)                  # GPUs 0-1 hold no process: no job
    procs = [ProcSample(pid=10, ppid=1, name="py", role="main", cpu_pct=1.0, gpus=(0,)),
             ProcSample(pid=12, ppid=10, name="py", role="worker", cpu_pct=9.0),
             ProcSample(pid=13, ppid=12, name="py", role="worker", cpu_pct=9.0),
             ProcSample(pid=500, ppid=1, name="other", role="main", cpu_pct=1.0, gpus=(2,)),
             ProcSample(pid=501, ppid=500, name="other", role="worker", cpu_pct=1.0)]
    part = scope(_tick(2.0, {0: (10,), 1: (11,), 2: (500,), 3: (501,)}, procs=procs))
    assert scope.state == OWN and scope.gpus == (0, 1) and scope.others == (2, 3)
    assert {s.gpu for s in part.gpus} == {0, 1} and part.judged == (0, 1)
    assert [j.gpu for j in part.host.jobs] == [0, 1]
    assert [p.pid for p in part.host.procs] == [10, 12, 13]
    assert not scope.dropped
    # A rank ends: its GPU goes idle and stays CMD's; another job takes GPU 1: no longer.
    scope(_tick(3.0, {0: (10,), 1: (), 2: (500,), 3: (501,)}))
    assert scope.gpus == (0, 1) and not scope.dropped
    scope(_tick(4.0, {0: (10,), 1: (777,), 2: (500,), 3: (501,)}))
    assert scope.gpus == (0,) and scope.dropped and scope.used == (0, 1)


def test_scope_judges_every_gpu_when_pids_cannot_be_told():
    # GPU processes that appeared after the start and are not visible here (a container).
    scope = CommandScope(lambda pids: set())
    scope(_tick(1.0, {0: (), 1: (900,)}, unmapped=(900,)))
    assert scope.state == WAITING           # there before CMD could be: someone else's
    part = scope(_tick(2.0, {0: (4242,), 1: (900,)}, unmapped=(900, 4242)))
    assert scope.state == EVERY and part.judged is None and len(part.gpus) == 2
    scope(_tick(3.0, {0: (), 1: (900,)}, unmapped=(900,)))
    assert scope.state == EVERY             # stays, no flapping back to waiting
    # No GPU reports its processes at all.
    blind = CommandScope(lambda pids: set())
    blind(_tick(1.0, {0: None, 1: None}))
    assert blind.state == EVERY and blind.gpus == (0, 1)


class _Source:
    kind = "nvml"

    def __init__(self, ticks):
        self.ticks = list(ticks)

    def gpu_infos(self):
        return []

    def read(self):
        return self.ticks.pop(0)

    def close(self):
        pass


class _Detector:
    def __init__(self):
        self.seen, self.resets = [], 0

    def update(self, tick):
        self.seen.append(sorted({s.gpu for s in tick.gpus}))
        return [SimpleNamespace(gpus=tuple(self.seen[-1]))]

    def reset(self):
        self.resets += 1


def test_monitor_feeds_the_detector_the_judged_part_and_sinks_the_whole_tick():
    ticks = [_tick(1.0, {0: (), 1: (500,)}), _tick(2.0, {0: (10,), 1: (500,)}),
             _tick(3.0, {0: (10,), 1: (500,)}), _tick(4.0, {0: (600,), 1: (500,)})]
    det = _Detector()
    scope = CommandScope(lambda pids: {p for p in pids if p < 100})
    mon = Monitor(_Source(ticks), detector=det, scope=scope)
    whole, parts = [], []
    mon.listeners.append(lambda t, d: whole.append((t, d)))
    mon.judged_listeners.append(lambda t, d: parts.append(t))
    for _ in range(4):
        mon.step()
    assert det.seen == [[0], [0]]                 # waiting: not called; gone: not called
    assert [d for _, d in whole][0] == [] and [d for _, d in whole][3] == []
    assert all(len(t.gpus) == 2 for t, _ in whole)          # every GPU for the screen
    assert [t.judged for t, _ in whole] == [(), (0,), (0,), ()]
    assert [len(t.gpus) for t in parts] == [0, 1, 1, 0]
    assert det.resets == 1                         # GPU 0 left the judged ones


# -- the fake library's PID file ---------------------------------------------------------------
def test_fake_pids_file_is_read_again_when_it_changes(fake_nvml_env, tmp_path):
    path = tmp_path / "pids"
    env = fake_nvml_env(gpus=3, pids={2: [99]})
    env["FAKE_NVML_PIDS_FILE"] = str(path)
    code = textwrap.dedent(f"""
        import os, pynvml as N
        N.nvmlInit()
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        show = lambda: [[p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(x)] for x in h]
        def put(text):
            open({str(path)!r} + ".new", "w").write(text)
            os.replace({str(path)!r} + ".new", {str(path)!r})
        print(show())
        put("0:11,12\\n1:13\\n"); print(show())
        put("*:5"); print(show())
        put("0:x"); print(show())
        os.remove({str(path)!r}); print(show())
    """)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["[[], [], [99]]", "[[11, 12], [13], [99]]",
                                        "[[5], [5], [5]]", "[[], [], [99]]", "[[], [], [99]]"]
    assert "FAKE_NVML_PIDS_FILE" in r.stderr and "0:x" in r.stderr
    path.write_text("7:1")                         # malformed at nvmlInit: init fails
    r = subprocess.run([sys.executable, "-c", "import pynvml as N; N.nvmlInit()"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "FAKE_NVML_PIDS_FILE" in r.stderr


# -- end to end over the fake library ----------------------------------------------------------
def _node_trace(path, seconds=30):
    """A 4-GPU trace: data_starvation on GPUs 0-1, sync_stall on GPUs 2-3. The starved job
    uses gloo, whose waiting ranks idle: with NCCL its ranks drift apart and, depending on
    which seconds of the trace a run happens to replay, read for a moment as a straggler."""
    from gpumon.sim.trace import write_trace
    parts = []
    for name, params in (("data_starvation", {"backend": "gloo"}), ("sync_stall", None)):
        buf = io.StringIO()
        write_trace(buf, name, gpus=2, seconds=seconds, params=params)
        parts.append([line.split("\t") for line in buf.getvalue().splitlines()
                      if line and not line.startswith("#")])
    (h, *_), (h2, *_) = parts
    assert h[4:] == h2[4:]                          # same period and duration
    out = ["\t".join(h[:3] + ["4"] + h[4:])]
    rows: dict[str, list] = {}
    for k, lines in enumerate(parts):
        for f in lines:
            if f[0] == "G":
                f[1] = str(int(f[1]) + 2 * k)
                f[3] = f"GPU-node0000-0000-4000-8000-{int(f[1]):012d}"
                out.append("\t".join(f))
            elif f[0] == "S":
                f[2] = str(int(f[2]) + 2 * k)
                rows.setdefault(f[1], []).append(f)
    for t in sorted(rows, key=int):
        out += ["\t".join(f) for f in sorted(rows[t], key=lambda f: int(f[2]))]
    path.write_text("\n".join(out) + "\n")


CMD = r"""
import os, subprocess, sys, time
pids_file, foreign = sys.argv[1], sys.argv[2]
time.sleep(2.5)                     # start-up: not on a GPU yet
ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
with open(pids_file + ".new", "w") as f:
    f.write(f"0:{ranks[0].pid};1:{ranks[1].pid};{foreign}")
os.replace(pids_file + ".new", pids_file)
print("ranks started", flush=True)
time.sleep(20)                      # long enough that the start-up pause is a small share
for r in ranks:
    r.kill()
sys.exit(3)
"""


def test_run_judges_only_the_commands_gpus(gpumon_cmd, fake_nvml_env, foreign, tmp_path):
    trace = tmp_path / "node.trace"
    _node_trace(trace)
    pids_file = tmp_path / "pids"
    other = f"2:{foreign.ranks[0]};3:{foreign.ranks[1]}"
    pids_file.write_text(f"0:;1:;{other}")         # start: only the other job on the node
    env = fake_nvml_env(scenario=str(trace))
    env["FAKE_NVML_PIDS_FILE"] = str(pids_file)
    script = tmp_path / "train.py"
    script.write_text(CMD)
    log = tmp_path / "run.csv"
    r = subprocess.run(gpumon_cmd + ["run", "--log", str(log), "--", sys.executable,
                                     str(script), str(pids_file), other],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 3, r.stderr
    name = os.path.basename(sys.executable)
    notes = [line for line in r.stderr.splitlines() if line.startswith("gpumon:")]
    assert notes[:2] == [f"gpumon: waiting for `{name}` to use a GPU; GPUs 2,3: other jobs, "
                         "not judged",
                         f"gpumon: `{name}` uses GPUs 0,1; GPUs 2,3: other jobs, not judged"]
    summary = r.stderr.splitlines()[-1]      # (gpumon's own lines: stderr, CMD's: stdout)
    assert summary.startswith("gpumon ran `") and " on 2 GPUs (0,1) for " in summary, summary
    assert "Main finding: data_starvation" in summary and "on GPUs 0,1" in summary
    # Nothing of the other job's sync stall on GPUs 2-3. (The command's own starved job may
    # read as a straggler for a second of its short real-time replay: that names GPU 0 or 1.)
    assert "GPU 2" not in summary and "GPU 3" not in summary
    assert summary.endswith("The command exited with code 3.")

    rows = list(csv.DictReader(log.open()))
    assert {row["gpu"] for row in rows} == {"0", "1", "2", "3"}    # the node, every GPU
    judged = {row["gpu"] for row in rows if row["verdict"]}
    assert judged == {"0", "1"}, judged
    assert {row["verdict"] for row in rows if row["verdict"]} >= {"data_starvation"}
    assert {row["straggler_gpu"] for row in rows} <= {"", "0", "1"}
    # The plain lines never showed the other job's verdict either ("sync imbalance gpu2").
    verdicts = [line.rsplit("|", 1)[-1] for line in r.stderr.splitlines()
                if re.match(r"\d\d:\d\d:\d\d\|", line)]
    assert verdicts and not any(re.search(r"gpu[23]\b", v) for v in verdicts), verdicts


def test_run_of_a_command_that_never_uses_a_gpu(gpumon_cmd, fake_nvml_env, foreign, tmp_path):
    """Only another job on the node: nothing is judged, and the summary says why."""
    pids_file = tmp_path / "pids"
    pids_file.write_text(f"0:{foreign.ranks[0]};1:{foreign.ranks[1]}")
    env = fake_nvml_env(scenario="sync_stall")
    env["FAKE_NVML_PIDS_FILE"] = str(pids_file)
    log = tmp_path / "run.csv"
    r = subprocess.run(gpumon_cmd + ["run", "--log", str(log), "--", "sh", "-c", "sleep 4"],
                       capture_output=True, text=True, env=env, timeout=40)
    assert r.returncode == 0, r.stderr
    assert "gpumon: waiting for `sh` to use a GPU; GPUs 0,1: other jobs, not judged" in r.stderr
    summary = r.stderr.splitlines()[-1]
    assert summary.startswith("gpumon ran `sh -c 'sleep 4'` for 0:00:0")
    assert summary.endswith(": none of its processes used a GPU, so nothing was judged. "
                            "The command exited with code 0.")
    rows = list(csv.DictReader(log.open()))
    assert rows and not any(row["verdict"] for row in rows)


EVERY_CMD = r"""
import os, sys, time
time.sleep(1.5)
# PIDs the host cannot see (as NVML's host PIDs look from inside a container)
with open(sys.argv[1] + ".new", "w") as f:
    f.write("0:4194001;1:4194002")
os.replace(sys.argv[1] + ".new", sys.argv[1])
time.sleep(9)
"""


def test_run_judges_every_gpu_when_its_processes_cannot_be_told(gpumon_cmd, fake_nvml_env,
                                                                 tmp_path):
    pids_file = tmp_path / "pids"
    pids_file.write_text("0:;1:")
    env = fake_nvml_env(scenario="data_starvation")
    env["FAKE_NVML_PIDS_FILE"] = str(pids_file)
    script = tmp_path / "train.py"
    script.write_text(EVERY_CMD)
    log = tmp_path / "run.csv"
    r = subprocess.run(gpumon_cmd + ["run", "--log", str(log), "--", sys.executable,
                                     str(script), str(pids_file)],
                       capture_output=True, text=True, env=env, timeout=40)
    assert r.returncode == 0, r.stderr
    name = os.path.basename(sys.executable)
    assert (f"gpumon: cannot tell `{name}`'s GPUs (their processes are not visible on this "
            "host: a container?); judging every GPU") in r.stderr
    summary = r.stderr.splitlines()[-1]
    assert " on 2 GPUs (0,1) for " in summary and "Main finding: data_starvation" in summary
    assert "Every GPU was judged" in summary
    rows = list(csv.DictReader(log.open()))
    assert {row["gpu"] for row in rows if row["verdict"]} == {"0", "1"}
