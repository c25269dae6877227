"""Models without weights: built on the meta device, moved with ``to_empty(device="emu")``, they
run forward and backward in projection mode (a zoo model and transformers configs); and the CLI,
``python -m torch_plugin.project``, on a small llama config and a zoo model."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

META = r"""
import json, torch, torch_plugin
from torch_plugin import zoo
from transformers import AutoConfig, AutoModelForCausalLM
out = {}
with torch.device("meta"):
    mlp = zoo.MODELS["mlp"].build(0)
    cfg = AutoConfig.for_model("llama", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
    llama = AutoModelForCausalLM.from_config(cfg)
for name, model in (("mlp", mlp), ("llama", llama)):
    assert all(p.device.type == "meta" for p in model.parameters())
    model = model.to_empty(device="emu")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    if name == "mlp":
        loss = model(torch.zeros(16, 64, device="emu")).square().mean()
    else:
        ids = torch.zeros(2, 32, dtype=torch.long, device="emu")
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.emu.synchronize()
    out[name] = {"loss_shape": list(loss.shape), "loss_device": str(loss.device),
                 "grads": all(p.grad is not None and p.grad.shape == p.shape and p.grad.device.type == "emu"
                              for p in model.parameters()),
                 "param_bytes": params, "allocated": torch.emu.memory_allocated()}
    del model, loss
print(json.dumps(out))
"""


def test_meta_models_run_forward_and_backward(program):
    out = program(META, preset="default")
    for name in ("mlp", "llama"):
        got = out[name]
        assert got["loss_shape"] == [] and got["loss_device"] == "emu:0"
        assert got["grads"], f"{name}: a parameter has no emu gradient of its shape"
        assert got["allocated"] >= got["param_bytes"] > 0


def _cli(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    env.pop("EMU_MODE", None)
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "torch_plugin.project", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_projects_a_small_llama_config(tmp_path):
    path = tmp_path / "out.json"
    proc = _cli("--model", "llama", "--config", "hidden_size=128,intermediate_size=256,num_hidden_layers=2,"
                "num_attention_heads=4,num_key_value_heads=2,vocab_size=512", "--preset", "h200",
                "--dtype", "bfloat16", "--prefill", "32", "--decode", "3", "--train", "--no-progress",
                "--json", str(path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(path.read_text())
    assert result["preset"] == "h200" and result["dtype"] == "bfloat16" and result["model"] == "llama"
    assert result["config"]["hidden_size"] == 128 and result["config"]["num_hidden_layers"] == 2
    assert result["prefill_tokens"] == 32 and result["decode_tokens"] == 3
    for key in ("prefill_s", "decode_s_per_token", "train_step_s"):
        assert result[key] > 0, key
    assert result["decode_tokens_per_s"] == 1 / result["decode_s_per_token"]
    assert 0 < result["peak_device_memory_bytes"] < result["device_capacity_bytes"]
    for phase in ("prefill", "decode", "train"):
        rows = result[f"top_kernels_{phase}"]
        assert rows and all(r["time_s"] > 0 and r["bound"] for r in rows), phase
    assert any(r["kernel"] == "matmul" for r in result["top_kernels_prefill"])
    assert "prefill 32 tokens" in proc.stdout and "ms per token" in proc.stdout and "peak device memory" in proc.stdout


def test_cli_projects_a_zoo_model_and_names_bad_arguments(tmp_path):
    path = tmp_path / "zoo.json"
    proc = _cli("--model", "zoo:resnet18", "--train", "--preset", "tiny", "--no-progress", "--json", str(path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(path.read_text())
    assert result["forward_s"] > 0 and result["train_step_s"] > result["forward_s"]
    bad = _cli("--model", "not-a-model-type")
    assert bad.returncode != 0 and "not-a-model-type" in bad.stderr
    too_big = _cli("--model", "llama-3-70b", "--preset", "h200", "--prefill", "8", "--no-progress")
    assert too_big.returncode == 2 and "does not fit" in too_big.stderr and "out of memory" in too_big.stderr
