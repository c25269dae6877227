"""Fast paths that must not change a result: each is checked against CPU and against the
general path it short-cuts.

- pow with a Scalar exponent 2, 3, -2, -1 (and 0, 1): CPU's pow_tensor_scalar special cases,
  bit for bit per dtype; a tensor exponent keeps libm's pow (as CPU's pow_tensor_tensor does).
- aten::_safe_softmax (what scaled_dot_product_attention calls): softmax with fully -inf rows
  set to zero, in one kernel; exact against CPU's composite (softmax + eq + all + where) up to
  the softmax's own tolerance, and NaN rows stay NaN.
- Ungrouped convolutions with few output positions per sample run as ONE GEMM over the batch:
  the same values as the per-sample GEMMs up to the host BLAS's order of summation for
  another GEMM width (which differs between MKL's AVX2 and AVX-512 kernels): float32 and
  float16/bfloat16 results are each held to the float64 reference within the float32
  accumulation bound (precision.py, docs/numerics.md); float64 against each other and CPU.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from torch_plugin.ops import convolution as conv_ops
from precision import assert_reduced_close

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SPECIALS = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, -1e-30, 1.0, -1.0, 0.5])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (NaN equal to NaN, and -0.0 distinct from +0.0)."""
    both_nan = a.isnan() & b.isnan()
    signs = torch.signbit(a) == torch.signbit(b)
    return bool(((a == b) & signs | both_nan).all())


def sample(dtype, n=20000, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=g) * 3).to(dtype)
    x[: len(SPECIALS)] = SPECIALS.to(dtype)
    return x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("exponent", [2.0, 3.0, -2.0, -1.0, 2, 3, -2, 0, 1, 0.0, 1.0])
def test_pow_scalar_exponent_is_bit_exact(dtype, exponent, stats):
    x = sample(dtype)
    got = torch.pow(x.to("emu"), exponent).cpu()
    assert same_bits(got, torch.pow(x, exponent))
    inplace = x.to("emu")
    inplace.pow_(exponent)
    assert same_bits(inplace.cpu(), torch.pow(x, exponent))
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("exponent", [0.5, 1.7, -3.0, -0.5])
def test_pow_other_scalar_exponents_stay_close(dtype, exponent):
    # CPU's vectorised sqrt (exponent 0.5) and powf are not correctly rounded: within tolerance.
    x = sample(dtype).abs()
    torch.testing.assert_close(torch.pow(x.to("emu"), exponent).cpu(), torch.pow(x, exponent), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow_tensor_exponent_uses_pow_not_the_scalar_special_case(dtype):
    # A (broadcast) tensor exponent of 3 goes through pow() on CPU: x*x*x would differ in the
    # last bit somewhere in this sample, so the device must not take the scalar path for it.
    x = sample(dtype)
    e = torch.tensor(3.0, dtype=dtype)
    got = torch.pow(x.to("emu"), e.to("emu")).cpu()
    want = torch.pow(x, e)
    cube = x * x * x
    torch.testing.assert_close(got, want, equal_nan=True)
    if not same_bits(want, cube):   # CPU's pow differs from x*x*x here: so must the device's
        assert not same_bits(got, cube)


def masked_scores(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 6, 7, generator=g).to(dtype)
    x[0, 1, 2, :] = -float("inf")            # a fully masked row (last dim)
    x[1, 0, :, 3] = -float("inf")            # a fully masked column (dim 2)
    x[1, 2, 4, :] = -float("inf")
    x[1, 2, 4, 1] = float("nan")             # -inf and NaN: not masked, NaN as CPU gives
    x[0, 0, 0, :3] = -float("inf")           # partly masked
    return x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 2, 0])
@pytest.mark.parametrize("out_dtype", [None, torch.float64])
def test_safe_softmax_matches_cpu(dtype, dim, out_dtype, stats):
    x = masked_scores(dtype)
    got = torch.ops.aten._safe_softmax(x.to("emu"), dim, out_dtype)
    want = torch.ops.aten._safe_softmax(x, dim, out_dtype)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    assert stats.native("aten::_safe_softmax") >= 1
    stats.no_fallback()


def test_sdpa_with_masks_forward_and_backward_match_cpu(stats):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.rand(16, 16, generator=g) > 0.3
    mask[5] = False                                          # a fully masked query row
    outs, grads = [], []
    for device in ("cpu", "emu"):
        leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
        for kwargs in (dict(is_causal=True), dict(attn_mask=mask.to(device))):
            out = F.scaled_dot_product_attention(*leaves, **kwargs)
            out.square().sum().backward()
            outs.append(out.detach().cpu())
        grads.append([t.grad.cpu() for t in leaves])
    for a, b in zip(outs[2:], outs[:2]):
        torch.testing.assert_close(a, b)
    for a, b in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, b)
    stats.no_fallback()


CONVS = [  # (N, C, H, W, O, k, stride, padding, dilation, bias)
    (8, 64, 8, 8, 32, 3, 1, 1, 1, True),
    (3, 5, 7, 9, 4, 3, 2, 1, 1, False),
    (4, 3, 9, 9, 6, 2, 1, 0, 2, True),
    (2, 4, 5, 5, 6, 1, 2, 0, 1, True),     # 1x1 with stride: im2col, not the pointwise path
    (5, 2, 40, 40, 3, 3, 1, 1, 1, True),   # 1600 positions: per-sample GEMMs
]


@pytest.mark.parametrize("case", CONVS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_batched_convolution_matches_per_sample_and_cpu(case, dtype, monkeypatch, stats):
    N, C, H, W, O, k, s, p, d, with_bias = case
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, C, H, W, generator=g).to(dtype)
    w = torch.randn(O, C, k, k, generator=g).to(dtype)
    b = torch.randn(O, generator=g).to(dtype) if with_bias else None
    args = (x.to("emu"), w.to("emu"), b.to("emu") if with_bias else None, s, p, d)
    batched = F.conv2d(*args)
    monkeypatch.setattr(conv_ops, "_BATCHED_COLUMNS", 0)     # force one GEMM per sample
    per_sample = F.conv2d(*args)
    want = F.conv2d(x, w, b, s, p, d)
    assert batched.stride() == want.stride()
    if dtype == torch.float64:
        torch.testing.assert_close(batched.cpu(), per_sample.cpu(), rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(batched.cpu(), want, rtol=1e-12, atol=1e-12)
    else:
        # The host BLAS may order a dot product differently for another GEMM width: each result
        # within the float32 accumulation bound of the float64 reference (its statistical form,
        # 4 sqrt(K) eps(float32) sum|terms|, K the terms of one output), not bit for bit.
        wide = [t.double() if t is not None else None for t in (x, w, b)]
        ref64 = F.conv2d(*wide, s, p, d)
        scale = F.conv2d(*[t.abs() if t is not None else None for t in wide], s, p, d)
        for name, got in (("batched", batched), ("per-sample", per_sample)):
            assert_reduced_close(got, ref64, dtype, terms=4 * (C * k * k + 1) ** 0.5, scale=scale,
                                 cpu=want if dtype != torch.float32 else None, what=name)
    stats.no_fallback()


def test_batched_convolution_in_chunks(monkeypatch):
    # A scratch limit smaller than the batch's column matrix: the batch goes in chunks.
    g = torch.Generator().manual_seed(4)
    x, w, b = torch.randn(7, 3, 6, 6, generator=g), torch.randn(5, 3, 3, 3, generator=g), torch.randn(5, generator=g)
    monkeypatch.setattr(conv_ops, "_BATCHED_SCRATCH", 3 * 9 * 36 * 2)   # two samples per chunk
    got = F.conv2d(x.to("emu"), w.to("emu"), b.to("emu"), padding=1)
    torch.testing.assert_close(got.cpu(), F.conv2d(x, w, b, padding=1), rtol=1e-5, atol=1e-5)


def test_batched_convolution_channels_last():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 8, 6, 6, generator=g).to(memory_format=torch.channels_last)
    w, b = torch.randn(8, 8, 3, 3, generator=g), torch.randn(8, generator=g)
    got = F.conv2d(x.to("emu"), w.to("emu"), b.to("emu"), padding=1)
    want = F.conv2d(x, w, b, padding=1)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
