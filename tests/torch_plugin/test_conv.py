"""Native convolution, pooling and upsampling (forward and backward) against CPU.

Stated tolerances (torch.testing.assert_close), per dtype:
- float32: rtol=1e-5, atol=1e-5 (the device sums in another order: im2col + BLAS GEMM);
- float64: rtol=1e-12, atol=1e-12;
- float16 / bfloat16: against the float64 reference (the op on float64 copies of the same
  rounded inputs, forward and backward), within one unit in the last place of the dtype plus
  the float32 accumulation bound n * eps(float32) * (the op on |inputs|), n the largest operand's
  size (precision.py, docs/numerics.md); never against CPU's own float16/bfloat16 bits, which
  differ between AVX2, AVX-512 and AMX hosts. An element no further off than twice CPU's own
  float16/bfloat16 error passes too.
- max pooling, nearest upsampling and pooling indices: exact.
Every op checked here must be counted native by torch.emu.op_stats(), with no host fallback.
"""
from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from plugin_testing import EXACT
from precision import assert_reduced_close, magnitudes, reference64

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: {}, torch.bfloat16: {}}
REDUCED = (torch.float16, torch.bfloat16)


def randn(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def emu(t):
    return t.to("emu")


def close(got, expected, dtype, cpu=None, **kw):
    """got against ``expected``: CPU's result, or for float16/bfloat16 reference()'s float64 pair."""
    if dtype in REDUCED:
        ref64, scale, terms = expected
        assert_reduced_close(got, ref64, dtype, scale=scale, terms=terms, cpu=cpu)
        return
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, **{**TOL[dtype], **kw})


def _terms(*tensors):
    """An upper bound of the terms of one output's sum in these ops: the largest operand's size."""
    return max(t.numel() for t in tensors if isinstance(t, torch.Tensor))


def reference(fn, dtype, *tensors):
    """CPU's result; for float16/bfloat16 (the float64 reference, the op on |inputs|, the term bound):
    every op of this file is linear in each operand, so fn on the magnitudes is the sum of |terms|."""
    if dtype in REDUCED:
        ref64 = reference64(fn, *tensors)
        return ref64, fn(*magnitudes(list(tensors))), _terms(ref64, *tensors)
    return fn(*tensors)


def check_grads(fn, dtype, *inputs, tol=None, seed=7):
    """Forward + backward of ``fn`` on emu against CPU (float64 reference for reduced dtypes)."""
    cpu = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    dev = [emu(t.detach()).requires_grad_(t.is_floating_point()) for t in inputs]
    if dtype in REDUCED:
        return _check_grads_reduced(fn, dtype, cpu, dev, seed)
    y_ref = fn(*cpu)
    y_dev = fn(*dev)
    g = randn(y_ref.shape, dtype, seed=seed)
    y_ref.backward(g.to(y_ref.dtype))
    y_dev.backward(emu(g))
    tol = tol or TOL[dtype]
    torch.testing.assert_close(y_dev.detach().cpu(), y_ref.detach(), **tol)
    for d, r in zip(dev, cpu):
        if d.grad is not None:
            torch.testing.assert_close(d.grad.cpu(), r.grad, **tol)


def _check_grads_reduced(fn, dtype, cpu, dev, seed):
    """The float64 reference of the forward and of every gradient, and the same op on magnitudes
    (|inputs|, |grad_output|: the sum of |terms| of each gradient, the ops being linear in each)."""
    ref_in = [t.detach().double().requires_grad_(True) for t in cpu]
    abs_in = [t.detach().double().abs().requires_grad_(True) for t in cpu]
    y_ref, y_abs, y_dev = fn(*ref_in), fn(*abs_in), fn(*dev)
    g = randn(y_ref.shape, dtype, seed=seed)
    y_ref.backward(g.double())
    y_abs.backward(g.double().abs())
    y_dev.backward(emu(g))
    terms = _terms(y_ref, *cpu)
    assert_reduced_close(y_dev, y_ref.detach(), dtype, scale=y_abs.detach(), terms=terms, what="forward")
    for i, (d, r, a) in enumerate(zip(dev, ref_in, abs_in)):
        if d.grad is not None:
            assert_reduced_close(d.grad, r.grad, dtype, scale=a.grad, terms=terms, what=f"grad of input {i}")


# ---------------------------------------------------------------------------------------------
# convolution: a grid of parameters

GRID = list(itertools.product([1, 2], [0, 1], [1, 2], [1, 2, 4]))


@pytest.mark.parametrize("stride,padding,dilation,groups", GRID)
def test_conv2d_grid_forward_backward_float64(stats, stride, padding, dilation, groups):
    x, w, b = randn((2, 4, 9, 9), torch.float64), randn((8, 4 // groups, 3, 3), torch.float64, 1), \
        randn((8,), torch.float64, 2)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check_grads(lambda x, w, b: F.conv2d(x, w, b, **args), torch.float64, x, w, b)
    assert stats.native("aten::convolution_overrideable") == 1
    assert stats.native("aten::convolution_backward_overrideable") == 1
    stats.no_fallback()


@pytest.mark.parametrize("stride,padding,dilation,groups", GRID)
def test_conv_transpose2d_grid_forward_backward_float64(stats, stride, padding, dilation, groups):
    x, w, b = randn((2, 4, 5, 6), torch.float64), randn((4, 3, 3, 2), torch.float64, 1), \
        randn((3 * groups,), torch.float64, 2)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                output_padding=1 if stride > 1 else 0)
    check_grads(lambda x, w, b: F.conv_transpose2d(x, w, b, **args), torch.float64, x, w, b)
    assert stats.native("aten::convolution_overrideable") == 1
    assert stats.native("aten::convolution_backward_overrideable") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", ["plain", "strided_padded_grouped", "pointwise", "no_bias", "transposed"])
def test_conv2d_dtypes(stats, dtype, case):
    x = randn((2, 4, 9, 9), dtype)
    if case == "transposed":
        w, b = randn((4, 3, 3, 3), dtype, 1), randn((6,), dtype, 2)
        fn = lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)  # noqa: E731
    else:
        groups = 2 if case == "strided_padded_grouped" else 1
        k = 1 if case == "pointwise" else 3
        w, b = randn((6, 4 // groups, k, k), dtype, 1), randn((6,), dtype, 2)
        args = dict(stride=2, padding=1, groups=2) if groups == 2 else {}
        fn = (lambda x, w, b: F.conv2d(x, w, None, **args)) if case == "no_bias" else \
            (lambda x, w, b: F.conv2d(x, w, b, **args))  # noqa: E731
    # forward against CPU (float16/bfloat16: the float64 reference; CPU's own error bounds it too)
    got = fn(emu(x), emu(w), emu(b))
    close(got, reference(fn, dtype, x, w, b), dtype, cpu=fn(x, w, b))
    check_grads(fn, dtype, x, w, b)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_conv1d_and_conv3d(stats, dtype):
    x1, w1, b1 = randn((2, 4, 11), dtype), randn((6, 2, 3), dtype, 1), randn((6,), dtype, 2)
    check_grads(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2), dtype, x1, w1, b1)
    x3, w3, b3 = randn((2, 3, 5, 6, 4), dtype), randn((4, 3, 3, 2, 3), dtype, 1), randn((4,), dtype, 2)
    check_grads(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1)), dtype, x3, w3, b3)
    check_grads(lambda x, w, b: F.conv_transpose3d(x, w.transpose(0, 1), b, stride=2), dtype, x3, w3, b3)
    assert stats.native("aten::convolution_overrideable") == 3
    stats.no_fallback()


def test_conv_unbatched_and_padding_same(stats):
    x, w, b = randn((4, 9, 9)), randn((6, 4, 3, 3), seed=1), randn((6,), seed=2)
    close(F.conv2d(emu(x), emu(w), emu(b)), F.conv2d(x, w, b), torch.float32)
    check_grads(lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=2), torch.float32, x[None], w, b)
    x1 = randn((4, 10))
    close(F.conv1d(emu(x1), emu(w[..., 0]), padding="same"), F.conv1d(x1, w[..., 0], padding="same"), torch.float32)
    stats.no_fallback()


def test_conv_non_contiguous_and_channels_last(stats):
    base = randn((2, 9, 4, 9))
    x = base.transpose(1, 2)                           # (2, 4, 9, 9) non-contiguous
    w = randn((3, 3, 4, 6), seed=1).permute(3, 2, 0, 1)   # (6, 4, 3, 3) non-contiguous
    check_grads(lambda x, w: F.conv2d(x, w, padding=1), torch.float32, x, w)
    sliced = randn((2, 8, 12, 12))[:, ::2, 1::1, ::1][..., :9, :9]
    close(F.conv2d(emu(sliced), emu(w), stride=2), F.conv2d(sliced, w, stride=2), torch.float32)
    expanded = randn((1, 4, 9, 9)).expand(3, 4, 9, 9)
    close(F.conv2d(emu(expanded), emu(w)), F.conv2d(expanded, w), torch.float32)
    cl = randn((2, 4, 9, 9)).contiguous(memory_format=torch.channels_last)
    got = F.conv2d(emu(cl), emu(w), padding=1)
    expected = F.conv2d(cl, w, padding=1)
    close(got, expected, torch.float32)
    assert got.is_contiguous(memory_format=torch.channels_last) == \
        expected.is_contiguous(memory_format=torch.channels_last)
    check_grads(lambda x, w: F.conv2d(x, w, padding=1), torch.float32, cl, w)
    stats.no_fallback()


def test_conv_empty_batch_and_output_mask(stats):
    x, w, b = randn((0, 4, 9, 9)), randn((6, 4, 3, 3), seed=1), randn((6,), seed=2)
    got = F.conv2d(emu(x), emu(w), emu(b))
    assert got.shape == (0, 6, 7, 7)
    xc = randn((2, 4, 9, 9))
    xe, we, wc = emu(xc), emu(w).requires_grad_(True), w.clone().requires_grad_(True)
    F.conv2d(xe, we).sum().backward()             # only grad_weight is requested
    F.conv2d(xc, wc).sum().backward()
    close(we.grad, wc.grad, torch.float32)
    gi, gw, gb = torch.ops.aten.convolution_backward_overrideable(
        emu(torch.ones(2, 6, 7, 7)), xe, emu(w), [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, False, True])
    egi, _, egb = torch.ops.aten.convolution_backward(torch.ones(2, 6, 7, 7), xc, w, [6], [1, 1], [0, 0],
                                                      [1, 1], False, [0, 0], 1, [True, False, True])
    assert gw is None
    close(gi, egi, torch.float32)
    close(gb, egb, torch.float32)
    stats.no_fallback()


def test_conv_modules_train(stats):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, groups=2),
                          nn.ReLU(), nn.ConvTranspose2d(8, 4, 3, stride=2, output_padding=1),
                          nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((3, 2)))
    device_model = copy.deepcopy(model).to("emu")
    x = randn((2, 3, 12, 12))
    y = model(x)
    y_dev = device_model(emu(x))
    close(y_dev, y, torch.float32)
    y.square().sum().backward()
    y_dev.square().sum().backward()
    for p, q in zip(model.parameters(), device_model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)
    for op in ("convolution_overrideable", "convolution_backward_overrideable", "max_pool2d_with_indices",
               "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward", "_adaptive_avg_pool2d",
               "_adaptive_avg_pool2d_backward"):
        assert stats.native(f"aten::{op}") > 0, op
    stats.no_fallback()


def test_conv_half_exact_sums():
    # Small integers: every fp32 partial sum is exact, so the one rounding makes the result bit-exact.
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-4, 5, (2, 4, 9, 9), generator=g).half()
    w = torch.randint(-4, 5, (6, 4, 3, 3), generator=g).half()
    got = F.conv2d(emu(x), emu(w), padding=1)
    torch.testing.assert_close(got.cpu(), F.conv2d(x.float(), w.float(), padding=1).half(), **EXACT)


def test_conv_errors_leave_state(stats):
    x, w = emu(randn((2, 4, 9, 9))), emu(randn((6, 4, 3, 3)))
    before = x.cpu()
    with pytest.raises(RuntimeError, match="should be the same"):
        F.conv2d(x, w.double())
    with pytest.raises(RuntimeError, match="expected input.* to have 4 channels, but got 3"):
        F.conv2d(x[:, :3], w)
    with pytest.raises(RuntimeError, match="Kernel size can't be greater"):
        F.conv2d(x[..., :2, :2], w)
    with pytest.raises(NotImplementedError, match="convolution_overrideable: dtype torch.int64"):
        torch.ops.aten.convolution_overrideable(x.long(), w.long(), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    with pytest.raises(RuntimeError, match="bias"):
        torch.ops.aten.convolution_overrideable(x, w, emu(torch.zeros(5)), [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    torch.testing.assert_close(x.cpu(), before, **EXACT)
    stats.no_fallback()


# ---------------------------------------------------------------------------------------------
# pooling

POOL_GRID = [dict(kernel_size=3, stride=1, padding=0), dict(kernel_size=3, stride=2, padding=1),
             dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 1)), dict(kernel_size=3, stride=2, ceil_mode=True),
             dict(kernel_size=2)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("params", POOL_GRID + [dict(kernel_size=3, stride=2, dilation=2, padding=1)])
def test_max_pool2d(stats, dtype, params):
    x = randn((2, 4, 9, 9), dtype)
    got, idx = F.max_pool2d(emu(x), return_indices=True, **params)
    exp, eidx = F.max_pool2d(x, return_indices=True, **params)
    torch.testing.assert_close(got.cpu(), exp, **EXACT)
    torch.testing.assert_close(idx.cpu(), eidx, **EXACT)
    check_grads(lambda t: F.max_pool2d(t, **params), dtype, x)
    assert stats.native("aten::max_pool2d_with_indices") >= 2
    assert stats.native("aten::max_pool2d_with_indices_backward") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_max_pool2d_integers_and_nan(stats, dtype):
    x = torch.randint(0, 200, (2, 3, 7, 7), dtype=dtype)
    torch.testing.assert_close(F.max_pool2d(emu(x), 3, 2, 1).cpu(), F.max_pool2d(x, 3, 2, 1), **EXACT)
    y = randn((1, 2, 6, 6))
    y[0, 0, 1, 1] = float("nan")
    y[0, 1, 4, 4] = float("-inf")
    y[0, 1, 4:, 4:] = float("-inf")
    got, gi = F.max_pool2d(emu(y), 2, return_indices=True)
    exp, ei = F.max_pool2d(y, 2, return_indices=True)
    torch.testing.assert_close(got.cpu(), exp, equal_nan=True, **EXACT)
    torch.testing.assert_close(gi.cpu(), ei, **EXACT)
    stats.no_fallback()


def test_max_pool1d_unbatched_and_channels_last(stats):
    x = randn((2, 4, 11))
    check_grads(lambda t: F.max_pool1d(t, 3, 2, 1), torch.float32, x)
    x3 = randn((4, 9, 9))
    check_grads(lambda t: F.max_pool2d(t, 3, 2), torch.float32, x3)
    cl = randn((2, 4, 9, 9)).contiguous(memory_format=torch.channels_last)
    close(F.max_pool2d(emu(cl), 2), F.max_pool2d(cl, 2), torch.float32, **EXACT)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("params", POOL_GRID + [dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                                dict(kernel_size=3, stride=2, padding=1, divisor_override=5),
                                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                     count_include_pad=False)])
def test_avg_pool2d(stats, dtype, params):
    x = randn((2, 4, 9, 9), dtype)
    close(F.avg_pool2d(emu(x), **params), reference(lambda t: F.avg_pool2d(t, **params), dtype, x), dtype)
    check_grads(lambda t: F.avg_pool2d(t, **params), dtype, x)
    assert stats.native("aten::avg_pool2d") == 2
    assert stats.native("aten::avg_pool2d_backward") == 1
    stats.no_fallback()


def test_avg_pool1d_and_non_contiguous(stats):
    check_grads(lambda t: F.avg_pool1d(t, 3, 2, 1), torch.float32, randn((2, 4, 11)))
    x = randn((2, 9, 4, 9)).transpose(1, 2)
    check_grads(lambda t: F.avg_pool2d(t, 2, 1), torch.float32, x)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size", [(3, 3), (4, 2), (9, 9), (2, 5), (1, 3)])
def test_adaptive_avg_pool2d(stats, dtype, size):
    x = randn((2, 4, 9, 7), dtype)
    close(F.adaptive_avg_pool2d(emu(x), size), reference(lambda t: F.adaptive_avg_pool2d(t, size), dtype, x), dtype)
    check_grads(lambda t: F.adaptive_avg_pool2d(t, size), dtype, x)
    check_grads(lambda t: F.adaptive_avg_pool2d(t, size), dtype, x[0].transpose(1, 2))
    assert stats.native("aten::_adaptive_avg_pool2d_backward") == 2
    stats.no_fallback()


def test_pool_out_variants(stats):
    x = emu(randn((2, 4, 9, 9)))
    cpu = x.cpu()
    out = emu(torch.empty(0))
    idx = emu(torch.empty(0, dtype=torch.int64))
    torch.ops.aten.max_pool2d_with_indices.out(x, [3, 3], [2, 2], out=out, indices=idx)
    e_out, e_idx = torch.ops.aten.max_pool2d_with_indices(cpu, [3, 3], [2, 2])
    torch.testing.assert_close(out.cpu(), e_out, **EXACT)
    torch.testing.assert_close(idx.cpu(), e_idx, **EXACT)
    # a correctly shaped non-contiguous out keeps its strides
    strided = emu(torch.zeros(2, 4, 4, 4)).transpose(2, 3)
    assert not strided.is_contiguous()
    strides = strided.stride()
    torch.ops.aten.avg_pool2d.out(x, [3, 3], [2, 2], out=strided)
    assert strided.stride() == strides
    close(strided, F.avg_pool2d(cpu, 3, 2), torch.float32)
    # a wrong-shaped non-empty out is resized with a warning
    wrong = emu(torch.zeros(3))
    with pytest.warns(UserWarning, match="was resized"):
        torch.ops.aten.avg_pool2d.out(x, [2, 2], out=wrong)
    close(wrong, F.avg_pool2d(cpu, 2), torch.float32)
    # wrong dtype rejected, out untouched
    bad = emu(torch.zeros(2, 4, 4, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.aten.avg_pool2d.out(x, [3, 3], [2, 2], out=bad)
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.aten.max_pool2d_with_indices.out(x, [3, 3], [2, 2], out=emu(torch.zeros(0)),
                                                   indices=emu(torch.zeros(0, dtype=torch.int32)))
    assert bad.cpu().abs().sum() == 0
    gi = emu(torch.empty(0))
    go = emu(torch.ones(2, 4, 4, 4))
    torch.ops.aten.avg_pool2d_backward.grad_input(go, x, [3, 3], [2, 2], [0, 0], False, True, None, grad_input=gi)
    close(gi, torch.ops.aten.avg_pool2d_backward(go.cpu(), cpu, [3, 3], [2, 2], [0, 0], False, True, None),
          torch.float32)
    stats.no_fallback()


def test_pool_errors_and_empty(stats):
    x = emu(randn((2, 4, 9, 9)))
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match="stride should not be zero"):
        F.max_pool2d(x, 2, stride=0)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool2d(x[..., :2, :2], 3)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with torch.emu.host_fallback("forbid"), pytest.raises(RuntimeError, match="avg_pool2d: dtype torch.int64"):
        F.avg_pool2d(x.long(), 2)   # no integer kernel; CPU has one, so with the fallback allowed it runs there
    assert F.max_pool2d(emu(torch.zeros(0, 4, 9, 9)), 2).shape == (0, 4, 4, 4)
    assert F.adaptive_avg_pool2d(emu(torch.zeros(0, 4, 9, 9)), 3).shape == (0, 4, 3, 3)
    stats.no_fallback()


def test_max_pool_backward_bad_index_faults():
    # An index outside the plane is a kernel fault (reported at the next sync), never a stray write.
    x = emu(randn((1, 1, 4, 4)))
    go = emu(torch.ones(1, 1, 2, 2))
    idx = emu(torch.tensor([[[[0, 1], [2, 99]]]]))
    gi = torch.ops.aten.max_pool2d_with_indices_backward(go, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
    with pytest.raises(torch.AcceleratorError, match="index 99 is out of range"):
        gi.cpu()
    torch.emu.recover()


# ---------------------------------------------------------------------------------------------
# upsampling

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(7, 12)), dict(scale_factor=(1.5, 0.7)),
                                dict(size=(3, 4))])
def test_upsample_nearest2d(stats, dtype, kw):
    x = randn((2, 3, 5, 6), dtype)
    torch.testing.assert_close(F.interpolate(emu(x), mode="nearest", **kw).cpu(),
                               F.interpolate(x, mode="nearest", **kw), **EXACT)
    check_grads(lambda t: F.interpolate(t, mode="nearest", **kw), dtype, x)
    assert stats.native("aten::upsample_nearest2d_backward") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(7, 12)), dict(scale_factor=(1.5, 0.7)),
                                dict(size=(1, 4))])
def test_upsample_bilinear2d(stats, dtype, align_corners, kw):
    x = randn((2, 3, 5, 6), dtype)
    fn = lambda t: F.interpolate(t, mode="bilinear", align_corners=align_corners, **kw)  # noqa: E731
    close(fn(emu(x)), reference(fn, dtype, x), dtype)
    check_grads(fn, dtype, x)
    check_grads(fn, dtype, x.transpose(2, 3))
    assert stats.native("aten::upsample_bilinear2d") == 3
    stats.no_fallback()


def test_upsample_uint8_and_out(stats):
    x = torch.randint(0, 255, (1, 2, 4, 5), dtype=torch.uint8)
    torch.testing.assert_close(F.interpolate(emu(x), scale_factor=3).cpu(), F.interpolate(x, scale_factor=3), **EXACT)
    out = emu(torch.empty(0))
    xf = randn((1, 2, 4, 5))
    torch.ops.aten.upsample_bilinear2d.out(emu(xf), [6, 7], False, out=out)
    close(out, torch.ops.aten.upsample_bilinear2d(xf, [6, 7], False), torch.float32)
    with pytest.raises(RuntimeError, match="4D"):
        torch.ops.aten.upsample_nearest2d(emu(xf[0]), [6, 7])
    stats.no_fallback()
