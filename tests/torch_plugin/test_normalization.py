"""Native normalization ops (softmax, layer/group/batch/RMS norm; forward and backward) against CPU.

Stated tolerances (torch.testing.assert_close), per dtype: float32 rtol=atol=1e-5; float64
rtol=atol=1e-10; float16/bfloat16 the assert_close defaults (float16 rtol=1e-3 atol=1e-5, bfloat16
rtol=1.6e-2 atol=1e-5), with atol raised to one ulp of the largest value for reduced-float
gradients (sums of many rounded terms; CPU rounds its partial products differently). Every op
checked here must be counted native by torch.emu.op_stats(), with no host fallback.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_plugin  # noqa: F401

A = torch.ops.aten
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: {}, torch.bfloat16: {}}


def randn(shape, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def close(got, expected, dtype, grad=False, **kw):
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, expected.dtype, got.shape,
                                                                           expected.shape)
    tol = dict(TOL[dtype])
    if grad and dtype in (torch.float16, torch.bfloat16):
        ulp = torch.finfo(dtype).eps
        tol = dict(rtol=2 * ulp, atol=ulp * max(1.0, float(expected.double().abs().max()) if expected.numel() else 0.0))
    tol.update(kw)
    torch.testing.assert_close(got.cpu(), expected, **tol)


def views(base):
    """Non-contiguous views of a CPU tensor: transposed, sliced, expanded."""
    return [base.transpose(0, 1), base[:, ::2], base[:1].expand(base.shape[0], *base.shape[1:])]


def run_both(fn, *inputs, grad_seed=1, differentiable=True):
    """fn on CPU and on emu; with autograd, backward from the same random grad. Returns pairs."""
    cpu = [x.detach().clone().requires_grad_(differentiable and x.is_floating_point()) for x in inputs]
    emu = [x.detach().to("emu").requires_grad_(differentiable and x.is_floating_point()) for x in inputs]
    yc, ye = fn(*cpu), fn(*emu)
    if differentiable:
        g = randn(yc.shape, yc.dtype, seed=grad_seed)
        yc.backward(g)
        ye.backward(g.to("emu"))
    return (ye, yc), [(e.grad, c.grad) for e, c in zip(emu, cpu)]


def ran_natively_once(stats, forward, backward):
    """The forward and the backward op each ran once natively on the device, and nothing fell back."""
    assert stats.native(forward) == 1 and stats.native(backward) == 1
    stats.no_fallback()


def check_both(fn, *inputs, dtype):
    """run_both(fn, *inputs): emu's output and its gradient of every input close to CPU's (close).
    Returns the outputs (emu, cpu)."""
    (ye, yc), grads = run_both(fn, *inputs)
    close(ye.detach(), yc.detach(), dtype)
    for ge, gc in grads:
        close(ge, gc, dtype, grad=True)
    return ye, yc


# ---------------------------------------------------------------------------------------------
# softmax

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((4, 10), 1), ((4, 10), 0), ((3, 4, 5), 1), ((3, 4, 5), -1),
                                       ((2, 3, 300), 2), ((), 0), ((0, 5), 1), ((5, 0), 1)])
def test_softmax_forward_backward(stats, dtype, shape, dim):
    x = randn(shape, dtype, scale=3)
    check_both(lambda t: F.softmax(t, dim), x, dtype=dtype)
    ran_natively_once(stats, "aten::_softmax", "aten::_softmax_backward_data")


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_non_contiguous(stats, dtype):
    base = randn((6, 8, 5), dtype, scale=3)
    for view in views(base):
        for dim in (0, 1, -1):
            ye, _ = check_both(lambda t: F.softmax(t, dim), view, dtype=dtype)
            assert ye.is_contiguous()
    stats.no_fallback()


def test_softmax_special_values(stats):
    x = torch.tensor([[1000.0, 0.0, -1000.0], [float("nan"), 1.0, 2.0], [float("inf"), 1.0, 2.0],
                      [-float("inf"), 1.0, 2.0], [-float("inf")] * 3])
    torch.testing.assert_close(F.softmax(x.to("emu"), 1).cpu(), F.softmax(x, 1), equal_nan=True)
    stats.no_fallback()


def test_softmax_out_variants(stats):
    x = randn((4, 6), torch.float32)
    expected = A._softmax(x, 1, False)
    out = torch.empty(0, device="emu")
    A._softmax.out(x.to("emu"), 1, False, out=out)
    close(out, expected, torch.float32)
    strided = torch.empty(6, 4, device="emu").t()  # right shape, not contiguous: keeps its strides
    A._softmax.out(x.to("emu"), 1, False, out=strided)
    assert strided.stride() == (1, 4)
    close(strided, expected, torch.float32)
    with pytest.warns(UserWarning, match="resized"):
        A._softmax.out(x.to("emu"), 1, False, out=torch.empty(3, device="emu"))
    bad = torch.zeros(4, 6, dtype=torch.float64, device="emu")
    with pytest.raises(RuntimeError, match="dtype"):
        A._softmax.out(x.to("emu"), 1, False, out=bad)
    assert bad.cpu().eq(0).all()
    y = A._softmax(x, 1, False)
    g = randn((4, 6), torch.float32, seed=2)
    gi = torch.empty(0, device="emu")
    A._softmax_backward_data.out(g.to("emu"), y.to("emu"), 1, torch.float32, grad_input=gi)
    close(gi, A._softmax_backward_data(g, y, 1, torch.float32), torch.float32)
    assert stats.native("aten::_softmax.out") == 3 and stats.native("aten::_softmax_backward_data.out") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_half_to_float(stats, dtype):
    x = randn((5, 7), dtype, scale=3)
    y = A._softmax(x.to("emu"), 1, True)
    assert y.dtype == torch.float32
    close(y, F.softmax(x.float(), 1), torch.float32)
    g = randn((5, 7), torch.float32, seed=3)
    gi = A._softmax_backward_data(g.to("emu"), y, 1, dtype)
    assert gi.dtype == dtype
    expected = A._softmax_backward_data(g, F.softmax(x.float(), 1), 1, torch.float32).to(dtype)
    close(gi, expected, dtype, grad=True)
    with pytest.raises(RuntimeError, match="Half and BFloat16"):
        A._softmax(x.float().to("emu"), 1, True)
    stats.no_fallback()


def test_softmax_rejects_bad_input(stats):
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.softmax(torch.ones(3, dtype=torch.long, device="emu"), 0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.softmax(torch.ones(3, device="emu"), 1)
    with pytest.raises(RuntimeError, match="expected scalar type"):
        A._softmax_backward_data(torch.ones(3, device="emu", dtype=torch.float16), torch.ones(3, device="emu"), 0,
                                 torch.float32)
    stats.no_fallback()


# ---------------------------------------------------------------------------------------------
# layer norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,normalized", [((4, 10), (10,)), ((2, 3, 8), (8,)), ((2, 3, 8), (3, 8)),
                                              ((5, 700), (700,)), ((6,), (6,))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(stats, dtype, shape, normalized, affine):
    x = randn(shape, dtype, scale=2) + 0.5
    args = [x]
    if affine:
        args += [randn(normalized, dtype, seed=4), randn(normalized, dtype, seed=5)]
    check_both(lambda t, *p: F.layer_norm(t, normalized, *p, eps=1e-5), *args, dtype=dtype)
    ran_natively_once(stats, "aten::native_layer_norm", "aten::native_layer_norm_backward")


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_stats_and_views(stats, dtype):
    base = randn((6, 8, 5), dtype, scale=3)
    for view in views(base):
        ye, me, re = A.native_layer_norm(view.to("emu"), [5], None, None, 1e-3)
        yc, mc, rc = A.native_layer_norm(view, [5], None, None, 1e-3)
        close(ye, yc, dtype)
        close(me, mc, dtype)
        close(re, rc, dtype)
        check_both(lambda t: F.layer_norm(t, view.shape[-2:]), view, dtype=dtype)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_mixed_dtype(stats, dtype):
    x, w, b = randn((4, 16), dtype), randn((16,), torch.float32, 1), randn((16,), torch.float32, 2)
    got = A.native_layer_norm(x.to("emu"), [16], w.to("emu"), b.to("emu"), 1e-5)
    expected = A.native_layer_norm(x, [16], w, b, 1e-5)
    assert [t.dtype for t in got] == [dtype, torch.float32, torch.float32]
    for g, e in zip(got, expected):
        close(g, e, g.dtype if g.dtype == dtype else torch.float32)
    stats.no_fallback()


def test_layer_norm_module_and_empty(stats):
    m = nn.LayerNorm(12)
    with torch.no_grad():
        m.weight.copy_(randn((12,), torch.float32, 7))
    me = nn.LayerNorm(12).to("emu")
    me.load_state_dict(m.state_dict())
    x = randn((3, 4, 12), torch.float32)
    xc, xe = x.clone().requires_grad_(), x.to("emu").requires_grad_()
    m(xc).sum().backward()
    me(xe).sum().backward()
    close(xe.grad, xc.grad, torch.float32)
    close(me.weight.grad, m.weight.grad, torch.float32)
    close(me.bias.grad, m.bias.grad, torch.float32)
    empty = torch.zeros(0, 12, device="emu", requires_grad=True)
    me(empty).sum().backward()
    assert empty.grad.shape == (0, 12)
    close(me.weight.grad, m.weight.grad, torch.float32)  # an empty batch adds nothing
    _, mean, rstd = A.native_layer_norm(torch.zeros(3, 0, device="emu"), [0], None, None, 1e-5)
    _, mc, rc = A.native_layer_norm(torch.zeros(3, 0), [0], None, None, 1e-5)
    torch.testing.assert_close(mean.cpu(), mc)
    torch.testing.assert_close(rstd.cpu(), rc, equal_nan=True)
    stats.no_fallback()


def test_layer_norm_rejects_bad_input(stats):
    x = torch.ones(3, 4, device="emu")
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 5\]"):
        F.layer_norm(x, (5,))
    with pytest.raises(RuntimeError, match="Expected weight to be of same shape"):
        A.native_layer_norm(x, [4], torch.ones(3, device="emu"), None, 1e-5)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        A.native_layer_norm(torch.ones(3, 4, dtype=torch.long, device="emu"), [4], None, None, 1e-5)
    with pytest.raises(RuntimeError, match="mixed dtype"):
        A.native_layer_norm(torch.ones(3, 4, dtype=torch.float64, device="emu"), [4], x[0], None, 1e-5)
    assert x.cpu().eq(1).all()
    stats.no_fallback()


# ---------------------------------------------------------------------------------------------
# RMS norm (aten::rms_norm reaches _fused_rms_norm on emu)

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm(stats, dtype, affine, eps):
    x = randn((3, 5, 16), dtype, scale=2)
    args = [x] + ([randn((16,), dtype, seed=4)] if affine else [])
    check_both(lambda t, *p: F.rms_norm(t, (16,), *p, eps=eps), *args, dtype=dtype)
    ran_natively_once(stats, "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward")


def test_rms_norm_module_non_contiguous(stats):
    m = nn.RMSNorm((4, 6), eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(randn((4, 6), torch.float32, 3))
    me = nn.RMSNorm((4, 6), eps=1e-6).to("emu")
    me.load_state_dict(m.state_dict())
    base = randn((6, 4, 5), torch.float32).permute(2, 1, 0)  # (5, 4, 6), non-contiguous
    xc, xe = base.clone().requires_grad_(), base.to("emu").requires_grad_()
    g = randn((5, 4, 6), torch.float32, 9)
    m(xc).backward(g)
    me(xe).backward(g.to("emu"))
    close(xe.grad, xc.grad, torch.float32)
    close(me.weight.grad, m.weight.grad, torch.float32)
    stats.no_fallback()


# ---------------------------------------------------------------------------------------------
# group norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((3, 4, 2, 3), 2), ((2, 8), 4), ((2, 8, 4, 4), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(stats, dtype, shape, groups, affine):
    x = randn(shape, dtype, scale=2) + 1
    C = shape[1]
    args = [x] + ([randn((C,), dtype, 4), randn((C,), dtype, 5)] if affine else [])
    check_both(lambda t, *p: F.group_norm(t, groups, *p, eps=1e-5), *args, dtype=dtype)
    ran_natively_once(stats, "aten::native_group_norm", "aten::native_group_norm_backward")


def test_group_norm_stats_channels_last_and_module(stats):
    x = randn((2, 6, 3, 4), torch.float32, scale=2).to(memory_format=torch.channels_last)
    w, b = randn((6,), torch.float32, 1), randn((6,), torch.float32, 2)
    got = A.native_group_norm(x.to("emu"), w.to("emu"), b.to("emu"), 2, 6, 12, 3, 1e-5)
    expected = A.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5)
    for g, e in zip(got, expected):
        close(g, e, torch.float32)
    assert got[0].stride() == expected[0].stride()
    m = nn.GroupNorm(3, 6)
    me = nn.GroupNorm(3, 6).to("emu")
    me.load_state_dict(m.state_dict())
    xe = x.to("emu").requires_grad_()
    xc = x.clone().requires_grad_()
    gy = randn(x.shape, torch.float32, 8)
    m(xc).backward(gy)
    me(xe).backward(gy.to("emu"))
    close(xe.grad, xc.grad, torch.float32)
    close(me.weight.grad, m.weight.grad, torch.float32)
    close(me.bias.grad, m.bias.grad, torch.float32)
    empty = torch.zeros(0, 6, 5, device="emu")
    assert me(empty).shape == (0, 6, 5)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(torch.ones(2, 6, 5, device="emu"), 4)
    stats.no_fallback()


# ---------------------------------------------------------------------------------------------
# batch norm

def _bn_pair(cls, C, affine=True, track=True):
    m = cls(C, affine=affine, track_running_stats=track, momentum=0.3, eps=1e-4)
    if affine:
        with torch.no_grad():
            m.weight.copy_(randn((C,), torch.float32, 11))
            m.bias.copy_(randn((C,), torch.float32, 12))
    if track:
        m.running_mean.copy_(randn((C,), torch.float32, 13))
        m.running_var.copy_(randn((C,), torch.float32, 14).abs() + 0.5)
    me = cls(C, affine=affine, track_running_stats=track, momentum=0.3, eps=1e-4).to("emu")
    me.load_state_dict(m.state_dict())
    return m, me


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm1d, (4, 3, 7)),
                                       (nn.BatchNorm2d, (3, 4, 5, 5))])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_module(stats, cls, shape, training, affine):
    m, me = _bn_pair(cls, shape[1], affine)
    m.train(training), me.train(training)
    for step in range(2):  # two steps: the running statistics feed the second
        x = randn(shape, torch.float32, seed=step, scale=2) + 1
        xc, xe = x.clone().requires_grad_(), x.to("emu").requires_grad_()
        g = randn(shape, torch.float32, seed=10 + step)
        yc, ye = m(xc), me(xe)
        close(ye.detach(), yc.detach(), torch.float32)
        yc.backward(g)
        ye.backward(g.to("emu"))
        close(xe.grad, xc.grad, torch.float32)
    close(me.running_mean, m.running_mean, torch.float32)
    close(me.running_var, m.running_var, torch.float32)
    assert me.num_batches_tracked.item() == m.num_batches_tracked.item()
    if affine:
        close(me.weight.grad, m.weight.grad, torch.float32)
        close(me.bias.grad, m.bias.grad, torch.float32)
    assert stats.native("aten::native_batch_norm") == 2 and stats.native("aten::native_batch_norm_backward") == 2
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_dtypes(stats, dtype, training):
    x = randn((4, 3, 6), dtype, scale=2) + 1
    w, b = randn((3,), dtype, 1), randn((3,), dtype, 2)
    rm, rv = randn((3,), dtype, 3), randn((3,), dtype, 4).abs() + 0.5
    rme, rve = rm.to("emu"), rv.to("emu")
    got = A.native_batch_norm(x.to("emu"), w.to("emu"), b.to("emu"), rme, rve, training, 0.1, 1e-5)
    expected = A.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
    for g, e in zip(got, expected):
        close(g, e, dtype)
    close(rme, rm, dtype)
    close(rve, rv, dtype)
    g = randn(x.shape, dtype, 5)
    mean, inv = (expected[1], expected[2]) if training else (None, None)
    bwd_c = A.native_batch_norm_backward(g, x, w, rm, rv, mean, inv, training, 1e-5, [True, True, True])
    bwd_e = A.native_batch_norm_backward(g.to("emu"), x.to("emu"), w.to("emu"), rme, rve, got[1] if training else None,
                                         got[2] if training else None, training, 1e-5, [True, True, True])
    for ge, gc in zip(bwd_e, bwd_c):
        close(ge, gc, dtype, grad=True)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batch_norm_mixed_dtype_and_channels_last(stats, dtype):
    x = randn((2, 3, 4, 5), dtype, scale=2).to(memory_format=torch.channels_last)
    rm, rv = torch.zeros(3), torch.ones(3)
    rme, rve = rm.to("emu"), rv.to("emu")
    w, b = randn((3,), torch.float32, 1), randn((3,), torch.float32, 2)
    got = A.native_batch_norm(x.to("emu"), w.to("emu"), b.to("emu"), rme, rve, True, 0.1, 1e-5)
    expected = A.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    assert got[0].stride() == expected[0].stride()
    close(got[0], expected[0], dtype)
    close(got[1], expected[1], torch.float32)
    close(got[2], expected[2], torch.float32, rtol=1e-4, atol=1e-4)
    close(rme, rm, torch.float32)
    close(rve, rv, torch.float32, rtol=1e-4, atol=1e-4)
    stats.no_fallback()


def test_batch_norm_legit_variants_and_out(stats):
    x = randn((4, 3, 5), torch.float32)
    rm, rv = torch.zeros(3), torch.ones(3)
    rme, rve = rm.to("emu"), rv.to("emu")
    got = A._native_batch_norm_legit(x.to("emu"), None, None, rme, rve, True, 0.2, 1e-5)
    expected = A._native_batch_norm_legit(x, None, None, rm, rv, True, 0.2, 1e-5)
    for g, e in zip(got, expected):
        close(g, e, torch.float32)
    close(rme, rm, torch.float32)
    close(rve, rv, torch.float32)
    got = A._native_batch_norm_legit.no_stats(x.to("emu"), None, None, True, 0.2, 1e-5)
    for g, e in zip(got, A._native_batch_norm_legit.no_stats(x, None, None, True, 0.2, 1e-5)):
        close(g, e, torch.float32)
    got = A._native_batch_norm_legit_no_training(x.to("emu"), None, None, rme, rve, 0.2, 1e-5)
    for g, e in zip(got, A._native_batch_norm_legit_no_training(x, None, None, rm, rv, 0.2, 1e-5)):
        close(g, e, torch.float32)
    outs = [torch.empty(0, device="emu") for _ in range(3)]
    A.native_batch_norm.out(x.to("emu"), None, None, None, None, True, 0.1, 1e-5, out=outs[0], save_mean=outs[1],
                            save_invstd=outs[2])
    for g, e in zip(outs, A.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)):
        close(g, e, torch.float32)
    bad = torch.empty(0, dtype=torch.float64, device="emu")
    with pytest.raises(RuntimeError, match="dtype"):
        A.native_batch_norm.out(x.to("emu"), None, None, None, None, True, 0.1, 1e-5, out=bad, save_mean=outs[1],
                                save_invstd=outs[2])
    y, mean, inv, reserve = A._batch_norm_with_update(x.to("emu"), None, None, rme, rve, 0.1, 1e-5)
    g = randn(x.shape, torch.float32, 3)
    dx, _, _ = A.batch_norm_backward(g.to("emu"), x.to("emu"), torch.ones(3, device="emu"), rme, rve, mean, inv,
                                     True, 1e-5, [True, False, False], reserve)
    yc, mc, ic = A.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    dxc, _, _ = A.native_batch_norm_backward(g, x, torch.ones(3), None, None, mc, ic, True, 1e-5,
                                             [True, False, False])
    close(dx, dxc, torch.float32)
    stats.no_fallback()


def test_batch_norm_edge_cases(stats):
    # an empty batch: CPU allows it in eval mode (and nn modules short-circuit it)
    e = A.native_batch_norm(torch.zeros(0, 3, 4, device="emu"), None, None, torch.zeros(3, device="emu"),
                            torch.ones(3, device="emu"), False, 0.1, 1e-5)
    assert [tuple(t.shape) for t in e] == [(0, 3, 4), (0,), (0,)]
    with pytest.raises(RuntimeError, match="at least one element"):
        A.native_batch_norm(torch.zeros(0, 3, 4, device="emu"), None, None, None, None, True, 0.1, 1e-5)
    # one value per channel: the unbiased running variance is NaN, as on CPU
    x = randn((1, 3), torch.float32)
    rm, rv = torch.zeros(3), torch.ones(3)
    rme, rve = rm.to("emu"), rv.to("emu")
    A.native_batch_norm(x.to("emu"), None, None, rme, rve, True, 0.1, 1e-5)
    A.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    torch.testing.assert_close(rme.cpu(), rm)
    torch.testing.assert_close(rve.cpu(), rv, equal_nan=True)
    # bad input: clear errors, state unchanged
    keep = torch.full((3,), 2.0, device="emu")
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        A.native_batch_norm(torch.ones(2, 3, device="emu"), None, None, torch.zeros(4, device="emu"), keep, True,
                            0.1, 1e-5)
    with pytest.raises(RuntimeError, match="running_mean and running_var"):
        A.native_batch_norm(torch.ones(2, 3, device="emu"), None, None, None, None, False, 0.1, 1e-5)
    with pytest.raises(NotImplementedError, match="not implemented for 'Int'"):
        A.native_batch_norm(torch.ones(2, 3, dtype=torch.int32, device="emu"), None, None, None, None, True, 0.1,
                            1e-5)
    assert keep.cpu().eq(2).all()
    stats.no_fallback()


def test_small_cnn_trains_without_fallback(stats):
    """BatchNorm2d + GroupNorm + LayerNorm + softmax in one model, two SGD steps, against CPU."""
    torch.manual_seed(0)

    def model():
        return nn.Sequential(nn.BatchNorm2d(3), nn.GroupNorm(1, 3), nn.Flatten(), nn.LayerNorm(48),
                             nn.Softmax(dim=1))
    mc = model()
    me = model().to("emu")
    me.load_state_dict(mc.state_dict())
    oc = torch.optim.SGD(mc.parameters(), lr=0.1, foreach=False)
    oe = torch.optim.SGD(me.parameters(), lr=0.1, foreach=False)
    for step in range(2):
        x = randn((4, 3, 4, 4), torch.float32, seed=step)
        t = randn((4, 48), torch.float32, seed=20 + step)
        for m, o, xx, tt in ((mc, oc, x, t), (me, oe, x.to("emu"), t.to("emu"))):
            o.zero_grad()
            (m(xx) * tt).sum().backward()
            o.step()
    for (name, pc), pe in zip(mc.state_dict().items(), me.state_dict().values()):
        if pc.is_floating_point():
            torch.testing.assert_close(pe.cpu(), pc, rtol=1e-5, atol=1e-5, msg=name)
    stats.no_fallback()
