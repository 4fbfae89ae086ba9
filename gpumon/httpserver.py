"""A small HTTP/1.1 server that idle or vanishing clients cannot exhaust.

One thread (``serve_forever``) owns a selector over the listening socket and every idle
connection; a fixed pool of worker threads answers the requests that arrive. So:

- threads are bounded (``workers`` + 1) however many clients connect;
- held connections are bounded (``max_connections``, and at most half the file-descriptor
  limit): at the cap, or when accept() finds no descriptor left, a new client evicts the one
  idle longest, so a flood of idle connections cannot lock the scraper out, and the accept
  loop never spins on a descriptor it cannot take;
- a connection must deliver a whole request header within ``idle_timeout`` of being accepted
  or answered, else it is closed; a slow client never holds a worker (its partial header
  waits in the selector), nor does a TLS handshake;
- nor does a client that does not read: a worker writes what the socket takes and leaves the
  rest of the answer to wait in the selector until the client reads (closed if that has not
  happened within ``WRITE_TIMEOUT_S``); a connection's next request is not read until its
  answer is written, and a worker answers at most ``REQUESTS_PER_TURN`` pipelined requests of
  one connection before the others waiting have their turn;
- a client that goes away (reset, broken pipe, a timed-out write, a failed TLS handshake) is
  closed without a word: a scrape timeout or a TCP health check is no news.

``http.server.BaseHTTPRequestHandler`` parses each request from the buffered header, and the
answer leaves in one send (no Nagle delay between the headers and the body).
"""
from __future__ import annotations

import collections
import io
import queue
import re
import resource
import selectors
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Optional

# Prometheus scrapes every 15-60 s and reconnects when its kept-alive connection was closed, so
# holding an idle connection longer buys nothing; a few seconds also bound a slow header.
IDLE_CONNECTION_S = 5.0
# Connections held at once: a node has one or two Prometheus servers and a health checker; the
# exporter's load test runs 50 concurrent scrapers. Also never above half the fd limit.
MAX_CONNECTIONS = 256
# Worker threads: answering takes the GIL anyway; a few more let writes to slow clients and TLS
# handshakes wait without stopping the others.
WORKERS = 8
# Backlog of the listening socket: 50 scrapers connecting at once must not be dropped (the
# stdlib default of 5 makes the kernel drop SYNs, and the client then retries after 1 s).
LISTEN_BACKLOG = 128
# An answer must be written within this long, or the client is taken for gone.
WRITE_TIMEOUT_S = 10.0
# Pipelined requests of one connection a worker answers before the next connection's turn.
REQUESTS_PER_TURN = 8
# Bytes given to one send() call: a TLS record's worth (a TLS socket that could not take them
# must be given the same bytes again).
SEND_CHUNK = 16 * 1024
# A request header larger than this is no scrape: the connection is closed.
MAX_HEADER_BYTES = 64 * 1024
# How often idle connections are checked for their deadline (and a paused accept resumed).
SWEEP_S = 0.25

_HEADER_END = re.compile(rb"\r?\n\r?\n")
_LISTEN, _WAKE = "listen", "wake"


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """``limit``, or half the soft file-descriptor limit where that is lower."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return limit
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(8, min(limit, soft // 2))


class RequestHandler(BaseHTTPRequestHandler):
    """One request, parsed from its header bytes; the answer collects in ``wfile``."""
    protocol_version = "HTTP/1.1"      # keep-alive: Prometheus reuses its connection

    def __init__(self, head: bytes, client_address, server):
        # Not BaseRequestHandler's __init__, which would read and write the socket itself.
        self.rfile = io.BytesIO(head)
        self.wfile = io.BytesIO()
        self.client_address = client_address
        self.server = server
        self.request = None
        self.close_connection = True

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok and (self.headers.get("Content-Length", "0").strip() not in ("", "0")
                   or "Transfer-Encoding" in self.headers):
            self.close_connection = True   # a body is never read: it must not pass for a request
        return ok

    def log_message(self, format, *args):  # noqa: A002 - quiet: a scrape a second is no news
        pass


class _Conn:
    __slots__ = ("sock", "addr", "buf", "deadline", "ready", "want_write", "out", "last")

    def __init__(self, sock, addr, deadline: float, ready: bool):
        self.sock, self.addr, self.buf = sock, addr, bytearray()
        self.deadline, self.ready, self.want_write = deadline, ready, False
        self.out = memoryview(b"")       # the answer not yet written
        self.last = False                # close once ``out`` is written


# What a worker's turn at a connection ends in.
_CLOSE, _PARK, _AGAIN = "close", "park", "again"


class HttpServer:
    """``handler_class`` (a RequestHandler) answers each request; see the module's docstring."""

    def __init__(self, address: tuple, handler_class, *, family=socket.AF_INET,
                 ssl_context: Optional[ssl.SSLContext] = None, workers: int = WORKERS,
                 max_connections: Optional[int] = None,
                 idle_timeout: float = IDLE_CONNECTION_S):
        self.handler_class = handler_class
        self.ssl_context = ssl_context
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections or connection_cap()
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(address)
            self.listener.listen(LISTEN_BACKLOG)
        except BaseException:
            self.listener.close()
            raise
        self.listener.setblocking(False)
        self.server_address = self.listener.getsockname()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self.listener, selectors.EVENT_READ, _LISTEN)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._lock = threading.Lock()
        self._open: set = set()                       # every connection held (under _lock)
        self._parked: dict = {}                       # idle ones, in the selector (loop only)
        self._returned: collections.deque = collections.deque()   # workers -> loop
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._accept_paused = False
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()
        self._reported: set = set()
        self._workers = [threading.Thread(target=self._work, name=f"gpumon-http-{i}",
                                          daemon=True) for i in range(workers)]
        for t in self._workers:
            t.start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def held(self) -> int:
        """Connections held now."""
        with self._lock:
            return len(self._open)

    # -- the selector thread ---------------------------------------------------------------
    def serve_forever(self, poll_interval: float = SWEEP_S) -> None:
        self._stopped.clear()
        try:
            next_sweep = 0.0
            while not self._stopping:
                for key, _ in self._sel.select(min(poll_interval, SWEEP_S)):
                    if key.data is _LISTEN:
                        self._accept()
                    elif key.data is _WAKE:
                        self._take_returned()
                    elif key.data in self._parked:
                        self._sel.unregister(key.fileobj)
                        del self._parked[key.data]
                        self._jobs.put(key.data)
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + SWEEP_S
        finally:
            self._stopped.set()

    def _accept(self) -> None:
        for _ in range(64):           # then back to the selector: answering goes on meanwhile
            try:
                sock, addr = self.listener.accept()
            except BlockingIOError:
                return
            except OSError:           # out of descriptors (EMFILE), or the client left already
                if not self._evict_oldest():
                    self._sel.unregister(self.listener)    # retried at the next sweep
                    self._accept_paused = True
                    return
                continue
            if len(self._open) >= self.max_connections and not self._evict_oldest():
                sock.close()
                continue
            self._open_conn(sock, addr)

    def _open_conn(self, sock, addr) -> None:
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.ssl_context is not None:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_side=True,
                                                    do_handshake_on_connect=False)
            except (OSError, ValueError):
                sock.close()
                return
        conn = _Conn(sock, addr, time.monotonic() + self.idle_timeout,
                     ready=self.ssl_context is None)
        with self._lock:
            self._open.add(conn)
        self._park(conn)

    def _park(self, conn: _Conn) -> None:
        try:
            self._sel.register(conn.sock, selectors.EVENT_WRITE if conn.want_write
                               else selectors.EVENT_READ, conn)
        except (OSError, ValueError):    # closed meanwhile
            self._close(conn)
            return
        self._parked[conn] = None

    def _unpark(self, conn: _Conn) -> None:
        del self._parked[conn]
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, OSError, ValueError):
            pass

    def _evict_oldest(self) -> bool:
        if not self._parked:
            return False
        conn = min(self._parked, key=lambda c: c.deadline)
        self._unpark(conn)
        self._close(conn)
        return True

    def _sweep(self, now: float) -> None:
        for conn in [c for c in self._parked if c.deadline <= now]:
            self._unpark(conn)
            self._close(conn)
        if self._accept_paused:
            self._accept_paused = False
            self._sel.register(self.listener, selectors.EVENT_READ, _LISTEN)

    def _take_returned(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while self._returned:
            conn = self._returned.popleft()
            if self._stopping:
                self._close(conn)
            else:
                self._park(conn)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:              # full: the loop is awake anyway; closed: shutting down
            pass

    # -- the workers -------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            conn = self._jobs.get()
            if conn is None:
                return
            try:
                then = self._serve(conn)
            except OSError:          # the client went away: reset, broken pipe, TLS, timeout
                then = _CLOSE
            except Exception as exc:  # a bug: one line per kind, never a traceback per request
                then = _CLOSE
                if type(exc) not in self._reported:
                    self._reported.add(type(exc))
                    print(f"gpumon: answering an HTTP request failed: {exc!r}", file=sys.stderr,
                          flush=True)
            if then == _CLOSE or self._stopping:
                self._close(conn)
            elif then == _AGAIN:     # more requests wait in its buffer: behind the others
                self._jobs.put(conn)
            else:
                self._returned.append(conn)
                self._wake()

    def _serve(self, conn: _Conn) -> str:
        """One turn at a connection: finish its handshake and its pending answer, read what
        has arrived, answer the whole requests in it; _CLOSE, _PARK (wait in the selector)
        or _AGAIN (requests wait in its buffer)."""
        conn.want_write = False
        if not conn.ready and not self._handshake(conn):
            return _PARK
        if conn.out:
            if not self._flush(conn):
                return _PARK
            if conn.last:
                return _CLOSE
            conn.deadline = time.monotonic() + self.idle_timeout
        if not self._receive(conn):
            return _CLOSE
        return self._answer(conn)

    def _handshake(self, conn: _Conn) -> bool:
        """Whether the TLS handshake is done (else it waits for the client)."""
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLWantWriteError:
            conn.want_write = True
            return False
        conn.ready = True
        return True

    def _receive(self, conn: _Conn) -> bool:
        """What has arrived, into ``conn.buf`` (up to MAX_HEADER_BYTES and one read more);
        False once the client hung up."""
        while len(conn.buf) <= MAX_HEADER_BYTES:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                break
            except ssl.SSLWantWriteError:
                conn.want_write = True
                break
            if not data:
                return False
            conn.buf += data
        return True

    def _answer(self, conn: _Conn) -> str:
        """Answers the whole requests in ``conn.buf``, REQUESTS_PER_TURN at most, each
        written before the next is read."""
        for _ in range(REQUESTS_PER_TURN):
            end = _HEADER_END.search(conn.buf)
            if end is None:          # wait for the rest; a header past the limit is no scrape
                return _PARK if len(conn.buf) <= MAX_HEADER_BYTES else _CLOSE
            head = bytes(conn.buf[:end.end()])
            del conn.buf[:end.end()]
            handler = self.handler_class(head, conn.addr, self)
            handler.handle_one_request()
            conn.out, conn.last = handler.wfile.getbuffer(), handler.close_connection
            conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
            if not self._flush(conn):
                return _PARK         # the client reads slowly, or not at all
            if conn.last:
                return _CLOSE
            conn.deadline = time.monotonic() + self.idle_timeout
        return _AGAIN if _HEADER_END.search(conn.buf) else _PARK

    def _flush(self, conn: _Conn) -> bool:
        """Writes what the socket takes of ``conn.out``; True once all of it is written."""
        while conn.out:
            try:
                sent = conn.sock.send(conn.out[:SEND_CHUNK])
            except (BlockingIOError, ssl.SSLWantWriteError):
                conn.want_write = True
                return False
            except ssl.SSLWantReadError:      # TLS wants the client's bytes first
                return False
            conn.out = conn.out[sent:]
        return True

    def _close(self, conn: _Conn) -> None:
        with self._lock:
            self._open.discard(conn)
        try:
            conn.sock.close()
        except OSError:
            pass

    # -- stopping ----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop serve_forever (from another thread) and wait until it returns."""
        self._stopping = True
        self._wake()
        self._stopped.wait()

    def server_close(self) -> None:
        self._stopping = True
        for _ in self._workers:
            self._jobs.put(None)
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            self._close(conn)
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()
