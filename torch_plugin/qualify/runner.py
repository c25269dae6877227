"""``qualify run``: each workload of a suite in a process of its own, one JSON artifact each.

The process gets a clean EMU_* environment: every EMU_* variable of the caller is dropped (an
armed fault, launch blocking or another preset must not leak into a qualified number), then the
workload's preset or hardware file, fidelity, execution mode and host-fallback policy are set.
The device reads them when it powers on in that process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torch_plugin.qualify.suite import DEFAULT_POWER_MODE, Suite, Workload, load_suite
from torch_plugin.qualify.worker import FORMAT, progress_bar

WORKLOAD_TIMEOUT_S = 3600


def workload_environment(workload: Workload, base=None) -> dict:
    """The environment a workload's process runs with."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("EMU_")}
    if workload.hardware is not None:
        env["EMU_CONFIG"] = workload.hardware
    else:
        env["EMU_PRESET"] = workload.preset
    env.update(EMU_FIDELITY=workload.fidelity, EMU_MODE=workload.mode, EMU_HOST_FALLBACK=workload.fallback)
    if workload.power_mode != DEFAULT_POWER_MODE:
        env["EMU_POWER_MODE"] = workload.power_mode
    return env


def artifact_name(workload: Workload) -> str:
    return f"{workload.name}.json"


def run_suite(suite_path, out_dir, only=None, progress: bool = True, log=sys.stderr) -> int:
    """Runs the suite's workloads (``only``: names to run) and writes ``out_dir/<name>.json``.
    Returns the number of workloads that failed (their error printed, no artifact written)."""
    from torch_plugin import zoo
    suite = load_suite(suite_path, zoo_names=set(zoo.MODELS))
    workloads = [w for w in suite.workloads if not only or w.name in only]
    unknown = sorted(set(only or ()) - {w.name for w in suite.workloads})
    if unknown:
        raise SystemExit(f"{suite_path}: no workload named {', '.join(unknown)} "
                         f"(workloads: {', '.join(w.name for w in suite.workloads)})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(len(workloads), f"qualify {suite.name}", "workload", progress)
    failed = 0
    for workload in workloads:
        if bar is not None:
            bar.set_postfix_str(workload.name)
        else:
            print(f"qualify {suite.name}: {workload.name} ...", file=log, flush=True)
        error = run_workload(suite, workload, out / artifact_name(workload))
        if error:
            failed += 1
            print(f"qualify {suite.name}: workload {workload.name!r} failed:\n{error}", file=log, flush=True)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    print(f"qualify {suite.name}: {len(workloads) - failed} of {len(workloads)} workloads written to {out}"
          + (f", {failed} failed" if failed else ""), file=log, flush=True)
    return failed


def run_workload(suite: Suite, workload: Workload, artifact_path: Path) -> str | None:
    """Runs one workload in a child process; writes its artifact. Returns the error text or None."""
    artifact_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="qualify-") as tmp:
        spec, result = Path(tmp) / "workload.json", Path(tmp) / "artifact.json"
        spec.write_text(json.dumps(workload.as_dict()))
        env = workload_environment(workload)
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "torch_plugin.qualify.worker", str(spec), str(result)],
                                  env=env, stdout=subprocess.PIPE, stderr=None if sys.stderr.isatty() else
                                  subprocess.PIPE, text=True, timeout=WORKLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"did not finish within {WORKLOAD_TIMEOUT_S} s"
        if proc.returncode != 0 or not result.exists():
            tail = "\n".join((proc.stderr or "").strip().splitlines()[-25:])
            return f"exit status {proc.returncode}\n{tail}"
        measured = json.loads(result.read_text())
    artifact = {"format": FORMAT, "suite": {"name": suite.name, "file": _relative(suite.path),
                                            "description": suite.description},
                "workload": workload.as_dict(), "qualified": workload.qualified and
                measured["op_paths"]["fallback_count"] == 0,
                "environment": {k: v for k, v in env.items() if k.startswith("EMU_")},
                **measured,
                "thresholds": {metric: suite.threshold(workload, metric) for metric in measured["metrics"]}}
    artifact["emulation"]["process_wall_s"] = time.perf_counter() - start
    if workload.hardware is not None:
        artifact["workload"]["hardware"] = _relative(workload.hardware)
        artifact["environment"]["EMU_CONFIG"] = _relative(workload.hardware)
    artifact_path.write_text(json.dumps(artifact, indent=1, sort_keys=True) + "\n")
    return None


def _relative(path: str) -> str:
    """A path inside the repository as a relative one (artifacts move between checkouts)."""
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)
