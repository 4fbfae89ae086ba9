"""History is kept only by the faces that draw it (`watch`, `run`): `log`, `stream` (the dool
column's child) and `export` keep the Monitor's newest ticks and the detector's own state,
never the screen's sparklines, whatever the length of the run."""
import pytest

import gpumon.interrupts as gi
import gpumon.monitor as gm
from gpumon.cli import main
from gpumon.ui import spark


@pytest.fixture
def unpaced(monkeypatch):
    """The Monitor on a virtual clock (bench.memory's): a simulated run takes no real time."""
    from bench import memory
    monkeypatch.setattr(gm, "time", gm.time)            # (put back after the test)
    monkeypatch.setattr(gm, "threading", gm.threading)
    monkeypatch.setattr(gi, "wait", gi.wait)
    memory._unpace_monitor(memory._VirtualClock())


@pytest.fixture
def recorded(monkeypatch):
    """Every Monitor the commands make, with the most ticks its history held."""
    made = []

    class Recorder(gm.Monitor):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.most = 0
            made.append(self)

        def step(self):
            tick = super().step()
            self.most = max(self.most, len(self.history))
            return tick

    for command in ("log", "stream", "export"):
        monkeypatch.setattr(f"gpumon.commands.{command}.Monitor", Recorder)

    def no_sparkline(self, *a, **k):
        raise AssertionError("a command that draws nothing made a sparkline")
    monkeypatch.setattr(spark.Sparkline, "__init__", no_sparkline)
    return made


@pytest.mark.parametrize("command", ["log", "stream", "export"])
def test_headless_commands_keep_no_history(command, unpaced, recorded, tmp_path, capsys):
    if command == "export":
        pytest.importorskip("prometheus_client")
    extra = {"log": ["-q", "--force", "-o", str(tmp_path / "run.csv")],
             "export": ["-q", "--port", "0"], "stream": []}[command]
    code = main([command, "--sim", "demo:4", "--interval", "0.5", "--duration", "300"] + extra)
    assert code == 0
    (m,) = recorded
    assert m.ticks >= 600                               # 5 simulated minutes were sampled
    assert 1 <= m.most <= gm.HISTORY_TICKS
    if command == "stream":
        assert capsys.readouterr().out.count('"type":"tick"') == m.ticks
