"""The benchmark scripts keep running (smoke test: no timing is asserted here)."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_copy_and_launch_benchmark_runs_and_reports_every_case():
    env = dict(os.environ, EMU_PRESET="tiny")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_copy_and_launch.py"), "--quick"],
                            capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    for case in ("host->device copy 1 MiB", "device->host copy 1 MiB", "tiny device op"):
        assert case in result.stdout
    assert ("all targets met" in result.stdout) or ("OVER TARGET" in result.stdout)


def test_memory_benchmark_runs_and_reports_both_cases():
    env = dict(os.environ, EMU_PRESET="tiny")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_memory.py"), "--quick"],
                            capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    for case in ("empty+free 64 B", "empty+free 1 KiB", "empty+free 64 KiB"):
        line = next(line for line in result.stdout.splitlines() if line.startswith(case))
        assert re.search(r"\d+\.\d+x\s+no target\s+reported", line), line
    line = next(line for line in result.stdout.splitlines()
                if line.startswith("fragmentation: peak reserved/allocated"))
    ratio = float(re.search(r"(\d+\.\d+)x\s+target <= 1\.3x", line).group(1))
    assert ratio >= 1.0, line   # reserved memory holds every allocated block
    assert "training matches CPU" in result.stdout
    assert ("all targets met" in result.stdout) or ("OVER TARGET" in result.stdout)
