"""The simulated training node: contract, physical coherence, each scenario's properties,
determinism, trace files, real-time source."""
from __future__ import annotations

import json
import time
from dataclasses import astuple, replace

import numpy as np
import pytest

from gpumon import diagnosis as dx
from gpumon.errors import UserError
from gpumon.samples import (CLOCK_EVENT_GPU_IDLE, CLOCK_EVENT_SW_POWER_CAP,
                            CLOCK_EVENT_SW_THERMAL, CLOCK_EVENTS_THROTTLE)
from gpumon.sim import (PARAMS, SCENARIOS, STATES, SimSource, Truth, draw_params,
                        parse_sim_spec, simulate)
from gpumon.sim import params as P
from gpumon.sim.trace import main as trace_main, read_trace, write_trace

CONTRACT = ("busy", "idle", "data_starvation", "io_fetch", "main_process", "sync_stall",
            "rank_data_stall", "hang", "held", "throttled", "dataparallel", "checkpoint",
            "rank0_checkpoint", "validation", "epoch_end", "restarts", "launch_bound",
            "ddp_spread", "small_batch", "demo")
SECONDS = 120
_cache: dict = {}


def run(name, gpus=None, seconds=SECONDS, seed=1, params=None, interval=1.0):
    key = (name, gpus, seconds, seed, json.dumps(params, sort_keys=True), interval)
    if key not in _cache:
        _cache[key] = list(simulate(name, gpus=gpus, seconds=seconds, seed=seed,
                                    params=params, interval=interval))
    return _cache[key]


def per_gpu(ticks, field):
    """(gpus, samples) array of a GpuSample field."""
    n = len(ticks[0].truth.gpus)
    return np.array([[getattr(s, field) for tk in ticks for s in tk.gpus if s.gpu == g]
                     for g in range(n)], dtype=float)


def power_frac(ticks):
    return per_gpu(ticks, "power_w") / ticks[0].gpus[0].power_limit_w


def truth_states(ticks, g, state):
    return float(np.mean([tk.truth.states[g][state] for tk in ticks]))


# -- contract ------------------------------------------------------------------------------
def test_scenario_names_are_the_contract():
    assert tuple(SCENARIOS) == CONTRACT
    for s in SCENARIOS.values():
        assert s.description and s.verdict in dx.VERDICTS
        assert s.cause is None or s.cause in dx.CAUSES
        assert 1 <= s.min_gpus <= s.default_gpus <= 8


def test_parse_sim_spec():
    assert parse_sim_spec("sync_stall:4") == ("sync_stall", 4)
    assert parse_sim_spec("busy") == ("busy", SCENARIOS["busy"].default_gpus)
    for bad in ("nope", "busy:x", "busy:0", "busy:9", "sync_stall:1", "dataparallel:1", ""):
        with pytest.raises(UserError) as e:
            parse_sim_spec(bad)
        assert "\n" not in str(e.value)


def test_unknown_parameter_is_a_user_error():
    with pytest.raises(UserError):
        list(simulate("busy", seconds=1, params={"no_such_knob": 1}))
    with pytest.raises(UserError):
        list(simulate("busy", seconds=1, params={"backend": "mpi"}))


# -- physical coherence ----------------------------------------------------------------------
def check_coherent(ticks, params=None):
    n = len(ticks[0].truth.gpus)
    hw = P.finish(P.defaults(params or {}))
    limit = ticks[0].gpus[0].power_limit_w
    smax = ticks[0].gpus[0].sm_clock_max_mhz
    last = {}
    for i, tk in enumerate(ticks):
        assert isinstance(tk.truth, Truth)
        counts = {}
        for s in tk.gpus:
            assert s.source == "sim"
            counts[s.gpu] = counts.get(s.gpu, 0) + 1
            assert s.time > last.get(s.gpu, -1), "time never goes back"
            assert s.time <= tk.time + 1e-6
            last[s.gpu] = s.time
            assert 0 <= s.util_gpu_pct <= 100 and s.util_gpu_pct == int(s.util_gpu_pct)
            assert 0 <= s.util_mem_pct <= 100
            assert 0.8 * hw["idle_power_frac"] * limit <= s.power_w <= limit
            assert hw["sm_clock_idle_mhz"] - 1 <= s.sm_clock_mhz <= smax
            assert 15 <= s.temp_c <= 100
            assert 0 <= s.mem_used_mib <= s.mem_total_mib
            assert s.pcie_rx_mbps >= 0 and s.pcie_tx_mbps >= 0
            assert isinstance(s.clock_events, int) and 0 <= s.clock_events < 256
            # GpuIdle exactly when the clock sits at the idle clock.
            idle_clock = abs(s.sm_clock_mhz - hw["sm_clock_idle_mhz"]) < 1
            assert bool(s.clock_events & CLOCK_EVENT_GPU_IDLE) == idle_clock
            assert isinstance(s.pids, tuple)
        if i > 0:   # one sample per GPU per driver period (1/6 s) at interval 1 s
            assert counts == {g: 6 for g in range(n)}
        for g in range(n):
            st = tk.truth.states[g]
            assert set(st) == set(STATES)
            assert abs(sum(st.values()) - 1) < 1e-6 and min(st.values()) >= -1e-9
        h = tk.host
        assert 0 <= h.cpu_pct <= 100 and 0 <= h.iowait_pct <= 100
        assert h.disk_read_mbps >= 0 and h.disk_write_mbps >= 0
        assert len(h.cpu_cores_pct) == h.cpu_count
        assert all(0 <= c <= 100 for c in h.cpu_cores_pct)
        for j in h.jobs:
            assert j.main_pid is not None and 0 <= j.main_cpu_pct <= 100 * h.cpu_count
            assert j.main_thread_max_pct <= 100.0 + 1e-6
            assert j.loader_busy <= j.loader_workers
    energy = per_gpu(ticks, "energy_j")
    assert (np.diff(energy, axis=1) > 0).all()


@pytest.mark.parametrize("name", CONTRACT)
def test_coherent_with_defaults(name):
    check_coherent(run(name), SCENARIOS[name].params)


@pytest.mark.parametrize("name", CONTRACT)
def test_coherent_with_drawn_parameters(name):
    for seed in (11, 12):
        p = draw_params(name, seed)
        for k, (_, rng) in PARAMS.items():
            rng = SCENARIOS[name].ranges.get(k, rng)
            if rng and rng[0] != "choice":
                assert rng[0] <= p[k] <= rng[1], k
        spec = SCENARIOS[name]
        ticks = list(simulate(name, gpus=max(spec.min_gpus, 3), seconds=40, seed=seed,
                              params=p))
        check_coherent(ticks, p)


def test_step_time_range_is_possible():
    for step in (0.05, 2.0):
        ticks = run("busy", params={"step_s": step}, seconds=40)
        util = per_gpu(ticks[10:], "util_gpu_pct")
        assert util.mean() > 90


# -- determinism -------------------------------------------------------------------------
_GPM = dict.fromkeys(("sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio",
                      "dram_active_ratio"))


def but_gpm(ticks) -> list:
    """Every sample of the ticks but its GPM means (those depend on the tick interval)."""
    return [astuple(replace(s, **_GPM)) for t in ticks for s in t.gpus]


def test_same_seed_same_output_and_cut_independent():
    a = list(simulate("demo", gpus=3, seconds=90, seed=5))
    b = list(simulate("demo", gpus=3, seconds=90, seed=5))
    assert [astuple(s) for t in a for s in t.gpus] == [astuple(s) for t in b for s in t.gpus]
    assert [t.host for t in a] == [t.host for t in b]
    assert [t.truth for t in a] == [t.truth for t in b]
    # The sample stream does not depend on the tick interval, but for GPM: the mean since the
    # poll before, as NVML's GPM gives it (a 1 s tick's = the mean of its two 0.5 s ticks').
    c = list(simulate("demo", gpus=3, seconds=90, seed=5, interval=0.5))
    assert but_gpm(a) == but_gpm(c)
    whole = [t.gpus[0].sm_active_ratio for t in a]
    halves = [(x.gpus[0].sm_active_ratio + y.gpus[0].sm_active_ratio) / 2
              for x, y in zip(c[::2], c[1::2])]
    assert whole == pytest.approx(halves) and max(whole) > 0.3
    d = list(simulate("demo", gpus=3, seconds=90, seed=6))
    assert [s.power_w for t in a for s in t.gpus] != [s.power_w for t in d for s in t.gpus]


# -- scenario properties -----------------------------------------------------------------
def test_busy():
    ticks = run("busy")
    assert per_gpu(ticks, "util_gpu_pct").mean() > 95
    assert power_frac(ticks).mean() > 0.6
    assert all(j.loader_busy == 0 for tk in ticks for j in tk.host.jobs)
    assert {tk.truth.verdict for tk in ticks} == {dx.BUSY}


def test_boards_differ_in_power_at_the_same_work():
    # Real boards of one model at the same work differ by a few per cent (two TITAN X 5-6%
    # apart); chip_power_spread draws each board's factor within +-spread.
    base = {"compute_power_frac": 0.8, "backend": "nccl"}
    for spread in (0.0, 0.03):
        pf = power_frac(run("busy", gpus=8, params={**base, "chip_power_spread": spread}))
        mean = pf[:, 5:].mean(axis=1)
        apart = mean.max() / mean.min() - 1
        if spread:
            assert 0.01 < apart <= 2 * spread + 0.01, mean
        else:
            assert apart < 0.01, mean


def test_a_healthy_job_is_warmed_up_at_the_start():
    """A scenario starts from a job in steady state: its loader workers' first batches
    (slow ones: 11 workers, each batch ~9 s of preprocessing, heavy jitter) landed during the
    warm-up, so no rank waits for data in the first seconds of a healthy run."""
    params = {"workers": 11, "prep_load": 0.56, "prep_cv": 0.4, "step_s": 1.5,
              "backend": "nccl"}
    for seed in range(1, 6):
        ticks = run("busy", gpus=4, seconds=15, seed=seed, params=params)
        waiting = max(truth_states(ticks, g, "waiting_data") for g in range(4))
        assert waiting < 0.05, (seed, waiting)


def test_idle():
    ticks = run("idle")
    assert (per_gpu(ticks, "util_gpu_pct") == 0).all()
    assert all(s.pids == () and s.clock_events & CLOCK_EVENT_GPU_IDLE
               for tk in ticks for s in tk.gpus)
    assert all(tk.host.jobs == () and tk.host.procs == () for tk in ticks)
    assert power_frac(ticks).max() < 0.25
    assert {tk.truth.verdict for tk in ticks} == {dx.IDLE}


def test_data_starvation_gloo_all_gpus_idle_together():
    ticks = run("data_starvation", gpus=3, params={"backend": "gloo"})
    util = per_gpu(ticks, "util_gpu_pct")
    all_idle = (util == 0).all(axis=0).mean()
    assert all_idle > 0.1, "all GPUs idle together between bursts"
    assert (util >= 90).any(axis=1).all(), "bursts at full utilization"
    check_loaders_saturated(ticks, range(3))
    assert {(tk.truth.verdict, tk.truth.cause) for tk in ticks} == \
        {(dx.DATA_STARVATION, "cpu_preprocessing")}
    assert all(tk.truth.straggler_gpu is None for tk in ticks)


def check_loaders_saturated(ticks, gpus):
    for g in gpus:
        jobs = [tk.host.job_on(g) for tk in ticks[5:]]
        share = np.mean([j.loader_busy == j.loader_workers for j in jobs])
        assert share > 0.6, f"GPU {g} loader workers saturated"


def test_data_starvation_nccl():
    ticks = run("data_starvation", gpus=4)
    util = per_gpu(ticks, "util_gpu_pct")
    # Early on the ranks starve together (they start in step).
    assert (util[:, :60] == 0).all(axis=0).mean() > 0.1
    # Every rank waits (for data, or spinning for a rank whose batch is late).
    for g in range(4):
        assert truth_states(ticks, g, "computing") < 0.75
    check_loaders_saturated(ticks, range(4))


def test_io_fetch():
    ticks = run("io_fetch")
    iow = np.array([tk.host.iowait_pct for tk in ticks[5:]])
    rd = np.array([tk.host.disk_read_mbps for tk in ticks[5:]])
    assert iow.mean() > 2 and rd.mean() > 50
    assert rd.std() / rd.mean() < 0.2, "disk at its limit, steadily"
    assert np.mean([j.loader_busy for tk in ticks for j in tk.host.jobs]) < 0.5
    assert per_gpu(ticks, "util_gpu_pct").mean() < 80
    assert ticks[50].truth.cause == "io_fetch"


def test_main_process():
    ticks = run("main_process")
    jobs = [tk.host.job_on(0) for tk in ticks[5:]]
    assert all(j.loader_workers == 0 for j in jobs)
    thr = np.array([j.main_thread_max_pct for j in jobs])
    assert thr.mean() > 85, "main thread near one core"
    assert per_gpu(ticks, "util_gpu_pct").mean() < 75
    assert ticks[50].truth.cause == "main_process"


def test_sync_stall():
    ticks = run("sync_stall", gpus=4, params={"straggler": 2})
    pf = power_frac(ticks).mean(axis=1)
    util = per_gpu(ticks, "util_gpu_pct").mean(axis=1)
    others = [0, 1, 3]
    assert pf[2] > pf[others].max() + 0.15, "straggler hot"
    assert (util[others] > 95).all(), "others read ~100%"
    assert (pf[others] < 0.65).all(), "... at low power"
    assert {tk.truth.straggler_gpu for tk in ticks} == {2}
    assert truth_states(ticks, 0, "waiting_sync") > 0.3


def test_sync_stall_gloo_waits_idle():
    ticks = run("sync_stall", gpus=2, params={"straggler": 0, "backend": "gloo"})
    util = per_gpu(ticks, "util_gpu_pct").mean(axis=1)
    assert util[0] > 95 and util[1] < 75


def test_rank_data_stall():
    ticks = run("rank_data_stall", gpus=4, params={"straggler": 1})
    util = per_gpu(ticks, "util_gpu_pct").mean(axis=1)
    assert util[1] < 75 and (util[[0, 2, 3]] > 95).all()
    check_loaders_saturated(ticks, [1])
    assert np.mean([tk.host.job_on(0).loader_busy for tk in ticks]) < 1
    assert {(tk.truth.verdict, tk.truth.straggler_gpu) for tk in ticks} == \
        {(dx.DATA_STARVATION, 1)}
    assert truth_states(ticks, 1, "waiting_data") > 0.25


def test_dataparallel():
    ticks = run("dataparallel", gpus=4)
    pids = {s.pids for tk in ticks for s in tk.gpus}
    assert len(pids) == 1 and len(next(iter(pids))) == 1, "one PID on every GPU"
    util = per_gpu(ticks, "util_gpu_pct").mean(axis=1)
    assert util[0] > util[1:].max() + 20
    assert len({p.pid for p in ticks[50].host.procs if p.role == "main"}) == 1
    assert {(tk.truth.verdict, tk.truth.cause, tk.truth.straggler_gpu) for tk in ticks} == \
        {(dx.SYNC_STALL, "dataparallel", 0)}


def test_throttled_thermal():
    ticks = run("throttled", gpus=2, params={"straggler": 1})
    ev = per_gpu(ticks, "clock_events").astype(int)
    clk = per_gpu(ticks, "sm_clock_mhz").mean(axis=1)
    temp = per_gpu(ticks, "temp_c")
    assert (ev[1] & CLOCK_EVENT_SW_THERMAL).mean() > 0.9
    assert not (ev[0] & CLOCK_EVENTS_THROTTLE).any()
    assert clk[1] < 0.85 * clk[0]
    assert temp[1].mean() > 82 and temp[1].mean() > temp[0].mean() + 10
    assert {(tk.truth.verdict, tk.truth.cause, tk.truth.straggler_gpu) for tk in ticks} == \
        {(dx.THROTTLED, "thermal", 1)}


def test_throttled_power_cap_one_gpu():
    ticks = run("throttled", gpus=1, params={"throttle_reason": "power_cap"})
    ev = per_gpu(ticks, "clock_events").astype(int)
    assert (ev[0] & CLOCK_EVENT_SW_POWER_CAP).mean() > 0.9
    assert power_frac(ticks).mean() > 0.9
    assert {(tk.truth.cause, tk.truth.straggler_gpu) for tk in ticks} == {("power_cap", None)}


def pause_runs(ticks):
    flags = [tk.truth.pause for tk in ticks]
    return sum(1 for a, b in zip([False] + flags, flags) if b and not a)


def test_checkpoint():
    ticks = run("checkpoint", seconds=180)
    assert pause_runs(ticks) >= 2, "periodic"
    util = per_gpu(ticks, "util_gpu_pct").reshape(len(ticks[0].truth.gpus), len(ticks), 6)
    pause = np.array([tk.truth.pause for tk in ticks])
    assert util[:, pause].mean() < 10, "GPUs idle while saving"
    assert util[:, ~pause][:, 2:].mean() > 90, "busy otherwise"
    writes = np.array([tk.host.disk_write_mbps for tk in ticks])
    assert writes[pause].mean() > 100 and writes[~pause].max() < writes[pause].mean()
    # A healthy job: busy, and paused while it stops (its truth says so, second by second).
    assert {(tk.truth.verdict, tk.truth.pause) for tk in ticks} == {(dx.BUSY, False),
                                                                    (dx.PAUSED, True)}


def test_validation():
    ticks = run("validation", seconds=180)
    assert pause_runs(ticks) >= 2
    pause = np.array([tk.truth.pause for tk in ticks])
    util = per_gpu(ticks, "util_gpu_pct").reshape(2, len(ticks), 6).mean(axis=(0, 2))
    assert util[pause].mean() < util[~pause].mean() - 15, "a different rhythm"
    # A healthy job: busy, and paused while it stops (its truth says so, second by second).
    assert {(tk.truth.verdict, tk.truth.pause) for tk in ticks} == {(dx.BUSY, False),
                                                                    (dx.PAUSED, True)}


def test_epoch_end_restarts_workers():
    ticks = run("epoch_end", seconds=180)
    assert pause_runs(ticks) >= 2
    first = next(i for i, tk in enumerate(ticks) if tk.truth.pause)
    end = next(i for i in range(first, len(ticks)) if not ticks[i].truth.pause)
    before = {p.pid for p in ticks[first - 2].host.procs if p.role == "worker"}
    after = {p.pid for p in ticks[end + 1].host.procs if p.role == "worker"}
    assert before and after and not before & after, "new worker PIDs after the boundary"
    # A healthy job: busy, and paused while it stops (its truth says so, second by second).
    assert {(tk.truth.verdict, tk.truth.pause) for tk in ticks} == {(dx.BUSY, False),
                                                                    (dx.PAUSED, True)}


RESTARTS = {"run_s": 30.0, "gap_s": 8.0, "startup_s": 5.0}


def runs_of(ticks):
    """[(first, last) tick index] of each run: consecutive ticks whose truth is not idle."""
    out, start = [], None
    for i, tk in enumerate(ticks + [None]):
        live = tk is not None and tk.truth.verdict != dx.IDLE
        if live and start is None:
            start = i
        elif not live and start is not None:
            out.append((start, i - 1))
            start = None
    return out


def test_restarts_truth_and_physics():
    """Benchmark-style runs: each run starts up (paused, startup: memory held, GPUs idle, the
    main process busy), trains (busy), exits (idle: memory freed, no process), again."""
    ticks = run("restarts", gpus=2, seconds=240, params=RESTARTS)
    labels = {(tk.truth.verdict, tk.truth.cause, tk.truth.straggler_gpu) for tk in ticks}
    assert labels == {(dx.BUSY, None, None), (dx.PAUSED, "startup", None),
                      (dx.IDLE, None, None)}
    assert all(tk.truth.pause == (tk.truth.verdict == dx.PAUSED) for tk in ticks)
    mem, util = per_gpu(ticks, "mem_used_mib"), per_gpu(ticks, "util_gpu_pct")
    for i, tk in enumerate(ticks[1:-1], 1):
        near = {ticks[i - 1].truth.verdict, ticks[i + 1].truth.verdict}
        if tk.truth.verdict == dx.IDLE and near == {dx.IDLE}:     # inside a gap
            assert (mem[:, 6 * i:6 * i + 6] <= 1).all() and (util[:, 6 * i:6 * i + 6] == 0).all()
            assert tk.host.procs == () and all(s.pids == () for s in tk.gpus)
        if tk.truth.verdict == dx.PAUSED and near == {dx.PAUSED}:  # inside a start-up
            assert (mem[:, 6 * i:6 * i + 6] > 1000).all() and (util[:, 6 * i:6 * i + 6] == 0).all()
            assert all(s.pids for s in tk.gpus)
        if tk.truth.verdict == dx.BUSY and near == {dx.BUSY}:
            assert util[:, 6 * i:6 * i + 6].mean() > 90
    starting = [tk.host.job_on(0) for tk in ticks if tk.truth.verdict == dx.PAUSED]
    assert max(j.main_cpu_pct for j in starting if j) > 85, "the main process loads the model"


def test_restarts_new_pids_every_run_and_ranks_together():
    ticks = run("restarts", gpus=2, seconds=240, params=RESTARTS)
    spans = runs_of(ticks)
    assert len(spans) >= 4, spans
    pids = [{p for tk in ticks[a:b + 1] for s in tk.gpus for p in s.pids} for a, b in spans]
    for k in range(len(pids) - 1):
        assert len(pids[k]) == 2 and not pids[k] & pids[k + 1], "new PIDs, one per rank"
    # DDP ranks start and stop together: in every sample both GPUs have a process or neither.
    for tk in ticks:
        for k in range(0, len(tk.gpus), 2):
            assert bool(tk.gpus[k].pids) == bool(tk.gpus[k + 1].pids)
    # Gaps and trainings about as long as their parameters (10% run-to-run variation).
    gaps = [b - a - 1 for (_, a), (b, _) in zip(spans, spans[1:])]
    assert all(5 <= g <= 11 for g in gaps), gaps
    busy = [sum(tk.truth.verdict == dx.BUSY for tk in ticks[a:b + 1]) for a, b in spans[1:-1]]
    assert all(21 <= x <= 39 for x in busy), busy


def test_restarts_one_gpu_and_drawn_ranges():
    ticks = run("restarts", gpus=1, seconds=200, seed=3)
    assert len(runs_of(ticks)) >= 2
    assert {tk.truth.verdict for tk in ticks} == {dx.BUSY, dx.PAUSED, dx.IDLE}
    for seed in range(5):
        p = draw_params("restarts", seed)
        assert 2 <= p["startup_s"] <= 12 and 20 <= p["run_s"] <= 90 and 3 <= p["gap_s"] <= 20
    # The restart and launch-bound knobs are drawn for their scenarios only: every other
    # scenario's draws stay as they were.
    for name in ("busy", "checkpoint", "main_process"):
        p = draw_params(name, 7)
        assert all(p[k] == PARAMS[k][0] for k in ("startup_s", "run_s", "gap_s", "launch_duty"))
    with pytest.raises(UserError):
        list(simulate("restarts", seconds=1, params={"gap_s": 0}))


def test_restarts_same_seed_same_output_however_cut():
    a = run("restarts", gpus=2, seconds=120, seed=4, params=RESTARTS)
    b = run("restarts", gpus=2, seconds=120, seed=4, params=RESTARTS, interval=0.5)
    assert but_gpm(a) == but_gpm(b)
    c = list(simulate("restarts", gpus=2, seconds=120, seed=4, params=RESTARTS))
    assert [t.truth for t in a] == [t.truth for t in c] and [t.host for t in a] == \
        [t.host for t in c]


def test_launch_bound_flat_low_utilization():
    """Launch-bound: the GPU idles microseconds between small kernels, so every driver
    sample reads about the same partial utilization (no bursts, no gaps at zero), power in
    between idle and compute; the main process at a full core, no loader workers."""
    ticks = run("launch_bound")
    util = per_gpu(ticks, "util_gpu_pct")[0, 6:]
    assert 30 <= util.mean() <= 65 and util.min() > 25 and util.max() < 70
    assert util.std() < 4, "flat"
    per_s = util[: len(util) // 6 * 6].reshape(-1, 6)
    assert (per_s.max(axis=1) - per_s.min(axis=1) < 12).all(), "spread evenly in every second"
    pf = power_frac(ticks)[0, 6:]
    busy_pf = power_frac(run("busy"))[0, 6:]
    assert 0.25 < pf.mean() < busy_pf.mean() - 0.2 and pf.std() < 0.03
    jobs = [tk.host.job_on(0) for tk in ticks[2:]]
    assert all(j.loader_workers == 0 for j in jobs)
    assert not any(p.role == "worker" for tk in ticks for p in tk.host.procs)
    assert np.mean([j.main_thread_max_pct for j in jobs]) > 90, "main thread at a core"
    assert {(tk.truth.verdict, tk.truth.cause, tk.truth.straggler_gpu) for tk in ticks} == \
        {(dx.DATA_STARVATION, "main_process", None)}
    assert 0.3 < truth_states(ticks, 0, "computing") < 0.5 < truth_states(ticks, 0, "waiting_data")


@pytest.mark.parametrize("duty", (0.3, 0.65))
def test_launch_bound_utilization_follows_the_duty(duty):
    util = per_gpu(run("launch_bound", seconds=30, params={"launch_duty": duty}),
                   "util_gpu_pct")[0, 6:]
    assert 100 * duty - 8 <= util.mean() <= 100 * duty + 1


def test_launch_bound_ddp_every_rank():
    ticks = run("launch_bound", gpus=4, seconds=60)
    util = per_gpu(ticks, "util_gpu_pct")[:, 6:]
    assert ((util.mean(axis=1) > 30) & (util.mean(axis=1) < 70)).all()
    assert (util.std(axis=1) < 6).all() and util.min() > 20
    jobs = [tk.host.job_on(g) for tk in ticks[2:] for g in range(4)]
    assert len({j.main_pid for j in jobs}) == 4 and all(j.loader_workers == 0 for j in jobs)
    assert np.mean([j.main_thread_max_pct for j in jobs]) > 85
    assert {tk.truth.straggler_gpu for tk in ticks} == {None}
    with pytest.raises(UserError):
        list(simulate("launch_bound", seconds=1, params={"launch_duty": 1.5}))


def test_demo_passes_through_phases():
    ticks = run("demo", gpus=4, seconds=320)
    seen = []
    for tk in ticks:
        if not seen or seen[-1] != tk.truth.scenario:
            seen.append(tk.truth.scenario)
    assert seen == ["busy", "data_starvation", "busy", "sync_stall", "throttled", "io_fetch",
                    "idle", "busy"][:len(seen)] and len(seen) >= 7
    idle = [tk for tk in ticks if tk.truth.scenario == "idle"]
    assert all(tk.truth.verdict == dx.IDLE for tk in idle)
    assert all(s.pids == () for tk in idle[1:-1] for s in tk.gpus)


def test_host_procs_are_the_jobs():
    tk = run("busy")[60]
    mains = [p for p in tk.host.procs if p.role == "main"]
    workers = [p for p in tk.host.procs if p.role == "worker"]
    assert len(mains) == 2 and len(workers) == 2 * PARAMS["workers"][0]
    assert all(p.pid >= 40000 for p in tk.host.procs)
    for j in tk.host.jobs:
        assert tk.gpus[j.gpu].pids == (j.main_pid,)
        assert j.loader_workers == sum(1 for w in workers if w.ppid == j.main_pid)


# -- trace files -----------------------------------------------------------------------------
def test_trace_roundtrip(tmp_path):
    path = tmp_path / "s.trace"
    with open(path, "w") as f:
        rows = write_trace(f, "sync_stall", gpus=3, seconds=10, seed=2)
    tr = read_trace(str(path))
    assert tr.ngpus == 3 and len(tr.gpus) == 3 and rows == len(tr.samples) == 3 * 60
    assert tr.duration_us == 60 * tr.period_us
    ts = [r["t_us"] for r in tr.samples]
    assert ts == sorted(ts) and ts[0] == 0 and ts[-1] < tr.duration_us
    for k in range(60):
        assert [r["gpu"] for r in tr.samples[3 * k:3 * k + 3]] == [0, 1, 2]
        assert len({r["t_us"] for r in tr.samples[3 * k:3 * k + 3]}) == 1
    for r in tr.samples:
        assert r["active"] == int(r["util_gpu_pct"] > 0) and len(r["pids"]) == 1
    e = [r["energy_mj"] for r in tr.samples if r["gpu"] == 0]
    assert e == sorted(e)
    assert tr.truth and all(v == "sync_stall" for _, v, _, _, _ in tr.truth)


def test_trace_cli(tmp_path, capsys):
    assert trace_main(["--all", "--out", str(tmp_path), "--seconds", "3"]) == 0
    names = sorted(p.stem for p in tmp_path.glob("*.trace"))
    assert names == sorted(CONTRACT)
    for p in tmp_path.glob("*.trace"):
        read_trace(str(p))
    one = tmp_path / "one.trace"
    assert trace_main(["--scenario", "idle", "--out", str(one), "--gpus", "4",
                       "--seconds", "2"]) == 0
    assert read_trace(str(one)).ngpus == 4
    assert trace_main(["--scenario", "nope", "--out", str(one)]) == 1
    assert "unknown sim scenario" in capsys.readouterr().err


def test_read_trace_rejects_garbage(tmp_path):
    p = tmp_path / "bad.trace"
    p.write_text("H\tgpumon-trace\t1\t1\t166667\t166667\nS\t0\t0\tx\n")
    with pytest.raises(UserError):
        read_trace(str(p))


# -- real-time source ----------------------------------------------------------------------
def test_simsource_with_a_fake_clock():
    now = [1000.0]
    src = SimSource("sync_stall", gpus=2, seed=3, clock=lambda: now[0])
    assert src.kind == "sim" and [i.index for i in src.gpu_infos()] == [0, 1]
    ref = list(simulate("sync_stall", gpus=2, seconds=5, seed=3, start_time=1000.0))
    got = []
    for _ in range(5):
        now[0] += 1.0
        got.append(src.read())
    assert [astuple(s) for t in got for s in t.gpus] == [astuple(s) for t in ref for s in t.gpus]
    empty = src.read()   # no time passed: no samples, still a host and a truth
    assert empty.gpus == () and empty.host is not None and empty.truth is not None
    src.close()


def test_simsource_real_time():
    src = SimSource("busy", gpus=4, seed=0)
    time.sleep(0.5)
    first = src.read()
    assert 2 <= len(first.gpus) // 4 <= 4
    n = 0
    for _ in range(3):
        time.sleep(0.34)
        n += len(src.read().gpus)
    assert n >= 4 * 4
    src.close()


def test_sim_list_command(capsys):
    from gpumon.cli import main
    assert main(["sim", "list", "--json"]) == 0
    names = [d["name"] for d in json.loads(capsys.readouterr().out)]
    assert names == list(CONTRACT)
    assert main(["sim", "list"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in CONTRACT)
    assert main(["sim", "params", "sync_stall", "--json"]) == 0
    assert "straggler_factor" in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", CONTRACT)
def test_model_segments_are_consistent(name):
    """GPU timelines tile time; no process is in two places at once (drawn parameters,
    DataParallel and num_workers=0 included)."""
    from gpumon.sim.model import Node
    spec = SCENARIOS[name]
    for seed, extra in ((21, {}), (22, {"workers": 0})):
        p = {**draw_params(name, seed), **(extra if spec.mode != "nojob" else {})}
        node = Node(name, max(spec.min_gpus, 3), seed, p)
        node.run_until(100.0)
        for segs in node.gsegs:
            a = np.array(segs)
            assert (a[:, 1] > a[:, 0]).all() and np.allclose(a[1:, 0], a[:-1, 1])
        for pr in node.procs:
            if pr.segs:
                a = np.array(pr.segs)
                assert (a[:, 1] > a[:, 0]).all() and (a[1:, 0] >= a[:-1, 1] - 1e-9).all()
                assert (a[:, 2] >= 0).all() and (a[:, 2] <= 1).all()


def test_phases_in_one_job():
    ticks = list(simulate("busy", gpus=4, seconds=100, seed=4, phases=[
        ("busy", 30), ("sync_stall", 40, {"straggler": 3}), ("data_starvation", 1)]))
    seen = [(tk.truth.scenario, tk.truth.straggler_gpu) for tk in ticks]
    assert seen[10] == ("busy", None) and seen[50] == ("sync_stall", 3)
    assert seen[-1][0] == "data_starvation" and len(set(seen)) == 3
    check_coherent(ticks)
    # One job throughout: the main processes and the energy counters carry on.
    assert ticks[10].gpus[0].pids == ticks[60].gpus[0].pids == ticks[-1].gpus[0].pids
    energy = per_gpu(ticks, "energy_j")
    assert (np.diff(energy, axis=1) > 0).all()
    pf = power_frac(ticks)
    assert pf[3, 6 * 45:6 * 70].mean() > pf[0, 6 * 45:6 * 70].mean() + 0.15
    with pytest.raises(UserError):
        list(simulate("busy", gpus=1, seconds=1, phases=[("busy", 5), ("sync_stall", 5)]))
    with pytest.raises(UserError):
        list(simulate("busy", seconds=1, phases=[("demo", 5)]))


def test_loader_age_resets_when_an_epoch_starts_new_workers():
    from gpumon.sim import simulate
    ages = [tk.host.job_on(0).loader_age_s for tk in
            simulate("epoch_end", gpus=2, seconds=130, seed=5, params={"epoch_s": 40.0})]
    assert all(a is not None and a >= 0 for a in ages)
    resets = sum(1 for a, b in zip(ages, ages[1:]) if b < a - 5)
    assert resets >= 2, ages
    # No epoch boundary: the same workers grow old.
    busy = [tk.host.job_on(0).loader_age_s for tk in simulate("busy", gpus=2, seconds=30, seed=5)]
    assert all(b > a for a, b in zip(busy, busy[1:]))


def test_same_seed_same_verdicts(tmp_path):
    """`gpumon log --sim` runs the simulation on its own clock (one interval per poll, from a
    whole second) and polls a fixed count for --duration: two runs of one seed write the same
    rows, verdicts included, whatever the machine's timing (issue 18)."""
    import subprocess
    import sys
    outs = []
    for k in range(2):
        p = tmp_path / f"run{k}.csv"
        subprocess.run([sys.executable, "-m", "gpumon", "log", "-q", "--sim",
                        "data_starvation", "--seed", "0", "--interval", "0.5", "--duration", "3",
                        "-o", str(p)], check=True, timeout=60)
        rows = p.read_text().splitlines()
        outs.append([r.split(",", 1)[1] for r in rows])      # all but the wall-clock time
    assert outs[0] == outs[1] and len(outs[0]) > 30


# -- GPM: SM activity and friends -------------------------------------------------------------
def gpm_of(ticks, field="sm_active_ratio") -> np.ndarray:
    """(gpus, samples) of a GPM field; NaN where missing."""
    return per_gpu(ticks, field)


def test_sm_activity_computing_spinning_idle():
    busy = gpm_of(run("busy", seconds=30)[5:])
    assert 0.4 <= busy.min() and busy.max() <= 0.95
    hang = run("hang", gpus=4, seconds=30)[5:]
    assert per_gpu(hang, "util_gpu_pct").min() >= 95                 # util says busy...
    assert gpm_of(hang).max() < 0.06                                # ...a few SMs spin
    assert np.nanmax(gpm_of(hang, "tensor_active_ratio")) == 0
    assert gpm_of(run("idle", seconds=10)).max() == 0
    # Tensor activity and occupancy follow SM activity, below it.
    for field in ("sm_occupancy_ratio", "tensor_active_ratio"):
        other = gpm_of(run("busy", seconds=30)[5:], field)
        assert (0 < other).all() and (other < busy).all()


def test_sm_activity_depends_on_the_workload():
    hot = gpm_of(run("busy", seconds=20, params={"compute_power_frac": 0.95})[5:])
    cool = gpm_of(run("busy", seconds=20, params={"compute_power_frac": 0.70})[5:])
    assert hot.mean() > cool.mean() + 0.2
    given = gpm_of(run("busy", seconds=20, params={"sm_active_compute": 0.5})[5:])
    assert 0.45 < given.mean() <= 0.5


def test_gpus_without_gpm_in_the_same_node():
    ticks = run("demo", gpus=4, seconds=20)
    sm = gpm_of(ticks)
    assert not np.isnan(sm[:2]).any() and np.isnan(sm[2:]).all()
    assert [dict(i.supported)["gpm"] for i in SimSource("demo", gpus=4).gpu_infos()] == \
        [True, True, False, False]
    assert np.isnan(gpm_of(run("busy", seconds=5, params={"gpm": "none"}))).all()
    assert np.isnan(gpm_of(run("busy", seconds=5, params={"gpm": "1"}))[0]).all()
    with pytest.raises(UserError):
        run("busy", seconds=5, params={"gpm": "some"})


def test_healthy_ddp_with_chip_to_chip_power_spread():
    """ddp_spread: every GPU computes at ~100% utilization with most of its SMs active, the
    boards' power 10-25% apart at the same work; truth busy throughout."""
    for seed in (1, 2):
        p = draw_params("ddp_spread", seed)
        assert 0.07 <= p["chip_power_spread"] <= 0.125 and p["backend"] == "nccl"
        ticks = run("ddp_spread", gpus=8, seconds=30, seed=seed, params=p)[5:]
        assert {tk.truth.verdict for tk in ticks} == {dx.BUSY}
        assert per_gpu(ticks, "util_gpu_pct").mean(axis=1).min() >= 95
        watts = per_gpu(ticks, "power_w").mean(axis=1)
        assert 0.10 <= watts.max() / watts.min() - 1 <= 0.26
        assert gpm_of(ticks).mean(axis=1).min() >= 0.3          # computing, not spinning


def test_small_batch_is_busy_with_few_sms_active():
    """small_batch: utilization high, SM activity 0.15-0.35 at low occupancy, moderate
    power; truth busy (the work is compute, not a wait)."""
    for seed in (1, 2):
        p = draw_params("small_batch", seed)
        assert 0.15 <= p["sm_active_compute"] <= 0.35
        ticks = run("small_batch", gpus=2, seconds=30, seed=seed, params=p)[5:]
        assert {tk.truth.verdict for tk in ticks} == {dx.BUSY}
        assert per_gpu(ticks, "util_gpu_pct").mean() >= 90
        sm = gpm_of(ticks)
        assert 0.12 <= sm.mean() <= 0.35 and gpm_of(ticks, "sm_occupancy_ratio").max() <= 0.15
        assert 0.35 <= power_frac(ticks).mean() <= 0.65


@pytest.mark.parametrize("name", ["ddp_spread", "small_batch"])
def test_hidden_gpm_gives_missing_sm_activity(name):
    ticks = run(name, seconds=10, params={"gpm": "none"})
    for field in _GPM:
        assert np.isnan(gpm_of(ticks, field)).all()


def test_new_scenarios_leave_the_other_draws_as_they_were():
    """The GPM levels are drawn for small_batch only, after every other parameter: another
    scenario's draw has them None (derived) and its other parameters unchanged."""
    for name in ("busy", "sync_stall", "hang"):
        p = draw_params(name, 3)
        assert p["sm_active_compute"] is None and p["chip_power_spread"] <= 0.03
    small = draw_params("small_batch", 3)
    busy = draw_params("busy", 3)
    same = [k for k in PARAMS if k not in SCENARIOS["small_batch"].ranges
            and k not in ("sm_occupancy_compute", "tensor_active_compute", "gpm")]
    assert {k: small[k] for k in same} == {k: busy[k] for k in same}
