"""The verdict rules, as named objects in one registry.

A rule is a `Rule`: its name, the verdict it gives, its place in the order (``order``: the
rules are tried from the lowest; numbers leave gaps for new ones), what it means (one line,
the README's rule table), whether a live screen shows it at once (``shows_at_once``: no
hold), how it decides windows (``decide``, over windows.Windows: the first rule that fires
decides a window) and ``because``, its reason built from the numbers it used.

Each family of rules has its module (idle, pause, starve, stall, throttle, busy, held); the
registry is every Rule those modules define, in order. To add a rule, define it in its
family's module with ``@rule(...)`` (or ``Rule(...)`` for one decided elsewhere): nothing
here lists it.

The order, each rule's verdict and when it fires: ``table()`` (the README's rule table).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Iterable, Optional

import numpy as np

from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds
from gpumon.detect.windows import Windows
from gpumon.diagnosis import DATA_STARVATION, VERDICTS


@dataclass(frozen=True, eq=False)
class Rule:
    """One rule. ``because`` takes, for a rule that decides windows, the window as a reason
    reads it (words.Window: features, evidence, straggler and the thresholds judged with);
    for ``no_job`` the thresholds and whether a whole log was read; for ``hold`` the verdict
    and rule that did not last, and the thresholds."""
    name: str
    verdict: str                # "" for hold: it keeps the verdict before
    order: int                  # tried from the lowest; unique
    means: str                  # when it fires, one line; {field} quotes a Thresholds field
    because: Callable[..., str]  # its reason, from the numbers it used
    decide: Optional[Callable[[Windows], None]] = None   # None: decided outside windows
    shows_at_once: bool = False  # a live screen takes its verdict without the hold
    cause: str = ""             # the causes it gives, in words (the README's table)
    family: str = ""            # the module that defines it

    def meaning(self, th: Thresholds) -> str:
        """``means`` with the thresholds ``th`` quoted."""
        return self.means.format(**{x.name: getattr(th, x.name) for x in fields(th)})


def rule(verdict: str, order: int, means: str, because: Callable[..., str],
         shows_at_once: bool = False,
         cause: str = "") -> Callable[[Callable[[Windows], None]], Rule]:
    """Makes the decorated function (which decides windows with ``Windows.decide``, naming
    its own Rule) a Rule of that name."""
    def make(fn: Callable[[Windows], None]) -> Rule:
        return Rule(fn.__name__, verdict, order, means, because, fn, shows_at_once, cause,
                    fn.__module__)
    return make


def collect(modules: Iterable) -> tuple[Rule, ...]:
    """Every Rule the modules define, in order; a name or a place taken twice is an error."""
    found = {id(r): r for m in modules for r in vars(m).values() if isinstance(r, Rule)}
    out = tuple(sorted(found.values(), key=lambda r: r.order))
    for what in ("name", "order"):
        seen = [getattr(r, what) for r in out]
        twice = sorted({x for x in seen if seen.count(x) > 1})
        if twice:
            raise ValueError(f"rules: {what} taken twice: {twice}")
    return out


# (The families import `Rule` and `rule` from here: they are defined above.)
from gpumon.detect.rules import busy, held, idle, pause, stall, starve, throttle  # noqa: E402

FAMILIES = (idle, pause, starve, stall, throttle, busy, held)
REGISTRY: tuple[Rule, ...] = collect(FAMILIES)
RULES = tuple(r.name for r in REGISTRY)      # r["rule"] of judge indexes this
BY_NAME = {r.name: r for r in REGISTRY}
TRIED = tuple(r for r in REGISTRY if r.decide is not None)
# Hysteresis.step's ``quick``, by rule index: whether a live screen shows its verdict at once.
AT_ONCE = np.array([r.shows_at_once for r in REGISTRY])


def judge(f: dict, shared_process: bool = False, th: Thresholds = DEFAULT) -> dict:
    """Per window: verdict codes (index into VERDICTS), cause codes (index into CAUSES or
    -1), straggler rows (or -1), confidence, the deciding rule (index into RULES) and the
    hold's sticky and quick (Hysteresis.step)."""
    with np.errstate(all="ignore"):
        w = Windows(f, shared_process, th, RULES)
        for r in TRIED:
            r.decide(w)
            if w.all_decided:
                break
        out = w.result()
        # Hysteresis.step's ``quick``: a rule shown at once, or starvation its host shows in
        # a job that ran context_s without a pause (new loader workers after an epoch
        # boundary refill their queue flat out); the host alone never rushes a stall.
        out["quick"] = ((w.feeding & (f["since_pause"] > th.context_s / BIN_S)
                         & (out["verdict"] == VERDICTS.index(DATA_STARVATION)))
                        | AT_ONCE[out["rule"]])
        if f["data_run"].min() * BIN_S < th.window_s:     # (the job's first seconds)
            out["confidence"] = out["confidence"] * short_factor(f, th)
        return out


def short_factor(f: dict, th: Thresholds) -> np.ndarray:
    """(E,): confidence kept on a window that holds fewer seconds of the job's data than
    window_s: half at none, all at window_s (a verdict from a short sample is never a
    confident one)."""
    have = np.minimum(f["data_run"], f["window"]) * BIN_S
    return 0.5 + 0.5 * np.minimum(have / th.window_s, 1.0)


def table(th: Thresholds) -> str:
    """The README's rule table: each rule in order, its verdict and when it fires."""
    rows = ["| rule | fires when | verdict (cause) |", "|---|---|---|"]
    for r in REGISTRY:
        said = f"`{r.verdict}`" if r.verdict else "the verdict kept"
        rows.append(f"| `{r.name}` | {r.meaning(th)} | {said}"
                    + (f" ({r.cause})" if r.cause else "") + " |")
    return "\n".join(rows)
