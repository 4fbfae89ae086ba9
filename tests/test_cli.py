"""The command line as users meet it: no driver, bad options, python -m gpumon."""
import ctypes.util
import subprocess

import pytest

REAL_DRIVER = ctypes.util.find_library("nvidia-ml") is not None


def run(cmd, env, **kw):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, **kw)


@pytest.mark.skipif(REAL_DRIVER, reason="this machine has a real NVIDIA driver")
@pytest.mark.parametrize("args", [["list"], ["log", "-o", "x.csv", "--duration", "1"]])
def test_no_driver_is_one_line_and_exit_2(gpumon_cmd, clean_env, tmp_path, args):
    clean_env["LD_LIBRARY_PATH"] = str(tmp_path)     # a folder with no libnvidia-ml.so.1
    r = run(gpumon_cmd + args, clean_env, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no NVIDIA driver" in lines[0] and "--sim" in lines[0]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x.csv").exists()


def test_help_lists_commands(gpumon_cmd, clean_env):
    r = run(gpumon_cmd + ["--help"], clean_env)
    assert r.returncode == 0
    for name in ("log", "list"):
        assert name in r.stdout


def test_bad_interval_is_a_usage_error(gpumon_cmd, clean_env):
    r = run(gpumon_cmd + ["log", "-o", "x.csv", "--interval", "0"], clean_env)
    assert r.returncode == 2 and "must be above 0" in r.stderr and "Traceback" not in r.stderr


def test_version(gpumon_cmd, clean_env):
    r = run(gpumon_cmd + ["--version"], clean_env)
    assert r.returncode == 0 and r.stdout.startswith("gpumon ")
