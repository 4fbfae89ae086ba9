"""Command-line conventions (issue 20): short options, dstat's DELAY [COUNT], --once,
`log --format jsonl`, exit codes, completion and man page, lazy imports, --gpus with
--replay, and the two shapes of `analyze --format json`."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon import cli
from gpumon.errors import DRIVER_CODES, EXIT_CODES
from gpumon.samples import GpuSample, HostSample, JobProcs, csv_fields

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "analyze"


def run(cmd, env, **kw):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, **kw)


def jsonl(gpumon_cmd, env, *args):
    r = run(gpumon_cmd + ["log", "-o", "-", "--format", "jsonl", "-q", *args], env)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


# -- -i/-n, DELAY [COUNT], --once ------------------------------------------------------------

def test_delay_and_count_positionals_are_dstat_style(gpumon_cmd, clean_env):
    objs = jsonl(gpumon_cmd, clean_env, "--sim", "busy:2", "0.25", "3")
    assert len(objs) == 3
    times = [o["time"] for o in objs]
    assert [round(b - a, 3) for a, b in zip(times, times[1:])] == [0.25, 0.25]


def test_short_options_and_once(gpumon_cmd, clean_env):
    objs = jsonl(gpumon_cmd, clean_env, "--sim", "busy:1", "-i", "0.5", "-n", "2")
    assert len(objs) == 2 and round(objs[1]["time"] - objs[0]["time"], 3) == 0.5
    assert len(jsonl(gpumon_cmd, clean_env, "--sim", "busy:1", "--once")) == 1
    # --duration and -n together: whichever ends first
    assert len(jsonl(gpumon_cmd, clean_env, "--sim", "busy:1", "-i", "0.1", "-n", "2",
                     "--duration", "5")) == 2


def data_lines(text):
    return [x for x in text.splitlines() if re.match(r"\d\d:\d\d:\d\d\|", x)]


def test_the_default_command_takes_a_delay_and_a_count(gpumon_cmd, clean_env):
    r = run(gpumon_cmd + ["0.2", "3", "--plain", "--sim", "busy:1"], clean_env)
    assert r.returncode == 0, r.stderr
    assert "a line every 0.2 s" in r.stdout and "gpumon watched" in r.stdout
    assert len(data_lines(r.stdout)) == 3


def test_watch_once_is_one_line(gpumon_cmd, clean_env):
    r = run(gpumon_cmd + ["watch", "--once", "--plain", "--sim", "busy:2"], clean_env)
    assert r.returncode == 0, r.stderr
    assert len(data_lines(r.stdout)) == 1 and "gpumon watched" in r.stdout


@pytest.mark.parametrize("argv,says", [
    (["-i", "1", "0.5"], "the interval is given twice"),
    (["0.5", "3", "-n", "2"], "the count is given twice"),
    (["--once", "-n", "2"], "--once cannot be used with a count"),
    (["0.5", "3", "--once"], "--once cannot be used with a count"),
])
def test_a_conflict_is_a_one_line_usage_error(gpumon_cmd, clean_env, tmp_path, argv, says):
    for cmd in (["log", "-o", str(tmp_path / "x.csv")], ["watch", "--plain"]):
        r = run(gpumon_cmd + cmd + ["--sim", "busy:1"] + argv, clean_env)
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert r.stderr.strip().splitlines() == [f"gpumon: {r.stderr.strip()[8:]}"]
        assert says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.csv").exists()


# -- log --format jsonl ------------------------------------------------------------------------

def test_jsonl_fields_are_the_csv_fields_with_verdicts(gpumon_cmd, clean_env):
    objs = jsonl(gpumon_cmd, clean_env, "--sim", "data_starvation:2", "-i", "0.5", "-n", "8")
    assert len(objs) == 8
    for o in objs:
        assert set(o) == {"time", "local", "source", "gpus", "host", "verdicts"}
        assert o["source"] == "sim" and [g["gpu"] for g in o["gpus"]] == [0, 1]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", o["local"])
    gpu_fields = {f.name for f in csv_fields(GpuSample)} - {"time", "gpu", "source"}
    last = objs[-1]
    for g in last["gpus"]:
        assert gpu_fields <= set(g) and g["samples"] == len(g["util_gpu_samples"]) > 0
        assert g["util_gpu_pct"] == pytest.approx(sum(g["util_gpu_samples"]) / g["samples"],
                                                  abs=0.06)
        assert set(g["job"]) == {f.name for f in csv_fields(JobProcs)}
    assert set(last["host"]) == {f.name for f in csv_fields(HostSample)}
    verdicts = [v for o in objs for v in o["verdicts"]]
    assert verdicts and verdicts[-1]["verdict"] == "data_starvation"
    assert set(verdicts[-1]) == {"verdict", "gpus", "cause", "straggler_gpu", "confidence",
                                 "rule", "because", "advice"}
    assert verdicts[-1]["rule"] and verdicts[-1]["because"]


def test_jsonl_to_a_file_refuses_to_overwrite(gpumon_cmd, clean_env, tmp_path):
    out = tmp_path / "run.jsonl"
    args = ["log", "-o", str(out), "--format", "jsonl", "--sim", "busy:1", "-n", "2", "-i",
            "0.1"]
    r = run(gpumon_cmd + args, clean_env)
    assert r.returncode == 0 and "2 lines" in r.stderr, r.stderr
    assert [json.loads(x)["source"] for x in out.read_text().splitlines()] == ["sim", "sim"]
    r = run(gpumon_cmd + args, clean_env)
    assert r.returncode == 1 and "exists" in r.stderr
    r = run(gpumon_cmd + args + ["--append"], clean_env)
    assert r.returncode == 0 and len(out.read_text().splitlines()) == 4


# -- exit codes --------------------------------------------------------------------------------

def test_an_unknown_sim_scenario_is_a_usage_error(gpumon_cmd, clean_env, tmp_path):
    for cmd in (["log", "-o", str(tmp_path / "x.csv")], ["watch", "--plain"]):
        r = run(gpumon_cmd + cmd + ["--sim", "nosuch"], clean_env)
        assert r.returncode == 2, r.stderr
        [line] = r.stderr.strip().splitlines()
        assert line.startswith("gpumon: --sim: unknown sim scenario 'nosuch'")


def test_exit_codes_are_documented_everywhere(gpumon_cmd, clean_env):
    readme = (ROOT / "README.md").read_text()
    helptext = run(gpumon_cmd + ["--help"], clean_env).stdout
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"^\| `?{code}`? \|", readme, re.M), code
        assert re.search(rf"^ +{code}  {re.escape(meaning)}$", helptext, re.M), code
    # `make run` falls back to the simulated demo on exactly the driver codes
    makefile = (ROOT / "Makefile").read_text()
    assert {int(c) for c in re.findall(r"\$\$rc -eq (\d+)", makefile)} == set(DRIVER_CODES)


# -- completion and man page -------------------------------------------------------------------

def test_bash_completion_sources_and_completes(tmp_path):
    pytest.importorskip("shtab")
    from gpumon.commands.completion import script
    path = tmp_path / "gpumon.bash"
    path.write_text(script(cli.build_parser(), "bash"))
    probe = (f"source {path}; complete -p gpumon; "
             "COMP_WORDS=(gpumon an); COMP_CWORD=1; _shtab_gpumon gpumon an gpumon; "
             "echo \"words: ${COMPREPLY[*]}\"; "
             "COMP_WORDS=(gpumon log --for); COMP_CWORD=2; _shtab_gpumon gpumon --for log; "
             "echo \"opts: ${COMPREPLY[*]}\"")
    r = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "complete " in r.stdout and " gpumon" in r.stdout.splitlines()[0]
    assert "words: analyze" in r.stdout and "opts: --format" in r.stdout


@pytest.mark.parametrize("shell, mark", [("zsh", "#compdef gpumon"), ("fish", "complete -c gpumon")])
def test_zsh_and_fish_completion(shell, mark):
    pytest.importorskip("shtab")
    from gpumon.commands.completion import script
    text = script(cli.build_parser(), shell)
    assert mark in text and "analyze" in text and "--interval" in text


def test_completion_is_a_command(capsys):
    pytest.importorskip("shtab")
    assert cli.main(["completion", "bash"]) == 0
    assert "_shtab_gpumon" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["completion", "tcsh"])
    assert e.value.code == 2


def test_man_page_renders(tmp_path):
    pytest.importorskip("argparse_manpage")
    from gpumon.manpage import manpage
    roff = manpage()
    assert roff.startswith(".TH GPUMON \"1\"") and "gpumon log" in roff and "jsonl" in roff
    if shutil.which("man") is None:
        return
    page = tmp_path / "gpumon.1"
    page.write_text(roff)
    r = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=30,
                       env={"MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80",
                            "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "GPUMON(1)" in r.stdout and "--interval" in r.stdout.replace("‐\n", "")


# -- lazy imports and --help -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["nosuch"]])
def test_top_level_imports_no_command_module(clean_env, argv):
    code = ("import sys; from gpumon.cli import main\n"
            "try:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in sys.modules if m.startswith(('gpumon.commands.', 'gpumon.ui',"
            " 'rich', 'http.server', 'gpumon.monitor', 'numpy'))\n"
            "          and m != 'gpumon.commands.helptext']\n"
            "print('HEAVY', heavy)" % argv)
    r = subprocess.run([sys.executable, "-c", code], env=clean_env, capture_output=True,
                       text=True, timeout=60)
    assert "HEAVY []" in r.stdout, r.stdout + r.stderr


def test_light_help_lists_what_the_modules_register():
    assert cli.light_parser().format_help() == cli.build_parser().format_help()


@pytest.mark.parametrize("name", [n for n, h in cli.COMMAND_HELP.items() if h])
def test_every_command_has_examples_and_a_description(name, capsys):
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    out = capsys.readouterr().out
    assert "\nexamples:\n  " in out and f"gpumon {name}" in out.split("examples:")[1]
    description = out.split("\n\n")[1]
    assert not description.startswith(("positional", "options")), out


# -- --gpus with --replay ----------------------------------------------------------------------

def test_replay_honours_gpus(gpumon_cmd, clean_env, tmp_path):
    log = tmp_path / "run.csv"
    r = run(gpumon_cmd + ["log", "-o", str(log), "-q", "--sim", "busy:3", "-i", "0.5", "-n", "5"],
            clean_env)
    assert r.returncode == 0, r.stderr
    r = run(gpumon_cmd + ["watch", "--replay", str(log), "--gpus", "2", "--speed", "50",
                          "--plain"], clean_env)
    assert r.returncode == 0, r.stderr
    assert "|g2 util" in r.stdout and "g0" not in r.stdout and "g1" not in r.stdout
    r = run(gpumon_cmd + ["watch", "--replay", str(log), "--gpus", "7"], clean_env)
    assert r.returncode == 2
    assert r.stderr.strip() == "gpumon: --gpus: no GPU '7' (the log has: 0, 1, 2)"


def test_replay_selection_keeps_only_the_chosen_gpus(tmp_path, clean_env, gpumon_cmd):
    from gpumon.commands.common import SelectGpus
    from gpumon.replay import ReplaySource
    log = tmp_path / "run.csv"
    assert run(gpumon_cmd + ["log", "-o", str(log), "-q", "--sim", "busy:2", "-n", "3", "-i",
                             "0.5"], clean_env).returncode == 0
    src = SelectGpus(ReplaySource(str(log), speed=1000), ["1"], "the log has")
    assert [i.index for i in src.gpu_infos()] == [1] and src.kind == "replay"
    tick = src.read()
    assert tick.gpus and {s.gpu for s in tick.gpus} == {1}
    assert src.name == "run.csv"
    src.close()


# -- analyze --format json: an object for one file, a list for several ---------------------------

def test_analyze_json_shapes(capsys):
    one = str(DATA / "gpumon.csv")
    assert cli.main(["analyze", "--format", "json", one]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict) and doc["file"].endswith("gpumon.csv")
    assert cli.main(["analyze", "--format", "json", one, str(DATA / "plain.csv")]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert isinstance(docs, list) and len(docs) == 2
    assert [set(d) for d in docs] == [set(doc), set(doc)]
    readme = (ROOT / "README.md").read_text()
    assert "one file: a JSON object" in readme and "several files: a JSON list" in readme
