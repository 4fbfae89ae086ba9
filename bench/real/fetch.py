"""Fetch the real-log corpus: `python -m bench.real.fetch [--mirror DIR] [--force] [ID...]`.

For each [[log]] of bench/real/manifest.toml, the file `path` at `commit` of `repo`, cut to
`lines`, is written to bench/real/data/<id>.<ext>. Sources, in order:

  1. a local git mirror of the repository: a directory matching <mirror root>/<owner>+<name>*
     (a bare git dir
     or a clone) or a plain `git clone` (any directory whose .git or itself is a git dir);
     the default root is /work/.mirror ($GPUMON_REAL_MIRROR overrides it; --mirror may be given
     more than once, either a root holding such directories or one repository's git dir);
  2. https://raw.githubusercontent.com/<repo>/<commit>/<path> (short timeout; fails fast offline).

Prints ok / missing (with why) per entry and, at the end, which repositories must be fetched
first. The data files are third-party and must not be committed (bench/real/data/ is ignored).
Exit status 0 when every entry is present, 1 otherwise (2 when the manifest is unreadable).
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

from bench.real import DATA, MANIFEST, data_path, line_range, load_manifest

DEFAULT_MIRROR = os.environ.get("GPUMON_REAL_MIRROR", "/work/.mirror")
RAW = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
TIMEOUT_S = 8.0


def _is_git_dir(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "HEAD")) and os.path.isdir(os.path.join(d, "objects"))


def git_dirs(repo: str, mirrors: list[str]) -> list[str]:
    """Candidate git directories for owner/name under the mirror roots (or given directly)."""
    owner, _, name = repo.partition("/")
    out: list[str] = []
    for m in mirrors:
        m = os.path.abspath(os.path.expanduser(m))
        tops = []
        if _is_git_dir(m) or _is_git_dir(os.path.join(m, ".git")):
            tops.append(m)                       # --mirror pointing at one repository
        tops += sorted(glob.glob(os.path.join(glob.escape(m), glob.escape(f"{owner}+{name}") + "*")))
        tops += [os.path.join(m, name)] if os.path.isdir(os.path.join(m, name)) else []
        for t in tops:
            for d in (os.path.join(t, "repo", ".git"), os.path.join(t, "repo"),
                      os.path.join(t, ".git"), t):
                if _is_git_dir(d) and d not in out:
                    out.append(d)
                    break
    return out


def from_mirror(entry: dict, mirrors: list[str]) -> tuple[bytes | None, str]:
    dirs = git_dirs(entry["repo"], mirrors)
    if not dirs:
        return None, "no mirror of the repository"
    why = ""
    for d in dirs:
        spec = f"{entry['commit']}:{entry['path']}"
        try:
            r = subprocess.run(["git", f"--git-dir={d}", "show", spec], capture_output=True,
                               timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = f"git failed in {d}: {e}"
            continue
        if r.returncode == 0:
            return r.stdout, f"mirror {d}"
        err = r.stderr.decode(errors="replace").strip().splitlines()
        why = f"{d}: {err[-1] if err else 'git show failed'}"
        if "bad object" in why or "invalid object name" in why or "unable to read" in why:
            why += " (the mirror lacks that commit or blob: fetch a newer snapshot, or the file is >= 4 MiB)"
    return None, why


def from_network(entry: dict) -> tuple[bytes | None, str]:
    url = RAW.format(repo=entry["repo"], commit=entry["commit"],
                     path=urllib.request.quote(entry["path"]))
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return resp.read(), url
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, f"{url}: {getattr(e, 'reason', e)}"


def cut(data: bytes, spec) -> tuple[bytes, int]:
    a, b = line_range(spec)
    lines = data.splitlines(keepends=True)
    part = lines[a - 1:b]
    if part and not part[-1].endswith((b"\n", b"\r")):
        part[-1] += b"\n"
    return b"".join(part), len(part)


def write(path: str, blob: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".part-")
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.real.fetch", description=__doc__.split("\n")[0])
    ap.add_argument("ids", nargs="*", help="only these manifest ids")
    ap.add_argument("--mirror", action="append", default=None,
                    help=f"mirror root or git dir (repeatable; default {DEFAULT_MIRROR})")
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--data", default=DATA, help="output directory (default bench/real/data)")
    ap.add_argument("--force", action="store_true", help="rewrite files that are already there")
    ap.add_argument("--offline", action="store_true", help="do not try raw.githubusercontent.com")
    args = ap.parse_args(argv)
    try:
        logs = load_manifest(args.manifest)
    except ValueError as e:
        print(f"bench.real.fetch: {e}", file=sys.stderr)
        return 2
    if args.ids:
        unknown = set(args.ids) - {e["id"] for e in logs}
        if unknown:
            print(f"bench.real.fetch: unknown id(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        logs = [e for e in logs if e["id"] in args.ids]
    mirrors = args.mirror or [DEFAULT_MIRROR]
    missing: dict[str, list[str]] = {}
    net_ok = not args.offline
    for e in logs:
        out = data_path(e, args.data)
        if os.path.exists(out) and os.path.getsize(out) > 0 and not args.force:
            print(f"ok       {e['id']:<32} (already there: {os.path.relpath(out)})")
            continue
        blob, src = from_mirror(e, mirrors)
        why = [src] if blob is None else []
        if blob is None and not net_ok and not args.offline:
            why.append("network skipped (an earlier download failed: offline?)")
        if blob is None and net_ok:
            blob, src = from_network(e)
            if blob is None:
                why.append(src)
                if "timed out" in src or "Name or service" in src or "Temporary failure" in src \
                        or "Network is unreachable" in src or "No address" in src:
                    net_ok = False               # offline: do not wait on every entry
        if blob is None:
            print(f"missing  {e['id']:<32} {e['repo']}@{e['commit'][:10]}:{e['path']}: "
                  + "; ".join(why))
            missing.setdefault(e["repo"], []).append(e["id"])
            continue
        body, n = cut(blob, e.get("lines", "all"))
        if not body:
            print(f"missing  {e['id']:<32} lines {e.get('lines')!r} select nothing "
                  f"({len(blob.splitlines())} lines in the file)")
            missing.setdefault(e["repo"], []).append(e["id"])
            continue
        write(out, body)
        print(f"ok       {e['id']:<32} {n} lines -> {os.path.relpath(out)}  (from {src})")
    print()
    if missing:
        print(f"{sum(map(len, missing.values()))} of {len(logs)} missing. Fetch these "
              f"repositories first (into {mirrors[0]}/<owner>+<name>, e.g. the session's "
              "`fetch` tool or `git clone`), then run this again:")
        for repo, ids in sorted(missing.items()):
            print(f"  {repo}   ({', '.join(ids)})")
        return 1
    print(f"all {len(logs)} present in {os.path.relpath(args.data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
