"""Colours and characters of the dashboard: one place, so --no-color stays readable.

Every colour has a text twin (a letter, a word, a mark), so nothing is said by colour alone.
"""
from __future__ import annotations

from gpumon.diagnosis import (ABBREV, BUSY, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, PAUSED,
                              SYNC_STALL, THROTTLED, VERDICTS)

VERDICT_STYLE = {
    BUSY: "bold green",
    IDLE: "dim",
    PAUSED: "bold cyan",
    DATA_STARVATION: "bold yellow",
    SYNC_STALL: "bold magenta",
    THROTTLED: "bold red",
    INSUFFICIENT_DATA: "dim",
}
# One character per verdict for the strip of past verdicts: the initial of its ABBREV.
STRIP_CHAR = {v: ("-" if ABBREV[v].startswith("-") else ABBREV[v][0]) for v in VERDICTS}
NO_VERDICT = "no verdict"     # the one name of insufficient_data (or no diagnosis) on screen

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-:=+*#"
SPARK_MISSING = " "            # no reading: a gap, never drawn as 0

BOX_UNICODE = ("╭", "╮", "╰", "╯", "─", "│")
BOX_ASCII = ("+", "+", "+", "+", "-", "|")

TITLE = "bold reverse"
LABEL_SIM = "bold black on yellow"
LABEL_SIM_TRUTH = "yellow"
LABEL_REPLAY = "bold black on cyan"
HEADER = "bold"
DIM = "dim"
SPARK = "green"
MARK_COLD = "bold magenta"
MARK_THROTTLE = "bold red"
MARK_LOST = "bold red reverse"
WARN = "yellow"
