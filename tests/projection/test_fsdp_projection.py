"""FSDP2 in projection mode: ``torchrun -m torch_plugin.project --fsdp 2 --train`` on a tiny llama
config (h200x8, 2 ranks). Each rank holds its shard of the parameters, the AdamW state is counted
in its peak memory, the step's all_gathers and reduce_scatters are timed by the interconnect model
and move no data, and the train step's timeline is the functional mode's on every rank; FSDP2
over TP ranks (a 2-D mesh of 4) runs; without torchrun the CLI says what it needs."""
import math
import os
import subprocess
import sys

from torchrun_jobs import ROOT, TINY_LLAMA, TINY_LLAMA_ARG, assert_same_timeline, cli, step, tp_local_parameter_bytes

BF16 = 2


def fsdp_shard_bytes(c: dict, ranks: int) -> int:
    """Rank 0's parameter bytes under fully_shard: every parameter split on dim 0 into ``ranks``
    chunks of ceil(dim0 / ranks) rows (rank 0 gets a full chunk)."""
    h, inter, vocab, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    shapes = [(vocab, h), (vocab, h), (h,)]                                      # embedding, LM head, final norm
    shapes += layers * [(h, h), (kv, h), (kv, h), (h, h), (inter, h), (inter, h), (h, inter), (h,), (h,)]
    return BF16 * sum(math.ceil(s[0] / ranks) * math.prod(s[1:]) for s in shapes)


def test_cli_projects_an_fsdp2_train_step(tmp_path):
    r = cli(tmp_path, "--fsdp", "2", "--prefill", "32", "--train")
    assert r["fsdp"] == 2 and r["tp"] == 1
    assert r["train_step_s"] > r["prefill_s"] > 0
    assert "2 ranks (fsdp 2)" in r["stdout"] and "batch 1 per rank" in r["stdout"]
    shard = fsdp_shard_bytes(TINY_LLAMA, 2)
    assert r["local_parameter_bytes_per_rank"][0] == shard
    # weights, gradients and AdamW's two moments (all bf16 like the weights) are each a shard: the
    # optimizer state is counted against the device's capacity
    assert all(peak >= 4 * shard for peak in r["peak_device_memory_bytes_per_rank"]), r
    ops = r["collectives_train"]
    layers = TINY_LLAMA["num_hidden_layers"]
    # the root's and every layer's parameters gathered for forward, each layer's gradients
    # reduce-scattered in backward (the root's too)
    assert ops["all_gather"]["count"] >= layers + 1 and ops["reduce_scatter"]["count"] == layers + 1, ops
    assert all(s["modelled_ns"] > 0 and s["bytes"] > 0 for s in ops.values())
    # the gradients reduced are every parameter once (padded to 2 equal shards)
    assert ops["reduce_scatter"]["bytes"] >= 2 * shard - 2 * BF16 * (layers * 9 + 3)
    assert r["collective_host_copy_bytes"] == 0, "projection-mode collectives moved data through the host"


def test_fsdp2_train_step_timeline_is_identical_in_both_modes(tmp_path):
    assert_same_timeline(step(tmp_path, "fsdp", "functional"), step(tmp_path, "fsdp", "projection"))


def test_cli_projects_fsdp2_over_tensor_parallel_ranks(tmp_path):
    """--fsdp 2 --tp 2: a 2-D mesh of 4 ranks; each rank holds a quarter of the split weights."""
    r = cli(tmp_path, "--fsdp", "2", "--tp", "2", "--prefill", "16", "--train", nproc=4)
    assert "4 ranks (fsdp 2 x tp 2)" in r["stdout"]
    tp_shard = tp_local_parameter_bytes(TINY_LLAMA, 2)
    # FSDP halves each TP shard (dim 0, rounded up: a few rows of padding at most)
    assert all(tp_shard / 2 <= b <= tp_shard / 2 + 4096 for b in r["local_parameter_bytes_per_rank"]), r
    assert {"all_gather", "reduce_scatter", "all_reduce"} <= set(r["collectives_train"])
    assert r["train_step_s"] > 0 and r["collective_host_copy_bytes"] == 0


def test_cli_without_torchrun_names_what_it_needs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, "-m", "torch_plugin.project", "--model", "llama", "--config",
                           TINY_LLAMA_ARG, "--tp", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode != 0
    assert "run under torchrun with 2 ranks" in proc.stderr and "no torchrun environment" in proc.stderr
