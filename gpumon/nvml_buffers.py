"""NVML list queries with their arrays kept between calls: one driver call a query, not two.

nvidia-ml-py's wrappers of nvmlDeviceGetSamples, nvmlDeviceGetComputeRunningProcesses and
nvmlDeviceGetProcessUtilization call the driver twice every time: for the size (a NULL array),
then to fill a new array. Here each GPU keeps an array of nvidia-ml-py's own struct type, sized
from the calls before, and calls the C function (from nvidia-ml-py's own library handle) once.
The array grows when the driver says it is short (INSUFFICIENT_SIZE); a sample array the driver
fills to the end is followed by a count of the newer samples (a NULL array) and a read of those
into a longer array, so nothing is cut off.
Answers are copied out as plain tuples, so the array can be reused.

Falling back to the wrappers: a missing symbol or struct type uses the wrapper from the start. A
direct call that fails with anything but an answer about the GPU or NVML (``STATED``: the
wrapper would raise the same) is asked again through the wrapper; when the wrapper answers, that
query of that GPU keeps to the wrapper from then on.

Only gpumon.nvml uses this module; the two are the only ones that import pynvml.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional

try:
    import pynvml as N
except ImportError:  # pragma: no cover - gpumon.nvml reports the missing module
    N = None

# Arrays start this long (entries) and at least double when short. The driver's sample ring
# holds ~120 samples (20 s at 1/6 s), so one array of 128 takes even a first read whole.
SAMPLES_START = 128
# Room left in a grown sample array for the samples that arrive meanwhile.
SAMPLES_HEADROOM = 8
PROCESSES_START = 16
# Growing is retried this often in one query (processes appearing while it runs); then the
# wrapper is asked.
MAX_GROW_TRIES = 3
# The value field of nvmlValue_t by nvmlValueType_t (NVML_VALUE_TYPE_*).
VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                6: "usVal"}


def _stated() -> frozenset:
    """Errors that answer the question (the wrapper would raise the same): raised as they are."""
    names = ("NVML_ERROR_UNINITIALIZED", "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION",
             "NVML_ERROR_NOT_FOUND", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_FUNCTION_NOT_FOUND")
    return frozenset(getattr(N, n) for n in names if N is not None and hasattr(N, n))


STATED = _stated()


class _Unexpected(Exception):
    """A direct call failed in a way the wrapper might not: ask the wrapper."""


def c_function(name: str) -> Optional[Callable]:
    """The C function ``name`` from nvidia-ml-py's library handle; None when it is missing."""
    try:
        return N._nvmlGetFunctionPointer(name)
    except (N.NVMLError, AttributeError):
        return None


class _Query:
    """One list query of one GPU: the C function, its kept array, the wrapper to fall back to."""
    SYMBOL = ""
    STRUCT = ""
    START = 16

    def __init__(self) -> None:
        self.fn = c_function(self.SYMBOL)
        self.struct = getattr(N, self.STRUCT, None)
        self.direct = self.fn is not None and self.struct is not None
        self.size = 0
        self.array = None

    def _grow(self, at_least: int) -> None:
        self.size = max(at_least, 2 * self.size, self.START)
        self.array = (self.struct * self.size)()

    def _check(self, ret: int) -> None:
        if ret in STATED:
            raise N.NVMLError(ret)
        raise _Unexpected(ret)

    def __call__(self, handle, *args):
        if self.direct:
            try:
                return self._direct(handle, *args)
            except (_Unexpected, ctypes.ArgumentError, OSError, TypeError):
                got = self._wrapped(handle, *args)   # raises when the wrapper fails too
                self.direct = False                  # the wrapper works here: keep to it
                return got
        return self._wrapped(handle, *args)

    def _filled(self, call: Callable) -> list:
        """The entries a count-and-array query fills: ``call(count)`` calls the driver with a
        reference to the count (in: the array's length; out: the entries) and ``self.array``;
        the array grows when the driver says it is short."""
        if self.array is None:
            self._grow(self.START)
        count = ctypes.c_uint()
        for _ in range(MAX_GROW_TRIES + 1):
            count.value = self.size
            ret = call(ctypes.byref(count))
            if ret == N.NVML_ERROR_INSUFFICIENT_SIZE:
                self._grow(count.value + PROCESSES_START // 2)
                continue
            if ret != N.NVML_SUCCESS:
                self._check(ret)
            return self.array[:min(count.value, self.size)]
        raise _Unexpected(N.NVML_ERROR_INSUFFICIENT_SIZE)

    def _direct(self, handle, *args):
        raise NotImplementedError

    def _wrapped(self, handle, *args):
        raise NotImplementedError


class Samples(_Query):
    """nvmlDeviceGetSamples: [(timestamp us, value)] newer than ``last_seen``."""
    SYMBOL = "nvmlDeviceGetSamples"
    STRUCT = "c_nvmlSample_t"
    START = SAMPLES_START

    def _call(self, handle, sample_type: int, last_seen: int, array) -> tuple[int, int, int]:
        """One driver call: (return code, count, value type); a None array asks the count."""
        vtype, count = ctypes.c_uint(), ctypes.c_uint(self.size if array is not None else 0)
        ret = self.fn(handle, ctypes.c_uint(sample_type), ctypes.c_ulonglong(last_seen),
                      ctypes.byref(vtype), ctypes.byref(count), array)
        return ret, count.value, vtype.value

    def _direct(self, handle, sample_type: int, last_seen: int) -> list[tuple[int, float]]:
        if self.array is None:
            self._grow(self.START)
        out: list[tuple[int, float]] = []
        for _ in range(MAX_GROW_TRIES + 1):
            ret, n, vtype = self._call(handle, sample_type, last_seen, self.array)
            if ret == N.NVML_ERROR_INSUFFICIENT_SIZE:
                self._grow(n + SAMPLES_HEADROOM)
                continue
            if ret == N.NVML_ERROR_NOT_FOUND and out:
                return out
            if ret != N.NVML_SUCCESS:
                self._check(ret)
            got = _values(self.array[:min(n, self.size)], vtype)
            out += got
            if len(got) < self.size or not got:
                return out
            # Filled to the end: ask how many are newer, and read them into a longer array.
            last_seen = max(last_seen, max(t for t, _ in got))
            ret, more, _ = self._call(handle, sample_type, last_seen, None)
            if ret != N.NVML_SUCCESS or not more:
                return out
            self._grow(more + SAMPLES_HEADROOM)
        return out

    def _wrapped(self, handle, sample_type: int, last_seen: int) -> list[tuple[int, float]]:
        vtype, samples = N.nvmlDeviceGetSamples(handle, sample_type, last_seen)
        return _values(samples, vtype)


def _values(samples, vtype: int) -> list[tuple[int, float]]:
    """(timestamp, value) of nvmlSample_t structs, the value read as its type says."""
    field = VALUE_FIELDS.get(vtype, "uiVal")
    return [(s.timeStamp, float(getattr(s.sampleValue, field))) for s in samples]


class Processes(_Query):
    """nvmlDeviceGetComputeRunningProcesses(_v3): [(pid, used bytes or None)]."""
    SYMBOL = "nvmlDeviceGetComputeRunningProcesses_v3"
    STRUCT = "c_nvmlProcessInfo_v3_t"
    START = PROCESSES_START

    def _direct(self, handle) -> list[tuple[int, Optional[int]]]:
        na = N.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        return [(p.pid, None if p.usedGpuMemory == na else p.usedGpuMemory)
                for p in self._filled(lambda count: self.fn(handle, count, self.array))]

    def _wrapped(self, handle) -> list[tuple[int, Optional[int]]]:
        return [(p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetComputeRunningProcesses(handle)]


class ProcessUtilization(_Query):
    """nvmlDeviceGetProcessUtilization: [(pid, timestamp us, SM util %)] newer than last seen."""
    SYMBOL = "nvmlDeviceGetProcessUtilization"
    STRUCT = "c_nvmlProcessUtilizationSample_t"
    START = PROCESSES_START

    def _direct(self, handle, last_seen: int) -> list[tuple[int, int, float]]:
        seen = ctypes.c_ulonglong(last_seen)
        return [(s.pid, s.timeStamp, float(s.smUtil))
                for s in self._filled(lambda count: self.fn(handle, self.array, count, seen))]

    def _wrapped(self, handle, last_seen: int) -> list[tuple[int, int, float]]:
        return [(s.pid, s.timeStamp, float(s.smUtil))
                for s in N.nvmlDeviceGetProcessUtilization(handle, last_seen)]


class Gpm:
    """GPM (GPU Performance Monitoring) of one GPU: two samples kept and swapped between reads
    and one metrics struct kept, so a read is one nvmlGpmSampleGet and one nvmlGpmMetricsGet.
    A read returns each metric's per cent over the time since the read before (None for a
    metric the driver answers with an error of its own), or [] on the first read (one sample
    alone measures nothing). A failed read raises; the next read starts a pair again."""
    SYMBOL = "nvmlGpmSampleGet"

    def __init__(self, metric_ids) -> None:
        self.samples = [N.nvmlGpmSampleAlloc()]
        self.samples.append(N.nvmlGpmSampleAlloc())
        self.get = N.c_nvmlGpmMetricsGet_t()
        self.get.version = N.NVML_GPM_METRICS_GET_VERSION
        self.get.numMetrics = len(metric_ids)
        for i, mid in enumerate(metric_ids):
            self.get.metrics[i].metricId = mid
        self.paired = False

    def __call__(self, handle) -> list[Optional[float]]:
        prev, cur = self.samples
        self.paired, paired = False, self.paired
        N.nvmlGpmSampleGet(handle, cur)
        self.samples = [cur, prev]
        if not paired:
            self.paired = True
            return []
        self.get.sample1, self.get.sample2 = prev, cur
        N.nvmlGpmMetricsGet(self.get)
        self.paired = True
        return [m.value if m.nvmlReturn == N.NVML_SUCCESS else None
                for m in self.get.metrics[:self.get.numMetrics]]

    def free(self) -> None:
        for s in self.samples:
            try:
                N.nvmlGpmSampleFree(s)
            except N.NVMLError:
                pass
        self.samples = []
