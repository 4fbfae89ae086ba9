"""The hold (detect/hold.py): a live verdict changes only once another has won hold_s of data
in a row, with its named cases: first, stale, pause, host_confirmed, at_once, sticky."""
from gpumon.detect.hold import Hysteresis
from gpumon.diagnosis import VERDICTS

B = (VERDICTS.index("busy"), -1, -1)
S = (VERDICTS.index("data_starvation"), 0, -1)
P = (VERDICTS.index("paused"), 0, -1)
I = (VERDICTS.index("insufficient_data"), -1, -1)
ST = (VERDICTS.index("sync_stall"), 1, 2)


def test_hysteresis_needs_two_seconds_in_a_row():
    hy = Hysteresis(2.0, 1.0)
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
    hy = Hysteresis(2.0, 1.0, stale_s=6.0)
    hy.step(0, B)
    for t in range(1, 6):
        hy.step(t, I)
        assert hy.current == B, t
    assert hy.step(6, I) and hy.current == I
    assert hy.step(7, B) and hy.current == B


def test_hysteresis_takes_a_pause_and_its_end_at_once():
    """pause: the pause tracker decides a pause second by second with its own history."""
    hy = Hysteresis(2.0, 1.0)
    hy.step(0, B)
    assert hy.step(1, P) and hy.current == P
    assert hy.step(2, B) and hy.current == B


def test_a_starvation_the_host_confirms_waits_host_hold_s():
    """host_confirmed: busy to starvation with ``quick`` waits host_hold_s, not hold_s; a
    stall with the same flag is no starvation: it waits the hold."""
    hy = Hysteresis(3.0, 1.0, host_hold_s=0.0)
    hy.step(0, B)
    assert hy.step(1, S, quick=True) and hy.current == S
    slow = Hysteresis(3.0, 1.0)
    slow.step(0, B)
    assert not slow.step(1, S) and not slow.step(2, S) and slow.step(3, S)
    other = Hysteresis(3.0, 1.0)
    other.step(0, S)
    other.step(1, ST, quick=True)
    assert other.current == S


def test_a_rule_that_shows_at_once_and_its_end_take_no_hold():
    """at_once: busy to a stall of a rule that shows at once, and back, without the hold."""
    hy = Hysteresis(2.0, 1.0)
    hy.step(0, B)
    assert hy.step(1, ST, quick=True) and hy.current == ST
    assert hy.step(2, B, quick=True) and hy.current == B
    assert not hy.step(3, ST) and hy.current == B


def test_an_established_starvation_is_sticky_while_its_cause_persists():
    """sticky: busy does not displace a starvation held sticky_s while the host shows its
    cause; before sticky_s, or without the flag, busy wins the hold as usual."""
    hy = Hysteresis(2.0, 1.0, sticky_s=10.0)
    hy.step(0, S)
    for t in range(10, 20):
        hy.step(t, B, sticky=True)
        assert hy.current == S, t
    hy.step(20, B)
    assert hy.step(21, B) and hy.current == B
    young = Hysteresis(2.0, 1.0, sticky_s=10.0)
    young.step(0, S)
    young.step(1, B, sticky=True)
    assert young.step(2, B, sticky=True) and young.current == B
