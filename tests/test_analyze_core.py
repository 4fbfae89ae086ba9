"""`gpumon analyze` on a core install (pandas is an extra): bad cells, no traceback."""
import subprocess
import sys

RUN_WITHOUT_PANDAS = """
import sys
class NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("No module named 'pandas'", name="pandas")
sys.meta_path.insert(0, NoPandas())
from gpumon.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_unreadable_cells_without_pandas(tmp_path, clean_env):
    log = tmp_path / "smi.csv"
    rows = ["timestamp, index, utilization.gpu [%], power.draw [W]"]
    for k in range(30):
        util = "abc" if k == 7 else f"{(95 if k % 3 else 5)} %"
        rows.append(f"2024/05/01 00:00:{k:02d}.000, 0, {util}, {300 if k % 3 else 80}.00 W")
    log.write_text("\n".join(rows) + "\n")
    r = subprocess.run([sys.executable, "-c", RUN_WITHOUT_PANDAS, "analyze", str(log)],
                       capture_output=True, text=True, env=clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "1 malformed line(s) skipped, the first at line 9" in r.stdout


def test_a_held_segments_reason_quotes_the_thresholds_the_log_was_judged_with():
    """A held segment's reason quotes the caller's hold_s, not the default's (a relabelled
    one's: test_analyze_pauses.test_hindsight_reasons_quote_the_thresholds_...)."""
    import dataclasses
    from types import SimpleNamespace
    from gpumon.analyze.timeline import _reason
    from gpumon.diagnosis import CAUSES, VERDICTS, Diagnosis
    from gpumon.detect.thresholds import DEFAULT
    th = dataclasses.replace(DEFAULT, hold_s=7.0)
    ds = [Diagnosis(verdict="busy", rule="duty_high", because="x")]
    key = (VERDICTS.index("data_starvation"), CAUSES.index("input_pipeline"), -1)
    rule, why = _reason(ds, None, key, SimpleNamespace(marks={}), 0, 5, th)
    assert rule == "hold" and "the 7 s a change needs" in why, why
