"""examples/ddp_train.py under torchrun: DDP on 2 emu ranks matches one CPU process; a rank that
fails makes torchrun (--max-restarts 1) restart the job, which resumes from its last checkpoint;
the ranks' traces merge into one file with a lane per rank."""
import json

import torch

from dist_testing import ROOT, job_env, tail, torchrun
from scripts.parallel_checks import cpu_mlp_reference
from torch_plugin.distributed.merge_traces import main as merge_main

STEPS, LR = 4, 0.1


def test_ddp_matches_cpu_and_resumes_after_a_rank_failure(tmp_path):
    dump, traces = tmp_path / "ddp.json", tmp_path / "traces"
    proc = torchrun(ROOT / "examples" / "ddp_train.py", "--steps", STEPS, "--lr", LR, "--dump", dump,
                    "--trace-dir", traces, "--checkpoint", tmp_path / "ckpt", "--fail-at-step", 2,
                    launcher_args=["--max-restarts=1"], timeout=240, env=job_env(EMU_HOST_FALLBACK="forbid"))
    assert proc.returncode == 0, tail(proc)
    out = json.loads(dump.read_text())
    # the first attempt failed at step 2 (rank 1; torchrun's agent then stops rank 0, so whether
    # rank 0 raised its DistBackendError first is a race: test_failures.py checks that error)
    assert "rank 1 fails at step 2 on purpose" in proc.stdout
    assert out["restarts"] == 1 and out["start"] == 2
    losses, model = cpu_mlp_reference(STEPS, LR)
    params = model.state_dict()
    torch.testing.assert_close(out["losses"], losses[2:], rtol=1e-4, atol=1e-5)
    for name, value in params.items():
        torch.testing.assert_close(torch.tensor(out["params"][name]), value.reshape(-1), rtol=1e-4, atol=1e-5)
    assert out["collectives"]["all_reduce"]["count"] >= 2  # a gradient bucket per step, and the loss
    # the projected report
    assert "projection (weak scaling" in proc.stdout and "     512 " in proc.stdout
    # one lane per rank in the merged trace, each with its collectives
    merged = tmp_path / "merged.json"
    assert merge_main([str(merged), str(traces / "rank0.json"), str(traces / "rank1.json")]) == 0
    events = json.loads(merged.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert lanes == {0: "rank 0", 1: "rank 1"}
    for rank in (0, 1):
        assert any(e.get("cat") == "collective" and e["pid"] == rank and e["name"].startswith("all_reduce")
                   for e in events)
