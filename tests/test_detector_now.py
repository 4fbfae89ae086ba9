"""The live detector judges a second as soon as the tick that completes it arrives."""
from gpumon.detect import Detector
from gpumon.samples import GpuSample, Tick


def _tick(sec: int, util: float) -> Tick:
    """Ten samples per GPU inside second ``sec``, delivered at its end (time sec + 1)."""
    gpus = tuple(GpuSample(time=sec + k / 10 + 0.05, gpu=g, source="replay",
                           util_gpu_pct=util, mem_used_mib=4000.0, power_w=300.0,
                           power_limit_w=400.0)
                 for k in range(10) for g in (0, 1))
    return Tick(time=sec + 1.0, gpus=tuple(sorted(gpus, key=lambda s: (s.gpu, s.time))))


def test_the_second_a_tick_completes_is_judged_at_that_tick():
    det = Detector()
    ends = []
    for sec in range(1000, 1012):
        ds = det.update(_tick(sec, 100.0))
        ends.append(ds[0].end if ds else None)
    # Each tick at sec + 1 brings second sec whole: the verdict's window ends there,
    # not a second earlier (waiting for the next second's first sample).
    assert ends[-1] == 1012.0
    assert ends[-2] == 1011.0


def test_a_tick_with_nothing_new_judges_nothing_twice():
    det = Detector()
    det.update(_tick(1000, 100.0))
    first = det.update(_tick(1001, 100.0))
    again = det.update(Tick(time=1002.0, gpus=()))
    assert again == first


def _stall_tick(sec: int, stalled: bool) -> Tick:
    """GPU 0 saves alone (idle) while GPU 1 spins in the next collective (100% at low power),
    or both compute."""
    def one(g, k):
        if stalled:
            util, power = (0.0, 70.0) if g == 0 else (100.0, 110.0)
        else:
            util, power = 97.0, 320.0
        return GpuSample(time=sec + k / 10 + 0.05, gpu=g, source="replay", util_gpu_pct=util,
                         mem_used_mib=30000.0, power_w=power, power_limit_w=400.0)
    gpus = tuple(one(g, k) for g in (0, 1) for k in range(10))
    return Tick(time=sec + 1.0, gpus=gpus)


def test_a_long_stall_is_over_at_the_first_second_of_work_after_it():
    det = Detector()
    verdicts = {}
    plan = [False] * 30 + [True] * 6 + [False] * 6
    for i, stalled in enumerate(plan):
        ds = det.update(_stall_tick(2000 + i, stalled))
        verdicts[i] = ds[0].verdict if ds else None
    assert verdicts[34] == "sync_stall"
    # The first second every GPU works again (36): the rank's stall is over, said then.
    assert verdicts[36] == "busy"
    assert all(verdicts[i] == "busy" for i in range(36, 42))


def _job_tick(sec: int, on: bool) -> Tick:
    """GPUs 0 and 1 sampled idle without a job, or a job on them computing."""
    gpus = tuple(GpuSample(time=sec + k / 10 + 0.05, gpu=g, source="replay",
                           util_gpu_pct=100.0 if on else 0.0,
                           mem_used_mib=4000.0 if on else 0.0, power_w=300.0 if on else 60.0,
                           power_limit_w=400.0)
                 for g in (0, 1) for k in range(10))
    return Tick(time=sec + 1.0, gpus=gpus)


def test_a_job_that_starts_after_its_gpus_were_sampled_speaks_of_its_own_seconds():
    """The window a verdict speaks of holds the job's seconds only (features.data_run), not
    the seconds its GPUs were sampled before it started."""
    det = Detector()
    for sec in range(3000, 3010):
        det.update(_job_tick(sec, False))
    for sec in range(3010, 3013):
        [d] = det.update(_job_tick(sec, True))
    # (Its first sample, at 3010.05, is dated at its period's middle: in the bin from 3009.)
    assert d.end == 3013.0 and d.start == 3009.0, (d.start, d.end)
