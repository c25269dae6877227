"""Small torchrun jobs for the tensor-parallel and FSDP2 projection tests: the CLI under torchrun,
and one parallel step (STEP_SCRIPT) run in either mode, each rank writing its timeline to a file."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A llama-family config small enough for a 2-rank job on 2 cores: heads, KV heads, the MLP and
# the vocabulary all divide by 2.
TINY_LLAMA = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=256, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False)
TINY_LLAMA_ARG = ",".join(f"{k}={v}" for k, v in TINY_LLAMA.items())


def tp_local_parameter_bytes(c: dict, tp: int) -> int:
    """One rank's bfloat16 parameter bytes under project.py's TP plan: every projection, the
    embedding and the LM head split tp ways; the norms replicated."""
    h, inter, vocab, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    head_dim = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * head_dim
    per_layer_split = h * h + 2 * h * kv + h * h + 3 * h * inter   # q, k, v, o; gate, up, down
    split = layers * per_layer_split + 2 * vocab * h               # embedding and LM head
    replicated = layers * 2 * h + h                                # two RMSNorms per layer, the final one
    return 2 * (split // tp + replicated)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args, nproc: int = 2, mode: str = "projection", preset: str = "h200x8", timeout: float = 240):
    """``python -m torch.distributed.run --nproc-per-node N args``; the CompletedProcess (stdout and
    stderr together). A hung job fails the test with its output. The rendezvous port is picked free
    and closed before torchrun binds it, so another process (the other xdist worker's job) can take
    it first: a job that failed only because its address was in use runs again on a new port."""
    env = {**os.environ, "EMU_MODE": mode, "EMU_PRESET": preset, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for attempt in range(3):
        cmd = [sys.executable, "-W", "ignore", "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "--monitor-interval=0.5",
               *map(str, args)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            pytest.fail(f"torchrun job hung (killed after {timeout} s): {' '.join(cmd)}\n{err.stdout}")
        if proc.returncode == 0 or not _address_in_use(proc.stdout):
            return proc
    return proc


def _address_in_use(output: str) -> bool:
    text = output.lower()
    return "address already in use" in text or "eaddrinuse" in text


def cli(tmp_path, *args, nproc: int = 2) -> dict:
    """The projection CLI under torchrun; rank 0's --json results."""
    out = tmp_path / "projection.json"
    proc = torchrun(["-m", "torch_plugin.project", "--model", "llama", "--config", TINY_LLAMA_ARG,
                     "--dtype", "bfloat16", "--preset", "h200x8", "--no-progress", "--json", out, *args], nproc=nproc)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return json.loads(out.read_text()) | {"stdout": proc.stdout}


# One parallel step through torch_plugin.project's own parallelization, in the mode of EMU_MODE:
# "tp": a prefill of 16 tokens and one cached decode step; "fsdp": forward, backward and an AdamW
# step. Each rank writes its device's command trace, its collective records and its modelled host
# clock to <out>/rank<r>.json.
STEP_SCRIPT = r"""
import argparse, json, os, sys
import torch, torch_plugin, runtime
import torch.distributed as dist
from torch_plugin import project, distributed as emu_dist
kind, out, config = sys.argv[1], sys.argv[2], sys.argv[3]
args = argparse.Namespace(model="llama", config=config, tp=2 if kind == "tp" else 1, fsdp=2 if kind == "fsdp" else 1)
mesh = project.init_parallel(args)
model, _ = project.build_model(args, torch.bfloat16, mesh)
ids = torch.zeros((1, 16), dtype=torch.long, device="emu")
if kind == "tp":
    model.eval()
    with torch.no_grad():
        first = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        model(input_ids=first.logits.argmax(-1), use_cache=True, past_key_values=first.past_key_values)
else:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
torch.emu.synchronize()
rt = runtime.get_runtime()
fields = ("seq", "name", "engine", "start_ns", "end_ns", "nbytes", "flops", "bound", "cycles", "cores", "tiling",
          "engines", "dtype", "launch_start_ns", "launch_end_ns")
device = torch.emu.current_device()
records = emu_dist.collective_records()
result = {"mode": torch.emu.is_projection_mode(), "host_ns": rt.host_time_ns(),
          "trace": [[getattr(e, f) for f in fields] for e in rt.command_trace(device)], "fields": fields,
          "collectives": [{k: r[k] for k in ("op", "algorithm", "bytes", "ranks", "start_ns", "end_ns", "duration_ns")}
                          for r in records],
          "host_copy_bytes": sum(r["host_copy_bytes"] for r in records),
          "peak": torch.emu.max_memory_allocated()}
with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
"""


def step(tmp_path, kind: str, mode: str) -> list[dict]:
    """STEP_SCRIPT on 2 ranks in ``mode``: each rank's results."""
    out = tmp_path / f"{kind}_{mode}"
    out.mkdir()
    script = tmp_path / "step.py"
    script.write_text(STEP_SCRIPT)
    proc = torchrun([script, kind, out, TINY_LLAMA_ARG], mode=mode)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def assert_same_timeline(functional: list[dict], projection: list[dict]) -> None:
    """Every rank's command trace, collectives, host clock and peak memory equal across the modes."""
    for rank, (f, p) in enumerate(zip(functional, projection)):
        assert f["mode"] is False and p["mode"] is True
        assert len(f["trace"]) == len(p["trace"]) > 20, (rank, len(f["trace"]), len(p["trace"]))
        for f_event, p_event in zip(f["trace"], p["trace"]):
            assert f_event == p_event, (rank, {k: (a, b) for k, a, b in zip(f["fields"], f_event, p_event) if a != b})
        assert f["collectives"] == p["collectives"], rank
        assert f["host_ns"] == p["host_ns"] and f["peak"] == p["peak"], rank
        # functional mode moved the collectives' data through the host; projection mode nothing
        assert f["host_copy_bytes"] > 0 and p["host_copy_bytes"] == 0, (rank, f["host_copy_bytes"],
                                                                         p["host_copy_bytes"])
