"""NvmlSource: reads NVIDIA GPUs through nvidia-ml-py. The only module that imports pynvml.

- NVML starts lazily (first use), never creates a CUDA context (NVML does not), and a
  missing library or driver becomes one NoDriverError line; a driver NVML cannot use
  (permissions, a driver/library version mismatch) one NvmlStartError line naming why.
- A GPU lost at any moment (while opening, listing or sampling) is marked lost and left out
  from then on; the others go on. It stays in ``gpu_infos`` (so it shows as lost) and in
  ``lost``.
- Every call goes through ``_Gpu.query``: NotSupported is remembered per GPU and metric and
  never asked again; GPU_IS_LOST marks the GPU lost while the others go on; any other NVML
  error is counted (``errors``) and the value is None this time.
- Every utilization sample the driver keeps is read with nvmlDeviceGetSamples and the last
  seen timestamp, so sub-second bursts survive 1 s polling. Its timestamps are CPU
  microseconds on a clock NVML does not name (boot-time on Linux drivers, per a public
  report): ``_ClockMap`` finds the clock and maps them to wall-clock time; the raw value goes
  back as lastSeen. While a GPU idles the ring stops filling (NOT_FOUND): then the tick reads
  nvmlDeviceGetUtilizationRates, so idle time is logged as 0%, never as missing.
- NVML calls cost driver time (a lock, an ioctl), so a tick makes few: the sample ring, the
  process list and per-process utilization are asked once each through kept arrays
  (gpumon.nvml_buffers), not twice as nvidia-ml-py's wrappers do; the ring no more than once a
  driver period while the tick has nothing else to say; the process list every few seconds
  unless the GPU's used memory moves (a process came or went); per-process utilization and the
  metrics in ``skip`` only for the commands that show them (the constructor's flags).
- GPM (SM activity and occupancy, tensor and DRAM activity), where nvmlGpmQueryDeviceSupport
  says the GPU has it and it is not in MIG mode: one GPM sample and one metrics call a GPU a
  poll, at most once a GPM_EVERY_S (gpumon.nvml_buffers.Gpm), the means since the read before;
  the polls in between carry the latest read's values. Elsewhere the values are None. A GPM
  call that fails is counted once in ``errors`` and GPM is off for that GPU from then on (its
  values None); the other readings go on.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Optional, Sequence

from gpumon import nvml_buffers
from gpumon.cadence import due
from gpumon.errors import NoDriverError, NvmlStartError, UserError
from gpumon.samples import GPM_FIELDS, GpuInfo, GpuSample

try:  # nvidia-ml-py; its absence is reported as a missing driver stack, in one line
    import pynvml as N
except ImportError:  # pragma: no cover - exercised by the dstat test with a bare python
    N = None

# nvmlDeviceGetSamples' period is 1/6 s on most products (NVML-NOTES); each GPU's own period
# is learnt from the spacing of its samples.
DEFAULT_SAMPLE_PERIOD_S = 1 / 6
# A driver period with no sample means no kernel ran (the ring stops filling while the GPU
# idles): a gap longer than this many periods is logged as 0% samples on the driver's grid,
# once nvmlDeviceGetUtilizationRates confirms the GPU is idle now.
IDLE_GAP_PERIODS = 1.5
# At most this many idle samples are filled in one go (a suspended machine, a clock step).
MAX_IDLE_FILL = 600
# The driver's ring holds ~20 s of history: on the first read, keep only samples this recent
# (seconds before NVML was opened), so a log starts when gpumon starts.
HISTORY_BEFORE_OPEN_S = 1.0
# The running-process list is slow (~4.5 ms) and takes the driver lock, and changes rarely: read
# it this often by default (s)...
PROCESS_EVERY_S = 4.0
# ...and sooner, but at most this often (s), when the GPU's used memory moved by more than
# PROCESS_MEM_CHANGE_MIB since the last list: a CUDA context alone takes more than that, so a
# process that comes or goes shows there first. (An allocator's churn within a job re-reads the
# list at most once a PROCESS_MIN_S.)
PROCESS_MIN_S = 1.0
PROCESS_MEM_CHANGE_MIB = 64.0
# Per-process utilization (only for the commands that show it) is read this often (s).
PROCESS_UTIL_EVERY_S = 1.0
# The power limit rarely changes; re-read it this often.
POWER_LIMIT_REFRESH_S = 30.0
# One NVML call taking longer than this (s) is slow enough to say so (the slowest reported
# costs are ~20 ms: PCIe throughput; the process list ~4.5 ms): polls then fall behind.
SLOW_CALL_S = 0.25
# GPM is read at most this often (s), at every poll of a 1 s cadence: the detector judges
# seconds, and NVML asks for more than 100 ms between two GPM samples. Faster polls carry the
# latest read's values (at 0.1 s, reading at every poll would take ten GPM samples a GPU a
# second, each as dear as a ring read).
GPM_EVERY_S = 1.0
# nvmlDeviceGetPcieThroughput blocks ~20 ms per call: only where the byte counters are missing,
# and no more often than this.
PCIE_THROUGHPUT_EVERY_S = 10.0

# Metric names used by the support matrix (`gpumon list`) and FAKE_NVML_UNSUPPORTED.
METRICS = ("samples", "util", "memory", "power", "power_limit", "clock", "clock_max", "temp",
           "clocks_event", "energy", "pcie", "processes", "process_util", "gpm")

# GPM metrics (Hopper and newer), asked in one nvmlGpmMetricsGet a poll: the GpuSample field
# and NVML's metric id (per cent over the time between two GPM samples; logged as 0-1).
GPM_METRICS = tuple(zip(GPM_FIELDS, (
    "NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_SM_OCCUPANCY", "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "NVML_GPM_METRIC_DRAM_BW_UTIL", "NVML_GPM_METRIC_FP64_UTIL", "NVML_GPM_METRIC_FP32_UTIL",
    "NVML_GPM_METRIC_FP16_UTIL")))

# nvmlInit's failures: the ones that mean "no driver here" (NoDriverError, with the --sim hint),
# then those of a driver NVML cannot use as things stand (NvmlStartError), with the usual fix.
_NO_DRIVER = {"NVML_ERROR_LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 not found",
              "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded"}
_CANNOT_START = {
    "NVML_ERROR_NO_PERMISSION": "insufficient permissions (is /dev/nvidia* readable by this "
                                "user? in a container, are the devices passed in?)",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "driver/library version mismatch (libnvidia-ml and "
                                          "the loaded kernel driver differ, as after a driver "
                                          "upgrade: reboot, or reload the nvidia modules)",
    "NVML_ERROR_IRQ_ISSUE": "the kernel driver has an interrupt problem with a GPU (see dmesg)",
    "NVML_ERROR_GPU_IS_LOST": "a GPU fell off the bus while NVML started (see dmesg)",
    "NVML_ERROR_RESET_REQUIRED": "a GPU needs a reset (nvidia-smi -r) or a reboot",
    "NVML_ERROR_INSUFFICIENT_RESOURCES": "the kernel driver is out of resources",
    "NVML_ERROR_OPERATING_SYSTEM": "the operating system refused the driver's request",
}

_FI_POWER_INSTANT = 186
_FI_PCIE_TX_BYTES = 197
_FI_PCIE_RX_BYTES = 198


class GpuLost(Exception):
    """NVML said GPU_IS_LOST: the GPU fell off the bus."""


class _ClockMap:
    """Maps driver sample timestamps (us, unknown clock) to Unix epoch seconds.

    The clock whose 'now' is just past the newest sample wins; with none plausible the newest
    sample is taken as 'now'. Re-anchored on every batch, so clock steps never accumulate.
    """
    CANDIDATES = (("realtime", getattr(time, "CLOCK_REALTIME", None)),
                  ("boottime", getattr(time, "CLOCK_BOOTTIME", None)),
                  ("monotonic", getattr(time, "CLOCK_MONOTONIC", None)))
    # A sample is at most this old when read (the ring holds ~20 s of history).
    MAX_AGE_S = 30.0

    def __init__(self) -> None:
        self.clock: Optional[str] = None

    def offset(self, newest_us: int) -> float:
        """Seconds to add to ts/1e6 to get Unix epoch time."""
        newest = newest_us / 1e6
        for name, cid in self.CANDIDATES:
            if cid is None:
                continue
            now = time.clock_gettime(cid)
            if -1.0 <= now - newest <= self.MAX_AGE_S:
                self.clock = name
                # (CLOCK_REALTIME is epoch time already: no offset to measure.)
                return 0.0 if name == "realtime" else _clock_offset(cid)
        self.clock = "unknown"
        return time.time() - newest


def _clock_offset(cid: int) -> float:
    """time.time() minus clock ``cid``, from the closest of three back-to-back readings: the
    process preempted between two readings would move every sample by as long."""
    best = (math.inf, 0.0)
    for _ in range(3):
        a = time.time()
        c = time.clock_gettime(cid)
        b = time.time()
        if b - a < best[0]:
            best = (b - a, (a + b) / 2 - c)
    return best[1]


class _Gpu:
    """One GPU's handle, identity and per-GPU state (unsupported metrics, last seen sample)."""

    def __init__(self, handle, index: int, errors: dict, slow: Optional[list] = None):
        self.handle = handle
        self.index = index
        self.unsupported: set[str] = set()
        self.errors = errors
        self.slow = slow if slow is not None else []   # (call, seconds, GPU), shared
        self.lost = False
        self.last_seen_us = 0
        self.last_sample_wall = 0.0
        self.period_s = DEFAULT_SAMPLE_PERIOD_S
        self.clock = _ClockMap()
        self.pcie_prev: Optional[tuple[float, int, int]] = None  # (t, rx_bytes, tx_bytes)
        self.pcie_rates: tuple[Optional[float], Optional[float]] = (None, None)
        self.pcie_thr_at = 0.0
        self.pids: Optional[tuple[int, ...]] = None
        self.pids_at = -1e9
        self.pids_mem: Optional[float] = None     # used MiB when the list was read
        self.proc_util: tuple[tuple[int, float], ...] = ()
        self.proc_util_seen = 0
        self.proc_util_at = -1e9
        self.samples_asked_at = -1e9              # monotonic time of the last GetSamples
        self._lists: Optional[tuple] = None
        self.proc_mem: tuple[tuple[int, float], ...] = ()
        self.power_limit_w: Optional[float] = None
        self.power_limit_at = -1e9
        self.sm_clock_max: Optional[float] = None
        self.mem_total_mib: Optional[float] = None
        self.name = ""
        self.uuid = ""
        self.mig = False
        self.gpm: Optional[nvml_buffers.Gpm] = None
        self.gpm_at = -1e9                        # monotonic time of the last GPM read
        self.gpm_values: dict[str, float] = {}    # its values, carried until the next

    @property
    def lists(self) -> tuple:
        """(samples, processes, process utilization) through kept arrays (made at first use,
        after nvmlInit)."""
        if self._lists is None:
            self._lists = (nvml_buffers.Samples(), nvml_buffers.Processes(),
                           nvml_buffers.ProcessUtilization())
        return self._lists

    def query(self, metric: str, fn: Callable, *args):
        """Call fn; None when unsupported or failed this time; GpuLost when the GPU is gone."""
        if metric in self.unsupported:
            return None
        t0 = time.perf_counter()
        try:
            return fn(self.handle, *args)
        except N.NVMLError as exc:
            code = exc.value
            if code in (N.NVML_ERROR_NOT_SUPPORTED, N.NVML_ERROR_FUNCTION_NOT_FOUND,
                        N.NVML_ERROR_NO_PERMISSION):
                self.unsupported.add(metric)
            elif code == N.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
                raise GpuLost(self.index) from None
            elif code == N.NVML_ERROR_NOT_FOUND:
                raise
            else:
                key = f"{metric}:{exc.__class__.__name__}"
                self.errors[key] = self.errors.get(key, 0) + 1
            return None
        except N.NVMLLibraryMismatchError:
            # Raised by pynvml's process-list wrappers; not an NVMLError subclass.
            self.unsupported.add(metric)
            return None
        finally:
            took = time.perf_counter() - t0
            if took > SLOW_CALL_S and not self.slow:
                self.slow.append((_call_name(fn), took, self.index))


def _scaled(value, per: float = 1.0) -> Optional[float]:
    """An NVML reading in GpuSample's unit (``per`` of NVML's to one); None stays None."""
    return None if value is None else float(value) / per


def _readings(g: _Gpu, skip) -> dict:
    """GPU ``g``'s memory, power, clock, temperature, clock events and energy, in GpuSample's
    fields and units (a metric in ``skip`` is not read: None)."""
    q = g.query
    mem = q("memory", N.nvmlDeviceGetMemoryInfo)
    power = q("power", N.nvmlDeviceGetPowerUsage)
    clock = q("clock", N.nvmlDeviceGetClockInfo, N.NVML_CLOCK_SM)
    temp = None if "temp" in skip else q("temp", N.nvmlDeviceGetTemperature,
                                         N.NVML_TEMPERATURE_GPU)
    events = q("clocks_event", N.nvmlDeviceGetCurrentClocksEventReasons)
    energy = None if "energy" in skip else q("energy", N.nvmlDeviceGetTotalEnergyConsumption)
    return dict(mem_used_mib=_scaled(getattr(mem, "used", None), 1048576.0),
                mem_total_mib=_mib(mem.total) if mem is not None else g.mem_total_mib,
                power_w=_scaled(power, 1000.0), sm_clock_mhz=_scaled(clock),
                sm_clock_max_mhz=g.sm_clock_max, temp_c=_scaled(temp),
                clock_events=None if events is None else int(events),
                energy_j=_scaled(energy, 1000.0))


def _gpm_start(g: _Gpu) -> bool:
    """Whether GPU ``g`` has GPM (asked once); its two samples made where it has. A GPU in MIG
    mode (GPM there is per GPU instance), an NVML or nvidia-ml-py without the functions, or a
    GPU the driver says has none (before Hopper, vGPU) is marked unsupported."""
    query = getattr(N, "nvmlGpmQueryDeviceSupport", None)
    support = None if g.mig or query is None else g.query("gpm", query)
    if support is not None and support.isSupportedDevice:
        try:
            g.gpm = nvml_buffers.Gpm([getattr(N, mid) for _, mid in GPM_METRICS])
            return True
        except (N.NVMLError, AttributeError):
            pass
    g.unsupported.add("gpm")
    return False


def _call_name(fn) -> str:
    """The NVML function behind ``fn`` (a pynvml wrapper or an nvml_buffers query)."""
    return getattr(fn, "SYMBOL", None) or getattr(fn, "__name__", None) or "an NVML call"


def _mib(nbytes) -> float:
    return nbytes / 1048576.0


def _proc_mem(procs) -> tuple[tuple[int, float], ...]:
    """(pid, MiB) of the running processes ((pid, bytes) pairs); a process whose memory NVML
    cannot tell (None: NVML_VALUE_NOT_AVAILABLE, as under some containers or on Windows WDDM)
    is left out."""
    mem: dict[int, float] = {}
    for pid, used in procs:
        if used is not None:
            mem[pid] = mem.get(pid, 0.0) + _mib(used)
    return tuple(sorted(mem.items()))


def _extras(g: _Gpu) -> dict[str, Optional[float]]:
    """NvmlSource.extras of one GPU."""
    fan = g.query("fan", N.nvmlDeviceGetFanSpeed)
    enc = g.query("encoder", N.nvmlDeviceGetEncoderUtilization)
    dec = g.query("decoder", N.nvmlDeviceGetDecoderUtilization)
    return {"fan.speed": float(fan) if fan is not None else None,
            "utilization.enc": float(enc[0]) if enc else None,
            "utilization.dec": float(dec[0]) if dec else None}


def _decode(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def start_error(exc) -> UserError:
    """nvmlInit's failure as one line that names the reason."""
    for table, cls in ((_NO_DRIVER, NoDriverError), (_CANNOT_START, NvmlStartError)):
        for name, text in table.items():
            if exc.value == getattr(N, name, None):
                return cls(text)
    return NvmlStartError(f"nvmlInit failed: {_decode(exc)} (NVML error {exc.value})")


class NvmlSource:
    """GPU samples from NVML: ``read()`` returns every new sample of every selected GPU.

    What a command does not show is not read: ``process_util`` (per-process SM utilization,
    for the process tables of `watch`, `run` and `status`), ``skip`` (metric names of METRICS
    left out: None in every sample). ``process_every_s``: how often the process list is read
    while the GPU's used memory stays put (PROCESS_EVERY_S; 1 s where CMD's processes are
    looked for, as by `run`)."""
    kind = "nvml"

    def __init__(self, gpus: Optional[Sequence[str]] = None, *, process_util: bool = False,
                 process_every_s: float = PROCESS_EVERY_S, skip: Sequence[str] = ()):
        unknown = set(skip) - set(METRICS)
        if unknown:
            raise ValueError(f"NvmlSource: unknown metric(s) to skip: {sorted(unknown)}")
        self.process_util = process_util
        self.process_every_s = max(float(process_every_s), PROCESS_MIN_S)
        self.skip = frozenset(skip)
        self.selection = list(gpus) if gpus else None
        self.errors: dict[str, int] = {}
        # The first call slower than SLOW_CALL_S: (function, seconds, GPU); see slow_note.
        self.slow: list[tuple[str, float, int]] = []
        self._gpus: Optional[list[_Gpu]] = None
        self.lost: list[int] = []
        self.opened_at = 0.0

    # -- start-up -------------------------------------------------------------------------
    def open(self) -> "NvmlSource":
        if self._gpus is not None:
            return self
        if N is None:
            raise NoDriverError("nvidia-ml-py (module pynvml) is not installed")
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            raise start_error(exc) from None
        except OSError as exc:
            raise NoDriverError(f"libnvidia-ml.so.1 could not be loaded ({exc})") from None
        self.opened_at = time.time()
        gpus = [self._open_gpu(i) for i in range(N.nvmlDeviceGetCount())]
        self._gpus = self._select(gpus)
        self.lost = [g.index for g in self._gpus if g.lost]      # of the selected GPUs
        return self

    def _open_gpu(self, i: int) -> _Gpu:
        """GPU i's handle and identity; a GPU lost meanwhile is kept, marked lost."""
        g = _Gpu(None, i, self.errors, self.slow)
        try:
            g.handle = N.nvmlDeviceGetHandleByIndex(i)
            self._identify(g)
        except GpuLost:
            self._mark_lost(g)
        except N.NVMLError as exc:
            if exc.value != N.NVML_ERROR_GPU_IS_LOST:
                raise UserError(f"GPU {i}: {_decode(exc)}") from None
            self._mark_lost(g)
        return g

    def _select(self, gpus: list[_Gpu]) -> list[_Gpu]:
        if not self.selection:
            return gpus
        chosen = []
        for key in self.selection:
            match = [g for g in gpus if str(g.index) == key or g.uuid == key
                     or (key.startswith("GPU-") and g.uuid.startswith(key))]
            if not match:
                have = ", ".join(str(g.index) for g in gpus if not g.lost) or "none"
                lost = ", ".join(str(g.index) for g in gpus if g.lost)
                have += f"; lost: {lost}" if lost else ""
                raise UserError(f"--gpus: no GPU '{key}' (this machine has: {have})", 2)
            chosen += [g for g in match if g not in chosen]
        return sorted(chosen, key=lambda g: g.index)

    @staticmethod
    def _identify(g: _Gpu) -> None:
        h = g.handle
        g.name = _decode(N.nvmlDeviceGetName(h))
        g.uuid = _decode(N.nvmlDeviceGetUUID(h))
        mem = g.query("memory", N.nvmlDeviceGetMemoryInfo)
        g.mem_total_mib = _mib(mem.total) if mem is not None else None
        clk = g.query("clock_max", N.nvmlDeviceGetMaxClockInfo, N.NVML_CLOCK_SM)
        g.sm_clock_max = float(clk) if clk else None
        try:
            current, _pending = N.nvmlDeviceGetMigMode(h)
            g.mig = current == N.NVML_DEVICE_MIG_ENABLE
        except (N.NVMLError, AttributeError):
            g.mig = False

    @property
    def gpus(self) -> list[_Gpu]:
        return self.open()._gpus  # type: ignore[return-value]

    def gpu_infos(self) -> list[GpuInfo]:
        """Every selected GPU, a lost one included (with what was known of it)."""
        return [self._info(g) for g in self.gpus]

    def _info(self, g: _Gpu) -> GpuInfo:
        pci = limit = None
        if not g.lost:
            try:
                pci = g.query("pci", N.nvmlDeviceGetPciInfo)
                limit = self._power_limit(g, time.monotonic())
                if g.gpm is None and "gpm" not in g.unsupported:
                    _gpm_start(g)       # asked now, so the info says whether it has GPM
            except GpuLost:
                self._mark_lost(g)
        return GpuInfo(index=g.index, name=g.name, uuid=g.uuid,
                       pci_bus_id=_decode(pci.busId) if pci is not None else "",
                       mem_total_mib=g.mem_total_mib, power_limit_w=limit,
                       sm_clock_max_mhz=g.sm_clock_max, mig=g.mig,
                       supported=tuple((m, m not in g.unsupported) for m in METRICS))

    def probe(self) -> None:
        """Ask every metric once, so the support matrix (`gpumon list`) is complete."""
        for g in self.gpus:
            if g.lost:
                continue
            try:
                self._read_gpu(g, time.time(), time.monotonic(), probe=True)
            except GpuLost:
                self._mark_lost(g)

    def versions(self) -> dict[str, str]:
        self.open()
        out = {}
        for key, fn in (("driver", "nvmlSystemGetDriverVersion"),
                        ("nvml", "nvmlSystemGetNVMLVersion")):
            try:
                out[key] = _decode(getattr(N, fn)())
            except N.NVMLError:
                out[key] = "unknown"
        try:
            cuda = N.nvmlSystemGetCudaDriverVersion()
            out["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except N.NVMLError:
            out["cuda"] = "unknown"
        return out

    def slow_note(self, poll_s: Optional[float] = None) -> str:
        """One line on the first slow call ("" while none was), with how long a poll takes
        (``poll_s``) where known."""
        if not self.slow:
            return ""
        name, took, gpu = self.slow[0]
        out = f"NVML is slow: {name} took {took:.2f} s on GPU {gpu}"
        if poll_s is not None:
            out += f"; a poll takes {poll_s:.2f} s, so polls come no faster than that"
        return out

    def extras(self) -> dict[int, dict[str, Optional[float]]]:
        """What gpustat --json shows and the monitor does not read (asked once, for `gpumon
        status`): per GPU its fan speed (%) and video encoder and decoder utilization (%),
        None where unsupported or lost."""
        out = {}
        for g in self.gpus:
            out[g.index] = {"fan.speed": None, "utilization.enc": None,
                            "utilization.dec": None}
            if g.lost:
                continue
            try:
                out[g.index].update(_extras(g))
            except GpuLost:
                self._mark_lost(g)
        return out

    # -- sampling -------------------------------------------------------------------------
    def read(self) -> list[GpuSample]:
        """Every new sample of every selected, not lost GPU, time-ordered per GPU."""
        now, mono = time.time(), time.monotonic()
        out: list[GpuSample] = []
        for g in self.gpus:
            if g.lost:
                continue
            try:
                out += self._read_gpu(g, now, mono)
            except GpuLost:
                self._mark_lost(g)
        return out

    def _mark_lost(self, g: _Gpu) -> None:
        g.lost = True
        if g.index not in self.lost:
            self.lost.append(g.index)

    def _power_limit(self, g: _Gpu, mono: float) -> Optional[float]:
        if mono - g.power_limit_at >= POWER_LIMIT_REFRESH_S:
            mw = g.query("power_limit", N.nvmlDeviceGetEnforcedPowerLimit)
            g.power_limit_w = mw / 1000.0 if mw else None
            g.power_limit_at = mono
        return g.power_limit_w

    def _driver_samples(self, g: _Gpu, mono: float, quiet: bool) -> list[tuple[float, float]]:
        """New samples from the driver's ring. While the tick has nothing else to say without
        one (``quiet``), the ring is asked at most once a driver period: it cannot gain more.
        A sample not asked for now stays in the ring (lastSeen) for the next tick."""
        if quiet and mono - g.samples_asked_at < g.period_s:
            return []
        g.samples_asked_at = mono
        first = g.last_seen_us == 0
        out = self._new_driver_samples(g)
        if first:
            horizon = self.opened_at - HISTORY_BEFORE_OPEN_S
            out = [s for s in out if s[0] >= horizon]
        return out

    def _new_driver_samples(self, g: _Gpu) -> list[tuple[float, float]]:
        """New (wall time, util %) samples from the driver's ring; [] when none is newer."""
        if "samples" in g.unsupported:
            return []
        try:
            got = g.query("samples", g.lists[0], N.NVML_GPU_UTILIZATION_SAMPLES, g.last_seen_us)
        except N.NVMLError:  # NOT_FOUND: nothing newer than last seen (an idle GPU)
            return []
        samples = [s for s in got or () if s[0] > g.last_seen_us]
        if not samples:
            return []
        newest = max(s[0] for s in samples)
        offset = g.clock.offset(newest)
        g.last_seen_us = newest
        return sorted((ts / 1e6 + offset, value) for ts, value in samples)

    def _pcie(self, g: _Gpu, mono: float):
        """PCIe rx/tx MB/s from the cumulative byte counters (one field-values call)."""
        if "pcie" not in g.unsupported:
            vals = g.query("pcie", N.nvmlDeviceGetFieldValues, [_FI_PCIE_RX_BYTES,
                                                                _FI_PCIE_TX_BYTES])
            if vals is not None and vals[0].nvmlReturn == 0 and vals[1].nvmlReturn == 0:
                t = vals[0].timestamp / 1e6 if vals[0].timestamp else mono
                rx, tx = vals[0].value.ullVal, vals[1].value.ullVal
                prev = g.pcie_prev
                g.pcie_prev = (t, rx, tx)
                if prev and t > prev[0] and rx >= prev[1] and tx >= prev[2]:
                    dt = t - prev[0]
                    g.pcie_rates = ((rx - prev[1]) / dt / 1e6, (tx - prev[2]) / dt / 1e6)
                return g.pcie_rates
            if vals is not None:
                g.unsupported.add("pcie")
        # Fallback: the 20 ms throughput window, rarely (KB/s).
        if "pcie_throughput" in g.unsupported or mono - g.pcie_thr_at < PCIE_THROUGHPUT_EVERY_S:
            return g.pcie_rates
        g.pcie_thr_at = mono
        rx = g.query("pcie_throughput", N.nvmlDeviceGetPcieThroughput, N.NVML_PCIE_UTIL_RX_BYTES)
        tx = g.query("pcie_throughput", N.nvmlDeviceGetPcieThroughput, N.NVML_PCIE_UTIL_TX_BYTES)
        g.pcie_rates = (rx / 1000.0 if rx is not None else None,
                        tx / 1000.0 if tx is not None else None)
        return g.pcie_rates

    def _pids(self, g: _Gpu, mono: float, mem_used: Optional[float],
              probe: bool = False) -> Optional[tuple[int, ...]]:
        """The GPU's process list: every ``process_every_s``, or sooner when its used memory
        moved (a process came or went); per-process utilization with it where asked for."""
        moved = (mem_used is not None and g.pids_mem is not None
                 and abs(mem_used - g.pids_mem) > PROCESS_MEM_CHANGE_MIB)
        if (due(mono, g.pids_at, self.process_every_s)
                or (moved and due(mono, g.pids_at, PROCESS_MIN_S))):
            g.pids_at, g.pids_mem = mono, mem_used
            procs = g.query("processes", g.lists[1])
            g.pids = tuple(sorted({pid for pid, _ in procs})) if procs is not None else None
            g.proc_mem = _proc_mem(procs or ())
        if not g.pids:
            g.proc_util = ()
        elif ((self.process_util or probe)
              and due(mono, g.proc_util_at, PROCESS_UTIL_EVERY_S)):
            g.proc_util_at = mono
            self._process_util(g)
        return g.pids

    def _process_util(self, g: _Gpu) -> None:
        """Per-process SM utilization (the process table; several processes sharing a GPU)."""
        try:
            got = g.query("process_util", g.lists[2], g.proc_util_seen)
        except N.NVMLError:
            got = None
        if got:
            g.proc_util_seen = max(ts for _, ts, _ in got)
            latest: dict[int, float] = {}
            for pid, _, sm in sorted(got, key=lambda s: s[1]):
                latest[pid] = sm
            g.proc_util = tuple(sorted(latest.items()))

    def _read_gpu(self, g: _Gpu, now: float, mono: float, probe: bool = False) -> list[GpuSample]:
        quiet = not probe and now - g.last_sample_wall < IDLE_GAP_PERIODS * g.period_s
        samples = self._driver_samples(g, mono, quiet)
        if not samples and quiet:
            return []   # polled faster than the driver samples: nothing new to say yet
        skip = () if probe else self.skip
        rates = g.query("util", N.nvmlDeviceGetUtilizationRates)
        base = _readings(g, skip)
        rx, tx = self._pcie(g, mono) if "pcie" not in skip else (None, None)
        if probe:                      # every list once, for the support matrix
            g.pids_at = g.proc_util_at = -1e9
        pids = self._pids(g, mono, base["mem_used_mib"], probe)
        if "gpm" not in skip:
            base.update(self._gpm(g, mono))
        base.update(gpu=g.index, source="nvml",
                    util_mem_pct=_scaled(getattr(rates, "memory", None)),
                    power_limit_w=self._power_limit(g, mono), pcie_rx_mbps=rx, pcie_tx_mbps=tx,
                    pids=pids, proc_util=g.proc_util, proc_mem=g.proc_mem)
        series = self._with_idle(g, samples, now, rates)
        return [GpuSample(time=t, util_gpu_pct=v, **base) for t, v in series]

    @staticmethod
    def _gpm(g: _Gpu, mono: float) -> dict[str, float]:
        """The GPM values of the latest read, read when GPM_EVERY_S has passed ({} on the first
        read, where GPM is missing, and once it failed: then GPM is off for this GPU, the error
        counted once)."""
        if "gpm" in g.unsupported or (g.gpm is None and not _gpm_start(g)):
            return {}
        if not due(mono, g.gpm_at, GPM_EVERY_S):
            return g.gpm_values
        g.gpm_at = mono
        got = g.query("gpm", g.gpm)
        if got is None:                    # failed (counted in errors) or unsupported now
            g.unsupported.add("gpm")
            g.gpm.free()
            g.gpm, g.gpm_values = None, {}
            return {}
        g.gpm_values = {name: v / 100.0 for (name, _), v in zip(GPM_METRICS, got)
                        if v is not None}
        return g.gpm_values

    @staticmethod
    def _with_idle(g: _Gpu, samples: list[tuple[float, float]], now: float,
                   rates) -> list[tuple[float, Optional[float]]]:
        """The driver's samples with its silent (idle) periods filled in as 0%."""
        if len(samples) > 1:
            step = min(b[0] - a[0] for a, b in zip(samples, samples[1:]))
            if 0.02 <= step <= 1.0:
                g.period_s = step
        period = g.period_s
        gap = IDLE_GAP_PERIODS * period
        rate = float(rates.gpu) if rates is not None else None
        out: list[tuple[float, Optional[float]]] = []
        prev = g.last_sample_wall

        def fill(upto: float) -> None:
            t, n = prev + period, 0
            while t < upto - 0.5 * period and n < MAX_IDLE_FILL:
                out.append((t, 0.0))
                t, n = t + period, n + 1

        for t, v in samples:
            if prev and t - prev > gap:
                fill(t)
            out.append((t, v))
            prev = t
        if now - prev > gap:
            ring = "samples" not in g.unsupported
            if ring and prev and (rate is None or rate == 0):
                fill(now + 0.5 * period)       # idle up to now, on the driver's grid
            else:                              # no ring, or busy with no sample yet
                out.append((now, rate))
        if out:
            g.last_sample_wall = out[-1][0]
        return out

    def close(self) -> None:
        if self._gpus is not None:
            for g in self._gpus:
                if g.gpm is not None:
                    g.gpm.free()
                    g.gpm = None
            try:
                N.nvmlShutdown()
            except Exception:
                pass
            self._gpus = None
