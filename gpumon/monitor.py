"""Monitor: the sampling loop. source -> history -> detector -> sinks, on a fixed schedule.

Consumers that draw (the dashboard) run in another thread and read ``latest`` /
``diagnoses`` / ``history``: rendering never blocks sampling.

Judging one job (``gpumon run -- CMD``) is a cut of the tick, not a change to the detector:
a Monitor may carry a ``scope``, a function from each Tick to the part of it that is judged.
The detector sees only that part (CMD's GPUs' samples and their job processes), so it stays
pure and never learns whose job it judges. Everyone else gets the whole tick, every GPU, with
the verdicts of the judged part only: the screen still shows the node, and the CSV keeps every
GPU's rows while only CMD's GPUs get verdict cells. The tick's ``judged`` field names the
judged GPUs, for marking the others; ``judged_listeners`` get the judged part itself (gpumon
run's exit summary). When the judged GPUs lose one (another job took it, or the scope went
from every GPU to CMD's own), the detector starts afresh, as its grouping of jobs would
otherwise keep the GPU it no longer sees. CommandScope is the scope of a command.

When every GPU the source had is lost (NVML: GPU is lost), no verdict is given: the last one
would otherwise stand for as long as gpumon runs. ``every_gpu_lost`` says so to the commands.

The Monitor keeps only the newest ticks (``history_ticks``): the detector keeps what it needs
itself, and the dashboard its own bounded sparklines; a long run at 0.1 s stays flat in memory.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from typing import Callable, Iterable, Mapping, Optional, Protocol, Sequence

from gpumon.diagnosis import Diagnosis
from gpumon.history import History
from gpumon.samples import GpuInfo, Tick

# The scope's states (CommandScope.state).
WAITING = "waiting"     # no GPU holds a process of CMD's tree yet: nothing is judged
OWN = "own"             # CMD's GPUs are judged, the other GPUs are not
EVERY = "every"         # CMD's processes cannot be told on the GPUs: every GPU is judged


class Source(Protocol):
    kind: str

    def gpu_infos(self) -> list[GpuInfo]: ...
    def read(self) -> Tick: ...
    def close(self) -> None: ...


class Sink(Protocol):
    def write(self, tick: Tick, diagnoses: Sequence[Diagnosis]) -> None: ...
    def close(self) -> None: ...


def command_gpus(pids: Mapping[int, Optional[tuple]], mine: set, before: Iterable[int]
                 ) -> tuple[int, ...]:
    """CMD's GPUs: those whose process list holds a PID in ``mine`` (CMD's tree); a GPU in
    ``before`` (CMD's until now) stays CMD's while its list is empty or unknown (a rank that
    ended, a failed query), and stops being CMD's when only other processes are on it."""
    before = set(before)
    return tuple(sorted(g for g, p in pids.items()
                        if (p and not mine.isdisjoint(p)) or (not p and g in before)))


class CommandScope:
    """The part of each tick that belongs to one command's process tree (gpumon run -- CMD).

    ``in_tree(pids)`` returns which of those PIDs are CMD or its descendants (torchrun, its
    ranks, their workers: host.ProcessTree.members). Each tick, the GPUs' process lists (the
    latest known per GPU) decide CMD's GPUs (command_gpus) and the state:

    - WAITING: no GPU holds a process of CMD's tree yet (start-up): nothing is judged;
    - OWN: CMD's GPUs are judged; the other GPUs belong to other jobs and are not;
    - EVERY: CMD's processes cannot be told on the GPUs, so every GPU is judged (what
      `gpumon watch` does): no GPU reports its processes, or a process that was not on the
      GPUs when CMD started is not visible on this host (its PID is from another namespace:
      gpumon in a container, where NVML reports host PIDs; a container sees only its own
      GPUs, so they are usually CMD's). Once there, it stays until CMD's own PIDs show up.

    Not followed: work that CMD starts outside its own tree (`docker run`, `srun`: the
    processes are children of a daemon); the scope then keeps WAITING.
    """

    def __init__(self, in_tree: Callable[[set], set]):
        self.in_tree = in_tree
        self.state = WAITING
        self.gpus: tuple[int, ...] = ()       # judged GPUs now (EVERY: every GPU seen)
        self.used: tuple[int, ...] = ()       # every GPU judged so far
        self.pids: set = set()                # CMD's PIDs on the GPUs now
        self.others: tuple[int, ...] = ()     # GPUs with other jobs' processes, not judged
        self.dropped = False                  # the last tick took a GPU out of the judged ones
        self._lists: dict[int, Optional[tuple]] = {}
        self._at_start: Optional[set] = None  # GPU PIDs at the first reading (not CMD's doing)

    def __call__(self, tick: Tick) -> Tick:
        for s in tick.gpus:
            if s.pids is not None or s.gpu not in self._lists:
                self._lists[s.gpu] = s.pids
        for g in tick.lost:
            self._lists.pop(g, None)
        on_gpus = {p for pids in self._lists.values() if pids for p in pids}
        if self._at_start is None:
            self._at_start = set(on_gpus)
        self.pids = self.in_tree(on_gpus) if on_gpus else set()
        before = self.gpus
        own = command_gpus(self._lists, self.pids, before if self.state == OWN else ())
        if own:
            self.state, self.gpus = OWN, own
        elif self.state == EVERY or self._untellable(tick):
            self.state, self.gpus = EVERY, tuple(sorted(self._lists))
        else:
            self.state, self.gpus = WAITING, ()
        self.dropped = not set(before) <= set(self.gpus)
        self.used = tuple(sorted(set(self.used) | set(self.gpus)))
        self.others = tuple(g for g, p in sorted(self._lists.items()) if p and g not in self.gpus)
        return self.part(tick)

    def _untellable(self, tick: Tick) -> bool:
        if self._lists and all(p is None for p in self._lists.values()):
            return True
        hidden = tick.host.unmapped_pids if tick.host is not None else ()
        return any(p not in self._at_start for p in hidden)

    def part(self, tick: Tick) -> Tick:
        """The tick cut to the judged GPUs: their samples, job rows and processes."""
        if self.state == EVERY:
            return replace(tick, judged=None)
        keep = set(self.gpus)
        host = tick.host
        if host is not None:
            mains = {p.pid for p in host.procs if p.role == "main" and keep.intersection(p.gpus)}
            procs = []
            for p in host.procs:         # each main, then its workers, parents before children
                if p.pid in mains or (p.role == "worker" and p.ppid in mains):
                    procs.append(p)
                    mains.add(p.pid)
            host = replace(host, jobs=tuple(j for j in host.jobs if j.gpu in keep),
                           procs=tuple(procs))
        return replace(tick, gpus=tuple(s for s in tick.gpus if s.gpu in keep), host=host,
                       lost=tuple(g for g in tick.lost if g in keep), judged=self.gpus)


# Ticks the Monitor keeps (``history``): the newest is what the exporter and the screen read.
HISTORY_TICKS = 2


class Monitor:
    def __init__(self, source: Source, *, interval: float = 1.0, detector=None,
                 sinks: Sequence[Sink] = (), history_ticks: int = HISTORY_TICKS,
                 duration: Optional[float] = None, count: Optional[int] = None,
                 scope: Optional[Callable[[Tick], Tick]] = None):
        self.source = source
        self.interval = interval
        self.detector = detector
        self.sinks = list(sinks)
        self.history = History(max_ticks=history_ticks)
        self.duration = duration
        self.count = count
        self.scope = scope
        self.diagnoses: list[Diagnosis] = []
        self.listeners: list[Callable[[Tick, list[Diagnosis]], None]] = []
        self.judged_listeners: list[Callable[[Tick, list[Diagnosis]], None]] = []
        self.ticks = 0
        self.readings = 0                    # polls that brought a sample (or a lost GPU)
        self.seen: set[int] = set()          # GPUs that sent a sample
        self.every_gpu_lost = False          # a GPU was lost and none is left
        self.started = time.time()
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.error: Optional[BaseException] = None

    @property
    def latest(self) -> Optional[Tick]:
        return self.history.latest

    def step(self) -> Tick:
        """One poll: the source's tick through the detector to the sinks and listeners. A
        source that is ``behind`` (a replay whose clock has passed more logged ticks than one)
        hands each tick due in turn, and each is stepped as the live run stepped it: the
        detector, the sinks and the screen see the same ticks, so the same verdicts, at any
        speed. Returns the last tick."""
        tick = self._take(self.source.read())
        while getattr(self.source, "behind", False) and not self.stop_event.is_set():
            tick = self._take(self.source.read())
        with self.lock:
            self.ticks += 1
        return tick

    def _take(self, tick: Tick) -> Tick:
        """One tick: judged (its scope's part), kept, written and handed to the listeners."""
        self.seen.update(s.gpu for s in tick.gpus)
        self.every_gpu_lost = bool(tick.lost) and self.seen <= set(tick.lost)
        judged = tick
        scope = self.scope
        if scope is not None:
            judged = scope(tick)
            tick = replace(tick, judged=judged.judged)
            if getattr(scope, "dropped", False) and hasattr(self.detector, "reset"):
                self.detector.reset()
        if self.detector is None or self.every_gpu_lost or (judged.judged == ()
                                                             and not judged.gpus):
            diagnoses = []               # no GPU left, or none of the judged job's (yet)
        else:
            diagnoses = self.detector.update(judged)
        with self.lock:
            self.history.add(tick)
            self.diagnoses = list(diagnoses)
        for sink in self.sinks:
            sink.write(tick, self.diagnoses)
        for listener in self.listeners:
            listener(tick, self.diagnoses)
        for listener in self.judged_listeners:
            listener(judged, self.diagnoses)
        return tick

    def run(self, wait: Optional[Callable[[float], bool]] = None) -> None:
        """Sample once per interval until ``stop()`` is called or, with ``duration``, for
        the polls that fit in it (at 0, interval, 2 intervals... up to duration): a count,
        not a race with the clock, so a run of a simulated source is the same every time.
        With ``count``, until that many polls brought readings (a simulation's first poll,
        its start, has none), or the duration ends, whichever comes first.

        ``wait(seconds)`` sleeps between polls and says whether to stop (default: until
        ``stop()``; `gpumon log` passes interrupts.wait, which a stop signal ends, so no
        signal ever interrupts a poll: the poll in progress is finished and written)."""
        polls = (int(math.floor(self.duration / self.interval + 1e-9)) + 1
                 if self.duration is not None else None)
        deadline = self._deadline()
        wait = wait or self.stop_event.wait
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            tick = self.step()
            if tick.gpus or tick.lost:
                self.readings += 1
            if self._done(polls, deadline):
                break
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:            # fell behind (a slow call): skip, don't burst
                next_at = now + self.interval
            if wait(next_at - now):
                break

    def _done(self, polls: Optional[int], deadline: float) -> bool:
        """The polls that fit in the duration, or ``count`` readings, are taken, or the
        duration's deadline has passed."""
        return ((polls is not None and self.ticks >= polls)
                or (self.count is not None and self.readings >= self.count)
                or time.monotonic() >= deadline)

    def _deadline(self) -> float:
        """When a run with ``duration`` ends whatever the count (monotonic time): polls slower
        than the interval (a slow driver) end it within a poll of duration + interval, not
        after every poll of the count. A simulated source runs on its own clock: its count
        alone ends it (the same seed, the same run, however loaded the machine)."""
        if self.duration is None or getattr(self.source, "kind", "") == "sim":
            return math.inf
        return time.monotonic() + self.duration + self.interval

    def start_thread(self) -> threading.Thread:
        """Run in a daemon thread; an error there is kept in ``error`` and stops the loop."""
        def target():
            try:
                self.run()
            except BaseException as exc:  # handed to the thread that draws
                self.error = exc
                self.stop_event.set()
        thread = threading.Thread(target=target, name="gpumon-sampler", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.source.close()
