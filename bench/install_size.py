"""Install sizes: gpumon's core install and each extra, each in a fresh virtual environment.

The wheel is built once; the core is ``pip install gpumon_dl-*.whl`` in a new venv, and each
extra is ``pip install 'gpumon_dl-*.whl[extra]'`` in a copy of that venv. A size is what
``du -sm`` counts in site-packages, less what every venv starts with (pip, setuptools):
the issue's target is the core at most CORE_MAX_MIB.

    python -m bench.install_size [--extras export,plot]
"""
from __future__ import annotations

import configparser
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The target for the core install (MiB of site-packages).
CORE_MAX_MIB = 100.0
# Extras not installed here, and why.
SKIPPED = {"dev": "the development tools", "all": "the extras above together",
           "workloads": "torch, gigabytes"}
# What a fresh venv's site-packages holds before anything is installed.
VENV_OWN = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")


def extras(root: str = ROOT) -> list[str]:
    """The extras setup.cfg declares, in its order."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(root, "setup.cfg"))
    return list(cfg["options.extras_require"]) if cfg.has_section(
        "options.extras_require") else []


def _du_mib(path: str) -> float:
    """Disk use of ``path`` (allocated blocks, as du counts them), in MiB."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512 / 2**20
    total = 0
    for top, dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(top, f)).st_blocks * 512
            except OSError:
                pass
    return total / 2**20


def site_mib(venv: str) -> float:
    """MiB of the venv's site-packages, less what the venv itself brought (VENV_OWN)."""
    site = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))[0]
    own = [p for p in os.listdir(site)
           if any(p == n or p.startswith(n + "-") for n in VENV_OWN)]
    return _du_mib(site) - sum(_du_mib(os.path.join(site, p)) for p in own)


def _pip(venv: str, *args: str) -> None:
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *args], check=True, capture_output=True,
                   text=True, timeout=900)


def install_sizes(python: str = sys.executable, root: str = ROOT,
                  only: Optional[Sequence[str]] = None) -> list[tuple[str, Optional[float], str]]:
    """[(what, MiB or None, note)]: the core first, then each extra (core + the extra)."""
    out: list[tuple[str, Optional[float], str]] = []
    with tempfile.TemporaryDirectory(prefix="gpumon-size-") as tmp:
        try:
            subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, root],
                           check=True, capture_output=True, text=True, timeout=900)
            wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
            core = os.path.join(tmp, "core")
            subprocess.run([python, "-m", "venv", core], check=True, timeout=300)
            _pip(core, wheel)
        except (subprocess.SubprocessError, OSError, IndexError) as e:
            return [("core", None, f"failed: {_why(e)}")]
        out.append(("core", site_mib(core), ""))
        for extra in extras(root):
            if extra in SKIPPED or (only is not None and extra not in only):
                out.append((f"[{extra}]", None, f"not installed ({SKIPPED.get(extra, 'not asked')})"))
                continue
            venv = os.path.join(tmp, extra)
            try:
                shutil.copytree(core, venv, symlinks=True)
                _pip(venv, f"{wheel}[{extra}]")
            except (subprocess.SubprocessError, OSError) as e:
                out.append((f"[{extra}]", None, f"failed: {_why(e)}"))
                continue
            out.append((f"[{extra}]", site_mib(venv), ""))
            shutil.rmtree(venv, ignore_errors=True)
    return out


def _why(e: Exception) -> str:
    err = getattr(e, "stderr", None) or str(e)
    return err.strip().splitlines()[-1] if err.strip() else type(e).__name__


def lines(sizes: Sequence[tuple[str, Optional[float], str]],
          analyze_s: Optional[float] = None) -> list[str]:
    """The sizes as report lines (core against CORE_MAX_MIB; each extra as core + extra and
    what it adds), and the day-long analyze time on the core install, where given."""
    core = next((mib for what, mib, _ in sizes if what == "core"), None)
    out = []
    for what, mib, note in sizes:
        if mib is None:
            out.append(f"- {what}: {note}")
        elif what == "core":
            ok = "within" if mib <= CORE_MAX_MIB else "OVER"
            out.append(f"- core: {mib:.0f} MiB ({ok} {CORE_MAX_MIB:.0f} MiB)")
        else:
            add = f", +{mib - core:.1f} MiB on the core" if core is not None else ""
            out.append(f"- core + {what}: {mib:.0f} MiB{add}")
    if analyze_s is not None:
        out.append(f"- `gpumon analyze` of the day-long log on the core install: {analyze_s:.2f} s "
                   "(no extra changes how logs are read: numpy on every install)")
    return out


def target(sizes: Sequence[tuple[str, Optional[float], str]]):
    """The core install's size against CORE_MAX_MIB, as a row of the bench's targets."""
    from bench import report
    mib, note = next(((m, n) for what, m, n in sizes if what == "core"), (None, "not run"))
    return report.Target("core install: site-packages of a fresh venv",
                         f"<= {CORE_MAX_MIB:.0f} MiB", note if mib is None else f"{mib:.0f} MiB",
                         None if mib is None else mib <= CORE_MAX_MIB)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m bench.install_size",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--extras", help="comma-separated extras to install (default: all but "
                    + ", ".join(SKIPPED) + ")")
    args = ap.parse_args(argv)
    only = args.extras.split(",") if args.extras else None
    sizes = install_sizes(only=only)
    print("\n".join(lines(sizes)))
    core = sizes[0][1]
    return 0 if core is not None and core <= CORE_MAX_MIB else 1


if __name__ == "__main__":
    raise SystemExit(main())
