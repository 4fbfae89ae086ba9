"""Idle, or a job waiting between rare bursts (rules no_kernels / quiet_after_work), and which
GPUs form a job without memory or process columns (jobs.in_use)."""
from __future__ import annotations

from gpumon.analyze import analyze_file, summary
import numpy as np

from gpumon.detect.bins import SampleCols, log_store
from gpumon.detect.jobs import store_jobs
from gpumon.detect.thresholds import DEFAULT


def _log(tmp_path, every: int, interval: int, seconds: int, mem: bool, burst: int = 30):
    """A one-GPU nvidia-smi log at ``interval`` s: one sample at ``burst`` % every ``every``
    seconds (a loader far too slow for the GPU), 0 % otherwise; the memory held throughout
    when ``mem``."""
    head = "timestamp, index, utilization.gpu [%]" + (", memory.used [MiB]" if mem else "")
    rows = [head]
    for k in range(0, seconds, interval):
        u = burst if k % every == 0 else 0
        rows.append(f"2024/05/01 {k // 3600:02d}:{k // 60 % 60:02d}:{k % 60:02d}.000, 0, {u} %"
                    + (", 12000 MiB" if mem else ""))
    p = tmp_path / "slow.csv"
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def test_rare_bursts_of_a_job_holding_memory_are_starvation_not_idle(tmp_path):
    """A job with its memory held whose GPU runs one burst every 30 s (its loader takes 30 s
    a batch) waits for input: data_starvation, by quiet_after_work, not idle (held)."""
    _, tl = analyze_file(_log(tmp_path, every=30, interval=1, seconds=900, mem=True))
    idle = sum(d.end - d.start for d in tl.segments if d.verdict == "idle")
    assert idle < 0.1 * (tl.end - tl.start), [(d.verdict, d.rule, d.end - d.start)
                                              for d in tl.segments]
    assert summary(tl)["verdict"] == "data_starvation"


def test_rare_bursts_in_a_log_without_memory_make_a_job(tmp_path):
    """Without memory or process columns, a GPU whose samples show a kernel now and then (one
    2 s sample in twenty, a 1.5 % mean duty) belongs to a job: the run is starvation, not 'no
    work on the GPUs' for the whole log."""
    _, tl = analyze_file(_log(tmp_path, every=40, interval=2, seconds=1800, mem=False))
    assert tl.jobs, tl.segments
    assert summary(tl)["verdict"] == "data_starvation", summary(tl)


def test_no_kernel_for_a_minute_is_idle(tmp_path):
    """The same job after its last burst: once no sample has shown a kernel for idle_after_s,
    the GPU is idle (held), not still waiting."""
    _, tl = analyze_file(_log(tmp_path, every=10_000, interval=1, seconds=600, mem=True,
                              burst=0))
    assert summary(tl)["verdict"] == "idle", summary(tl)


def test_a_steady_few_percent_with_no_sample_above_the_floor_is_idle(tmp_path):
    """A GPU holding its memory whose every sample reads 6 % (monitoring and launch overhead,
    under idle_util_pct) runs no kernel: idle (held), whatever its mean duty."""
    _, tl = analyze_file(_log(tmp_path, every=1, interval=1, seconds=600, mem=True, burst=6))
    assert summary(tl)["verdict"] == "idle", summary(tl)
    idle = sum(d.end - d.start for d in tl.segments if d.verdict == "idle")
    assert idle > 0.8 * (tl.end - tl.start), [(d.verdict, d.rule, d.end - d.start)
                                              for d in tl.segments]
    said = [d.because for d in tl.segments if d.rule == "no_kernels"]
    assert said and said[0].startswith("no sample of the GPUs above 10% (a kernel) in the "
                                       "last 60 s: they read 6% over the last "), said


def test_a_gpu_is_active_by_the_share_of_samples_with_a_kernel():
    # 3 % of the samples show a kernel, at a 1 % mean duty: active; monitoring noise (every
    # sample at 3 %, none above idle_util_pct) is no kernel.
    def jobs(util):
        t = np.arange(len(util), dtype=float) / 6 + 0.05
        st = log_store(SampleCols(t, np.zeros(len(util), int), np.array(util, float)),
                       None, None, DEFAULT, False)
        return store_jobs(st, st.nb, st.nb, {}, {})
    assert jobs([33.0] * 3 + [0.0] * 97) == [((0,), False)]
    assert jobs([3.0] * 100) == []
    assert jobs([33.0] + [0.0] * 99) == []


def test_live_a_job_bursting_once_every_30_s_waits_it_is_not_idle():
    """Live, the same: after a minute of steady work, one second of kernels every 30 s (the
    memory held, the loaders calm): from 2 minutes on every verdict is data_starvation, none
    idle (held) between the bursts."""
    from collections import Counter

    from gpumon.detect import Detector
    from samples_util import tick
    t0 = 1_000_000.0
    ticks = [tick(t0 + s, gpus=1, util=100.0) for s in range(1, 61)]
    ticks += [tick(t0 + s, gpus=1, util=60.0 if s % 30 == 0 else 0.0) for s in range(61, 400)]
    det = Detector()
    v = {s: det.update(tk)[0].verdict for s, tk in zip(range(1, 400), ticks)}
    assert Counter(v[s] for s in range(120, 400)) == Counter({"data_starvation": 280})


def test_a_model_loaded_then_left_idle_is_idle_not_waiting(tmp_path):
    """A server loads its model (a few seconds at 15 % as its weights are copied in, at the
    start and the end of a 50 s load, the memory rising) and then runs nothing for five minutes, the memory held (h100x8-model-loaded-idle in
    bench/real): the start-up's kernels are no rhythm of work, so after it the GPU is idle
    (held), never data_starvation."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k in range(360):
        mem = 2 if k < 5 else min(16000, 400 * (k - 4))
        u = 15 if 6 <= k <= 10 or 48 <= k <= 55 else 0     # (copies as the weights load)
        rows.append(f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000, 0, {u} %, {mem} MiB")
    p = tmp_path / "loaded.csv"
    p.write_text("\n".join(rows) + "\n")
    _, tl = analyze_file(str(p))
    assert "data_starvation" not in {d.verdict for d in tl.segments}, [
        (d.verdict, d.rule, d.start - tl.start, d.end - tl.start) for d in tl.segments]
    assert summary(tl)["verdict"] == "idle"


def test_gpus_far_apart_are_not_said_to_each_run_the_mean(tmp_path):
    """Without process columns every active GPU of a node is one job: two jobs side by side
    (two GPUs training at 100 %, two decoding at 6 %: h100x8-two-jobs-train-and-decode in
    bench/real) read as one job at their mean, a documented limit. The reason must then not
    say every GPU ran that mean: it gives the range."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k in range(180):
        for g, u in enumerate((6, 6, 100, 100)):
            rows.append(f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000, {g}, {u} %, 20000 MiB")
    p = tmp_path / "two.csv"
    p.write_text("\n".join(rows) + "\n")
    _, tl = analyze_file(str(p))
    low = [d for d in tl.segments if d.rule == "duty_low"]
    assert low and all("on average (6% to 100%)" in d.because for d in low), [
        (d.verdict, d.rule, d.because) for d in tl.segments]


def _bare_ticks(util, interval: int, seconds: int, t0: float = 1_000_000.0):
    """Ticks of one GPU as an nvidia-smi log without memory or process columns gives them
    (h200-eval-one-loader-2s in bench/real): a sample every ``interval`` s, at ``util(k)`` %
    at second k."""
    from gpumon.samples import GpuSample, Tick
    return [Tick(time=t0 + k + interval, gpus=(GpuSample(
        time=t0 + k, gpu=0, source="replay", util_gpu_pct=float(util(k))),))
        for k in range(0, seconds, interval)]


def _every(n: int, until: int = 10 ** 9, after: int = -1):
    """30 % at every ``n``-th second, none from ``until`` to ``after``."""
    return lambda k: 30 if k % n == 0 and not until <= k <= after else 0


def test_live_without_memory_a_job_between_rare_bursts_is_still_a_job():
    """Live, with neither memory nor processes known, a GPU with one burst every 20 s (2 s
    samples) stays in use between bursts, as no_kernels calls a job idle only after a minute
    without a kernel: its verdict is data_starvation, not 'no job' from each burst's end to
    the next (the old reading: idle for 96% of the h200 log)."""
    from collections import Counter

    from gpumon.detect import Detector
    det = Detector()
    seen = Counter()
    for k, tk in enumerate(_bare_ticks(_every(20), interval=2, seconds=600)):
        ds = det.update(tk)
        if k * 2 >= 120:
            seen[ds[0].verdict] += 1
    assert seen == Counter({"data_starvation": 240}), seen


def test_live_without_memory_a_return_after_a_quiet_minute_is_no_start_up():
    """Without memory or processes, a job's first sign is a kernel: its start cannot be seen.
    The same GPU back at its rare bursts after 90 s without one (idle by then) is not a job
    starting, which would read paused (startup) for a minute: never paused."""
    from gpumon.detect import Detector
    det = Detector()
    ticks = _bare_ticks(_every(20, until=201, after=290), interval=2, seconds=600)
    verdicts = {d.verdict for tk in ticks for d in det.update(tk)}
    assert "paused" not in verdicts, verdicts
    assert {"idle", "data_starvation"} <= verdicts, verdicts


def test_no_job_names_its_rule():
    """The idle verdict given where no GPU is in use names its rule and why."""
    from gpumon.detect import Detector
    det = Detector()
    for tk in _bare_ticks(lambda k: 0, interval=1, seconds=30):
        ds = det.update(tk)
    assert (ds[0].verdict, ds[0].rule) == ("idle", "no_job")
    assert "in the last 60 s" in ds[0].because, ds[0].because
