"""`make lint`: the detector's functions stay small enough to read at once.

Lists every function of gpumon/detect and gpumon/analyze longer than MAX_LINES lines or of
cyclomatic complexity above MAX_CC (radon's), and exits 1 when there is one.
"""
from __future__ import annotations

import os
import sys

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("gpumon/detect", "gpumon/analyze")
MAX_LINES = 50
MAX_CC = 12


def blocks(path: str):
    """Every function and method of the file, once."""
    with open(path) as f:
        code = f.read()
    seen = set()
    for b in cc_visit(code):
        for x in [b] + list(getattr(b, "methods", [])):
            if isinstance(x, Function) and (x.lineno, x.fullname) not in seen:
                seen.add((x.lineno, x.fullname))
                yield x


def sources():
    """The Python files of PACKAGES, their subpackages' included (gpumon/detect/rules/)."""
    for pkg in PACKAGES:
        for top, dirs, names in sorted(os.walk(os.path.join(ROOT, pkg))):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(top, name), ROOT)


def main() -> int:
    over = []
    for rel in sources():
        for b in blocks(os.path.join(ROOT, rel)):
            lines = b.endline - b.lineno + 1
            if lines > MAX_LINES or b.complexity > MAX_CC:
                over.append((b.complexity, lines, f"{rel}:{b.lineno} {b.fullname}"))
    for cc, lines, where in sorted(over, reverse=True):
        print(f"{where}: complexity {cc}, {lines} lines")
    print(f"{len(over)} function(s) over {MAX_LINES} lines or complexity {MAX_CC}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
