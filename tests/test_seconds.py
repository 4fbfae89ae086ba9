"""The seconds table (detect/seconds.py): each column means what its docstring says, on small
hand-made bins."""
import math

import numpy as np
import pytest

from gpumon.detect.bins import GI
from gpumon.detect.seconds import Second, SecondsTable, seconds
from gpumon.detect.thresholds import DEFAULT
from seconds_util import bins, host, table_of

NAN = math.nan


def test_stopped_dead_and_all_on():
    t = table_of([[0.0, 0.10, 0.9, 0.0, 0.35],
                  [0.0, 0.02, 0.9, 0.2, 0.30]])
    assert t.stopped.tolist() == [True, True, False, False, False]
    assert t.all_on.tolist() == [False, False, True, False, True]
    assert t.at_work.tolist() == [False, False, True, False, False]
    assert t.has.all()
    # Steady work wants every GPU at work_duty, each seen (a GPU long without a sample: no).
    w = table_of([[0.95, 0.72, 0.65, 0.9, NAN, NAN, NAN], [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]])
    assert w.at_work.tolist() == [True, True, False, True, True, True, False]


def test_a_second_the_sampler_skipped_reads_as_the_one_before():
    """A hole of a GPU (or of the whole job) within max_sample_gap_s of its last sample is
    the sampler's jitter or interval: it reads as that sample. A longer hole stays empty: no
    stop, and no GPU away from work."""
    t = table_of([[0.9, NAN, 0.0, NAN, NAN, NAN, NAN],
                  [0.9, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert t.duty[0].tolist()[:4] == [0.9, 0.9, 0.0, 0.0]
    assert t.stopped.tolist() == [False, False, True, True, True, False, False]
    assert t.all_on.tolist() == [True, True, False, False, False, False, False]
    hole = table_of([[0.9, NAN, NAN, 0.9]], n=[6, 0, 0, 6])
    assert hole.has.all() and hole.n.tolist() == [6.0, 6.0, 6.0, 6.0]


def test_a_gap_of_every_gpu_inside_a_busy_second_is_a_stop():
    g, h = bins([[0.8, 0.8], [0.8, 0.8]])
    g[GI["gapn"], :, 1] = 1
    g[GI["gaps"], :, 1] = DEFAULT.stop_gap_s
    t = seconds(g, h)
    assert t.gap_stop.tolist() == [False, True]
    assert t.stopped.tolist() == [False, True]
    g[GI["gaps"], 0, 1] = DEFAULT.stop_gap_s / 2          # one GPU's gap too short
    assert not seconds(g, h).gap_stop[1]


def test_one_rank_alone_at_a_trickle_and_one_rank_idle_beside_work():
    t = table_of([[0.10, 0.0, 0.10, 0.0],
                  [0.00, 0.9, 0.10, 0.0],
                  [0.01, 0.9, 0.00, 0.0]])
    assert t.alone.tolist() == [True, False, False, False]
    assert t.lone_idle.tolist() == [False, True, False, False]


def test_full_is_the_least_busy_gpu_and_zero_where_a_gpu_is_cold():
    duty = [[0.95, 0.95, 0.95], [0.92, 0.92, 0.92], [0.99, 0.99, 0.99]]
    t = table_of(duty)
    assert t.full.tolist() == pytest.approx([0.92] * 3)
    # GPUs 0 and 2 at 60% of GPU 1's power, all busy: cold once the power settled (one
    # second all busy before).
    g, h = bins(duty, power=[[420.0] * 3, [665.0] * 3, [430.0] * 3], limit=700.0)
    t = seconds(g, h)
    assert t.cold[:, 0].tolist() == [False, False, False]
    assert t.cold[:, 1].tolist() == [True, False, True]
    assert t.full.tolist() == pytest.approx([0.92, 0.0, 0.0])
    # Within power_spread of the limit of the hottest: no check fails, none cold.
    g, h = bins(duty, power=[[650.0] * 3, [665.0] * 3, [640.0] * 3], limit=700.0)
    assert not seconds(g, h).cold.any()


def test_every_gpu_is_cold_where_all_spin_at_low_power():
    """Every GPU busy at spin_power_frac of its limit or less (a collective that never
    completes): none is the hottest to compare with, each is cold, from the first second;
    one GPU computing (or one GPU alone) is none."""
    duty = [[1.0] * 3, [1.0] * 3]
    g, h = bins(duty, power=[[120.0] * 3, [110.0] * 3], limit=400.0)
    assert seconds(g, h).cold.all()
    g, h = bins(duty, power=[[120.0, 300.0, 120.0], [110.0] * 3], limit=400.0)
    assert seconds(g, h).cold.tolist() == [[True, False, True], [True, True, True]]
    g, h = bins([[1.0] * 3], power=120.0, limit=400.0)
    assert not seconds(g, h).cold.any()


def test_a_gpu_with_its_clocks_held_down_is_not_cold():
    """GPU 1 draws 60% of GPU 0's power: cold while its clocks run free; not cold with
    thermal clock events in every sample and its SM clock at 60% of its maximum (it computes
    slowly); cold again where the clock is near its maximum (routine power-cap bits)."""
    duty = [[1.0] * 4, [1.0] * 4]
    g, h = bins(duty, power=[[300.0] * 4, [180.0] * 4], limit=400.0)
    for k, v in (("clk", 1800.0), ("cmax", 1800.0), ("cn", 1), ("cmaxn", 1), ("en", 6)):
        g[GI[k]] = v
    g[GI["therm"], 1, 2:] = 6
    g[GI["clk"], 1, 2] = 1080.0
    t = seconds(g, h)
    assert t.cold[1].tolist() == [False, True, False, True]
    assert not t.cold[0].any()


def test_spinning_is_below_its_own_working_power_before():
    """Three GPUs at work at 300 W for 10 s; then GPU 2 stops while the others read 100%
    at 150 W (spinning in the all-reduce) or at 290 W (still computing)."""
    busy = [1.0] * 10
    duty = [busy + [1.0, 1.0], busy + [1.0, 1.0], busy + [0.0, 0.0]]
    power = [[300.0] * 10 + [150.0, 290.0], [300.0] * 10 + [150.0, 290.0],
             [300.0] * 10 + [60.0, 60.0]]
    g, h = bins(duty, power=power)
    t = seconds(g, h)
    assert t.spinning.tolist() == [False] * 10 + [True, False]
    assert t.held.tolist() == [False] * 10 + [True, False]
    assert t.lone_idle[10:].all()


def test_starving_per_rank_and_any_rank_storage_and_writing():
    g, h = bins([[0.5] * 4, [0.5] * 4])
    host(g, h, 0, workers=4.0, ld=390.0, gpu=1)        # rank 1's loaders saturated
    host(g, h, 0, workers=4.0, ld=40.0, gpu=0)
    host(g, h, 1, workers=0.0, mc=99.0, gpu=0)          # rank 0 loads in its main process
    host(g, h, 2, io=20.0, rd=30.0)                     # storage feeds the job
    host(g, h, 3, wr=80.0)
    t = seconds(g, h)
    assert t.rank_starving.tolist() == [[False, True, False, False],
                                        [True, False, False, False]]
    assert t.starving.tolist() == [True, True, True, False]
    assert t.writing.tolist() == [False, False, False, True]
    assert t.workers[0] == 4.0 and math.isnan(t.workers[2])


def test_main_busy_loader_age_and_workers():
    g, h = bins([[0.5] * 2, [0.5] * 2])
    host(g, h, 0, workers=2.0, age=30.0, mc=95.0, gpu=0)
    host(g, h, 0, workers=3.0, age=4.0, mc=10.0, gpu=1)
    t = seconds(g, h)
    assert t.main_busy.tolist() == [True, False]
    assert t.workers[0] == 3.0 and t.loader_age[0] == 4.0
    assert math.isnan(t.loader_age[1])


def test_present_and_a_hole_in_the_log_is_as_the_second_before():
    duty = np.full((2, 5), 0.0)
    g, h = bins(duty, n=np.array([1, 1, 0, 1, 0]))
    host(g, h, 1, mem=10.0)                             # memory released
    host(g, h, 3, mem=20000.0)
    t = seconds(g, h)
    assert t.present.tolist() == [True, False, False, True, True]
    assert t.has.all()              # (a one-second hole reads as the second before)


def test_a_gpu_in_use_by_its_process_or_its_memory():
    """holds is per GPU, jobs.in_use: a process on it or its memory held, either where known
    (memory without a visible process: processes in another PID namespace; a process
    before it takes its memory); present is every GPU held."""
    g, h = bins(np.full((2, 4), 0.9))
    for t in range(4):
        host(g, h, t, mem=20000.0)
    g[GI["pid"], :, :], g[GI["pidn"], :, :] = 1.0, 1.0
    g[GI["pid"], 1, 1:] = 0.0                           # GPU 1's process not seen
    g[GI["mem"], 1, 2:] = 10.0                          # ... and then its memory released
    g[GI["mem"], 0, 3], g[GI["pid"], 0, 3] = 10.0, 1.0  # GPU 0: a process, little memory
    t = seconds(g, h)
    assert t.holds.tolist() == [[True, True, True, True], [True, True, False, False]]
    assert t.present.tolist() == [True, True, False, False]


def test_memory_without_a_visible_process_is_the_job_from_its_first_second():
    """Every GPU's memory held, the process lists known and empty (a container whose PIDs
    the monitor cannot see): the GPUs form the job (store_jobs), in use from the first
    second (active_since) and held in every second (holds): one definition, jobs.in_use."""
    from gpumon.detect.bins import SampleCols, log_store
    from gpumon.detect.jobs import active_since, store_jobs
    t = np.repeat(np.arange(10, dtype=float), 2) + 0.5
    s = SampleCols(t, np.tile([0, 1], 10), np.full(20, 100.0), mem=np.full(20, 9000.0),
                   has_pid=np.zeros(20))
    st = log_store(s, None, None, DEFAULT, False)
    g, h = st.view([st.rows[0], st.rows[1]])
    assert store_jobs(st, st.nb, st.nb, {0: (), 1: ()}, {}) == [((0, 1), False)]
    assert active_since(g) == 0
    assert seconds(g, h).present.all()


def test_a_row_holds_python_values_by_name():
    t = table_of([[0.95, 0.0], [0.95, 0.0]],
                 hosts=[(2.0, True, False, True, 5.0, False)] * 2)
    r = t.row(1)
    assert isinstance(r, Second) and r.stopped is True and r.has is True
    assert type(r.full) is float and r.n == 12.0 and r.workers == 2.0
    assert r.starving is True and r.present is True and r.loader_age == 5.0
    assert set(Second._fields) <= set(SecondsTable.describe())


def test_every_column_has_a_unit_and_a_meaning():
    d = SecondsTable.describe()
    assert {"duty", "stopped", "spinning", "cold", "starving", "present", "workers"} <= set(d)
    assert all(unit and meaning for unit, meaning in d.values())
