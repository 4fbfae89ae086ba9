"""Every threshold of the detector: a name, a unit, a default and one line of meaning.

``Thresholds`` is a frozen dataclass so a benchmark can try variants
(``dataclasses.replace(DEFAULT, duty_starved=0.8)``); the code reads only ``DEFAULT`` unless
given another. ``describe()`` lists them for docs and ``--help``. Where each value comes
from (the logs and reports behind it): docs/detector.md, "The thresholds".
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields


# Not thresholds but the seconds table's units and a fact of the driver: the table's bin; where
# in it NVML's own samples (dated at the end of their ~1/6 s period) count, their period's
# middle; and how long the driver's power, a 1 s average, lags the work.
BIN_S = 1.0
SAMPLE_MID_S = 1 / 12
POWER_LAG_S = 1.0


def bins(s: float) -> int:
    """Seconds as a whole number of bins."""
    return int(round(s / BIN_S))


def th(default: float, unit: str, means: str) -> float:
    return field(default=default, metadata={"unit": unit, "why": means})


@dataclass(frozen=True)
class Thresholds:
    # --- spans of time -----------------------------------------------------------------------
    window_s: float = th(6.0, "s", "Span a live verdict is judged on.")
    context_s: float = th(20.0, "s", "The longest span read before a second: a stretched "
                          "window, the work before a stop, a job's start; half of it stands "
                          "for it where no more is known (a job's first, a log's last).")
    idle_after_s: float = th(60.0, "s", "A stop or a hole this long ends the work: no kernel "
                             "this long is idle, no pause lasts longer, a log stopped.")
    hold_s: float = th(2.0, "s", "A new verdict must win this long to replace the shown one; "
                       "the host's 'now'.")
    recover_s: float = th(3.0, "s", "Every GPU back at work this long ends a stop or a "
                          "stall, and settles power for a comparison.")
    stagger_s: float = th(3.0, "s", "Ranks and their loader workers stop and start within "
                          "this of each other.")
    resume_s: float = th(4.0, "s", "Steady work this long, at the level before, ends a pause.")
    sticky_s: float = th(10.0, "s", "Starvation held this long stays while its host cause "
                         "does.")
    loader_startup_s: float = th(30.0, "s", "New loader workers may start this long while "
                                 "the GPUs wait.")
    hang_s: float = th(30.0, "s", "Every GPU spinning this long, none computing, is a hang.")
    max_sample_gap_s: float = th(2.5, "s", "A hole between two samples longer than this is "
                                 "missing data, not a gap in the work.")
    stop_gap_s: float = th(0.5, "s", "Every GPU in a gap this long within a second is a stop "
                           "the second's duty hides.")
    # --- samples -----------------------------------------------------------------------------
    seg_util_pct: float = th(50.0, "%", "A sample at or above this is part of a burst, below "
                             "it part of a gap.")
    idle_util_pct: float = th(10.0, "%", "A sample at or below this shows no kernel.")
    min_samples: float = th(3.0, "samples", "Fewest samples (or burst+gap cycles) that show "
                            "a rhythm: per GPU in a window, per second for a gap stop.")
    # --- duty: the share of time a kernel ran --------------------------------------------------
    idle_duty: float = th(0.02, "share", "Below this a GPU does no work; kernels in this "
                          "share of its samples make it part of a job.")
    trickle_duty: float = th(0.15, "share", "Below this a GPU has stopped (a stop may keep a "
                             "trickle of kernels).")
    on_duty: float = th(0.3, "share", "At or above this a GPU is back at work after a stop.")
    work_duty: float = th(0.7, "share", "Steady work: every GPU at or above this in every "
                          "second.")
    duty_starved: float = th(0.86, "share", "A job below this waits for its input (unless its "
                             "seconds are steady work and its host calm).")
    busy_duty: float = th(0.9, "share", "A GPU at or above this is busy: computing, or "
                          "spinning in a collective.")
    return_tol: float = th(0.04, "share", "Work is back at the level before a stop, less "
                           "this.")
    duty_spread: float = th(0.12, "share", "GPUs of one job this far apart in duty: one is "
                            "the odd one out.")
    # --- power -------------------------------------------------------------------------------
    cold_power_ratio: float = th(0.9, "ratio", "A busy GPU under this share of the hottest "
                                 "busy GPU's power is cold.")
    power_spread: float = th(0.06, "share of limit", "Least gap between the hottest GPU's "
                             "power and the others' for a stall at ~100% utilization.")
    straggler_hot_share: float = th(0.7, "share", "A straggler is the hottest GPU in this "
                                    "share of the seconds another is cold.")
    stop_power_frac: float = th(0.7, "share", "A GPU at or under this share of its own "
                                "working power has stopped, or spins.")
    spin_power_frac: float = th(0.35, "share of limit", "A busy GPU drawing at most this (or "
                                "gaining at most this per unit of duty) spins, not computes.")
    # --- SM activity (GPM: the share of SMs with work; where a GPU has none, power decides) ----
    spin_sm_active: float = th(0.10, "share", "A busy GPU with fewer of its SMs active than "
                               "this spins in a collective, not computes.")
    few_sm_active: float = th(0.5, "share", "Busy work with fewer of its SMs active than this "
                              "leaves most idle: small kernels or batches (a hint, never a "
                              "verdict; DCGM's guidance).")
    # --- throttling --------------------------------------------------------------------------
    throttle_share: float = th(0.3, "share", "Share of samples with a thermal, power-cap or "
                               "slowdown reason that throttles a GPU.")
    throttle_clock_frac: float = th(0.93, "share of max", "SM clock under this share of its "
                                    "maximum: held down.")
    # --- the host ----------------------------------------------------------------------------
    core_busy_pct: float = th(85.0, "% of a core", "A process, thread or loader worker at "
                              "this uses a whole core.")
    iowait_pct: float = th(5.0, "%", "iowait at or above this, with any disk reads, points at "
                           "storage.")
    disk_read_busy_mbps: float = th(20.0, "MB/s", "Disk reads at this rate while GPUs wait "
                                    "point at storage, whatever the iowait.")
    ckpt_write_mbps: float = th(50.0, "MB/s", "Disk writes at this rate while GPUs stop are "
                                "a checkpoint.")
    mem_active_mib: float = th(256.0, "MiB", "A GPU holding this much memory belongs to a "
                               "job.")
    # --- what a whole log shows (analyze's hindsight) ------------------------------------------
    blips_max: float = th(2.0, "seconds", "Lone seconds under steady work allowed in a "
                          "context of it.")
    isolation: float = th(3.0, "times", "A stop is a one-off when the work on either side "
                          "is this many times as long.")


DEFAULT = Thresholds()


def describe(t: Thresholds = DEFAULT) -> list[tuple[str, float, str, str]]:
    """(name, value, unit, meaning) for every threshold."""
    return [(f.name, getattr(t, f.name), f.metadata["unit"], f.metadata["why"])
            for f in fields(t)]
