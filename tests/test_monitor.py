"""The Monitor's own duties: a bounded history, and no verdict once every GPU is lost."""
from dataclasses import replace

from gpumon.diagnosis import Diagnosis
from gpumon.monitor import Monitor
from samples_util import tick


class Ticks:
    """A source of hand-built ticks, one a second; GPUs in ``lost_from`` are lost from then."""
    kind = "sim"

    def __init__(self, gpus=2, lost_from=None):
        self.gpus, self.lost_from, self.t = gpus, lost_from or {}, 1000.0

    def gpu_infos(self):
        return []

    def read(self):
        self.t += 1.0
        lost = tuple(g for g, at in sorted(self.lost_from.items()) if self.t >= at)
        t = tick(self.t, gpus=self.gpus)
        return replace(t, gpus=tuple(s for s in t.gpus if s.gpu not in lost), lost=lost)

    def close(self):
        pass


class Always:
    """A detector that always says the same (as a held verdict would)."""

    def update(self, tick):
        return [Diagnosis(verdict="data_starvation", gpus=(0, 1), cause="input_pipeline")]


def test_history_stays_bounded_over_a_long_run():
    m = Monitor(Ticks(gpus=8))
    for _ in range(3000):
        m.step()
    assert m.latest is not None and m.latest.time == 4000.0
    assert len(m.history) <= 2


def test_every_gpu_lost_drops_the_verdict():
    m = Monitor(Ticks(lost_from={1: 1003.0, 0: 1005.0}), detector=Always())
    said = []
    m.listeners.append(lambda tick, diagnoses: said.append((tick.lost, list(diagnoses))))
    for _ in range(6):
        m.step()
    assert [bool(d) for _, d in said] == [True, True, True, True, False, False]
    assert [lost for lost, _ in said][-1] == (0, 1) and m.every_gpu_lost
    assert m.diagnoses == []
