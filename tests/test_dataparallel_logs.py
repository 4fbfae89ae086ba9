"""nn.DataParallel read from an nvidia-smi log (no processes, no host counters): GPU 0
computes longer and hotter (it gathers the outputs and computes the loss), the others run
their share and idle between shares at low power, not spinning. It is a sync_stall whose
straggler is GPU 0, at 1 s and at 200 ms, whichever way the log reads utilization."""
import os

import pytest

from gpumon.analyze import analyze_file, summary


def _segments(tmp_path, gpus: int, interval: float, mode: str, seed: int):
    """The simulator's dataparallel scenario as `nvidia-smi --query-gpu ... -lms` logs it
    (bench.detect.render_nvsmi), read back by analyze: (summary, segments)."""
    from bench.detect import render_nvsmi
    from gpumon.sim import simulate
    ticks = list(simulate("dataparallel", gpus=gpus, seconds=90, seed=seed,
                          interval=interval))
    path = os.path.join(tmp_path, f"dp{gpus}-{interval}-{mode}.csv")
    with open(path, "w") as fh:
        fh.write(render_nvsmi(ticks, mode))
    _, tl = analyze_file(path)
    return summary(tl), tl.segments


@pytest.mark.parametrize("interval", [1.0, 0.2])
@pytest.mark.parametrize("gpus,mode,seed", [(2, "mean", 0), (4, "last", 1), (4, "mean", 2)])
def test_dataparallel_in_an_nvidia_smi_log_is_a_stall_on_gpu0(tmp_path, interval, gpus,
                                                               mode, seed):
    sm, segs = _segments(tmp_path, gpus, interval, mode, seed)
    assert (sm["verdict"], sm["straggler_gpu"]) == ("sync_stall", 0), sm
    assert sm["fractions"].get("sync_stall", 0) >= 0.9, sm
    named = [(d.straggler_gpu, d.cause) for d in segs if d.verdict == "sync_stall"]
    assert named and all(s == 0 and c in ("imbalance", "dataparallel") for s, c in named), named
    assert not [d for d in segs if d.verdict == "data_starvation"]
