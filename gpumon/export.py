"""Prometheus exporter: the Monitor's latest readings as metric families, fresh on every scrape.

- ``MonitorCollector`` is a prometheus_client collector on its own ``CollectorRegistry``: each
  scrape builds new families from a ``Snapshot`` taken under the monitor's lock (no global
  gauges, nothing to clean up when a GPU or a job goes away). A scrape never calls NVML: it
  reads what the sampling thread already has.
- Standard GPU fields carry dcgm-exporter's names, types, units and labels (``gpu``, ``UUID``,
  ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``) from the ``dcgm`` metadata of
  ``GpuSample``, so dashboards built for dcgm-exporter work unchanged.
- gpumon's own metrics: the verdict per job (1 for the current one, 0 for the others), the
  evidence behind it, host-side job CPU, ``gpumon_up``, sample age, lost GPUs, NVML errors.
  With every GPU lost, ``gpumon_up`` is 0 and no verdict is given (the Monitor drops it).
- A missing value is left out, never exported as 0.
- Data that is not a real GPU's says so on every series: ``source="sim"`` (or ``"replay"``)
  beside dcgm-exporter's labels, which its dashboards do not select on; a real node's series
  have no ``source`` label (``gpumon_info`` names the source in every case).

The HTTP side (listening, /metrics, /healthz, TLS and auth) is gpumon.export_http.

The text is written here (``render``) rather than by ``prometheus_client.generate_latest``:
that one renames every counter's TYPE line to ``<name>_total``, which would break
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (a counter without the suffix in dcgm-exporter).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Iterable, Optional, Sequence

from gpumon import __version__
from gpumon.diagnosis import VERDICTS, Diagnosis
from gpumon.errors import UserError
from gpumon.samples import (CLOCK_EVENT_NAMES, GpuInfo, GpuSample, JobProcs, Tick)

# gpumon_up turns 0 when the newest tick is older than this many sampling intervals: a
# sampler that fell this far behind (stuck NVML call, dead thread) no longer reports the present.
STALE_INTERVALS = 5.0
# ... and never sooner than this, so a 0.1 s interval does not flap on one slow NVML call.
STALE_MIN_S = 5.0

# dcgm-exporter's units where gpumon keeps another: (dcgm unit, factor from gpumon's unit).
# (A ratio's help is dcgm-exporter's own words, which name the unit: no "(in ...)" added.)
_DCGM_UNITS = {"J": ("mJ", 1000.0), "MB/s": ("B/s", 1e6), "ratio": ("", 1.0)}

# Evidence keys of a Diagnosis (gpumon.detect.result.EVIDENCE_KEYS) exported per job, as
# (key, metric name, divisor, help); % of one core / 100 = cores. Keys a detector does not
# give are left out.
EVIDENCE_METRICS = (
    ("duty_cycle", "gpumon_duty_cycle", 1.0,
     "Share of the window's driver samples with a kernel running, mean over the job's GPUs "
     "(0-1)"),
    ("duty_min", "gpumon_duty_cycle_min", 1.0, "Lowest duty cycle of the job's GPUs (0-1)"),
    ("duty_max", "gpumon_duty_cycle_max", 1.0, "Highest duty cycle of the job's GPUs (0-1)"),
    ("burst_s", "gpumon_burst_seconds", 1.0, "Mean length of a busy burst (seconds)"),
    ("gap_s", "gpumon_gap_seconds", 1.0, "Mean length of an idle gap between bursts (seconds)"),
    ("busy_cold_share", "gpumon_busy_cold_ratio", 1.0,
     "Share of the job's GPUs that are busy but cold (high utilization, low power: waiting "
     "in a collective) (0-1)"),
    ("power_frac", "gpumon_power_limit_ratio", 1.0,
     "Power over the enforced limit, mean over the job's GPUs (0-1)"),
    ("throttle_share", "gpumon_throttle_ratio", 1.0,
     "Share of the window with thermal, power-cap or hardware-slowdown clock events (0-1)"),
    ("loader_cpu_pct", "gpumon_loader_cpu_cores", 100.0,
     "CPU of the job's data-loader workers together (cores)"),
    ("loader_workers", "gpumon_loader_workers", 1.0, "Data-loader worker processes of the job"),
    ("main_cpu_pct", "gpumon_main_process_cpu_cores", 100.0,
     "CPU of the job's main process (cores; 1.0 is one full core, a GIL-bound input pipeline)"),
    ("main_thread_max_pct", "gpumon_main_thread_cpu_cores", 100.0,
     "CPU of the main process's busiest thread (cores)"),
)


def require_prometheus_client():
    """The prometheus_client module, or one line saying how to install it."""
    try:
        import prometheus_client  # noqa: F401
        import prometheus_client.core  # noqa: F401
        import prometheus_client.registry  # noqa: F401
    except ImportError:
        raise UserError("gpumon export needs prometheus_client: pip install 'gpumon-dl[export]'",
                        2) from None
    return prometheus_client


# -- what a scrape reads ---------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape needs, copied under the monitor's lock (references, no NVML)."""
    now: float
    latest: dict                        # GPU index -> newest GpuSample of that GPU
    tick_time: Optional[float]          # time of the newest tick, None before the first
    ticks: int
    diagnoses: tuple = ()
    lost: tuple = ()
    host_jobs: tuple = ()               # JobProcs of the newest tick that has a host sample
    unmapped_pids: Optional[int] = None  # GPU PIDs not found on this host (None: no host data)
    errors: Optional[dict] = None       # source's NVML error counters, where it keeps them
    sampler_ok: bool = True             # the sampling thread runs and has not failed
    interval: float = 1.0
    source_kind: str = ""


def gpu_labels(info: Optional[GpuInfo], index: int, hostname: str) -> dict:
    """dcgm-exporter's labels of one GPU. ``device`` is nvidia<N>: NVML's index stands in
    for the /dev minor number, which is the same on every usual system."""
    return {
        "gpu": str(index),
        "UUID": info.uuid if info else "",
        "pci_bus_id": info.pci_bus_id if info else "",
        "device": f"nvidia{index}",
        "modelName": info.name if info else "",
        "Hostname": hostname,
    }


def _num(v) -> Optional[float]:
    """A finite float, or None for missing / NaN / inf / non-numbers."""
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _dcgm_fields() -> list[tuple[str, str, str, str, float]]:
    """(sample field, dcgm name, metric type, help, factor) from GpuSample's metadata."""
    out = []
    for f in fields(GpuSample):
        name = f.metadata.get("dcgm")
        if not name:
            continue
        unit = f.metadata.get("unit", "")
        dunit, factor = _DCGM_UNITS.get(unit, (unit, 1.0))
        help_ = f.metadata.get("help", name)
        if dunit and dunit != "bitmask":
            help_ = f"{help_} (in {dunit})."
        elif unit == "ratio":
            help_ = f"{help_}."
        out.append((f.name, name, f.metadata.get("kind", "gauge"), help_, factor))
    return out


DCGM_FIELDS = _dcgm_fields()


def job_label(gpus: Sequence[int]) -> str:
    """The ``job_gpus`` label of a job: its GPU indices, e.g. "0,1,2,3" ("" if unknown).

    Not ``job``: Prometheus sets ``job`` on every target and would rename ours to
    ``exported_job``."""
    return ",".join(str(g) for g in gpus)


def source_labels(kind: str) -> dict:
    """The label every series carries when its data is not a real GPU's: ``source="sim"``
    (simulated GPUs) or ``source="replay"``; none for NVML, so a real node's series keep
    dcgm-exporter's label set exactly."""
    return {} if kind in ("", "nvml") else {"source": kind}


class _Families:
    """Metric families under construction, in first-use order; ``extra`` labels go on every
    sample."""

    def __init__(self, metric_cls, extra: Optional[dict] = None):
        self.Metric = metric_cls
        self.extra = extra or {}
        self.by_name: dict[str, Any] = {}

    def add(self, name: str, typ: str, help_: str, labels: dict, value: float) -> None:
        m = self.by_name.get(name)
        if m is None:
            m = self.by_name[name] = self.Metric(name, help_, typ)
        m.add_sample(name, {**labels, **self.extra} if self.extra else labels, value)

    def __iter__(self):
        return iter(self.by_name.values())


def families(snap: Snapshot, infos: dict, hostname: str, metric_cls=None) -> list:
    """The metric families of one snapshot (a pure function: data in, data out).

    ``infos`` maps GPU index -> GpuInfo; ``metric_cls`` is prometheus_client's ``Metric``.
    """
    if metric_cls is None:
        metric_cls = require_prometheus_client().core.Metric
    fam = _Families(metric_cls, source_labels(snap.source_kind))
    host = {"Hostname": hostname}
    lost = set(snap.lost)
    labels = {g: gpu_labels(infos.get(g), g, hostname)
              for g in sorted(set(snap.latest) | set(infos) | lost)}

    # Standard GPU fields, dcgm-exporter's names.
    for g in sorted(snap.latest):
        if g in lost:
            continue              # a lost GPU's last readings are not the present
        s = snap.latest[g]
        lab = labels[g]
        for attr, name, typ, help_, factor in DCGM_FIELDS:
            v = _num(getattr(s, attr))
            if v is not None:
                fam.add(name, typ, help_, lab, v * factor)
        used, total = _num(s.mem_used_mib), _num(s.mem_total_mib)
        if used is not None and total is not None:
            fam.add("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lab,
                    max(total - used, 0.0))

    # Clock event reasons one by one: PromQL has no bitwise AND.
    for g in sorted(snap.latest):
        mask = snap.latest[g].clock_events
        if g in lost or mask is None:
            continue
        for bit, reason in CLOCK_EVENT_NAMES.items():
            fam.add("gpumon_clock_event_active", "gauge",
                    "1 while this clock event reason holds the GPU's clocks, else 0",
                    {**labels[g], "reason": reason}, 1.0 if mask & bit else 0.0)

    # Health of the exporter itself.
    fresh = snap.tick_time is not None and (
        snap.now - snap.tick_time <= max(STALE_MIN_S, STALE_INTERVALS * snap.interval))
    left = not lost or bool(set(labels) - lost)      # a GPU that is not lost
    fam.add("gpumon_up", "gauge", "1 while gpumon samples, its newest tick is fresh and a GPU "
            "is left (not lost), else 0", host, 1.0 if (snap.sampler_ok and fresh and left)
            else 0.0)
    fam.add("gpumon_info", "gauge", "gpumon's version and where its samples come from",
            {**host, "version": __version__, "source": snap.source_kind}, 1.0)
    fam.add("gpumon_ticks_total", "counter", "Polls of the source since gpumon started", host,
            float(snap.ticks))
    for g in sorted(snap.latest):
        if g in lost:
            continue
        t = _num(snap.latest[g].time)
        if t is not None:
            fam.add("gpumon_sample_age_seconds", "gauge",
                    "Seconds since the newest sample of this GPU was taken", labels[g],
                    max(snap.now - t, 0.0))
    for g in labels:
        fam.add("gpumon_gpu_lost", "gauge", "1 when NVML reported the GPU lost (fell off the "
                "bus), else 0", labels[g], 1.0 if g in lost else 0.0)
    if snap.errors is not None:
        for key, count in sorted(snap.errors.items()):
            metric, _, error = str(key).partition(":")
            fam.add("gpumon_nvml_errors_total", "counter", "NVML calls that failed (other than "
                    "not-supported), by metric and error", {**host, "metric": metric,
                                                            "error": error or "unknown"},
                    float(count))

    # Verdicts: one series per verdict per job, 1 for the current one.
    for d in snap.diagnoses:
        _verdict(fam, d, host)

    if snap.unmapped_pids is not None:
        fam.add("gpumon_unmapped_gpu_processes", "gauge", "GPU processes NVML reports that are "
                "not visible on this host: in a container, run with the host PID namespace",
                host, float(snap.unmapped_pids))

    # The job's host side, per GPU, from the newest host sample (raw, not the detector's).
    for j in snap.host_jobs:
        if j.gpu in lost or j.gpu not in labels:
            continue
        for attr, name, divisor, help_ in _JOB_METRICS:
            v = _num(getattr(j, attr))
            if v is not None:
                fam.add(name, "gauge", help_, labels[j.gpu], v / divisor)
    return list(fam)


# JobProcs fields exported per GPU: (field, metric name, divisor, help).
def _job_metrics():
    names = {"main_cpu_pct": ("gpumon_gpu_main_process_cpu_cores", 100.0),
             "main_thread_max_pct": ("gpumon_gpu_main_thread_cpu_cores", 100.0),
             "loader_workers": ("gpumon_gpu_loader_workers", 1.0),
             "loader_cpu_pct": ("gpumon_gpu_loader_cpu_cores", 100.0),
             "loader_busy": ("gpumon_gpu_loader_workers_saturated", 1.0)}
    out = []
    for f in fields(JobProcs):
        if f.name in names:
            name, divisor = names[f.name]
            help_ = f.metadata.get("help", f.name).replace("% of one core", "in cores")
            out.append((f.name, name, divisor, f"{help_} (job process on this GPU)"))
    return tuple(out)


_JOB_METRICS = _job_metrics()


def _verdict(fam: _Families, d: Diagnosis, host: dict) -> None:
    job = {**host, "job_gpus": job_label(d.gpus)}
    known = VERDICTS if d.verdict in VERDICTS else VERDICTS + (d.verdict,)
    for v in known:
        lab = dict(job, verdict=v)
        if v == d.verdict:
            lab["cause"] = d.cause or ""
            lab["straggler_gpu"] = "" if d.straggler_gpu is None else str(d.straggler_gpu)
        fam.add("gpumon_verdict", "gauge", "1 for the job's current verdict, 0 for the others; "
                "cause and straggler_gpu where known", lab, 1.0 if v == d.verdict else 0.0)
    conf = _num(d.confidence)
    if conf is not None:
        fam.add("gpumon_verdict_confidence", "gauge", "Confidence of the job's current verdict "
                "(0-1)", job, conf)
    ev = d.evidence if isinstance(d.evidence, dict) else {}
    for key, name, divisor, help_ in EVIDENCE_METRICS:
        v = _num(ev.get(key))
        if v is not None:
            fam.add(name, "gauge", help_, job, v / divisor)


# -- the collector ---------------------------------------------------------------------------
class MonitorCollector:
    """A prometheus_client collector over a running Monitor.

    It keeps the newest sample of every GPU (a listener on the monitor, run by the sampling
    thread) because a tick may hold no sample of a GPU polled faster than its driver samples.
    """

    def __init__(self, monitor, infos: Sequence[GpuInfo], hostname: str, *,
                 thread: Optional[threading.Thread] = None, clock=time.time):
        self.monitor = monitor
        self.infos = {i.index: i for i in infos}
        self.hostname = hostname
        self.thread = thread
        self.clock = clock
        self.Metric = require_prometheus_client().core.Metric
        self._latest: dict[int, GpuSample] = {}
        self._host_jobs: tuple = ()
        self._unmapped: Optional[int] = None
        with monitor.lock:
            for tick in monitor.history:
                self._take(tick)
        monitor.listeners.append(self._on_tick)

    def _take(self, tick: Tick) -> None:
        for s in tick.gpus:          # time-ordered per GPU: the last one wins
            self._latest[s.gpu] = s
        if tick.host is not None:
            self._host_jobs = tuple(tick.host.jobs)
            self._unmapped = len(tick.host.unmapped_pids)

    def _on_tick(self, tick: Tick, diagnoses) -> None:
        with self.monitor.lock:
            self._take(tick)

    def sampler_running(self) -> bool:
        """The sampling thread runs and has not failed (what /healthz answers)."""
        m = self.monitor
        return (m.error is None and not m.stop_event.is_set()
                and (self.thread is None or self.thread.is_alive()))

    def snapshot(self) -> Snapshot:
        m = self.monitor
        with m.lock:
            latest = m.history.latest
            snap = Snapshot(
                now=self.clock(), latest=dict(self._latest),
                tick_time=latest.time if latest is not None else None, ticks=m.ticks,
                diagnoses=tuple(m.diagnoses), lost=tuple(latest.lost) if latest else (),
                host_jobs=self._host_jobs, unmapped_pids=self._unmapped,
                errors=_errors_of(m.source), interval=m.interval,
                sampler_ok=self.sampler_running(),
                source_kind=getattr(m.source, "kind", ""))
        return snap

    def collect(self):
        return families(self.snapshot(), self.infos, self.hostname, self.Metric)


def _errors_of(source) -> Optional[dict]:
    errors = getattr(source, "errors", None)
    if errors is None:
        inner = getattr(source, "src", None)      # --gpus over a simulated source
        errors = getattr(inner, "errors", None) if inner is not None else None
    return dict(errors) if isinstance(errors, dict) else None


# -- the text format -------------------------------------------------------------------------
def _escape_label(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _fmt(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v != v:
        return "NaN"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def render(metric_families: Iterable) -> bytes:
    """The Prometheus text format (0.0.4). A counter's HELP/TYPE lines name its samples as
    they are (dcgm-exporter's counters have no ``_total``); families without samples are
    left out."""
    out: list[str] = []
    for m in metric_families:
        samples = m.samples
        if not samples:
            continue
        name = samples[0].name if m.type == "counter" else m.name
        typ = m.type if m.type in ("counter", "gauge", "histogram", "summary") else "untyped"
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {typ}\n")
        for s in samples:
            if s.labels:
                lab = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in s.labels.items())
                out.append(f"{s.name}{{{lab}}} {_fmt(s.value)}\n")
            else:
                out.append(f"{s.name} {_fmt(s.value)}\n")
    return "".join(out).encode("utf-8")


def make_registry(collector):
    """A CollectorRegistry of its own holding only ``collector``."""
    registry = require_prometheus_client().registry.CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
