"""`gpumon status` answers people script against: the seconds sampled, the samples a second,
the reason's span, the width, gpustat's JSON fields, nvitop's -1."""
import json
import subprocess
import sys

import pytest

import fakenvml_env


def run(clean_env, *args, env=None):
    proc = subprocess.run([sys.executable, "-m", "gpumon", "status", *args],
                          env=env or clean_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def sim_json(clean_env_module):
    return json.loads(run(clean_env_module, "--sim", "busy", "--json"))


@pytest.fixture(scope="module")
def clean_env_module():
    import os
    from conftest import ROOT
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FAKE_NVML") and k != "LD_LIBRARY_PATH"}
    return dict(env, PYTHONPATH=str(ROOT), NO_COLOR="1")


def test_sampled_s_is_what_was_asked(sim_json):
    assert sim_json["sampled_s"] == 2.0


def test_reason_and_rate_speak_of_the_seconds_sampled(sim_json):
    v = sim_json["verdict"]
    assert "of the last 2 s" in v["because"], v["because"]
    assert v["evidence"]["samples_per_s"] == pytest.approx(6.0, abs=0.5)


def test_gpustat_fields_are_there(sim_json):
    assert "driver_version" in sim_json
    for g in sim_json["gpus"]:
        for key in ("fan.speed", "utilization.enc", "utilization.dec"):
            assert key in g and g[key] is None        # a simulated GPU has none


def test_gpustat_fields_over_nvml(fakenvml_lib, clean_env):
    env = fakenvml_env.env(base=clean_env, gpus=2, unsupported={1: ["fan"]})
    doc = json.loads(run(clean_env, "--json", "--sample", "1", env=env))
    assert doc["driver_version"] == "580.00.fake"
    g0, g1 = doc["gpus"]
    assert isinstance(g0["fan.speed"], int) and g1["fan.speed"] is None
    for g in (g0, g1):
        assert isinstance(g["utilization.enc"], int) and isinstance(g["utilization.dec"], int)


@pytest.mark.parametrize("width", [40, 52, 64, 79])
def test_every_line_fits_the_width(clean_env, width):
    out = run(clean_env, "--sim", "busy:2", "--sample", "1", "--width", str(width))
    lines = out.splitlines()
    assert all(len(x) <= width for x in lines), [x for x in lines if len(x) > width]
    head = next(i for i, x in enumerate(lines) if x.split()[:1] == ["PID"])
    # Every process row's command starts under the header's COMMAND.
    at = lines[head].index("COMMAND")
    for row in lines[head + 1:]:
        assert row[at - 1] == " " and row[at] != " ", (row, lines[head])


def test_gpu_line_shortens_before_leaving_out():
    from gpumon.samples import GpuSample
    from gpumon.ui.model import GpuView
    from gpumon.ui.status import gpu_line
    s = GpuSample(time=0.0, gpu=3, util_gpu_pct=50.0, mem_used_mib=100.0, mem_total_mib=800.0,
                  power_w=100.0, power_limit_w=400.0, temp_c=60.0)
    g = GpuView(index=3, name="NVIDIA A100-SXM4-80GB", sample=s, util=50.0, spark="",
                spark_ascii="")
    wide = gpu_line(g, True, 160)
    assert wide.endswith("60C") and "NVIDIA A100-SXM4-80GB" in wide
    assert gpu_line(g, True, 70).endswith("60C") and len(gpu_line(g, True, 70)) <= 70
    assert "400 W" in gpu_line(g, True, 60) and "60C" not in gpu_line(g, True, 60)
    assert gpu_line(g, True, 40).startswith("[3] NVIDIA A") and len(gpu_line(g, True, 40)) <= 40


def test_gpu_line_sm_activity_beside_utilization():
    from gpumon.samples import GpuSample
    from gpumon.ui.model import GpuView
    from gpumon.ui.status import gpu_line
    s = GpuSample(time=0.0, gpu=0, util_gpu_pct=100.0, mem_used_mib=100.0, mem_total_mib=800.0,
                  power_w=100.0, power_limit_w=400.0, temp_c=60.0)
    g = GpuView(index=0, name="NVIDIA H100 80GB HBM3", sample=s, util=100.0, spark="",
                spark_ascii="", sm_active=0.034)
    assert "| 100% | smact   3% | " in gpu_line(g, True, 120, sm=True)
    assert "smact" not in gpu_line(g, True, 120)                       # no GPU has GPM
    bare = GpuView(index=1, name="NVIDIA A100", sample=s, util=100.0, spark="", spark_ascii="")
    assert "| 100% | smact    - | " in gpu_line(bare, True, 120, sm=True)   # "-", never 0
    narrow = gpu_line(g, True, 60, sm=True)                            # temperature goes first
    assert "smact   3%" in narrow and "60C" not in narrow and len(narrow) <= 60


@pytest.mark.parametrize("flag", ["-1", "--once"])
def test_nvitop_once_is_accepted(clean_env, flag):
    out = run(clean_env, "--sim", "busy:1", "--sample", "1", flag)
    assert "[0] " in out and "verdict: busy" in out
