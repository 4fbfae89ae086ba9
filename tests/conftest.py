import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


@pytest.fixture
def gpumon_cmd():
    """The gpumon command line, run with this interpreter from the checkout."""
    return [sys.executable, "-m", "gpumon"]


@pytest.fixture
def clean_env():
    """The environment without any fake-NVML knobs or a library path to one."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FAKE_NVML") and k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = str(ROOT)
    env["NO_COLOR"] = "1"
    return env


@pytest.fixture(scope="session")
def fakenvml_lib():
    """The fake libnvidia-ml.so.1 (built on demand); skips with the reason when unusable."""
    import fakenvml_env
    reason = fakenvml_env.skip_reason()
    if reason:
        pytest.skip("fake NVML library: " + reason)
    return fakenvml_env.LIB


@pytest.fixture
def fake_nvml_env(fakenvml_lib, clean_env):
    """fake_nvml_env(gpus=2, pids={0: [pid]}, unsupported="power", lost={1: 1.5}, scenario=...)"""
    import fakenvml_env
    return lambda **kw: fakenvml_env.env(base=clean_env, **kw)


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC, so rendered clocks are the same on every machine."""
    import time
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
