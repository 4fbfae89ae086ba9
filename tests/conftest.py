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
