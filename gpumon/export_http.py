"""The exporter's HTTP side: where it listens, and what it answers.

- ``/metrics``: the text the ``metrics`` callable renders, gzip-compressed when the scraper
  accepts it (Prometheus always asks); ``/healthz``: 200 "ok" while the sampler runs, else 503;
  ``/``: a link to /metrics.
- With a web config (gpumon.webconfig), TLS and basic auth; without one, plain HTTP, and a
  warning whenever the address is reachable from the network (``exposure_warning``).
- Connections, threads and idle time are bounded by gpumon.httpserver.
"""
from __future__ import annotations

import gzip
import ipaddress
import socket
from typing import Callable, Optional

from gpumon import __version__
from gpumon.errors import UserError
from gpumon.httpserver import HttpServer, RequestHandler
from gpumon.webconfig import BUSY, OK

# gpumon's default port: beside dcgm-exporter's 9400 (so one firewall rule can cover both),
# never on it, so both exporters can run on one node.
DEFAULT_PORT = 9402
# Whatever listens on the network binds to loopback unless the user says otherwise (PRODUCT.md).
DEFAULT_ADDR = "127.0.0.1"

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
# zlib level 1: 8 GPUs' ~50 KB of text shrink ~15x at half the CPU of the default level 6
# (which gains ~2x more on bytes nobody pays for on a cluster network).
GZIP_LEVEL = 1


def parse_listen(text: str) -> tuple[str, int]:
    """'ADDR:PORT', '[v6]:PORT' or ':PORT' (all addresses) -> (host, port); UserError if bad."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise UserError(f"--listen: expected [ADDR]:PORT, got {text!r}", 2)
        port_s = rest[1:]
    else:
        host, sep, port_s = text.rpartition(":")
        if not sep:
            raise UserError(f"--listen: expected ADDR:PORT, e.g. 127.0.0.1:{DEFAULT_PORT} or "
                            f"0.0.0.0:{DEFAULT_PORT}, got {text!r}", 2)
        if ":" in host:
            raise UserError(f"--listen: write an IPv6 address in brackets, e.g. [::1]:"
                            f"{DEFAULT_PORT}, got {text!r}", 2)
    return host if host else "0.0.0.0", parse_port(port_s, "--listen")


def parse_port(text: str, what: str = "--port") -> int:
    try:
        port = int(text)
    except (TypeError, ValueError):
        raise UserError(f"{what}: not a port number: {text!r}", 2) from None
    if not 0 <= port <= 65535:
        raise UserError(f"{what}: port must be 0-65535, got {port}", 2)
    return port


def format_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(ip: str) -> bool:
    """Whether a bound address is reachable from this host only."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def exposure_warning(ip: str, port: int, *, tls: bool, auth: bool) -> Optional[str]:
    """The line to print (even with -q) when the exporter is reachable from the network
    without TLS or without authentication; None when it is not, or has both."""
    if is_loopback(ip) or (tls and auth):
        return None
    where = (f"every interface ({format_addr(ip, port)})" if ip in ("0.0.0.0", "::")
             else format_addr(ip, port))
    missing = " and ".join(w for w, on in (("without TLS", tls), ("without authentication",
                                                                   auth)) if not on)
    return (f"gpumon: warning: listening on {where}, {missing}: anyone who can reach this port "
            "can read the metrics; --web-config adds TLS and basic auth (docs/fleet.md)")


def accepts_gzip(header: Optional[str]) -> bool:
    """Whether an Accept-Encoding header allows gzip (``gzip;q=0`` refuses it)."""
    for part in (header or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().lower()
            return not (q.startswith("q=") and _float(q[2:]) == 0.0)
    return False


def _float(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


class MetricsHandler(RequestHandler):
    server_version = f"gpumon/{__version__}"

    def do_GET(self):  # noqa: N802 (http.server's names)
        self._route(send_body=True)

    def do_HEAD(self):  # noqa: N802
        self._route(send_body=False)

    def _route(self, send_body: bool) -> None:
        srv = self.server
        if srv.auth is not None and not self._authorized(send_body):
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = srv.metrics()
            except Exception as exc:   # a bug must not kill the server: answer 500, say why
                self._send(500, f"gpumon: collecting metrics failed: {exc!r}\n".encode(), TEXT,
                           send_body)
                return
            extra = {"Vary": "Accept-Encoding"}
            if accepts_gzip(self.headers.get("Accept-Encoding")):
                body = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
                extra["Content-Encoding"] = "gzip"
            self._send(200, body, CONTENT_TYPE, send_body, extra)
        elif path == "/healthz":
            ok = srv.healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"sampler stopped\n", TEXT,
                       send_body)
        elif path == "/":
            self._send(200, b"<html><head><title>gpumon exporter</title></head><body>"
                       b"<h1>gpumon exporter</h1><p><a href=\"/metrics\">/metrics</a> "
                       b"<a href=\"/healthz\">/healthz</a></p></body></html>\n",
                       "text/html; charset=utf-8", send_body)
        else:
            self._send(404, b"not found; try /metrics\n", TEXT, send_body)

    def _authorized(self, send_body: bool) -> bool:
        """Whether the request's credentials pass; if not, the 401 (or 429, when passwords
        not yet verified are being checked as fast as the budget allows) is sent."""
        said = self.server.auth.verify(self.headers.get("Authorization"),
                                       str(self.client_address[0]))
        if said == BUSY:
            self._send(429, b"too many logins being checked; try again in a second\n", TEXT,
                       send_body, {"Retry-After": "1"})
        elif said != OK:
            self._send(401, b"unauthorized\n", TEXT, send_body,
                       {"WWW-Authenticate": 'Basic realm="gpumon", charset="UTF-8"'})
        return said == OK

    def _send(self, code: int, body: bytes, ctype: str, send_body: bool,
              headers: Optional[dict] = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if send_body:
            self.wfile.write(body)


class MetricsServer(HttpServer):
    """/metrics, /healthz and / over HTTP or HTTPS, optionally behind basic auth.

    ``metrics()`` returns the text-format bytes, ``healthy()`` whether the sampler runs;
    ``auth`` has ``verify(authorization_header)`` -> OK, DENIED or BUSY
    (gpumon.webconfig.BasicAuth)."""

    def __init__(self, host: str, port: int, metrics: Callable[[], bytes],
                 healthy: Callable[[], bool] = lambda: True, *, ssl_context=None, auth=None,
                 **kw):
        self.metrics, self.healthy, self.auth = metrics, healthy, auth
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            super().__init__((host, port), MetricsHandler, family=family,
                             ssl_context=ssl_context, **kw)
        except OSError as exc:
            raise UserError(f"cannot listen on {format_addr(host, port)}: "
                            f"{exc.strerror or exc}", 1) from None
