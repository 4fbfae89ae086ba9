"""`gpumon sim list|params`: the simulated scenarios behind `--sim`, and their parameters."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from gpumon.commands.common import no_color
from gpumon.commands.helptext import help_kwargs
from gpumon.errors import EXIT_USAGE, UserError

# Off a terminal (a pipe, a file) a table row is one line, however long: rich's default 80
# columns folded the descriptions into 25-character pieces.
PIPE_WIDTH = 10000


def register(sub) -> None:
    p = sub.add_parser("sim",
                       description="The simulated training jobs that --sim SCENARIO[:GPUS] "
                       "runs instead of NVML (on watch, log, run and export): `sim list` says "
                       "what each shows and its true verdict, `sim params` its physical "
                       "parameters.", **help_kwargs("sim"))
    p.add_argument("--no-color", action="store_true", help="no colour")
    ss = p.add_subparsers(dest="sim_command", metavar="{list,params}")
    pl = ss.add_parser("list", help="every scenario: what it shows and its true verdict")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.add_argument("--no-color", action="store_true", help="no colour")
    pp = ss.add_parser("params", help="a scenario's physical parameters (defaults, ranges)")
    pp.add_argument("scenario", nargs="?", default="busy", help="scenario (default busy)")
    pp.add_argument("--json", action="store_true", help="machine-readable output")
    pp.add_argument("--no-color", action="store_true", help="no colour")
    p.set_defaults(func=run, sim_command=None, json=False)


def run(args) -> int:
    if args.sim_command == "params":
        return _params(args)
    return _list(args)


def _list(args) -> int:
    from gpumon.sim import SCENARIOS
    if args.json:
        print(json.dumps([{
            "name": s.name, "description": s.description, "verdict": s.verdict,
            "cause": s.cause, "default_gpus": s.default_gpus, "min_gpus": s.min_gpus,
            "straggler": bool(s.names_straggler), "pauses": s.pauses,
            "phases": [list(x) for x in s.phases]} for s in SCENARIOS.values()], indent=2))
        return 0
    console = _console(args)
    table = Table(box=None, pad_edge=False)
    for col in ("scenario", "gpus", "true verdict", "what it shows"):
        table.add_column(col, overflow="fold")
    for s in SCENARIOS.values():
        verdict = s.verdict + (f" ({s.cause})" if s.cause else "")
        if s.names_straggler:
            verdict += ", straggler"
        if s.events == "restarts":
            verdict += "; start-ups paused, gaps idle"
        elif s.pauses:
            verdict += "; pauses are not starvation"
        if s.phases:
            verdict = "per phase"
        gpus = f"{s.default_gpus}" + (f" (min {s.min_gpus})" if s.min_gpus > 1 else "")
        table.add_row(s.name, gpus, verdict, s.description)
    console.print(table)
    console.print("use: gpumon watch --sim NAME[:GPUS]   (GPUS 1..8; --seed N for another run)")
    return 0


def _console(args) -> Console:
    """The terminal's width on a terminal; elsewhere one line per row."""
    return Console(no_color=no_color(args), highlight=False,
                   width=None if sys.stdout.isatty() else PIPE_WIDTH)


def _params(args) -> int:
    from gpumon.sim import PARAMS, scenario_params
    from gpumon.sim.scenarios import scenario
    try:
        spec = scenario(args.scenario)
    except UserError as exc:            # a scenario that is not one: a bad argument
        raise UserError(str(exc), EXIT_USAGE) from None
    values = scenario_params(spec.name)
    rows = []
    for name, (_, rng) in PARAMS.items():
        rng = spec.ranges.get(name, rng)
        rows.append((name, values[name], rng))
    if args.json:
        print(json.dumps({name: {"default": v, "range": list(r) if r else None}
                          for name, v, r in rows}, indent=2, default=str))
        return 0
    console = _console(args)
    table = Table(box=None, pad_edge=False, title=f"{spec.name}: defaults and draw ranges "
                  "(units and reasons: gpumon/sim/params.py)", title_justify="left")
    for col in ("parameter", "default", "range"):
        table.add_column(col, overflow="fold")
    for name, v, r in rows:
        if r is None:
            rtxt = "-"
        elif r[0] == "choice":
            rtxt = " | ".join(dict.fromkeys(str(x) for x in r[1]))
        else:
            rtxt = f"{r[0]:g} .. {r[1]:g}" + (f" ({r[2]})" if len(r) > 2 else "")
        table.add_row(name, "-" if v is None else (f"{v:g}" if isinstance(v, float) else str(v)),
                      rtxt)
    console.print(table)
    return 0
