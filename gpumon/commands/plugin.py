"""`gpumon plugin install | path | uninstall`: the dstat/dool column (`dstat --gpumon`).

``install`` links the one plugin file into the hosts' user folders (a copy where linking is not
possible) and records this interpreter, so the column can start gpumon from any host
interpreter (Debian's dstat runs /usr/bin/python3, which cannot see gpumon's virtualenv).
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Optional

import gpumon
from gpumon.errors import UserError
from gpumon.commands.helptext import help_kwargs

PLUGIN_NAME = "gpumon_plugin.py"
# The first line of the plugin file: how install/uninstall recognise a copy as gpumon's.
MARKER = "# gpumon-plugin:"
# (host, user folder below $HOME, file name the host looks for)
HOSTS = (("dstat", ".dstat", "dstat_gpumon.py"), ("dool", ".dool", "dool_gpumon.py"))


def register(sub) -> None:
    p = sub.add_parser("plugin",
                       description="Make the gpumon column available in dstat and dool "
                       "(`dstat --gpumon`, `dool --gpumon`; `-f` shows every GPU).",
                       **help_kwargs("plugin"))
    ps = p.add_subparsers(dest="action", metavar="ACTION")
    pi = ps.add_parser("install", help="link the plugin into ~/.dstat and ~/.dool and record "
                       "this Python")
    pi.add_argument("--copy", action="store_true",
                    help="copy the file instead of linking it (the copy does not follow "
                    "upgrades: run install again after one)")
    ps.add_parser("path", help="print the plugin file's path (for a manual setup)")
    ps.add_parser("uninstall", help="remove what install made")
    p.set_defaults(func=run, action=None)


# -- where things are ----------------------------------------------------------------------
def shared(rel: str, what: str) -> Path:
    """``rel`` (a file or folder the wheel installs under <prefix>/share/gpumon/): the
    checkout's own, else the installed one; ``what`` names it in the error."""
    candidates = [Path(gpumon.__file__).resolve().parent.parent / rel]
    prefixes = [sys.prefix, sysconfig.get_path("data"), getattr(site, "USER_BASE", None) or ""]
    for prefix in prefixes:
        if prefix:
            candidates.append(Path(prefix) / "share" / "gpumon" / rel)
    for path in candidates:
        if path.exists():
            return path
    raise UserError(f"{what} is missing: looked in "
                    + ", ".join(str(p) for p in candidates) + " (reinstall gpumon-dl)")


def plugin_file() -> Path:
    """The plugin file: the checkout's plugins/ or the installed share/gpumon/plugins/."""
    return shared(f"plugins/{PLUGIN_NAME}", "the plugin file")


def home() -> Path:
    value = os.environ.get("HOME")
    return Path(value) if value else Path.home()


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(home() / ".config")
    return Path(base) / "gpumon" / "plugin.json"


def targets() -> list[tuple[str, Path]]:
    return [(host, home() / folder / name) for host, folder, name in HOSTS]


def import_root() -> Optional[str]:
    """The folder gpumon is imported from, when this interpreter started afresh would not find
    that same gpumon (a checkout run from its folder or with PYTHONPATH); else None."""
    root = str(Path(gpumon.__file__).resolve().parent.parent)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        found = subprocess.run(
            [sys.executable, "-c", "import gpumon; print(gpumon.__file__)"], cwd="/", env=env,
            capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    if found and str(Path(found).resolve().parent.parent) == root:
        return None
    return root


def is_ours(path: Path) -> bool:
    """A link to a gpumon plugin file, or a file that starts with the marker line."""
    if path.is_symlink():
        return os.readlink(path).endswith(PLUGIN_NAME)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().startswith(MARKER)
    except OSError:
        return False


# -- actions -------------------------------------------------------------------------------
def install(copy: bool = False) -> list[str]:
    src = plugin_file()
    lines, created = [], []
    for host, dest in targets():
        if dest.exists() or dest.is_symlink():
            if not is_ours(dest):
                raise UserError(f"{dest} exists and is not gpumon's plugin: move it away, "
                                "then run `gpumon plugin install` again")
            dest.unlink()
        try:
            if not dest.parent.is_dir():
                dest.parent.mkdir(parents=True)
                created.append(str(dest.parent))
        except OSError as exc:
            raise UserError(f"cannot create {dest.parent}: {exc.strerror}") from None
        how = "copied"
        if not copy:
            try:
                dest.symlink_to(src)
                how = "linked"
            except OSError:
                pass
        if how == "copied":
            try:
                shutil.copyfile(src, dest)
            except OSError as exc:
                raise UserError(f"cannot write {dest}: {exc.strerror}") from None
        found = shutil.which(host) or (Path(sys.executable).parent / host).is_file()
        note = "" if found else f" ({host} is not on PATH)"
        what = f"{dest} -> {src}" if how == "linked" else f"{src} -> {dest}"  # (as ls -l, cp)
        lines.append(f"{how} {what}: `{host} --gpumon`{note}")
    cfg = config_file()
    created += _previous(cfg).get("created", [])   # a second install keeps the first's record
    record = {"python": sys.executable, "pythonpath": import_root(), "plugin": str(src),
              "installed": [str(d) for _h, d in targets()], "created": sorted(set(created)),
              "gpumon": gpumon.__version__}
    try:
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps(record, indent=1) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write {cfg}: {exc.strerror}") from None
    lines.append(f"recorded {sys.executable} as gpumon's Python in {cfg}")
    return lines


def _previous(cfg: Path) -> dict:
    try:
        record = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def uninstall() -> list[str]:
    lines = []
    for _host, dest in targets():
        if (dest.exists() or dest.is_symlink()) and is_ours(dest):
            dest.unlink()
            lines.append(f"removed {dest}")
    cfg = config_file()
    for folder in _previous(cfg).get("created", []):
        try:
            Path(folder).rmdir()        # only the folders install made, and only if empty
            lines.append(f"removed {folder}/")
        except OSError:
            pass
    if cfg.exists():
        cfg.unlink()
        lines.append(f"removed {cfg}")
        try:
            cfg.parent.rmdir()          # only if empty
        except OSError:
            pass
    return lines or ["nothing to remove: the plugin is not installed"]


def run(args) -> int:
    if args.action == "install":
        lines = install(copy=args.copy)
    elif args.action == "path":
        lines = [str(plugin_file())]
    elif args.action == "uninstall":
        lines = uninstall()
    else:
        raise UserError("say what to do: gpumon plugin install | path | uninstall", 2)
    for line in lines:
        print(line)
    return 0
