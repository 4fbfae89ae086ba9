"""`gpumon contrib path | list`: where the fleet files are (docs/fleet.md): the Prometheus
recording and alerting rules, a scrape configuration, the Grafana dashboard, the exporter's
image and DaemonSet, the systemd unit. The wheel installs them under
<prefix>/share/gpumon/contrib/; a checkout has them in contrib/."""
from __future__ import annotations

from gpumon.commands.helptext import help_kwargs
from gpumon.commands.plugin import shared
from gpumon.errors import EXIT_USAGE, UserError

# What each file is, by its path under contrib/ (a file not named here is listed bare).
WHAT = {
    "grafana/gpumon-dashboard.json": "Grafana dashboard (Dashboards, New, Import)",
    "kubernetes/Containerfile": "the exporter's image (docker build -f ... .)",
    "kubernetes/gpumon-daemonset.yaml": "Kubernetes DaemonSet: gpumon export on every GPU node",
    "prometheus/gpumon-rules.yml": "Prometheus recording and alerting rules",
    "prometheus/prometheus.yml": "an example Prometheus scrape configuration",
    "prometheus/tests/gpumon-rules.test.yml": "the rules' unit tests (promtool test rules)",
    "systemd/gpumon-export.service": "systemd unit running gpumon export",
}


def register(sub) -> None:
    p = sub.add_parser("contrib",
                       description="Where the files for running gpumon on a fleet are "
                       "(Prometheus rules, Grafana dashboard, Kubernetes DaemonSet, systemd "
                       "unit; docs/fleet.md says how to use each): `contrib path` prints "
                       "their folder, `contrib list` each file.", **help_kwargs("contrib"))
    ps = p.add_subparsers(dest="action", metavar="ACTION")
    ps.add_parser("path", help="print the folder of the contrib files")
    ps.add_parser("list", help="print each contrib file's path and what it is")
    p.set_defaults(func=run, action=None)


def lines(action: str) -> list[str]:
    folder = shared("contrib", "the contrib folder")
    if action == "path":
        return [str(folder)]
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    width = max((len(str(p)) for p in files), default=0)
    return [f"{str(p):<{width}}  {WHAT.get(p.relative_to(folder).as_posix(), '')}".rstrip()
            for p in files]


def run(args) -> int:
    if args.action not in ("path", "list"):
        raise UserError("say what to do: gpumon contrib path | list", EXIT_USAGE)
    for line in lines(args.action):
        print(line)
    return 0
