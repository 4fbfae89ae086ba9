"""Every threshold of the detector: a name, a unit, a default and one sentence of why.

``Thresholds`` is a frozen dataclass so the benchmark can try variants
(``dataclasses.replace(DEFAULT, duty_starved=0.8)``) on its tuning seeds; the code reads
only ``DEFAULT`` unless given another. ``describe()`` lists them for docs and ``--help``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields


def th(default: float, unit: str, why: str) -> float:
    return field(default=default, metadata={"unit": unit, "why": why})


@dataclass(frozen=True)
class Thresholds:
    # --- time scales -------------------------------------------------------------------------
    bin_s: float = th(1.0, "s", "Features are kept per second of data: the driver's power is a "
                      "1 s average, so power and utilization are only compared on >= 1 s spans.")
    sample_mid_s: float = th(1 / 12, "s", "NVML dates a utilization sample at the end of the "
                             "~1/6 s period it covers: gpumon's own samples (live, replayed or "
                             "logged) count in the second that holds their period's middle, so "
                             "a second's bin holds the samples that cover it. Other tools' logs "
                             "(one reading a second or so) are binned as they are dated.")
    window_s: float = th(6.0, "s", "Span a live verdict is judged on: long enough for a few "
                         "steps of a fast job, short enough to answer within 5 s of a change.")
    window_max_s: float = th(20.0, "s", "Longest span a live verdict is judged on (jobs with "
                             "long steps stretch the window up to this).")
    cycles_per_window: float = th(3.0, "cycles", "The window spans this many burst+gap cycles "
                                  "when the job's rhythm is slower than window_s allows.")
    window_1hz_s: float = th(12.0, "s", "Span judged when the log has one sample per second "
                             "(nvidia-smi): too few samples in window_s to see a duty cycle.")
    log_gap_s: float = th(60.0, "s", "A log with no sample for this long stopped logging "
                          "there: the gap gets no verdict, and the runs either side of it are "
                          "judged on their own.")
    recover_s: float = th(3.0, "s", "With host counters that show no cause (loaders with "
                          "capacity to spare, no main process at a core, no storage wait), "
                          "every GPU at full speed this long means a lone stall (one slow "
                          "batch) is over: the verdict returns to busy without waiting for "
                          "the stall to leave a window stretched to window_max_s. A log "
                          "(analyze) clears starvation this far into steady work that "
                          "outlasts a stall, host counters or not.")
    lone_stall_s: float = th(6.0, "s", "Longest stall that recover_s ends: one slow batch "
                             "delays a rank by part of a batch's preparation time, while the "
                             "first stall of a starving job drains its prefetch queue and "
                             "lasts longer (on the tuning seeds, most ran 6 s or more).")
    context_s: float = th(20.0, "s", "History before an all-idle stretch that decides whether it "
                          "is a pause of a healthy run (checkpoint, validation, epoch end).")
    pause_context_duty: float = th(0.7, "share", "Duty cycle of the context_s before a stop that "
                                   "makes it a pause of steady work (fast steps with large "
                                   "uploads run at ~75-90%).")
    pause_max_s: float = th(60.0, "s", "A pause longer than this (validation passes run up to "
                            "~45 s with start-up) is no longer a pause of a running job.")
    loader_startup_s: float = th(30.0, "s", "New DataLoader workers (an epoch boundary) may "
                                 "take this long to start, CPU-bound, while the GPUs wait; "
                                 "saturated loaders for longer during a stop are starvation.")
    startup_run_s: float = th(20.0, "s", "A job that has run kernels on every GPU in each of "
                              "this many seconds of its start has started, whatever its level: "
                              "loading copies weights in bursts of a few seconds (8 s at 15% on "
                              "an H100 server), while batch-1 generation or weights streamed "
                              "from NVMe run a flat 20-45% from their first kernel.")
    max_sample_gap_s: float = th(2.5, "s", "A hole between two samples of one GPU longer than "
                                 "this is missing data, not a gap in the work.")
    # --- segmentation ------------------------------------------------------------------------
    seg_util_pct: float = th(50.0, "%", "A driver sample at or above this utilization is part "
                             "of a burst, below it part of a gap (sub-second segmentation).")
    idle_util_pct: float = th(10.0, "%", "A sample at or below this is idle (launch overhead "
                              "and monitoring keep a few per cent on an otherwise idle GPU).")
    # --- job membership ----------------------------------------------------------------------
    mem_active_mib: float = th(256.0, "MiB", "A GPU holding at least this much memory belongs "
                               "to a job even without process info (a bare context is ~100-300 "
                               "MiB; an idle GPU uses a few MiB).")
    active_duty: float = th(0.02, "share", "Without process or memory info, a GPU with a "
                            "kernel (a sample above idle_util_pct) in this share of its samples "
                            "is taken as part of a job (a slow loader's rare bursts included; an "
                            "unused GPU's samples read 0).")
    # --- busy / idle / starved ---------------------------------------------------------------
    idle_after_s: float = th(60.0, "s", "A job with no kernel (no sample above idle_util_pct) "
                             "for this long is idle; a shorter quiet stretch after a kernel is the "
                             "job waiting (a loader this slow bursts once every tens of seconds).")
    idle_duty: float = th(0.05, "share", "A job whose GPUs run a kernel less than this share of "
                          "the time does no work (idle or paused).")
    duty_starved: float = th(0.86, "share", "Below this duty cycle on all GPUs together the job "
                             "waits for input; TF's profiler calls >= 20% of step time on input "
                             "'highly input-bound', this is the same 14-20% seen from the GPU.")
    duty_starved_calm_host: float = th(0.65, "share", "Below this duty cycle the job starves "
                                       "even when its host shows no cause; above it, with calm "
                                       "loaders, the gaps are the step's own batch uploads and "
                                       "launches (a 200 MB batch at 10 GB/s is 20 ms of a 50 ms "
                                       "step).")
    steady_bin_duty: float = th(0.74, "share", "Without host counters, a window in which "
                                "every GPU stays at this duty or more in every second is busy "
                                "even below duty_starved: its gaps are the step's own uploads "
                                "and launches, steady to the second; a starving input "
                                "pipeline's jitter leaves some seconds lower (none of the "
                                "simulator's starved windows at 1 s stayed above it, nor above "
                                "0.76; eight real H100s training a small GPT at 85%, its seconds "
                                "down to 0.745, did).")
    steady_floor_duty: float = th(0.70, "share", "Without host counters, a window in which "
                                  "every GPU stays at this duty or more in every second, and "
                                  "each GPU's duty moves by at most steady_duty_sd from second "
                                  "to second, is busy too: a plateau flat to the second is the "
                                  "step's own uploads (on 3,600 tuning runs no starved window "
                                  "at 1 s was that flat at 70% or more; flat starvation sat "
                                  "at 62-68%).")
    steady_duty_sd: float = th(0.025, "share", "Standard deviation of a GPU's per-second duty "
                               "over the window below which its plateau is flat (see "
                               "steady_floor_duty).")
    # --- stragglers and collectives ----------------------------------------------------------
    duty_spread: float = th(0.12, "share", "Spread of duty cycle between GPUs of one job above "
                            "which one GPU is the odd one out (SageMaker's load-balancing rule "
                            "compares per-GPU utilization the same way).")
    spin_duty: float = th(0.93, "share", "Duty cycle of GPUs waiting in an NCCL collective: the "
                          "spin kernel keeps utilization ~100% (NVIDIA/nccl #968, #199, #1550; "
                          "pytorch #36285).")
    busy_bin_duty: float = th(0.9, "share", "A second with at least this duty is 'busy' for the "
                              "power-while-busy measure (power is a 1 s average on Ampere+).")
    cold_power_ratio: float = th(0.9, "ratio", "A busy GPU drawing less than this fraction of "
                                 "the hottest busy GPU's power is 'busy but cold': spinning in a "
                                 "collective (reported at 18-45% of the limit vs 60-100% "
                                 "computing).")
    straggler_hot_share: float = th(0.7, "share", "Share of the window's seconds with a GPU "
                                    "cold (busy_but_cold) in which the same GPU was the hottest: "
                                    "a straggler is the same rank every step, while healthy DDP's "
                                    "step-to-step jitter makes each rank wait a second now and "
                                    "then (8xA100 DDP at 1 s: the hottest GPU changes every few "
                                    "seconds).")
    power_spread: float = th(0.06, "share of limit", "Minimum gap in power fraction between the "
                             "hottest GPU and the median of the others to call a sync stall "
                             "when every GPU reads ~100% utilization.")
    lone_idle_share: float = th(0.03, "share", "Without host counters, a starving rank is named "
                                "only when every other GPU of the job idles less than this "
                                "(they spin in the collective waiting for it).")
    # --- throttling --------------------------------------------------------------------------
    throttle_share: float = th(0.3, "share", "Share of samples with a thermal, power-cap or "
                               "hardware-slowdown clock event reason that makes a GPU throttled.")
    throttle_clock_frac: float = th(0.93, "share of max", "SM clock below this share of its "
                                    "maximum confirms the clock is really held down (SW power "
                                    "cap bits alone are routine at full load).")
    # --- host attribution --------------------------------------------------------------------
    core_busy_pct: float = th(85.0, "% of a core", "A process or thread at this CPU is using a "
                              "whole core: a GIL-bound main process or a saturated worker.")
    loader_busy_share: float = th(0.88, "share", "Share of the loader workers' capacity in use "
                                  "above which the workers are the bottleneck (SageMaker's CPU "
                                  "bottleneck rule uses CPU > 90% while GPU < 10%).")
    iowait_pct: float = th(5.0, "%", "Host iowait above this (with disk reads) points at "
                           "storage; SageMaker's IO rule uses 50% of one busy host, a many-core "
                           "host dilutes it, so gpumon asks less.")
    ckpt_write_mbps: float = th(50.0, "MB/s", "Disk writes at this rate while the GPUs stop "
                                "are a checkpoint being saved (models are 100s of MB to GBs).")
    disk_read_busy_mbps: float = th(20.0, "MB/s", "Disk reads at this rate while the GPUs "
                                    "wait point at storage even with little iowait (a many-core "
                                    "host dilutes iowait; a cached dataset reads nothing).")
    disk_read_mbps: float = th(1.0, "MB/s", "Disk reads needed beside iowait to blame storage.")
    # --- streaming ---------------------------------------------------------------------------
    recent_s: float = th(2.0, "s", "Host readings over this many last seconds count as 'now': "
                         "at an onset the window's mean lags the change.")
    power_settle_s: float = th(1.0, "s", "Every GPU at work this long before a second whose power "
                               "is compared across GPUs (rel_power): the driver's power is a 1 s "
                               "average, so a GPU's first second back from a wait reads cold.")
    sticky_s: float = th(10.0, "s", "A starvation verdict held this long persists while its host "
                         "cause does (a starving job eating its prefetched batches will "
                         "starve again).")
    # --- the pause tracker (detect/pauses.py) ---------------------------------------------------
    trickle_duty: float = th(0.15, "share", "Every GPU below this in a second: the job stopped "
                             "(a stop may keep a trickle of kernels: a rank copying a checkpoint "
                             "off its GPU reads 4-10% in real logs, 2- and 8-GPU).")
    resumed_duty: float = th(0.5, "share", "A second in which the job's duty reaches this counts as "
                             "work resumed inside a pause.")
    cooldown_contexts: float = th(3.0, "context spans", "After a 'pause' turned out to be "
                                  "starvation, no pause starts for this many context_s spans: a "
                                  "starving job's long gaps recur.")
    all_on_duty: float = th(0.3, "share", "Every GPU at this duty or more: all ranks are back at "
                            "work after a stop (ranks restart one after another after an epoch "
                            "boundary; their staggered return is not starvation).")
    back_s: float = th(2.0, "s", "Every GPU at work this long, within a pause, before a new stop "
                       "counts as starvation.")
    return_tol: float = th(0.04, "share", "Work is back after a pause at the job's level before "
                           "it less this (a job whose steady work sits at 83% is back at 83%).")
    stop_gap_s: float = th(0.5, "s", "Every GPU below seg_util_pct this long in a row (a gap "
                           "ending in the second), sampled stop_gap_samples times or more in "
                           "the second, is a stop though the second's duty stays up: a 0.7 s "
                           "checkpoint save between seconds at 90% (a BERT fine-tune on an "
                           "L40S, bench/real) is a stop, not a window under duty_starved.")
    stop_gap_samples: float = th(3.0, "samples", "Samples of a GPU in a second for its gaps "
                                 "to show a stop shorter than the second (1 Hz logs cannot).")
    resume_s: float = th(4.0, "s", "Steady work this long (its mean duty at the return level) "
                         "ends a pause.")
    fresh_slack_s: float = th(3.0, "s", "Loader workers younger than the stop plus this were "
                              "started when the GPUs stopped: a new DataLoader, whose start-up "
                              "explains the stop (a rank's new workers fork within a second).")
    # --- a log's hindsight (analyze/pauses.py) ---------------------------------------------------
    log_steady_duty: float = th(0.7, "share", "In a log, steady work: every GPU at this duty or "
                                "more in every second (a busy rank's seconds stay above it; a "
                                "starving rank's, or one drifted from its waiting peers, fall "
                                "below).")
    dip_deep_duty: float = th(0.3, "share", "A dip goes this low on some GPU in some second (the "
                              "rest is noise around steady work, such as a DataParallel job's "
                              "second GPU hovering at 70%).")
    stop_power_frac: float = th(0.7, "share", "(Also cold.spin_seconds: a GPU at work at most "
                                "this share of its own highest power in the context_s before "
                                "spins in a collective, it does not compute.) "
                                "A GPU below dip_deep_duty has stopped only if its "
                                "power is at most this share of its own over the context_s of "
                                "steady work before (an idle GPU draws a fraction of its busy "
                                "power: 0.1-0.3 on recent GPUs, ~0.4-0.5 on a Titan X holding "
                                "memory); a 1 s sample at 0% beside busy power caught the gap "
                                "between two steps. Unknown power counts as stopped.")
    dip_lead_in_s: float = th(3.0, "s", "Ranks stop one after another: steady work may end this "
                              "long before every GPU has stopped.")
    blips_max: float = th(2.0, "seconds", "Lone seconds below steady work allowed in context_s of "
                          "steady work (a 1 s sample that caught the gap between two steps): 2 "
                          "in 20 s keeps its duty at 0.9 or more, above duty_starved.")
    blips_work_duty: float = th(0.86, "share", "More lone seconds than blips_max are allowed where "
                                "the job's duty over the context is at least this (an 8-GPU gloo "
                                "job's 1 s samples catch its all-reduce one second in four); "
                                "above 1: never.")
    blip_side_s: float = th(3.0, "s", "Seconds at full speed on each side of such a lone second.")
    tail_min_s: float = th(10.0, "s", "At the end of a log, steady work up to its last second at "
                           "least this long is a return after a dip in which the ranks stopped "
                           "together.")
    isolation: float = th(3.0, "times", "A dip is a one-off when the steady work on either side "
                          "is at least this many times as long: a starving job's gaps are a "
                          "large share of its time.")
    compute_slope: float = th(0.38, "share/share", "Power gained per unit of duty cycle between "
                              "the busier and the idler GPUs of a job, as a share of the power "
                              "limit: a computing GPU draws ~50-80% of its limit more than "
                              "idle, one spinning in a collective ~5-35% more (nccl #968/#1550), "
                              "so the busier group computes above this slope and spins below.")
    power_lag_s: float = th(2.0, "s", "After a stall, a GPU that spun through it may read cold "
                            "this long (power is a 1 s average, and a second partly spent "
                            "spinning averages low).")
    power_min_s: float = th(3.0, "s", "Every GPU at work this long before their power is "
                            "compared (busy but cold): a GPU back from a stop ramps.")
    host_hold_s: float = th(0.0, "s", "A starvation verdict whose cause shows on the host at the "
                            "same time (loaders saturated, main process at a core, storage), "
                            "in a job that has not paused for window_max_s, replaces busy "
                            "after this long rather than hold_s: the GPUs and the host agree.")
    hang_s: float = th(30.0, "s", "Every GPU of a job busy but cold this long, none computing, "
                       "is a collective waiting for a rank that is not coming (a hang): NCCL "
                       "steps and checkpoints keep the others waiting seconds, not half a "
                       "minute (NVIDIA/nccl #968, horovod #3611).")
    hang_power_frac: float = th(0.35, "share", "A busy GPU drawing at most this share of its "
                                "power limit spins rather than computes (waiting ranks read "
                                "44/250, 70/300, 152/700 W in the NCCL reports; computing "
                                "ones 50-90%).")
    hold_s: float = th(2.0, "s", "A new verdict must win this long before a live verdict "
                       "changes (hysteresis: no flapping on a noisy boundary).")
    min_samples: float = th(3.0, "samples", "Fewer utilization samples per GPU in the window "
                            "than this is insufficient_data.")


DEFAULT = Thresholds()


def describe(t: Thresholds = DEFAULT) -> list[tuple[str, float, str, str]]:
    """(name, value, unit, why) for every threshold."""
    return [(f.name, getattr(t, f.name), f.metadata["unit"], f.metadata["why"])
            for f in fields(t)]
