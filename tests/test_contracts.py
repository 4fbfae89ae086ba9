"""Contract tests for every source (after psutil's tests/test_contracts.py): each tick has
readings for every GPU, every field is of its type or None, percentages lie in 0..100, and
time never goes back. The same checks run over NVML (the fake library, in this process, through
the real nvidia-ml-py), the simulator and a replayed log."""
import time
import typing
from dataclasses import fields

import pytest

from gpumon.csvlog import CsvSink
from gpumon.samples import GpuSample, HostSample, JobProcs, Tick

PCT = [f.name for f in fields(GpuSample) if f.metadata.get("unit") == "%" and f.name != "proc_util"]
HOST_PCT = ["cpu_pct", "cpu_max_core_pct", "iowait_pct"]


def _ok(value, annotation) -> bool:
    hint = typing.get_type_hints(GpuSample).get(annotation) if isinstance(annotation, str) else annotation
    if value is None:
        return type(None) in typing.get_args(hint) or hint is type(None)
    base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    origin = [typing.get_origin(b) or b for b in base]
    if float in origin and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, tuple(origin))


def check_ticks(ticks: list[Tick], gpus: list[int], per_tick_min: int = 1) -> None:
    hints = typing.get_type_hints(GpuSample)
    host_hints = typing.get_type_hints(HostSample)
    job_hints = typing.get_type_hints(JobProcs)
    last: dict[int, float] = {}
    for tick in ticks:
        seen = {s.gpu for s in tick.gpus}
        assert seen == set(gpus), (seen, gpus)
        for g in gpus:
            assert sum(1 for s in tick.gpus if s.gpu == g) >= per_tick_min
        for s in tick.gpus:
            for f in fields(GpuSample):
                v = getattr(s, f.name)
                assert _ok(v, hints[f.name]), (f.name, v)
            for name in PCT:
                v = getattr(s, name)
                assert v is None or 0 <= v <= 100, (name, v)
            for name in ("power_w", "mem_used_mib", "sm_clock_mhz", "temp_c", "pcie_rx_mbps",
                         "pcie_tx_mbps", "energy_j"):
                v = getattr(s, name)
                assert v is None or v >= 0, (name, v)
            assert s.time >= last.get(s.gpu, 0), "time went back"
            last[s.gpu] = s.time
        if tick.host is not None:
            for f in fields(HostSample):
                if f.metadata.get("csv", True):
                    assert _ok(getattr(tick.host, f.name), host_hints[f.name]), f.name
            for name in HOST_PCT:
                v = getattr(tick.host, name)
                assert v is None or 0 <= v <= 100, (name, v)
            for job in tick.host.jobs:
                for f in fields(JobProcs):
                    assert _ok(getattr(job, f.name), job_hints[f.name]), f.name


def test_sim_source_contract():
    from gpumon.sim import simulate
    for scenario in ("busy", "data_starvation", "sync_stall", "throttled", "idle"):
        ticks = list(simulate(scenario, gpus=4, seconds=20, seed=3, interval=1.0))
        check_ticks(ticks, [0, 1, 2, 3], per_tick_min=5)
        assert {s.source for t in ticks for s in t.gpus} == {"sim"}


def test_replay_source_contract(tmp_path):
    from gpumon.replay import ReplaySource
    from gpumon.sim import simulate
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    for t in simulate("rank_data_stall", gpus=2, seconds=10, seed=1):
        sink.write(t, [])
    sink.close()
    src = ReplaySource(str(path), speed=1000.0)
    ticks = []
    while not src.done:
        t = src.read()
        if t.gpus:
            ticks.append(t)
    src.close()
    check_ticks(ticks, [0, 1])
    assert {s.source for t in ticks for s in t.gpus} == {"replay"}


def test_nvml_source_contract(fakenvml_lib):
    import fakenvml_env
    fakenvml_env.preload()
    saved = fakenvml_env.configure(gpus=3)
    from gpumon.node import NvmlNode
    node = NvmlNode().open()
    try:
        ticks = []
        for _ in range(4):
            time.sleep(0.5)
            ticks.append(node.read())
        check_ticks(ticks, [0, 1, 2])
        assert {s.source for t in ticks for s in t.gpus} == {"nvml"}
        infos = node.gpu_infos()
        assert [i.index for i in infos] == [0, 1, 2] and all(i.uuid for i in infos)
    finally:
        node.close()
        fakenvml_env.restore(saved)


@pytest.mark.parametrize("value,ok", [(None, True), (1.5, True), (2, True), ("x", False)])
def test_the_checker_itself_can_fail(value, ok):
    assert _ok(value, "power_w") is ok
