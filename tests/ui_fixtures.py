"""Deterministic dashboards for the UI tests: fixed Ticks, no source, no clock."""

from gpumon.diagnosis import BUSY, SYNC_STALL, Diagnosis
from gpumon.samples import (CLOCK_EVENT_SW_THERMAL, GpuInfo, GpuSample, HostSample, JobProcs,
                            ProcSample, Tick)
from gpumon.ui.model import Dashboard

T0 = 1_700_000_000.0
PER = 6                           # driver samples per second


def infos(n):
    return [GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:04d}",
                    mem_total_mib=81559.0, power_limit_w=700.0, sm_clock_max_mhz=1980.0)
            for i in range(n)]


def _util(gpu, k, straggler):
    """GPU `straggler` computes in bursts; the others spin at 100 % (sync stall)."""
    if gpu == straggler:
        return 100.0 if (k // 4) % 3 else 0.0
    return 100.0 if k % 9 else 93.0


def _sm_active(gpu, k, straggler, gpm):
    """SM activity where the GPU has GPM (``gpm``): the straggler's SMs work while it
    computes, the others spin in a collective on a few SMs."""
    if gpu not in gpm:
        return None
    if gpu == straggler:
        return 0.62 if _util(gpu, k, straggler) else 0.0
    return 0.03


def ticks(n, seconds=30, straggler=1, truth=None, gpm=()):
    out = []
    for sec in range(seconds):
        t = T0 + sec + 1
        samples = []
        for g in range(n):
            for k in range(PER):
                kk = sec * PER + k
                cold = g != straggler
                samples.append(GpuSample(
                    time=t - 1 + (k + 1) / PER, gpu=g, source="sim",
                    util_gpu_pct=_util(g, kk, straggler), util_mem_pct=30.0,
                    mem_used_mib=40960.0 + 512 * g, mem_total_mib=81559.0,
                    power_w=210.0 if cold else 560.0, power_limit_w=700.0,
                    sm_clock_mhz=1980.0 if g != 3 else 1410.0, sm_clock_max_mhz=1980.0,
                    temp_c=61.0 + g if g != 3 else 88.0, pcie_rx_mbps=250.5, pcie_tx_mbps=3.2,
                    clock_events=CLOCK_EVENT_SW_THERMAL if g == 3 else 0, energy_j=1e5,
                    pids=(4100 + g,), proc_mem=((4100 + g, 40448.0 + 512 * g),),
                    proc_util=((4100 + g, _util(g, kk, straggler)),),
                    sm_active_ratio=_sm_active(g, kk, straggler, gpm)))
        jobs = tuple(JobProcs(gpu=g, main_pid=4100 + g, main_cpu_pct=97.0 - g,
                              main_thread_max_pct=95.0, loader_workers=4,
                              loader_cpu_pct=180.0 + g, loader_busy=1) for g in range(n))
        procs = tuple(ProcSample(pid=4100 + g, ppid=4000, name="python", role="main",
                                 cpu_pct=97.0 - g, gpus=(g,), user="alice",
                                 cmdline=f"python train.py --local-rank {g} --data /data/in1k",
                                 rss_mib=5120.0 + g, started=T0 - 3600) for g in range(n))
        procs += tuple(ProcSample(pid=5000 + 10 * g + w, ppid=4100 + g, name="pt_data_worker",
                                  role="worker", cpu_pct=30.0 + 10 * w + g, user="alice",
                                  cmdline=f"python train.py --local-rank {g} --data /data/in1k",
                                  rss_mib=800.0, started=T0 - 120)
                       for g in range(n) for w in range(4))
        host = HostSample(time=t, cpu_pct=23.5, cpu_max_core_pct=99.0, iowait_pct=0.4,
                          disk_read_mbps=12.5, disk_write_mbps=0.0, cpu_count=64,
                          cpu_cores_pct=tuple(float((7 * i) % 100) for i in range(64)),
                          jobs=jobs, procs=procs)
        out.append(Tick(time=t, gpus=tuple(samples), host=host, truth=truth))
    return out


def diagnosis_at(sec, n, straggler=1):
    if sec < 5:
        return []
    gpus = tuple(range(n))
    if n == 1 or sec < 12:
        return [Diagnosis(verdict=BUSY, gpus=gpus, confidence=0.9,
                          evidence={"duty": 0.97, "power_frac": 0.8},
                          advice="nothing to do: the GPUs are kept busy")]
    return [Diagnosis(verdict=SYNC_STALL, gpus=gpus, cause="imbalance", straggler_gpu=straggler,
                      confidence=0.87,
                      evidence={"duty_cycle": 0.92, "burst_s": 0.67, "gap_s": 0.33,
                                "gap_sync": 0.25, "power_frac_busy": 0.39,
                                "rel_power_min": 0.375, "busy_cold_share": 0.75,
                                "loader_cpu_pct": 181.0},
                      rule="busy_but_cold",
                      because=f"every GPU busy, but the others draw as little as 38% of GPU "
                              f"{straggler}'s power: they spin in a collective while it computes",
                      advice=f"GPU {straggler} computes longer than the others: balance the work "
                             "across ranks (batch sizes, sequence lengths, uneven shards)")]


def dashboard(n, seconds=30, kind="sim", label="sync_stall:4", detector=True, truth=None,
              note="", gpm=()):
    """``gpm``: the GPUs with GPM (SM activity readings)."""
    d = Dashboard(infos(n), kind=kind, label=label, interval=1.0, detector=detector, note=note)
    for sec, t in enumerate(ticks(n, seconds, truth=truth, gpm=gpm)):
        d.update(t, diagnosis_at(sec, n) if detector else [])
    return d
