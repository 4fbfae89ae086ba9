"""The one sample type: what every source produces and every consumer reads.

This module is the bottom of gpumon's import graph: it imports nothing of gpumon.

A value the GPU does not support, or that failed this time, is ``None``; never 0.
Per-field metadata (unit, help, title, width, dcgm name) drives the CSV header, the
dashboard columns, the Prometheus exporter and the dstat/dool plugin: there is no
second list of fields anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

SOURCES = ("nvml", "sim", "replay")


def metric(unit: str, help: str, *, title: str = "", width: int = 6, fmt: str = ".0f",
           csv: bool = True, dcgm: str = "", kind: str = "gauge", default: Any = None) -> Any:
    """A dataclass field with the metadata every consumer reads."""
    return field(default=default, metadata={
        "unit": unit, "help": help, "title": title, "width": width, "fmt": fmt,
        "csv": csv, "dcgm": dcgm, "kind": kind,
    })


# Clock event ("throttle") reason bits of nvmlDeviceGetCurrentClocksEventReasons.
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_APP_CLOCKS = 0x2
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SYNC_BOOST = 0x10
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40
CLOCK_EVENT_HW_POWER_BRAKE = 0x80
CLOCK_EVENT_NAMES = {
    CLOCK_EVENT_GPU_IDLE: "gpu_idle", CLOCK_EVENT_APP_CLOCKS: "app_clocks",
    CLOCK_EVENT_SW_POWER_CAP: "sw_power_cap", CLOCK_EVENT_HW_SLOWDOWN: "hw_slowdown",
    CLOCK_EVENT_SYNC_BOOST: "sync_boost", CLOCK_EVENT_SW_THERMAL: "sw_thermal",
    CLOCK_EVENT_HW_THERMAL: "hw_thermal", CLOCK_EVENT_HW_POWER_BRAKE: "hw_power_brake",
}
# Reasons that mean the clocks are held down by heat or power, not by idleness or choice.
CLOCK_EVENTS_THROTTLE = (CLOCK_EVENT_SW_POWER_CAP | CLOCK_EVENT_HW_SLOWDOWN | CLOCK_EVENT_SW_THERMAL
                         | CLOCK_EVENT_HW_THERMAL | CLOCK_EVENT_HW_POWER_BRAKE)


def clock_event_names(mask: Optional[int]) -> list[str]:
    if not mask:
        return []
    return [name for bit, name in CLOCK_EVENT_NAMES.items() if mask & bit]


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment: a driver utilization sample plus that GPU's latest other readings.

    Sources emit one GpuSample per driver utilization sample (about 6 per second on NVML),
    stamped with the wall-clock time the driver took it, so sub-second bursts survive polling.
    """
    time: float = metric("s", "Unix epoch seconds of this sample", csv=True, fmt=".3f")
    gpu: int = metric("", "NVML index of the GPU", title="GPU", width=3, fmt="d")
    source: str = metric("", "Where the sample comes from: nvml, sim or replay", default="nvml")
    util_gpu_pct: Optional[float] = metric(
        "%", "Share of the driver's sample period with a kernel running", title="util",
        width=4, dcgm="DCGM_FI_DEV_GPU_UTIL")
    util_mem_pct: Optional[float] = metric(
        "%", "Share of the sample period with device memory read or written", title="mem%",
        width=4, dcgm="DCGM_FI_DEV_MEM_COPY_UTIL")
    mem_used_mib: Optional[float] = metric(
        "MiB", "Device memory in use", title="used", dcgm="DCGM_FI_DEV_FB_USED")
    mem_total_mib: Optional[float] = metric("MiB", "Device memory in all", title="total",
                                            dcgm="DCGM_FI_DEV_FB_TOTAL")
    power_w: Optional[float] = metric(
        "W", "Power draw (the driver's average, 1 s on Ampere and newer)", title="power",
        fmt=".0f", dcgm="DCGM_FI_DEV_POWER_USAGE")
    power_limit_w: Optional[float] = metric("W", "Enforced power limit", title="limit",
                                            dcgm="DCGM_FI_DEV_ENFORCED_POWER_LIMIT")
    sm_clock_mhz: Optional[float] = metric(
        "MHz", "SM clock", title="sm", dcgm="DCGM_FI_DEV_SM_CLOCK")
    sm_clock_max_mhz: Optional[float] = metric("MHz", "Highest SM clock", title="smmax",
                                               dcgm="DCGM_FI_DEV_MAX_SM_CLOCK")
    temp_c: Optional[float] = metric("C", "GPU temperature", title="temp", width=4,
                                     dcgm="DCGM_FI_DEV_GPU_TEMP")
    pcie_rx_mbps: Optional[float] = metric(
        "MB/s", "PCIe bytes received by the GPU per second (host to device)", title="rx",
        fmt=".1f", dcgm="DCGM_FI_PROF_PCIE_RX_BYTES")
    pcie_tx_mbps: Optional[float] = metric(
        "MB/s", "PCIe bytes sent by the GPU per second (device to host)", title="tx", fmt=".1f",
        dcgm="DCGM_FI_PROF_PCIE_TX_BYTES")
    clock_events: Optional[int] = metric(
        "bitmask", "Clock event (throttle) reasons, nvmlClocksEventReason bits", title="evt",
        fmt="d", dcgm="DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
    energy_j: Optional[float] = metric(
        "J", "Energy consumed since the driver loaded", title="energy", fmt=".1f",
        kind="counter", dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    pids: Optional[tuple[int, ...]] = metric(
        "", "PIDs of the processes using the GPU (space-separated in CSV); None if unknown",
        title="pids")
    proc_util: tuple[tuple[int, float], ...] = metric(
        "%", "Per-process SM utilization (pid, %) where several processes share the GPU",
        csv=False, default=())
    proc_mem: tuple[tuple[int, float], ...] = metric(
        "MiB", "Per-process GPU memory (pid, MiB) from the running-process list", csv=False,
        default=())
    # GPM (Hopper and newer; None where the GPU or driver has none): means over the poll.
    sm_active_ratio: Optional[float] = metric(
        "ratio", "The ratio of cycles an SM has at least 1 warp assigned", title="smact",
        width=5, fmt=".3f", dcgm="DCGM_FI_PROF_SM_ACTIVE")
    sm_occupancy_ratio: Optional[float] = metric(
        "ratio", "The ratio of number of warps resident on an SM", title="smocc", width=5,
        fmt=".3f", dcgm="DCGM_FI_PROF_SM_OCCUPANCY")
    tensor_active_ratio: Optional[float] = metric(
        "ratio", "Ratio of cycles the tensor (HMMA) pipe is active", title="tensor", width=5,
        fmt=".3f", dcgm="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    dram_active_ratio: Optional[float] = metric(
        "ratio", "Ratio of cycles the device memory interface is active sending or receiving "
        "data", title="dram", width=5, fmt=".3f", dcgm="DCGM_FI_PROF_DRAM_ACTIVE")
    fp64_active_ratio: Optional[float] = metric(
        "ratio", "Ratio of cycles the fp64 pipes are active", title="fp64", width=5, fmt=".3f",
        dcgm="DCGM_FI_PROF_PIPE_FP64_ACTIVE")
    fp32_active_ratio: Optional[float] = metric(
        "ratio", "Ratio of cycles the fp32 pipes are active", title="fp32", width=5, fmt=".3f",
        dcgm="DCGM_FI_PROF_PIPE_FP32_ACTIVE")
    fp16_active_ratio: Optional[float] = metric(
        "ratio", "Ratio of cycles the fp16 pipes are active", title="fp16", width=5, fmt=".3f",
        dcgm="DCGM_FI_PROF_PIPE_FP16_ACTIVE")

    @property
    def power_frac(self) -> Optional[float]:
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w / self.power_limit_w


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One process of a job: the main process or one of its loader workers."""
    pid: int
    ppid: int
    name: str
    role: str                     # "main" or "worker"
    cpu_pct: Optional[float]      # % of one core since the last reading
    gpus: tuple[int, ...] = ()    # GPUs this process uses itself (NVML's view)
    user: Optional[str] = None    # owner's name (or uid as text where it has no name)
    cmdline: Optional[str] = None  # the command line, arguments joined by spaces
    rss_mib: Optional[float] = None   # resident host memory, MiB
    started: Optional[float] = None   # Unix epoch seconds the process started


@dataclass(frozen=True, slots=True)
class JobProcs:
    """The host side of the job on one GPU: its main process and loader workers."""
    gpu: int = metric("", "NVML index of the GPU", csv=False)
    main_pid: Optional[int] = metric("", "PID of the job's main process on this GPU", fmt="d")
    main_cpu_pct: Optional[float] = metric(
        "%", "CPU of the main process, % of one core", title="main")
    main_thread_max_pct: Optional[float] = metric(
        "%", "CPU of the main process's busiest thread, % of one core (GIL-bound loaders)",
        title="thr")
    loader_workers: Optional[int] = metric("", "Child processes of the main process", fmt="d",
                                           title="wrk")
    loader_cpu_pct: Optional[float] = metric(
        "%", "CPU of all loader workers together, % of one core", title="load")
    loader_busy: Optional[int] = metric(
        "", "Loader workers at 90% of a core or more", fmt="d", title="sat")
    loader_age_s: Optional[float] = metric(
        "s", "Age of the youngest loader worker (young: a new DataLoader, as at an epoch "
        "boundary or a validation pass)", fmt=".0f", title="age")


@dataclass(frozen=True, slots=True)
class HostSample:
    """The host at one moment."""
    time: float = metric("s", "Unix epoch seconds", csv=False)
    cpu_pct: Optional[float] = metric("%", "Host CPU in use, % of all cores", title="cpu")
    cpu_max_core_pct: Optional[float] = metric("%", "Busiest core, % of that core",
                                               title="core")
    iowait_pct: Optional[float] = metric("%", "CPU time waiting for I/O, % of all cores",
                                         title="wai", fmt=".1f")
    disk_read_mbps: Optional[float] = metric("MB/s", "Disk reads", title="read", fmt=".1f")
    disk_write_mbps: Optional[float] = metric("MB/s", "Disk writes", title="writ", fmt=".1f")
    cpu_count: Optional[int] = metric("", "Logical CPUs", csv=False)
    cpu_cores_pct: tuple[float, ...] = metric("%", "Per-core CPU", csv=False, default=())
    jobs: tuple[JobProcs, ...] = metric("", "Per-GPU job processes", csv=False, default=())
    procs: tuple[ProcSample, ...] = metric("", "Every job process", csv=False, default=())
    unmapped_pids: tuple[int, ...] = metric(
        "", "GPU PIDs not found on this host (in a container NVML reports host PIDs)",
        csv=False, default=())

    def job_on(self, gpu: int) -> Optional[JobProcs]:
        for j in self.jobs:
            if j.gpu == gpu:
                return j
        return None


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What does not change while gpumon runs: identity and which metrics are supported."""
    index: int
    name: str
    uuid: str
    pci_bus_id: str = ""
    mem_total_mib: Optional[float] = None
    power_limit_w: Optional[float] = None
    sm_clock_max_mhz: Optional[float] = None
    mig: bool = False
    supported: tuple[tuple[str, bool], ...] = ()   # (metric, supported) pairs


@dataclass(frozen=True, slots=True)
class Tick:
    """What one poll of a source returns: every GPU sample since the last poll, and the host."""
    time: float
    gpus: tuple[GpuSample, ...]               # all GPUs, time-ordered within each GPU
    host: Optional[HostSample] = None
    lost: tuple[int, ...] = ()                # GPUs lost so far (GPU_IS_LOST)
    truth: Any = None                         # ground truth, simulated sources only
    # GPUs whose job is judged (gpumon run: CMD's GPUs; () while CMD is on none); None: every
    # GPU, as when one job has the node. Set by the Monitor, not by sources.
    judged: Optional[tuple[int, ...]] = None


# GpuSample's GPM fields (NVML's GPU Performance Monitoring: Hopper and newer), in order.
GPM_FIELDS = ("sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio",
              "dram_active_ratio", "fp64_active_ratio", "fp32_active_ratio",
              "fp16_active_ratio")


def csv_fields(cls) -> list:
    """The dataclass fields of ``cls`` that appear as CSV columns, in order."""
    return [f for f in fields(cls) if f.metadata.get("csv", True)]


# CSV column names of the per-GPU job columns (JobProcs fields, as written).
def job_columns() -> list[str]:
    return [f.name for f in csv_fields(JobProcs)]


def host_columns() -> list[str]:
    return [f.name for f in csv_fields(HostSample)]


def gpu_columns() -> list[str]:
    return [f.name for f in csv_fields(GpuSample)]
