"""The screen's COLD mark from SM activity read through the real ctypes path (the fake NVML
library driven by a simulated hang): GPUs with GPM are cold by it, one without falls back to
power."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import fakenvml_env

SKIP = fakenvml_env.skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason="fake NVML library: %s" % SKIP)

CODE = """
    import json, time
    from gpumon.nvml import NvmlSource
    from gpumon.ui.model import cold_gpus
    s = NvmlSource().open()
    s.read(); time.sleep(1.2)
    got = s.read()
    last = {x.gpu: x for x in got}
    gpus = [(g, x.util_gpu_pct, x) for g, x in sorted(last.items())]
    print(json.dumps({"cold": sorted(cold_gpus(gpus, ())),
                      "sm": {g: x.sm_active_ratio for g, x in last.items()}}))
"""


def _cold(clean_env, trace, **settings) -> dict:
    env = fakenvml_env.env(base=clean_env, scenario=trace, **settings)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CODE)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cold_from_sm_activity_through_nvml(clean_env, tmp_path):
    from gpumon.sim.trace import write_trace
    trace = tmp_path / "hang.trace"
    with open(trace, "w") as f:
        write_trace(f, "hang", gpus=2, seconds=30)
    # Both spin at ~100% utilization and a few percent of their SMs: cold by SM activity.
    out = _cold(clean_env, trace)
    assert out["cold"] == [0, 1], out
    # GPU 1 without GPM: power decides for it, and a hang's ~27% of the limit is a spin.
    out = _cold(clean_env, trace, unsupported={1: ["gpm"]})
    assert out["sm"]["1"] is None and out["cold"] == [0, 1], out

