"""Native sum (aten::sum.dim_IntList / sum.IntList_out) and threshold_backward against CPU.

Stated tolerances (torch.testing.assert_close):
- threshold_backward: exact (rtol=atol=0) for every dtype, including NaN in ``self`` (CPU
  computes ``self <= threshold ? 0 : grad``, so a NaN ``self`` passes the gradient through)
  and NaN/inf in ``grad``.
- sum, integer and bool inputs (and any integer ``dtype=``): exact; accumulation is int64 and
  wraps like CPU.
- sum, float32: the device accumulates in float32 (pairwise within blocks of 256, sequential
  across blocks); CPU uses cascade summation in float32, so the orders differ. Tolerance:
  rtol=1.3e-6, atol = n * 2**-24 * max|x| (n = elements summed per output).
- sum, float64: rtol=1e-12, atol = n * 2**-53 * max|x|.
- sum, float16/bfloat16: float32 accumulation and one rounding on store, as on CPU; the result
  may differ by one unit in the last place of the output dtype: rtol 1e-3 (float16) /
  1.6e-2 (bfloat16), atol = the same rtol * sqrt(n) * max|x| (for sums that cancel to near 0).
Every op checked here must be counted native by torch.emu.op_stats(), with no host fallback.
"""
from __future__ import annotations

import math

import pytest
import torch

import torch_plugin  # noqa: F401
from plugin_testing import DTYPES, EXACT, make

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
RTOL = {torch.float32: 1.3e-6, torch.float64: 1e-12, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}
EPS = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}


def sum_tol(x: torch.Tensor, result_dtype, n: int) -> dict:
    if not result_dtype.is_floating_point:
        return EXACT
    finite = x.double().abs()
    finite = finite[finite.isfinite()]
    scale = float(finite.max()) if finite.numel() else 0.0
    rtol = RTOL[result_dtype]
    if result_dtype in EPS:
        return dict(rtol=rtol, atol=max(n, 1) * EPS[result_dtype] * scale + 1e-30)
    return dict(rtol=rtol, atol=rtol * scale * max(1.0, math.sqrt(n)) + 1e-30)


def check_sum(x, *args, **kwargs):
    expected = torch.sum(x, *args, **kwargs)
    got = torch.sum(x.to("emu"), *args, **kwargs)
    assert got.device.type == "emu"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    n = x.numel() // max(expected.numel(), 1)
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **sum_tol(x, expected.dtype, n))
    return got


# --------------------------------------------------------------------------- sum
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sum_every_dtype(dtype, stats):
    x = make(dtype, (6, 5, 7), 1)
    check_sum(x)
    check_sum(x, 0)
    check_sum(x, -1)
    check_sum(x, (0, 2))
    check_sum(x, (-1, 0), keepdim=True)
    check_sum(x, 1, True)
    check_sum(x, [])
    assert stats.native("aten::sum.dim_IntList") == 7
    stats.no_fallback()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("to", [torch.float64, torch.float32, torch.float16, torch.int32, torch.int64], ids=str)
def test_sum_dtype_argument(dtype, to, stats):
    x = make(dtype, (4, 9), 2)
    check_sum(x, dtype=to)
    check_sum(x, 1, dtype=to)
    assert stats.native("aten::sum.dim_IntList") == 2
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool], ids=str)
def test_sum_non_contiguous(dtype, stats):
    x = make(dtype, (8, 6, 10), 3)
    for view in (x.transpose(0, 2), x[:, ::2, 1::3], x.permute(1, 2, 0)[2:], x.expand(2, 8, 6, 10)):
        check_sum(view, 0)
        check_sum(view, (1, -1), keepdim=True)
        check_sum(view)
    stats.no_fallback()
    assert stats.native("aten::sum.dim_IntList") == 12


def test_sum_large_float32_and_long_rows(stats):
    x = make(torch.float32, (3, 100_000), 4)
    check_sum(x, 1)
    check_sum(x, 0)
    check_sum(x)
    y = make(torch.float16, (70_000,), 5)
    check_sum(y)
    stats.no_fallback()


def test_sum_integer_wraps_like_cpu(stats):
    x = torch.full((1000,), 2 ** 62, dtype=torch.int64)
    check_sum(x)
    u = torch.full((300,), 255, dtype=torch.uint8)
    check_sum(u, dtype=torch.uint8)
    check_sum(u, dtype=torch.int8)
    stats.no_fallback()


def test_sum_nan_inf(stats):
    x = torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), 1.0, float("-inf")], [1.0, 2.0, float("inf")]])
    check_sum(x, 1)
    check_sum(x, 0)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
def test_sum_empty(dtype, stats):
    x = make(dtype, (0, 4), 6)
    check_sum(x)
    check_sum(x, 0)
    check_sum(x, 1)
    check_sum(x, 0, keepdim=True)
    check_sum(make(dtype, (3, 0, 2), 6), (1,))
    stats.no_fallback()
    assert stats.native("aten::sum.dim_IntList") == 5


def test_sum_zero_dim(stats):
    x = torch.tensor(3.5)
    check_sum(x)
    check_sum(x, 0)
    check_sum(x, -1, keepdim=True)
    check_sum(torch.tensor(True))
    stats.no_fallback()


def test_sum_out(stats):
    x = make(torch.float32, (5, 6), 7)
    for out_dtype in (torch.float32, torch.float64, torch.int32):
        expected = torch.empty(0, dtype=out_dtype)
        torch.sum(x, 1, out=expected)
        out = torch.empty(0, dtype=out_dtype, device="emu")
        result = torch.sum(x.to("emu"), 1, out=out)
        assert result is out and out.dtype == out_dtype and out.shape == (5,)
        torch.testing.assert_close(out.cpu(), expected, **sum_tol(x, out_dtype, 6))
    # non-contiguous out, keepdim, dtype= matching out
    base = torch.zeros(5, 2, device="emu")
    out = base[:, 1:]
    torch.sum(x.to("emu"), 1, keepdim=True, dtype=torch.float32, out=out)
    torch.testing.assert_close(base.cpu()[:, 1:], x.sum(1, keepdim=True), **sum_tol(x, torch.float32, 6))
    assert (base.cpu()[:, 0] == 0).all()
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
        torch.sum(x.to("emu"), 1, dtype=torch.float32, out=torch.empty(0, dtype=torch.float64, device="emu"))
    assert stats.native("aten::sum.IntList_out") == 4
    stats.no_fallback()


def test_sum_errors():
    x = torch.ones(2, 3, device="emu")
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.sum(2)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.sum((0, -2))


def test_sum_autograd(stats):
    x = make(torch.float32, (4, 5), 8)
    xe = x.to("emu").requires_grad_()
    xc = x.clone().requires_grad_()
    (xe.sum(0) * torch.arange(5.0, device="emu")).sum().backward()
    (xc.sum(0) * torch.arange(5.0)).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, **EXACT)
    stats.no_fallback()


# ------------------------------------------------------------------ threshold_backward
def tb(grad, x, threshold):
    return torch.ops.aten.threshold_backward(grad, x, threshold)


def check_tb(grad, x, threshold):
    expected = tb(grad, x, threshold)
    got = tb(grad.to("emu"), x.to("emu"), threshold)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **EXACT)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=str)
def test_threshold_backward_every_dtype(dtype, stats):
    g, x = make(dtype, (5, 7), 1), make(dtype, (5, 7), 2)
    for threshold in (0, 1, -3, 2.5):
        if dtype == torch.uint8 and threshold < 0:
            continue
        check_tb(g, x, threshold)
    stats.no_fallback()
    assert stats.native("aten::threshold_backward") == (3 if dtype == torch.uint8 else 4)


def test_threshold_backward_nan_inf(stats):
    x = torch.tensor([float("nan"), 1.0, -1.0, 0.0, float("inf"), float("-inf"), -0.0])
    g = torch.tensor([2.0, float("nan"), float("inf"), 3.0, -0.0, 4.0, 5.0])
    for dtype in FLOATS:
        check_tb(g.to(dtype), x.to(dtype), 0.0)
        check_tb(g.to(dtype), x.to(dtype), float("nan"))
        check_tb(g.to(dtype), x.to(dtype), float("inf"))
    stats.no_fallback()


def test_threshold_backward_reduced_float_threshold(stats):
    # CPU compares float(x) <= float(threshold): the threshold is not rounded to float16/bfloat16.
    x = torch.tensor([1.0, 1.0, 2.0])
    for dtype in (torch.float16, torch.bfloat16):
        check_tb(torch.ones(3, dtype=dtype), x.to(dtype), 0.99999)
    check_tb(torch.ones(3), x, 0.99999999)
    stats.no_fallback()


def test_threshold_backward_mixed_dtypes_and_broadcast(stats):
    pairs = [(torch.float32, torch.float64), (torch.float16, torch.float32), (torch.int32, torch.float32),
             (torch.float32, torch.int64), (torch.uint8, torch.int8), (torch.bfloat16, torch.float16)]
    for gd, xd in pairs:
        check_tb(make(gd, (4, 6), 1), make(xd, (4, 6), 2), 0.5)
        check_tb(make(gd, (6,), 3), make(xd, (4, 6), 4), 0)
        check_tb(make(gd, (4, 1), 5), make(xd, (1, 6), 6), 1)
    # 0-dim and non-contiguous operands
    g = make(torch.float32, (6, 8), 7)
    check_tb(g.t(), make(torch.float32, (8, 6), 8), 0.0)
    check_tb(g[:, ::2], make(torch.float32, (6, 4), 9)[::1], 0.0)
    check_tb(make(torch.float32, (), 10), make(torch.float32, (3, 3), 11), 0.0)
    stats.no_fallback()


def test_threshold_backward_out_and_errors(stats):
    g, x = make(torch.float32, (3, 4), 1), make(torch.float32, (3, 4), 2)
    out = torch.empty(0, device="emu")
    result = torch.ops.aten.threshold_backward.grad_input(g.to("emu"), x.to("emu"), 0.0, grad_input=out)
    assert result is out
    torch.testing.assert_close(out.cpu(), tb(g, x, 0.0), **EXACT)
    assert stats.native("aten::threshold_backward.grad_input") == 1
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        tb(torch.ones(2, dtype=torch.bool, device="emu"), torch.ones(2, dtype=torch.bool, device="emu"), 0)
    with pytest.raises(RuntimeError, match="without overflow"):
        tb(torch.ones(2, dtype=torch.int8, device="emu"), torch.ones(2, dtype=torch.int8, device="emu"), 300)
    stats.no_fallback()


def test_relu_backward_is_native(stats):
    x = make(torch.float32, (8, 16), 3)
    xe = x.to("emu").requires_grad_()
    xc = x.clone().requires_grad_()
    torch.relu(xe).sum().backward()
    torch.relu(xc).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, **EXACT)
    assert stats.native("aten::threshold_backward") == 1
    assert stats.native("aten::sum.dim_IntList") == 1
    stats.no_fallback()
