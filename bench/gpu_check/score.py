"""Scores `gpumon analyze --format json` against a workload's ground truth (workloads/truth.py).

    python -m bench.gpu_check.score ANALYZE.json TRUTH.jsonl [--json OUT]

PASS when the summary verdict is one the truth header accepts, the cause matches where one is
expected, and the straggler matches where one can be named; it also reports how much of the
workload's own run time the analysis spent in an accepted verdict, and the truth's shares of
step time (waiting for data, computing, waiting for other ranks). Exit 0 PASS, 1 FAIL, 2 when
it cannot score (missing or malformed input).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from workloads.truth import read_truth, summarize

# The first seconds of a run are set aside: start-up (CUDA init, loader workers forking) is
# not the steady state a verdict describes, and the detector needs a window to fill.
WARMUP_S = 5.0


class ScoreError(Exception):
    """Input that cannot be scored; the message is one line."""


def load_analysis(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise ScoreError(f"{path}: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        raise ScoreError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})")
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise ScoreError(f"{path}: no 'summary' object (expected gpumon analyze --format json)")
    if "verdict" not in doc["summary"]:
        raise ScoreError(f"{path}: summary has no verdict")
    return doc


def accepted_time_share(segments: list, accept: list[str], start: float,
                        end: float) -> Optional[float]:
    """Share of [start, end] covered by segments whose verdict is accepted, over the time
    covered by any segment (None when no segment overlaps)."""
    covered = good = 0.0
    for seg in segments or []:
        try:
            s, e = float(seg["start"]), float(seg["end"])
        except (KeyError, TypeError, ValueError):
            continue
        overlap = min(e, end) - max(s, start)
        if overlap <= 0:
            continue
        covered += overlap
        if seg.get("verdict") in accept:
            good += overlap
    return round(good / covered, 4) if covered > 0 else None


def score(analysis: dict, header: dict, steps: list[dict], warmup_s: float = WARMUP_S) -> dict:
    """Compares one analysis with one truth; returns a result dict (see module doc)."""
    summary = analysis["summary"]
    truth = summarize(steps)
    accept = list(header.get("accept_verdicts") or [header["expected_verdict"]])
    got_v, got_c = summary.get("verdict"), summary.get("cause")
    got_s = summary.get("straggler_gpu")
    exp_c, exp_s = header.get("expected_cause"), header.get("straggler")
    checks = {"verdict": got_v in accept}
    checks["cause"] = True if exp_c is None else got_c == exp_c
    if exp_s is not None:
        checks["straggler"] = got_s == exp_s
    elif (header.get("gpus") or 0) > 1:
        checks["straggler"] = got_s is None   # several GPUs, nobody to wait for
    share, evidence = None, ""
    if steps:
        start = min(s["t_start"] for s in steps) + warmup_s
        end = max(s["t_end"] for s in steps)
        if end > start:
            share = accepted_time_share(analysis.get("segments") or [], accept, start, end)
        evidence = main_evidence(analysis.get("segments") or [], start - warmup_s, end)
    result = "PASS" if all(checks.values()) else "FAIL"
    return {
        "scenario": header.get("scenario"), "result": result, "checks": checks,
        "expected": {"verdict": header["expected_verdict"], "cause": exp_c, "straggler": exp_s,
                     "accept": accept},
        "got": {"verdict": got_v, "cause": got_c, "straggler_gpu": got_s,
                "confidence": summary.get("confidence"),
                "fractions": summary.get("fractions")},
        "accepted_time_share": share, "truth": truth, "note": header.get("note", ""),
        "intended": header.get("intended"), "evidence": evidence,
        "detail": detail_line(header, summary, truth, share)
        + (f"; gpumon saw: {evidence}" if evidence else ""),
    }


# Evidence worth seeing in the one-line result (from gpumon's longest segment in the run),
# with its format: what the driver and the host showed, whatever the verdict.
EVIDENCE_KEYS = (("duty_cycle", "duty {:.2f}"), ("power_frac_busy", "power/limit busy {:.2f}"),
                 ("busy_cold_share", "busy-cold {:.2f}"), ("iowait_pct", "iowait {:.0f}%"),
                 ("disk_read_mbps", "disk read {:.0f} MB/s"),
                 ("loader_cpu_pct", "loader CPU {:.0f}%"), ("main_cpu_pct", "main CPU {:.0f}%"))


def main_evidence(segments: list, start: float, end: float) -> str:
    """A few evidence numbers of the segment covering most of [start, end]."""
    best, best_overlap = None, 0.0
    for seg in segments or []:
        try:
            overlap = min(float(seg["end"]), end) - max(float(seg["start"]), start)
        except (KeyError, TypeError, ValueError):
            continue
        if overlap > best_overlap and isinstance(seg.get("evidence"), dict):
            best, best_overlap = seg, overlap
    if best is None:
        return ""
    ev = best["evidence"]
    parts = [fmt.format(ev[k]) for k, fmt in EVIDENCE_KEYS
             if isinstance(ev.get(k), (int, float))]
    return ", ".join(parts)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def detail_line(header: dict, summary: dict, truth: dict, share: Optional[float]) -> str:
    exp = header["expected_verdict"] + (f"/{header['expected_cause']}"
                                        if header.get("expected_cause") else "")
    if header.get("straggler") is not None:
        exp += f" straggler {header['straggler']}"
    got = str(summary.get("verdict")) + (f"/{summary['cause']}" if summary.get("cause") else "")
    if summary.get("straggler_gpu") is not None:
        got += f" straggler {summary['straggler_gpu']}"
    conf = summary.get("confidence")
    parts = [f"expected {exp}; got {got}" + (f" (conf {conf:.2f})" if isinstance(
        conf, (int, float)) else "")]
    if share is not None:
        parts.append(f"{_pct(share)} of run time in an accepted verdict")
    if truth.get("steps"):
        parts.append(f"truth: data {_pct(truth.get('data_share'))} compute "
                     f"{_pct(truth.get('compute_share'))} sync {_pct(truth.get('sync_share'))}"
                     + (f" ckpt {_pct(truth.get('checkpoint_share'))}"
                        if truth.get("checkpoint_share") else "")
                     + f", step {truth.get('median_step_ms')} ms x{truth['steps']}")
    return "; ".join(parts)


def score_files(analysis_path: str, truth_path: str, warmup_s: float = WARMUP_S) -> dict:
    try:
        header, steps = read_truth(truth_path)
    except OSError as exc:
        raise ScoreError(f"{truth_path}: {exc.strerror or exc}")
    except ValueError as exc:
        raise ScoreError(str(exc))
    if not steps:
        raise ScoreError(f"{truth_path}: no steps recorded")
    return score(load_analysis(analysis_path), header, steps, warmup_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check.score", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("analysis", help="gpumon analyze --format json output")
    p.add_argument("truth", help="the workload's truth JSONL")
    p.add_argument("--json", help="write the full result here")
    p.add_argument("--warmup-s", type=float, default=WARMUP_S)
    args = p.parse_args(argv)
    try:
        res = score_files(args.analysis, args.truth, args.warmup_s)
    except ScoreError as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=1, sort_keys=True)
    print(f"{res['result']} {res['scenario']}: {res['detail']}")
    return 0 if res["result"] == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
