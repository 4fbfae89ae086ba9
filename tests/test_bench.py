"""Smoke tests of the benchmark harness (bench/): the /proc readers, the stand-in job, the
measurement loop, the profile summary and the generated nvidia-smi log. Not the benchmark."""
import csv
import os
import shutil
import subprocess
import sys
import time

import pytest

from bench import analysis, overhead, procfs, profile
from bench.proctree import ProcTree

BURN = r"""
import os, sys, time
burn = float(sys.argv[1])
if len(sys.argv) > 2:                      # also a child that burns as much
    if os.fork() == 0:
        t = time.process_time()
        while time.process_time() - t < burn: pass
        time.sleep(60); os._exit(0)
t = time.process_time()
while time.process_time() - t < burn: pass
block = bytearray(48 * 1024 * 1024)        # touched: resident
for i in range(0, len(block), 4096): block[i] = 1
print("ready", flush=True)
time.sleep(60)
"""


def _start(*args):
    p = subprocess.Popen([sys.executable, "-c", BURN, *args], stdout=subprocess.PIPE,
                         start_new_session=True)
    assert p.stdout.readline().strip() == b"ready"
    return p


def _end(p):
    os.killpg(p.pid, 9)
    p.wait()
    p.stdout.close()


def test_tree_cpu_counts_the_process_and_its_children():
    p = _start("0.3", "child")
    try:
        alone = procfs.tree_cpu(p.pid, tree=False)
        deadline = time.monotonic() + 30    # the child finishes its burn too (a busy machine)
        while True:
            whole = procfs.tree_cpu(p.pid)
            if whole.exact_s >= alone.exact_s + 0.3 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert whole.pids == 2 and alone.pids == 1
        assert 0.3 <= alone.exact_s < 0.9
        assert whole.exact_s >= alone.exact_s + 0.29
        # The tick figure agrees with the nanosecond one within a few ticks.
        assert abs(whole.ticks_s - whole.exact_s) <= 4 / procfs.CLK_TCK
        assert procfs.peak_rss_mib(p.pid) >= 48
        assert procfs.alive(p.pid)
    finally:
        _end(p)
    assert not procfs.alive(p.pid)
    with pytest.raises(ProcessLookupError):
        procfs.tree_cpu(p.pid)


def test_proctree_mains_workers_and_cleanup():
    with ProcTree(mains=2, workers=3) as tree:
        assert len(tree.mains) == 2 and len(tree.all_pids) == 8
        kids = procfs.children_map()
        for m in tree.mains:
            assert sorted(kids.get(m, [])) == sorted(tree.workers[m])
            assert all(procfs.alive(w) for w in tree.workers[m])
        assert tree.fake_pids() == f"0:{tree.mains[0]};1:{tree.mains[1]}"
        assert tree.fake_pids(1) == f"0:{tree.mains[0]}"
        pids = tree.all_pids
    time.sleep(0.2)
    assert not any(procfs.alive(p) for p in pids)


def _marks(*pairs):
    return [(t, procfs.CpuTimes(ticks_s=tk, exact_s=ex, pids=1)) for t, tk, ex in pairs]


def test_rates_use_nanoseconds_unless_a_thread_ended():
    rates, used_ticks = overhead._rates(_marks((0, 1.00, 1.000), (10, 1.01, 1.012),
                                               (20, 1.03, 1.031)))
    assert not used_ticks
    assert rates == pytest.approx([0.12, 0.19])
    # The nanosecond sum fell back (a thread that had run 0.5 s ended): ticks are used.
    rates, used_ticks = overhead._rates(_marks((0, 1.0, 1.0), (10, 1.1, 0.6)))
    assert used_ticks and rates == pytest.approx([1.0])


@pytest.mark.parametrize("tmux", [False, True])
def test_measure_a_program_of_known_cost(monkeypatch, tmp_path, tmux):
    if tmux and not shutil.which("tmux"):
        pytest.skip("tmux is not installed")
    monkeypatch.setattr(overhead, "WARMUP_MIN_S", 0.3)
    script = tmp_path / "duty.py"
    # 20 ms of CPU every 100 ms: 20% of one core.
    script.write_text("import time\nwhile True:\n    t = time.process_time()\n"
                      "    while time.process_time() - t < 0.02: pass\n    time.sleep(0.08)\n")
    s = overhead.Subject("duty", "20%", 0, (sys.executable, str(script)), tmux=tmux)
    m = overhead.measure(s, dict(os.environ), str(tmp_path), window_s=1.0, repeats=2)
    assert m.error is None
    assert len(m.cpu_pct) == 2
    assert 3 < m.mean < 25          # below 20 when the machine is busy, never above
    assert m.rss_mib and m.rss_mib > 1
    assert (m.term_mean is not None) == tmux


def test_measure_reports_a_program_that_dies(monkeypatch):
    monkeypatch.setattr(overhead, "WARMUP_MIN_S", 0.2)
    s = overhead.Subject("dies", "", 0, (sys.executable, "-c",
                                         "import sys; sys.exit('bad option')"))
    m = overhead.measure(s, dict(os.environ), ".", window_s=0.2, repeats=1)
    assert m.error and "bad option" in m.error and m.mean is None


def test_profile_summary_charges_parts_and_functions(tmp_path):
    src = tmp_path / "loop.py"
    src.write_text("def run():\n    stop.wait(1.0)\n")
    x = "/nonexistent/"
    text = (f"run ({x}gpumon/monitor.py:70);step ({x}gpumon/monitor.py:53);"
            f"read ({x}gpumon/host.py:130);children ({x}psutil/__init__.py:951) 6\n"
            f"run ({x}gpumon/monitor.py:70);step ({x}gpumon/monitor.py:54);"
            f"update ({x}gpumon/detect/stream.py:80) 3\n"
            f"<module> ({x}site.py:1) 1\n"
            f"run ({src}:2) 5\n")                      # blocked in a wait: left out
    s = profile.summarize(profile.parse_collapsed(text))
    assert s.samples == 10 and s.waiting == 5
    parts = dict(s.parts)
    assert parts["host sampling (gpumon/host.py, psutil)"] == pytest.approx(0.6)
    assert parts["detector (gpumon/detect)"] == pytest.approx(0.3)
    incl = dict(s.inclusive)
    assert incl["step (/nonexistent/gpumon/monitor.py)"] == pytest.approx(0.9)
    assert dict(s.self_)["children (/nonexistent/psutil/__init__.py)"] == pytest.approx(0.6)
    md = "\n".join(profile.markdown(s, cpu_pct=2.0))
    assert "| host sampling (gpumon/host.py, psutil) | 60% (1.20) |" in md


def test_day_log_is_nvidia_smi_csv(tmp_path):
    path = str(tmp_path / "day.csv")
    assert analysis.write_day(path, seconds=3 * 3600, gpus=8) == 3 * 3600 * 8
    with open(path) as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    assert rows[0][:5] == ["timestamp", "index", "name", "pci.bus_id", "utilization.gpu [%]"]
    assert len(rows) == 1 + 3 * 3600 * 8
    assert rows[1][0] == "2024/05/01 00:00:00.000" and rows[8][1] == "7"
    assert rows[9][0] == "2024/05/01 00:00:01.000"
    util = [int(r[4].split()[0]) for r in rows[1:]]
    assert min(util) == 0 and max(util) == 100
    assert all(r[8].endswith(" W") and r[13].startswith("0x") for r in rows[1:100])
    # Every phase of the synthetic day occurs in a day.
    phases = set(analysis.phase_of_second(analysis.DAY_S).tolist())
    assert phases == set(range(len(analysis.PHASES)))


def test_onset_of_starvation_is_when_a_gpu_first_waits():
    """bench.detect times verdicts from the change and from the physical onset: a starved
    job starts on a full prefetch queue, so its first wait comes after the change."""
    from bench.detect import ONSET_WAIT_SHARE, onset, simulate_run
    ticks, change, _ = simulate_run("data_starvation", 2, 7001022)
    t = onset(ticks, change)
    assert t >= change
    first = next(tk for tk in ticks if tk.time - 1.0 == t)
    assert max(st["waiting_data"] for st in first.truth.states.values()) >= ONSET_WAIT_SHARE
    before = [tk for tk in ticks if change < tk.time <= t]
    assert all(max(st["waiting_data"] for st in tk.truth.states.values()) < ONSET_WAIT_SHARE
               for tk in before)
    ticks2, change2, _ = simulate_run("sync_stall", 2, 7001052)
    assert onset(ticks2, change2) == change2


def test_false_verdicts_after_a_healthy_job_waited_for_data_are_counted_apart():
    """A negative scenario's false starvation within WAIT_LOOKBACK_S of a second in which
    the simulated job's GPU waited for data outside a pause is counted apart; one with no
    such wait before it is not."""
    from bench.detect import Score, WAIT_LOOKBACK_S
    t = [100.0 + i for i in range(60)]
    res = {"name": "busy", "n": 2, "seed": 1, "step_s": 0.5, "backend": "nccl",
           "change": 100.0, "onset": 100.0, "t": t,
           "truth": [("busy", None, False, True, False)] * 60,
           "waits": [130.0],
           "a": [("data_starvation", None) if i in (20, 31, 45, 55) else ("busy", None)
                 for i in range(60)]}
    sc = Score()
    sc.add(res, "a")
    assert sum(sc.neg_bad.values()) == 4
    # 131 and 145 follow the wait at 130 within 20 s; 120 comes before it, 155 too late.
    assert WAIT_LOOKBACK_S == 20.0 and sc.neg_after_wait == 2


def test_seconds_beside_a_change_of_the_true_verdict_are_scored_apart():
    """The collar: the two seconds beside each change of the true verdict leave the scored
    confusion matrix and stay in the strict one; a second not scored makes no change."""
    from bench.detect import Score, collar
    assert collar(["busy", "busy", "paused", "paused", None, "busy"]) == [
        False, True, True, False, False, False]
    t = [100.0 + i for i in range(40)]
    truth = ["paused" if 20 <= i < 30 else "busy" for i in range(40)]
    # The detector holds the pause a second past its end, and adds one far from it.
    pred = ["paused" if 20 <= i <= 30 or i == 35 else "busy" for i in range(40)]
    res = {"name": "checkpoint", "n": 2, "seed": 1, "step_s": 0.5, "backend": "nccl",
           "change": 100.0, "onset": 100.0, "t": t,
           "truth": [(v, None, v == "paused", False, False) for v in truth],
           "a": [(v, None) for v in pred]}
    sc = Score()
    sc.add(res, "a")
    assert sc.collared == 4                                   # 19, 20, 29, 30
    assert sc.strict[("busy", "paused")] == 2 and sc.cm[("busy", "paused")] == 1
    p, r, _ = sc.precision_recall()["paused"]
    assert (p, r) == (8 / 9, 1.0)
    p, r, _ = sc.precision_recall(sc.strict)["paused"]
    assert (p, r) == (10 / 12, 1.0)


def test_truth_is_labelled_by_what_the_gpus_waited_for():
    """One rank waiting for its input while every other waits for it in the collective is
    that rank's wait (named); several ranks waiting for input is the job's. In path (b) a
    gloo job's second dominated by its idle all-reduce is ambiguous without host counters:
    counted apart, not scored."""
    from types import SimpleNamespace as NS
    from bench.detect import Score, _lone_data_wait
    waits = {0: {"waiting_data": 0.7}, 1: {"waiting_sync": 0.8}, 2: {"waiting_sync": 0.6}}
    assert _lone_data_wait(NS(states=waits)) == 0
    waits[1] = {"waiting_data": 0.6}
    assert _lone_data_wait(NS(states=waits)) is None
    t = [100.0 + i for i in range(20)]
    res = {"name": "sync_stall", "n": 2, "seed": 1, "step_s": 0.5, "backend": "gloo",
           "change": 100.0, "onset": 100.0, "t": t,
           "truth": [("sync_stall", 1, False, False, i >= 10) for i in range(20)],
           "b": [("data_starvation", None)] * 20}
    sc = Score()
    sc.add(res, "b")
    assert sum(sc.ambiguous.values()) == 10
    assert sum(sc.cm.values()) == 4     # 106-109 s (t <= change + SKIP_S is never scored)


def test_nvidia_smi_logs_read_utilization_both_ways_for_every_gpu_count():
    """Path (b) renders half the runs with the last 1/6 s utilization period of each second
    and half with the mean of the second, for every scenario and GPU count (a run's own
    seed parity is its GPU count's, which would give 1-GPU runs one way only)."""
    from collections import Counter
    from bench.detect import nvsmi_mode, plan
    from bench.seeds import SCORING_SEEDS, TUNING_SEEDS
    for seeds in (TUNING_SEEDS, SCORING_SEEDS):
        c = Counter((name, n, nvsmi_mode(s)) for name, n, s in plan(seeds))
        for name, n, _ in plan(seeds[:1]):
            assert c[(name, n, "mean")] == c[(name, n, "last")] == len(seeds) // 2


def test_memory_of_log_stays_flat_over_a_simulated_run():
    """`gpumon log --sim busy:8 --interval 0.1` over 5 simulated minutes (about 10 s here):
    nothing grows with the run (the screen history it once kept grew 9 MiB a minute)."""
    from bench import memory
    r = memory.measure("log", "busy:8", 0.1, seconds=300)
    assert not r.get("error"), r
    assert r["exit_code"] == 0 and r["rss"][-1][0] >= 299
    assert r["growth_mib"] is not None and r["growth_mib"] < 8.0, r["rss"]
    assert r["peak_mib"] < memory.RSS_MAX_MIB
    text = "\n".join(memory.format_result([r]))
    assert "| `log` | busy:8 | 0.1 s |" in text


def test_memory_table_says_the_settled_rss_and_a_shortened_run():
    from bench import memory
    row = {"command": "stream", "scenario": "demo:8", "interval": 0.1, "seconds": 1200.0,
           "exit_code": 0, "wall_s": 30.0, "peak_mib": 45.5, "settled_mib": 44.25,
           "growth_mib": 0.5, "rss": []}
    text = "\n".join(memory.format_result([row]))
    assert "| `stream` | demo:8 | 0.1 s | 45.5 | 44.2 | +0.5 | 30 |" in text
    assert "settled is VmRSS at minute 4" in text and "A shortened run (20 min)" in text
    assert "past the 10-minute limit" in text
    short = "\n".join(memory.format_result([dict(row, seconds=300.0)]))
    assert "shorter than the 10-minute history limit" in short
    full = "\n".join(memory.format_result([dict(row, seconds=3600.0)]))
    assert "minute 10" in full and "shortened" not in full


def test_memory_bench_refuses_an_unknown_command(capsys):
    from bench import memory
    with pytest.raises(SystemExit) as exc:
        memory.main(["--commands", "log,top"])
    assert exc.value.code == 2
    assert "unknown command(s): top" in capsys.readouterr().err


def test_a_lone_data_waiter_is_a_straggler_only_when_the_same_rank_lasts():
    """Every rank starving, a different one last each second: the job waits, no straggler
    (the straggler is the GPU the others wait for over the span a verdict describes); the
    same rank last in most of a window_s span around the second: that rank."""
    from types import SimpleNamespace as NS
    from bench.detect import _steady_lone_waiters

    def tick(t, lone):
        st = {g: ({"waiting_data": 0.7} if g == lone else {"waiting_sync": 0.7})
              for g in range(4)}
        return NS(time=float(t), truth=NS(states=st))
    turns = [tick(t, t % 4) for t in range(20)]
    assert _steady_lone_waiters(turns)[6:] == [None] * 14     # (a full window_s)
    same = [tick(t, 2 if t % 3 else 1) for t in range(20)]
    got = _steady_lone_waiters(same)
    assert [g for g in got[6:] if g is not None] and set(got[6:]) <= {2, None}
    assert got[6:].count(2) == sum(1 for t in range(6, 20) if t % 3)


def test_real_seconds_label_each_second_by_its_physics():
    """bench/real/seconds: a second is a stall where one GPU is idle while the others spin,
    work where every GPU computes, unscored otherwise; each compared with the timeline's
    verdict for that second."""
    import numpy as np
    from types import SimpleNamespace
    from bench.real import seconds
    # 4 seconds of 2 GPUs, 2 samples each: work, stall (GPU 0 idle), a save starting, work.
    util = {0: [90, 92, 5, 0, 60, 10, 95, 95], 1: [93, 91, 100, 100, 100, 100, 94, 96]}
    t = np.repeat(np.arange(100.0, 104.0), 2) + np.tile([0.1, 0.6], 4)
    s = SimpleNamespace(time=np.concatenate([t, t]), gpu=np.repeat([0, 1], 8),
                        util=np.array(util[0] + util[1], float), mem=None, power=None,
                        power_limit=None)
    assert seconds.physics(s) == {100: "work", 101: "stall", 103: "work"}
    seg = lambda v, a, b: SimpleNamespace(verdict=v, start=a, end=b)   # noqa: E731
    tl = SimpleNamespace(segments=[seg("busy", 100, 101), seg("sync_stall", 101, 104)])
    c, live = seconds.score(s, tl)
    assert c == {("work", "busy"): 1, ("stall", "sync_stall"): 1, ("work", "sync_stall"): 1}
    # The live detector judged the same seconds, each at the tick that completed it.
    assert sum(live.values()) == 3 and {p for p, _ in live} == {"stall", "work"}, live
    assert "| a | live | 1/1 | 0/2 | 1 |" in "\n".join(seconds.table([("a", (c, live))]))
    assert seconds.applies({"gpus": 8, "expected_shares": {"sync_stall": 0.3, "busy": 0.7}})
    assert not seconds.applies({"gpus": 1, "expected_shares": {"busy": 1.0}})


def test_live_shares_set_aside_idle_at_either_end_unless_only_pauses_are_left(monkeypatch):
    """bench-real's live column: idle and insufficient_data seconds at either end are set
    aside as analyze's summary sets them aside, but a log in which the live detector said only
    'paused' between them (a model loaded, then left idle) keeps them all."""
    from bench.real import seconds
    said = {}
    monkeypatch.setattr(seconds, "live_verdicts", lambda samples: said)
    said.update(enumerate(["idle"] * 3 + ["busy"] * 6 + ["data_starvation"] * 2 + ["idle"] * 5))
    assert seconds.live_shares(None) == pytest.approx({"busy": 0.75, "data_starvation": 0.25})
    said.clear()
    said.update(enumerate(["insufficient_data"] + ["paused"] * 3 + ["idle"] * 6))
    assert seconds.live_shares(None) == pytest.approx(
        {"insufficient_data": 0.1, "paused": 0.3, "idle": 0.6})


def test_gpm_section_scores_false_stalls_and_stall_recall():
    """The GPM section counts a healthy scenario's busy seconds read sync_stall and a stall
    scenario's stalled seconds read as their truth, per GPM mode and over its seeds only,
    after SKIP_S and outside the collar."""
    from bench.detect import SKIP_S, gpm_counts
    t = [100.0 + i for i in range(40)]

    def res(name, gpm, seed, truth, pred):
        return {"name": name, "gpm": gpm, "seed": seed, "change": 100.0, "t": t,
                "truth": [(v, None, False, False, False) for v in truth], "a": pred}
    busy = ["busy"] * 40
    stalled = [("sync_stall", None) if i % 4 == 0 else ("busy", None) for i in range(40)]
    results = [res("ddp_spread", "none", 1004, busy, stalled),
               res("ddp_spread", "all", 1004, busy, [("busy", None)] * 40),
               res("ddp_spread", "none", 3004, busy, [("busy", None)] * 40)]
    scored = [i for i in range(40) if t[i] > 100.0 + SKIP_S]     # (as the tables)
    assert gpm_counts(results, "ddp_spread", "none", (1,)) == \
        (1, len(scored), sum(i % 4 == 0 for i in scored))
    assert gpm_counts(results, "ddp_spread", "all", (1,)) == (1, len(scored), 0)
    hang = ["busy"] * 20 + ["sync_stall"] * 20
    pred = [("busy", None)] * 25 + [("sync_stall", None)] * 15
    # Seconds 19 and 20 lie beside the change of truth (the collar); 21-24 read busy.
    assert gpm_counts([res("hang", "all", 1004, hang, pred)], "hang", "all", (1,)) == \
        (1, 19, 15)


def test_the_gpm_section_fails_the_bench_on_its_with_gpm_targets_only():
    from bench.detect import gpm_section
    t = [100.0 + i for i in range(40)]

    def res(gpm, pred):
        return {"name": "ddp_spread", "gpm": gpm, "seed": 1004, "change": 100.0, "t": t,
                "truth": [("busy", None, False, False, False)] * 40, "a": pred}
    calm, stalls = [("busy", None)] * 40, [("sync_stall", None)] * 40
    lines, ok = gpm_section([res("all", calm), res("none", stalls)], (1,))
    assert ok and any("| ddp_spread |" in x and "met" in x for x in lines)
    assert not gpm_section([res("all", stalls), res("none", calm)], (1,))[1]


def test_main_plan_leaves_the_gpm_only_scenarios_out():
    from bench.detect import GPM_ONLY, gpm_plan, plan
    runs = plan((1,))
    assert not {name for name, _, _ in runs} & set(GPM_ONLY)
    extra = gpm_plan((1,), runs)
    assert {(name, gpm) for name, _, _, _, gpm in extra if name in GPM_ONLY} == \
        {(name, gpm) for name in GPM_ONLY for gpm in ("all", "none")}
    assert all(gpm == "all" for name, _, _, _, gpm in extra if name not in GPM_ONLY)
