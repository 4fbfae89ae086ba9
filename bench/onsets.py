"""Starvation onsets in `make run`'s demo: seconds from each data_starvation / io_fetch
phase's onset to the live verdict data_starvation, per onset, seeds 0-4.

`python -m bench.onsets [--seeds 0,1,2,3,4] [--cycles 2] [--gpus N] [-v]`

For each onset, in seconds after the phase's start (the change of the truth, timed as
bench.detect times it: a verdict on the tick that ends the phase's first second comes 1 s
after it): the physical onset (the end of the first second a GPU waits for data half of it
or more: a starved job may first run on its prefetched batches), the first tick the live
verdict is data_starvation, and the first from which it stays so for the rest of the phase
(the stable verdict); and what the screen said before. The target: the stable verdict
within 5 s of the phase's start in 95% of onsets.
"""
from __future__ import annotations

import argparse
from collections import Counter

from gpumon.detect import Detector
from gpumon.sim import simulate
from gpumon.sim.scenarios import scenario

STARVED = ("data_starvation", "io_fetch")
TARGET_S = 5.0
WAIT_SHARE = 0.5


def _cycle_s() -> float:
    return sum(s for _, s in scenario("demo").phases)


def _phases(seed: int, cycles: int, gpus=None) -> list[dict]:
    """Each starvation phase of the demo: its start, physical onset, and what the live
    detector said each second of it."""
    det = Detector()
    out: list[dict] = []
    cur, before = None, None
    for tk in simulate("demo", gpus=gpus, seconds=cycles * _cycle_s(), seed=seed):
        d = det.update(tk)[0]
        tr = tk.truth
        if cur is None or tr.scenario != cur["scenario"]:
            # (The phase changed within the interval since the tick before: its start.)
            cur = {"scenario": tr.scenario, "start": before, "onset": None, "said": []}
            if tr.scenario in STARVED:
                out.append(cur)
        if cur["onset"] is None and any(st.get("waiting_data", 0.0) >= WAIT_SHARE
                                        for st in tr.states.values()):
            cur["onset"] = tk.time
        label = "-" if d is None else (d.verdict if d.verdict != "paused"
                                       else f"paused ({d.cause})")
        cur["said"].append((tk.time, label, tr.verdict))
        before = tk.time
    return out


def _times(ph: dict) -> tuple[float, float]:
    """(first right, stable right) in s after the phase's start; inf where never."""
    said = ph["said"]
    first = next((t for t, v, want in said if v == want), None)
    stable = None
    for t, v, want in reversed(said):
        if v != want:
            break
        stable = t
    f = float("inf") if first is None else first - ph["start"]
    s = float("inf") if stable is None else stable - ph["start"]
    return f, s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.onsets", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    stable_all, first_all = [], []
    print("| seed | phase | start s | onset +s | first right +s | stable right +s | before |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for seed in (int(x) for x in args.seeds.split(",")):
        for ph in _phases(seed, args.cycles, args.gpus):
            f, s = _times(ph)
            first_all.append(f)
            stable_all.append(s)
            onset = "-" if ph["onset"] is None else f"{ph['onset'] - ph['start']:.0f}"
            before = Counter(v for t, v, _ in ph["said"] if t - ph["start"] < s)
            print(f"| {seed} | {ph['scenario']} | {ph['start'] - simulate_t0():.0f} | {onset} | "
                  f"{f:.0f} | {s:.0f} | {dict(before)} |")
            if args.verbose:
                print("    " + " ".join(v.split(" ")[0][:6] for _, v, _ in ph["said"][:15]))
    n = len(stable_all)
    ok = sum(s <= TARGET_S for s in stable_all)
    okf = sum(f <= TARGET_S for f in first_all)
    print(f"\nonsets: {n}; stable right verdict within {TARGET_S:.0f} s of the phase's start: "
          f"{ok}/{n} = {ok / max(n, 1):.0%} (target 95%); first right within {TARGET_S:.0f} s: "
          f"{okf}/{n}; stable: median {sorted(stable_all)[n // 2]:.0f} s, max "
          f"{max(stable_all):.0f} s")
    return 0


def simulate_t0() -> float:
    from gpumon.sim.source import DEFAULT_START_TIME
    return DEFAULT_START_TIME


if __name__ == "__main__":
    raise SystemExit(main())
