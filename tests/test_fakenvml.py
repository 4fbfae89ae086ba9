"""The fake NVML library (tests/fakenvml/) through the REAL nvidia-ml-py.

Most cases run a short Python snippet in a subprocess whose environment points LD_LIBRARY_PATH at
build/fakenvml, so pynvml's CDLL("libnvidia-ml.so.1") loads the fake exactly as it loads a driver.
The snippet prints one JSON line; the test checks it.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fakenvml_env

SKIP = fakenvml_env.skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason="fake NVML library: %s" % SKIP)

HERE = Path(__file__).resolve().parent
PRELUDE = """\
import ctypes, json, sys, time
import pynvml as N
def out(x):
    print(json.dumps(x))
def err(f, *a):
    try:
        f(*a)
    except N.NVMLError as e:
        return e.value
    return 0
def raw(name, *args):
    N._LoadNvmlLibrary()
    return getattr(N.nvmlLib, name)(*args)
def boot_us():
    return time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6
def epoch_minus_boot_us():
    return (time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_BOOTTIME)) * 1e6
"""
# Square wave of the default timeline (mirrors timeline.c): the samples of one second, by the
# end of their driver period within the second (1/6 s periods), and their utilization.
WAVE_SAMPLES = {1: 100, 2: 100, 3: 40}   # period index (end at k/6 s) -> util %
WAVE_PERIOD_S = 1.0
DRIVER_PERIOD_S = 1.0 / 6


def run_py(code: str, timeout: float = 60, expect_rc: int = 0, **settings):
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          env=fakenvml_env.env(**settings), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    if expect_rc != 0:
        return proc
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    return json.loads(lines[-1])


def phase_index(ts_boot_us: float, offset_us: float) -> float:
    """Which 1/6 s boundary of the wall-clock second a boot-clock timestamp falls on (float)."""
    wall = (ts_boot_us + offset_us) / 1e6
    return (wall % WAVE_PERIOD_S) / DRIVER_PERIOD_S


# ---------------------------------------------------------------- build and symbols

def test_build_is_idempotent_and_sets_soname():
    lib = fakenvml_env.build()
    mtime = lib.stat().st_mtime_ns
    assert fakenvml_env.build() == lib and lib.stat().st_mtime_ns == mtime, "rebuilt although up to date"
    assert (lib.parent / "libnvidia-ml.so").resolve() == lib.resolve()
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not installed")
    dyn = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dyn


def _gen_stubs():
    spec = importlib.util.spec_from_file_location("gen_stubs", HERE / "fakenvml" / "gen_stubs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_exported_symbols_are_exactly_pynvmls_list():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not installed")
    gen = _gen_stubs()
    import pynvml

    wanted = set(gen.pynvml_names(Path(pynvml.__file__).read_text())) | set(gen.LEGACY_EXTRAS)
    assert len(wanted) > 400
    listing = subprocess.run([nm, "-D", "--defined-only", str(fakenvml_env.LIB)], capture_output=True, text=True,
                             check=True).stdout
    exported = {line.split()[-1] for line in listing.splitlines() if line.split()[1] in "TtWw"}
    exported -= {"_init", "_fini"}
    assert exported == wanted, ("missing: %s; extra: %s" % (sorted(wanted - exported)[:10], sorted(exported - wanted)[:10]))
    assert (HERE / "fakenvml" / "symbols.txt").read_text().split() == sorted(wanted)


def test_committed_stubs_match_installed_pynvml():
    proc = subprocess.run([sys.executable, str(HERE / "fakenvml" / "gen_stubs.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- layouts and protocol

def test_struct_sizes_pynvml_expects():
    """The sizes fakenvml.c asserts at compile time are the ones this pynvml uses."""
    import pynvml as N

    assert ctypes.sizeof(N.nvmlPciInfo_t) == 68
    assert ctypes.sizeof(N.c_nvmlMemory_t) == 24
    assert ctypes.sizeof(N.c_nvmlMemory_v2_t) == 40 and N.nvmlMemory_v2 == 0x02000028
    assert ctypes.sizeof(N.c_nvmlSample_t) == 16
    assert ctypes.sizeof(N.c_nvmlProcessInfo_v2_t) == ctypes.sizeof(N.c_nvmlProcessInfo_v3_t) == 24
    assert ctypes.sizeof(N.c_nvmlFieldValue_t) == 40
    assert ctypes.sizeof(N.c_nvmlUtilization_t) == 8
    assert ctypes.sizeof(N.c_nvmlProcessUtilizationSample_t) == 32
    assert ctypes.sizeof(N.c_nvmlProcessesUtilizationInfo_v1_t) == 0x18 == N.ProcessesUtilizationInfo_v1 & 0xFFFFFF
    assert ctypes.sizeof(N.c_nvmlTemperature_v1_t) == 12 and N.nvmlTemperature_v1 == 0x0100000C
    assert ctypes.sizeof(N.c_nvmlUUID_t) == 0x34 == N.nvmlUUID_v1 & 0xFFFFFF
    assert ctypes.sizeof(N.c_nvmlProcessDetailList_v1_t) == 0x18 == N.nvmlProcessDetailList_v1 & 0xFFFFFF


def test_identity_and_layouts_through_pynvml():
    r = run_py("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        pci = N.nvmlDeviceGetPciInfo(h)
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        out(dict(driver=N.nvmlSystemGetDriverVersion(), nvml=N.nvmlSystemGetNVMLVersion(),
                 cuda=N.nvmlSystemGetCudaDriverVersion_v2(), count=N.nvmlDeviceGetCount(),
                 name=N.nvmlDeviceGetName(h), uuid=N.nvmlDeviceGetUUID(h), serial=N.nvmlDeviceGetSerial(h),
                 index=N.nvmlDeviceGetIndex(h), minor=N.nvmlDeviceGetMinorNumber(h),
                 bus=pci.busId, legacy=pci.busIdLegacy, pcibus=pci.bus, devid=pci.pciDeviceId,
                 m1=[m1.total, m1.free, m1.used], m2=[m2.version, m2.total, m2.reserved, m2.free, m2.used],
                 limit=N.nvmlDeviceGetEnforcedPowerLimit(h), pml=N.nvmlDeviceGetPowerManagementLimit(h),
                 cons=N.nvmlDeviceGetPowerManagementLimitConstraints(h),
                 dflt=N.nvmlDeviceGetPowerManagementDefaultLimit(h),
                 smmax=N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM),
                 memmax=N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM),
                 cc=N.nvmlDeviceGetCudaComputeCapability(h), arch=N.nvmlDeviceGetArchitecture(h),
                 brand=N.nvmlDeviceGetBrand(h), mig=N.nvmlDeviceGetMigMode(h),
                 gen=[N.nvmlDeviceGetCurrPcieLinkGeneration(h), N.nvmlDeviceGetMaxPcieLinkGeneration(h)],
                 width=[N.nvmlDeviceGetCurrPcieLinkWidth(h), N.nvmlDeviceGetMaxPcieLinkWidth(h)],
                 by_uuid=N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(N.nvmlDeviceGetUUID(h))),
                 by_bus=N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(b"00000000:02:00.0")),
                 by_uuidv=N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUIDV(N.nvmlDeviceGetUUID(h).encode(),
                                                                            N.NVML_UUID_TYPE_ASCII))))
    """, gpus=2)
    assert r["driver"] == "580.00.fake" and r["nvml"] == "13.580.00" and r["cuda"] == 13000
    assert r["count"] == 2 and r["index"] == 1 and r["minor"] == 1
    assert r["name"] == "NVIDIA H100 80GB HBM3 (fake)"
    assert r["uuid"].startswith("GPU-fake0000-") and r["uuid"].endswith("1") and len(r["uuid"]) == 40
    assert r["bus"] == "00000000:02:00.0" and r["legacy"] == "0000:02:00.0" and r["pcibus"] == 2
    assert r["devid"] == 0x233010DE
    total = 81559 * 2**20
    assert r["m1"][0] == total and r["m1"][1] + r["m1"][2] == total and r["m1"][2] > 0
    assert r["m2"] == [0x02000028, total, 0, r["m1"][1], r["m1"][2]]
    assert r["limit"] == r["pml"] == r["dflt"] == 700000 and r["cons"][1] == 700000 and 0 < r["cons"][0] < 700000
    assert r["smmax"] == 1980 and r["memmax"] > 0
    assert r["cc"] == [9, 0] and r["arch"] == 9 and r["brand"] == 14 and r["mig"] == [0, 0]
    assert r["gen"] == [5, 5] and r["width"] == [16, 16]
    assert r["by_uuid"] == r["by_bus"] == r["by_uuidv"] == 1


def test_version_mismatch_short_buffers_nulls_and_uninitialized():
    r = run_py("""
        from ctypes import byref, c_uint, c_int, create_string_buffer
        before = raw("nvmlDeviceGetCount_v2", byref(c_uint()))
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        m = N.c_nvmlMemory_v2_t(); m.version = 0x01000028
        t = N.c_nvmlTemperature_v1_t(); t.version = 0x0200000C
        buf = create_string_buffer(10)
        exact = create_string_buffer(len(N.nvmlDeviceGetUUID(h)) + 1)
        fv = (N.c_nvmlFieldValue_t * 1)()
        bogus = ctypes.cast(ctypes.c_void_p(12345678), N.c_nvmlDevice_t)
        out(dict(before=before,
                 mem=raw("nvmlDeviceGetMemoryInfo_v2", h, byref(m)),
                 temp=raw("nvmlDeviceGetTemperatureV", h, byref(t)),
                 short=raw("nvmlDeviceGetName", h, buf, c_uint(10)),
                 exact=raw("nvmlDeviceGetUUID", h, exact, c_uint(len(exact))),
                 exact_nul=exact.raw[-1],
                 short_drv=raw("nvmlSystemGetDriverVersion", buf, c_uint(5)),
                 nulls=[raw("nvmlDeviceGetCount_v2", None), raw("nvmlDeviceGetHandleByIndex_v2", 0, None),
                        raw("nvmlDeviceGetPowerUsage", h, None), raw("nvmlDeviceGetMemoryInfo", h, None),
                        raw("nvmlDeviceGetUtilizationRates", h, None), raw("nvmlDeviceGetName", h, None, 64),
                        raw("nvmlDeviceGetSamples", h, 1, ctypes.c_ulonglong(0), None, None, None),
                        raw("nvmlDeviceGetComputeRunningProcesses_v3", h, None, None),
                        raw("nvmlDeviceGetFieldValues", h, 1, None),
                        raw("nvmlDeviceGetPowerUsage", None, byref(c_uint())),
                        raw("nvmlDeviceGetHandleByUUID", None, None)],
                 bogus=raw("nvmlDeviceGetPowerUsage", bogus, byref(c_uint())),
                 stub=raw("nvmlDeviceGetNvLinkState", h, 0, byref(c_uint())),
                 errstr=N.nvmlErrorString(15),
                 after_shutdown=(N.nvmlShutdown(), raw("nvmlDeviceGetPowerUsage", h, byref(c_uint())))[1],
                 shutdown_again=raw("nvmlShutdown")))
    """)
    assert r["before"] == 1                      # NVML_ERROR_UNINITIALIZED
    assert r["mem"] == 25 and r["temp"] == 25     # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert r["short"] == 7 and r["short_drv"] == 7   # NVML_ERROR_INSUFFICIENT_SIZE
    assert r["exact"] == 0 and r["exact_nul"] == 0
    assert r["nulls"] == [2] * len(r["nulls"])   # NVML_ERROR_INVALID_ARGUMENT
    assert r["bogus"] == 2
    assert r["stub"] == 3                         # NVML_ERROR_NOT_SUPPORTED
    assert r["errstr"] == "GPU is lost"
    assert r["after_shutdown"] == 1 and r["shutdown_again"] == 1


@pytest.mark.parametrize("gpus", [0, 1, 8])
def test_device_count(gpus):
    r = run_py("""
        N.nvmlInit()
        n = N.nvmlDeviceGetCount()
        hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        out(dict(n=n, uuids=[N.nvmlDeviceGetUUID(h) for h in hs],
                 buses=[N.nvmlDeviceGetPciInfo(h).busId for h in hs],
                 past_end=err(N.nvmlDeviceGetHandleByIndex, n)))
    """, gpus=gpus)
    assert r["n"] == gpus
    assert len(set(r["uuids"])) == gpus and len(set(r["buses"])) == gpus
    assert r["buses"][:2] == ["00000000:01:00.0", "00000000:02:00.0"][:gpus]
    assert r["past_end"] == 2


def test_default_count_is_one_and_bad_count_fails_init():
    assert run_py("N.nvmlInit(); out(N.nvmlDeviceGetCount())") == 1
    proc = run_py("N.nvmlInit()", expect_rc=1, gpus=-1)
    assert "FAKE_NVML_GPUS" in proc.stderr and "Unknown Error" in proc.stderr


# ---------------------------------------------------------------- the square wave

POLL = """
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    last, seen, polls = 0, [], []
    end = time.monotonic() + DURATION
    while time.monotonic() < end:
        try:
            vt, s = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, last)
            new = [(x.timeStamp, x.sampleValue.uiVal) for x in s]
            polls.append(dict(n=len(new), vt=vt, util=N.nvmlDeviceGetUtilizationRates(h).gpu, wall=time.time()))
            if last:
                seen += new
            last = new[-1][0]
        except N.NVMLError_NotFound:
            polls.append(dict(n=0, notfound=True, util=N.nvmlDeviceGetUtilizationRates(h).gpu,
                              ev=N.nvmlDeviceGetCurrentClocksEventReasons(h)))
        time.sleep(INTERVAL)
    out(dict(seen=seen, polls=polls, boot=boot_us(), off=epoch_minus_boot_us()))
"""


def _check_wave(r, min_seconds):
    seen = r["seen"]
    assert seen, r["polls"]
    ts = [t for t, _ in seen]
    assert ts == sorted(ts) and len(set(ts)) == len(ts), "samples repeat or go back"
    assert all(abs(t - r["boot"]) < 60e6 for t in ts), "timestamps are not on the boot-time clock"
    for t, util in seen:
        k = phase_index(t, r["off"])
        nearest = round(k) % 6
        assert abs(k - round(k)) < 0.01, "sample not on a 1/6 s boundary: %s" % k
        assert WAVE_SAMPLES.get(nearest) == util, (nearest, util)
    # Whole seconds seen: every busy sample present, none idle.
    assert len(seen) >= 3 * min_seconds


def test_square_wave_through_samples_at_100ms_polling():
    r = run_py(POLL.replace("DURATION", "2.3").replace("INTERVAL", "0.1"))
    _check_wave(r, 1)
    idle = [p for p in r["polls"] if p.get("notfound")]
    assert idle, "never NOT_FOUND while idle"
    # Polling faster than the driver's period also meets NOT_FOUND while busy (no sample yet);
    # while idle the rate reads 0% with the GpuIdle clock event.
    assert all(p["ev"] & 0x1 for p in idle if p["util"] == 0), idle
    assert sum(p["util"] == 0 for p in idle) >= 4, "0.6 s idle per second: several idle polls"
    assert all(p["vt"] == 1 for p in r["polls"] if p["n"]), "value type must be unsigned int"
    assert max(p["n"] for p in r["polls"][1:]) <= 3


def test_square_wave_through_samples_at_1s_polling():
    r = run_py(POLL.replace("DURATION", "3.05").replace("INTERVAL", "1.0"))
    _check_wave(r, 2)
    polls = [p for p in r["polls"][1:]]
    assert len(polls) >= 2 and all(2 <= p["n"] <= 4 for p in polls), r["polls"]   # ~ a wave cycle per poll
    # Together they hold every busy sample between the first and the last poll (+-1 at the edges).
    first, last = r["polls"][0]["wall"], polls[-1]["wall"]
    busy_times = [s + k / 6 for s in range(int(first), int(last) + 1) for k in WAVE_SAMPLES]
    expected = sum(1 for t in busy_times if first < t <= last)
    assert abs(sum(p["n"] for p in polls) - expected) <= 1, (expected, r["polls"])


def test_sample_ring_depth_and_null_buffer_count():
    r = run_py("""
        from ctypes import byref, c_uint, c_int, c_ulonglong
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        vt, s = N.nvmlDeviceGetSamples(h, 1, 0)
        n, v = c_uint(0), c_int(-1)
        rc = raw("nvmlDeviceGetSamples", h, 1, c_ulonglong(0), byref(v), byref(n), None)
        newest = s[-1].timeStamp
        out(dict(n=len(s), rc=rc, count=n.value, vt=v.value, oldest_age=(boot_us() - s[0].timeStamp) / 1e6,
                 after_newest=err(N.nvmlDeviceGetSamples, h, 1, newest),
                 mem=[x.sampleValue.uiVal for x in N.nvmlDeviceGetSamples(h, 2, 0)[1]][-3:],
                 other=err(N.nvmlDeviceGetSamples, h, 0, 0)))
    """)
    assert r["n"] == 120 and r["rc"] == 0 and r["count"] in (120, 121) and r["vt"] == 1
    assert 39 < r["oldest_age"] < 41.5, "120 busy samples at 3 per second reach 40 s back"
    assert r["after_newest"] == 6   # NVML_ERROR_NOT_FOUND
    assert all(0 < x <= 100 for x in r["mem"])
    assert r["other"] == 3


def test_counters_rise_with_the_wave():
    r = run_py("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        def read():
            f = N.nvmlDeviceGetFieldValues(h, [197, 198, 186, 83, 9999])
            return dict(t=time.monotonic(), e=N.nvmlDeviceGetTotalEnergyConsumption(h),
                        tx=f[0].value.ullVal, rx=f[1].value.ullVal, inst=f[2].value.uiVal, e_f=f[3].value.ullVal,
                        types=[x.valueType for x in f], rets=[x.nvmlReturn for x in f], ts=f[0].timestamp,
                        avg=N.nvmlDeviceGetPowerUsage(h), rxk=N.nvmlDeviceGetPcieThroughput(h, 1))
        a = read(); time.sleep(1.0); b = read()
        out(dict(a=a, b=b, now=time.time()))
    """)
    a, b = r["a"], r["b"]
    dt = b["t"] - a["t"]
    assert a["rets"] == b["rets"] == [0, 0, 0, 0, 3]
    assert a["types"][:4] == [3, 3, 1, 3]
    assert abs(a["ts"] / 1e6 - r["now"]) < 5, "field timestamps are epoch microseconds"
    watts = (b["e"] - a["e"]) / 1000 / dt
    assert 200 < watts < 370, "energy over ~1 s of the wave averages ~285 W, not %s" % watts
    assert b["e_f"] >= b["e"] - 1000
    assert 0 < b["rx"] - a["rx"] <= 8_000_000 * 1024 * dt * 1.01
    assert 0 < b["tx"] - a["tx"] < b["rx"] - a["rx"]
    assert a["avg"] == b["avg"] == 285000      # the 1 s average of a 1 s periodic wave is flat
    assert 74_900 <= a["inst"] <= 600_100   # 75 W idle .. 600 W busy, within rounding


def test_timeline_is_shared_between_processes():
    code = """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        t0 = time.time()
        s = N.nvmlDeviceGetSamples(h, 1, 0)[1]
        out(dict(wall=[(x.timeStamp + epoch_minus_boot_us()) / 1e6 for x in s[-6:]], t0=t0))
    """
    a, b = run_py(code), run_py(code)
    common = {round(w, 2) for w in a["wall"]} & {round(w, 2) for w in b["wall"]}
    # Started within a second of each other, they share most of their last samples' wall times.
    assert len(common) >= 3, (a, b)


# ---------------------------------------------------------------- knobs

def test_unsupported_metrics_all_gpus_and_one_gpu():
    r = run_py("""
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        def probe(h):
            f = N.nvmlDeviceGetFieldValues(h, [186, 197])
            return dict(power=err(N.nvmlDeviceGetPowerUsage, h), temp=err(N.nvmlDeviceGetTemperature, h, 0),
                        tempv=err(N.nvmlDeviceGetTemperatureV, h, 0), util=err(N.nvmlDeviceGetUtilizationRates, h),
                        samples=err(N.nvmlDeviceGetSamples, h, 1, 0), energy=err(N.nvmlDeviceGetTotalEnergyConsumption, h),
                        pcie=err(N.nvmlDeviceGetPcieThroughput, h, 0), ev=err(N.nvmlDeviceGetCurrentClocksEventReasons, h),
                        procs=err(N.nvmlDeviceGetComputeRunningProcesses, h), fields=[x.nvmlReturn for x in f],
                        mem=err(N.nvmlDeviceGetMemoryInfo, h))
        out([probe(h0), probe(h1)])
    """, gpus=2, unsupported="power,temp,1:samples,1:energy,1:pcie,1:clocks_event,1:processes")
    g0, g1 = r
    assert g0 == dict(power=3, temp=3, tempv=3, util=0, samples=g0["samples"], energy=0, pcie=0, ev=0, procs=0,
                      fields=[3, 0], mem=0)
    assert g0["samples"] in (0, 6)
    assert g1 == dict(power=3, temp=3, tempv=3, util=0, samples=3, energy=3, pcie=3, ev=3, procs=3, fields=[3, 3],
                      mem=0)


def test_bad_unsupported_name_fails_init_with_one_line():
    proc = run_py("N.nvmlInit()", expect_rc=1, unsupported="powr")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("fakenvml:")]
    assert len(lines) == 1 and "powr" in lines[0]


def test_lost_gpu_after_n_seconds():
    r = run_py("""
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        early = [err(N.nvmlDeviceGetPowerUsage, h1), err(N.nvmlDeviceGetName, h1)]
        time.sleep(1.5)
        late = [err(N.nvmlDeviceGetPowerUsage, h1), err(N.nvmlDeviceGetName, h1),
                err(N.nvmlDeviceGetSamples, h1, 1, 0), err(N.nvmlDeviceGetHandleByIndex, 1)]
        out(dict(early=early, late=late, other=err(N.nvmlDeviceGetPowerUsage, h0), count=N.nvmlDeviceGetCount()))
    """, gpus=2, lost={1: 1.0})
    assert r["early"] == [0, 0]
    assert r["late"] == [15, 15, 15, 15]   # NVML_ERROR_GPU_IS_LOST
    assert r["other"] == 0 and r["count"] == 2


def test_pids_reported_as_running_processes():
    me, parent = os.getpid(), os.getppid()
    r = run_py("""
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        p0 = N.nvmlDeviceGetComputeRunningProcesses(h0)
        p0v2 = N.nvmlDeviceGetComputeRunningProcesses_v2(h0)
        from ctypes import byref, c_uint
        n = c_uint(1)
        small = raw("nvmlDeviceGetComputeRunningProcesses_v3", h0, byref(n), (N.c_nvmlProcessInfo_v3_t * 1)())
        out(dict(p0=[(p.pid, p.usedGpuMemory, p.gpuInstanceId) for p in p0], p0v2=[p.pid for p in p0v2],
                 p1=[p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h1)],
                 gfx=N.nvmlDeviceGetGraphicsRunningProcesses(h0), small=[small, n.value],
                 util=sorted(s.pid for s in N.nvmlDeviceGetProcessUtilization(h0, 0)),
                 detail=[p.pid for p in N.nvmlDeviceGetRunningProcessDetailList(h0, N.nvmlProcessDetailList_v1,
                                                                                N.NVML_PROCESS_MODE_COMPUTE)],
                 used=N.nvmlDeviceGetMemoryInfo(h0).used))
    """, gpus=2, pids={0: [me, parent]})
    assert [p[0] for p in r["p0"]] == [me, parent] == r["p0v2"] == r["detail"]
    assert sum(p[1] for p in r["p0"]) == r["used"] and r["p0"][0][2] == 0xFFFFFFFF
    assert r["p1"] == [] and r["gfx"] == []
    assert r["small"] == [7, 2]
    assert r["util"] == sorted([me, parent])


def test_process_utilization_uses_epoch_timestamps():
    r = run_py("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        s = N.nvmlDeviceGetProcessUtilization(h, time.time_ns() // 1000 - 2_000_000)
        out(dict(ts=[x.timeStamp for x in s], sm=[x.smUtil for x in s], now=time.time(),
                 future=err(N.nvmlDeviceGetProcessUtilization, h, time.time_ns() // 1000 + 10_000_000)))
    """, pids={0: [os.getpid()]})
    assert len(r["ts"]) == 1 and 0 < r["now"] - r["ts"][0] / 1e6 < 1.0
    assert r["sm"][0] in (100, 40)
    assert r["future"] == 6


def test_init_error():
    r = run_py("out(err(N.nvmlInit))", init_error="driver_not_loaded")
    assert r == 9
    proc = run_py("N.nvmlInit()", expect_rc=1, init_error="no_such_error")
    assert "no_such_error" in proc.stderr


def test_mig_mode_on_gpu0():
    r = run_py("""
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        out(dict(mig=N.nvmlDeviceGetMigMode(h0), util=err(N.nvmlDeviceGetUtilizationRates, h0),
                 samples=err(N.nvmlDeviceGetSamples, h0, 1, 0), mem=err(N.nvmlDeviceGetMemoryInfo, h0),
                 other=N.nvmlDeviceGetMigMode(h1), other_util=err(N.nvmlDeviceGetUtilizationRates, h1)))
    """, gpus=2, mig=True)
    assert r == dict(mig=[1, 1], util=3, samples=3, mem=0, other=[0, 0], other_util=0)


def test_call_cost_knob():
    code = """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        t = time.perf_counter()
        for _ in range(50):
            N.nvmlDeviceGetPowerUsage(h)
        out((time.perf_counter() - t) / 50)
    """
    assert run_py(code, call_us=2000) >= 0.002
    assert run_py(code) < 0.001


def test_call_cost_per_metric_group():
    code = """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        def cost(f, n):
            t = time.perf_counter()
            for _ in range(n):
                f()
            return (time.perf_counter() - t) / n
        out(dict(procs=cost(lambda: N.nvmlDeviceGetComputeRunningProcesses(h), 10),
                 util=cost(lambda: N.nvmlDeviceGetUtilizationRates(h), 200),
                 mem=cost(lambda: N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2), 200)))
    """
    r = run_py(code, call_us="reported", pids={0: [os.getpid()]})
    assert r["procs"] >= 2 * 4.5e-3          # two driver calls per pynvml call, 4.5 ms each
    assert r["util"] < 1e-3 and 12e-6 <= r["mem"] < 1e-3
    r = run_py(code, call_us="0,processes=1000", pids={0: [os.getpid()]})
    assert 2e-3 <= r["procs"] and r["util"] < 1e-3
    proc = run_py("N.nvmlInit()", expect_rc=1, call_us="0,bogus=5")
    assert "bogus" in proc.stderr


# ---------------------------------------------------------------- trace replay

TRACE_PERIOD_US = 100_000
TRACE_DURATION_US = 1_000_000


def write_trace(path: Path, gpus: int = 2) -> Path:
    """A 1 s trace at 0.1 s periods: GPU 0 busy (util 10*k+5) for k < 5, idle after; GPU 1 always 77%."""
    lines = ["# hand-written test trace",
             "H\tgpumon-trace\t1\t%d\t%d\t%d" % (gpus, TRACE_PERIOD_US, TRACE_DURATION_US)]
    for g in range(gpus):
        lines.append("G\t%d\tTest GPU ü %d\tGPU-trace-%d\t00000000:%02X:00.0\t40960\t400000\t1410\t1593"
                     % (g, g, g, 0x10 + g))
    energy = [0] * gpus
    for k in range(10):
        t = k * TRACE_PERIOD_US
        for g in range(gpus):
            busy = g == 1 or k < 5
            util = 77 if g == 1 else (10 * k + 5 if busy else 0)
            power = 300000 if busy else 60000
            energy[g] += power * TRACE_PERIOD_US // 1_000_000
            pids = "4242,4343" if (g == 0 and busy) else "-"
            lines.append("\t".join(str(x) for x in (
                "S", t, g, util, util // 2, power, 1410 if busy else 210, 60 + g, 0 if busy else 1,
                30000, 1000 * util, 10 * util, energy[g], int(busy), pids)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


TRACE_PROBE = """
    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
    h0 = N.nvmlDeviceGetHandleByIndex(0)
    hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    reads = []
    for _ in range(12):
        pos = (time.time() * 1e6) % 1_000_000
        reads.append(dict(pos=pos, util=N.nvmlDeviceGetUtilizationRates(h0).gpu,
                          pids=sorted(p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h0)),
                          sm=N.nvmlDeviceGetClockInfo(h0, N.NVML_CLOCK_SM),
                          pos_after=(time.time() * 1e6) % 1_000_000))
        time.sleep(0.09)
    s1 = N.nvmlDeviceGetSamples(hs[-1], 1, 0)[1] if n > 1 else []
    s0 = N.nvmlDeviceGetSamples(h0, 1, 0)[1]
    out(dict(n=n, names=[N.nvmlDeviceGetName(h) for h in hs], uuids=[N.nvmlDeviceGetUUID(h) for h in hs],
             bus=[N.nvmlDeviceGetPciInfo(h).busId for h in hs], limit=N.nvmlDeviceGetEnforcedPowerLimit(h0),
             smmax=N.nvmlDeviceGetMaxClockInfo(h0, 1), total=N.nvmlDeviceGetMemoryInfo(h0).total,
             reads=reads, off=epoch_minus_boot_us(),
             s0=[(x.timeStamp, x.sampleValue.uiVal) for x in s0], s1=[x.sampleValue.uiVal for x in s1]))
"""


def _check_trace(r, gpus):
    assert r["n"] == gpus
    assert r["names"] == ["Test GPU ü %d" % g for g in range(gpus)]
    assert r["uuids"] == ["GPU-trace-%d" % g for g in range(gpus)]
    assert r["bus"][0] == "00000000:10:00.0"
    assert r["limit"] == 400000 and r["smmax"] == 1410 and r["total"] == 40960 * 2**20
    for read in r["reads"]:
        k = int(read["pos"] // TRACE_PERIOD_US)     # latest row at or before pos
        if k != int(read["pos_after"] // TRACE_PERIOD_US):
            continue                                 # crossed a row boundary while reading
        busy = k < 5
        assert read["util"] == (10 * k + 5 if busy else 0), read
        assert read["pids"] == ([4242, 4343] if busy else []), read
        assert read["sm"] == (1410 if busy else 210), read
    # The ring holds only active rows, stamped at their rows' times.
    assert r["s0"]
    for ts, util in r["s0"]:
        pos = (ts + r["off"]) % TRACE_DURATION_US
        k = round(pos / TRACE_PERIOD_US) % 10
        assert abs(pos - round(pos / TRACE_PERIOD_US) * TRACE_PERIOD_US) < 3000
        assert k < 5 and util == 10 * k + 5
    if gpus > 1:
        assert len(r["s1"]) == 120 and set(r["s1"]) == {77}


def test_trace_replay_from_a_file(tmp_path):
    trace = write_trace(tmp_path / "two.trace")
    _check_trace(run_py(TRACE_PROBE, scenario=trace), 2)


def test_trace_replay_by_name_with_gpu_subset(tmp_path):
    write_trace(tmp_path / "mini.trace", gpus=3)
    _check_trace(run_py(TRACE_PROBE, scenario="mini", trace_dir=tmp_path, gpus=1), 1)


def test_trace_pids_overridden_by_env(tmp_path):
    trace = write_trace(tmp_path / "two.trace")
    r = run_py("""
        N.nvmlInit()
        out([p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(1))])
    """, scenario=trace, pids={1: [os.getpid()]})
    assert r == [os.getpid()]


@pytest.mark.parametrize("body, needle", [
    (None, "cannot read trace"),
    ("H\tgpumon-trace\t1\t1\t100000\t1000000\nG\t0\tX\tGPU-x\t00000000:01:00.0\t1\t1\t1\t1\n"
     "S\t0\t0\t101\t0\t0\t0\t0\t0\t0\t0\t0\t0\t1\t-\n", "line 3: util_gpu_pct"),
    ("S\t0\t0\n", "line 1: the first record must be the H line"),
    ("H\tgpumon-trace\t1\t2\t100000\t1000000\nG\t0\tX\tGPU-x\t00000000:01:00.0\t1\t1\t1\t1\n"
     "S\t0\t0\t1\t0\t0\t0\t0\t0\t0\t0\t0\t0\t1\t-\n", "gpu 1 has no G line"),
])
def test_bad_or_missing_trace_fails_init_naming_the_file(tmp_path, body, needle):
    trace = tmp_path / "bad.trace"
    if body is not None:
        trace.write_text(body)
    r = run_py("out(err(N.nvmlInit))", scenario=trace)
    assert r == 999
    proc = subprocess.run([sys.executable, "-c", PRELUDE + "err(N.nvmlInit)"], capture_output=True, text=True,
                          env=fakenvml_env.env(scenario=trace))
    lines = [line for line in proc.stderr.splitlines() if line]
    assert len(lines) == 1 and str(trace) in lines[0] and needle in lines[0], lines


def test_missing_scenario_name_looks_next_to_the_library(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PRELUDE + "print(err(N.nvmlInit))"], capture_output=True,
                          text=True, env=fakenvml_env.env(scenario="no_such_scenario_xyz"))
    assert proc.stdout.strip() == "999"
    assert str(fakenvml_env.BUILD_DIR / "traces" / "no_such_scenario_xyz.trace") in proc.stderr


# ---------------------------------------------------------------- in-process preload

def test_preload_in_process():
    """Load the fake into this interpreter (pynvml then uses it) and reconfigure between inits."""
    import pynvml as N

    fakenvml_env.preload()
    old = fakenvml_env.configure(gpus=3)
    try:
        N.nvmlInit()
        try:
            assert N.nvmlDeviceGetCount() == 3
            assert N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(2)).endswith("(fake)")
        finally:
            N.nvmlShutdown()
        fakenvml_env.configure(gpus=5)
        N.nvmlInit()
        try:
            assert N.nvmlDeviceGetCount() == 5
        finally:
            N.nvmlShutdown()
    finally:
        fakenvml_env.restore(old)


# ---------------------------------------------------------------- other tools over the fake

def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if not found:
        pytest.skip("%s is not installed (pip install %s): it is an overhead-benchmark baseline" % (name, name))
    return found


def test_nvitop_once_runs_against_the_fake():
    exe = _tool("nvitop")
    e = fakenvml_env.env(gpus=2, pids={0: [os.getpid()]})
    e["COLUMNS"] = "160"
    proc = subprocess.run([exe, "--once"], env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "580.00.fake" in proc.stdout
    assert proc.stdout.count("00000000:01:00.0") == 1 and proc.stdout.count("00000000:02:00.0") == 1
    assert "700W" in proc.stdout and str(os.getpid()) in proc.stdout


def test_gpustat_runs_against_the_fake():
    exe = _tool("gpustat")
    proc = subprocess.run([exe, "--json"], env=fakenvml_env.env(gpus=2, pids={1: [os.getpid()]}),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert [g["name"] for g in data["gpus"]] == ["NVIDIA H100 80GB HBM3 (fake)"] * 2
    assert data["gpus"][0]["memory.total"] == 81559 and data["gpus"][0]["enforced.power.limit"] == 700
    assert [p["pid"] for p in data["gpus"][1]["processes"]] == [os.getpid()]
    assert data["gpus"][0]["utilization.gpu"] in (0, 40, 100)
    plain = subprocess.run([exe], env=fakenvml_env.env(gpus=2), capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.count("H100 80GB HBM3 (fake)") == 2, plain.stdout + plain.stderr


def test_check_driver_script_confirms_the_fakes_own_assumptions():
    """The real-GPU check script, run against the fake, must agree with every assumption."""
    proc = subprocess.run([sys.executable, str(HERE / "fakenvml" / "check_driver.py"), "--seconds", "6", "--json"],
                          env=fakenvml_env.env(pids={0: [os.getpid()]}), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["results"]
    verdicts = {r["assumption"]: r["verdict"] for r in results if r["verdict"] not in ("REPORTED",)}
    assert verdicts == {1: "CONFIRMED", 2: "CONFIRMED", 3: "CONFIRMED", 4: "CONFIRMED", 5: "CONFIRMED",
                        6: "CONFIRMED", 7: "CONFIRMED"}, results
    assert {r["assumption"] for r in results} >= {8, 9, 10}


def test_check_driver_script_without_a_driver():
    e = fakenvml_env.env(init_error="driver_not_loaded")
    proc = subprocess.run([sys.executable, str(HERE / "fakenvml" / "check_driver.py")], env=e, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no NVIDIA driver" in proc.stderr


def test_every_symbol_survives_null_arguments():
    """Call all exported functions with NULL/zero arguments, bare and with a valid handle: no crash."""
    names = (HERE / "fakenvml" / "symbols.txt").read_text().split()
    r = run_py("""
        names = %r
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        codes = {}
        for name in names:
            if "Init" in name or "Shutdown" in name or name == "nvmlErrorString":
                continue
            fn = getattr(N.nvmlLib, name)
            codes[name] = [fn(None, None, None, None, None, None), fn(h, None, None, None, None, None)]
        out(dict(codes=codes, still=N.nvmlDeviceGetCount(), err=N.nvmlErrorString(123456)))
    """ % names, gpus=2, pids={0: [os.getpid()]})
    assert r["still"] == 2 and r["err"] == "Unknown Error"
    assert len(r["codes"]) > 400
    # Without a handle, device calls are invalid; with one and NULL outputs, they are too.
    assert r["codes"]["nvmlDeviceGetPowerUsage"] == [2, 2]
    assert r["codes"]["nvmlDeviceGetSamples"] == [2, 2]
    # (nvmlGpmMetricsGet reads a device handle as its versioned struct: a version mismatch)
    assert r["codes"]["nvmlGpmMetricsGet"] == [2, 25]
    assert all(c in (0, 2, 3, 6, 7) for name, pair in r["codes"].items() for c in pair
               if name != "nvmlGpmMetricsGet"), r["codes"]
