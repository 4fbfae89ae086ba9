"""`gpumon analyze` judges a stop with what followed it (gpumon/analyze/pauses.py): a dip
between two stretches of steady work is a pause; starvation does not end on its own."""
from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np

from gpumon.analyze import analyze_file, summary
from gpumon.analyze import pauses
from gpumon.analyze.pauses import two_sided
from gpumon.detect.seconds import seconds
from seconds_util import bins
from gpumon.detect.thresholds import DEFAULT

H = importlib.import_module("gpumon.analyze.hindsight")


def _smi(tmp_path, util: list[list[float]], name="smi.csv"):
    """An nvidia-smi --query-gpu log at 1 s: util[second][gpu] in %."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k, us in enumerate(util):
        stamp = f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000"
        for g, u in enumerate(us):
            rows.append(f"{stamp}, {g}, {u:.0f} %, 20000 MiB")
    p = tmp_path / name
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def _validation_run(ret: bool) -> list[list[float]]:
    """Steady work, then every GPU stops (a new DataLoader starting) and runs a choppy
    forward-only pass for half a minute; with ``ret`` steady work comes back for a minute."""
    rng = np.random.default_rng(3)
    out = [[98, 98]] * 60 + [[0, 0]] * 3
    out += [[100, 100] if k % 3 else [2, 3] for k in range(30)]
    out += [[98, 98]] * 60 if ret else [[100, 100] if k % 3 else [2, 3] for k in range(60)]
    return [[u + rng.uniform(-1, 1) if u > 50 else u for u in us] for us in out]


def _sim_log(tmp_path, name: str, gpus: int, seed: int, mode: str, th=DEFAULT):
    """(timeline, change time) of `gpumon analyze` (thresholds ``th``) on a detector-
    benchmark run rendered as an nvidia-smi log (bench.detect.render_nvsmi; ``mode`` "mean"
    or "last")."""
    from bench.detect import render_nvsmi, simulate_run
    ticks, change, _ = simulate_run(name, gpus, seed)
    path = tmp_path / f"{name}-{gpus}-{seed}.csv"
    path.write_text(render_nvsmi(ticks, mode))
    return analyze_file(str(path), th=th)[1], change


def _verdicts(tl, a: float, b: float) -> set:
    t0 = tl.start
    return {d.verdict for d in tl.segments if d.end > t0 + a and d.start < t0 + b}


def test_dip_between_steady_work_is_a_pause(tmp_path, monkeypatch):
    _, tl = analyze_file(_smi(tmp_path, _validation_run(ret=True)))
    assert _verdicts(tl, 5, 153) <= {"busy", "paused"}, [(d.verdict, d.start - tl.start)
                                               for d in tl.segments]
    # Live rules alone (no look at what came next) call the choppy pass starvation: the
    # test above can fail.
    monkeypatch.setattr(H, "HINDSIGHT", tuple(h for h in H.HINDSIGHT if h.name != "two_sided"))
    _, live = analyze_file(_smi(tmp_path, _validation_run(ret=True)))
    assert "data_starvation" in _verdicts(live, 60, 110)


def test_a_dip_that_never_ends_is_starvation(tmp_path):
    _, tl = analyze_file(_smi(tmp_path, _validation_run(ret=False)))
    assert "data_starvation" in _verdicts(tl, 70, 150)


def test_one_rank_stalling_again_and_again_is_not_a_pause(tmp_path):
    """GPU 0 idles for 15 s every 37 s while GPU 1 keeps its kernel spinning: steady in
    between, but one rank alone and recurring is that rank's input, not a pause."""
    util = [[98, 98]] * 40
    for _ in range(5):
        util += [[0, 100]] * 15 + [[98, 98]] * 22
    _, tl = analyze_file(_smi(tmp_path, util))
    assert {"data_starvation", "sync_stall"} & _verdicts(tl, 40, len(util))


def _two_sided(util, power=None):
    table = seconds(*bins(util, power=power))
    none = np.zeros(len(table), bool)
    return two_sided(H.make(DEFAULT, None, table, none, none, np.full(len(table), -1)))


def test_two_sided_marks_the_dip_only():
    util = np.array(_validation_run(ret=True), dtype=float).T / 100.0     # (G, T)
    m = _two_sided(util)
    idx = np.flatnonzero(m)
    assert idx[0] == 60 and idx[-1] < 100 and m[60:90].all(), idx
    assert not m[:60].any() and not m[100:].any()
    # The log ends 7 s after steady work came back: too short to know, nothing marked.
    assert not _two_sided(util[:, :100]).any()
    # It ends 12 s after (half of context_s: 10): the return is seen, the dip is a pause.
    m = _two_sided(util[:, :105])
    assert m[60:91].all() and not m[:60].any(), np.flatnonzero(m)


def test_a_validation_pass_just_before_the_log_ends_is_a_pause(tmp_path, monkeypatch):
    """A simulated 2-GPU job (a tuning seed of the detector benchmark) runs a validation pass
    96-109 s into the scenario, its choppy forward-only rhythm read as starvation live; the
    log ends 11 s after steady work came back. That is a return too, though the log ends
    before context_s of work after it: half of it (10 s) to the log's end is a return, and
    the pass is a pause."""
    tl, change = _sim_log(tmp_path, "validation", 2, 7018102, "mean")
    bad = [(d.verdict, d.start - change) for d in tl.segments
           if d.verdict not in ("busy", "paused") and d.end > change + 5]
    assert not bad, bad
    monkeypatch.setattr(pauses, "_tail_return", lambda *a: None)     # (no such return)
    tl2, _ = _sim_log(tmp_path, "validation", 2, 7018102, "mean")
    assert "data_starvation" in {d.verdict for d in tl2.segments if d.end > change + 90}


def test_lone_seconds_that_caught_a_step_boundary_keep_work_steady(tmp_path):
    """A simulated 1-GPU job rendered as nvidia-smi samples it at 1 s (the last value of each
    second, a tuning seed of the detector benchmark): two lone seconds read 0% (the sample
    fell between two steps) shortly before a 24 s checkpoint. The work before the checkpoint
    is still steady (blips_max), so the checkpoint is a pause, not starvation."""
    tl, change = _sim_log(tmp_path, "checkpoint", 1, 7131091, "last")
    bad = [(d.verdict, d.start - change) for d in tl.segments
           if d.verdict not in ("busy", "paused") and d.start > change + 5]
    assert not [b for b in bad if b[0] != "idle"], bad


def test_one_rank_stalling_just_before_the_log_ends_is_not_a_pause(tmp_path, monkeypatch):
    """One rank of four stalls 8 s in every 30 while the others spin; its last stall, 5 s,
    comes 14 s before the log ends: a lone rank's stall is not excused at the end of a log
    (the end-of-log return is for ranks that stopped together)."""
    util = [[98] * 4] * 60
    for _ in range(3):
        util += [[0, 100, 100, 100]] * 8 + [[98] * 4] * 22
    util += [[0, 100, 100, 100]] * 5 + [[98] * 4] * 14
    _, tl = analyze_file(_smi(tmp_path, util))
    assert {"data_starvation", "sync_stall"} & _verdicts(tl, len(util) - 19, len(util)), [
        (d.verdict, d.start - tl.start) for d in tl.segments]


def test_a_change_is_dated_from_when_the_new_verdict_first_appeared(tmp_path):
    """Live, a verdict changes after winning for hold_s; analyze dates the change from when
    the new verdict first appeared (never before the onset). Onset at 60 s: steady work, then
    2 s bursts and 2 s gaps on both GPUs."""
    util = [[98, 98]] * 60 + [[100, 100] if (k // 2) % 2 == 0 else [1, 2] for k in range(60)]
    _, tl = analyze_file(_smi(tmp_path, util))
    starts = [d.start - tl.start for d in tl.segments if d.verdict == "data_starvation"]
    assert starts and 60 <= starts[0] <= 66, [(d.verdict, d.start - tl.start)
                                              for d in tl.segments]


def _smi_mem(tmp_path, util, mem):
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k, (us, ms) in enumerate(zip(util, mem)):
        for g, (u, m) in enumerate(zip(us, ms)):
            rows.append(f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000, {g}, {u:.0f} %, "
                        f"{m:.0f} MiB")
    p = tmp_path / "start.csv"
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def test_a_job_starting_in_the_log_is_not_starving_while_its_ranks_come_up(tmp_path,
                                                                           monkeypatch):
    """4 GPUs free for 20 s; then the job's processes take every GPU at once and the ranks
    get their first batches one every 3 s, then run steady: busy, as live (the job is seen
    starting). Without that, the ranks' staggered start reads as starvation."""
    util = [[0] * 4] * 20 + [[0 if k < 3 * g else 98 for g in range(4)] for k in range(90)]
    mem = [[2] * 4] * 20 + [[20000] * 4] * 90
    path = _smi_mem(tmp_path, util, mem)
    _, tl = analyze_file(path)
    assert not {"data_starvation", "sync_stall"} & _verdicts(tl, 20, 110), [
        (d.verdict, d.start - tl.start) for d in tl.segments]
    from gpumon.detect import detector
    orig = detector.pause_flags
    monkeypatch.setattr(detector, "pause_flags", lambda *a, **k: orig(*a[:2]))
    _, tl2 = analyze_file(path)
    assert {"data_starvation", "sync_stall"} & _verdicts(tl2, 20, 110)


def _smi_power(tmp_path, rows):
    """An nvidia-smi log at 1 s with power: rows[second][gpu] = (util %, power W of 400)."""
    out = ["timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W], "
           "power.limit [W]"]
    for k, gs in enumerate(rows):
        for g, (u, w) in enumerate(gs):
            out.append(f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000, {g}, {u:.0f} %, "
                       f"20000 MiB, {w:.1f} W, 400.0 W")
    p = tmp_path / "power.csv"
    p.write_text("\n".join(out) + "\n")
    return str(p)


def test_ranks_coming_back_one_by_one_after_a_pause_are_not_a_stall(tmp_path):
    """Both ranks stop for 2 s, then rank 1 waits for rank 0's long first step back: for 3 s
    it spins cold beside rank 0 at work. Power is not compared in the first second after
    one with a GPU idle (the driver's 1 s power lag, thresholds.POWER_LAG_S), and the live tracker's pause lasts
    until work is back: no sync stall."""
    work = [[(100, 320), (100, 322)], [(100, 300), (100, 305)]] * 30
    rows = work + [[(0, 32), (0, 60)], [(0, 32), (0, 40)]]
    rows += [[(96, 316), (100, 100)], [(100, 316), (100, 100)], [(100, 316), (100, 110)]]
    rows += work
    _, tl = analyze_file(_smi_power(tmp_path, rows))
    # (From 5 s in: the log's first seconds are too few to judge.)
    assert _verdicts(tl, 5, len(rows)) <= {"busy", "paused"}, [(d.verdict, d.start - tl.start)
                                                                for d in tl.segments]


def test_a_log_that_starts_in_starvation_says_so_at_once(tmp_path):
    """The log starts while a job starves (2 s bursts, 2 s gaps on both GPUs): treated as a
    start, it is still starvation within 10 s, not a start-up pause."""
    util = [[100, 100] if (k // 2) % 2 == 0 else [1, 2] for k in range(90)]
    _, tl = analyze_file(_smi(tmp_path, util))
    starts = [d.start - tl.start for d in tl.segments if d.verdict == "data_starvation"]
    assert starts and starts[0] <= 10, [(d.verdict, d.start - tl.start) for d in tl.segments]


def test_a_job_that_ends_during_a_pause_leaves_its_gpus_idle(tmp_path):
    """Steady work, every GPU stops with its memory held (a pause), then the job exits and
    frees its memory: the GPUs are idle from then on, not held at the pause's `busy`."""
    util = [[98, 98]] * 60 + [[0, 0]] * 70
    mem = [[20000, 20000]] * 70 + [[2, 2]] * 60
    _, tl = analyze_file(_smi_mem(tmp_path, util, mem))
    assert _verdicts(tl, 80, 130) == {"idle"}, [(d.verdict, d.start - tl.start)
                                               for d in tl.segments]


def _starved_until(tl) -> float:
    """Seconds from the log's start to the end of its last starvation segment."""
    # (A lone rank stalling without host counters reads as a stall on its host.)
    ends = [d.end - tl.start for d in tl.segments if d.verdict in ("data_starvation",
                                                                  "sync_stall")]
    return max(ends) if ends else 0.0


def test_steady_work_long_after_a_lone_stall_ends_the_starvation(tmp_path):
    """One rank of four stalls 7 s once (a slow batch) while the others spin, in a minute of
    steady work on either side. The stall reads as starvation, but the steady work after it
    outlasts it: starvation ends recover_s (3 s) into that work (with the hold) rather than
    when the stall leaves the windows."""
    util = [[98] * 4] * 60 + [[0, 100, 100, 100]] * 7 + [[98] * 4] * 60
    _, tl = analyze_file(_smi(tmp_path, util))
    assert 62 <= _starved_until(tl) <= 67 + 3 + 2, [(d.verdict, d.start - tl.start, d.end
                                                    - tl.start) for d in tl.segments]
    # With recover_s longer than the work after the stall, nothing ends it early (analyze's
    # recovered and stall-end flags, the stall_over rule): it lasts as long as the windows.
    _, off = analyze_file(_smi(tmp_path, util), th=replace(DEFAULT, recover_s=100.0))
    assert _starved_until(off) > 67 + 3 + 2


def test_stalls_that_come_back_are_dated_to_their_seconds(tmp_path):
    """The same rank stalls 8 s in every 30. Each stall is a stall on that rank's host, and
    the steady work between them is busy: a log is labelled second by second, as the real
    2xTitan X traces of bench/real (3 s rank-0 saves every 13 s) are."""
    util = [[98] * 4] * 60
    for _ in range(4):
        util += [[0, 100, 100, 100]] * 8 + [[98] * 4] * 22
    _, tl = analyze_file(_smi(tmp_path, util))
    segs = [(d.verdict, d.start - tl.start) for d in tl.segments]
    # 6-14 s into the steady work after the second stall (98-120 s): busy.
    assert _verdicts(tl, 104, 112) == {"busy"}, segs
    # Each stall (60-68, 90-98, ...) reads as a stall on rank 0's host.
    for a in (60, 90, 120, 150):
        assert _verdicts(tl, a + 2, a + 6) == {"sync_stall"}, (a, segs)
    assert {(d.cause, d.straggler_gpu) for d in tl.segments if d.verdict == "sync_stall"} == {
        ("rank_host", 0)}


def test_rank0_saves_are_dated_to_their_seconds_at_a_real_jobs_level(tmp_path):
    """Rank 0 saves for 10 s in every 35 while the other ranks spin at 100% and a quarter of
    their power; between saves every GPU works at 88-91% (a real 8xH100 job's level in
    bench/real, under busy_bin_duty). Each save is a stall on rank 0's host from its first
    second, and the work after it is busy from its first second (1 s either way for the
    second a save starts or ends in)."""
    work = [[(88 if (k + g) % 2 else 91, 300.0) for g in range(4)] for k in range(25)]
    save = [[(5, 90.0)] + [(100, 95.0)] * 3] * 10
    rows = work * 2
    for _ in range(4):
        rows += save + work
    _, tl = analyze_file(_smi_power(tmp_path, rows))
    segs = [(d.verdict, d.start - tl.start, d.end - tl.start) for d in tl.segments]
    for a in (50, 85, 120, 155):
        assert _verdicts(tl, a + 1, a + 9) == {"sync_stall"}, (a, segs)
        assert _verdicts(tl, a + 11, a + 34) == {"busy"}, (a, segs)


def _analyze_sim(name: str, n: int, seed: int, mode: str):
    """(timeline, change time) of `gpumon analyze` on a simulated run (a tuning seed of the
    detector benchmark) rendered as nvidia-smi samples it at 1 s."""
    from bench.detect import render_nvsmi, simulate_run
    import os
    import tempfile
    ticks, change, _ = simulate_run(name, n, seed)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.csv")
        with open(path, "w") as f:
            f.write(render_nvsmi(ticks, mode))
        return analyze_file(path)[1], change


def _false_after_change(name: str, n: int, seed: int, mode: str) -> list:
    """Starvation or stall segments of a simulated healthy run, after the change."""
    tl, change = _analyze_sim(name, n, seed, mode)
    return [(d.verdict, round(d.start - change), round(d.end - change)) for d in tl.segments
            if d.verdict in ("data_starvation", "sync_stall") and d.end > change + 5]


def test_lone_seconds_after_a_pause_do_not_end_the_return():
    """A 4-GPU gloo job (1.46 s steps) sampled by nvidia-smi at the last instant of each
    second: after each 6 s checkpoint, one second in every seven or so catches the ranks
    between two steps. Work is back, with such lone seconds, as before the checkpoint
    (blips_max): the checkpoint is a pause. Requiring every second after it to be steady
    found no return, and the windows after it read starvation for 3 s."""
    assert _false_after_change("checkpoint", 4, 7038094, "last") == []


def test_ranks_taking_turns_at_idling_in_a_validation_pass_is_a_pause():
    """A 4-GPU job runs a 36 s validation pass whose loaders cannot keep up: each rank waits
    for its own batches (no all-reduce lines them up), so in most seconds some rank is idle
    beside others at work, a different one each time. One rank falling behind is the same
    rank again and again (test_one_rank_stalling_again_and_again_is_not_a_pause); this is
    the pass's rhythm, and steady work comes back after it: a pause."""
    assert _false_after_change("validation", 4, 7019104, "last") == []


def test_a_rhythm_whose_samples_catch_the_gap_every_few_steps_is_steady_before_a_pause():
    """An 8-GPU gloo job (0.7 s steps) sampled at the last instant of each second: one second
    in four catches ranks in the all-reduce, more than blips_max per context, while the job's
    duty over the context stays above duty_starved. Its validation pass is still a pause."""
    assert _false_after_change("validation", 8, 7035108, "last") == []


def test_a_rank_whose_one_second_stalls_keep_coming_back_is_not_at_work():
    """One rank of a 2-GPU NCCL job (a tuning seed) stalls for about a second every few
    seconds from the change on, idle beside its peer at work: the job's duty over a context
    stays near duty_starved, but those lone seconds are one rank's input, not samples that
    caught a step boundary. A stall on that rank's host from the first seconds (no host
    counters to say it is its input), not a pause."""
    tl, change = _analyze_sim("rank_data_stall", 2, 7033062, "last")
    stalls = [(d.start - change, d.end - change) for d in tl.segments
              if (d.verdict, d.cause) == ("sync_stall", "rank_host")]
    segs = [(d.verdict, round(d.start - change), round(d.end - change)) for d in tl.segments]
    # From the first seconds, and again and again (each stall dated to its seconds).
    assert stalls and stalls[0][0] <= 5, segs
    assert sum(b - max(a, 0) for a, b in stalls if b > 0) >= 0.3 * (tl.end - change), segs
    assert "paused" not in {d.verdict for d in tl.segments if d.start > change}, segs


def test_spinning_ranks_are_not_work_that_ends_a_stall(tmp_path):
    """GPU 3 computes 3 s (hot) and idles 2 s, again and again, while GPUs 0-2 sit at 100% and
    25% of their power, spinning in the collective. The seconds in which every GPU reads
    100% are not the job back at work (the others are cold): the whole stretch stays a sync
    stall naming GPU 3, not thousands of stall/busy flips."""
    work = [[(98, 340)] * 4] * 40
    stall = []
    for k in range(60):
        stall.append([(100, 100)] * 3 + [(100, 340) if k % 5 < 3 else (0, 60)])
    _, tl = analyze_file(_smi_power(tmp_path, work + stall + work))
    segs = [(d.verdict, d.cause, d.straggler_gpu, round(d.start - tl.start))
            for d in tl.segments]
    assert _verdicts(tl, 46, 96) == {"sync_stall"}, segs
    assert {d.straggler_gpu for d in tl.segments if d.verdict == "sync_stall"} == {3}, segs
    assert len(tl.segments) < 10, segs


def _save_every_13s(rank0: float) -> list[list[float]]:
    """A 2-GPU job logged at 1 s: 10 s of work then a 3 s stop, six times (the real titanx
    125M log's rhythm: torch.save every 50 steps). In the stop GPU 0 reads ``rank0``
    (the rank copying its state off the GPU) and GPU 1 nothing."""
    out = [[97, 97]] * 25
    for _ in range(6):
        out += [[rank0, 0]] * 3 + [[96, 97]] * 10
    return out


def test_a_rank_alone_at_a_trickle_is_a_checkpoint_not_starvation(tmp_path):
    """The stops come every 13 s, too often for 'after 20 s of steady work'; what tells a
    checkpoint is rank 0 working alone at a trickle while the other rank runs nothing: a
    synchronous job waiting for input cannot do that. With both GPUs at 0 in the stops the
    same rhythm is a starved loader's (workers delivering in lockstep): the test can fail."""
    _, tl = analyze_file(_smi(tmp_path, _save_every_13s(7)))
    paused = [d for d in tl.segments if d.verdict == "paused"]
    assert _verdicts(tl, 5, 100) <= {"busy", "paused"}, [(d.verdict, d.start - tl.start)
                                                         for d in tl.segments]
    assert len(paused) >= 5 and {d.cause for d in paused} == {"checkpoint"}
    _, tl = analyze_file(_smi(tmp_path, _save_every_13s(0), "zero.csv"))
    assert "data_starvation" in _verdicts(tl, 5, 100)


def test_a_dip_whose_gpus_keep_their_busy_power_is_not_a_pause():
    """A 1 s sample at 0% on one GPU while every GPU holds its busy power caught the gap
    between two steps (an 8-GPU gloo job of the detector benchmark read as a pause): the
    dip is a stop only if a GPU's power fell with its utilization (stop_power_frac)."""
    util = np.array(_validation_run(ret=True), dtype=float).T / 100.0     # (G, T)
    busy_power = np.full(util.shape, 220.0)
    assert not _two_sided(util, power=busy_power).any()
    stopping = np.where(util < DEFAULT.on_duty, 70.0, 220.0)    # idle draws ~1/3
    m = _two_sided(util, power=stopping)
    assert m[60:90].all() and not m[:60].any(), np.flatnonzero(m)
    # Unknown power (a log without power.draw) reads as before: the utilization alone.
    m_nan = _two_sided(util, power=np.full(util.shape, np.nan))
    assert (m_nan == _two_sided(util)).all() and m_nan[60:90].all()


def test_a_pause_ends_where_steady_work_came_back(tmp_path):
    """The first seconds after a pause have too few samples to judge at 1 s (its seconds
    are left out of the windows): the log dates the return from the first second of work,
    not from the third, where the windows first had min_samples again."""
    util = [[98, 98]] * 60 + [[0, 0]] * 10 + [[98, 98]] * 60
    _, tl = analyze_file(_smi(tmp_path, util))
    paused = [d for d in tl.segments if d.verdict == "paused"]
    assert len(paused) == 1, [(d.verdict, d.start - tl.start) for d in tl.segments]
    assert paused[0].end - tl.start <= 71, paused[0].end - tl.start
    after = [d.verdict for d in tl.segments if d.start >= paused[0].end]
    assert after and set(after) == {"busy"}, after


def test_a_stop_later_found_to_be_starvation_is_no_pause(tmp_path):
    """A simulated 1-GPU job (a tuning seed of the detector benchmark) whose CPU-bound loader
    keeps it waiting 29 s for its first batches after steady work, then works 9 s and waits
    again. Live, the first stop is a pause until the stop comes again; a log knows that from
    the start: none of its seconds is paused."""
    tl, change = _sim_log(tmp_path, "data_starvation", 1, 7002021, "mean")
    paused = [(d.start - change, d.end - change) for d in tl.segments
              if d.verdict == "paused" and d.end > change + 5]
    assert not paused, paused
    assert "data_starvation" in _verdicts(tl, change - tl.start + 5, change - tl.start + 40)


def test_a_starved_rhythm_after_steady_work_has_no_paused_second(tmp_path):
    """Steady work, then 8 s gaps between 3 s bursts on both GPUs: live, the first gap is a
    pause until the rhythm shows; the log calls every gap starvation."""
    util = [[98, 98]] * 60 + ([[0, 0]] * 8 + [[98, 98]] * 3) * 8 + [[0, 0]] * 8
    _, tl = analyze_file(_smi(tmp_path, util))
    assert "paused" not in _verdicts(tl, 55, len(util)), [
        (d.verdict, d.start - tl.start) for d in tl.segments]
    assert "data_starvation" in _verdicts(tl, 62, 80)


def test_a_pause_returns_where_work_resumed_whatever_lone_seconds_follow(tmp_path):
    """A simulated 2-GPU gloo job (a tuning seed of the detector benchmark) checkpoints
    113-130 s into the scenario; from 131 s it works again, its 1 s samples catching the gap
    between two steps now and then (63%, 73%, 78%, 52%). The return is the first second of
    that work, as before a dip such lone seconds are steady work: not 142 s, after the last
    of them, where 20 s without any begin."""
    tl, change = _sim_log(tmp_path, "checkpoint", 2, 7002112, "last")
    late = [(d.start - change, d.end - change) for d in tl.segments if d.verdict == "paused"
            and d.end - change > 133 and d.start - change < 142]
    assert not late, late
    assert "paused" in _verdicts(tl, change - tl.start + 115, change - tl.start + 128)


def test_a_log_sampled_every_minute_is_insufficient_data_not_its_first_verdict(tmp_path):
    """One sample a minute cannot show bursts and gaps: a training run logged so (its first
    samples before the job holds memory) reads insufficient_data for the run, not the idle
    of its first seconds held through it."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k in range(90):
        u, m = (0, 100) if k < 2 else (40 + (k * 37) % 56, 10500)
        rows.append(f"2024/05/01 {k // 60:02d}:{k % 60:02d}:00.000, 0, {u} %, {m} MiB")
    p = tmp_path / "minute.csv"
    p.write_text("\n".join(rows) + "\n")
    _, tl = analyze_file(str(p))
    s = summary(tl)
    assert s["verdict"] == "insufficient_data", s
    # What to do about it, in its numbers.
    assert {d.advice for d in tl.segments if d.verdict == "insufficient_data"} == {
        "one sample every 60 s is too few to see bursts and gaps (a 12 s window needs 3): log "
        "every second or faster (gpumon log, or nvidia-smi --query-gpu=... -l 1)"}
    idle = sum(d.end - d.start for d in tl.segments if d.verdict == "idle")
    assert idle <= 2 * 60, [(d.verdict, d.start - tl.start, d.end - tl.start)
                            for d in tl.segments]


def test_gpus_of_the_job_not_all_held_read_idle_by_job_gone(tmp_path):
    """A launch that never ran: ranks 1-3 hold a CUDA context (543 MiB) while GPU 0 holds
    nothing yet, all at 0%, for a minute (h100-ddp8-failed-start in bench/real). The job
    does not hold all its GPUs: idle by the rule job_gone, not too few samples held over."""
    util = [[0, 0, 0, 0]] * 90
    mem = [[129, 543, 543, 543]] * 65 + [[20000] * 4] * 10 + [[2, 2, 2, 2]] * 15
    _, tl = analyze_file(_smi_mem(tmp_path, util, mem))
    mid = [d for d in tl.segments if d.start - tl.start < 60 and d.end - tl.start > 10]
    assert {d.verdict for d in mid} == {"idle"}, [(d.verdict, d.rule) for d in tl.segments]
    assert all(d.rule == "job_gone" for d in mid), [(d.verdict, d.rule) for d in mid]


def test_a_missing_second_does_not_break_the_steady_work_before_a_pause(tmp_path):
    """An epoch end as a real 1 s log of a T4 shows it (t4-vit-epoch-stops in bench/real):
    steady work in which the sampler skipped one second, a 0 % second as validation starts,
    12 s of validation, a few seconds at a trickle, then 35 s at 0 % with the memory held
    before training resumes. The skipped second is the sampler's jitter, not a stop: the
    stop reads paused, not data_starvation then idle (held)."""
    val = [100, 77, 100, 76, 100, 100, 100, 97, 100, 95, 100, 96, 100]
    work = [100, 100, 100, 100, 80] * 60            # a dip every 5 s, as the T4's steps
    per_s = work[:278] + [100, 100, None, 100, 80] + [100] * 7 + [0] + val + \
        [8, 10, 0, 11, 6] + [0] * 35 + work
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k, u in enumerate(per_s):
        if u is not None:
            rows.append(f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000, 0, {u} %, 10601 MiB")
    p = tmp_path / "t4.csv"
    p.write_text("\n".join(rows) + "\n")
    _, tl = analyze_file(str(p))
    stop = 290 + len(val) + 5
    assert _verdicts(tl, stop + 5, stop + 30) == {"paused"}, [
        (d.verdict, d.start - tl.start, d.end - tl.start) for d in tl.segments]


def test_a_missing_second_after_the_job_ended_starts_no_job(tmp_path):
    """After a job ends (memory freed), a second the sampler skipped says nothing of the
    GPU's memory: the GPU stays idle, not 'paused (startup)' for that second."""
    util = [[98]] * 120 + [[0]] * 200
    mem = [[10601]] * 120 + [[0]] * 200
    path = _smi_mem(tmp_path, util, mem)
    lines = open(path).read().splitlines()
    skip = {1 + k for k in (200, 260)}          # two seconds the sampler skipped
    open(path, "w").write("\n".join(x for i, x in enumerate(lines) if i not in skip) + "\n")
    _, tl = analyze_file(path)
    assert _verdicts(tl, 130, 320) == {"idle"}, [(d.verdict, d.cause, d.start - tl.start)
                                                 for d in tl.segments]


def _fast_smi(tmp_path, util, name="fast.csv", dt=0.1):
    """An nvidia-smi --query-gpu log at ``dt`` s (0.1 s), 2 GPUs alike: util[k] in % at
    k * dt s."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k in range(len(util)):
        t = k * dt
        stamp = f"2024/05/01 00:{int(t) // 60:02d}:{t % 60:06.3f}"
        rows += [f"{stamp}, {g}, {util[k]:.0f} %, 20000 MiB" for g in (0, 1)]
    p = tmp_path / name
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def test_a_sub_second_stop_between_long_steady_work_is_a_one_off_pause(tmp_path):
    """A 0.7 s save every 40 s (a BERT fine-tune on one L40S, nvidia-smi's screen ~7 times a
    second): no second is under trickle_duty, and the 6 s windows that hold one read 83-84%,
    starvation. At 10 samples a second the pause tracker sees the stop (every GPU in a 0.7 s
    gap: pauses.gap_stops): paused, rule pause, its evidence read in the pause itself; at 2
    a second the gap is one sample and the log's hindsight finds it: steady work on either
    side, a one-off stop (hindsight's one_off). Either way paused, and busy after it."""
    util = np.full(1300, 95.0)
    for s in (405, 805):                        # stops at 40.5 s and 80.5 s, 0.7 s each
        util[s:s + 7] = 5.0
    for dt, rule in ((0.1, "pause"), (0.5, "one_off")):
        _, tl = analyze_file(_fast_smi(tmp_path, util[::int(dt * 10)], f"fast{dt}.csv", dt))
        segs = [(d.verdict, d.rule) for d in tl.segments]
        assert not [d for d in tl.segments if d.verdict == "data_starvation"], segs
        stops = [d for d in tl.segments if d.verdict == "paused"]
        assert len(stops) == 2 and {d.rule for d in stops} == {rule}, (dt, segs)
        assert all(d.end - d.start <= 3 for d in stops)
        assert rule != "one_off" or "one-off stop" in stops[0].because


def test_hindsight_reasons_quote_the_thresholds_the_log_was_judged_with(tmp_path):
    """The one-off stops above, judged with other thresholds: the reason of a segment that
    hindsight relabelled quotes those, and the numbers it used."""
    util = np.full(1300, 95.0)
    for s in (405, 805):
        util[s:s + 7] = 5.0
    th = replace(DEFAULT, context_s=15.0, isolation=4.0)
    _, tl = analyze_file(_fast_smi(tmp_path, util[::5], "fast.csv", 0.5), th=th)
    stops = [d for d in tl.segments if d.rule == "one_off"]
    assert len(stops) == 2, [(d.verdict, d.rule) for d in tl.segments]
    assert all("15 s and 4 times the stop" in d.because for d in stops), stops[0].because
    assert all("this 2 s stop" in d.because for d in stops), stops[0].because   # (2 bins)


def test_stops_that_recur_are_starvation_not_one_off_pauses(tmp_path):
    """The same 0.7 s stops every 4 s: no steady work long enough on either side."""
    util = np.array([5.0 if k % 40 < 7 else 95.0 for k in range(1300)])
    _, tl = analyze_file(_fast_smi(tmp_path, util))
    assert summary(tl)["verdict"] == "data_starvation"
    assert not [d for d in tl.segments if d.rule == "one_off" and d.verdict == "paused"]


def test_a_job_that_starts_on_a_flat_partial_plateau_is_no_minute_long_start_up(tmp_path):
    """Batch-1 generation (a T4 at 40-45%) or weights streamed from NVMe (an A5000 at ~20%)
    run at a flat partial plateau from their first kernel: their start-up ends once they
    have run for startup_run_s, not after pause_max_s; the plateau is then judged (and the
    log, in hindsight, dates the starvation from the first kernel)."""
    rng = np.random.default_rng(5)
    for level in (20, 42):
        util = [[0.0]] * 5 + [[level + rng.uniform(-3, 3)] for _ in range(90)]
        _, tl = analyze_file(_smi(tmp_path, util, name=f"plateau{level}.csv"))
        start = [d for d in tl.segments if d.verdict == "paused"]
        assert sum(d.end - d.start for d in start) <= 12, [(d.verdict, d.end - d.start)
                                                           for d in tl.segments]
        assert summary(tl)["verdict"] == "data_starvation"


def test_a_start_up_that_ramps_to_full_work_stays_a_start_up(tmp_path):
    """Loader workers warming up: a few seconds at partial duty, then full speed (the job
    seen starting: its GPU free, then held)."""
    util = [[0.0]] * 13 + [[30.0], [55.0], [80.0]] + [[97.0]] * 80
    mem = [[2]] * 5 + [[20000]] * 91
    _, tl = analyze_file(_smi_mem(tmp_path, util, mem))
    assert not [d for d in tl.segments if d.verdict == "data_starvation"], [
        (d.verdict, d.cause, d.end - d.start) for d in tl.segments]
    assert summary(tl)["verdict"] == "busy"


def test_a_one_gpu_job_that_let_go_of_its_gpu_says_so_in_the_singular(tmp_path):
    """One GPU whose job freed its memory: 'GPU 0 holds ... let go of it'."""
    util = [[95]] * 30 + [[0]] * 30
    mem = [[20000]] * 30 + [[2]] * 30
    _, tl = analyze_file(_smi_mem(tmp_path, util, mem))
    gone = [d for d in tl.segments if d.rule == "job_gone"]
    assert gone and gone[-1].because == ("GPU 0 holds less than 256 MiB of memory: the job "
                                         "let go of it"), [(d.rule, d.because) for d in tl.segments]


def test_a_job_present_from_the_first_sample_was_not_seen_starting(tmp_path):
    """A log that begins with its GPUs at 0% holding memory for 90 s, then work: nobody saw
    that job start (it did not hold its GPUs, then did), so no second of it is a start-up
    pause (a job seen absent and then present is: see
    test_a_job_starting_in_the_log_is_not_starving_while_its_ranks_come_up)."""
    util = [[0, 0]] * 90 + [[97, 98]] * 120
    _, tl = analyze_file(_smi(tmp_path, util))
    startup = [(d.start - tl.start, d.end - tl.start) for d in tl.segments
               if d.verdict == "paused" and d.cause == "startup"]
    assert not startup, startup
    assert _verdicts(tl, 5, 85) == {"idle"}
    assert _verdicts(tl, 110, 205) == {"busy"}


def test_each_pause_of_a_log_reads_the_cause_it_turned_out_to_have():
    """The tracker names a pause's cause as it learns it (unknown, then checkpoint once the
    host shows writes); a log knows the whole pause: the rule final_cause names each of its
    seconds by what it turned out to be, and only the seconds of that pause."""
    from gpumon.detect.pauses import CAUSES
    unk, ckpt, epoch = (CAUSES.index(c) for c in ("unknown", "checkpoint", "epoch_boundary"))
    why = np.array([-1, unk, unk, ckpt, -1, -1, epoch, epoch, -1])
    job = H.Job(th=DEFAULT, g=None, table=None, pause=why >= 0, excl=why >= 0, why=why,
                sc=None, starving=None, dips=[], rec=None)
    m = H.BY_NAME["final_cause"].when(job)
    assert m.tolist() == [False, True, True] + [False] * 6
    H.BY_NAME["final_cause"].apply(job, m)
    assert job.why.tolist() == [-1, ckpt, ckpt, ckpt, -1, -1, epoch, epoch, -1]


def test_a_one_off_stop_near_the_logs_end_is_judged_with_the_work_left(tmp_path):
    """The one-off stop above 9 s before the log ends: the steady work after it runs to the
    end, shorter than context_s; the log ends before it can tell (pauses.isolates), so the
    stop is a one-off as one with more work after it would be, not starvation."""
    util = np.full(500, 95.0)
    util[405:412] = 5.0                         # a 0.7 s stop at 40.5 s; the log ends at 50 s
    _, tl = analyze_file(_fast_smi(tmp_path, util[::5], "end.csv", 0.5))
    segs = [(d.verdict, d.rule, round(d.start - tl.start)) for d in tl.segments]
    assert not [d for d in tl.segments if d.verdict == "data_starvation"], segs
    assert [d.rule for d in tl.segments if d.verdict == "paused"] == ["one_off"], segs
