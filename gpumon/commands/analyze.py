"""`gpumon analyze FILE...`: offline diagnosis of gpumon, nvidia-smi and dmon logs."""
from __future__ import annotations

import json

from gpumon.commands.common import positive_float


def register(sub) -> None:
    p = sub.add_parser(
        "analyze", help="diagnose a gpumon CSV, nvidia-smi --query-gpu CSV or dmon log",
        description="Offline diagnosis of a log: a gpumon CSV, an `nvidia-smi --query-gpu=... "
        "--format=csv` log, an `nvidia-smi dmon` log, or a CSV with time, GPU index and "
        "utilization columns. The format is detected from the file.")
    p.add_argument("files", nargs="+", metavar="FILE", help="log file(s)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format (default text)")
    p.add_argument("--interval", type=positive_float, default=None, metavar="S",
                   help="seconds between samples of a log without a time column (dmon; "
                   "default 1)")
    p.set_defaults(func=run)


def run(args) -> int:
    from gpumon.analyze import analyze_file, to_json, to_text
    results = [analyze_file(path, args.interval) for path in args.files]
    if args.format == "json":
        docs = [to_json(tl) for _, tl in results]
        out = docs[0] if len(docs) == 1 else [
            {"file": path, **doc} for path, doc in zip(args.files, docs)]
        print(json.dumps(out, indent=2))
    else:
        print("\n\n".join(to_text(log, tl) for log, tl in results))
    return 0
