"""What-if sweeps: one script rerun once per value of one hardware field, and their table.

Each run is a fresh process (``python -m torch_plugin.profile``) with a fresh emulated system whose
description is the current one with that field changed (a generated TOML named by EMU_CONFIG);
every value is validated before anything runs. Leaves out sweeping several fields at once and
comparing anything but the projected times and the verdict.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from runtime import report as device_report
from torch_plugin.profile.progress import Progress
from torch_plugin.profile.run import DEFAULT_OUT_DIR, REPORT_FILE, require_script


def parse_sweep(text: str) -> tuple[str, list]:
    """"field=v1,v2,..." -> (field, [values]); each value a TOML literal (2, 1.5, true, "ws") or
    else a bare string."""
    import tomllib
    field, sep, values = text.partition("=")
    field = field.strip()
    if not sep or not field or not values.strip():
        raise ValueError(f"--sweep {text!r}: expected FIELD=V1,V2,... (e.g. device.hbm.bandwidth_gb_per_s=800,1600)")
    out = []
    for raw in values.split(","):
        raw = raw.strip()
        if not raw:
            raise ValueError(f"--sweep {text!r}: an empty value")
        try:
            out.append(tomllib.loads(f"v = {raw}")["v"])
        except tomllib.TOMLDecodeError:
            out.append(raw)
    return field, out


def sweep(script: str, field: str, values, args=(), out_dir: str = DEFAULT_OUT_DIR,
          progress: bool = True) -> list[dict]:
    """Reruns ``script`` once per value with the hardware field ``field`` (dotted path of the
    hardware description, e.g. "device.hbm.bandwidth_gb_per_s") set to it, each in a fresh
    process with a fresh emulated system (``EMU_CONFIG`` names a generated TOML: the current
    description, EMU_CONFIG's or EMU_PRESET's, with that one field changed). Returns one dict
    per value: value, projected_total_time_s, projected_device_time_s, wall_time_s, verdict,
    out_dir. Every value is validated before anything runs."""
    require_script(script)
    values = list(values)
    if not values:
        raise ValueError("sweep: no values")
    base = device_report.current_description()
    plans = []
    for value in values:
        run_dir = os.path.join(out_dir, "sweep", f"{field}={value}")
        os.makedirs(run_dir, exist_ok=True)
        description = device_report.with_field(base, field, value)
        description["name"] = f"{base.get('name', 'custom')} with {field}={value}"
        config_path = os.path.join(run_dir, "hardware.toml")
        with open(config_path, "w") as out:
            out.write(f"# {base.get('name')} with {field} = {value!r} (python -m torch_plugin.profile --sweep)\n")
            out.write(device_report.description_toml(description))
        device_report.check_description_file(config_path)  # a bad value: the error names the field
        plans.append((value, run_dir, config_path))
    bar = Progress(progress, total=len(plans), desc=f"sweep {field}")
    results = []
    try:
        for value, run_dir, config_path in plans:
            bar.phase(f"{field}={value}")
            env = dict(os.environ, EMU_CONFIG=os.path.abspath(config_path))
            env.pop("EMU_PRESET", None)
            done = subprocess.run([sys.executable, "-m", "torch_plugin.profile", "--out-dir", run_dir,
                                   "--no-progress", "--quiet", script, *args],
                                  env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"sweep: the run with {field}={value!r} failed (exit {done.returncode}):\n"
                                   f"{done.stderr[-4000:]}")
            with open(os.path.join(run_dir, REPORT_FILE)) as f:
                data = json.load(f)
            results.append({"value": value, "projected_total_time_s": data["projected_total_time_s"],
                            "projected_device_time_s": data["projected_device_time_s"],
                            "wall_time_s": data["wall_time_s"], "verdict": data["verdict"], "out_dir": run_dir})
            bar.step()
    finally:
        bar.close()
    return results


def sweep_table(field: str, results: list[dict]) -> str:
    """The sweep for people: projected times per value, and the speed-up over the first value."""
    first = results[0]["projected_total_time_s"] if results else 0.0
    width = max([len(field)] + [len(str(r["value"])) for r in results])
    lines = [f"{field:<{width}}  {'total us':>12}  {'device us':>12}  {'speed-up':>8}  verdict"]
    for r in results:
        speedup = first / r["projected_total_time_s"] if r["projected_total_time_s"] else float("inf")
        lines.append(f"{str(r['value']):<{width}}  {r['projected_total_time_s'] * 1e6:>12.1f}  "
                     f"{r['projected_device_time_s'] * 1e6:>12.1f}  {speedup:>7.2f}x  {r['verdict']}")
    return "\n".join(lines)
