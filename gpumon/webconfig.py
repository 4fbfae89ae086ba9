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
security setting that silently does nothing is worse than none. For the same reason a file
that asks for protection and yields none is refused: an empty file, an empty section
(``basic_auth_users: {}``, a bare ``tls_server_config:``), a key given twice in one mapping
(the second, empty ``basic_auth_users:`` would replace the first), ``min_version`` above
``max_version``, and a key file that wants a pass phrase (never asked for on the terminal).
The file is read once, at start, with PyYAML's safe loader.

Passwords are checked with the ``bcrypt`` package (``pip install 'gpumon-dl[webconfig]'``) or,
without it, the C library's crypt(3) where that knows bcrypt (glibc with libxcrypt, Python
3.12 and older). A pair that passed once is remembered (as a hash), as the toolkit does, so
a scrape costs one bcrypt only at its first request; the checks of other pairs are bounded
(one at a time, half the time at most: BasicAuth), the rest answered 429 at once.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import ssl
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from gpumon.errors import UserError

_SECTIONS = {"tls_server_config": "TLS needs cert_file and key_file",
             "basic_auth_users": "it names no user"}
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
# The share of the time that checking passwords not remembered may take (one at a time).
UNVERIFIED_SHARE = 0.5
# After FREE_WRONG wrong passwords in a row from an address (a typo, a first try), its next
# unverified one waits HOLD_S, doubled at each wrong one more, up to HOLD_MAX_S; a right one
# clears it.
FREE_WRONG, HOLD_S, HOLD_MAX_S = 2, 1.0, 30.0


@dataclass(frozen=True)
class WebConfig:
    ssl_context: Optional[ssl.SSLContext]
    auth: Optional["BasicAuth"]


def load_web_config(path: str) -> WebConfig:
    """The TLS context and basic auth a web config file asks for; UserError (one line) if
    the file cannot be read, is malformed, asks for what gpumon does not do, or asks for
    protection and yields none (an empty file, an empty section, a key given twice)."""
    def fail(msg: str):
        raise UserError(f"--web-config {path}: {msg}", 2)
    try:
        with open(path, encoding="utf-8") as f:
            doc = parse_yaml(f.read())
    except OSError as exc:
        fail(exc.strerror or str(exc))
    except ValueError as exc:
        fail(str(exc))
    _check_sections(doc, fail)
    base = os.path.dirname(os.path.abspath(path))
    ctx = _tls_context(doc.get("tls_server_config"), base, fail)
    auth = _basic_auth(doc.get("basic_auth_users"), fail)
    return WebConfig(ctx, auth)


def _check_sections(doc, fail) -> None:
    """Refuses a document that is empty, not a mapping, has a section gpumon does not read,
    or an empty one: each asks for protection and would yield none."""
    if doc is None or doc == {}:
        fail("the file is empty: it asks for nothing (neither tls_server_config nor "
             "basic_auth_users); leave --web-config out to serve without TLS or auth")
    if not isinstance(doc, dict):
        fail("expected a mapping with tls_server_config and/or basic_auth_users")
    for key, value in doc.items():
        if key not in _SECTIONS:
            fail(f"{key}: not supported by gpumon (it reads tls_server_config and "
                 "basic_auth_users)")
        if value is None or value == {} or value == []:
            fail(f"{key} is empty: {_SECTIONS[key]}, so it would protect nothing")


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
    lowest, highest = (_tls_version(tls, key, default, fail)
                       for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")))
    if lowest > highest:
        fail(f"tls_server_config: min_version {tls.get('min_version') or 'TLS12'} is above "
             f"max_version {tls.get('max_version') or 'TLS13'}: no client could connect")
    ctx.minimum_version, ctx.maximum_version = lowest, highest
    _load_pair(ctx, tls, file_of, fail)
    _client_auth(ctx, tls, file_of, fail)
    return ctx


def _load_pair(ctx: ssl.SSLContext, tls: dict, file_of, fail) -> None:
    """cert_file and key_file onto ``ctx``; a key that wants a pass phrase is refused (OpenSSL
    would otherwise ask for it on the terminal, or fail without saying why)."""
    try:
        ctx.load_cert_chain(file_of("cert_file"), file_of("key_file"), password=_no_passphrase)
    except _Encrypted:
        fail(f"key_file {tls['key_file']} is protected by a pass phrase, which gpumon cannot "
             "ask for: give it the key without one (openssl pkey -in KEY -out KEY.plain)")
    except (OSError, ssl.SSLError) as exc:
        fail(f"cannot load cert_file/key_file: {exc.strerror or exc}")


def _client_auth(ctx: ssl.SSLContext, tls: dict, file_of, fail) -> None:
    """client_auth_type and client_ca_file onto ``ctx``."""
    mode = str(tls.get("client_auth_type") or "NoClientCert")
    if mode not in _CLIENT_AUTH:
        fail(f"tls_server_config.client_auth_type: gpumon supports {', '.join(_CLIENT_AUTH)}, "
             f"got {mode!r} (Python's ssl verifies every client certificate it asks for)")
    if _CLIENT_AUTH[mode] == ssl.CERT_NONE:
        return
    if not tls.get("client_ca_file"):
        fail(f"tls_server_config.client_auth_type {mode} needs client_ca_file")
    try:
        ctx.load_verify_locations(file_of("client_ca_file"))
    except (OSError, ssl.SSLError) as exc:
        fail(f"cannot load client_ca_file: {exc.strerror or exc}")
    ctx.verify_mode = _CLIENT_AUTH[mode]


class _Encrypted(Exception):
    """The key file asks for a pass phrase."""


def _no_passphrase():
    raise _Encrypted        # instead of OpenSSL's prompt on the terminal


def _tls_version(tls: dict, key: str, default: str, fail) -> ssl.TLSVersion:
    name = str(tls.get(key) or default)
    if name not in _TLS_VERSIONS:
        fail(f"tls_server_config.{key}: expected one of {', '.join(_TLS_VERSIONS)}, "
             f"got {name!r}")
    return _TLS_VERSIONS[name]


def _basic_auth(users, fail) -> Optional["BasicAuth"]:
    if users is None:
        return None
    if not isinstance(users, dict):
        fail("basic_auth_users: expected a mapping of user names to bcrypt hashes")
    for user, hashed in users.items():
        if ":" in str(user):
            fail(f"basic_auth_users.{user}: a user name with ':' can never log in (basic auth "
                 "ends the name at the first ':')")
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


# What BasicAuth.verify answers.
OK, DENIED, BUSY = "ok", "denied", "busy"


class BasicAuth:
    """``verify(authorization_header)``: OK when it names a user of ``users`` (name -> bcrypt
    hash) with the right password, DENIED when not, BUSY when its password would need a check
    that the budget for unverified passwords cannot take now (answer 429, try again later).

    A pair that passed is remembered (the digest of user, password and hash: no other pair
    matches it; at most _CACHE_MAX, then the memory starts afresh), so a scraper costs one
    bcrypt at its first request. Pairs not remembered are checked one at a time, and such
    checks take at most UNVERIFIED_SHARE of the time: each is followed by a rest in
    proportion to its cost. So clients guessing passwords against a costly hash cannot take
    every worker, nor (crypt(3) holds Python's lock while it works) the whole process. And an
    address that gave wrong passwords waits (HOLD_S, doubling) before its next one is
    checked, so guessers cannot keep the one check to themselves: a newcomer from another
    address gets its turn. A remembered pair passes from any address, held or not."""

    def __init__(self, users: dict, check: Callable[[str, str], bool]):
        self.users = users
        self._check = check
        self._good: set = set()
        self._lock = threading.Lock()
        self._checking = threading.Lock()          # held by the one check under way
        self._rest_until = 0.0
        self._held: dict = {}                      # address -> (until, wrong ones in a row)
        # An unknown user costs one bcrypt as well: timing does not tell which names exist.
        self._decoy = next(iter(users.values()))

    def check(self, header: Optional[str]) -> bool:
        return self.verify(header) == OK

    def verify(self, header: Optional[str], address: str = "") -> str:
        pair = _credentials(header)
        if pair is None:
            return DENIED
        user, password = pair
        hashed = self.users.get(user)
        key = hashlib.sha256(repr((user, password, hashed)).encode()).digest()
        with self._lock:
            if hashed is not None and key in self._good:
                return OK
            if time.monotonic() < self._held.get(address, (0.0, 0))[0]:
                return BUSY
        ok = self._checked(password, hashed)
        if ok is None:
            return BUSY
        with self._lock:
            self._judged(address, key, ok)
        return OK if ok else DENIED

    def _judged(self, address: str, key: bytes, ok: bool) -> None:
        """Remembers a right pair, or holds the address of a wrong one (under _lock)."""
        if ok:
            if len(self._good) >= _CACHE_MAX:
                self._good.clear()
            self._good.add(key)
            self._held.pop(address, None)
            return
        if len(self._held) >= _CACHE_MAX:
            self._held.clear()
        wrong = min(self._held.get(address, (0.0, 0))[1] + 1, 64)
        hold = 0.0 if wrong <= FREE_WRONG else min(HOLD_MAX_S,
                                                   HOLD_S * 2 ** (wrong - FREE_WRONG - 1))
        self._held[address] = (time.monotonic() + hold, wrong)

    def _checked(self, password: str, hashed: Optional[str]) -> Optional[bool]:
        """The bcrypt check of a pair not remembered; None when another is under way or the
        checks are resting."""
        if not self._checking.acquire(blocking=False):
            return None
        try:
            start = time.monotonic()
            if start < self._rest_until:
                return None
            ok = self._check(password, hashed or self._decoy) and hashed is not None
            took = time.monotonic() - start
            self._rest_until = start + took / UNVERIFIED_SHARE
            return ok
        finally:
            self._checking.release()


def _credentials(header: Optional[str]) -> Optional[tuple]:
    """(user, password) of a Basic Authorization header; None if it is not one."""
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        user, sep, password = (base64.b64decode(header[6:].strip(), validate=True)
                               .decode("utf-8").partition(":"))
    except ValueError:            # binascii.Error and UnicodeDecodeError are ValueErrors
        return None
    return (user, password) if sep else None


# -- the file (YAML, as the toolkit reads it) -------------------------------------------
def parse_yaml(text: str):
    """The document of a web config file (PyYAML's safe loader, refusing a key given twice in
    one mapping: YAML forbids it, and the last value winning silently is how a second, empty
    ``basic_auth_users:`` would switch authentication off); ValueError with the line."""
    try:
        import yaml
    except ImportError:
        raise UserError("--web-config needs PyYAML: pip install 'gpumon-dl[webconfig]'", 2) \
            from None
    try:
        return yaml.load(text, Loader=_unique_key_loader(yaml))   # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{where}{problem}") from None


def _unique_key_loader(yaml):
    """yaml.SafeLoader, less its tolerance of duplicate keys."""
    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue            # '<<: *base' keys may be overridden, as YAML says
                    key = self.construct_object(key_node, deep=deep)
                    try:
                        twice = key in seen
                        seen.add(key)
                    except TypeError:       # unhashable: the safe loader says so itself
                        continue
                    if twice:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"{key} is given twice (the second would silently "
                            "replace the first)", key_node.start_mark)
            return super().construct_mapping(node, deep)
    return UniqueKeyLoader
