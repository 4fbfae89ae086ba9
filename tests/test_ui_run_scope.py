"""The screen under `gpumon run`: other jobs' GPUs marked OTHER, a WAITING banner at start-up."""
from gpumon.samples import GpuInfo, GpuSample, Tick
from gpumon.ui.model import Dashboard
from gpumon.ui.screen import render_text


def _frame(judged):
    infos = [GpuInfo(index=i, name="NVIDIA H100", uuid=f"GPU-{i}") for i in range(3)]
    dash = Dashboard(infos, interval=1.0)
    pids = {0: (10,), 1: (500,), 2: ()}
    dash.update(Tick(time=1.0, gpus=tuple(GpuSample(time=1.0, gpu=g, util_gpu_pct=90.0,
                                                    pids=p) for g, p in pids.items()),
                     judged=judged), [])
    lines = render_text(dash.view(), 120, 40).splitlines()
    rows = {int(line.split()[0]): line for line in lines if line[:2].strip().isdigit()}
    return rows, "\n".join(lines)


def test_other_jobs_gpus_are_marked_and_waiting_is_said():
    rows, text = _frame(judged=(0,))
    assert "OTHER" in rows[1] and "OTHER" not in rows[0] and "OTHER" not in rows[2]
    assert "NO VERDICT" in text                         # CMD's GPU, too little data yet
    rows, text = _frame(judged=())
    assert "OTHER" in rows[0] and "OTHER" in rows[1] and "OTHER" not in rows[2]
    assert "WAITING" in text and "waiting for the command to use a GPU" in text
    rows, text = _frame(judged=None)                    # gpumon watch: no marks
    assert not any("OTHER" in r for r in rows.values()) and "WAITING" not in text
