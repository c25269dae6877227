"""``qualify compare BASELINE_DIR NEW_DIR``: the regression gate.

Projected numbers are deterministic for a given tree, so any projected metric that moved by more
than its threshold (relative: ``|new - old| / |old|``; the new artifact's ``thresholds``, from
its suite, default 1%; ``--threshold metric=fraction`` overrides) is a failure, and so is a
workload present on one side only, a metric present on one side only, a run with host fallback
and an unqualified artifact. Emulation wall time is never compared.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from torch_plugin.qualify.suite import DEFAULT_THRESHOLD, METRICS


@dataclass(frozen=True)
class Finding:
    workload: str
    metric: str | None
    message: str
    failure: bool = True

    def __str__(self) -> str:
        where = self.workload + (f" {self.metric}" if self.metric else "")
        return f"{'FAIL' if self.failure else 'ok  '} {where}: {self.message}"


def load_artifacts(directory) -> dict[str, dict]:
    """{workload name: artifact} of every *.json artifact in ``directory``."""
    path = Path(directory)
    if not path.is_dir():
        raise SystemExit(f"{directory}: not a directory of qualification artifacts")
    out = {}
    for file in sorted(path.glob("*.json")):
        try:
            artifact = json.loads(file.read_text())
        except json.JSONDecodeError as err:
            raise SystemExit(f"{file}: not valid JSON: {err}") from None
        if not isinstance(artifact, dict) or "workload" not in artifact or "metrics" not in artifact:
            raise SystemExit(f"{file}: not a qualification artifact (no workload or metrics)")
        out[artifact["workload"]["name"]] = artifact
    return out


def compare(baseline_dir, new_dir, overrides: dict | None = None) -> list[Finding]:
    """Every check of the gate, passing ones included (``failure`` False)."""
    baseline, new = load_artifacts(baseline_dir), load_artifacts(new_dir)
    findings = []
    if not baseline and not new:
        return [Finding("(suite)", None, f"no artifacts in {baseline_dir} or {new_dir}")]
    for name in sorted(set(baseline) | set(new)):
        if name not in new:
            findings.append(Finding(name, None, f"in the baseline ({baseline_dir}), missing from {new_dir}"))
            continue
        if name not in baseline:
            findings.append(Finding(name, None, f"in {new_dir}, missing from the baseline ({baseline_dir}): "
                                                "regenerate the baseline in the same commit"))
            continue
        findings += compare_workload(name, baseline[name], new[name], overrides or {})
    return findings


def compare_workload(name: str, old: dict, new: dict, overrides: dict) -> list[Finding]:
    findings = []
    for side, artifact in (("baseline", old), ("new", new)):
        fallback = artifact.get("op_paths", {}).get("fallback_count")
        if fallback is None or fallback > 0:
            ops = ", ".join(f"{op} x{n}" for op, n in artifact.get("op_paths", {}).get("fallback_ops", {}).items())
            findings.append(Finding(name, "fallback_count", f"{side} ran {fallback} ops on the host fallback"
                                    + (f" ({ops})" if ops else "") + ": a qualified run has none"))
        if not artifact.get("qualified", False):
            findings.append(Finding(name, None, f"{side} artifact is not qualified (fallback policy "
                                                f"{artifact['workload'].get('fallback')!r}; qualified needs 'forbid')"))
    thresholds = dict(new.get("thresholds", {}))
    thresholds.update(overrides)
    old_metrics, new_metrics = old["metrics"], new["metrics"]
    for metric in _ordered(set(old_metrics) | set(new_metrics)):
        if metric not in new_metrics:
            findings.append(Finding(name, metric, f"in the baseline ({_fmt(old_metrics[metric])}), missing from the "
                                                  "new run"))
            continue
        if metric not in old_metrics:
            findings.append(Finding(name, metric, f"new metric ({_fmt(new_metrics[metric])}), not in the baseline: "
                                                  "regenerate the baseline in the same commit"))
            continue
        a, b = float(old_metrics[metric]), float(new_metrics[metric])
        limit = thresholds.get(metric, DEFAULT_THRESHOLD)
        change = _relative_change(a, b)
        text = f"baseline {_fmt(a)}, new {_fmt(b)} ({_pct(change)}, threshold {100 * limit:g}%)"
        findings.append(Finding(name, metric, text, failure=not change <= limit))
    return findings


def _relative_change(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if a == 0 or not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(b - a) / abs(a)


def _ordered(metrics) -> list[str]:
    return sorted(metrics, key=lambda m: (METRICS.index(m) if m in METRICS else len(METRICS), m))


def _fmt(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _pct(change: float) -> str:
    return "moved without bound" if math.isinf(change) else f"moved {100 * change:.3f}%"


def parse_overrides(items) -> dict:
    out = {}
    for item in items or ():
        metric, eq, value = item.partition("=")
        if not eq or metric not in METRICS:
            raise SystemExit(f"--threshold {item!r}: expected METRIC=FRACTION with a metric of {', '.join(METRICS)}")
        try:
            out[metric] = float(value)
        except ValueError:
            raise SystemExit(f"--threshold {item!r}: {value!r} is not a number") from None
    return out


def main(baseline_dir, new_dir, overrides=None, verbose: bool = False, out=None) -> int:
    import sys
    out = out or sys.stdout
    findings = compare(baseline_dir, new_dir, parse_overrides(overrides))
    failures = [f for f in findings if f.failure]
    for finding in findings:
        if finding.failure or verbose:
            print(finding, file=out)
    workloads = len({f.workload for f in findings})
    if failures:
        print(f"qualification gate: FAILED, {len(failures)} finding(s) over {workloads} workload(s) "
              f"(baseline {baseline_dir}, new {new_dir}). If the change is intended, regenerate the baseline "
              "(docs/qualification.md) and give the reason in the commit message.", file=out)
        return 1
    checked = sum(1 for f in findings if f.metric)
    print(f"qualification gate: passed, {workloads} workload(s), {checked} metric(s) within their thresholds", file=out)
    return 0
