"""`gpumon export`: a Prometheus /metrics endpoint (127.0.0.1 by default)."""
from __future__ import annotations

import os
import socket
import sys
import threading

from gpumon.commands.common import (LostNotices, add_sampling_options, lost_text,
                                    make_detector, open_source, sigterm_event)
from gpumon.errors import UserError
from gpumon.monitor import Monitor
from gpumon.commands.helptext import help_kwargs


def register(sub) -> None:
    from gpumon.export_http import DEFAULT_ADDR, DEFAULT_PORT
    p = sub.add_parser(
        "export",
        description="Serve /metrics in the Prometheus text format: the standard GPU fields under "
        "dcgm-exporter's names and labels, plus gpumon's verdict per job and its evidence; "
        "/healthz answers 'ok' while sampling runs. "
        f"Listens on {DEFAULT_ADDR}:{DEFAULT_PORT} unless told otherwise (dcgm-exporter "
        "uses 9400). Needs prometheus_client: pip install 'gpumon-dl[export]'.",
        **help_kwargs("export"))
    where = p.add_mutually_exclusive_group()
    where.add_argument("--listen", metavar="ADDR:PORT", default=None,
                       help=f"address and port to listen on (default {DEFAULT_ADDR}:"
                       f"{DEFAULT_PORT}); 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT} "
                       "for every interface (a warning says so unless --web-config sets up "
                       "TLS and basic auth)")
    where.add_argument("--port", metavar="PORT", default=None,
                       help=f"port on {DEFAULT_ADDR} (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--web-config", metavar="FILE", default=None,
                   help="TLS and basic auth from a Prometheus exporter-toolkit web config file "
                   "(YAML: tls_server_config cert_file/key_file, basic_auth_users with bcrypt "
                   "hashes); see docs/fleet.md")
    p.add_argument("--hostname", metavar="NAME", default=None,
                   help="value of the Hostname label (default: $NODE_NAME, else this host's "
                   "name)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no status line on stderr (a warning about an exposed port still shows)")
    add_sampling_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from gpumon.export import MonitorCollector, make_registry, render, require_prometheus_client
    from gpumon.export_http import (DEFAULT_ADDR, DEFAULT_PORT, MetricsServer,
                                    exposure_warning, format_addr, parse_listen, parse_port)
    require_prometheus_client()          # before opening NVML: say what is missing first
    if args.listen is not None:
        host, port = parse_listen(args.listen)
    else:
        host = DEFAULT_ADDR
        port = parse_port(args.port) if args.port is not None else DEFAULT_PORT
    ssl_context = auth = None
    if args.web_config:
        from gpumon.webconfig import load_web_config
        web = load_web_config(args.web_config)
        ssl_context, auth = web.ssl_context, web.auth
    hostname = args.hostname or os.environ.get("NODE_NAME") or socket.gethostname()
    stop = sigterm_event()
    source = open_source(args)
    try:
        infos = source.gpu_infos()       # once: identity labels never cost a scrape an NVML call
        monitor = Monitor(source, interval=args.interval, detector=make_detector(),
                          duration=args.duration)
        monitor.listeners.append(LostNotices(monitor, "exporting", quiet=args.quiet,
                                             every_lost=lambda: _every_lost(monitor)))
        monitor.step()                   # a first reading before the port opens
        collector = MonitorCollector(monitor, infos, hostname)
        registry = make_registry(collector)
        server = MetricsServer(host, port, lambda: render(registry.collect()),
                               collector.sampler_running, ssl_context=ssl_context, auth=auth)
        thread = collector.thread = monitor.start_thread()
    except BaseException:
        source.close()
        raise
    serving = threading.Thread(target=server.serve_forever, name="gpumon-http", daemon=True)
    serving.start()
    bound = server.server_address[0]
    warning = exposure_warning(bound, server.port, tls=ssl_context is not None,
                               auth=auth is not None)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    if not args.quiet:
        label = "SIMULATED " if source.kind == "sim" else ""
        scheme = "https" if ssl_context is not None else "http"
        print(f"gpumon: serving {len(infos)} {label}GPU(s) at {scheme}://"
              f"{format_addr(host, server.port)}/metrics every {args.interval:g} s"
              f"{' (basic auth)' if auth else ''}; Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        while thread.is_alive() and not stop.is_set():   # Ctrl-C, SIGTERM, --duration, failure
            stop.wait(0.5)
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


def _every_lost(monitor) -> None:
    """Said once: the exporter goes on serving, without GPUs or verdicts, gpumon_up at 0."""
    print(f"gpumon: {lost_text(monitor.latest.lost)}: no GPU is left; still serving, with "
          "gpumon_up 0 and no verdict", file=sys.stderr, flush=True)
