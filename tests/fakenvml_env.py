"""Helpers for tests that run code against the fake NVML library (tests/fakenvml/).

Two ways in:
- a subprocess: ``subprocess.run(cmd, env=fakenvml_env.env(gpus=2, pids={0: [os.getpid()]}))``;
  the environment puts build/fakenvml first on LD_LIBRARY_PATH, so pynvml's
  ``CDLL("libnvidia-ml.so.1")`` finds the fake.
- in this process: ``fakenvml_env.preload()`` loads the fake by path before pynvml's first
  ``nvmlInit`` (glibc then hands pynvml the already loaded object with that SONAME), and
  ``configure(...)`` sets the FAKE_NVML_* variables, which the library reads at every
  uninitialized -> initialized transition (so shut NVML down fully between configurations).

Every keyword maps to one FAKE_NVML_* variable (see tests/fakenvml/README.md); None leaves it unset.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_DIR = REPO / "build" / "fakenvml"
LIB = BUILD_DIR / "libnvidia-ml.so.1"
BUILD_SCRIPT = REPO / "tests" / "fakenvml" / "build.sh"
VARIABLES = (
    "FAKE_NVML_GPUS",
    "FAKE_NVML_SCENARIO",
    "FAKE_NVML_TRACE_DIR",
    "FAKE_NVML_UNSUPPORTED",
    "FAKE_NVML_LOST",
    "FAKE_NVML_PIDS",
    "FAKE_NVML_PIDS_FILE",
    "FAKE_NVML_INIT_ERROR",
    "FAKE_NVML_MIG",
    "FAKE_NVML_CALL_US",
    "FAKE_NVML_PROC_SHARES",
    "FAKE_NVML_CALL_LOG",
    "FAKE_NVML_GPM_FAIL",
)


def build(out: Path = BUILD_DIR) -> Path:
    """Build (or reuse, when up to date) the library; raise RuntimeError with gcc's output."""
    proc = subprocess.run(["sh", str(BUILD_SCRIPT), str(out)], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("building the fake NVML library failed:\n" + proc.stdout + proc.stderr)
    return out / "libnvidia-ml.so.1"


def skip_reason() -> str | None:
    """Why tests of the fake library cannot run here, or None when they can (builds it)."""
    try:
        build()
    except (RuntimeError, OSError) as exc:
        return str(exc).strip().splitlines()[-1] if str(exc).strip() else "cannot build the fake NVML library"
    return None


def _per_gpu(value, item_sep: str, join) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return item_sep.join(join(gpu, v) for gpu, v in value.items())
    raise TypeError("expected a string or a mapping of GPU index to values, not %r" % (value,))


def variables(
    gpus: int | None = None,
    scenario: str | os.PathLike | None = None,
    unsupported: str | Iterable[str] | Mapping[int, Iterable[str]] | None = None,
    lost: str | Mapping[int, float] | None = None,
    pids: str | Mapping[int | str, Iterable[int]] | None = None,
    init_error: str | None = None,
    mig: bool | None = None,
    call_us: int | str | None = None,
    trace_dir: str | os.PathLike | None = None,
    pids_file: str | os.PathLike | None = None,
    proc_shares: str | Mapping[int, int] | None = None,
    call_log: str | os.PathLike | None = None,
    gpm_fail: str | Mapping[int, float] | None = None,
) -> dict[str, str]:
    """The FAKE_NVML_* variables for these settings (only the ones given).

    unsupported: "power,temp", ["power", "temp"] (every GPU) or {1: ["power"]} (GPU 1 only).
    lost: {1: 2.5} (GPU 1 lost 2.5 s after nvmlInit) or "1@2.5".
    pids: {0: [123, 456], 1: [789]} ("*" as key: every GPU) or "0:123,456;1:789".
    call_us: µs per call (2.5), per metric group ("1,processes=4500"), or "reported".
    pids_file: a file in the pids syntax, read again whenever it changes (processes started
    after nvmlInit).
    proc_shares: {123: 3, 456: 1} (PID: weight) or "123:3,456:1": how a GPU's used memory and
    utilization are split between its processes (default: evenly).
    call_log: a file the library writes its per-function call counts to (see README.md).
    gpm_fail: {0: 1.5} (GPU 0's GPM calls fail 1.5 s after nvmlInit) or "0@1.5".
    """
    plain = {"FAKE_NVML_GPUS": None if gpus is None else str(int(gpus)),
             "FAKE_NVML_SCENARIO": scenario, "FAKE_NVML_TRACE_DIR": trace_dir,
             "FAKE_NVML_UNSUPPORTED": None if unsupported is None else _groups(unsupported),
             "FAKE_NVML_PIDS_FILE": pids_file, "FAKE_NVML_INIT_ERROR": init_error,
             "FAKE_NVML_MIG": None if mig is None else ("1" if mig else "0"),
             "FAKE_NVML_CALL_US": None if call_us is None else str(call_us),
             "FAKE_NVML_CALL_LOG": call_log}
    gpu_at = lambda gpu, s: "%s@%g" % (gpu, s)  # noqa: E731
    per_gpu = {"FAKE_NVML_LOST": (lost, ",", gpu_at),
               "FAKE_NVML_PIDS": (pids, ";", lambda gpu, ps: "%s:%s" % (
                   gpu, ",".join(str(int(p)) for p in ps))),
               "FAKE_NVML_PROC_SHARES": (proc_shares, ",", lambda pid, w: "%d:%d" % (pid, w)),
               "FAKE_NVML_GPM_FAIL": (gpm_fail, ",", gpu_at)}
    out = {k: os.fspath(v) for k, v in plain.items() if v is not None}
    out.update({k: _per_gpu(v, sep, join) for k, (v, sep, join) in per_gpu.items()
                if v is not None})
    return out


def _groups(unsupported) -> str:
    """FAKE_NVML_UNSUPPORTED's value: as given, a list of groups, or {gpu: groups}."""
    if isinstance(unsupported, str):
        return unsupported
    if isinstance(unsupported, Mapping):
        return ",".join("%d:%s" % (gpu, name) for gpu, names in unsupported.items()
                        for name in names)
    return ",".join(unsupported)


def env(base: Mapping[str, str] | None = None, lib_dir: Path = BUILD_DIR, **settings) -> dict[str, str]:
    """A full environment for a subprocess that should see the fake library with these settings.

    FAKE_NVML_* variables inherited from ``base`` (default os.environ) are dropped first, so a
    setting not given here is at its default.
    """
    out = {k: v for k, v in (os.environ if base is None else base).items() if k not in VARIABLES}
    out.update(variables(**settings))
    previous = out.get("LD_LIBRARY_PATH")
    out["LD_LIBRARY_PATH"] = str(lib_dir) + (os.pathsep + previous if previous else "")
    return out


def configure(**settings) -> dict[str, str | None]:
    """Set this process's FAKE_NVML_* variables (others cleared); returns the old values for restore()."""
    old = {k: os.environ.get(k) for k in VARIABLES}
    for k in VARIABLES:
        os.environ.pop(k, None)
    os.environ.update(variables(**settings))
    return old


def restore(old: Mapping[str, str | None]) -> None:
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


_preloaded: ctypes.CDLL | None = None


def preload() -> ctypes.CDLL:
    """Load the fake library into this process before pynvml's first nvmlInit.

    Raises RuntimeError when pynvml already holds another libnvidia-ml (a real driver).
    """
    global _preloaded
    if _preloaded is None:
        import pynvml

        lib = ctypes.CDLL(str(build()), mode=ctypes.RTLD_GLOBAL)
        held = pynvml.nvmlLib
        if held is not None and held._handle != lib._handle:
            raise RuntimeError("pynvml already loaded a different libnvidia-ml.so.1; preload the fake "
                               "library before the first nvmlInit")
        pynvml.nvmlLib = lib
        _preloaded = lib
    return _preloaded


def rows_by_gpu(path) -> dict[int, list[dict]]:
    """A gpumon CSV log's rows (dicts of the cells) per GPU index, in file order."""
    import csv
    from collections import defaultdict
    by = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            by[int(r["gpu"])].append(r)
    return by
