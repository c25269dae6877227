"""Fixtures of the projection-mode tests. ``EMU_MODE`` is read when the device powers on, and the
test session's device runs in functional mode, so each check runs its program in a fresh Python
process (``run_program``) with the mode and preset it names, and reads back the JSON the program
prints on its last line."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_program(source: str, mode: str = "projection", preset: str = "tiny", timeout: int = 600, args=()) -> dict:
    """Runs ``source`` (Python; its last stdout line is JSON) under EMU_MODE=mode and returns it."""
    env = {**os.environ, "EMU_MODE": mode, "EMU_PRESET": preset, "EMU_HOST_FALLBACK": "warn",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent(source), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"the program failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])


@pytest.fixture
def program():
    return run_program
