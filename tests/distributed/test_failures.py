"""A dead or missing rank: the survivor gets a DistBackendError naming it, within the timeout."""
import json
import subprocess

import pytest

from dist_testing import PYTHON, ROOT, SCRIPTS, free_port, job_env

TIMEOUT_S = 4


def launch(mode, out):
    port = free_port()
    procs = []
    for rank in range(2):
        env = job_env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([PYTHON, str(SCRIPTS / "dead_rank.py"), mode, str(TIMEOUT_S), str(out)],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    return procs


def test_a_dead_or_hung_rank_raises_dist_backend_error_naming_it(tmp_path):
    jobs = {mode: launch(mode, tmp_path) for mode in ("dead", "hung")}
    try:
        for mode, (survivor, peer) in jobs.items():
            try:
                log = survivor.communicate(timeout=90)[0]
            except subprocess.TimeoutExpired:
                pytest.fail(f"{mode}: the survivor hung")
            assert survivor.returncode == 0, log[-3000:]
            res = json.loads((tmp_path / f"{mode}.json").read_text())
            assert res["is_backend_error"] and res["is_dist_error"], res
            assert "failed on rank 0" in res["message"] and "peer rank 1" in res["message"], res["message"]
            assert "never reached collective #2" in res["message"], res["message"]
        assert jobs["dead"][1].wait(timeout=30) == -9  # it did die
    finally:
        for procs in jobs.values():
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
