"""Every usage error of every command and sub-command is one line, `gpumon COMMAND: what (see
gpumon COMMAND --help)`, and exit 2; every number on the command line is bounded, so no value
reaches a timer or a width that cannot hold it."""
import argparse

import pytest

from gpumon.cli import build_parser, main

HUGE_FLOAT, HUGE_INT = "1e308", "9" * 30


def parsers():
    """(argv prefix, parser) for every command and sub-command parser."""
    out, todo = [], [([], build_parser())]
    while todo:
        prefix, parser = todo.pop()
        if prefix:
            out.append((prefix, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(prefix + [name], p) for name, p in action.choices.items()]
    return out


PARSERS = parsers()
NAMES = [" ".join(prefix) for prefix, _ in PARSERS]


# Types that take most text (a GPU list, a file name, a scenario checked when the simulator
# is loaded): none of the values below is refused at parse time.
TEXT_TYPES = ("gpu_list", "_plot_path", "sim_spec")


def typed(parser):
    """Each option or positional whose value is a number or one of a few choices."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.nargs == 0:
            continue
        if action.choices or getattr(action.type, "__name__", "str") not in ("str",) + TEXT_TYPES:
            yield action


def argv_giving(prefix, action, value):
    if action.option_strings:
        return prefix + [action.option_strings[-1], value]
    positionals = [a for a in PARSER_OF[tuple(prefix)]._actions
                   if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    return prefix + ["1"] * positionals.index(action) + [value]   # (DELAY before COUNT)


PARSER_OF = {tuple(prefix): p for prefix, p in PARSERS}


def usage_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "", (argv, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and "usage:" not in err, (argv, err)
    return lines[0]


def test_every_command_and_sub_command_is_walked():
    assert {"log", "watch", "status", "sim", "sim list", "sim params", "plugin install",
            "completion", "analyze", "export"} <= set(NAMES)


@pytest.mark.parametrize("prefix", [p for p, _ in PARSERS], ids=NAMES)
def test_an_unknown_option_is_one_line_naming_the_command(capsys, prefix):
    line = usage_error(capsys, prefix + ["--no-such-option"])
    name = " ".join(["gpumon"] + prefix)
    assert line.startswith(f"{name}: ") and line.endswith(f" (see {name} --help)"), line
    assert "unrecognized arguments: --no-such-option" in line or "are required" in line


def bad_values():
    for prefix, parser in PARSERS:
        for action in typed(parser):
            for value in ("nosuch", HUGE_FLOAT, HUGE_INT, "-1"):
                if action.choices and value in action.choices:
                    continue
                name = action.option_strings[-1] if action.option_strings else action.dest
                yield pytest.param(prefix, action.dest, value, id=f"{' '.join(prefix)} "
                                   f"{name}={value}")


@pytest.mark.parametrize("prefix,dest,value", list(bad_values()))
def test_a_bad_or_unbounded_value_is_one_line(capsys, prefix, dest, value):
    action, = [a for a in PARSER_OF[tuple(prefix)]._actions if a.dest == dest]
    if value == "-1" and action.option_strings and not action.choices:
        value = "-0.5"              # ("-1" alone reads as an option)
    line = usage_error(capsys, argv_giving(prefix, action, value))
    name = " ".join(["gpumon"] + prefix)
    assert line.startswith(f"{name}: ") and line.endswith(f"(see {name} --help)"), line


def test_a_missing_argument_and_an_unknown_sub_command_are_one_line(capsys):
    assert usage_error(capsys, ["log"]).startswith("gpumon log: the following arguments are "
                                                   "required: -o/--output")
    assert "invalid choice: 'nosuch'" in usage_error(capsys, ["sim", "nosuch"])
    assert usage_error(capsys, ["plugin", "install", "--bogus"]).startswith(
        "gpumon plugin install: unrecognized arguments: --bogus")


@pytest.mark.parametrize("argv,says", [
    (["log", "-o", "x.csv", "--duration", "1e308"], "at most 31536000 seconds"),
    (["watch", "--refresh", "1e12"], "between 0.05 and 3600 seconds"),
    (["watch", "--speed", "1e300"], "between 0.01 and 100000"),
    (["status", "--width", HUGE_INT], "10000 or less"),
    (["log", "-o", "x.csv", "-n", HUGE_INT], "9223372036854775807 or less"),
    (["log", "-o", "x.csv", "1", HUGE_INT], "COUNT: must be 9223372036854775807 or less"),
    (["watch", "--seed", HUGE_INT], "--seed: must be 9223372036854775807 or less"),
])
def test_the_bounds_say_what_they_are(capsys, argv, says):
    assert says in usage_error(capsys, argv)
