"""Real GPU-utilization logs from public repositories (`bench/real/manifest.toml`).

`python -m bench.real.fetch` writes the data files to bench/real/data/ (not in git);
`python -m bench.real` (`make bench-real`) scores `gpumon analyze` on them.
"""
from __future__ import annotations

import os

try:
    import tomllib
except ModuleNotFoundError:     # Python 3.10: the same parser, as a package
    import tomli as tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "manifest.toml")
DATA = os.path.join(HERE, "data")
FORMAT_EXT = {"nvidia-smi": "csv", "plain": "csv", "gpumon": "csv", "dmon": "log",
              "nvidia-smi-screen": "log"}


def load_manifest(path: str = MANIFEST) -> list[dict]:
    """The [[log]] entries; raises ValueError with a readable message when the file is unusable."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    logs = doc.get("log")
    if not isinstance(logs, list) or not logs:
        raise ValueError(f"{path}: no [[log]] entries")
    seen = set()
    for i, e in enumerate(logs):
        for k in ("id", "repo", "commit", "path", "format"):
            if not isinstance(e.get(k), str) or not e[k]:
                raise ValueError(f"{path}: [[log]] #{i + 1} lacks {k!r}")
        if e["id"] in seen:
            raise ValueError(f"{path}: duplicate id {e['id']!r}")
        seen.add(e["id"])
    return logs


def data_path(entry: dict, data_dir: str = DATA) -> str:
    ext = FORMAT_EXT.get(entry.get("format", ""), "csv")
    return os.path.join(data_dir, f"{entry['id']}.{ext}")


def line_range(spec) -> tuple[int, int | None]:
    """'all' -> (1, None); '1-5000' -> (1, 5000); '200-' -> (200, None); 1-based, inclusive."""
    if spec is None or str(spec).strip().lower() in ("", "all"):
        return 1, None
    s = str(spec).strip()
    a, sep, b = s.partition("-")
    if not sep:
        n = int(s)
        return n, n
    return max(1, int(a or 1)), (int(b) if b.strip() else None)
