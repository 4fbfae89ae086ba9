"""The detector: features on hand-built windows, every verdict from simulated runs, job
grouping, degradation to 1 s utilization, hysteresis, pauses, live == offline."""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

import pytest

from gpumon.detect import EVIDENCE_KEYS, Detector, diagnose
from gpumon.detect.jobs import group_active, in_use
from gpumon.detect.thresholds import DEFAULT, POWER_LAG_S, describe
from gpumon.diagnosis import VERDICTS
from gpumon.samples import (CLOCK_EVENT_SW_THERMAL, GpuSample, HostSample, JobProcs,
                            ProcSample, Tick)

T0 = 1_700_000_000.0
P = 1.0 / 6.0


def window(seconds, gpus, util, power=None, limit=400.0, pids=None, mem=30000.0,
           clock=None, events=None, rate=6, jobs=None, host=None):
    """Ticks of hand-built samples: util(g, t) / power(g, t) / clock(g, t) give the values
    (``t``: seconds since T0 at the middle of the sample's period; tick s + 1 holds second s)."""
    ticks = []
    period = 1.0 / rate
    for s in range(seconds):
        samples = []
        for g in range(gpus):
            for k in range(1, rate + 1):
                # A sample is dated at the end of its period (as NVML does); the functions
                # give the value over the period, read at its middle.
                end = s + k * period
                t = end - period / 2
                samples.append(GpuSample(
                    time=T0 + end, gpu=g, source="sim", util_gpu_pct=util(g, t),
                    mem_used_mib=mem if not callable(mem) else mem(g),
                    power_w=None if power is None else power(g, t),
                    power_limit_w=None if power is None else limit,
                    sm_clock_mhz=None if clock is None else clock(g, t),
                    sm_clock_max_mhz=None if clock is None else 1410.0,
                    clock_events=None if events is None else events(g, t),
                    pids=None if pids is None else pids(g)))
        hs = None
        if jobs is not None or host is not None:
            hs = HostSample(time=T0 + s + 1, jobs=tuple(jobs(g) for g in range(gpus)) if jobs
                            else (), **(host or {}))
        ticks.append(Tick(time=T0 + s + 1, gpus=tuple(samples), host=hs))
    return ticks


def burst_gap(burst, gap):
    return lambda g, t: 100.0 if (t % (burst + gap)) < burst - 1e-9 else 0.0


def with_host(ticks, jobs_at, **host):
    """The ticks with a HostSample each: ``jobs_at(t)`` gives its JobProcs (t in seconds from
    T0); host fields (a value, or a function of t) default to a calm host."""
    fields = {"cpu_pct": 30.0, "iowait_pct": 0.0, "disk_read_mbps": 0.0,
              "disk_write_mbps": 0.0, **host}
    out = []
    for tk in ticks:
        t = tk.time - T0
        vals = {k: v(t) if callable(v) else v for k, v in fields.items()}
        out.append(Tick(time=tk.time, gpus=tk.gpus,
                        host=HostSample(time=tk.time, jobs=tuple(jobs_at(t)), **vals)))
    return out


# -- thresholds ---------------------------------------------------------------------------------
def test_every_threshold_has_unit_and_reason():
    rows = describe()
    assert len(rows) >= 20
    for name, value, unit, why in rows:
        assert unit and len(why) > 20, name
        assert isinstance(value, float), name


# -- features on hand-built windows -------------------------------------------------------------
def test_burst_gap_features_and_starvation():
    ticks = window(20, 2, burst_gap(0.5, 0.5), power=lambda g, t: 200.0)
    [d] = diagnose(ticks)
    ev = d.evidence
    assert set(ev) == set(EVIDENCE_KEYS)
    assert ev["duty_cycle"] == pytest.approx(0.5, abs=0.05)
    assert ev["burst_s"] == pytest.approx(0.5, abs=0.1)
    assert ev["gap_s"] == pytest.approx(0.5, abs=0.1)
    assert ev["gap_sync"] == pytest.approx(1.0, abs=0.05)
    assert ev["samples_per_s"] == pytest.approx(6.0, abs=0.3)
    assert d.verdict == "data_starvation"
    assert d.cause == "input_pipeline"            # no host counters: cause unknown
    assert d.straggler_gpu is None
    assert "job_processes" in d.missing and "host" in d.missing


def test_busy_when_hot_and_full():
    ticks = window(15, 2, lambda g, t: 100.0, power=lambda g, t: 340.0)
    [d] = diagnose(ticks)
    assert d.verdict == "busy"
    assert d.evidence["duty_cycle"] == pytest.approx(1.0)
    assert d.evidence["power_frac_busy"] == pytest.approx(0.85, abs=0.01)
    assert d.advice


def test_busy_but_cold_is_a_sync_stall_naming_the_hot_gpu():
    # Every GPU reads 100%; GPU 2 computes at 85% of its limit, the others spin at 25%.
    ticks = window(15, 4, lambda g, t: 100.0, power=lambda g, t: 340.0 if g == 2 else 100.0)
    [d] = diagnose(ticks)
    assert d.verdict == "sync_stall"
    assert d.straggler_gpu == 2
    assert d.cause == "imbalance"
    assert d.evidence["rel_power_min"] == pytest.approx(100 / 340, abs=0.02)
    assert d.evidence["busy_cold_share"] == pytest.approx(0.75)


def test_ranks_taking_turns_to_wait_are_busy_not_a_straggler():
    # Healthy DDP (8 A100s at 1 s, a log without the power limit): every GPU at 100%, one or
    # another drawing ~65% of the others' power for a second in turn (step-to-step jitter): no
    # GPU is the hottest for long, so no rank to name.
    def power(g, t):
        s = int(t)
        return 260.0 if s % 3 == g % 3 else 400.0 + 8.0 * ((3 * g + 5 * s) % 4)
    ticks = window(15, 4, lambda g, t: 100.0, power=power, limit=None)
    [d] = diagnose(ticks)
    assert d.verdict == "busy", d.because
    assert d.evidence["rel_power_min"] <= 0.9         # (the old rule's ratio alone fired)


def test_busy_but_cold_reason_counts_the_seconds_the_straggler_was_hottest():
    ticks = window(15, 4, lambda g, t: 100.0, power=lambda g, t: 340.0 if g == 2 else 100.0)
    [d] = diagnose(ticks)
    assert d.rule == "busy_but_cold"
    n = re.search(r"the hottest in (\d+) of the (\d+) s another was cold", d.because)
    assert n and n.group(1) == n.group(2) and int(n.group(2)) >= 3, d.because


def test_flat_plateau_is_starvation_at_a_finer_scale():
    ticks = window(20, 4, lambda g, t: 40.0, power=lambda g, t: 180.0)
    [d] = diagnose(ticks)
    assert d.verdict == "data_starvation"
    assert d.evidence["duty_cycle"] == pytest.approx(0.4)


def test_one_idle_gpu_beside_spinning_ones_is_a_stall_on_that_ranks_host():
    """GPU 1 idles half the time; the others read 100% at low power (NCCL spin). Without host
    counters its input cannot be told from a checkpoint or logging on it: sync_stall,
    rank_host, naming GPU 1, and a reason that says so. With its loaders saturated it is
    starvation on GPU 1."""
    def util(g, t):
        return burst_gap(0.5, 0.5)(g, t) if g == 1 else 100.0
    [d] = diagnose(window(20, 4, util, power=lambda g, t: 130.0))
    assert (d.verdict, d.cause, d.straggler_gpu, d.rule) == ("sync_stall", "rank_host", 1,
                                                             "rank_host")
    assert "GPU 1 at 50% while GPUs 0,2,3 at 100%" in d.because
    assert "no host counters" in d.because and "checkpoint" in d.advice

    def jobs(t):
        return [JobProcs(gpu=g, main_pid=100 + g, main_cpu_pct=30.0, main_thread_max_pct=30.0,
                         loader_workers=4, loader_cpu_pct=396.0 if g == 1 else 100.0,
                         loader_busy=4 if g == 1 else 0) for g in range(4)]
    [d] = diagnose(with_host(window(20, 4, util, power=lambda g, t: 130.0), jobs))
    assert (d.verdict, d.straggler_gpu, d.rule) == ("data_starvation", 1, "rank_host_starved")


def test_one_busy_hot_gpu_beside_idling_ones_is_a_sync_stall():
    # gloo-style: GPU 0 computes all the time at high power, the others idle waiting.
    def util(g, t):
        return 100.0 if g == 0 else burst_gap(0.4, 0.6)(g, t)

    def power(g, t):
        return 340.0 if g == 0 else 150.0
    ticks = window(20, 3, util, power=power)
    [d] = diagnose(ticks)
    assert d.verdict == "sync_stall"
    assert d.straggler_gpu == 0


def test_one_busy_gpu_beside_ranks_whose_loaders_are_saturated_is_starvation():
    """The same shape (one GPU at 100%, the others bursting), but every rank's loader
    workers are saturated: the idle ranks wait for input and the busy one spins waiting for
    them (a data-starved NCCL job's ranks drift apart). Without host counters it is the
    sync stall above."""
    def util(g, t):
        return 100.0 if g == 0 else burst_gap(0.4, 0.6)(g, t)

    def power(g, t):
        return 340.0 if g == 0 else 150.0
    ticks = window(20, 3, util, power=power, pids=lambda g: (100 + g,), jobs=lambda g: JobProcs(
        gpu=g, main_pid=100 + g, main_cpu_pct=20.0, main_thread_max_pct=15.0,
        loader_workers=2, loader_cpu_pct=196.0, loader_busy=2))
    [d] = diagnose(ticks)
    assert (d.verdict, d.cause) == ("data_starvation", "cpu_preprocessing")


def test_throttled_gpu_named():
    def events(g, t):
        return CLOCK_EVENT_SW_THERMAL if g == 1 else 0

    def clock(g, t):
        return 800.0 if g == 1 else 1380.0
    ticks = window(15, 2, lambda g, t: 100.0, power=lambda g, t: 300.0, clock=clock,
                   events=events)
    [d] = diagnose(ticks)
    assert d.verdict == "throttled"
    assert d.cause == "thermal"
    assert d.straggler_gpu == 1
    assert d.evidence["throttle_share"] == pytest.approx(1.0)
    assert d.evidence["clock_frac"] == pytest.approx(800 / 1410, abs=0.01)


def test_host_attribution_of_starvation():
    util = burst_gap(0.5, 0.5)
    saturated = window(15, 1, util, jobs=lambda g: JobProcs(
        gpu=g, main_pid=100, main_cpu_pct=20.0, main_thread_max_pct=15.0, loader_workers=4,
        loader_cpu_pct=392.0, loader_busy=4), host={"iowait_pct": 0.0, "disk_read_mbps": 0.0})
    assert diagnose(saturated)[0].cause == "cpu_preprocessing"
    main = window(15, 1, util, jobs=lambda g: JobProcs(
        gpu=g, main_pid=100, main_cpu_pct=101.0, main_thread_max_pct=99.0, loader_workers=0,
        loader_cpu_pct=0.0, loader_busy=0), host={"iowait_pct": 0.0, "disk_read_mbps": 0.0})
    d = diagnose(main)[0]
    assert d.cause == "main_process"
    assert "main process" in d.advice
    io = window(15, 1, util, jobs=lambda g: JobProcs(
        gpu=g, main_pid=100, main_cpu_pct=20.0, main_thread_max_pct=15.0, loader_workers=4,
        loader_cpu_pct=30.0, loader_busy=0),
        host={"iowait_pct": 18.0, "disk_read_mbps": 900.0})
    assert diagnose(io)[0].cause == "io_fetch"


def test_no_samples_is_insufficient_data():
    [d] = diagnose([])
    assert (d.verdict, d.rule, d.because) == ("insufficient_data", "too_few_samples",
                                              "no sample in the window")


# -- job grouping -------------------------------------------------------------------------------
def test_gpus_without_process_or_memory_are_left_out():
    ticks = window(15, 3, lambda g, t: 100.0 if g < 2 else 0.0, power=lambda g, t: 330.0,
                   pids=lambda g: (500 + g,) if g < 2 else (), mem=lambda g: 30000 if g < 2
                   else 3.0)
    [d] = diagnose(ticks)
    assert d.gpus == (0, 1)
    assert d.verdict == "busy"


def test_two_jobs_under_two_launchers_get_one_verdict_each():
    procs = (ProcSample(10, 1, "torchrun", "main", 1.0), ProcSample(11, 1, "torchrun", "main", 1.0),
             ProcSample(100, 10, "python", "main", 50.0), ProcSample(101, 10, "python", "main", 50.),
             ProcSample(200, 11, "python", "main", 50.0), ProcSample(201, 11, "python", "main", 50.))
    ticks = window(15, 4, lambda g, t: 100.0 if g < 2 else burst_gap(0.5, 0.5)(g, t),
                   power=lambda g, t: 330.0, pids=lambda g: ((100, 101, 200, 201)[g],))
    ticks = [Tick(time=t.time, gpus=t.gpus, host=HostSample(time=t.time, procs=procs))
             for t in ticks]
    ds = diagnose(ticks)
    assert [d.gpus for d in ds] == [(0, 1), (2, 3)]
    assert [d.verdict for d in ds] == ["busy", "data_starvation"]


def group(gpus, pids, mem, kernels):
    """Jobs of the GPUs that in_use() finds in use (``kernels``: the share of samples with a
    kernel)."""
    return group_active([g for g in gpus if in_use(
        math.nan if pids.get(g) is None else len(pids[g]), mem.get(g, math.nan),
        kernels.get(g, math.nan) >= DEFAULT.idle_duty)], pids)


def test_group_rules():
    none = {0: None, 1: None, 2: None}
    nan = math.nan
    # No process info: the active GPUs (memory, else activity) form one job.
    assert group([0, 1, 2], none, {0: 9000, 1: 9000, 2: 2}, {0: 1, 1: 1, 2: 0}) == \
        [((0, 1), False)]
    assert group([0, 1], none, {0: nan, 1: nan}, {0: 0.5, 1: 0.0}) == [((0,), False)]
    # One process on every GPU (DataParallel): one job, shared.
    assert group([0, 1], {0: (7,), 1: (7,)}, {0: 9000, 1: 9000}, {}) == [((0, 1), True)]
    # Distinct processes and no launcher known: one job per node.
    assert group([0, 1], {0: (7,), 1: (8,)}, {0: 9000, 1: 9000}, {}) == [((0, 1), False)]
    # Nothing active: no job.
    assert group([0], {0: ()}, {0: 1.0}, {0: 0.0}) == []


# -- degradation -------------------------------------------------------------------------------
def test_one_second_utilization_only_still_answers_with_less_confidence():
    full = window(30, 2, lambda g, t: 40.0, power=lambda g, t: 160.0)
    thin = window(30, 2, lambda g, t: 40.0, rate=1)
    [a] = diagnose(full)
    [b] = diagnose(thin)
    assert a.verdict == b.verdict == "data_starvation"
    assert "subsecond_util" in b.missing and "power" in b.missing
    assert "subsecond_util" not in a.missing and "power" not in a.missing
    assert b.confidence < a.confidence


# -- hysteresis (the hold's own cases: tests/test_hold.py) ------------------------------------
def test_streaming_detector_does_not_flap_on_a_noisy_boundary():
    # Duty hovering around the starvation threshold second by second.
    rng = np.random.default_rng(0)
    duty = rng.uniform(0.8, 0.92, size=120)

    def util(g, t):
        s = int(t)
        return 100.0 if (t - s) < duty[min(s, 119)] else 0.0
    det = Detector()
    verdicts = [det.update(tk)[0].verdict for tk in window(120, 2, util,
                                                           power=lambda g, t: 300.0)]
    changes = sum(1 for a, b in zip(verdicts[10:], verdicts[11:]) if a != b)
    assert changes <= 6


# -- every verdict from simulated runs ---------------------------------------------------------
SIM_CASES = [
    ("busy", 2, "busy", None, None),
    ("idle", 2, "idle", None, None),
    ("data_starvation", 2, "data_starvation", "cpu_preprocessing", None),
    ("io_fetch", 2, "data_starvation", "io_fetch", None),
    ("main_process", 1, "data_starvation", "main_process", None),
    ("sync_stall", 4, "sync_stall", "imbalance", "truth"),
    ("rank_data_stall", 4, "data_starvation", "cpu_preprocessing", "truth"),
    ("throttled", 2, "throttled", "thermal", "truth"),
    ("dataparallel", 4, "sync_stall", "dataparallel", 0),
]


@pytest.mark.parametrize("name,gpus,verdict,cause,straggler", SIM_CASES)
def test_each_verdict_from_the_simulator(name, gpus, verdict, cause, straggler):
    from gpumon.sim import simulate
    det = Detector()
    right = total = 0
    truth = None
    for tk in simulate(name, gpus=gpus, seconds=45, seed=3):
        d = det.update(tk)[0]
        truth = tk.truth
        if tk.time - T0 > 15:
            total += 1
            right += d.verdict == verdict
    assert truth.verdict == verdict
    assert right / total >= 0.9, (name, right, total)
    assert d.verdict == verdict
    assert d.cause == cause
    want = truth.straggler_gpu if straggler == "truth" else straggler
    assert d.straggler_gpu == want
    assert d.advice


@pytest.mark.parametrize("name", ["checkpoint", "epoch_end"])
def test_pauses_of_a_healthy_run_are_not_starvation(name):
    from gpumon.sim import simulate
    det = Detector()
    paused = 0
    for tk in simulate(name, gpus=2, seconds=100, seed=3,
                       params={"ckpt_every_s": 35.0, "epoch_s": 40.0}):
        d = det.update(tk)[0]
        paused += tk.truth.pause
        if tk.time - T0 > 10:
            assert d.verdict in ("busy", "paused"), (tk.time - T0, d.verdict)
    assert paused >= 3


def test_starvation_is_seen_within_5_s_of_onset():
    from gpumon.sim import simulate
    det = Detector()
    for tk in simulate("busy", gpus=2, seconds=30, seed=3):
        det.update(tk)
    assert det.current[0].verdict == "busy"
    onset = T0 + 30
    seen = None
    for tk in simulate("data_starvation", gpus=2, seconds=20, seed=4, start_time=onset):
        if det.update(tk)[0].verdict == "data_starvation" and seen is None:
            seen = tk.time - onset
    assert seen is not None and seen <= 5.0


def test_live_and_offline_agree(tmp_path):
    """A gpumon CSV analysed offline gives the verdicts the live detector gave."""
    from gpumon.analyze import analyze_file
    from gpumon.csvlog import CsvSink
    from gpumon.sim import simulate
    path = str(tmp_path / "run.csv")
    sink = CsvSink(path)
    det = Detector()
    live = []
    for tk in simulate("rank_data_stall", gpus=2, seconds=60, seed=5):
        ds = det.update(tk)
        sink.write(tk, ds)
        live.append((tk.time, ds[0].verdict, ds[0].straggler_gpu))
    sink.close()
    _, tl = analyze_file(path)
    agree = 0
    for t, v, s in live[10:]:
        seg = [d for d in tl.segments if d.start <= t - 0.5 < d.end]
        agree += bool(seg) and seg[0].verdict == v and seg[0].straggler_gpu == s
    assert agree / len(live[10:]) >= 0.9


def _stop_behind_saturated_loaders(new_workers: bool) -> list:
    """2 GPUs busy for 25 s with calm loaders, then both stop for 10 s while every loader
    worker is at a full core and the main processes wait; the workers are the same old ones,
    or new ones started when the GPUs stopped (an epoch boundary's new DataLoader)."""
    stop_at = 25.0
    ticks = window(35, 2, lambda g, t: 100.0 if t < stop_at else 0.0,
                   power=lambda g, t: 320.0 if t < stop_at else 60.0, pids=lambda g: (100 + g,))

    def jobs(t):
        stopped = t > stop_at
        age = (t - stop_at) if (new_workers and stopped) else 300.0 + t
        return [JobProcs(gpu=g, main_pid=100 + g, main_cpu_pct=10.0 if stopped else 40.0,
                         main_thread_max_pct=None, loader_workers=4,
                         loader_cpu_pct=398.0 if stopped else 250.0,
                         loader_busy=4 if stopped else 1, loader_age_s=age) for g in range(2)]
    return with_host(ticks, jobs)


# Seconds of data before GPUs' power can be compared (rules.too_short): until then a job that
# is busy so far may have no verdict yet.
POWER_NEED_S = DEFAULT.recover_s + POWER_LAG_S


def _busy_or_too_soon(d, t: float, also=("busy",)) -> bool:
    return d.verdict in also or (t < POWER_NEED_S and d.rule == "too_short")


def test_stop_behind_old_saturated_loaders_is_starvation_at_once():
    det = Detector()
    seen = None
    for tk in _stop_behind_saturated_loaders(new_workers=False):
        d = det.update(tk)[0]
        if tk.time - T0 <= 25:
            assert _busy_or_too_soon(d, tk.time - T0), (tk.time - T0, d.verdict)
        elif d.verdict == "data_starvation" and seen is None:
            seen = tk.time - T0 - 25
    assert seen is not None and seen <= 4.0, seen


def test_stop_while_new_loader_workers_start_is_a_pause():
    det = Detector()
    for tk in _stop_behind_saturated_loaders(new_workers=True):
        d = det.update(tk)[0]
        assert _busy_or_too_soon(d, tk.time - T0, ("busy", "paused")), (tk.time - T0, d.verdict)


def _validation_with_its_own_loader() -> list:
    """2 GPUs busy for 25 s with 4 old loader workers; a validation DataLoader adds 4 young
    workers, the GPUs stop 3 s, run its prefetched batches for 5 s, wait on it for 8 s, and
    when its workers are gone training ramps up and runs on."""
    def util(g, t):
        if t < 25 or t >= 43:
            return 100.0
        if 28 <= t < 33:
            return 100.0
        if 41 <= t < 42:
            return 30.0
        if 42 <= t < 43:
            return 60.0
        return 0.0
    ticks = window(60, 2, util, power=lambda g, t: 320.0 if util(g, t) > 50 else 60.0,
                   pids=lambda g: (100 + g,))
    return with_host(ticks, _validation_loader(2))


def _validation_loader(gpus: int):
    """jobs_at(t) for with_host: each rank has 4 old loader workers; from 25 s to 41 s a
    validation DataLoader adds 4 young ones, busy."""
    def jobs(t):
        val = 25 <= t < 41
        return [JobProcs(gpu=g, main_pid=100 + g, main_cpu_pct=40.0, main_thread_max_pct=None,
                         loader_workers=8 if val else 4, loader_cpu_pct=700.0 if val else 250.0,
                         loader_busy=7 if val else 1,
                         loader_age_s=(t - 25) if val else 300.0 + t) for g in range(gpus)]
    return jobs


def test_validation_pass_with_its_own_loader_is_one_pause():
    """The pause lasts while the validation DataLoader's extra workers are there, even through
    a few seconds of its fast first batches (fails if a burst of steady work ends the pause)."""
    det = Detector()
    for tk in _validation_with_its_own_loader():
        d = det.update(tk)[0]
        assert _busy_or_too_soon(d, tk.time - T0, ("busy", "paused")), (tk.time - T0, d.verdict)


def test_onset_after_steady_work_is_judged_on_the_recent_window():
    """1 GPU busy for 40 s, then storage cannot keep up: 2 s steps, the GPU idle half of
    each, iowait with disk reads. The window is not stretched back over the busy 40 s (its
    long burst would make the rhythm look slow and the duty high): starvation within 6 s."""
    onset = 40.0
    gap = burst_gap(1.0, 1.0)
    util = (lambda g, t: 100.0 if t < onset else gap(g, t - onset))
    job = JobProcs(gpu=0, main_pid=100, main_cpu_pct=30.0, main_thread_max_pct=None,
                   loader_workers=4, loader_cpu_pct=80.0, loader_busy=0, loader_age_s=500.0)
    ticks = window(60, 1, util, power=lambda g, t: 300.0 if util(g, t) > 50 else 80.0,
                   pids=lambda g: (100,))
    out = with_host(ticks, lambda t: [job], cpu_pct=20.0,
                    iowait_pct=lambda t: 6.0 if t > onset else 0.0,
                    disk_read_mbps=lambda t: 25.0 if t > onset else 0.0)
    det = Detector()
    seen = None
    for tk in out:
        d = det.update(tk)[0]
        t = tk.time - T0
        if t <= onset:
            assert d.verdict == "busy", (t, d.verdict)
        elif d.verdict == "data_starvation" and seen is None:
            seen = t - onset
            assert d.cause == "io_fetch", d.cause
    assert seen is not None and seen <= 6.0, seen


def _job_start(starved: bool) -> list:
    """4 GPUs idle for 10 s, then a job starts: its processes hold every GPU at once, but the
    ranks get their first batches one every 2 s, their new loader workers at a full core. It
    then runs steady, or (starved) in 1 s bursts and 1.5 s gaps on every rank."""
    def util(g, t):
        if t < 10 + 2 * g:
            return 0.0
        if not starved or t < 18:
            return 100.0
        return 100.0 if ((t - 18) % 2.5) < 1.0 else 0.0
    ticks = window(45, 4, util, power=lambda g, t: 300.0 if util(g, t) > 50 else 70.0,
                   pids=lambda g: (100 + g,), mem=lambda g: 30000.0)
    # No process and no memory on the GPUs before the job starts.
    ticks = [Tick(time=tk.time, gpus=tuple(x if x.time - T0 >= 10 else dataclasses.replace(
        x, pids=(), mem_used_mib=3.0) for x in tk.gpus)) for tk in ticks]

    def jobs(t):
        return [JobProcs(gpu=g, main_pid=100 + g, main_cpu_pct=30.0, main_thread_max_pct=None,
                         loader_workers=4, loader_cpu_pct=396.0, loader_busy=4,
                         loader_age_s=t - 9.5) for g in range(4) if t > 10]
    return with_host(ticks, jobs, cpu_pct=50.0)


def test_a_job_seen_starting_is_not_starving_while_its_ranks_come_up():
    det = Detector()
    for tk in _job_start(starved=False):
        d = det.update(tk)[0]
        assert d.verdict in ("idle", "busy", "paused", "insufficient_data"), (tk.time - T0, d.verdict)


def test_a_job_that_starts_starving_is_called_starving_soon():
    det = Detector()
    seen = None
    for tk in _job_start(starved=True):
        d = det.update(tk)[0]
        if d.verdict == "data_starvation" and seen is None:
            seen = tk.time - T0 - 18
    assert seen is not None and seen <= 10, seen


def test_a_host_reading_is_binned_with_the_gpu_samples_of_its_tick():
    """A tick at time T carries GPU samples from (T - 1, T] and a host reading taken at T
    that describes the same second: both land in one per-second bin (the host used to land
    one bin later, a second behind the GPUs it explains)."""
    from gpumon.detect.bins import Store
    from gpumon.detect.bins import tick_columns
    from gpumon.detect.thresholds import DEFAULT
    jobs = lambda g: JobProcs(gpu=g, main_pid=100, main_cpu_pct=97.0, main_thread_max_pct=None,
                              loader_workers=0, loader_cpu_pct=0.0, loader_busy=0)
    ticks = window(3, 1, lambda g, t: 0.0, pids=lambda g: (100,), jobs=jobs,
                   host={"cpu_pct": 10.0, "iowait_pct": 40.0})
    samples, jc, hc, _, _ = tick_columns(ticks)
    st = Store(math.floor(T0), DEFAULT)
    st.add_samples(samples)
    st.add_host(jc, hc)
    g, h = st.view()
    from gpumon.detect.bins import GI, HI
    n = g[GI["n"]][0]
    have_gpu = np.flatnonzero(n >= 5)           # the bins holding a tick's samples
    have_host = np.flatnonzero(h[HI["ion"]] > 0)
    have_job = np.flatnonzero(g[GI["mcn"]][0] > 0)
    assert list(have_gpu) == [0, 1, 2], n
    assert list(have_host) == [0, 1, 2], h[HI["ion"]]
    assert list(have_job) == [0, 1, 2]


def test_a_job_that_starts_starving_below_a_second_without_host_counters_is_starving():
    """No host counters, and the GPUs idle part of every second (0.5 s bursts, 0.5 s gaps:
    no second is all idle): a job seen starting like this is starving within seconds, not
    held as a start-up pause (fails if only an all-idle second can end a start)."""
    def util(g, t):
        if t < 8:
            return 0.0
        return 100.0 if (t % 1.0) < 0.5 else 0.0
    ticks = window(30, 2, util, power=lambda g, t: 300.0 if util(g, t) > 50 else 70.0,
                   pids=lambda g: (100 + g,))
    ticks = [Tick(time=tk.time, gpus=tuple(x if x.time - T0 >= 8 else dataclasses.replace(
        x, pids=(), mem_used_mib=3.0) for x in tk.gpus), host=None) for tk in ticks]
    det = Detector()
    seen = None
    for tk in ticks:
        d = det.update(tk)[0]
        if d.verdict == "data_starvation" and seen is None:
            seen = tk.time - T0 - 8
    assert seen is not None and seen <= 10, seen


def _live_verdicts(ticks, change):
    """Live verdicts by second after the change, its first 5 s left out."""
    return {t: v for t, v in _verdicts(ticks, origin=change).items() if t > 5}


def test_a_plateau_job_comes_back_from_a_checkpoint_to_its_own_level(monkeypatch):
    """A simulated 4-GPU job whose steady work sits at 83% (50 ms steps: the gaps are its own
    uploads) writes a checkpoint for 13 s (a further tuning seed of the detector benchmark).
    It comes back to 83%: work is back at its own level, not at a starved rhythm, so the
    checkpoint stays a pause. Judged against duty_starved (86%), it reads as starvation."""
    from bench.detect import simulate_run
    from gpumon.detect.pauses import PauseTracker
    ticks, change, _ = simulate_run("checkpoint", 4, 7050094)
    v = _live_verdicts(ticks, change)
    assert set(v.values()) <= {"busy", "paused"}, sorted(k for k, x in v.items() if x not in ("busy", "paused"))
    monkeypatch.setattr(PauseTracker, "_return_bar", lambda self: self.th.duty_starved)
    v2 = _live_verdicts(ticks, change)
    assert "data_starvation" in set(v2.values())


def test_a_job_below_full_duty_is_back_at_its_first_second_at_its_own_level():
    """A simulated 8-GPU gloo job (a tuning seed of the detector benchmark) runs at 86-90%
    (its all-reduce leaves the GPUs idle) and restarts its loader workers at an epoch
    boundary 38-43 s into the scenario; 45 s in, every GPU is back at 86-90%. That second is
    work at the job's own level (the pause's return bar), not a second of the pause: judged
    against busy_bin_duty (90%) the pause lasted until the tracker's resume_s ran out."""
    from bench.detect import simulate_run
    ticks, change, _ = simulate_run("epoch_end", 8, 7002148)
    v = _live_verdicts(ticks, change)
    assert v[41] == "paused" and v[45] == "busy" and v[46] == "busy", [v[t] for t in range(38, 49)]


def test_the_rank_whose_loaders_are_saturated_is_named_as_the_job_sees_starvation():
    """A simulated 2-GPU NCCL job (a tuning seed of the detector benchmark) whose rank 1 has
    slow input: its 11 loader workers all busy, at 53-82% of their CPU over the window as
    they ramp up. The job reads as starving (a rank's workers all busy, the measure
    ``feeding`` uses); the rank that starves is named by the same measure, over the window
    or its last seconds: with loader CPU alone over the window, no rank was, and the
    starvation named no GPU."""
    from bench.detect import simulate_run
    ticks, change, _ = simulate_run("rank_data_stall", 2, 7002062)
    det = Detector()
    named = {}
    for tk in ticks:
        d = det.update(tk)[0]
        t = round(tk.time - change)
        if 2 <= t <= 6 or 16 <= t <= 21:
            named[t] = (d.verdict, d.straggler_gpu)
    assert set(named.values()) == {("data_starvation", 1)}, named


def _one_slow_batch(stall_s: float, loader_cpu: float = 100.0) -> list:
    """2 ranks (NCCL) at full speed for 30 s, then rank 1 waits stall_s for one slow batch
    while rank 0 spins in the all-reduce (100%, cold), then both run on for 30 s. Each rank
    has 2 loader workers at ``loader_cpu`` % together (100: half their capacity)."""
    def util(g, t):
        return 0.0 if g == 1 and 30 <= t < 30 + stall_s else 100.0

    def power(g, t):
        if 30 <= t < 30 + stall_s:
            return 60.0 if g == 1 else 130.0
        return 340.0
    return window(60 + int(stall_s), 2, util, power=power, pids=lambda g: (100 + g,),
                  jobs=lambda g: JobProcs(gpu=g, main_pid=100 + g, main_cpu_pct=20.0,
                                          main_thread_max_pct=15.0, loader_workers=2,
                                          loader_cpu_pct=loader_cpu, loader_busy=1))


def _verdicts(ticks, th=None, origin=T0):
    """Live verdicts by second from ``origin``."""
    det = Detector() if th is None else Detector(th)
    return {round(tk.time - origin): det.update(tk)[0].verdict for tk in ticks}


def test_a_lone_stall_with_calm_loaders_is_over_once_every_gpu_runs_full_again():
    """One slow batch stalls rank 1 for 4 s (its loaders at half their capacity). While it
    waits the verdict may say so; once both GPUs have run at full speed for recover_s (3 s)
    the job is busy again (no hold after stall_over), not for as long as the stall stays in a
    window stretched to window_max_s. Without recovery (recover_s longer than the work after
    it) it is still starvation (or a stall naming rank 0, which spun cold meanwhile) 10 s
    after the stall."""
    from gpumon.detect.thresholds import DEFAULT
    ticks = _one_slow_batch(4)
    v = _verdicts(ticks)
    assert all(v[s] == "busy" for s in range(40, 64)), v
    assert all(v[s] == "busy" for s in range(5, 30))
    off = _verdicts(ticks, dataclasses.replace(DEFAULT, recover_s=100.0))
    assert any(off[s] != "busy" for s in range(40, 46)), off


def test_a_rank_stall_shows_at_once_live():
    """Rank 1 idle beside rank 0 spinning cold (rank_host) is evidence from two signals that
    agree; a live screen shows it from the first second the rule fires, not hold_s later
    (Rule.shows_at_once). The rank-0 saves of bench/real read busy for 2 s of each ~3 s stall
    with the hold."""
    from gpumon.detect.thresholds import DEFAULT
    ticks = [dataclasses.replace(tk, host=None) for tk in _one_slow_batch(10)]
    v = _verdicts(ticks)
    first = min(s for s in v if s >= 30 and v[s] == "sync_stall")
    det = Detector(dataclasses.replace(DEFAULT, hold_s=0.0))
    raw = {round(tk.time - T0): det.update(tk)[0].verdict for tk in ticks}
    assert first == min(s for s in raw if s >= 30 and raw[s] == "sync_stall"), (v, raw)
    assert first <= 32, v


def test_a_long_stall_is_over_too_but_saturated_loaders_keep_the_verdict():
    """A 10 s stall of one rank with calm loaders is a stall on its host (the cause is there
    but not its input) while it lasts, and over like a short one once both GPUs have run at
    steady work for recover_s (stall_over, at once: no hold). Loaders at full capacity over
    the window still read as starvation just after work resumed: the rank's input is short."""
    long_stall = _verdicts(_one_slow_batch(10))
    assert any(long_stall[s] == "sync_stall" for s in range(33, 41)), long_stall
    assert all(long_stall[s] == "busy" for s in range(40 + 3, 70)), long_stall
    saturated = _verdicts(_one_slow_batch(4, loader_cpu=196.0))
    assert any(saturated[s] == "data_starvation" for s in range(38, 42)), saturated


def test_power_is_not_compared_in_the_first_seconds_back_at_work():
    """A validation pass's forward-only steps run at 250 W; its own loader's 4 extra workers
    leave at 41 s and the pause ends as training resumes on 4 GPUs at 320 W. GPU 0's power,
    a 1 s average, still reads 250 W for its first two seconds back. That is a ramp, not a
    GPU spinning cold: the job is busy throughout. Compared from the first second back, it
    is a sync stall."""

    def util(g, t):
        return 100.0 if t < 25 or t >= 35 or 28 <= t < 31 else 0.0

    def power(g, t):
        if g == 0 and 40 <= t < 42:
            return 180.0
        if 25 <= t < 40:
            return 250.0 if util(g, t) > 50 else 60.0
        return 320.0 if util(g, t) > 50 else 60.0
    ticks = with_host(window(60, 4, util, power=power, pids=lambda g: (100 + g,)),
                      _validation_loader(4))
    v = _verdicts(ticks)
    assert {x for t, x in v.items() if t >= POWER_NEED_S} <= {"busy", "paused"}, v
    assert "sync_stall" in _verdicts(ticks, dataclasses.replace(DEFAULT, recover_s=0.0)).values()


def _late_rank_features(settle_bins: int, monkeypatch):
    """Features and raw rule output of 4 NCCL ranks at 330 W, where rank 2 starts its step
    half a second late in second 10 (an epoch restart): ranks 0, 1 and 3 run their kernels
    and then spin in the all-reduce (100%, 160 W) through second 11, while rank 2 computes
    (340 W). Judged on the 6 s window ending in second 15."""
    from gpumon.detect.bins import Store
    from gpumon.detect.bins import tick_columns
    from gpumon.detect.rules import judge
    import gpumon.detect.features as F
    import gpumon.detect.seconds as S
    import gpumon.detect.windows as W
    for mod in (F, S, W):     # (a fact of the driver, not a threshold: patched where read)
        monkeypatch.setattr(mod, "POWER_LAG_S", float(settle_bins))
    th = DEFAULT

    def util(g, t):
        return 0.0 if g == 2 and 10 <= t < 10.5 else 100.0

    def power(g, t):
        if g == 2:
            return 60.0 if 10 <= t < 10.5 else 340.0 if 10 <= t < 12 else 330.0
        return 160.0 if 10 <= t < 12 else 330.0
    ticks = window(16, 4, util, power=power, pids=lambda g: (100 + g,))
    samples, _, _, _, _ = tick_columns(ticks)
    st = Store(T0, th)
    st.add_samples(samples)
    g, h = st.view()
    none = np.zeros(g.shape[-1], bool)
    f = F.window_features(g, h, np.array([15]), none, th, excluded=none)
    return f, judge(f, False, th)


def test_power_is_compared_only_in_seconds_after_every_gpu_worked(monkeypatch):
    """Second 11 is the first with every GPU at work, and the ranks that spun on the late
    one read cold in it: that is rank 2's late start, not rank 2 computing longer than the
    others. Power (a 1 s average) is compared only in seconds after one with every GPU at
    work, so no second is cold and the window is busy; comparing second 11 too, it is
    cold."""
    f, r = _late_rank_features(1, monkeypatch)
    assert f["all_busy_bins"][0] == 4 and f["rel_power"][:, 0].min() > 0.95
    assert f["cold_bins"][0] == 0
    assert VERDICTS[r["verdict"][0]] == "busy"
    f, r = _late_rank_features(0, monkeypatch)
    assert f["all_busy_bins"][0] == 5 and f["cold_bins"][0] == 1


def _starving_from_44s(epoch_boundary: bool):
    """1 GPU at full speed, then from 44 s idle half of every second while its 4 loader
    workers run flat out. With ``epoch_boundary``, every GPU stops from 30 s to 36 s while
    4 new workers start (and run flat out filling their queue until 40 s)."""
    def util(g, t):
        if epoch_boundary and 30 <= t < 36:
            return 0.0
        return 0.0 if t >= 44 and t % 1.0 < 0.5 else 100.0

    def jobs(t):
        new = epoch_boundary and t >= 30
        hot = t >= 44 or (new and t < 40)
        return [JobProcs(gpu=0, main_pid=100, main_cpu_pct=40.0, main_thread_max_pct=None,
                         loader_workers=4, loader_cpu_pct=400.0 if hot else 150.0,
                         loader_busy=4 if hot else 1,
                         loader_age_s=(t - 30.0) if new else 300.0 + t)]
    return with_host(window(64, 1, util, power=lambda g, t: 300.0 if util(g, t) else 80.0,
                            pids=lambda g: (100,)), jobs)


def _first(verdicts, v):
    return min(s for s, x in verdicts.items() if x == v)


def test_starvation_with_its_cause_on_the_host_is_taken_at_its_first_verdict():
    """Once the GPU waits and its loaders are saturated, busy gives way to data_starvation at
    the first such verdict rather than after hold_s: a second sooner than when the host's
    cause is ignored, and than within window_max_s of a pause (an epoch boundary's new
    workers run flat out while they refill the queue, whether or not they keep up later)."""
    from gpumon.detect.thresholds import DEFAULT
    steady = _verdicts(_starving_from_44s(False))
    epoch = _verdicts(_starving_from_44s(True))
    assert all(v == "busy" for s, v in steady.items() if s < 44)
    assert all(v in ("busy", "paused") for s, v in epoch.items() if s < 44)
    first = _first(steady, "data_starvation")
    assert first <= 46 and _first(epoch, "data_starvation") == first + 1


# -- issue 18: what users saw ------------------------------------------------------------------
def _live(ticks):
    det = Detector()
    return {round(tk.time - T0): det.update(tk)[0] for tk in ticks}


def test_gpus_at_zero_holding_memory_are_never_busy():
    """90 s of 0% on 4 GPUs holding 30 GB each, after 40 s of steady work: a pause at first,
    then idle (held), never busy beside 0%."""
    util = lambda g, t: 100.0 if t < 40 else 0.0          # noqa: E731
    v = _live(window(130, 4, util, power=lambda g, t: 300.0 if t < 40 else 60.0,
                     mem=30000.0))
    after = {s: d for s, d in v.items() if s > 42}
    assert all(d.verdict != "busy" for d in after.values()), {
        s: d.verdict for s, d in after.items() if d.verdict == "busy"}
    last = v[max(v)]
    assert (last.verdict, last.cause, last.rule) == ("idle", "held", "no_kernels")
    assert "30000 MiB" in last.because and "py-spy" in last.advice


def test_a_collective_that_never_completes_is_a_hang():
    """Four GPUs at 100% drawing 24% of their limit for two minutes: a hang, not busy."""
    v = _live(window(130, 4, lambda g, t: 100.0, power=lambda g, t: 96.0))
    assert all(d.verdict != "busy" for s, d in v.items() if s > 35)
    last = v[max(v)]
    assert (last.verdict, last.cause, last.rule) == ("sync_stall", "hang", "hang")
    assert "24% of their power limit" in last.because and "NCCL_DEBUG" in last.advice
    # A short spell of it (a checkpoint's wait) is not a hang.
    short = _live(window(20, 4, lambda g, t: 100.0, power=lambda g, t: 96.0))
    assert all(d.cause != "hang" for d in short.values())


def test_rank0_checkpoint_in_an_nvidia_smi_log_is_a_stall_on_rank0s_host(tmp_path):
    """8 GPUs at 0.1 s with power (no index column, as the public H100 traces): GPU 0 saves a
    checkpoint (3%) for 20 s in every 40 while GPUs 1-7 wait in the all-reduce at 100% and
    150 W. No host counters: sync_stall, rank_host, straggler 0; never starvation advice."""
    from gpumon.analyze import analyze_file, summary
    rows = []
    for k in range(2400):
        t = k * 0.1
        stall = t >= 40 and (t % 40) >= 20
        for g in range(8):
            ms = int(round(t * 1000)) + g
            util, pw = ((3, 90) if g == 0 else (100, 150)) if stall else (92, 560)
            rows.append(f"2025/07/27 00:{int(ms // 60000):02d}:{ms % 60000 // 1000:02d}."
                        f"{ms % 1000:03d}, {pw}.00 W, {util} %, 60000 MiB")
    p = tmp_path / "ckpt.csv"
    p.write_text("timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]\n"
                 + "\n".join(rows) + "\n")
    _, tl = analyze_file(str(p))
    stalls = [d for d in tl.segments if d.verdict == "sync_stall"]
    assert stalls and all((d.cause, d.straggler_gpu) == ("rank_host", 0) for d in stalls)
    assert not [d for d in tl.segments if d.verdict == "data_starvation"]
    # Stalls of 20 s in every 40 after the first 40 s: about 45% of the run.
    assert 0.35 <= summary(tl)["fractions"]["sync_stall"] <= 0.55, summary(tl)
    assert all("power" not in d.missing and "memory" not in d.missing for d in tl.segments)


def test_dataparallel_in_an_nvidia_smi_log_is_not_starvation(tmp_path):
    """nn.DataParallel, read from nvidia-smi: GPU 0 computes longer and hotter (it gathers),
    GPUs 1-3 idle between their shares at low power: GPU 0 is the straggler, a sync_stall."""
    from gpumon.analyze import analyze_file, summary
    rows = []
    for s in range(120):
        stamp = f"2024/01/15 10:{s // 60:02d}:{s % 60:02d}.000"
        for g in range(4):
            util, pw = (100, 280) if g == 0 else ((60, 120) if s % 2 else (35, 90))
            rows.append(f"{stamp}, {g}, {util} %, {pw}.00 W, 400.00 W")
    p = tmp_path / "dp.csv"
    p.write_text("timestamp, index, utilization.gpu [%], power.draw [W], power.limit [W]\n"
                 + "\n".join(rows) + "\n")
    sm = summary(analyze_file(str(p))[1])
    assert (sm["verdict"], sm["straggler_gpu"]) == ("sync_stall", 0), sm


@pytest.mark.parametrize("seed", range(5))
def test_the_demo_says_each_phase(seed):
    """`make run`'s simulated demo, two full cycles: from 5 s after each phase starts, the
    live verdict is that phase's true one in at least 90% of its seconds (issue 18: the
    starvation phase used to read busy, its loader restart held as a pause). Each starvation
    phase (new loader workers, then bursts and gaps) reads data_starvation from 5 s after
    its change on (issue 36: `paused (epoch_boundary)` for 5-7 s, right 6-8 s after it)."""
    from collections import Counter, defaultdict
    from gpumon.sim import simulate
    det = Detector()
    right: dict = defaultdict(Counter)
    phase, since, before, late = None, 0.0, 0.0, []
    for tk in simulate("demo", seconds=640, seed=seed):
        d = det.update(tk)[0]
        if tk.truth.scenario != phase:
            phase, since, change = tk.truth.scenario, tk.time, before
        before = tk.time
        said = d is not None and d.verdict == tk.truth.verdict
        if tk.time - since >= 5:
            right[phase][said] += 1
        if phase in ("data_starvation", "io_fetch") and tk.time - change >= 5 and not said:
            late.append((phase, round(tk.time - change), d and (d.verdict, d.cause)))
    shares = {p: c[True] / sum(c.values()) for p, c in right.items()}
    assert len(shares) >= 6 and min(shares.values()) >= 0.9, shares
    assert not late, late


def test_a_pause_shows_the_samples_and_signals_the_driver_delivered():
    """During a pause (every GPU stopped after steady work) the banner's evidence still says
    how many samples a second arrive and lists no signal as missing that the GPUs report
    (issue 18: samples_per_s 0.00 and every signal missing)."""
    util = lambda g, t: 100.0 if t < 40 or t >= 52 else 0.0      # noqa: E731
    v = _live(window(60, 2, util, power=lambda g, t: 300.0 if util(g, t) else 60.0,
                     clock=lambda g, t: 1400.0, events=lambda g, t: 0))
    paused = [d for s, d in v.items() if d.verdict == "paused"]
    assert paused
    for d in paused:
        assert d.evidence["samples_per_s"] == pytest.approx(6.0, abs=0.5)
        assert not {"power", "clocks", "clock_events", "memory"} & set(d.missing), d.missing


def test_a_job_starting_up_is_paused_until_its_first_gpu_work():
    """Benchmark-style runs (sim `restarts`): each run's start-up holds GPU memory with the
    GPUs idle and the main process at a core, no loader workers yet. Before its first GPU work
    the job has nothing to starve for: its start-up is `paused` (startup), never starvation
    (the main process at a core read as num_workers=0 preprocessing before the fix)."""
    from gpumon.sim import simulate
    det = Detector()
    startup, called = 0, []
    for tk in simulate("restarts", gpus=2, seconds=400, seed=3, start_time=1.7e9):
        ds = det.update(tk)
        if tk.truth.verdict == "paused" and ds:
            startup += 1
            called.append(ds[0].verdict)
    assert startup >= 10
    assert "data_starvation" not in called and "sync_stall" not in called, called
    assert called.count("paused") >= 0.8 * len(called), called


def test_starvation_without_a_host_cause_names_what_else_looks_the_same():
    """With no cause on the host (input_pipeline: a plain nvidia-smi log), stops that keep
    coming back read as starvation; a checkpoint or evaluation run as often looks the same
    on the GPUs, and the advice says so rather than only "add workers"."""
    from gpumon.detect.advice import advice
    line = advice("data_starvation", "input_pipeline", None)
    assert "DataLoader workers" in line and "checkpoint or evaluation" in line
    assert "host counters" in line
    assert "checkpoint" not in advice("data_starvation", "cpu_preprocessing", None)


def _sim_missing(seconds: int, seed: int, drop) -> list:
    """A simulated steady 2-GPU job's ticks without process lists (a container, a replayed
    nvidia-smi log), each poll's samples inside one second (as a log sampled off the second
    has them), less the samples ``drop(gpu, seconds since T0)`` is true of."""
    from gpumon.sim import simulate
    ticks = []
    for t in simulate("busy", gpus=2, seconds=seconds, seed=seed, start_time=T0):
        gs = (dataclasses.replace(g, time=g.time - 0.01, pids=None) for g in t.gpus)
        ticks.append(dataclasses.replace(t, gpus=tuple(
            g for g in gs if not drop(g.gpu, g.time - T0))))
    return ticks


def test_a_second_without_samples_keeps_the_job():
    """A replayed log with a hole (here: seconds 40-41 of a steady 2-GPU job, no sample
    from any GPU, no process list) says nothing of which GPUs are in use: the job is not
    dropped and found anew (it would read idle, then paused at its "start-up"), it stays
    busy."""
    ticks = _sim_missing(90, 3, lambda g, t: 40 <= t < 42)
    det = Detector()
    seen = []
    for t in ticks:
        ds = det.update(t)
        if t.time - ticks[0].time >= 30:
            seen.append((round(t.time - ticks[0].time), ds[0].verdict if ds else None))
    assert {v for _, v in seen} == {"busy"}, seen


def test_a_rank0_save_reads_busy_live_once_every_gpu_is_back_at_work():
    """Live, no host counters: GPU 0 saves for 5 s (3%) while GPUs 1-3 wait at 100% and 150 of
    700 W, between stretches of work at 88-92% (a real H100 job's level after a save). The
    save reads as a stall on rank 0's host, and the work after it as busy again once every
    GPU has worked 3 s (recover_s), not once the save has left the window (``stall_over``),
    nor 2 s later (hold_s): stall_over has waited for its evidence itself."""
    def save(t):
        return t >= 40 and (t - 40) % 25 < 5

    def util(g, t):
        return (3.0 if g == 0 else 100.0) if save(t) else (88.0 if int(t + g) % 2 else 92.0)

    def power(g, t):
        return (90.0 if g == 0 else 150.0) if save(t) else 560.0

    det = Detector()
    got = {}
    for tk in window(140, 4, util, power, limit=700.0):
        ds = det.update(tk)
        got[round(tk.time - T0) - 1] = (ds[0].verdict, ds[0].rule)
    for a in (40, 65, 90, 115):
        assert ("sync_stall", "rank_host") in {got[s] for s in range(a + 1, a + 6)}, (a, got)
        after = [got[s] for s in range(a + 5 + 3, a + 25)]
        assert {v for v, _ in after} == {"busy"}, (a, after)
    assert any(r == "stall_over" for _, r in got.values())


def test_a_hole_longer_than_a_window_reads_insufficient_data_and_keeps_the_job():
    """No sample at all for 10 s (more than a window) from a steady 2-GPU job without process
    lists: a window of those seconds says nothing, so it reads insufficient_data (not idle),
    and when the samples come back the job is judged on, busy, not found anew as a job
    starting up (paused, startup)."""
    ticks = _sim_missing(100, 4, lambda g, t: 40 <= t < 50)
    det = Detector()
    got = {}
    for t in ticks:
        ds = det.update(t)
        got[round(t.time - T0)] = ds[0].verdict if ds else None
    # (Live, a poll with no sample changes nothing; the hole shows once samples come back.)
    assert {got[s] for s in range(30, 101)} <= {"busy", "insufficient_data"}, got
    assert {got[s] for s in range(56, 101)} == {"busy"}, got


def test_a_gpu_without_samples_for_a_second_stays_in_its_job():
    """GPU 1 of a steady 2-GPU job (no process lists) sends no sample for one second, as at
    the edge of a hole in a replayed log: it is not thereby unused. The job stays the same
    two GPUs, busy, rather than one GPU for a second and then a job found anew and held as
    starting up (paused, startup)."""
    ticks = _sim_missing(80, 5, lambda g, t: g == 1 and 40 <= t < 41)
    det = Detector()
    got = []
    for t in ticks:
        ds = det.update(t)
        if t.time - T0 >= 30:
            got.append((round(t.time - T0), [(d.gpus, d.verdict) for d in ds]))
    assert all(v == [((0, 1), "busy")] for _, v in got), got


def test_live_a_job_that_starts_on_a_flat_plateau_is_judged_after_startup_run_s():
    """Live, a job running a flat 40% from its first kernel (batch-1 generation) is a
    start-up for startup_run_s, then data_starvation, not paused for pause_max_s."""
    det = Detector()
    ticks = window(100, 1, lambda g, t: 0.0 if t < 13 else 40.0, pids=lambda g: (100,),
                   mem=lambda g: 20000.0)
    # No process and no memory before the job starts at 10 s (it loads for 3 s).
    ticks = [Tick(time=tk.time, gpus=tuple(x if x.time - T0 >= 10 else dataclasses.replace(
        x, pids=(), mem_used_mib=3.0) for x in tk.gpus)) for tk in ticks]
    v = [det.update(tk)[0].verdict for tk in ticks]
    assert "paused" in v[10:20], v                      # (its start-up)
    first = v.index("data_starvation")
    assert first <= 13 + DEFAULT.context_s + DEFAULT.hold_s + 2, v
    assert set(v[first:]) == {"data_starvation"}, v


# -- stops shorter than a second (the seconds table's gap_stop), and a pause that turns into a rank's stall
def _save_every(period: float, lasting: float, start: float = 40.0):
    """True within the ``lasting`` s of a stop every ``period`` s from ``start``."""
    return lambda t: t >= start and (t - start) % period < lasting


def test_a_stop_under_a_second_between_steady_seconds_is_a_pause_not_starvation():
    """One GPU at 87-94% (a BERT fine-tune's level on an L40S, l40s-bert-trainer-screens in
    bench/real) stops for 0.7 s every 40 s to save: no second's duty falls under
    trickle_duty, but each 6 s window holding a save reads under duty_starved. Every GPU in
    a gap of 0.5 s or more, seen in 6 samples a second, is a stop: live, the saves read busy
    or paused, never data_starvation (they read it for ~5 s each)."""
    save = _save_every(40.0, 0.7)

    def util(g, t):
        return 6.0 if save(t) else (87.0 if int(t * 6) % 3 == 0 else 94.0)
    ticks = window(200, 1, util, power=lambda g, t: 120.0 if save(t) else 340.0,
                   pids=lambda g: (100,))
    v = _verdicts(ticks)
    assert "data_starvation" not in {v[s] for s in range(20, 200)}, v
    off = _verdicts(ticks, dataclasses.replace(DEFAULT, stop_gap_s=10.0))
    assert "data_starvation" in {off[s] for s in range(20, 200)}, off


def test_a_job_starving_in_sub_second_gaps_is_still_starving():
    """The same signal on a starving job: every step waits 0.6 s for its batch. Its stops
    recur every second, so none is a one-off pause: data_starvation once the rhythm shows."""
    def util(g, t):
        return 100.0 if t < 40 or (t % 1.0) < 0.4 else 0.0
    v = _verdicts(window(100, 2, util, power=lambda g, t: 300.0, pids=lambda g: (100 + g,)))
    assert all(v[s] == "data_starvation" for s in range(50, 100)), v


def test_a_pause_that_turns_into_one_rank_holding_the_others_is_a_stall():
    """Every rank stops for 0.7 s (a step's end before a save), comes back for a moment, then
    rank 0 alone saves at a trickle while ranks 1-3 spin in the next all-reduce at 100% and a
    quarter of their power (h100-ddp8-ckpt500-job1 in bench/real), 10 s, no host counters:
    the stop began as a pause, but once the others spin it is a stall on rank 0's host,
    sync_stall (rank_host), not a pause of the whole job (pauses.PauseTracker: ``held``)."""
    def util(g, t):
        if 40 <= t < 40.7:
            return 0.0
        if 41 <= t < 50:
            return 8.0 if g == 0 else 100.0
        return 88.0 if int(t * 6 + g) % 2 else 92.0

    def power(g, t):
        if 41 <= t < 50:
            return 90.0 if g == 0 else 150.0
        return 120.0 if 40 <= t < 40.7 else 560.0
    v = _verdicts(window(80, 4, util, power=power, limit=700.0, pids=lambda g: (100 + g,)))
    assert all(v[s] == "sync_stall" for s in range(44, 50)), v


def test_a_rank_that_stops_after_the_start_while_the_others_spin_ends_the_start_up():
    """A job seen starting (its memory appears at 10 s), idle while it loads, then every rank
    works for 3 s and rank 0 stops (saving every 10 steps) while ranks 1-3 spin at 100% and a
    quarter of their power, 10 s (h100-ddp8-ckpt10-messy in bench/real). Ranks coming up one
    by one are a start-up; once every rank has worked back_s, one holding the others is a
    stall: sync_stall, not paused (startup) until the start-up's minute is out."""
    def util(g, t):
        if t < 20:
            return 0.0
        if 23 <= t < 33:
            return 5.0 if g == 0 else 100.0
        return 88.0 if int(t * 6 + g) % 2 else 92.0

    def power(g, t):
        if 23 <= t < 33:
            return 90.0 if g == 0 else 150.0
        return 120.0 if t < 20 else 560.0
    ticks = window(60, 4, util, power=power, limit=700.0)
    ticks = [dataclasses.replace(tk, gpus=tuple(
        dataclasses.replace(s, mem_used_mib=0.0 if s.time - T0 < 10 else 30000.0)
        for s in tk.gpus)) for tk in ticks]
    v = _verdicts(ticks)
    assert v[15] == "paused", v
    assert all(v[s] == "sync_stall" for s in range(27, 33)), v


# -- the pause tracker over a job's seconds (pauses.pause_flags) ---------------------------------
def _one_gpu(duty: list):
    """The seconds table of a 1-GPU job sampled 6 times a second at these duties."""
    from seconds_util import table_of
    return table_of(np.array([duty]))


@pytest.mark.parametrize("level, paused", [(0.97, True), (0.75, True), (0.6, False)])
def test_steady_work_for_a_context_lifts_the_cooldown_of_a_starving_pause(level, paused):
    """An epoch restart with a choppy start (work for 2 s, then another stop) is taken for
    starvation, and a job found starving gets no new pause for 3 context spans. Steady work
    (the table's at_work: work_duty or more) for a whole context (20 s) after it shows it was
    not: the next stop, 24 s later, is a pause again. Work below work_duty does not lift it."""
    from gpumon.detect.pauses import pause_flags
    d = [0.97] * 30 + [0.0] * 3 + [0.8, 0.7] + [0.0] * 2 + [level] * 24 + [0.0] * 8 + \
        [0.97] * 30
    pause, _, _ = pause_flags(_one_gpu(d), DEFAULT)
    assert not pause[33:37].all()            # the choppy restart: starvation
    assert pause[61:69].tolist() == [paused] * 8


def test_the_pause_marks_hold_the_seconds_fed_not_the_time_before_them():
    """A job first seen a day into a live run: the tracker's marks grow with the seconds fed
    to it, not with the absolute bin they start at; the bins before read as never fed."""
    from gpumon.detect.pauses import PauseMarks
    m = PauseMarks(DEFAULT)
    m.feed(_one_gpu([0.97] * 5), 86_400)
    assert len(m.pause) == 5
    pause, excl, why = m.arrays(86_398, 86_405)
    assert len(pause) == 7 and not pause.any() and not excl.any() and (why == -1).all()


def test_a_pause_leaves_out_the_seconds_its_stop_ran_before_it_was_told():
    """Saves 15 s apart: each a second half-spent (the stop began inside it), then rank 0
    alone at a trickle. With the first save within context_s, the second is told from a
    starved rank's late batch only once rank 0 was alone two seconds; the seconds its stop
    ran before that are left out of the windows too (not only the one just before the
    pause): otherwise they stay in the windows after it and read as starvation
    (titanx-ddp2-ckpt-paused-125m in bench/real)."""
    from gpumon.detect.pauses import CAUSES, pause_flags
    work = [0.95] * 40
    save = [0.5, 0.1, 0.1, 0.1, 0.3]          # rank 0: half a second, then alone
    wait = [0.5, 0.0, 0.0, 0.0, 0.2]          # rank 1
    duty = np.array([work + save + work[:10] + save + work,
                     work + wait + work[:10] + wait + work])
    from seconds_util import table_of
    pause, excl, why = pause_flags(table_of(duty), DEFAULT)
    second = 55                               # the second save's half-spent second
    first = second + int(np.flatnonzero(pause[second:])[0])
    assert first == second + 2                # told once rank 0 was alone two seconds
    assert excl[second:first].all()           # the stop's own seconds before it, left out
    assert not excl[second - 10:second].any()   # the work before it kept
    assert why[first] == CAUSES.index("checkpoint")
