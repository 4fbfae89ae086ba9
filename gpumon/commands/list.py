"""`gpumon list`: GPUs, driver/NVML/CUDA versions, and the metrics each GPU supports."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from gpumon.commands.common import gpu_list, lost_text, no_color
from gpumon.errors import EveryGpuLostError, NoDriverError, NoGpuError, UserError
from gpumon.commands.helptext import help_kwargs

ORDER_NOTE = ("NVML numbers GPUs by PCI bus id; CUDA numbers them fastest first unless "
              "CUDA_DEVICE_ORDER=PCI_BUS_ID is set, and CUDA_VISIBLE_DEVICES renumbers them "
              "from 0. gpumon always shows NVML indices; match GPUs by UUID when in doubt.")


def register(sub) -> None:
    p = sub.add_parser("list",
                       description="Every GPU NVML sees (index, name, UUID, PCI bus id, "
                       "memory, power limit), the driver, NVML and CUDA versions, and which "
                       "metrics each GPU supports. Real GPUs only: no --sim.",
                       **help_kwargs("list"))
    p.add_argument("--gpus", type=gpu_list, default=None, metavar="LIST",
                   help="GPUs to show (index or UUID, or its start)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-color", action="store_true", help="no colour")
    p.set_defaults(func=run)


def run(args) -> int:
    """Exit 0 with a GPU to list; 2 when NVML lists none (as without a driver); 1 when every
    GPU is lost. A lost GPU is said in one line on stderr and left out of the tables."""
    from gpumon.node import open_selected
    try:
        src = open_selected(args.gpus)
    except NoDriverError as exc:    # (list shows real GPUs only: no --sim to suggest)
        raise UserError(f"no NVIDIA driver: {exc.detail}", exc.code) from None
    try:
        versions = src.versions()
        src.probe()
        every = src.gpu_infos()
        lost = sorted(i.index for i in every if i.index in set(src.lost))
    finally:
        src.close()
    infos = [i for i in every if i.index not in lost]
    if args.json:
        print(json.dumps({"versions": versions, "lost": lost, "gpus": [
            {"index": i.index, "name": i.name, "uuid": i.uuid, "pci_bus_id": i.pci_bus_id,
             "memory_mib": i.mem_total_mib, "power_limit_w": i.power_limit_w, "mig": i.mig,
             "supported": dict(i.supported)} for i in infos]}, indent=2))
    else:
        _print_tables(Console(no_color=no_color(args), highlight=False), versions, infos)
    if not every:
        raise NoGpuError()
    if not infos:
        raise EveryGpuLostError(lost)
    if lost:
        print(f"gpumon: {lost_text(lost)}; listing the others", file=sys.stderr)
    return 0


def _fit_when_piped(console: Console, table: Table) -> None:
    """Not a terminal (a pipe, a file): as wide as the table, so that no row is folded and
    `gpumon list | grep GPU-` finds whole UUIDs and bus ids."""
    if not console.is_terminal:
        from rich.measure import Measurement
        width = Measurement.get(console, console.options.update_width(10 ** 4), table).maximum
        console.width = max(console.width, width)


def _print_tables(console: Console, versions: dict, infos: list) -> None:
    from gpumon.nvml import METRICS
    console.print(f"driver {versions['driver']}   NVML {versions['nvml']}   "
                  f"CUDA {versions['cuda']}   {len(infos)} GPU(s)")
    if not infos:
        return
    table = Table(box=None, pad_edge=False)
    for col in ("idx", "name", "uuid", "pci bus id", "memory", "power limit"):
        # (a UUID or bus id is copied whole: on a narrow terminal it folds, never "...")
        table.add_column(col, overflow="fold" if col in ("uuid", "pci bus id") else "ellipsis")
    for i in infos:
        table.add_row(str(i.index), i.name + (" [MIG]" if i.mig else ""), i.uuid, i.pci_bus_id,
                      f"{i.mem_total_mib:.0f} MiB" if i.mem_total_mib else "-",
                      f"{i.power_limit_w:.0f} W" if i.power_limit_w else "-")
    _fit_when_piped(console, table)
    console.print(table)
    sup = Table(title="supported metrics (yes / no)", box=None, pad_edge=False,
                title_justify="left")
    sup.add_column("metric")
    for i in infos:
        sup.add_column(f"GPU {i.index}")
    for m in METRICS:
        sup.add_row(m, *("yes" if dict(i.supported).get(m, False) else "no" for i in infos))
    console.print(sup)
    console.print(ORDER_NOTE)
