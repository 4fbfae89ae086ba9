"""`gpumon export --web-config FILE`: TLS and basic auth in the Prometheus exporter toolkit's
file format, checked with a real client (urllib over TLS, a self-signed certificate made
here with the `cryptography` package or the `openssl` command)."""
import base64
import shlex
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from gpumon.errors import UserError
from gpumon.export_http import MetricsServer
from gpumon.webconfig import BasicAuth, bcrypt_checker, load_web_config, parse_yaml
from test_export import free_port

pytest.importorskip("prometheus_client")

# bcrypt("s3cret") at cost 4, as htpasswd -nbBC 4 writes it ($2y$).
HASH = "$2y$04$aW1wb3J0IHRoaXMgaXMgYONUw3hdrQPHEHPoqnHsFi9vAZIBl/3Bi"
needs_bcrypt = pytest.mark.skipif(bcrypt_checker() is None, reason="no bcrypt: neither the "
                                  "bcrypt package nor a crypt(3) that knows it")

# The toolkit's own sample file (docs/web-config.yml), less its rate_limit section.
TOOLKIT_SAMPLE = """\
# TLS and basic authentication configuration example.
#
# Additionally, a certificate and a key file are needed.
tls_server_config:
  cert_file: server.crt
  key_file: server.key

# Usernames and passwords required to connect.
# Passwords are hashed with bcrypt.
basic_auth_users:
  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze
  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m
"""


def make_cert(folder, name="server"):
    """(cert, key) paths of a self-signed certificate for 127.0.0.1/localhost; skips the test
    when neither `cryptography` nor `openssl` is there."""
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    try:
        import datetime
        import ipaddress
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("no way to make a certificate: neither cryptography nor openssl")
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "2", "-subj", f"/CN={name}", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True, timeout=60)
        return cert, key
    pkey = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    crt = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
           .public_key(pkey.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(now - datetime.timedelta(minutes=5))
           .not_valid_after(now + datetime.timedelta(days=2))
           .add_extension(x509.SubjectAlternativeName([
               x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
               critical=False)
           .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
           .sign(pkey, hashes.SHA256()))
    cert.write_bytes(crt.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(pkey.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return cert, key


def client(cafile, certfile=None, keyfile=None):
    ctx = ssl.create_default_context(cafile=str(cafile))
    if certfile:
        ctx.load_cert_chain(str(certfile), str(keyfile))
    return ctx


def fetch(url, ctx=None, user=None, password=None, timeout=5.0):
    req = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


# -- the file ------------------------------------------------------------------------------------
def test_parses_the_toolkits_sample():
    doc = parse_yaml(TOOLKIT_SAMPLE + 'rate_limit:\n  interval: "1s"  # x\n  burst: 20\n'
                     "  list:\n  - a\n  - 'b # c'\n")
    assert doc["tls_server_config"] == {"cert_file": "server.crt", "key_file": "server.key"}
    assert doc["basic_auth_users"]["bob"].startswith("$2y$10$hLqFl9")
    assert doc["rate_limit"] == {"interval": "1s", "burst": 20, "list": ["a", "b # c"]}


@pytest.mark.parametrize("text", ["a: 'x", "a: [1, 2", "a:\n  b: 1\n c: 2", "\tb: 1"])
def test_malformed_yaml_is_refused_with_its_line(text):
    with pytest.raises(ValueError, match="line"):
        parse_yaml(text)


@pytest.mark.parametrize("text,says", [
    (TOOLKIT_SAMPLE + "rate_limit:\n  burst: 20\n", "rate_limit: not supported"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  cipher_suites:\n  - X\n",
     "tls_server_config.cipher_suites: not supported"),
    ("tls_server_config:\n  cert_file: c\n", "needs cert_file and key_file"),
    ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
     "cannot load cert_file/key_file"),
    ("basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("a: {b: 1\n", "line 2"),
    ("a: {b: 1}\n", "a: not supported"),
    ("- x\n", "expected a mapping"),
])
def test_web_config_errors_are_one_line(tmp_path, text, says):
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        load_web_config(str(path))
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.code == 2
    with pytest.raises(UserError, match="No such file"):
        load_web_config(str(tmp_path / "missing.yml"))


@pytest.mark.parametrize("text,says", [
    ("", "the file is empty: it asks for nothing"),
    ("# TLS and auth to come\n", "the file is empty"),
    ("{}\n", "the file is empty"),
    ("basic_auth_users:\n", "basic_auth_users is empty: it names no user"),
    ("basic_auth_users: {}\n", "basic_auth_users is empty"),
    ("basic_auth_users: []\n", "basic_auth_users is empty"),
    ("tls_server_config:\n", "tls_server_config is empty: TLS needs cert_file and key_file"),
    ("tls_server_config: {}\n", "tls_server_config is empty"),
    # The second, empty key would replace the first: no authentication at all.
    (f"basic_auth_users:\n  alice: {HASH}\nbasic_auth_users:\n",
     "line 3: basic_auth_users is given twice"),
    (f"basic_auth_users:\n  alice: {HASH}\n  alice: {HASH}\n", "line 3: alice is given twice"),
    ("basic_auth_users: 0\n", "basic_auth_users: expected a mapping"),
    (f"basic_auth_users:\n  'a:b': {HASH}\n", "can never log in"),
])
def test_a_config_that_protects_nothing_is_refused(tmp_path, text, says):
    """A web config asks for protection: one that yields none is refused, never run open."""
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        load_web_config(str(path))
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.code == 2


def test_yaml_merge_keys_may_still_be_overridden():
    doc = parse_yaml("base: &b {x: 1, y: 2}\nmine:\n  <<: *b\n  y: 3\n")
    assert doc["mine"] == {"x": 1, "y": 3}


def test_tls_versions_that_cannot_meet_are_refused(tmp_path):
    cert, key = make_cert(tmp_path)
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {cert}\n"
                                      f"  key_file: {key}\n  min_version: TLS13\n"
                                      "  max_version: TLS12\n")
    with pytest.raises(UserError, match="min_version TLS13 is above max_version TLS12"):
        load_web_config(str(tmp_path / "web.yml"))


def test_a_key_with_a_pass_phrase_is_refused_without_a_prompt(gpumon_cmd, clean_env,
                                                               tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make an encrypted key")
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-passout", "pass:hunter2", "-keyout",
                    str(tmp_path / "enc.key"), "-out", str(tmp_path / "enc.crt"), "-days", "2",
                    "-subj", "/CN=enc"], check=True, capture_output=True, timeout=60)
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: enc.crt\n"
                                      "  key_file: enc.key\n")
    with pytest.raises(UserError, match="enc.key is protected by a pass phrase"):
        load_web_config(str(tmp_path / "web.yml"))
    # On a terminal OpenSSL would have asked on it; under `script` stdin and stderr are one.
    script = shutil.which("script")
    cmd = gpumon_cmd + ["export", "--sim", "busy:1", "--port", "0", "--web-config",
                        str(tmp_path / "web.yml")]
    if script is not None:
        cmd = [script, "-qec", " ".join(map(shlex.quote, cmd)), "/dev/null"]
    r = subprocess.run(cmd, env=clean_env, capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "pass phrase" in out and "Enter PEM" not in out, out
    assert len(out.strip().splitlines()) == 1, out


def test_cli_refuses_a_second_empty_basic_auth_users(gpumon_cmd, clean_env, tmp_path):
    """The file that served /metrics with 200 and no credentials: refused before listening."""
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: {HASH}\n"
                                      "basic_auth_users:\n")
    port = free_port()
    r = subprocess.run(gpumon_cmd + ["export", "--sim", "busy:1", "--port", str(port),
                                     "--web-config", str(tmp_path / "web.yml"), "--duration",
                                     "3"], env=clean_env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "basic_auth_users is given twice" in r.stderr


def test_tls_options_checked(tmp_path):
    cert, key = make_cert(tmp_path)
    base = f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
    for extra, says in (("  min_version: TLS9\n", "min_version: expected one of"),
                        ("  client_auth_type: RequireAnyClientCert\n", "gpumon supports"),
                        ("  client_auth_type: RequireAndVerifyClientCert\n",
                         "needs client_ca_file")):
        (tmp_path / "web.yml").write_text(base + extra)
        with pytest.raises(UserError, match=says):
            load_web_config(str(tmp_path / "web.yml"))
    (tmp_path / "web.yml").write_text(base + "  min_version: TLS13\n")
    web = load_web_config(str(tmp_path / "web.yml"))    # relative to the file's folder
    assert web.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3 and web.auth is None


def test_basic_auth_remembers_a_good_pair_and_costs_the_same_for_unknown_users():
    calls = []

    def check(password, hashed):
        calls.append(hashed)
        return password == "pw" and hashed == "H-alice"
    auth = BasicAuth({"alice": "H-alice"}, check)

    def header(user, pw):
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
    assert auth.check(header("alice", "pw")) and auth.check(header("alice", "pw"))
    assert calls == ["H-alice"]                         # checked once, then remembered
    assert not auth.check(header("alice", "nope")) and not auth.check(header("alice", "nope"))
    assert not auth.check(header("mallory", "pw"))
    assert calls == ["H-alice"] * 4                     # the unknown user cost one check too
    for bad in (None, "", "Bearer x", "Basic !!!", "Basic " + base64.b64encode(b"\xff").decode(),
                "Basic " + base64.b64encode(b"alicepw").decode()):
        assert not auth.check(bad)


@needs_bcrypt
def test_bcrypt_checker_knows_htpasswds_hashes():
    check = bcrypt_checker()
    assert check("s3cret", HASH) and not check("s3cret!", HASH)


# -- a real client -------------------------------------------------------------------------------
def test_client_certificates(tmp_path):
    """client_auth_type RequireAndVerifyClientCert: a client without a certificate signed by
    client_ca_file gets no answer."""
    cert, key = make_cert(tmp_path)
    ccert, ckey = make_cert(tmp_path, "client")
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ccert}\n")
    web = load_web_config(str(tmp_path / "web.yml"))
    srv = MetricsServer("127.0.0.1", 0, lambda: b"up 1\n", ssl_context=web.ssl_context)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{srv.port}/metrics"
        assert fetch(url, client(cert, ccert, ckey))[::2] == (200, "up 1\n")
        with pytest.raises((OSError, urllib.error.URLError)):
            fetch(url, client(cert))
    finally:
        srv.shutdown()
        srv.server_close()


@needs_bcrypt
def test_cli_tls_and_basic_auth(gpumon_cmd, clean_env, tmp_path):
    cert, key = make_cert(tmp_path)
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
        f"basic_auth_users:\n  prometheus: {HASH}\n")
    port = free_port()
    # Every interface, but with TLS and basic auth: no warning; -q: nothing at all.
    proc = subprocess.Popen(gpumon_cmd + ["export", "--sim", "busy:2", "--listen",
                                          f"0.0.0.0:{port}", "-q", "--web-config",
                                          str(tmp_path / "web.yml")],
                            env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ctx = client(cert)
        url = f"https://127.0.0.1:{port}"
        for _ in range(150):
            try:
                status, _, body = fetch(url + "/metrics", ctx, "prometheus", "s3cret")
                if "DCGM_FI_DEV_GPU_UTIL{" in body:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read()
            threading.Event().wait(0.1)
        assert status == 200 and 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in body
        status, headers, _ = fetch(url + "/metrics", ctx)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert fetch(url + "/metrics", ctx, "prometheus", "wrong")[0] == 401
        assert fetch(url + "/healthz", ctx, "nobody", "s3cret")[0] == 401
        assert fetch(url + "/healthz", ctx, "prometheus", "s3cret")[::2] == (200, "ok\n")
        with pytest.raises((OSError, urllib.error.URLError)):
            fetch(f"http://127.0.0.1:{port}/metrics")            # plain HTTP: no answer
        with socket.create_connection(("127.0.0.1", port)) as s:  # a port scanner
            s.sendall(b"\x16\x03\x01garbage")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0 and err == "", err


def test_cli_tls_without_auth_warns_and_says_https(gpumon_cmd, clean_env, tmp_path):
    cert, key = make_cert(tmp_path)
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {cert}\n"
                                      f"  key_file: {key}\n")
    port = free_port()
    proc = subprocess.Popen(gpumon_cmd + ["export", "--sim", "busy:1", "--listen",
                                          f"0.0.0.0:{port}", "--web-config",
                                          str(tmp_path / "web.yml")],
                            env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ctx = client(cert)
        for _ in range(150):
            try:
                if fetch(f"https://127.0.0.1:{port}/healthz", ctx)[0] == 200:
                    break
            except OSError:
                threading.Event().wait(0.1)
            assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    lines = err.strip().splitlines()
    assert "warning: listening on every interface" in lines[0]
    assert "without authentication" in lines[0] and "without TLS" not in lines[0]
    assert f"https://0.0.0.0:{port}/metrics" in lines[1]


def test_cli_bad_web_config_is_one_line(gpumon_cmd, clean_env, tmp_path):
    (tmp_path / "web.yml").write_text("basic_auth_users:\n  alice: plain\n")
    r = subprocess.run(gpumon_cmd + ["export", "--sim", "busy:1", "--port", "0",
                                     "--web-config", str(tmp_path / "web.yml")],
                       env=clean_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--web-config" in r.stderr and "not a bcrypt hash" in r.stderr


@needs_bcrypt
def test_prometheus_scrapes_over_tls_with_basic_auth(gpumon_cmd, clean_env, tmp_path):
    """The docs' Prometheus job (scheme https, tls_config, basic_auth) against a real server."""
    from test_export_prometheus import PROMETHEUS, query, stop
    if PROMETHEUS is None:
        pytest.skip("no prometheus binary (apt-get install prometheus; .ci/run does)")
    cert, key = make_cert(tmp_path)
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: {HASH}\n")
    (tmp_path / "pass").write_text("s3cret\n")
    port, prom_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpumon\n    scheme: https\n"
        f"    tls_config: {{ca_file: {cert}}}\n"
        f"    basic_auth: {{username: prometheus, password_file: {tmp_path / 'pass'}}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    exporter = subprocess.Popen(gpumon_cmd + ["export", "--sim", "busy:2", "--port", str(port),
                                              "-q", "--web-config", str(tmp_path / "web.yml")],
                                env=clean_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{prom_port}"
    try:
        got = []
        for _ in range(60):
            assert exporter.poll() is None and prom.poll() is None
            try:
                got = query(base, 'gpumon_up == 1 and on() up{job="gpumon"} == 1')
            except OSError:
                pass
            if got:
                break
            threading.Event().wait(0.5)
        assert got, "Prometheus never scraped gpumon over TLS with basic auth"
        assert len(query(base, "DCGM_FI_DEV_GPU_UTIL")) == 2
    finally:
        stop(prom)
        err = stop(exporter)
    assert "Traceback" not in err, err
