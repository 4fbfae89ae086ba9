"""When NVML knows little: a GPU without utilization (MIG, vGPU, the metric unsupported) has
no verdict, never "idle"; a lost GPU leaves its job (never a straggler, never an idle rank).

The status cases run gpumon over the fake NVML library, through nvidia-ml-py's real ctypes
path; the detector cases feed hand-built ticks.
"""
import json
import os
import subprocess
import sys

import pytest

import fakenvml_env
from gpumon.detect import Detector, diagnose
from gpumon.diagnosis import IDLE, INSUFFICIENT_DATA
from gpumon.samples import Tick
from samples_util import gpu_sample, tick

EVERY_METRIC = ("power,temp,samples,util,pcie,energy,clocks_event,processes,clocks,memory,fan,"
                "power_limit,proc_util,fields,pstate,encdec")


def status(fakenvml_lib, clean_env, *args, **knobs):
    env = fakenvml_env.env(base=clean_env, **knobs)
    proc = subprocess.run([sys.executable, "-m", "gpumon", "status", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def status_json(fakenvml_lib, clean_env, **knobs):
    return json.loads(status(fakenvml_lib, clean_env, "--json", **knobs))


def test_mig_gpu_with_a_process_has_no_verdict(fakenvml_lib, clean_env):
    out = status_json(fakenvml_lib, clean_env, mig=True, pids={0: [os.getpid()]})
    assert out["verdict"] is None
    assert "GPU 0 does not report utilization (MIG or vGPU)" in out["verdict_note"]
    assert out["gpus"][0]["processes"], "the process is listed beside the missing verdict"


def test_mig_gpu_text_says_why(fakenvml_lib, clean_env):
    text = status(fakenvml_lib, clean_env, mig=True, pids={0: [os.getpid()]})
    assert "verdict: idle" not in text
    assert "no verdict: GPU 0 does not report utilization" in text


def test_every_metric_unsupported_has_no_verdict(fakenvml_lib, clean_env):
    out = status_json(fakenvml_lib, clean_env, gpus=2, unsupported=EVERY_METRIC)
    assert out["verdict"] is None and out["verdicts"] == []
    assert "GPUs 0,1 do not report utilization" in out["verdict_note"]


def test_lost_gpu_leaves_the_job(fakenvml_lib, clean_env):
    out = status_json(fakenvml_lib, clean_env, gpus=2, lost={1: 1.0})
    assert out["gpus"][1]["lost"]
    v = out["verdict"]
    assert v is not None and v["gpus"] == [0]
    assert v["straggler_gpu"] is None


# -- the detector itself ------------------------------------------------------------------


def blind_tick(t, gpus=1, **kw):
    """A tick whose GPUs report memory and a process but no utilization (MIG)."""
    return Tick(time=t, gpus=tuple(gpu_sample(t - 1 + (k + 1) / 6, g, None, **kw)
                                   for g in range(gpus) for k in range(6)))


@pytest.mark.parametrize("kw", [{}, {"pids": None, "mem_used_mib": None, "power_w": None}])
def test_streaming_no_utilization_is_no_verdict(kw):
    det = Detector()
    for t in range(1000, 1012):
        out = det.update(blind_tick(t, 2, **kw))
    assert [d.verdict for d in out] == [INSUFFICIENT_DATA]
    assert out[0].gpus == (0, 1)
    assert "report no utilization" in out[0].because


def test_streaming_idle_only_where_utilization_is_known():
    det = Detector()
    for t in range(1000, 1012):
        a = blind_tick(t, 1, pids=None, mem_used_mib=None)
        b = tick(t, gpus=2, util=0.0, pids=(), mem_used_mib=0.0)
        out = det.update(Tick(time=t, gpus=a.gpus + tuple(s for s in b.gpus if s.gpu == 1)))
    assert {d.verdict: d.gpus for d in out} == {IDLE: (1,), INSUFFICIENT_DATA: (0,)}


def test_diagnose_no_utilization_is_no_verdict():
    out = diagnose([blind_tick(t, 2, pids=None, mem_used_mib=None) for t in range(1000, 1010)])
    assert [d.verdict for d in out] == [INSUFFICIENT_DATA]


def test_lost_gpu_is_never_in_a_job():
    det = Detector()
    for t in range(1000, 1010):
        det.update(tick(t, gpus=2, util=100.0))
    for t in range(1010, 1014):
        t1 = tick(t, gpus=2, util=100.0)
        out = det.update(Tick(time=t, gpus=tuple(s for s in t1.gpus if s.gpu == 0),
                              host=t1.host, lost=(1,)))
        assert all(d.gpus == (0,) and d.straggler_gpu != 1 for d in out), out
    lost = [tick(t, gpus=2, util=100.0) for t in range(1000, 1004)]
    lost.append(Tick(time=1004, gpus=tuple(s for s in tick(1004, 2).gpus if s.gpu == 0),
                     lost=(1,)))
    assert all(d.gpus == (0,) for d in diagnose(lost))


def test_watch_says_why_there_is_no_verdict(fakenvml_lib, clean_env):
    env = fakenvml_env.env(base=clean_env, mig=True, pids={0: [os.getpid()]})
    proc = subprocess.run([sys.executable, "-m", "gpumon", "watch", "--plain", "--duration",
                           "3"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last.endswith("no verdict (GPU 0 did not report utilization)."), last
