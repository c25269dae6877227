"""torch.compile(backend="emu"): compiled equals eager (forward and backward), fusion and epilogues
really launch fewer kernels, buffers are planned, caching/recompiles/dynamic shapes/graph breaks
are counted, the custom ops compile without graph breaks, and Inductor refuses clearly."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from compile_testing import kernels_launched
from torch_plugin.compile import compile_stats
from torch_plugin.zoo import MODELS

EMU = torch.device("emu")


class GPT2Block(nn.Module):
    """GPT-2 layout: pre-LayerNorm, causal attention, GELU(tanh) MLP, residuals."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.heads) ** 0.5)
        mask = torch.ones(T, T, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class LlamaBlock(nn.Module):
    """Llama layout: the residual add + RMSNorm in emu::fused_add_rms_norm, SwiGLU MLP."""

    def __init__(self, d=32, hidden=88):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.rand(d) + 0.5)
        self.attn = nn.Linear(d, d, bias=False)
        self.gate, self.up, self.down = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False), \
            nn.Linear(hidden, d, bias=False)

    def forward(self, x, residual):
        h, residual = torch.ops.emu.fused_add_rms_norm(self.attn(x), residual, self.norm_weight, 1e-6)
        return self.down(F.silu(self.gate(h)) * self.up(h)), residual


def _pair(build, seed=0):
    torch.manual_seed(seed)
    eager = build().to(EMU)
    compiled_model = build().to(EMU)
    compiled_model.load_state_dict(eager.state_dict())
    return eager, compiled_model


def _check_forward_backward(eager, compiled_model, inputs, rtol=1e-4, atol=1e-5):
    compiled = torch.compile(compiled_model, backend="emu")
    ref = eager(*inputs)
    got = compiled(*inputs)
    ref_t = ref if isinstance(ref, torch.Tensor) else ref[0]
    got_t = got if isinstance(got, torch.Tensor) else got[0]
    torch.testing.assert_close(got_t.cpu(), ref_t.cpu(), rtol=rtol, atol=atol)
    ref_t.square().mean().backward()
    got_t.square().mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=rtol * 10, atol=atol * 10, msg=name)
    return compiled


def test_zoo_mlp_training_step_matches_eager(fresh_dynamo):
    spec = MODELS["mlp"]
    eager = spec.build(0).to(EMU)
    model = spec.build(0).to(EMU)
    batch = {k: v.to(EMU) for k, v in spec.batch(0).items()}
    compiled = torch.compile(model, backend="emu")
    for m in (eager, compiled):
        spec.loss(m, batch).backward()
    torch.testing.assert_close(spec.output(compiled, batch).cpu(), spec.output(eager, batch).cpu(), **spec.forward_tol)
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), **spec.loss_tol)
    assert compile_stats()["graphs_compiled"] >= 2   # forward and backward lowered


def test_every_zoo_model_trains_compiled_as_eager():
    """Compiled equals eager, loss and every gradient, for each model of the zoo (issue #7's
    models: MLP, ResNet-18, LSTM LM, UNet, GPT-2, BERT, Llama, T5), with nothing run outside a
    device program. In a child process (see compile_testing.check_zoo_models_train_compiled_as_eager)."""
    from torch_plugin.zoo import MODELS
    here = Path(__file__).resolve().parent
    code = "from compile_testing import check_zoo_models_train_compiled_as_eager as c; print(' '.join(c()))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), str(here.parents[1])]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                            cwd=here)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split() == list(MODELS)


@pytest.mark.parametrize("name", ["llama"])  # (gpt2: benchmarks/bench_compile.py checks its forward)
def test_zoo_transformers_training_step_matches_eager(fresh_dynamo, name):
    pytest.importorskip("transformers", reason="the zoo's gpt2/llama are transformers models")
    spec = MODELS[name]
    eager, model = spec.build(0).to(EMU), spec.build(0).to(EMU)
    batch = {k: v.to(EMU) for k, v in spec.batch(0).items()}
    compiled = torch.compile(model, backend="emu")
    loss = spec.loss(compiled, batch)
    loss.backward()
    expected = spec.loss(eager, batch)
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected.cpu(), **spec.loss_tol)
    for (pname, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-3, atol=1e-4, msg=pname)
    with torch.no_grad():
        torch.testing.assert_close(spec.output(compiled, batch).cpu(), spec.output(eager, batch).cpu(),
                                   **spec.forward_tol)
    stats = compile_stats()
    assert stats["fused_kernels"] > 0 and stats["epilogues"] > 0 and stats["outside_program"] == 0


def test_gpt2_block_matches_eager_and_launches_fewer_kernels(fresh_dynamo):
    eager, model = _pair(GPT2Block)
    x = torch.randn(2, 8, 32, device=EMU)
    compiled = _check_forward_backward(eager, model, (x,))
    with torch.no_grad():
        _, eager_kernels = kernels_launched(lambda: eager(x))
        compiled(x)  # (the inference graph compiles here)
        out, compiled_kernels = kernels_launched(lambda: compiled(x))
    assert sum(compiled_kernels.values()) < sum(eager_kernels.values())
    # the attention's scale and mask: a bmm epilogue or a fused softmax (issue 22), else a chain
    assert sum(compiled_kernels.get(k, 0) for k in ("fused_pointwise", "bmm_epilogue", "fused_softmax")) >= 1
    assert compiled_kernels.get("matmul_epilogue", 0) >= 1   # the MLP's fc + GELU
    torch.testing.assert_close(out.cpu(), eager(x).detach().cpu(), rtol=1e-4, atol=1e-5)


def test_llama_block_with_custom_op_matches_eager(fresh_dynamo):
    eager, model = _pair(LlamaBlock)
    x, r = torch.randn(2, 6, 32, device=EMU), torch.randn(2, 6, 32, device=EMU)
    _check_forward_backward(eager, model, (x, r))


def test_fused_chain_values_in_reduced_precision(fresh_dynamo):
    def chain(a, b):
        return torch.sigmoid(a * 1.5 + b).mul(a).sub(0.25).relu() / (b.abs() + 1)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        a, b = torch.randn(7, 33, dtype=dtype, device=EMU), torch.randn(33, dtype=dtype, device=EMU)
        compiled = torch.compile(chain, backend="emu")
        out, launched = kernels_launched(lambda: compiled(a, b))
        assert launched == {"fused_pointwise": 1}
        # eager rounds every intermediate to the dtype; so does the fused program
        torch.testing.assert_close(out.cpu(), chain(a, b).cpu(), rtol=0, atol=0)


def test_buffers_are_planned_and_reused(fresh_dynamo):
    def f(x):
        a = (x * 2 + 1).exp()                  # fused, planned; dead after the sum
        b = a.sum(1, keepdim=True)
        c = (x - b).sin() * 3                  # fused, planned: takes a's slot
        d = c.sum(1, keepdim=True)
        return (d.tanh() + 1).sqrt()           # an output: not planned
    x = torch.randn(8, 8, device=EMU)
    compiled = torch.compile(f, backend="emu")
    torch.testing.assert_close(compiled(x).cpu(), f(x).cpu(), rtol=1e-5, atol=1e-6)
    stats = compile_stats()
    assert stats["fused_kernels"] == 3
    assert stats["planned_buffers"] == 2 and stats["buffer_slots"] == 1


def test_input_independent_steps_are_computed_once(fresh_dynamo):
    def f(x):
        T = x.shape[0]
        mask = torch.ones(T, T, device=x.device, dtype=torch.bool).tril()
        keep = torch.arange(T, device=x.device) * 2.0
        return x.masked_fill(~mask, 0.0) + keep, keep    # keep leaves the graph: not kept
    x = torch.randn(6, 6, device=EMU)
    compiled = torch.compile(f, backend="emu")
    _, first = kernels_launched(lambda: compiled(x))
    got, second = kernels_launched(lambda: compiled(x))
    assert compile_stats()["constant_steps"] >= 2
    assert sum(second.values()) < sum(first.values())
    for a, b in zip(got, f(x)):
        torch.testing.assert_close(a.cpu(), b.cpu())
    got[1].add_(1)   # mutating an output does not change the next call's result
    torch.testing.assert_close(compiled(x)[1].cpu(), f(x)[1].cpu())


def test_cache_guard_failure_and_dynamic_shapes(fresh_dynamo):
    def f(x):
        return (x * 2).tanh() + 1
    compiled = torch.compile(f, backend="emu")
    x = torch.randn(4, 8, device=EMU)
    compiled(x)
    compiled(x + 1)
    assert compile_stats()["graphs_compiled"] == 1            # cached
    compiled(x.half())                                        # dtype guard fails: recompiles
    stats = compile_stats()
    assert stats["graphs_compiled"] == 2 and stats["recompiles"] == 1
    torch._dynamo.reset()
    from torch_plugin.compile import reset_compile_stats
    reset_compile_stats()
    compiled = torch.compile(f, backend="emu")
    first = torch.randn(3, 8, device=EMU)
    torch._dynamo.mark_dynamic(first, 0)
    for rows in (3, 5, 9, 17):
        x = first if rows == 3 else torch.randn(rows, 8, device=EMU)
        torch.testing.assert_close(compiled(x).cpu(), f(x).cpu())
    assert compile_stats()["graphs_compiled"] == 1            # one graph for every size


def test_graph_breaks_and_ops_outside_the_program_are_counted(fresh_dynamo):
    @torch.library.custom_op("emu_test::host_only_double", mutates_args=(), device_types="cpu")
    def host_only(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    host_only.register_fake(lambda x: torch.empty_like(x))

    def f(x):
        y = (x + 1).exp()
        torch._dynamo.graph_break()
        return host_only(y * 3 + 1) - 1
    x = torch.randn(4, device=EMU)
    with torch.emu.host_fallback("allow"):
        got = torch.compile(f, backend="emu")(x)
        torch.testing.assert_close(got.cpu(), f(x).cpu())
    stats = compile_stats()
    assert stats["graph_breaks"] == 1 and stats["graphs_compiled"] == 2
    assert stats["outside_program"] == 1


def test_custom_op_compiles_without_graph_break_and_keeps_its_metadata(fresh_dynamo):
    captured = []

    def capture(gm, example_inputs):
        captured.append(gm)
        return gm.forward
    model = LlamaBlock().to(EMU).to(torch.bfloat16)
    x, r = (torch.randn(2, 5, 32, device=EMU, dtype=torch.bfloat16) for _ in range(2))
    torch.compile(model, backend=capture, fullgraph=True)(x, r)   # fullgraph: a break would raise
    (gm,) = captured
    (node,) = [n for n in gm.graph.nodes if n.target in (torch.ops.emu.fused_add_rms_norm,
                                                           torch.ops.emu.fused_add_rms_norm.default)]
    out, residual = node.meta["example_value"]
    assert out.shape == residual.shape == (2, 5, 32) and out.dtype == residual.dtype == torch.bfloat16
    assert out.device.type == "emu"
    conversions = {"to", "float", "half", "bfloat16", "type", "_to_copy"}
    neighbours = list(node.all_input_nodes) + list(node.users)
    for n in neighbours:
        assert getattr(n.target, "__name__", str(n.target)) not in conversions, n.format_node()
    # after aot_autograd too: the op stays one node between no conversion ops
    aten_graphs = []
    from torch._dynamo.backends.common import aot_autograd
    backend = aot_autograd(fw_compiler=lambda g, _: aten_graphs.append(g) or g.forward)
    torch._dynamo.reset()
    torch.compile(model, backend=backend, fullgraph=True)(x, r)
    (fw,) = aten_graphs
    (node,) = [n for n in fw.graph.nodes if n.target is torch.ops.emu.fused_add_rms_norm.default]
    for n in list(node.all_input_nodes) + list(node.users):
        assert n.target not in (torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default)


def test_default_inductor_refuses_with_a_clear_error(fresh_dynamo):
    model = nn.Linear(4, 4).to(EMU)
    with pytest.raises(Exception, match='backend="emu"') as info:
        torch.compile(model)(torch.randn(2, 4, device=EMU))
    assert "Inductor" in str(info.value) and "KeyError" not in str(info.value)


def test_scalar_constants_round_as_eager(fresh_dynamo):
    def chain(a):
        return ((a + 0.1) * 0.3 > 0.1).logical_and(a * 0.7 - 0.2 < 0.35).float() + (a - 0.1) * 1.1
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.linspace(-1, 1, 2001, dtype=dtype, device=EMU)
        compiled = torch.compile(chain, backend="emu")
        out, launched = kernels_launched(lambda: compiled(a))
        assert launched.get("fused_pointwise", 0) >= 1
        torch.testing.assert_close(out.cpu(), chain(a).cpu(), rtol=0, atol=0)


def test_every_fusible_op_kind_matches_eager(fresh_dynamo):
    def f(a, b, m):
        x = torch.clamp(a * 2, -0.5, 0.7) + torch.clamp_min(b, 0.1) * torch.clamp_max(a, 0.2)
        y = torch.where(m, F.gelu(x, approximate="tanh"), F.silu(x)) + torch.maximum(a, b).neg().abs()
        z = (y.pow(2) + 1).rsqrt().to(torch.float16).float() * (a > b).float() + torch.minimum(a, b) ** 3
        w = torch.sub(z, b, alpha=0.5) + torch.add(a, b, alpha=2) + (a - 1).exp().log1p() + torch.sigmoid(b).tanh()
        return w, (w > 0) | m, torch.erf(w) / (b.abs() + 0.5) - torch.reciprocal(a.abs() + 1)
    a, b = torch.randn(4, 9, device=EMU), torch.randn(9, device=EMU)
    m = torch.rand(4, 9, device=EMU) > 0.5
    for got, expected in zip(torch.compile(f, backend="emu")(a, b, m), f(a, b, m)):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected.cpu(), rtol=1e-5, atol=1e-6)
    stats = compile_stats()
    # (2 kernels since the recompute rule inlines a shared cheap producer into both its users)
    assert stats["fused_kernels"] <= 3 and stats["fused_ops"] >= 40 and stats["aten_ops"] <= 2


def test_compiled_execution_is_counted_in_telemetry(fresh_dynamo):
    # The operator telemetry (torch.emu.telemetry()) carries the compile counters of its block,
    # and torch.emu.compile_stats() is the process-wide view.
    def f(x):
        y = (x * 2).sin()
        torch._dynamo.graph_break()
        return y + 1
    x = torch.randn(8, device=EMU)
    before = torch.emu.compile_stats()
    with torch.emu.telemetry() as t:
        compiled = torch.compile(f, backend="emu")
        compiled(x)
        compiled(x.double())                                  # a dtype guard fails: recompiles
    compiled_counts = t.as_dict()["compiled"]
    assert compiled_counts["graphs_compiled"] == 4            # two graphs (the break), twice
    assert compiled_counts["recompiles"] == 2
    assert compiled_counts["graph_breaks"] >= 1
    assert compiled_counts["outside_program"] == 0
    assert "compiled graphs: 4" in t.summary()
    after = torch.emu.compile_stats()
    assert after["graphs_compiled"] - before["graphs_compiled"] == 4
    with torch.emu.telemetry() as quiet:
        (x + 1).cpu()
    assert not any(quiet.as_dict()["compiled"].values())
