"""The README documents every CSV column, every command and every verdict."""
from pathlib import Path

from gpumon.cli import COMMANDS
from gpumon.csvlog import COLUMNS
from gpumon.diagnosis import ABBREV, VERDICTS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_csv_column_documented():
    missing = [c for c in COLUMNS if f"| `{c}` |" not in README]
    assert not missing, f"README lacks CSV columns: {missing}"


def test_every_verdict_and_abbreviation_documented():
    for v in VERDICTS:
        assert f"| `{v}` | `{ABBREV[v]}` |" in README, v


def test_every_command_documented():
    for name in COMMANDS:
        assert f"gpumon {name}" in README, name
    assert "make run" in README and "make test" in README
