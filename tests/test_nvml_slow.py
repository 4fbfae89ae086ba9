"""Slow NVML (a driver call that takes a large part of a second) is said once, with the call
and its time, over the fake library's real ctypes path."""
import re
import subprocess
import sys

import fakenvml_env


def test_a_slow_call_is_said_once(fakenvml_lib, clean_env):
    env = fakenvml_env.env(base=clean_env, gpus=2, call_us="0,processes=400000")
    proc = subprocess.run([sys.executable, "-m", "gpumon", "log", "-o", "-", "--duration", "2",
                           "--interval", "0.5"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [x for x in proc.stderr.splitlines() if "NVML is slow" in x]
    assert len(said) == 1, proc.stderr
    m = re.fullmatch(r"gpumon: NVML is slow: nvmlDeviceGetComputeRunningProcesses(_v3)? took "
                     r"(\d+\.\d\d) s on GPU 0; a poll takes (\d+\.\d\d) s, so polls come no "
                     r"faster than that", said[0])
    assert m, said[0]
    assert 0.35 <= float(m.group(2)) < 2 and float(m.group(3)) >= float(m.group(2))


def test_a_quick_driver_says_nothing(fakenvml_lib, clean_env):
    env = fakenvml_env.env(base=clean_env, gpus=2)
    proc = subprocess.run([sys.executable, "-m", "gpumon", "status", "--sample", "1"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "NVML is slow" not in proc.stderr, proc.stderr


def test_duration_bounds_the_wall_time_when_polls_are_slow(fakenvml_lib, clean_env):
    """Polls slower than the interval end the run within a poll of duration + interval (it
    ran every poll of the count: 33 s for --duration 6 at -i 0.5)."""
    import time
    env = fakenvml_env.env(base=clean_env, gpus=2, call_us="0,processes=1000000")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gpumon", "watch", "--plain", "-i", "0.5",
                           "--duration", "3"], env=env, capture_output=True, text=True,
                          timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "NVML is slow" in proc.stderr
    # 3 s + 0.5 s, one slow poll (2 GPUs x 1 s) and the start of Python and NVML.
    assert took < 3 + 0.5 + 2.2 + 3, took
