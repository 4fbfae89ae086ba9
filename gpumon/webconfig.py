"""``gpumon export --web-config FILE``: TLS and basic auth, in the file format of the Prometheus
exporter toolkit (the one node_exporter reads with ``--web.config.file``):

    tls_server_config:
      cert_file: server.crt          # relative paths are taken from the file's folder
      key_file: server.key
    basic_auth_users:
      alice: $2y$10$...              # bcrypt: htpasswd -nBC 10 "" | tr -d ':\\n'

Understood: ``tls_server_config`` with ``cert_file``, ``key_file``, ``client_ca_file``,
``client_auth_type`` (``NoClientCert``, ``VerifyClientCertIfGiven``,
``RequireAndVerifyClientCert``), ``min_version``, ``max_version`` (``TLS12``, ``TLS13``); and
``basic_auth_users``. Any other setting is refused with a line naming it, never ignored: a
security setting that silently does nothing is worse than none. The file is read once, at
start. It is read as the block-style YAML the toolkit's examples use (mappings, lists,
quoted or plain scalars, comments); flow style, anchors and multi-line strings are refused.

Passwords are checked with the ``bcrypt`` package (``pip install 'gpumon-dl[webconfig]'``) or,
without it, the C library's crypt(3) where that knows bcrypt (glibc with libxcrypt, Python
3.12 and older). A pair that passed once is remembered (as a hash), as the toolkit does, so
a scrape costs one bcrypt only at its first request.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import ssl
import threading
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from gpumon.errors import UserError

_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version",
             "max_version"}
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_BCRYPT = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")
# bcrypt("gpumon") at cost 4: tells whether crypt(3) knows bcrypt.
_PROBE = "$2b$04$gpumonprobesaltgpumonOo7HcxTqdy3p/t2WI4Uqu8g9OHLuz4wi"
# Remembered good (user, password, hash) digests; past this many the memory starts afresh.
_CACHE_MAX = 1024


@dataclass(frozen=True)
class WebConfig:
    ssl_context: Optional[ssl.SSLContext]
    auth: Optional["BasicAuth"]


def load_web_config(path: str) -> WebConfig:
    """The TLS context and basic auth a web config file asks for; UserError (one line) if
    the file cannot be read, is malformed, or asks for what gpumon does not do."""
    def fail(msg: str):
        raise UserError(f"--web-config {path}: {msg}", 2)
    try:
        with open(path, encoding="utf-8") as f:
            doc = parse_yaml(f.read())
    except OSError as exc:
        fail(exc.strerror or str(exc))
    except ValueError as exc:
        fail(str(exc))
    doc = doc or {}
    if not isinstance(doc, dict):
        fail("expected a mapping with tls_server_config and/or basic_auth_users")
    for key in doc:
        if key not in ("tls_server_config", "basic_auth_users"):
            fail(f"{key}: not supported by gpumon (it reads tls_server_config and "
                 "basic_auth_users)")
    base = os.path.dirname(os.path.abspath(path))
    ctx = _tls_context(doc.get("tls_server_config"), base, fail)
    auth = _basic_auth(doc.get("basic_auth_users"), fail)
    return WebConfig(ctx, auth)


def _tls_context(tls, base: str, fail) -> Optional[ssl.SSLContext]:
    if tls is None:
        return None
    if not isinstance(tls, dict):
        fail("tls_server_config: expected a mapping")
    for key in tls:
        if key not in _TLS_KEYS:
            fail(f"tls_server_config.{key}: not supported by gpumon (it reads "
                 f"{', '.join(sorted(_TLS_KEYS))})")
    if not tls.get("cert_file") or not tls.get("key_file"):
        fail("tls_server_config needs cert_file and key_file")

    def file_of(key):
        return os.path.join(base, os.path.expanduser(str(tls[key])))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for key, attr, default in (("min_version", "minimum_version", "TLS12"),
                               ("max_version", "maximum_version", "TLS13")):
        name = str(tls.get(key) or default)
        if name not in _TLS_VERSIONS:
            fail(f"tls_server_config.{key}: expected one of {', '.join(_TLS_VERSIONS)}, "
                 f"got {name!r}")
        setattr(ctx, attr, _TLS_VERSIONS[name])
    try:
        ctx.load_cert_chain(file_of("cert_file"), file_of("key_file"))
    except (OSError, ssl.SSLError) as exc:
        fail(f"cannot load cert_file/key_file: {exc.strerror or exc}")
    mode = str(tls.get("client_auth_type") or "NoClientCert")
    if mode not in _CLIENT_AUTH:
        fail(f"tls_server_config.client_auth_type: gpumon supports {', '.join(_CLIENT_AUTH)}, "
             f"got {mode!r} (Python's ssl verifies every client certificate it asks for)")
    if _CLIENT_AUTH[mode] != ssl.CERT_NONE:
        if not tls.get("client_ca_file"):
            fail(f"tls_server_config.client_auth_type {mode} needs client_ca_file")
        try:
            ctx.load_verify_locations(file_of("client_ca_file"))
        except (OSError, ssl.SSLError) as exc:
            fail(f"cannot load client_ca_file: {exc.strerror or exc}")
        ctx.verify_mode = _CLIENT_AUTH[mode]
    return ctx


def _basic_auth(users, fail) -> Optional["BasicAuth"]:
    if not users:
        return None
    if not isinstance(users, dict):
        fail("basic_auth_users: expected a mapping of user names to bcrypt hashes")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.match(hashed):
            fail(f"basic_auth_users.{user}: not a bcrypt hash ($2y$10$... from "
                 "htpasswd -nBC 10 \"\" | tr -d ':\\n')")
    check = bcrypt_checker()
    if check is None:
        fail("checking basic_auth_users passwords needs bcrypt: pip install 'gpumon-dl[webconfig]'")
    return BasicAuth({str(u): h for u, h in users.items()}, check)


def bcrypt_checker() -> Optional[Callable[[str, str], bool]]:
    """check(password, hash) from the bcrypt package, else crypt(3); None if neither has it."""
    try:
        import bcrypt
    except ImportError:
        pass
    else:
        def check(password: str, hashed: str) -> bool:
            try:
                return bcrypt.checkpw(password.encode("utf-8"), hashed.encode("ascii"))
            except ValueError:
                return False
        return check
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
    except ImportError:
        return None
    try:
        if crypt.crypt("gpumon", _PROBE) != _PROBE:
            return None
    except OSError:
        return None
    return lambda password, hashed: hmac.compare_digest(crypt.crypt(password, hashed) or "",
                                                        hashed)


class BasicAuth:
    """``check(authorization_header)``: whether it names a user of ``users`` (name -> bcrypt
    hash) with the right password."""

    def __init__(self, users: dict, check: Callable[[str, str], bool]):
        self.users = users
        self._check = check
        self._good: set = set()
        self._lock = threading.Lock()
        # An unknown user costs one bcrypt as well: timing does not tell which names exist.
        self._decoy = next(iter(users.values()))

    def check(self, header: Optional[str]) -> bool:
        if not header or header[:6].lower() != "basic ":
            return False
        try:
            user, sep, password = (base64.b64decode(header[6:].strip(), validate=True)
                                   .decode("utf-8").partition(":"))
        except ValueError:            # binascii.Error and UnicodeDecodeError are ValueErrors
            return False
        hashed = self.users.get(user)
        key = hashlib.sha256("\0".join((user, password, hashed or "")).encode()).digest()
        with self._lock:
            if hashed is not None and key in self._good:
                return True
        ok = self._check(password, hashed or self._decoy) and hashed is not None and bool(sep)
        if ok:
            with self._lock:
                if len(self._good) >= _CACHE_MAX:
                    self._good.clear()
                self._good.add(key)
        return ok


# -- the file (YAML, as the toolkit reads it) -------------------------------------------
def parse_yaml(text: str):
    """The document of a web config file (PyYAML's safe loader); ValueError with the line."""
    try:
        import yaml
    except ImportError:
        raise UserError("--web-config needs PyYAML: pip install 'gpumon-dl[webconfig]'", 2) \
            from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{where}{problem}") from None
