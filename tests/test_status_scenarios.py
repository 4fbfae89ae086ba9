"""`gpumon status --sim NAME` at its default sample, for every scenario of `gpumon sim list`:
a verdict other than the scenario's truth never comes with confidence 0.5 or more (a sync
stall over 2 s said busy 0.88); what the sample is too short for says "no verdict yet"."""
import argparse

import pytest

from gpumon.commands import status
from gpumon.sim.scenarios import SCENARIOS
from gpumon.ui.status import status_json

SEEDS = range(5)


def sampled(monkeypatch, *argv: str):
    """status's snapshot of ``argv`` on the simulation's own clock (no sleeping): its JSON,
    and the true verdicts of the ticks it read."""
    parser = argparse.ArgumentParser()
    status.register(parser.add_subparsers())
    args = parser.parse_args(["status", *argv])
    truths: set = set()
    opened = status.open_source

    def open_source(a, **reads):
        src = opened(a, **reads)
        read = src.read

        def noted():
            tick = read()
            if tick.truth is not None:
                truths.add(tick.truth.verdict)
            return tick
        src.read = noted
        return src
    monkeypatch.setattr(status, "open_source", open_source)
    snap = status.snapshot(args, wait=lambda s: False)
    doc = status_json(snap.board.view(), "host", snap.uuids, snap.seconds)
    return doc, truths


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_status_is_never_confidently_wrong(monkeypatch, name):
    spec = SCENARIOS[name]
    for seed in SEEDS:
        doc, truths = sampled(monkeypatch, "--sim", name, "--seed", str(seed))
        assert doc["sampled_s"] == status.SAMPLE_S
        d = doc["verdict"]
        if d is None:
            assert doc["verdict_note"], (name, seed)
            continue
        right = d["verdict"] in truths | {spec.verdict}
        assert right or d["confidence"] < 0.5, (name, seed, d["verdict"], d["confidence"],
                                                d["because"])


@pytest.mark.parametrize("name", ["sync_stall", "hang"])
def test_what_two_seconds_cannot_tell_says_how_long_it_needs(monkeypatch, name):
    doc, _ = sampled(monkeypatch, "--sim", name)
    assert doc["verdict"] is None
    assert doc["verdict_note"].startswith("no verdict yet (needs "), doc["verdict_note"]
