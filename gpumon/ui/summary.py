"""The one-paragraph summary printed when watching stops or `gpumon run`'s command ends."""
from __future__ import annotations

from typing import Optional

from gpumon.diagnosis import BUSY, IDLE, INSUFFICIENT_DATA, Diagnosis, evidence_text
from gpumon.ui.model import Dashboard
from gpumon.ui.screen import gpu_range, gpus_text, hms
from gpumon.ui.style import NO_VERDICT

# A problem verdict becomes the main finding once it holds this share of the verdict time, 1:
# below it, a few intervals at a phase change or a checkpoint would headline a healthy run.
MAIN_MIN_SHARE = 0.10
_HEALTHY = (BUSY, IDLE, INSUFFICIENT_DATA)


def main_finding(d: Dashboard) -> Optional[Diagnosis]:
    """The latest diagnosis of the most frequent (verdict, cause), problems first."""
    total = sum(d.verdict_s.values())
    if not total:
        return None
    problems = {v: s for v, s in d.verdict_s.items() if v not in _HEALTHY}
    if problems and max(problems.values()) / total >= MAIN_MIN_SHARE:
        verdict = max(problems, key=problems.get)
    else:
        verdict = max(d.verdict_s, key=d.verdict_s.get)
    keys = [k for k in d.cause_counts if k[0] == verdict]
    key = max(keys, key=lambda k: d.cause_counts[k])
    return d.last_by_key[key]


def verdict_shares(d: Dashboard) -> list[tuple[str, float]]:
    """(verdict, share of the watched time), largest first; NO_VERDICT (insufficient_data or
    no diagnosis: one name) for the rest."""
    total = sum(d.verdict_s.values()) + d.no_verdict_s
    if not total:
        return []
    shares = [(v, s / total) for v, s in d.verdict_s.items()]
    if d.no_verdict_s:
        shares.append((NO_VERDICT, d.no_verdict_s / total))
    return sorted(shares, key=lambda x: -x[1])


def whole_percents(shares: list[tuple[str, float]]) -> list[tuple[str, int]]:
    """Shares as whole percents that sum to 100 (largest remainders round up), zeros left
    out."""
    raw = [100 * s for _, s in shares]
    pct = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: pct[i] - raw[i])
    for i in order[:max(0, 100 - sum(pct))]:
        pct[i] += 1
    out = [(name, p) for (name, _), p in zip(shares, pct) if p]
    return sorted(out, key=lambda x: -x[1])


def summary_text(d: Dashboard, *, elapsed: Optional[float] = None, command: str = "") -> str:
    v = d.view()
    n = len(v.gpus)
    what = {"sim": "SIMULATED ", "replay": "replayed "}.get(d.kind, "")
    where = f"{n} {what}GPU{'s' if n != 1 else ''} ({gpu_range(tuple(g.index for g in v.gpus))}"
    where += f", {d.label})" if d.label else ")"
    seconds = v.elapsed if elapsed is None else elapsed
    head = f"gpumon {'ran ' + command + ' on' if command else 'watched'} {where} for {hms(seconds)}"
    if not d.ticks:
        return head + ": no readings were taken."
    shares = verdict_shares(d)
    if not d.detector:
        return head + ": no verdicts (the detector is not available in this build)."
    if not d.verdict_s:
        from gpumon.ui.status import no_util_gpus
        blind = no_util_gpus(v)      # (a MIG instance, a vGPU: no utilization to judge)
        why = (f"GPU {','.join(map(str, blind))} did not report utilization" if blind
               else "too little data")
        return head + f": {NO_VERDICT} ({why})."
    text = head + ": " + ", ".join(f"{name} {p}%" for name, p in whole_percents(shares))
    text += " of the time."
    main = main_finding(d)
    if main is not None:
        what = main.verdict
        extra = [x for x in (main.cause, f"straggler GPU {main.straggler_gpu}"
                             if main.straggler_gpu is not None else None) if x]
        text += f" Main finding: {what}" + (f" ({', '.join(extra)})" if extra else "")
        text += f" on {gpus_text(main.gpus)}"
        if main.because:
            text += f"; rule {main.rule}: {main.because}"
        elif evidence_text(main.evidence):
            text += f"; evidence: {evidence_text(main.evidence)}"
        text += "."
        if main.advice:
            text += f" Advice: {main.advice.rstrip('.')}."
    return text
