"""Standard output that cannot be written (a full device, closed, a reader gone) ends every
command in one line on stderr and exit 1 (a reader gone: a quiet 0), never a traceback,
including the interpreter's own flush at exit."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOG = str(ROOT / "tests" / "data" / "analyze" / "gpumon.csv")

# Every command that writes standard output, as a user runs it.
WRITERS = {
    "analyze": ["analyze", LOG],
    "analyze json": ["analyze", "--format", "json", LOG],
    "status": ["status", "--sim", "busy:1", "--sample", "0"],
    "status json": ["status", "--json", "--sim", "busy:1", "--sample", "0"],
    "sim params": ["sim", "params"],
    "sim list": ["sim", "list"],
    "sim list json": ["sim", "list", "--json"],
    "plugin path": ["plugin", "path"],
    "completion bash": ["completion", "bash"],
    "watch plain": ["watch", "--plain", "--sim", "busy:1", "--once"],
    "watch": ["watch", "--sim", "busy:1", "--once"],
    "log to stdout": ["log", "-o", "-", "--sim", "busy:1", "--once"],
    "help": ["--help"],
    "a command's help": ["log", "--help"],
}
ON_DEV_FULL = ["analyze", "analyze json", "status", "status json", "sim params", "sim list",
               "sim list json", "plugin path", "completion bash", "watch plain", "help",
               "a command's help"]
ON_CLOSED = ["analyze", "status", "log to stdout", "watch", "sim list", "plugin path"]


def one_line_exit_1(r, says: str) -> None:
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if "cannot write standard output" in x]
    assert len(lines) == 1 and lines[0].startswith("gpumon: ") and says in lines[0], r.stderr


@pytest.mark.parametrize("name", ON_DEV_FULL)
def test_a_full_stdout_is_one_line_and_exit_1(gpumon_cmd, clean_env, tmp_path, name):
    with open("/dev/full", "w") as full:
        r = subprocess.run(gpumon_cmd + WRITERS[name], env=clean_env, cwd=tmp_path,
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    one_line_exit_1(r, "No space left on device")


@pytest.mark.parametrize("name", ON_CLOSED)
def test_a_closed_stdout_is_one_line_and_exit_1(gpumon_cmd, clean_env, tmp_path, name):
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh"] + gpumon_cmd + WRITERS[name],
                       env=clean_env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "cannot write standard output" in r.stderr and len(r.stderr.splitlines()) <= 3


def test_a_closed_stdout_is_no_matter_where_nothing_is_written(gpumon_cmd, clean_env, tmp_path):
    """A log to a file needs no standard output: it runs, and its file is not fd 1."""
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh"] + gpumon_cmd
                       + ["log", "-o", "x.csv", "--sim", "busy:1", "--once"],
                       env=clean_env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.csv").read_text().startswith("time,gpu,")


@pytest.mark.parametrize("name", ["sim list", "sim list json", "analyze", "plugin path",
                                  "completion bash"])
def test_a_reader_gone_is_a_quiet_exit_0(gpumon_cmd, clean_env, tmp_path, name):
    """`gpumon sim list | head -1`: the reader closes its end before gpumon writes."""
    proc = subprocess.Popen(gpumon_cmd + WRITERS[name], env=clean_env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and err == "", err


def test_in_process_main_puts_stdout_back(capsys):
    import sys
    from gpumon.cli import main
    before = sys.stdout
    assert main(["sim", "list", "--json"]) == 0
    assert sys.stdout is before and '"name": "busy"' in capsys.readouterr().out


@pytest.mark.parametrize("redirect", [">&-", "<&-"])
def test_a_closed_standard_descriptor_is_held_before_anything_opens(clean_env, tmp_path,
                                                                     redirect):
    """The entry point's first act opens the stop signals' wake-up pipe: a closed stdin or
    stdout must not lend it its number (it would then be read or written as standard I/O)."""
    code = ("import os, sys\n"
            "from gpumon import __main__ as entry\n"
            "entry._hold_closed_std_fds()\n"
            "entry.interrupts.install()\n"
            "print(os.readlink('/proc/self/fd/0'), os.readlink('/proc/self/fd/1'), "
            "file=sys.stderr)\n")
    import sys
    r = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-c", code],
                       env=clean_env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    fd = 1 if redirect == ">&-" else 0
    assert r.stderr.split()[fd] == "/dev/null", r.stderr


def test_the_man_page_on_a_full_stdout_is_one_line(clean_env, tmp_path):
    pytest.importorskip("argparse_manpage")
    import sys
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "gpumon.manpage"], env=clean_env,
                           cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == ("gpumon.manpage: cannot write standard output: No space left "
                                "on device"), r.stderr
