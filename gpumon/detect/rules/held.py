"""The hold: a live verdict kept from the seconds before while a new one has not yet won
(the hysteresis itself is detect/hold.py; this is the rule's name and reason)."""
from __future__ import annotations

from gpumon.detect.rules import Rule
from gpumon.detect.thresholds import Thresholds


def _hold(verdict: str, rule: str, th: Thresholds) -> str:
    """``verdict`` and ``rule``: what the windows read, which did not last."""
    return (f"kept from the seconds before: its windows' {verdict} (rule {rule}) did not "
            f"last the {th.hold_s:.0f} s a change needs")


# Decided after the rules, by the hold: its verdict is the one it kept.
hold = Rule("hold", "", 200, "a new verdict has not yet won for {hold_s:.0f} s: the one "
            "before is kept", _hold, family=__name__)
