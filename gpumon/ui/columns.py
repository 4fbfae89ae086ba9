"""Titles, units and number formats of the dashboard's cells, read from the field metadata
of samples.py (the one list of fields); this module only picks which fields to show."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional

from gpumon.samples import GpuSample, HostSample, JobProcs

_META = {f.name: f.metadata for cls in (GpuSample, JobProcs, HostSample) for f in fields(cls)}
MISSING = "-"

# GPU cells after the utilization sparkline, each one field or a "used/total" style pair.
GPU_MAIN = (("mem_used_mib", "mem_total_mib"), ("power_w", "power_limit_w"))
GPU_DETAIL = (("sm_clock_mhz",), ("temp_c",), ("pcie_rx_mbps", "pcie_tx_mbps"))
# Beside utilization, where some GPU has GPM: the share of SMs with work (a collective that
# spins reads 100% utilization at a few per cent of it), as a per cent.
SM_ACTIVE = "sm_active_ratio"
# Per-job cells (JobProcs) on the host panel.
JOB_CELLS = ("main_cpu_pct", "main_thread_max_pct", "loader_workers", "loader_cpu_pct",
             "loader_busy")


def title(name: str) -> str:
    return _META[name].get("title") or name


def unit(name: str) -> str:
    return _META[name].get("unit", "")


def fmt(name: str, value: Any) -> str:
    """A value as its field's format says; None (missing) as "-", never 0."""
    if value is None:
        return MISSING
    spec = _META[name].get("fmt", "")
    if spec == "d":
        return str(int(value))
    if spec and isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def percent(value: Optional[float]) -> str:
    """A 0-1 ratio as a whole per cent ("42%"); None (missing) as "-", never 0."""
    return MISSING if value is None else f"{100 * value:.0f}%"


def width(name: str) -> int:
    return int(_META[name].get("width", 6))


def cell_title(names: tuple[str, ...]) -> str:
    """"used/total MiB": the titles joined, then the (shared) unit."""
    u = unit(names[0])
    return "/".join(title(n) for n in names) + (f" {u}" if u else "")


def cell_value(names: tuple[str, ...], sample: Optional[object]) -> str:
    return "/".join(fmt(n, getattr(sample, n) if sample is not None else None) for n in names)


def cell_width(names: tuple[str, ...]) -> int:
    """Room for the title or typical values, whichever is wider."""
    return max(len(cell_title(names)), sum(width(n) for n in names) + len(names) - 1)


def with_unit(name: str, value: Any) -> str:
    """"60 C", "2.1%", "-" (a missing value carries no unit)."""
    text = fmt(name, value)
    if value is None:
        return text
    u = unit(name)
    return text + u if u == "%" else f"{text} {u}" if u else text
