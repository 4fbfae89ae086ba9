"""Hand-built ticks for tests that need no source."""
from gpumon.samples import GpuSample, HostSample, JobProcs, Tick


def gpu_sample(t, gpu, util, **kw):
    base = dict(source="sim", util_mem_pct=20.0, mem_used_mib=4000.0, mem_total_mib=81559.0,
                power_w=300.0, power_limit_w=700.0, sm_clock_mhz=1800.0, sm_clock_max_mhz=1980.0,
                temp_c=60.0, pcie_rx_mbps=100.0, pcie_tx_mbps=5.0, clock_events=0, energy_j=10.0,
                pids=(1000 + gpu,))
    base.update(kw)
    return GpuSample(time=t, gpu=gpu, util_gpu_pct=util, **base)


def tick(t, gpus=2, util=100.0, per=6, **kw):
    samples = tuple(gpu_sample(t - 1 + (k + 1) / per, g, util, **kw)
                    for g in range(gpus) for k in range(per))
    jobs = tuple(JobProcs(gpu=g, main_pid=1000 + g, main_cpu_pct=50.0, main_thread_max_pct=None,
                          loader_workers=4, loader_cpu_pct=120.0, loader_busy=0)
                 for g in range(gpus))
    host = HostSample(time=t, cpu_pct=30.0, cpu_max_core_pct=80.0, iowait_pct=0.5,
                      disk_read_mbps=1.0, disk_write_mbps=0.2, cpu_count=2, jobs=jobs)
    return Tick(time=t, gpus=samples, host=host)
