"""The starvation detector: busy, idle, paused, data_starvation, sync_stall or throttled,
per job.

    from gpumon.detect import diagnose, Detector
    diagnose(window) -> list[Diagnosis]        # pure, one per job
    det = Detector(); det.update(tick) -> list[Diagnosis]   # live, with hysteresis

How (detector.py, the one orchestrator): samples -> per-second bins (bins.py) -> jobs
(jobs.py) -> the seconds table (seconds.py) -> pauses (pauses.py) -> window features
(features.py) -> the rules (rules/, a registry) -> the hold (hold.py) -> Diagnosis
(result.py); `gpumon analyze` feeds it whole logs and adds the named hindsight rules of
analyze/hindsight.py. thresholds.py names every threshold.

Diagnosis.evidence keys (numbers, None when unknown; stable for the exporter and dashboard):
  duty_cycle          share of time a kernel ran, mean over the job's GPUs (0..1)
  duty_min, duty_max  lowest / highest GPU duty cycle (the odd one out shows here)
  util_pct            duty_cycle in per cent
  burst_s, gap_s      busy / idle time in the window over the bursts / gaps begun in it (s;
                      None where samples are further apart than max_sample_gap_s)
  gap_sync            idle time shared by all GPUs / mean idle time per GPU (1 = together)
  power_frac          power / power limit, mean over the job
  power_frac_busy     power / limit in seconds with >= 90% duty (busy-but-cold when low)
  busy_cold_share     mean share of the compared seconds (every GPU busy) each GPU is cold
  rel_power_min       lowest GPU power / hottest GPU power while all are busy
  clock_frac          lowest SM clock / its maximum
  throttle_share      highest share of samples with thermal/power-cap/slowdown reasons
  loader_cpu_pct      loader workers' CPU (% of one core) of the straggler's rank or busiest
  loader_workers      loader worker processes
  loader_busy         loader workers at a full core
  main_cpu_pct        main process CPU (% of one core)
  main_thread_max_pct main process's busiest thread (% of one core)
  iowait_pct          host iowait (%)
  disk_read_mbps, disk_write_mbps   host disk rates (MB/s)
  samples_per_s       utilization samples per GPU per second (6 NVML, 1 nvidia-smi logs)
  pause               1 inside a pause of a healthy run (checkpoint, validation, epoch end)

Diagnosis.missing names absent signals: subsecond_util, power, clocks, clock_events,
processes, memory, job_processes, host; each lowers the confidence.
"""
from gpumon.detect.detector import Detector, LogJob, diagnose
from gpumon.detect.result import EVIDENCE_KEYS
from gpumon.detect.hold import Hysteresis
from gpumon.detect.thresholds import DEFAULT as THRESHOLDS, Thresholds

__all__ = ["diagnose", "Detector", "LogJob", "Hysteresis", "EVIDENCE_KEYS", "THRESHOLDS",
           "Thresholds"]
