"""One 2-rank torchrun job ("cpu:gloo,emu:emu"): every collective on emu tensors against the CPU
answer, simulated time across ranks, FSDP2, tensor parallelism and a sharded checkpoint; then the
checkpoint loads into 4 ranks on two "nodes" (two torchrun launches, --nnodes 2 on localhost) and
into one process."""
import json
import subprocess

import pytest
import torch

from dist_testing import PYTHON, ROOT, SCRIPTS, free_port, job_env, tail, torchrun
from torch_plugin.zoo import MODELS


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    ckpt = out / "ckpt"
    ckpt.mkdir()
    proc = torchrun(SCRIPTS / "collectives.py", "cpu:gloo,emu:emu", ckpt, env=job_env(EMU_TEST_OUT=out))
    assert proc.returncode == 0, tail(proc)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)], ckpt


def test_collectives_on_emu_tensors_across_two_ranks(job):
    results, _ = job
    for res in results:
        failed = [name for name, ok in res["checked"].items() if not ok]
        assert not failed, f"rank {res['rank']}: {failed}"
        assert len(res["checked"]) == 28
        assert res["backend_name"] == "cpu:gloo,emu:emu"
        # Modelled time: one record per collective, the algorithm reported.
        assert {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "barrier", "send",
                "recv"} <= set(res["ops"])
        assert set(res["algorithms"]) <= {"ring", "tree", "direct"} and res["algorithms"]


def test_simulated_time_agrees_across_ranks(job):
    results, _ = job
    # Both complete the barrier at the same time: the latest arrival (rank 0, which ran extra
    # device work) plus the modelled duration; rank 1 waited for it.
    b0, b1 = results[0]["last_barrier"], results[1]["last_barrier"]
    assert b0["end_ns"] == b1["end_ns"] == max(b0["ready_ns"], b1["ready_ns"]) + b0["duration_ns"]
    assert b1["wait_ns"] > 0 and b0["wait_ns"] == 0
    assert results[0]["clocks_after_barrier"][0] == results[0]["clocks_after_barrier"][1]


def test_a_collective_overlaps_compute_on_its_links(job):
    results, _ = job
    for res in results:
        o = res["overlap"]
        coll = o["record"]["duration_ns"]
        # The compute alone takes longer than the collective; together they take hardly longer than
        # the compute (not compute + collective, as when a collective blocked its rank).
        assert o["compute_ns"] > coll > 0
        assert o["step_ns"] < o["compute_ns"] + 0.5 * coll, o
        assert o["step_ns"] >= coll
    # Both ranks agree on when it ran.
    r0, r1 = (res["overlap"]["record"] for res in results)
    assert r0["start_ns"] == r1["start_ns"] and r0["end_ns"] == r1["end_ns"]


def test_collectives_of_a_rank_take_turns_on_its_links(job):
    results, _ = job
    for res in results:
        first, second = res["back_to_back"]
        assert second["ready_ns"] == second["start_ns"] == first["end_ns"]   # links busy until then
        # The device commands held the rank's network port and its link, one after the other.
        (_, s1, e1, lanes1), (_, s2, e2, lanes2) = res["link_trace"][-2:]
        device = first["device"]
        assert lanes1 == lanes2 and lanes1[0] == f"dev{device}.net" and len(lanes1) == 2
        assert s2 >= e1 and e2 - s2 == pytest.approx(second["duration_ns"])
    assert results[0]["back_to_back"][1]["end_ns"] == results[1]["back_to_back"][1]["end_ns"]


def test_the_profiler_reports_a_collective_per_op_with_its_link_time(job):
    results, _ = job
    for res in results:
        p = res["profiled"]
        assert p["row"] is not None, "no c10d::all_reduce row in the profile report"
        assert p["row"]["bound"] == "interconnect" and p["row"]["path"] == "native"
        assert "collective.all_reduce" in p["row"]["kernel"]
        assert p["row"]["time_s"] * 1e9 == pytest.approx(p["duration_ns"])


def test_peer_link_error_fails_the_collective_on_every_rank_with_its_cause_chain(job):
    results, _ = job
    for res in results:
        chain = res["peer_link_error"]
        assert chain, "the collective did not fail"
        assert "job scope" in chain[0] and "peer_link_error on the interconnect link of rank(s) 1" in chain[0]
    assert len(results[0]["peer_link_error"]) == 1  # rank 0's link is fine: no cause of its own
    faulted = results[1]["peer_link_error"]
    assert any("StreamFaultError" in c for c in faulted)
    assert "peer_link_error" in faulted[-1] and "interconnect" in faulted[-1]  # down to the link


def test_fsdp2_matches_a_cpu_run(job):
    for res in job[0]:
        got = res["parallel"]["fsdp2"]
        assert "error" not in got, got
        assert got["sharded"] and got["loss_diff"] < 1e-4 and got["param_diff"] < 1e-5, got


def test_tensor_parallel_transformer_block_matches_cpu(job):
    for res in job[0]:
        got = res["parallel"]["tp"]
        assert "error" not in got, got
        assert got["sharded"] and got["out_diff"] < 1e-4 and got["grad_diff"] < 1e-4, got


def test_checkpoint_from_2_ranks_loads_into_4_ranks_on_two_nodes_which_train_ddp_and_fsdp2(job):
    results, ckpt = job
    assert results[0]["parallel"]["dcp_save"] is True, results[0]["parallel"]["dcp_save"]
    port = free_port()
    nodes = [subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={n}",
                               "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={port}",
                               "--monitor-interval=0.5", str(SCRIPTS / "parallel_checks.py"), str(ckpt)],
                              cwd=ROOT, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for n in range(2)]
    try:
        logs = [p.communicate(timeout=180)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in nodes] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    loads = [json.loads((ckpt / f"load{r}.json").read_text()) for r in range(4)]
    for got in loads:
        assert "error" not in got, got
        assert got["world"] == 4 and got["diff"] == 0.0
        assert got["local_rows"] == 128 // 4  # resharded over 4 ranks (first layer: 128 rows)
    assert sorted(g["group_rank"] for g in loads) == [0, 0, 1, 1]  # two nodes of two ranks
    for got in loads:  # the same job trains DDP and FSDP2 on the 4 ranks against the CPU run
        for kind in ("ddp", "fsdp2"):
            assert "error" not in got[kind], got[kind]
            assert got[kind]["loss_diff"] < 1e-4 and got[kind]["param_diff"] < 1e-5, (kind, got[kind])


def test_checkpoint_from_2_ranks_loads_into_one_process(job):
    import torch.distributed.checkpoint as dcp
    _, ckpt = job
    ref = torch.load(ckpt / "reference.pt")
    for device in ("cpu", "emu"):
        model = MODELS["mlp"].build(1).to(device)
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=str(ckpt / "dcp"))
        model.load_state_dict(state["model"])
        for k, v in model.state_dict().items():
            assert torch.equal(v.cpu(), ref[k]), (device, k)
