"""F.scaled_dot_product_attention's fused path on emu (ops/attention.py, emulator/kernels/attention.pyx).

Values: float32 against CPU's math path (torch.nn.attention.sdpa_kernel(SDPBackend.MATH)) at
rtol 1e-5 / atol 2e-6 (the kernel sums in a different order: tiles, online rescaling); float64 at
1e-12. float16/bfloat16 against a float64 reference computed from the same rounded inputs, with
the bound of precision.py: one rounding of the output plus float32 accumulation over the
L_k * (D + 1) terms that feed one output (scores, softmax sum, P @ V), scaled by the same
attention over |v| (the magnitude of the terms summed). Backward: the gradients of q, k, v (and of
a float bias) against CPU's math backward, float32 at rtol 1e-4 / atol 1e-5 (five products and a
softmax Jacobian accumulate). Every test forbids the host fallback.
"""
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from tests.torch_plugin.precision import bound

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emulator"))
from cost_helpers import BF16, F32, device as cost_device, op as cost_op  # noqa: E402

F32_TOL = dict(rtol=1e-5, atol=2e-6)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)
SDPA = "aten::_scaled_dot_product_fused_attention_overrideable"


@pytest.fixture(autouse=True)
def forbid_host_fallback():
    torch.emu.reset_op_stats()
    with torch.emu.host_fallback("forbid"):
        yield
    assert not torch.emu.op_stats()["host_fallback"], torch.emu.op_stats()["host_fallback"]


def _qkv(b, h, lq, lk, d, dv=None, hk=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (b, h) if b else (h,)
    kv = (b, hk or h) if b else (hk or h,)
    q = torch.randn(*shape, lq, d, generator=g).to(dtype)
    k = torch.randn(*kv, lk, d, generator=g).to(dtype)
    v = torch.randn(*kv, lk, dv or d, generator=g).to(dtype)
    return q, k, v


def _cpu_math(*args, **kwargs):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def _emu(*tensors):
    return [None if t is None else t.to("emu") for t in tensors]


def _fused_calls():
    return torch.emu.op_stats()["native"].get(SDPA, 0)


def _check(q, k, v, mask=None, **kwargs):
    """The emu result comes from the fused kernel and matches CPU's math path."""
    expected = _cpu_math(q, k, v, attn_mask=mask, **kwargs)
    before = _fused_calls()
    got = F.scaled_dot_product_attention(*_emu(q, k, v), attn_mask=None if mask is None else mask.to("emu"),
                                         **kwargs)
    assert _fused_calls() == before + 1, torch.emu.op_stats()
    tol = dict(rtol=1e-12, atol=1e-12) if q.dtype == torch.float64 else F32_TOL
    torch.testing.assert_close(got.cpu(), expected, **tol)
    return got


@pytest.mark.parametrize("lq,lk,d", [(16, 16, 32), (64, 64, 64), (37, 93, 128), (130, 70, 64), (1, 200, 32)])
def test_values_match_cpu_math(lq, lk, d):
    _check(*_qkv(2, 3, lq, lk, d))


def test_3d_inputs_value_dim_and_float64():
    _check(*_qkv(0, 4, 20, 33, 16, dv=24))
    _check(*_qkv(2, 2, 19, 70, 32, dv=8, dtype=torch.float64))


@pytest.mark.parametrize("lq,lk", [(70, 70), (50, 130), (130, 50)])
def test_causal_is_top_left_aligned(lq, lk):
    _check(*_qkv(2, 2, lq, lk, 32), is_causal=True)


def test_scale():
    q, k, v = _qkv(1, 2, 40, 40, 32)
    _check(q, k, v, scale=0.37)
    _check(q, k, v, scale=-0.2)


def test_masks_boolean_and_additive_broadcast():
    q, k, v = _qkv(2, 3, 45, 80, 32)
    g = torch.Generator().manual_seed(1)
    full = torch.rand(2, 3, 45, 80, generator=g) > 0.3
    _check(q, k, v, full)
    _check(q, k, v, full[:1, :1])                             # (1, 1, Lq, Lk)
    _check(q, k, v, torch.rand(80, generator=g) > 0.2)        # one key mask for every row
    _check(q, k, v, torch.randn(2, 1, 45, 80, generator=g))   # additive float mask, broadcast over heads
    rows = full.clone()
    rows[0, 1, 7] = False                                     # a row that attends to nothing: zeros
    got = _check(q, k, v, rows)
    assert got[0, 1, 7].abs().max().item() == 0.0


def test_gqa():
    q, k, v = _qkv(2, 8, 33, 47, 32, hk=2)
    _check(q, k, v, enable_gqa=True)
    _check(q, k, v, enable_gqa=True, is_causal=True)


def test_gqa_without_enable_gqa_is_cpu_error():
    q, k, v = _qkv(1, 4, 8, 8, 16, hk=2)
    with pytest.raises(RuntimeError) as cpu:
        _cpu_math(q, k, v)
    with pytest.raises(RuntimeError) as emu:
        F.scaled_dot_product_attention(*_emu(q, k, v))
    assert type(emu.value) is type(cpu.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_reduced_precision_against_float64(dtype, causal):
    q, k, v = _qkv(2, 2, 70, 90, 64, dtype=dtype)
    got = F.scaled_dot_product_attention(*_emu(q, k, v), is_causal=causal).cpu()
    assert got.dtype == dtype
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    weights = F.scaled_dot_product_attention(q.double(), k.double(), v.double().abs(), is_causal=causal)
    allowed = bound(ref, dtype, ulps=1.0, terms=90 * 65, scale=weights)
    err = (got.double() - ref).abs()
    assert (err <= allowed).all(), f"max excess {(err - allowed).max().item()}"


def test_backward_matches_cpu_math():
    for kwargs, shapes in ((dict(), (2, 3, 45, 70, 32)), (dict(is_causal=True), (1, 2, 70, 50, 64)),
                           (dict(scale=0.3, enable_gqa=True), (2, 4, 33, 40, 16))):
        hk = 2 if kwargs.get("enable_gqa") else None
        q, k, v = _qkv(*shapes, hk=hk)
        grad = torch.randn(*shapes[:3], shapes[4])
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        _cpu_math(*leaves, **kwargs).backward(grad)
        emu_leaves = [t.to("emu").requires_grad_() for t in (q, k, v)]
        F.scaled_dot_product_attention(*emu_leaves, **kwargs).backward(grad.to("emu"))
        for name, cpu, emu in zip("qkv", leaves, emu_leaves):
            torch.testing.assert_close(emu.grad.cpu(), cpu.grad, **GRAD_TOL, msg=f"grad {name} {kwargs}")
    assert torch.emu.op_stats()["native"].get(SDPA + "_backward", 0) == 3


def test_backward_of_a_float_bias():
    q, k, v = _qkv(2, 2, 30, 40, 16)
    bias = torch.randn(1, 2, 30, 40)
    cpu = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    _cpu_math(*cpu[:3], attn_mask=cpu[3]).sum().backward()
    emu = [t.to("emu").requires_grad_() for t in (q, k, v, bias)]
    F.scaled_dot_product_attention(*emu[:3], attn_mask=emu[3]).sum().backward()
    for c, e in zip(cpu, emu):
        torch.testing.assert_close(e.grad.cpu(), c.grad, **GRAD_TOL)


def test_dropout_mask_is_the_device_bernoulli_stream_and_backward_reuses_it():
    """The kept probabilities are the device generator's Bernoulli(1 - p) draws over (B, H, Lq, Lk)
    at the returned Philox offset; the backward sees the same mask (its gradients equal the math
    path's with that mask)."""
    p = 0.3
    q, k, v = _qkv(2, 2, 24, 40, 16)
    torch.emu.manual_seed(1234)
    leaves = [t.to("emu").requires_grad_() for t in (q, k, v)]
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*leaves, None, p)
    seed, offset = int(out[6]), int(out[7])
    out[0].backward(torch.ones_like(out[0]))
    torch.emu.manual_seed(1234)
    keep = torch.empty(2, 2, 24, 40, dtype=torch.bool, device="emu").bernoulli_(1 - p).cpu()
    assert seed == torch.emu.initial_seed() and offset == 0
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    probs = torch.softmax(cpu[0] @ cpu[1].transpose(-2, -1) / math.sqrt(16), -1)
    expected = (probs * keep / (1 - p)) @ cpu[2]
    expected.backward(torch.ones_like(expected))
    torch.testing.assert_close(out[0].detach().cpu(), expected.detach(), **F32_TOL)
    for c, e in zip(cpu, leaves):
        torch.testing.assert_close(e.grad.cpu(), c.grad, **GRAD_TOL)


def test_dropout_statistics():
    """With v = 1 every output element is the kept share of its row's probabilities over 1 - p: mean
    1, and a second call draws a fresh mask."""
    p, lk = 0.25, 512
    q = torch.zeros(1, 4, 64, 8, device="emu")                 # uniform probabilities 1 / lk
    v = torch.ones(1, 4, lk, 1, device="emu")
    k = torch.zeros(1, 4, lk, 8, device="emu")
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu()
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu()
    assert not torch.equal(a, b)
    for out in (a, b):
        kept = out * (1 - p) * lk                              # kept keys per row
        assert torch.allclose(kept, kept.round(), atol=1e-3)   # an integer count of keys
        # kept ~ Binomial(lk, 1 - p): mean 384, sd 9.8; the mean of 256 rows has sd 0.61
        assert abs(kept.mean().item() - lk * (1 - p)) < 4 * math.sqrt(lk * p * (1 - p) / 256)
        assert 0.5 * 9.8 < kept.std().item() < 1.5 * 9.8


def test_one_kernel_and_no_score_matrix():
    q, k, v = _emu(*_qkv(2, 4, 256, 256, 32))
    torch.emu.synchronize()
    scores = 2 * 4 * 256 * 256 * 4
    base = torch.emu.memory_allocated()
    torch.emu.reset_peak_memory_stats()
    with torch.emu.telemetry() as t:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    peak = torch.emu.max_memory_allocated() - base
    kernels = {name: n for row in t.as_dict()["ops"] for name, n in row["kernels"].items()}
    assert kernels == {"attention": 1}, t.summary()
    assert peak < scores / 4, (peak, scores)     # out (256 KiB) and the logsumexp (8 KiB) only
    assert out.shape == (2, 4, 256, 32)


def test_sdpa_kernel_math_still_selects_the_math_path():
    q, k, v = _emu(*_qkv(1, 2, 16, 16, 16))
    before = _fused_calls()
    with sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q, k, v)
    assert _fused_calls() == before


def test_multihead_attention_uses_the_fused_kernel():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 10, 32)
    dev = nn.MultiheadAttention(32, 4, batch_first=True).to("emu")
    dev.load_state_dict(mha.state_dict())
    for train in (True, False):
        mha.train(train), dev.train(train)
        before = _fused_calls()
        with torch.no_grad():
            expected = mha(x, x, x, need_weights=False)[0]
            got = dev(*_emu(x, x, x), need_weights=False)[0]
        assert _fused_calls() == before + 1
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_refused():
    q, k, v = _emu(*_qkv(1, 2, 8, 8, 16))
    with pytest.raises(RuntimeError, match="dropout probability"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 1.5)
    with pytest.raises(RuntimeError, match="does not broadcast"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, torch.zeros(3, 8, device="emu"))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k.double(), v)


# -- the cost model (emulator/kernels/library.py) --------------------------------------------------
def _cost(b, h, lq, d, causal, lk=None, fidelity="kernel"):
    dev = cost_device("h200", fidelity=fidelity)
    lk = lk or lq
    q, k, v = cost_op(BF16, b, h, lq, d), cost_op(BF16, b, h, lk, d), cost_op(BF16, b, h, lk, d)
    from emulator.kernels.library import KERNELS
    return dev, KERNELS["attention"].cost(dev, cost_op(BF16, b, h, lq, d), cost_op(F32, b, h, lq), q, k, v, None,
                                          d ** -0.5, causal, 0.0, 0, 0)


@pytest.mark.parametrize("seq", [2048, 8192])
def test_causal_costs_at_most_0_6_of_non_causal(seq):
    _, full = _cost(16384 // seq, 16, seq, 128, False)
    _, causal = _cost(16384 // seq, 16, seq, 128, True)
    assert causal.ns <= 0.6 * full.ns
    assert causal.flops * 2 == pytest.approx(full.flops, rel=1e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
def test_cost_is_at_or_above_the_roofline(causal, fidelity):
    dev, cost = _cost(4, 32, 2048, 128, causal, fidelity=fidelity)
    me = dev.config.matrix_engine
    peak_flops_per_ns = 2 * dev.config.cores * me.rows * me.cols * me.macs_per_cycle.bfloat16 * dev.config.clock_ghz
    assert cost.ns >= cost.flops / peak_flops_per_ns
    assert cost.ns >= cost.nbytes / dev.hbm.bytes_per_ns


def test_kv_traffic_is_once_per_query_tile():
    from emulator.kernels.library import attention_tile_q
    dev, cost = _cost(2, 4, 1024, 64, False)
    tq = attention_tile_q(dev, 1024, 64, 64, 2)
    head = 1024 * 64 * 2
    expected = 2 * 4 * (2 * head + 1024 * 4 + (1024 // tq) * 2 * head)
    assert cost.nbytes == expected
    pad = dev.config.scratchpad.bytes_per_core
    assert tq * 64 * 2 + tq * 64 * 4 + tq * 64 * 4 + 2 * 64 * 128 * 2 <= pad
