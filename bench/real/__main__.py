"""Score `gpumon analyze` on real logs from public repositories (`make bench-real`).

`python -m bench.real [--manifest F] [--data DIR] [--out bench/results/real.md] [ID...]`

For every [[log]] of bench/real/manifest.toml whose data file is present (see
`python -m bench.real.fetch`): `analyze_file` + `summary`, timed. A file is scored on
  - the summary verdict (against expected_verdict, unless "unlabelled"),
  - the summary's straggler_gpu (against expected_straggler, -1 = none; skipped when omitted),
  - the shares: for every verdict in expected_shares or in gpumon's fractions,
    |gpumon's share - expected| <= 0.15 (skipped when expected_shares is omitted).
It passes when all that applies holds. Writes a markdown report to bench/results/real.md and
prints it. This is a benchmark: exit 0 even when files fail or crash; 1 only when the manifest
cannot be read.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
import traceback

from bench.real import DATA, MANIFEST, data_path, load_manifest, seconds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "bench", "results", "real.md")
SHARE_TOL = 0.15


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _analyze():
    """(analyze_file, summary, UserError) or raises what importing them raises."""
    from gpumon.analyze import analyze_file, summary
    from gpumon.errors import UserError
    return analyze_file, summary, UserError


def run_one(entry: dict, path: str) -> dict:
    r: dict = {"status": "ok", "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        analyze_file, summary, UserError = _analyze()
    except Exception as e:                                   # noqa: BLE001 - reported, not raised
        r.update(status="crash", error=f"CRASH: {type(e).__name__}: {e} (importing gpumon.analyze)")
        return r
    interval = entry.get("interval_s") if entry.get("format") == "dmon" else None
    try:
        log, tl = analyze_file(path, interval) if interval else analyze_file(path)
        s = summary(tl)
    except UserError as e:
        r.update(status="unreadable", error=f"unreadable: {e}")
    except Exception as e:                                   # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
        r.update(status="crash", error=f"CRASH: {type(e).__name__}: {e}{where}")
    else:
        r["summary"] = s
    r["seconds"] = time.perf_counter() - t0
    if r["status"] == "ok" and seconds.applies(entry):
        r["physics"] = seconds.score(log.samples, tl)
    if r["status"] == "ok" and entry.get("expected_verdict", "unlabelled") != "unlabelled":
        r["live"] = seconds.live_shares(log.samples)
    return r


def score(entry: dict, r: dict) -> dict:
    """verdict_ok / straggler_ok / shares_ok (None = not applicable) and passed."""
    exp = entry.get("expected_verdict", "unlabelled")
    labelled = exp != "unlabelled" and entry.get("label", "unlabelled") != "unlabelled"
    sc = {"labelled": labelled, "verdict_ok": None, "straggler_ok": None, "shares_ok": None,
          "share_misses": [], "passed": None}
    if not labelled:
        return sc
    s = r.get("summary")
    if s is None:
        sc.update(verdict_ok=False, passed=False)
        return sc
    sc["verdict_ok"] = s.get("verdict") == exp
    if "expected_straggler" in entry:
        want = entry["expected_straggler"]
        want = None if want is None or int(want) < 0 else int(want)
        got = s.get("straggler_gpu")
        got = None if got is None or (isinstance(got, int) and got < 0) else got
        sc["straggler_ok"] = got == want
    if isinstance(entry.get("expected_shares"), dict):
        es = {k: float(v) for k, v in entry["expected_shares"].items()}
        gs = {k: float(v) for k, v in (s.get("fractions") or {}).items()}
        misses = [k for k in sorted(set(es) | set(gs))
                  if abs(gs.get(k, 0.0) - es.get(k, 0.0)) > SHARE_TOL]
        sc["share_misses"] = misses
        sc["shares_ok"] = not misses
    sc["passed"] = all(x is not False for x in (sc["verdict_ok"], sc["straggler_ok"], sc["shares_ok"]))
    return sc


def _shares(d) -> str:
    if not d:
        return "-"
    return " ".join(f"{k}={float(v):.2f}" for k, v in sorted(d.items(), key=lambda kv: -float(kv[1])))


def _strag(v) -> str:
    return "none" if v is None or (isinstance(v, int) and v < 0) else str(v)


def _mark(x) -> str:
    return "n/a" if x is None else ("yes" if x else "**no**")


def _cell(s: str) -> str:
    return str(s).replace("|", "/").replace("\n", " ")


def _live_lines(entries: list[dict], results: dict) -> list[str]:
    """The live detector fed each labelled log a second at a time (not scored: what `gpumon
    watch --replay` would have shown, beside the label and analyze's summary)."""
    rows = [(e, results[e["id"]]) for e in entries if "live" in results.get(e["id"], {})]
    if not rows:
        return []
    L = ["## Live, second by second", "",
         "The live detector (`Detector`) fed each labelled log a second at a time, as "
         "`gpumon watch --replay` would show it: each verdict's share of its seconds, idle and "
         "insufficient_data at either end set aside. Not scored; analyze's summary beside it.", "",
         "| id | label | expected | live: top verdict | live shares | analyze verdict |",
         "|---|---|---|---|---|---|"]
    right = 0
    for e, r in rows:
        lv = r["live"]
        top = max(lv, key=lambda k: lv[k]) if lv else "-"
        right += top == e.get("expected_verdict")
        s = r.get("summary") or {}
        L.append(f"| {e['id']} | {e.get('label')} | {e.get('expected_verdict')} | {top} | "
                 f"{_shares(lv)} | {s.get('verdict', '-')} |")
    L += ["", f"- live top verdict equal to the label: {right}/{len(rows)}", ""]
    return L


def report(entries: list[dict], results: dict, missing: list[dict], manifest: str) -> str:
    now = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    L = [
        "# gpumon analyze on real logs (`make bench-real`)",
        "",
        f"Date: {now}. gpumon commit: {git_commit()}. Python {platform.python_version()}. "
        f"Manifest: `{os.path.relpath(manifest, ROOT)}` ({len(entries)} logs; "
        f"{len(entries) - len(missing)} present). Labels come from each log's data and context "
        "(see `why` in the manifest), never from gpumon. A share passes within "
        f"+-{SHARE_TOL:.2f}; straggler `none` = -1.",
        "",
        "| id | format | GPUs | power | label | expected (straggler) | gpumon verdict (cause) / straggler "
        "| shares expected | shares gpumon | verdict | straggler | shares | pass | s |",
        "|---|---|---:|---|---|---|---|---|---|---|---|---|---|---:|",
    ]
    for e in entries:
        r = results.get(e["id"])
        if r is None:
            continue
        sc = r["score"]
        exp = e.get("expected_verdict", "unlabelled")
        exps = f"{exp} ({_strag(e['expected_straggler'])})" if "expected_straggler" in e else exp
        s = r.get("summary")
        if s is not None:
            got = f"{s.get('verdict')} ({s.get('cause') or '-'}) / {_strag(s.get('straggler_gpu'))}"
            gshares = _shares(s.get("fractions"))
        else:
            got, gshares = _cell(r.get("error", "?"))[:160], "-"
        misses = sc.get("share_misses") or []
        sh = _mark(sc["shares_ok"]) + (f" ({', '.join(misses)})" if misses else "")
        passed = "n/a" if sc["passed"] is None else ("PASS" if sc["passed"] else "**FAIL**")
        L.append(f"| {e['id']} | {e.get('format', '?')} | {e.get('gpus', '?')} | "
                 f"{'yes' if e.get('power') else 'no'} | {e.get('label', 'unlabelled')} | {exps} | "
                 f"{_cell(got)} | {_shares(e.get('expected_shares'))} | {gshares} | "
                 f"{_mark(sc['verdict_ok'])} | {_mark(sc['straggler_ok'])} | {sh} | {passed} | "
                 f"{r['seconds']:.2f} |")
    L.append("")
    L.append("## Totals")
    L.append("")
    for lab in ("solid", "weak"):
        rs = [(e, results[e["id"]]) for e in entries
              if e["id"] in results and e.get("label") == lab and results[e["id"]]["score"]["labelled"]]
        if not rs:
            L.append(f"- {lab} labels: none present")
            continue
        v = sum(1 for _, r in rs if r["score"]["verdict_ok"])
        st = [r for _, r in rs if r["score"]["straggler_ok"] is not None]
        sh = [r for _, r in rs if r["score"]["shares_ok"] is not None]
        p = sum(1 for _, r in rs if r["score"]["passed"])
        L.append(f"- {lab} labels: summary verdict right {v}/{len(rs)}; straggler right "
                 f"{sum(1 for r in st if r['score']['straggler_ok'])}/{len(st)}; shares within "
                 f"+-{SHARE_TOL:.2f} {sum(1 for r in sh if r['score']['shares_ok'])}/{len(sh)}; "
                 f"files passing everything {p}/{len(rs)}")
    errs = [(e, results[e["id"]]) for e in entries
            if e["id"] in results and results[e["id"]]["status"] != "ok"]
    L.append(f"- unreadable or crashed: {len(errs)}"
             + ("" if not errs else ": " + "; ".join(f"{e['id']} ({r['error'][:120]})" for e, r in errs)))
    phys = [(e["id"], results[e["id"]]["physics"]) for e in entries
            if "physics" in results.get(e["id"], {})]
    if phys:
        L += ["", "## Second by second: one rank's stalls", "",
              seconds.__doc__.split("\n\n")[1].replace("\n", " ").replace("*", ""), ""]
        L += seconds.table(phys)
        L.append("")
    L += _live_lines(entries, results)
    un = [(e, results[e["id"]]) for e in entries
          if e["id"] in results and not results[e["id"]]["score"]["labelled"]]
    if un:
        L.append("- unlabelled (what gpumon said):")
        for e, r in un:
            s = r.get("summary")
            said = (f"{s.get('verdict')} ({s.get('cause') or '-'}), straggler "
                    f"{_strag(s.get('straggler_gpu'))}, shares {_shares(s.get('fractions'))}"
                    if s is not None else r.get("error", "?"))
            L.append(f"  - {e['id']}: {_cell(said)}")
    L.append("")
    if missing:
        L.append("## Missing data files")
        L.append("")
        L.append("Not scored: run `python -m bench.real.fetch` (it needs a mirror of each repository "
                 "under /work/.mirror/<owner>+<name> or network access to raw.githubusercontent.com):")
        L.append("")
        repos: dict[str, list[str]] = {}
        for e in missing:
            repos.setdefault(e["repo"], []).append(e["id"])
        for repo, ids in sorted(repos.items()):
            L.append(f"- {repo}: {', '.join(ids)}")
        L.append("")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.real", description=__doc__.split("\n")[0])
    ap.add_argument("ids", nargs="*", help="only these manifest ids")
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--out", default=OUT, help="markdown report (default bench/results/real.md)")
    args = ap.parse_args(argv)
    try:
        entries = load_manifest(args.manifest)
    except ValueError as e:
        print(f"bench.real: {e}", file=sys.stderr)
        return 1
    if args.ids:
        entries = [e for e in entries if e["id"] in set(args.ids)]
    results: dict = {}
    missing: list[dict] = []
    for e in entries:
        path = data_path(e, args.data)
        if not os.path.isfile(path):
            missing.append(e)
            continue
        print(f"  {e['id']} ...", end="", flush=True, file=sys.stderr)
        r = run_one(e, path)
        r["score"] = score(e, r)
        results[e["id"]] = r
        s = r.get("summary")
        print(f" {s['verdict'] if s else r.get('error', '?')[:80]} ({r['seconds']:.2f} s)",
              file=sys.stderr)
    text = report(entries, results, missing, args.manifest)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"\nwritten to {os.path.relpath(args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
