"""`gpumon analyze --plot`: a valid PNG or SVG of a simulated log, and clear one-line errors."""
import subprocess
import sys

import pytest

from gpumon.analyze import analyze_file
from gpumon.plot import binned
from gpumon.csvlog import CsvSink
from gpumon.sim import simulate

import numpy as np


@pytest.fixture(scope="module")
def stall_log(tmp_path_factory):
    """A simulated sync stall (GPU 2 computes longer): 60 s of a gpumon CSV."""
    path = tmp_path_factory.mktemp("plot") / "stall.csv"
    sink = CsvSink(str(path))
    for t in simulate("sync_stall", gpus=4, seconds=60, seed=3):
        sink.write(t, [])
    sink.close()
    return path


def _run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gpumon", "analyze", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_plot_writes_a_valid_image(stall_log, tmp_path, ext):
    pytest.importorskip("matplotlib")
    from gpumon.plot import plot
    log, tl = analyze_file(str(stall_log))
    out = tmp_path / f"run.{ext}"
    plot(log, tl, str(out))
    data = out.read_bytes()
    if ext == "png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 300_000
    else:
        text = data.decode()
        assert text.lstrip().startswith("<?xml") and "<svg" in text and text.rstrip().endswith(
            "</svg>")
        assert "(straggler)" in text and "sync_stall" in text   # the straggler and the verdict


def test_plot_option_end_to_end(stall_log, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run.png"
    r = _run(stall_log, "--plot", out)
    assert r.returncode == 0, r.stderr
    assert "verdict: sync_stall" in r.stdout
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert r.stderr.strip() == f"gpumon: plot written to {out}"


def test_plot_bad_name_or_several_files(stall_log, tmp_path):
    r = _run(stall_log, "--plot", tmp_path / "run.pdf")
    assert r.returncode == 2 and "must end in .png or .svg" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run(stall_log, stall_log, "--plot", tmp_path / "run.png")
    assert r.returncode == 2 and r.stderr.strip() == "gpumon: --plot draws one FILE; give one"


def test_plot_without_matplotlib_says_so_in_one_line(stall_log, tmp_path):
    # A matplotlib that cannot be imported (as when the [plot] extra is not installed).
    code = ("import sys; sys.modules['matplotlib'] = None; from gpumon.cli import main; "
            f"sys.exit(main(['analyze', {str(stall_log)!r}, '--plot', "
            f"{str(tmp_path / 'x.png')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == ("gpumon: --plot needs matplotlib, which is not installed: "
                                "pip install 'gpumon-dl[plot]'")
    assert "verdict:" in r.stdout and not (tmp_path / "x.png").exists()


def test_binned_means_leave_gaps_as_nan():
    t = np.array([0.1, 0.5, 1.2, 3.5])
    y = np.array([10.0, 30.0, np.nan, 50.0])
    x, m = binned(t, y, 0.0, 1.0)
    assert list(x) == [0.5, 1.5, 2.5, 3.5]
    assert m[0] == 20.0 and np.isnan(m[1]) and np.isnan(m[2]) and m[3] == 50.0
