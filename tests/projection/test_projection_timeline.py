"""The modelled timeline is the same in both modes: zoo models run forward, backward and an AdamW
step in a functional process and in a projection process, and their firmware traces are compared
command by command (kernel name, engine, start and end ns, bytes, flops, bound, lanes), at both
fidelities. Only the values differ, and projection mode has none to compare. (gpt2's zoo batch has no attention mask,
and transformers then reads input ids on the host to warn about padding, which projection mode
refuses: both processes switch that check off with the zoo's ``without_padding_check``.)"""
import pytest

TRAIN_STEP = r"""
import json, sys, torch, torch_plugin, runtime
from torch_plugin import zoo
from torch_plugin.zoo import harness
from torch_plugin.zoo.hf import without_padding_check
spec = zoo.MODELS[sys.argv[1]]
model = without_padding_check(spec.build(0)).to("emu")
batch = harness.to_device(spec.batch(0), "emu")
optimizer = harness.optimizer_for(spec, model, sys.argv[2])
model.train()
for _ in range(2):   # the second step has the optimizer's state
    optimizer.zero_grad(set_to_none=True)
    loss = spec.loss(model, batch)
    loss.backward()
    optimizer.step()
torch.emu.synchronize()
fields = ("seq", "name", "engine", "start_ns", "end_ns", "nbytes", "flops", "bound", "cycles", "cores", "tiling",
          "engines", "dtype", "launch_start_ns", "launch_end_ns")
trace = [[getattr(e, f) for f in fields] for e in runtime.get_runtime().command_trace(0)]
print(json.dumps({"mode": torch.emu.is_projection_mode(), "trace": trace, "fields": fields,
                  "fidelity": runtime.get_runtime().config.fidelity,
                  "host_ns": runtime.get_runtime().host_time_ns(), "peak": torch.emu.max_memory_allocated()}))
"""


@pytest.mark.parametrize("model, optimizer, fidelity", [
    ("mlp", "for-loop", "kernel"), ("resnet18", "foreach", "kernel"), ("lstm_lm", "for-loop", "kernel"),
    ("llama", "foreach", "kernel"), ("gpt2", "foreach", "kernel"), ("mlp", "foreach", "tile")])
def test_timeline_is_identical_in_both_modes(program, monkeypatch, model, optimizer, fidelity):
    monkeypatch.setenv("EMU_FIDELITY", fidelity)
    functional = program(TRAIN_STEP, mode="functional", args=(model, optimizer))
    projection = program(TRAIN_STEP, mode="projection", args=(model, optimizer))
    assert functional["mode"] is False and projection["mode"] is True
    assert functional["fidelity"] == projection["fidelity"] == fidelity
    f_trace, p_trace = functional["trace"], projection["trace"]
    assert len(f_trace) > 50, "too few commands for a forward, backward and optimizer step"
    assert len(f_trace) == len(p_trace), (len(f_trace), len(p_trace))
    fields = functional["fields"]
    for f_event, p_event in zip(f_trace, p_trace):
        assert f_event == p_event, {k: (a, b) for k, a, b in zip(fields, f_event, p_event) if a != b}
    assert functional["host_ns"] == projection["host_ns"]
    assert functional["peak"] == projection["peak"]
