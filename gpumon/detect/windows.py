"""One job's windows as the rules see them: the features (features.py), what is derived from
them once (the job's duty, the odd GPU out, the host's reading), and the decisions so far.

Vectorized over windows (shape (E,)), so one live window and every second of a day-long log
run the same code. A quantity is computed the first time a rule asks for it.
"""
from __future__ import annotations

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.hostview import Host
from gpumon.detect.seconds import by_sm, spins
from gpumon.detect.thresholds import BIN_S, POWER_LAG_S, Thresholds
from gpumon.diagnosis import BUSY, CAUSES, VERDICTS

V = {v: i for i, v in enumerate(VERDICTS)}
C = {c: i for i, c in enumerate(CAUSES)}


class cached_property:
    """functools.cached_property without its per-instance lock (Python 3.11 takes an RLock
    on every first read; a Windows object is never shared between threads): the value is
    computed on the first read and then found in the instance's dict."""

    def __init__(self, fn):
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


def low_nan(a):
    """NaN as -inf, so a missing GPU never wins a max (np.fmax keeps the number)."""
    return np.fmax(a, -np.inf)


def clip(a, lo: float, hi: float):
    """np.clip(a, lo, hi) for float arrays (NaN stays NaN) without its wrapper's checks."""
    return np.minimum(np.maximum(a, lo), hi)


def high_nan(a):
    """NaN as +inf, so a missing GPU never wins a min."""
    return np.fmin(a, np.inf)


def short_hang(f: dict, th: Thresholds) -> np.ndarray:
    """(E,): every GPU busy at a hang's low power since the job's data began, fewer than
    hang_s ago: whether it is a hang cannot be told yet (rules.idle.too_short)."""
    run = f["data_run"]
    return (f["cold_run"] >= run) & (run > 0) & (run < th.hang_s / BIN_S)


def power_need(th: Thresholds) -> float:
    """Bins of data a window must hold to compare its GPUs' power (busy_but_cold): recover_s
    of seconds with every GPU at work, each after POWER_LAG_S more."""
    return (th.recover_s + POWER_LAG_S) / BIN_S


class Windows:
    def __init__(self, f: dict, shared_process: bool, th: Thresholds, rules: tuple):
        self.f, self.shared, self.th, self.rules = f, shared_process, th, rules
        self.G, self.E = f["duty"].shape
        E = self.E
        self.verdict = np.full(E, V[BUSY])
        self.cause = np.full(E, -1)
        self.strag = np.full(E, -1)
        self.conf = np.full(E, 0.8)
        self.rule = np.full(E, rules.index("busy"))
        self.open = np.ones(E, dtype=bool)   # windows not decided yet
        self.all_decided = E == 0          # every window decided (updated by decide)

    def decide(self, rule, mask, c=None, s=None, cf=None) -> None:
        """Windows not decided yet where ``mask`` holds get the verdict of ``rule`` (a
        rules.Rule), with cause ``c``, straggler row ``s`` and confidence ``cf``; these may
        be callables, evaluated only when some window takes this branch."""
        m = mask & self.open
        if not m.any():
            return
        c, s, cf = (x() if callable(x) else x for x in (c, s, cf))
        self.verdict[m] = V[rule.verdict]
        self.rule[m] = self.rules.index(rule.name)
        for out, x in ((self.cause, c), (self.strag, s), (self.conf, cf)):
            if x is not None:
                out[m] = x[m] if isinstance(x, np.ndarray) else x
        self.open[m] = False
        self.all_decided = not self.open.any()

    def result(self) -> dict:
        """The decisions, and the hold's ``sticky``: a starvation verdict is kept through a
        flat-out stretch while the host still starves the job and its context starved."""
        f, th = self.f, self.th
        return {"verdict": self.verdict, "cause": self.cause, "straggler": self.strag,
                "confidence": self.conf, "rule": self.rule,
                "sticky": self.feeding & (N.nan_to_num(f["ctx_duty"], nan=1.0)
                                          < th.duty_starved)}

    # -- the job's duty cycle ----------------------------------------------------------------
    @cached_property
    def jduty(self) -> np.ndarray:
        """The job's mean duty per window (its GPUs with samples)."""
        return N.nanmean(self.f["duty"], axis=0)

    @cached_property
    def duty_lo(self) -> np.ndarray:
        """Per-GPU duty, NaN as -inf (for the busiest GPU)."""
        return low_nan(self.f["duty"])

    @cached_property
    def duty_hi(self) -> np.ndarray:
        """Per-GPU duty, NaN as +inf (for the least busy GPU)."""
        return high_nan(self.f["duty"])

    @cached_property
    def dmax(self) -> np.ndarray:
        return np.maximum.reduce(self.duty_lo, axis=0)

    @cached_property
    def dmin(self) -> np.ndarray:
        return np.minimum.reduce(self.duty_hi, axis=0)

    @cached_property
    def amax(self) -> np.ndarray:
        return self.duty_lo.argmax(axis=0)

    @cached_property
    def amin(self) -> np.ndarray:
        return self.duty_hi.argmin(axis=0)

    @cached_property
    def spread(self) -> np.ndarray:
        return self.dmax - self.dmin

    @cached_property
    def nmin(self) -> np.ndarray:
        return self.f["n"].min(axis=0)

    # -- the host --------------------------------------------------------------------------
    @cached_property
    def host(self) -> Host:
        return Host(self.f, self.th)

    @cached_property
    def feeding(self) -> np.ndarray:
        """Some rank's host shows starvation (loaders saturated, main at a core, storage)."""
        return self.host.starving_any()

    @cached_property
    def known(self) -> np.ndarray:
        """Some GPU of the job has host counters (over the window)."""
        return ~self.host.unknown[0].all(axis=0)

    @cached_property
    def hs(self) -> np.ndarray:
        """The row of the only GPU whose rank's host starves (over the window or its last
        seconds), or -1; with every rank's host known."""
        if self.G < 2:
            return np.full(self.E, -1)
        hs = self.host.starved()
        starving = hs == 1.0                    # (hs is 1.0, 0.0 or NaN)
        one = (~np.isnan(hs)).all(axis=0) & (starving.sum(axis=0) == 1)
        return np.where(one, starving.argmax(axis=0), -1)

    # -- a lone stall that is over ----------------------------------------------------------
    @cached_property
    def lone_stall(self) -> np.ndarray:
        """A stall of at most window_s after which every GPU has run at full speed for
        recover_s, with host counters that show no cause over the window."""
        f, th = self.f, self.th
        run, stall = f["full_run"], f["stall_bins"]
        # (The stall ends inside the window and began within the last context_s, which
        # every caller's view of the bins holds: live and offline see the same stall.)
        lone = ((run >= th.recover_s / BIN_S) & (stall > 0)
                & (stall <= th.window_s / BIN_S)
                & (run + stall <= th.context_s / BIN_S))
        if not lone.any():          # (no such stall: the host need not be read)
            return lone
        return lone & self.known & ~self.host.starving_any(recent=False)

    @cached_property
    def over(self) -> np.ndarray:
        return self.lone_stall & (self.f["full_run"] < self.f["window"])

    @cached_property
    def over_power(self) -> np.ndarray:
        """(The GPUs that spun during it read cold a little longer: power is a 1 s average.)"""
        return self.lone_stall & (self.f["full_run"] < self.f["window"]
                                  + POWER_LAG_S / BIN_S)

    # -- GPUs cold beside the hottest ----------------------------------------------------------
    @cached_property
    def gpm(self) -> np.ndarray:
        """(E,): every GPU has SM activity (GPM) in the window."""
        return ~np.isnan(self.f["sm_active"]).any(axis=0)

    def some_cold(self, need: float) -> np.ndarray:
        """(E,): some GPU cold beside the hottest (the seconds table's cold column) in
        ``need`` of the window's compared seconds or more where power compares them (a 1 s
        average, which blurs a wait over the seconds beside it), in one or more where every
        GPU's SM activity does (read in the second it was: a wait in some seconds only)."""
        return self.f["cold_bins"] >= np.where(self.gpm, min(need, 1.0), need)

    # -- the odd GPU out: who waits for whom ---------------------------------------------------
    @cached_property
    def asym(self) -> np.ndarray:
        """The job's GPUs run at different duty cycles (and no lone stall is over)."""
        return (self.spread >= self.th.duty_spread) & ~self.over

    @cached_property
    def asym_conf(self) -> np.ndarray:
        return clip(0.6 + (self.spread - self.th.duty_spread), 0.6, 0.95)

    @cached_property
    def computes(self) -> np.ndarray:
        """The busier GPUs compute (rather than spin while they wait for the idler ones): by
        SM activity where they have it (they do not spin: seconds.spins, over the window);
        else their power rises with their extra duty, spin_power_frac of the limit per unit
        of duty or more (the idler GPUs are not busy: the cold column, which compares busy
        GPUs, says nothing of them)."""
        f, th, G, duty = self.f, self.th, self.G, self.f["duty"]
        hi = duty >= ((self.dmax + self.dmin) / 2.0)[None, :]
        # The mean power fraction, duty and SM activity of the busier and the idler GPUs
        # (nanmean over each half, in one pass; judge's np.errstate covers an empty half).
        x = np.array([f["power_frac"], f["power_frac"], duty, duty, f["sm_active"]])
        part = np.array([hi, ~hi, hi, ~hi, hi]) & ~np.isnan(x)
        p_hi, p_lo, d_hi, d_lo, sm_hi = np.where(part, x, 0.0).sum(axis=1) / part.sum(axis=1)
        slope = (p_hi - p_lo) / np.maximum(d_hi - d_lo, 1e-6)
        # Without power: a single busier GPU against several idler ones computes.
        nhi = hi.sum(axis=0)
        lone_hi = nhi == 1
        if self.shared:                       # one process drives every GPU (DataParallel)
            return d_hi >= th.busy_duty
        out = by_sm(np.where(np.isnan(slope), lone_hi & (G > 2), slope >= th.spin_power_frac),
                    ~spins(d_hi, sm_hi, th), sm_hi)
        # A straggler is one GPU the others wait for: when more GPUs run flat out than idle,
        # the idle minority is the odd one out (its input), whatever the power says while
        # the 1 s power averages catch up; a busy minority against idle ones is the straggler.
        out = np.where(nhi > G - nhi, False, np.where(nhi < G - nhi, True, out))
        out &= d_hi >= th.busy_duty
        # Unless the idler ranks' own hosts starve (loaders saturated, main process at a
        # core): then they wait for input, and the busy one spins in the collective waiting
        # for them (a data-starved NCCL job's ranks drift apart).
        lo_starve = np.fmax.reduce(np.where(~hi, self.host.starved(), np.nan), axis=0)
        return out & ~(lo_starve >= 1.0)

    @cached_property
    def lone_idler(self) -> np.ndarray:
        """The least busy GPU's row where the others hardly idle, else -1."""
        amin = self.amin
        idle = N.nan_to_num(self.f["idle_share"])
        others = np.where(np.arange(self.G)[:, None] == amin[None, :], 0.0, idle).max(axis=0)
        return np.where(others < self.th.idle_duty, amin, -1)
