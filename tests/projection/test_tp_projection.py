"""Tensor parallelism in projection mode: ``torchrun -m torch_plugin.project --tp 2`` on a tiny
llama config (h200x8, 2 ranks). The model is really sharded (each rank's parameter bytes are the
plan's), the collectives are the plan's, timed by the interconnect model and move no data, the
timeline of a TP prefill and decode step is the functional mode's on every rank, and what needs
values is refused with the op named."""
import json

import pytest
from emulator.collectives import collective_cost
from emulator.config import load_preset

from torchrun_jobs import (TINY_LLAMA, TINY_LLAMA_ARG, assert_same_timeline, cli, step, torchrun,
                           tp_local_parameter_bytes)

BF16 = 2


def test_cli_projects_a_tensor_parallel_prefill_and_decode(tmp_path):
    prefill, decode = 32, 3
    r = cli(tmp_path, "--tp", "2", "--prefill", str(prefill), "--decode", str(decode))
    assert r["tp"] == 2 and r["fsdp"] == 1
    assert r["prefill_s"] > 0 and r["decode_s_per_token"] > 0
    assert r["stdout"].count("Projection of llama") == 1, "rank 0 alone reports"
    assert "2 ranks (tp 2)" in r["stdout"]
    # each rank holds its shard, not the model
    assert r["local_parameter_bytes_per_rank"] == [tp_local_parameter_bytes(TINY_LLAMA, 2)] * 2
    assert all(p >= r["local_parameter_bytes_per_rank"][0] for p in r["peak_device_memory_bytes_per_rank"])
    # the plan's collectives: an all_reduce after the embedding and after each o_proj and down_proj,
    # and the LM head's logits (the last position) gathered
    h, layers, vocab = TINY_LLAMA["hidden_size"], TINY_LLAMA["num_hidden_layers"], TINY_LLAMA["vocab_size"]
    interconnect = load_preset("h200x8").interconnect
    for phase, tokens, per in (("prefill", prefill, 1), ("decode", 1, decode)):
        ops = r[f"collectives_{phase}"]
        assert set(ops) == {"all_reduce", "all_gather"}, ops
        reduce, gather = ops["all_reduce"], ops["all_gather"]
        assert reduce["count"] == per * (1 + 2 * layers) and gather["count"] == per
        size = tokens * h * BF16
        assert reduce["bytes"] == reduce["count"] * size and gather["bytes"] == per * vocab * BF16
        # timed by the emulator's interconnect model of h200x8 (a sum of equal floats: approx)
        one_reduce = collective_cost("all_reduce", size, 2, interconnect).time_ns
        one_gather = collective_cost("all_gather", vocab * BF16, 2, interconnect).time_ns
        assert reduce["modelled_ns"] == pytest.approx(reduce["count"] * one_reduce, rel=1e-12)
        assert gather["modelled_ns"] == pytest.approx(per * one_gather, rel=1e-12)
    assert r["collective_host_copy_bytes"] == 0, "projection-mode collectives moved data through the host"


def test_tensor_parallel_timeline_is_identical_in_both_modes(tmp_path):
    assert_same_timeline(step(tmp_path, "tp", "functional"), step(tmp_path, "tp", "projection"))


REFUSALS = r"""
import argparse, json, os, sys
import torch, torch_plugin
import torch.distributed as dist
from torch_plugin import project
args = argparse.Namespace(model="llama", config=sys.argv[2], tp=2, fsdp=1)
mesh = project.init_parallel(args)
model, _ = project.build_model(args, torch.bfloat16, mesh)
with torch.no_grad():
    logits = model(input_ids=torch.zeros((1, 8), dtype=torch.long, device="emu")).logits
weight = model.model.layers[0].self_attn.q_proj.weight   # a DTensor
errors = {}
for name, fn in (("cpu", lambda: logits.cpu()), ("item", lambda: logits[0, 0, 0].item()),
                 ("full_tensor_cpu", lambda: weight.full_tensor().cpu()),
                 ("mixed_all_gather", lambda: dist.all_gather([torch.empty(4), torch.empty(4)],
                                                            torch.empty(4, device="emu")))):
    try:
        fn()
        errors[name] = None
    except torch_plugin.ProjectionModeError as err:
        errors[name] = [err.op, str(err)]
x = torch.ones(4, device="emu")
dist.all_reduce(x)                   # the group is still usable
torch.emu.synchronize()
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(errors, f)
dist.destroy_process_group()
"""


def test_value_reads_in_a_tensor_parallel_job_are_refused(tmp_path):
    script = tmp_path / "refusals.py"
    script.write_text(REFUSALS)
    proc = torchrun([script, tmp_path, TINY_LLAMA_ARG])
    assert proc.returncode == 0, proc.stdout[-6000:]
    for rank in range(2):
        errors = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert all(errors.values()), errors
        assert errors["cpu"][0] == "aten::_copy_from" and errors["item"][0] == "aten::_local_scalar_dense"
        assert errors["mixed_all_gather"][0] == "c10d::all_gather"
        assert "host (CPU) and emu tensors" in errors["mixed_all_gather"][1]
        assert "EMU_MODE=projection" in errors["full_tensor_cpu"][1]
