"""The hold (detect/hold.py): a live verdict changes only once another has won hold_s of data
in a row, with its named cases: first, stale, pause, at_once, sticky; a new
cause or straggler under the held verdict holds as a new verdict does."""
from dataclasses import replace

import numpy as np
import pytest

from gpumon.detect import Detector
from gpumon.detect.hold import Hysteresis, settle
from gpumon.detect.thresholds import DEFAULT
from gpumon.diagnosis import CAUSES, VERDICTS

B = (VERDICTS.index("busy"), -1, -1)
S = (VERDICTS.index("data_starvation"), 0, -1)
P = (VERDICTS.index("paused"), 0, -1)
I = (VERDICTS.index("insufficient_data"), -1, -1)
ST = (VERDICTS.index("sync_stall"), 1, 2)


def test_hysteresis_needs_two_seconds_in_a_row():
    hy = Hysteresis(DEFAULT)
    assert hy.step(0, B) and hy.current == B
    flapping = [S, B, S, B, S, B]
    for i, k in enumerate(flapping, start=1):
        hy.step(i, k)
        assert hy.current == B
    hy.step(10, S)
    assert hy.current == B
    assert hy.step(11, S) and hy.current == S
    # insufficient_data does not displace a verdict for a hole shorter than a window...
    hy.step(12, I)
    hy.step(13, I)
    assert hy.current == S


def test_insufficient_data_for_a_whole_window_displaces_the_verdict():
    """stale: a held verdict whose data has left the window (too few samples for window_s in
    a row) is stale: insufficient_data replaces it; first: the next verdict with data is taken
    at once."""
    hy = Hysteresis(replace(DEFAULT, window_s=6.0))
    hy.step(0, B)
    for t in range(1, 6):
        hy.step(t, I)
        assert hy.current == B, t
    assert hy.step(6, I) and hy.current == I
    assert hy.step(7, B) and hy.current == B


def test_hysteresis_takes_a_pause_and_its_end_at_once():
    """pause: the pause tracker decides a pause second by second with its own history."""
    hy = Hysteresis(DEFAULT)
    hy.step(0, B)
    assert hy.step(1, P) and hy.current == P
    assert hy.step(2, B) and hy.current == B


def test_a_starvation_the_host_confirms_takes_no_hold():
    """at_once: busy to starvation with ``quick`` takes no hold; without it, hold_s; a
    stall with the same flag is no starvation: it waits the hold."""
    hy = Hysteresis(replace(DEFAULT, hold_s=3.0))
    hy.step(0, B)
    assert hy.step(1, S, quick=True) and hy.current == S
    slow = Hysteresis(replace(DEFAULT, hold_s=3.0))
    slow.step(0, B)
    assert not slow.step(1, S) and not slow.step(2, S) and slow.step(3, S)
    other = Hysteresis(replace(DEFAULT, hold_s=3.0))
    other.step(0, S)
    other.step(1, ST, quick=True)
    assert other.current == S


def test_a_rule_that_shows_at_once_and_its_end_take_no_hold():
    """at_once: busy to a stall of a rule that shows at once, and back, without the hold."""
    hy = Hysteresis(DEFAULT)
    hy.step(0, B)
    assert hy.step(1, ST, quick=True) and hy.current == ST
    assert hy.step(2, B, quick=True) and hy.current == B
    assert not hy.step(3, ST) and hy.current == B


def test_an_established_starvation_is_sticky_while_its_cause_persists():
    """sticky: busy does not displace a starvation held sticky_s while the host shows its
    cause; before sticky_s, or without the flag, busy wins the hold as usual."""
    hy = Hysteresis(replace(DEFAULT, sticky_s=10.0))
    hy.step(0, S)
    for t in range(10, 20):
        hy.step(t, B, sticky=True)
        assert hy.current == S, t
    hy.step(20, B)
    assert hy.step(21, B) and hy.current == B
    young = Hysteresis(replace(DEFAULT, sticky_s=10.0))
    young.step(0, S)
    young.step(1, B, sticky=True)
    assert young.step(2, B, sticky=True) and young.current == B


# -- causes hold as verdicts do ----------------------------------------------------------------
CPU = (S[0], CAUSES.index("cpu_preprocessing"), -1)
IO = (S[0], CAUSES.index("io_fetch"), -1)
NONE_SHOWN = (S[0], CAUSES.index("input_pipeline"), -1)


def feed(hy, keys, t0=0):
    return [(hy.step(t0 + i, k), hy.current)[1] for i, k in enumerate(keys)]


def test_a_new_cause_wins_the_hold_as_a_new_verdict_does():
    hy = Hysteresis(DEFAULT)
    held = feed(hy, [CPU] * 5 + [IO] + [CPU] + [IO] * 30)
    assert held[5] == held[6] == CPU          # one second of another cause: no change
    assert IO not in held[7:12]               # (CPU still has the most of the last 20 s)
    assert held[-1] == IO and held.index(IO) > 7


def test_a_wobbling_cause_does_not_flip_the_held_one():
    """Two causes taking turns in runs longer than the hold: the one seen most over the last
    window_max_s stays; the screen does not follow each run."""
    hy = Hysteresis(replace(DEFAULT, context_s=20.0))
    held = feed(hy, ([CPU] * 6 + [IO] * 3) * 6)
    assert set(held) == {CPU}, held


def test_a_cause_not_shown_does_not_replace_one_shown():
    """input_pipeline (the host shows no cause) does not displace a cause the host showed in
    the last window_max_s, and a shown cause replaces it once it wins the hold."""
    hy = Hysteresis(replace(DEFAULT, context_s=20.0))
    held = feed(hy, [CPU] + [NONE_SHOWN] * 10 + [CPU] * 5)
    assert set(held) == {CPU}, held
    held = feed(hy, [NONE_SHOWN] * 30, t0=100)
    assert held[-1] == NONE_SHOWN             # (none shown for window_max_s: it goes)
    held = feed(hy, [IO] * 3, t0=200)
    assert held == [NONE_SHOWN, IO, IO]


def test_settle_gives_a_verdict_one_cause_in_hindsight():
    """A log's held keys: within one verdict, a cause held less than window_max_s in a row
    takes the one held longest; a long one stays; pauses keep theirs."""
    th = DEFAULT
    keys = [B, NONE_SHOWN, CPU, IO, P, (P[0], CAUSES.index("checkpoint"), -1)]
    runs = [(0, 10), (1, 5), (2, 40), (1, 8), (2, 30), (3, 25), (4, 3), (5, 3), (0, 10)]
    held = np.concatenate([np.full(n, k) for k, n in runs])
    out = settle(held, keys, th)
    want = [(0, 10), (2, 83), (3, 25), (4, 3), (5, 3), (0, 10)]
    assert out.tolist() == np.concatenate([np.full(n, k) for k, n in want]).tolist()


# -- the demo: one segment per starvation phase, its cause shown once ----------------------------
STARVING = ("data_starvation", "io_fetch")


@pytest.fixture(scope="module", params=[0, 1, 2])
def demo(request, tmp_path_factory):
    """`gpumon log --sim demo --seed N` over two cycles: the log, and each starvation phase's
    (start, end, true cause)."""
    from gpumon.csvlog import CsvSink
    from gpumon.sim import simulate
    path = tmp_path_factory.mktemp("demo") / f"demo{request.param}.csv"
    sink = CsvSink(str(path))
    phases: list = []
    for tk in simulate("demo", seconds=640, seed=request.param):
        sink.write(tk, [])
        if not phases or phases[-1][0] != tk.truth.scenario:
            phases.append([tk.truth.scenario, tk.time, tk.time, tk.truth.cause])
        phases[-1][2] = tk.time
    sink.close()
    return str(path), [p[1:] for p in phases if p[0] in STARVING]


def test_analyze_reads_each_starvation_phase_as_one_segment(demo):
    """Each starvation phase of the demo is one data_starvation segment with the phase's cause
    (it was up to six, the cause flipping between input_pipeline and cpu_preprocessing)."""
    from gpumon.analyze import analyze_file
    path, phases = demo
    _, tl = analyze_file(path)
    for a, b, cause in phases:
        inside = [(d.verdict, d.cause) for d in tl.segments if d.end > a + 2 and d.start < b - 2]
        assert inside == [("data_starvation", cause)], (a, inside)


def test_a_live_replay_changes_cause_at_most_once_per_phase(demo):
    from gpumon.monitor import Monitor
    from gpumon.replay import ReplaySource
    from gpumon.ui.model import primary
    path, phases = demo
    now = [0.0]
    src = ReplaySource(path, speed=100000.0, clock=lambda: now[0])
    monitor = Monitor(src, interval=1.0, detector=Detector())
    seen: list = []
    monitor.listeners.append(lambda tick, ds: seen.append((tick.time, primary(ds))))
    while not src.done:
        monitor.step()
        now[0] += 0.01
    for a, b, cause in phases:
        causes = [d.cause for t, d in seen if a <= t <= b and d is not None
                  and d.verdict == "data_starvation"]
        flips = sum(x != y for x, y in zip(causes, causes[1:]))
        assert flips <= 1 and causes[-1] == cause, (a, causes)


def test_a_straggler_under_an_unknown_cause_still_holds_by_its_seconds():
    """Two stragglers of a starvation whose cause the host does not show: the one seen more
    often over the last window_max_s is named."""
    one, other = NONE_SHOWN[:2] + (0,), NONE_SHOWN[:2] + (1,)
    hy = Hysteresis(replace(DEFAULT, context_s=20.0))
    held = feed(hy, [one] * 3 + [other] * 5)
    assert held[-1] == other and held[4] == one


def test_settle_of_an_empty_log_is_empty():
    out = settle(np.zeros(0, dtype=np.int64), [], DEFAULT)
    assert out.shape == (0,)
