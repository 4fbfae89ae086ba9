"""pause_flags feeds runs of quiet bins (PauseTracker.quiet) at once; the flags must be the
same as feeding every bin through PauseTracker.step_bin."""
import math

import numpy as np
import pytest

from gpumon.detect import pauses as P
from gpumon.detect.thresholds import DEFAULT


def _bin_by_bin(duty, n, u, host, starts):
    """The tracker stepped one bin at a time (what pause_flags did before runs were fed)."""
    th = DEFAULT
    tr = P.PauseTracker(th)
    T = len(n)
    out = np.zeros(T, bool)
    excl = np.zeros(T, bool)
    sec = P.Seconds(duty, n, u, th)
    for i in range(T):
        if starts is not None and starts[i]:
            tr.begin()
        out[i] = excl[i] = tr.step(sec.at(i), host[i] if host else None)
        if tr.unmark:
            excl[tr.unmark.start:tr.unmark.stop] = False
        if tr.lead_in:
            excl[tr.lead_in.start:tr.lead_in.stop] = True
    return out, excl


def _job(seed, T=900, G=4, with_host=False):
    rng = np.random.default_rng(seed)
    duty = np.clip(rng.normal(0.95, 0.03, (G, T)), 0, 1)
    t = 0
    while t < T:           # stops of every kind: checkpoints, starved gaps, one rank alone
        t += int(rng.integers(5, 60))
        ln = int(rng.integers(1, 25))
        who = slice(None) if rng.random() < 0.7 else slice(int(rng.integers(G)), None)
        duty[who, t:t + ln] = rng.uniform(0, 0.04)
        if rng.random() < 0.2:
            duty[0, t:t + ln] = 0.1          # rank 0 alone at a trickle (saving)
    duty[:, rng.integers(T, size=10)] = np.nan         # seconds without data
    n = np.full(T, 6.0 * G)
    n[rng.integers(T, size=5)] = 0
    u = np.nan_to_num(duty).sum(axis=0) * 6
    host = None
    if with_host:
        host = []
        for i in range(T):
            known = rng.random() < 0.3
            host.append((float(rng.integers(0, 4)) if known else math.nan,
                         bool(rng.random() < 0.2), bool(rng.random() < 0.05),
                         bool(rng.random() > 0.01), float(rng.uniform(0, 30)) if known
                         else math.nan, bool(rng.random() < 0.05)))
    if with_host:          # the job gone for a while (memory released), GPUs idle
        a = int(rng.integers(100, T - 100))
        duty[:, a:a + 60] = 0.0
        u[a:a + 60] = 0.0
        for i in range(a, a + 60):
            host[i] = host[i][:3] + (False,) + host[i][4:]
    starts = np.zeros(T, bool)
    starts[rng.integers(T, size=3)] = True
    return duty, n, u, host, starts


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("with_host", [False, True])
def test_feeding_quiet_runs_at_once_gives_the_same_flags(seed, with_host):
    duty, n, u, host, starts = _job(seed, with_host=with_host)
    want = _bin_by_bin(duty, n, u, host, starts)
    got = P.pause_flags(duty, n, u, DEFAULT, host, starts)
    assert want[0].any() and not want[0].all()        # the jobs do pause, and work
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])


def _starving(seed, T=1200, G=4):
    """A job that stops every few seconds (starved input), at times one GPU behind the
    others, with steady stretches long enough for pauses to start again between."""
    rng = np.random.default_rng(100 + seed)
    duty = np.clip(rng.normal(0.93, 0.04, (G, T)), 0, 1)
    t = 0
    while t < T:
        if rng.random() < 0.15:
            t += int(rng.integers(20, 80))           # steady work: the next stop may pause
        t += int(rng.integers(1, 6))
        duty[:, t:t + int(rng.integers(1, 5))] = rng.uniform(0, 0.04)
        if rng.random() < 0.3 and t + 5 < T:
            duty[int(rng.integers(G)), t + 5] = 0.3   # a GPU not at work
    duty[:, rng.integers(T, size=8)] = np.nan
    n = np.full(T, 6.0 * G)
    n[rng.integers(T, size=4)] = 0
    u = np.nan_to_num(duty).sum(axis=0) * 6
    starts = np.zeros(T, bool)
    starts[rng.integers(T, size=2)] = True
    return duty, n, u, None, starts


@pytest.mark.parametrize("seed", range(8))
def test_feeding_runs_of_recurring_stops_at_once_gives_the_same_flags(seed):
    duty, n, u, host, starts = _starving(seed)
    want = _bin_by_bin(duty, n, u, host, starts)
    got = P.pause_flags(duty, n, u, DEFAULT, host, starts)
    assert want[0].any() and not want[0].all()
    assert want[1].sum() < want[0].sum()      # some "pauses" were found to be starvation
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])


def test_quiet_runs_end_at_every_bin_that_can_change_the_tracker():
    """A quiet run ends where a rank works alone, loader workers are known or the job is
    seen starting; the stop at bin 2 may start a pause (steady work before it), the stops
    at 3 (one before it) and 8 (a GPU not at work at 7) cannot, nor can 10 (a stop at 8)."""
    duty = np.array([[0.9, 0.9, 0.0, 0.0, 0.9, 0.9, 0.9, 0.9, 0.0, 0.9, 0.0, 0.9],
                     [0.9, 0.9, 0.0, 0.0, 0.9, 0.9, 0.9, 0.2, 0.0, 0.9, 0.0, 0.9]])
    T = duty.shape[1]
    n = np.full(T, 12.0)
    sec = P.Seconds(duty, n, duty.sum(axis=0) * 6, DEFAULT)
    host = [(math.nan, False, False, True, math.nan, False)] * T
    host[5] = (2.0, False, False, True, 3.0, False)          # loader workers known
    end, risky = P._quiet_runs(sec, P._host_cols(host), {6}, 20, T)
    assert end == [5, 5, 5, 5, 5, 5, 6, 12, 12, 12, 12, 12]
    assert risky == [2, 2, 2] + [T] * 10


def test_a_stop_in_the_history_lets_the_stops_after_it_run_at_once():
    tr = P.PauseTracker(DEFAULT)
    assert P._stop_seen(tr.hist) == 0
    tr.hist.extend([(6.0, 5.0, False)] * 5 + [(6.0, 0.0, True)] + [(6.0, 5.0, False)] * 3)
    assert P._stop_seen(tr.hist) == tr.ctx - 3
    tr.hist.extend([(6.0, 5.0, False)] * tr.ctx)
    assert P._stop_seen(tr.hist) == 0


def test_steady_work_for_a_context_lifts_the_cooldown_of_a_starving_pause(monkeypatch):
    """An epoch restart with a choppy start (work for 2 s, then another stop) is taken for
    starvation, and a job found starving gets no new pause for 3 context spans. Steady work
    for a whole context (20 s) after it shows it was not: the next stop, 24 s later, is a
    pause again. Without the lift it is not."""
    def job():
        d = [0.97] * 30 + [0.0] * 3 + [0.8, 0.7] + [0.0] * 2 + [0.97] * 24 + [0.0] * 8 + \
            [0.97] * 30
        duty = np.array([d])
        n = np.full(duty.shape[1], 6.0)
        return duty, n, duty[0] * 6
    duty, n, u = job()
    pause, _, _ = P.pause_flags(duty, n, u, DEFAULT)
    assert not pause[33:37].all()            # the choppy restart: starvation
    assert pause[61:69].all()                # the next stop: a pause
    monkeypatch.setattr(P.PauseTracker, "_steady", lambda self, ok: None)
    monkeypatch.setattr(P, "_quiet_runs",
                        lambda sec, host, begin, ctx, T: (list(range(T)), list(range(T + 1))))
    pause2, _, _ = P.pause_flags(duty, n, u, DEFAULT)
    assert not pause2[61:69].any()


def test_steady_stretches_of_long_runs_match_counting_them():
    rng = np.random.default_rng(3)
    T = 400
    n = np.where(rng.random(T) < 0.03, 0.0, 6.0).astype(np.float32)
    u = (n * np.where(rng.random(T) < 0.15, 0.5, 0.95)).astype(np.float32)
    idle = rng.random(T) < 0.03
    st = P._Steady(n, u, idle, DEFAULT)
    ok = [bool(a > 0 and not b and float(c) / float(a) >= DEFAULT.duty_starved)
          for a, b, c in zip(n, idle, u)]
    checked = 0
    for i in range(0, T - 40, 7):
        for j in range(i + P._Steady.SHORT + 1, T, 13):
            assert st.runs(i, j) == P._steady_runs(ok[i:j]), (i, j)
            checked += 1
    assert checked > 300
    assert st.runs(0, P._Steady.SHORT) is None
    assert P._steady_runs([True, True, False, True, True, True, False, True]) == (2, 3, 1)


def test_a_pause_leaves_out_the_seconds_its_stop_ran_before_it_was_told():
    """Saves 15 s apart: each a second half-spent (the stop began inside it), then rank 0
    alone at a trickle. With the first save within context_s, the second is told from a
    starved rank's late batch only once rank 0 was alone two seconds; the seconds its stop
    ran before that are left out of the windows too (not only the one just before the
    pause): otherwise they stay in the windows after it and read as starvation
    (titanx-ddp2-ckpt-paused-125m in bench/real)."""
    work = [0.95] * 40
    save = [0.5, 0.1, 0.1, 0.1, 0.3]          # rank 0: half a second, then alone
    wait = [0.5, 0.0, 0.0, 0.0, 0.2]          # rank 1
    duty = np.array([work + save + work[:10] + save + work,
                     work + wait + work[:10] + wait + work])
    T = duty.shape[1]
    n = np.full(T, 12.0)
    u = duty.sum(axis=0) * 6
    pause, excl, why = P.pause_flags(duty, n, u, DEFAULT)
    second = 55                               # the second save's half-spent second
    first = second + int(np.flatnonzero(pause[second:])[0])
    assert first == second + 2                # told once rank 0 was alone two seconds
    assert excl[second:first].all()           # the stop's own seconds before it, left out
    assert not excl[second - 10:second].any()   # the work before it kept
    assert why[first] == P.CAUSES.index("checkpoint")
