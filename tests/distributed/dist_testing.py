"""Launching small torchrun jobs (2 ranks, the tiny preset) for the distributed tests."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(**extra) -> dict:
    env = dict(os.environ)
    env.setdefault("EMU_PRESET", "tiny")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun(script, *args, nproc: int = 2, launcher_args=(), timeout: float = 150, env=None):
    """Runs ``python -m torch.distributed.run --standalone --nproc-per-node N script args``;
    returns the CompletedProcess (stdout and stderr together in ``.stdout``)."""
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "--monitor-interval=0.5", *launcher_args, str(script), *map(str, args)]
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env or job_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"torchrun job hung (killed after {timeout} s): {' '.join(cmd)}\n{err.stdout}")


def tail(proc, n=4000) -> str:
    return proc.stdout[-n:]
