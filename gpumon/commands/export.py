"""`gpumon export`: a Prometheus /metrics endpoint (127.0.0.1 by default)."""
from __future__ import annotations

import os
import socket
import sys
import threading

from gpumon.commands.common import (add_sampling_options, make_detector, open_source,
                                    stop_on_sigterm)
from gpumon.errors import UserError
from gpumon.monitor import Monitor


def register(sub) -> None:
    from gpumon.export import DEFAULT_ADDR, DEFAULT_PORT
    p = sub.add_parser(
        "export", help="serve Prometheus metrics (dcgm-exporter names + gpumon verdicts)",
        description="Serve /metrics in the Prometheus text format: the standard GPU fields under "
        "dcgm-exporter's names and labels, plus gpumon's verdict per job and its evidence. "
        f"Listens on {DEFAULT_ADDR}:{DEFAULT_PORT} unless told otherwise (dcgm-exporter "
        "uses 9400). Needs prometheus_client: pip install 'gpumon[export]'.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--listen", metavar="ADDR:PORT", default=None,
                       help=f"address and port to listen on (default {DEFAULT_ADDR}:"
                       f"{DEFAULT_PORT}); 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT} "
                       "for every interface")
    where.add_argument("--port", metavar="PORT", default=None,
                       help=f"port on {DEFAULT_ADDR} (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--hostname", metavar="NAME", default=None,
                   help="value of the Hostname label (default: $NODE_NAME, else this host's "
                   "name)")
    p.add_argument("-q", "--quiet", action="store_true", help="no status line on stderr")
    add_sampling_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from gpumon.export import (DEFAULT_ADDR, DEFAULT_PORT, MetricsServer, MonitorCollector,
                               format_addr, make_registry, parse_listen, parse_port,
                               require_prometheus_client)
    require_prometheus_client()          # before opening NVML: say what is missing first
    if args.listen is not None:
        host, port = parse_listen(args.listen)
    else:
        host = DEFAULT_ADDR
        port = parse_port(args.port) if args.port is not None else DEFAULT_PORT
    hostname = args.hostname or os.environ.get("NODE_NAME") or socket.gethostname()
    stop_on_sigterm()
    source = open_source(args)
    try:
        infos = source.gpu_infos()       # once: identity labels never cost a scrape an NVML call
        monitor = Monitor(source, interval=args.interval, detector=make_detector(),
                          duration=args.duration)
        monitor.step()                   # a first reading before the port opens
        collector = MonitorCollector(monitor, infos, hostname)
        server = MetricsServer(host, port, make_registry(collector))
        thread = collector.thread = monitor.start_thread()
    except BaseException:
        source.close()
        raise
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                               name="gpumon-http", daemon=True)
    serving.start()
    if not args.quiet:
        label = "SIMULATED " if source.kind == "sim" else ""
        print(f"gpumon: serving {len(infos)} {label}GPU(s) at http://"
              f"{format_addr(host, server.port)}/metrics every {args.interval:g} s; "
              "Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        while thread.is_alive():         # until Ctrl-C, SIGTERM, --duration or a failure
            thread.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        monitor.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5.0)
        monitor.close()
    if monitor.error is not None:
        if isinstance(monitor.error, UserError):
            raise monitor.error
        raise UserError(f"sampling stopped: {monitor.error!r}", 1)
    return 0
