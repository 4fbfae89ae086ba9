"""Small promises of the commands: --sim names a scenario, `sim` answers scripts (exit 2 for a
scenario that is not one, whole rows in a pipe), `plugin install --copy` says what it copied
where, `make run` says which of driver or GPU is missing."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

from gpumon.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv", [["watch"], ["log", "-o", "x.csv"], ["status"], ["export"],
                                  ["run", "--", "true"]])
@pytest.mark.parametrize("spec", ["", " ", ":2"])
def test_an_empty_sim_is_a_usage_error_not_nvml(capsys, tmp_path, monkeypatch, argv, spec):
    monkeypatch.chdir(tmp_path)
    cut = argv.index("--") if "--" in argv else len(argv)
    with pytest.raises(SystemExit) as exc:
        main(argv[:cut] + ["--sim", spec] + argv[cut:])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert "--sim: name a scenario" in err and "NVIDIA" not in err
    assert list(tmp_path.iterdir()) == []


def test_sim_params_of_no_scenario_is_a_usage_error(capsys):
    assert main(["sim", "params", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpumon: unknown sim scenario 'nosuch'") and len(err.splitlines()) == 1


@pytest.mark.parametrize("columns", ["80", "40"])
def test_sim_list_in_a_pipe_keeps_each_row_on_one_line(capsys, monkeypatch, columns):
    from gpumon.sim import SCENARIOS
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["sim", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for s in SCENARIOS.values():
        row, = [line for line in lines if line.split()[:1] == [s.name]]
        assert s.description in row, (s.name, row)


def test_plugin_install_copy_says_source_then_destination(capsys, tmp_path, monkeypatch):
    from gpumon.commands.plugin import plugin_file
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert main(["plugin", "install", "--copy"]) == 0
    copied = [x for x in capsys.readouterr().out.splitlines() if x.startswith("copied ")]
    assert len(copied) == 2
    for line, dest in zip(copied, (".dstat/dstat_gpumon.py", ".dool/dool_gpumon.py")):
        assert line.startswith(f"copied {plugin_file()} -> {tmp_path / dest}: "), line
    assert main(["plugin", "uninstall"]) == 0


@pytest.mark.parametrize("code,says", [(6, "no NVIDIA GPU here"), (9, "no NVIDIA driver here"),
                                       (12, "no NVIDIA driver here")])
def test_make_run_says_what_is_missing(tmp_path, code, says):
    """`make run` with a gpumon whose `list` exits ``code``: the simulated demo, and why."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "gpumon"
    fake.write_text(f'#!/bin/sh\n[ "$1" = list ] && exit {code}\n'
                    'echo "gpumon $* | $GPUMON_SCREEN_NOTE"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (venv / ".installed").touch()       # (newer than setup.cfg: nothing to install)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    r = subprocess.run(["make", "-s", "-C", str(ROOT), "run", f"VENV={venv}", "ARGS=--once"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == f"make run: {says}, running the SIMULATED demo node (gpumon --sim demo)"
    assert second == f"gpumon --sim demo --once | make run: {says}, running the SIMULATED demo node"


def test_contrib_path_and_list_name_the_fleet_files(capsys):
    assert main(["contrib", "path"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder == ROOT / "contrib" and (folder / "prometheus" / "gpumon-rules.yml").is_file()
    assert main(["contrib", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert [line.split()[0] for line in listed] == [str(p) for p in files]
    assert any(line.endswith("Grafana dashboard (Dashboards, New, Import)") for line in listed)


def test_contrib_without_an_action_is_a_usage_error(capsys):
    assert main(["contrib"]) == 2
    assert capsys.readouterr().err == "gpumon: say what to do: gpumon contrib path | list\n"
