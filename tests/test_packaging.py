"""The distributions (issue 21): the sdist carries what builds and tests gpumon, the wheel what a
user runs (the plugin and contrib/ under share/gpumon/), both the licence; the wheel installs
and runs in a bare venv; the exporter image's package set is all `gpumon export` loads."""
import configparser
import re
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CFG = configparser.ConfigParser()
CFG.read(ROOT / "setup.cfg")
NAME = CFG["metadata"]["name"]
# What the sdist must carry, as folders of the checkout (every file under them but bytecode
# and what MANIFEST.in prunes) and single files.
SDIST_TREES = ("gpumon", "tests", "bench", "workloads", "contrib", "docs", "plugins")
SDIST_FILES = ("LICENSE", "README.md", "DESIGN.md", "Makefile", "setup.cfg", "pyproject.toml",
               "MANIFEST.in")
PRUNED = ("bench/results/gpu-check", "bench/results/gpu-check.md", "bench/real/data")


def checkout_files(top: str) -> set[str]:
    out = set()
    for p in (ROOT / top).rglob("*"):
        rel = p.relative_to(ROOT).as_posix()
        if p.is_file() and "__pycache__" not in rel and p.suffix not in (".pyc", ".so") \
                and not rel.startswith(PRUNED):
            out.add(rel)
    return out


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """The sdist and the wheel, built once for this module (no network: no isolation, so
    this venv's setuptools builds them; the dev extra brings build and setuptools>=70.1)."""
    probe = subprocess.run([sys.executable, "-c", "import build.__main__"], cwd="/",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the 'build' package is not installed (it is in the dev extra)")
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "-n", "-o", str(out), str(ROOT)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sdist, = out.glob("*.tar.gz")
    wheel, = out.glob("*.whl")
    return sdist, wheel


def test_distribution_name_is_not_the_command_name_and_has_metadata(dists):
    assert NAME == "gpumon-dl"
    _, wheel = dists
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"gpumon_dl-{version()}.dist-info/METADATA").decode()
        entry = z.read(f"gpumon_dl-{version()}.dist-info/entry_points.txt").decode()
    assert f"Name: {NAME}\n" in meta and "License: MIT" in meta
    assert re.search(r"^Home-page: https://", meta, re.M)
    assert re.search(r"^Project-URL: Source, https://", meta, re.M)
    assert "gpumon = gpumon.__main__:main" in entry
    assert "Provides-Extra: analyze" not in meta          # pandas was never imported
    assert "Requires-Dist: pyarrow" not in meta           # analyze reads logs with numpy


def version() -> str:
    text = (ROOT / "gpumon" / "__init__.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def test_wheel_has_licence_plugin_and_contrib_under_share(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    info = f"gpumon_dl-{version()}.dist-info/"
    data = f"gpumon_dl-{version()}.data/data/share/gpumon/"
    assert info + "licenses/LICENSE" in names
    assert data + "plugins/gpumon_plugin.py" in names
    contrib = {n[len(data):] for n in names if n.startswith(data + "contrib/")}
    assert contrib == checkout_files("contrib"), "setup.cfg data_files misses contrib files"
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_sdist_carries_what_builds_and_tests_gpumon(dists):
    sdist, _ = dists
    top = f"gpumon_dl-{version()}/"
    with tarfile.open(sdist) as t:
        names = {n[len(top):] for n in t.getnames() if n.startswith(top)}
    want = set(SDIST_FILES)
    for tree in SDIST_TREES:
        want |= checkout_files(tree)
    assert {"tests/conftest.py", "tests/fakenvml/fakenvml.c", "tests/fakenvml_env.py",
            "tests/data/analyze/gpumon.csv", "tests/golden/screen_stall4_80x24.txt"} <= want
    assert not want - names, f"missing from the sdist: {sorted(want - names)[:20]}"
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_unpacked_sdist_collects_its_tests(dists, tmp_path, clean_env):
    sdist, _ = dists
    with tarfile.open(sdist) as t:
        t.extractall(tmp_path, filter="data")
    src = tmp_path / f"gpumon_dl-{version()}"
    env = dict(clean_env, PYTHONPATH=str(src))
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", "tests"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "error" not in r.stdout.splitlines()[-1], r.stdout[-3000:]
    assert re.search(r"^\d+ tests collected", r.stdout.splitlines()[-1])
    r = subprocess.run([sys.executable, "-c", "import gpumon; print(gpumon.__file__)"],
                       cwd=src, env=env, capture_output=True, text=True)
    assert r.stdout.strip() == str(src / "gpumon" / "__init__.py")


def test_wheel_installs_in_a_fresh_venv_and_finds_its_plugin(dists, tmp_path, clean_env):
    """The wheel alone into a fresh venv (no network here: its dependencies are this venv's,
    through a .pth line after the fresh venv's own site-packages): the command runs from the
    wheel's files and finds the plugin and contrib/ under <venv>/share/gpumon/."""
    _, wheel = dists
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                        "install", "-q", "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    site, = (venv / "lib").glob("python3*/site-packages")
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in clean_env.items() if k != "PYTHONPATH"}

    def run(*args):
        return subprocess.run([str(venv / "bin" / "gpumon"), *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    assert run("--version").stdout.split()[-1] == version()
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import gpumon; print(gpumon.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True).stdout.strip()
    assert Path(where).parent == site / "gpumon"
    assert Path(run("plugin", "path").stdout.strip()) == \
        venv / "share" / "gpumon" / "plugins" / "gpumon_plugin.py"
    assert (venv / "share" / "gpumon" / "contrib" / "grafana" / "gpumon-dashboard.json").is_file()
    assert Path(run("contrib", "path").stdout.strip()) == venv / "share" / "gpumon" / "contrib"
    listed = run("contrib", "list").stdout.splitlines()
    assert [line.split()[0] for line in listed] == sorted(
        str(venv / "share" / "gpumon" / f) for f in checkout_files("contrib")), listed
    r = run("log", "--sim", "busy:1", "--duration", "2", "-o", "-")
    assert r.returncode == 0 and r.stdout.startswith("time,"), r.stderr


# -- the exporter image -------------------------------------------------------------------
CONTAINERFILE = ROOT / "contrib" / "kubernetes" / "Containerfile"
# Distribution -> the module it provides.
MODULE_OF = {"nvidia-ml-py": "pynvml", "psutil": "psutil", "numpy": "numpy",
             "prometheus_client": "prometheus_client"}
# Runs `gpumon export` with only the standard library, gpumon and the named modules importable.
ONLY = textwrap.dedent("""
    import runpy, sys
    allowed = set(sys.argv[1].split(",")) | {"gpumon"}
    class Only:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in allowed or top.startswith("_"):
                return None
            raise ImportError("not in the image: " + name)
    sys.meta_path.insert(0, Only())
    try:
        import pyarrow
    except ImportError:
        pass
    else:
        sys.exit("the import guard does not work")
    sys.argv = ["gpumon"] + sys.argv[2:]
    runpy.run_module("gpumon", run_name="__main__")
""")


def image_packages() -> list[str]:
    text = CONTAINERFILE.read_text()
    assert "pip install --no-cache-dir --no-deps /src" in text
    return re.findall(r"'([A-Za-z0-9_.-]+)[<>=!~][^']*'", text)


def test_exporter_image_installs_only_what_the_exporter_loads(clean_env):
    import fakenvml_env
    from test_export import free_port, wait_for
    pkgs = image_packages()
    assert sorted(pkgs) == sorted(MODULE_OF), pkgs        # pyarrow, rich: not in the image
    reason = fakenvml_env.skip_reason()
    if reason:
        pytest.skip(reason)
    env = fakenvml_env.env(base=clean_env, gpus=2)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", ONLY, ",".join(MODULE_OF.values()),
                             "export", "--port", str(port), "-q", "--interval", "0.5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, _, body = wait_for(port, proc, want="gpumon_verdict", deadline=30)
        assert 'gpumon_info{' in body and 'source="nvml"' in body
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in err, err
