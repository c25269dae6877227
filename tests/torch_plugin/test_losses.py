"""Losses against CPU, forward and backward: nll_loss of any rank (nll_loss2d), cross_entropy (label
smoothing, probabilities), mse_loss, smooth_l1_loss, huber_loss, binary_cross_entropy (+ weight),
binary_cross_entropy_with_logits (weight, pos_weight), and the composites l1_loss and kl_div.

Stated tolerances (torch.testing.assert_close), per dtype of the input. The device computes each element
in float64 and rounds once; CPU computes in the dtype (float16/bfloat16 op by op) and keeps partial
sums in it:
- per-element losses and gradients: float32 rtol=1e-5, atol=1e-6; float64 rtol=atol=1e-12;
  float16 rtol=atol=4e-3; bfloat16 rtol=atol=3e-2;
- mean/sum: float32 rtol=1e-5, atol=1e-5; float64 rtol=atol=1e-12; float16 rtol=atol=1e-2;
  bfloat16 rtol=atol=5e-2;
- nll_loss2d per-element and its backward: exact (one product, as CPU).
Every op checked runs natively: no host fallback (the ``stats`` fixture).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from plugin_testing import EXACT

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
REDUCTIONS = ["none", "mean", "sum"]
ELEM_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12),
            torch.float16: dict(rtol=4e-3, atol=4e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}
SUM_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
           torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def randn(shape, dtype=torch.float32, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def rand(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g).to(dtype)


def emu(t):
    return t.to("emu") if isinstance(t, torch.Tensor) else t


def run_both(fn, x, *args, reduction="mean", grad_seed=7, **kwargs):
    """fn(x, *args) on CPU and emu with autograd on x; returns (cpu loss, emu loss, cpu grad, emu grad)."""
    xc = x.clone().requires_grad_(True)
    xe = emu(x).requires_grad_(True)
    lc = fn(xc, *args, reduction=reduction, **kwargs)
    le = fn(xe, *map(emu, args), reduction=reduction, **{k: emu(v) for k, v in kwargs.items()})
    g = randn(lc.shape, lc.dtype, grad_seed, 1.0)
    lc.backward(g)
    le.backward(emu(g))
    return lc.detach(), le.detach().cpu(), xc.grad, xe.grad.cpu()


def tol(dtype, reduction):
    return (ELEM_TOL if reduction == "none" else SUM_TOL)[dtype]


# ------------------------------------------------------------------------------ nll_loss, any rank
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 4, 6), (2, 3, 2, 3, 2)], ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_nll_loss_any_rank(stats, shape, reduction, weighted):
    x = randn(shape)
    t = torch.randint(0, shape[1], (shape[0],) + shape[2:], generator=torch.Generator().manual_seed(1))
    t.view(-1)[::5] = 1  # ignored
    kwargs = dict(ignore_index=1)
    if weighted:
        kwargs["weight"] = rand((shape[1],), seed=2) + 0.5
    lc, le, gc, ge = run_both(F.nll_loss, x, t, reduction=reduction, **kwargs)
    torch.testing.assert_close(le, lc, **(EXACT if reduction == "none" else SUM_TOL[torch.float32]))
    torch.testing.assert_close(ge, gc, **(EXACT if reduction == "none" else SUM_TOL[torch.float32]))
    assert stats.native("aten::nll_loss2d_forward") == 1 and stats.native("aten::nll_loss2d_backward") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_nll_loss2d_dtypes_and_non_contiguous(stats, dtype):
    base = randn((2, 5, 6, 3), dtype)
    x = base.permute(0, 3, 1, 2)  # (2, 3, 5, 6), channels last-ish strides
    t = torch.randint(0, 3, (2, 6, 5), generator=torch.Generator().manual_seed(3)).transpose(1, 2)
    for reduction in REDUCTIONS:
        # CPU's nll_loss2d_backward refuses a non-contiguous input ("grad_input must be contiguous"):
        # the reference runs on a contiguous copy, the device on the strided views.
        xc = x.contiguous().requires_grad_(True)
        lc = F.nll_loss(xc, t.contiguous(), reduction=reduction)
        xe = emu(base).permute(0, 3, 1, 2).detach().requires_grad_(True)
        le = F.nll_loss(xe, emu(t), reduction=reduction)
        g = randn(lc.shape, dtype, 7, 1.0)
        lc.backward(g)
        le.backward(emu(g))
        torch.testing.assert_close(le.detach().cpu(), lc.detach(), **(EXACT if reduction == "none" else SUM_TOL[dtype]))
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, **(EXACT if reduction == "none" else SUM_TOL[dtype]))
    stats.no_fallback()


def test_nll_loss2d_out_empty_and_all_ignored(stats):
    x, t = randn((2, 3, 4, 5)), torch.randint(0, 3, (2, 4, 5))
    out, tw = torch.empty(0, device="emu"), torch.empty(0, device="emu")
    torch.ops.aten.nll_loss2d_forward.output(emu(x), emu(t), None, 0, -100, output=out, total_weight=tw)
    torch.testing.assert_close(out.cpu(), torch.ops.aten.nll_loss2d_forward(x, t, None, 0, -100)[0], **EXACT)
    gi = torch.empty(0, device="emu")
    torch.ops.aten.nll_loss2d_backward.grad_input(emu(torch.ones(())), emu(x), emu(t), None, 2, -100, tw,
                                                  grad_input=gi)
    torch.testing.assert_close(gi.cpu(), torch.ops.aten.nll_loss2d_backward(torch.ones(()), x, t, None, 2, -100,
                                                                           torch.tensor(0.)), **EXACT)
    for args in [(randn((0, 3, 4, 5)), t[:0], None, 1, -100), (randn((0, 3, 4, 5)), t[:0], None, 2, -100),
                 (x, torch.full_like(t, -100), None, 1, -100)]:
        got = torch.ops.aten.nll_loss2d_forward(*map(emu, args))
        expected = torch.ops.aten.nll_loss2d_forward(*args)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.cpu(), e, equal_nan=True)
    assert stats.native("aten::nll_loss2d_forward.output") == 1
    stats.no_fallback()


NLL2D_ERRORS = {
    "target_rank": lambda d: torch.ops.aten.nll_loss2d_forward(randn((2, 3, 4, 5)).to(d),
                                                               torch.zeros(2, 4, dtype=torch.long).to(d), None, 1, -100),
    "input_rank": lambda d: torch.ops.aten.nll_loss2d_forward(randn((3, 4, 5)).to(d),
                                                              torch.zeros(2, 4, 5, dtype=torch.long).to(d), None, 1, -100),
    "size": lambda d: torch.ops.aten.nll_loss2d_forward(randn((2, 3, 4, 5)).to(d),
                                                        torch.zeros(2, 3, 5, dtype=torch.long).to(d), None, 1, -100),
    "weight": lambda d: torch.ops.aten.nll_loss2d_forward(randn((2, 3, 4, 5)).to(d),
                                                          torch.zeros(2, 4, 5, dtype=torch.long).to(d),
                                                          torch.ones(4).to(d), 1, -100),
}


@pytest.mark.parametrize("name", NLL2D_ERRORS)
def test_nll_loss2d_errors_match_cpu(name):
    with pytest.raises(RuntimeError) as cpu_error:
        NLL2D_ERRORS[name]("cpu")
    with pytest.raises(RuntimeError) as emu_error:
        NLL2D_ERRORS[name]("emu")
    assert str(emu_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]


# ------------------------------------------------------------------------------ cross_entropy composites
@pytest.mark.parametrize("kwargs", [dict(label_smoothing=0.1), dict(label_smoothing=0.2, ignore_index=2),
                                    dict(label_smoothing=0.1, reduction="sum"),
                                    dict(label_smoothing=0.3, reduction="none")], ids=str)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_cross_entropy_label_smoothing(stats, kwargs, weighted):
    x = randn((6, 5))
    t = torch.randint(0, 5, (6,), generator=torch.Generator().manual_seed(4))
    kwargs = dict(kwargs)
    reduction = kwargs.pop("reduction", "mean")
    if weighted:
        kwargs["weight"] = rand((5,), seed=5) + 0.5
    lc, le, gc, ge = run_both(F.cross_entropy, x, t, reduction=reduction, **kwargs)
    torch.testing.assert_close(le, lc, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ge, gc, rtol=1e-5, atol=1e-5)
    assert stats.native("aten::nll_loss_forward") == 1 and stats.native("aten::_log_softmax") == 1
    stats.no_fallback()


def test_cross_entropy_spatial_and_probabilities(stats):
    x = randn((2, 4, 3, 3))
    t = torch.randint(0, 4, (2, 3, 3), generator=torch.Generator().manual_seed(6))
    lc, le, gc, ge = run_both(F.cross_entropy, x, t, label_smoothing=0.1)
    torch.testing.assert_close(le, lc, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ge, gc, rtol=1e-5, atol=1e-5)
    probs = torch.softmax(randn((2, 4, 3, 3), seed=8), 1)
    lc, le, gc, ge = run_both(F.cross_entropy, x, probs)
    torch.testing.assert_close(le, lc, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ge, gc, rtol=1e-5, atol=1e-5)
    assert stats.native("aten::nll_loss2d_forward") == 1
    stats.no_fallback()


# ------------------------------------------------------------------------------ pointwise losses
POINTWISE = {
    "mse": (F.mse_loss, {}, "aten::mse_loss", "aten::mse_loss_backward"),
    "smooth_l1": (F.smooth_l1_loss, dict(beta=0.7), "aten::smooth_l1_loss", "aten::smooth_l1_loss_backward"),
    # F.smooth_l1_loss sends beta == 0 to l1_loss; the aten op itself handles it (CPU's backward rule)
    "smooth_l1_beta0": (lambda x, y, reduction, beta: torch.ops.aten.smooth_l1_loss(
        x, y, REDUCTIONS.index(reduction), beta), dict(beta=0.0), "aten::smooth_l1_loss",
        "aten::smooth_l1_loss_backward"),
    "huber": (F.huber_loss, dict(delta=0.6), "aten::huber_loss", "aten::huber_loss_backward"),
}


@pytest.mark.parametrize("name", POINTWISE)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses(stats, name, dtype, reduction):
    fn, kwargs, fwd, bwd = POINTWISE[name]
    x, y = randn((5, 7), dtype, 1), randn((5, 7), dtype, 2)
    y[0, :3] = x[0, :3]  # differences of exactly 0 (the branch points of smooth_l1/huber)
    lc, le, gc, ge = run_both(fn, x, y, reduction=reduction, **kwargs)
    assert le.dtype == lc.dtype and le.shape == lc.shape
    torch.testing.assert_close(le, lc, **tol(dtype, reduction))
    torch.testing.assert_close(ge, gc, **ELEM_TOL[dtype])
    assert stats.native(fwd) == 1 and stats.native(bwd) == 1
    stats.no_fallback()


@pytest.mark.parametrize("name", POINTWISE)
def test_regression_losses_non_contiguous_and_broadcast(stats, name):
    fn, kwargs, fwd, _ = POINTWISE[name]
    x = randn((6, 8), seed=1).t()[::2]        # (4, 6) strided
    y = randn((6,), seed=2)                   # broadcast over rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # F.*_loss warns that the target size differs (it broadcasts)
        lc, le, gc, ge = run_both(fn, x, y, reduction="none", **kwargs)
    torch.testing.assert_close(le, lc, **ELEM_TOL[torch.float32])
    torch.testing.assert_close(ge, gc, **ELEM_TOL[torch.float32])
    x3 = randn((2, 3, 4), seed=3).expand(2, 2, 3, 4)   # expanded input
    lc, le, gc, ge = run_both(fn, x3.contiguous(), randn((2, 2, 3, 4), seed=4), reduction="sum", **kwargs)
    torch.testing.assert_close(le, lc, **SUM_TOL[torch.float32])
    got = fn(emu(x3), emu(randn((2, 2, 3, 4), seed=4)), reduction="sum", **kwargs)
    torch.testing.assert_close(got.cpu(), fn(x3, randn((2, 2, 3, 4), seed=4), reduction="sum", **kwargs),
                               **SUM_TOL[torch.float32])
    stats.no_fallback()


@pytest.mark.parametrize("name", POINTWISE)
def test_regression_losses_empty_and_out(stats, name):
    fn, kwargs, fwd, bwd = POINTWISE[name]
    for reduction in REDUCTIONS:
        got = fn(torch.empty(0, 3, device="emu"), torch.empty(0, 3, device="emu"), reduction=reduction, **kwargs)
        expected = fn(torch.empty(0, 3), torch.empty(0, 3), reduction=reduction, **kwargs)
        assert got.shape == expected.shape
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
    op = getattr(torch.ops.aten, fwd.split("::")[1])
    args = [float(v) for v in kwargs.values()]
    x, y = randn((3, 4), seed=1), randn((3, 4), seed=2)
    out = torch.empty(0, device="emu")
    op.out(emu(x), emu(y), 0, *args, out=out)
    torch.testing.assert_close(out.cpu(), op(x, y, 0, *args), **ELEM_TOL[torch.float32])
    out = torch.full((4, 3), 9.0, device="emu").t()  # correctly shaped, non-contiguous: strides kept
    op.out(emu(x), emu(y), 0, *args, out=out)
    assert out.stride() == (1, 3)
    torch.testing.assert_close(out.cpu(), op(x, y, 0, *args), **ELEM_TOL[torch.float32])
    with pytest.raises(RuntimeError, match="dtype"):
        op.out(emu(x), emu(y), 1, *args, out=torch.empty((), dtype=torch.float64, device="emu"))
    bop = getattr(torch.ops.aten, bwd.split("::")[1])
    gi = torch.empty(0, device="emu")
    overload = "out" if name == "huber" else "grad_input"
    getattr(bop, overload)(emu(torch.ones(())), emu(x), emu(y), 1, *args, grad_input=gi)
    torch.testing.assert_close(gi.cpu(), bop(torch.ones(()), x, y, 1, *args), **ELEM_TOL[torch.float32])
    stats.no_fallback()


def test_regression_loss_errors_match_cpu():
    x = randn((3,))
    for fn, kwargs in [(F.smooth_l1_loss, dict(beta=-1.0)), (F.huber_loss, dict(delta=0.0))]:
        with pytest.raises(RuntimeError) as cpu_error:
            fn(x, x, **kwargs)
        with pytest.raises(RuntimeError, match=str(cpu_error.value).split("\n")[0]):
            fn(emu(x), emu(x), **kwargs)
    xi = torch.ones(3, dtype=torch.int64)
    with pytest.raises(NotImplementedError):
        F.mse_loss(xi, xi)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.mse_loss(emu(xi), emu(xi))   # no integer kernel on the device: CPU's own error, through the fallback
    with torch.emu.host_fallback("forbid"), pytest.raises(
            torch_plugin.HostFallbackError, match="aten::mse_loss: dtype torch.int64 is not supported"):
        F.mse_loss(emu(xi), emu(xi))
    # mixed dtypes promote like CPU (huber keeps the input's dtype)
    xd = randn((3,), torch.float64)
    assert F.mse_loss(emu(x), emu(xd)).dtype == F.mse_loss(x, xd).dtype == torch.float64
    assert F.huber_loss(emu(x), emu(xd)).dtype == F.huber_loss(x, xd).dtype == torch.float32


# ------------------------------------------------------------------------------ binary cross entropy
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_binary_cross_entropy(stats, dtype, reduction, weighted):
    p, t = rand((4, 6), dtype, 1).clamp(0.02, 0.98), rand((4, 6), dtype, 2)
    kwargs = dict(weight=rand((6,), dtype, 3)) if weighted else {}
    lc, le, gc, ge = run_both(F.binary_cross_entropy, p, t, reduction=reduction, **kwargs)
    torch.testing.assert_close(le, lc, **tol(dtype, reduction))
    torch.testing.assert_close(ge, gc, **ELEM_TOL[dtype])
    assert stats.native("aten::binary_cross_entropy") == 1 and stats.native("aten::binary_cross_entropy_backward") == 1
    stats.no_fallback()


def test_binary_cross_entropy_at_zero_and_one(stats):
    # CPU clamps each log at -100, and the backward's denominator at 1e-12.
    p, t = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5])
    lc, le, gc, ge = run_both(F.binary_cross_entropy, p, t, reduction="none")
    torch.testing.assert_close(le, lc, **EXACT)
    torch.testing.assert_close(ge, gc, rtol=1e-6, atol=0)
    out = torch.empty(0, device="emu")
    torch.ops.aten.binary_cross_entropy.out(emu(p), emu(t), None, 1, out=out)
    torch.testing.assert_close(out.cpu(), F.binary_cross_entropy(p, t), rtol=1e-6, atol=1e-6)
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits(stats, dtype, reduction):
    x, t = randn((4, 6), dtype, 1, scale=4.0), rand((4, 6), dtype, 2)
    for kwargs in (dict(), dict(weight=rand((6,), dtype, 3)), dict(pos_weight=rand((6,), dtype, 4) * 3),
                   dict(weight=rand((4, 1), dtype, 5), pos_weight=rand((6,), dtype, 6) * 2)):
        lc, le, gc, ge = run_both(F.binary_cross_entropy_with_logits, x, t, reduction=reduction, **kwargs)
        torch.testing.assert_close(le, lc, **tol(dtype, reduction))
        torch.testing.assert_close(ge, gc, **ELEM_TOL[dtype])
    big = torch.tensor([-200.0, -30.0, 0.0, 30.0, 200.0], dtype=dtype)  # stable log-sigmoid
    got = F.binary_cross_entropy_with_logits(emu(big), emu(torch.ones(5, dtype=dtype)), reduction="none")
    torch.testing.assert_close(got.cpu(), F.binary_cross_entropy_with_logits(big, torch.ones(5, dtype=dtype),
                                                                             reduction="none"), **ELEM_TOL[dtype])
    assert stats.native("aten::binary_cross_entropy_with_logits") == 5
    stats.no_fallback()


def test_binary_cross_entropy_errors_match_cpu():
    p = rand((3, 4))
    for args in [(p, p.double()), (p, p, rand((5,)))]:
        with pytest.raises(RuntimeError) as cpu_error:
            torch.ops.aten.binary_cross_entropy(*args)
        with pytest.raises(RuntimeError, match=str(cpu_error.value).split("\n")[0].replace("(", r"\(")
                           .replace(")", r"\)")):
            torch.ops.aten.binary_cross_entropy(*map(emu, args))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ops.aten.binary_cross_entropy_with_logits(emu(p), emu(rand((4,))), None, None, 0)


def test_input_out_of_range_is_an_operation_scope_error():
    code = textwrap.dedent("""
        import torch, torch.nn.functional as F
        import torch_plugin
        p = torch.tensor([0.5, 1.5], device="emu")
        loss = F.binary_cross_entropy(p, torch.tensor([1.0, 0.0], device="emu"))  # faults on the device
        try:
            torch.emu.synchronize()
        except torch.AcceleratorError as err:
            print("FAULT", err)
        else:
            raise SystemExit("no fault reported")
    """)
    env = dict(os.environ, EMU_PRESET="tiny")
    env.pop("EMU_LAUNCH_BLOCKING", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "INVALID_ARGUMENT" in r.stdout and "all elements of input should be between 0 and 1" in r.stdout, \
        r.stdout + r.stderr


# ------------------------------------------------------------------------------ composites
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_l1_loss_composite(stats, reduction):
    x, y = randn((4, 5), seed=1), randn((4, 5), seed=2)
    lc, le, gc, ge = run_both(F.l1_loss, x, y, reduction=reduction)
    torch.testing.assert_close(le, lc, **tol(torch.float32, reduction))
    torch.testing.assert_close(ge, gc, **ELEM_TOL[torch.float32])
    stats.no_fallback()


@pytest.mark.parametrize("reduction", ["none", "batchmean", "sum", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_composite(stats, reduction, log_target):
    x = F.log_softmax(randn((4, 6), seed=1), 1)
    target = F.log_softmax(randn((4, 6), seed=2), 1) if log_target else F.softmax(randn((4, 6), seed=2), 1)
    target[0, 0] = 0.0 if not log_target else target[0, 0]  # xlogy(0, 0) = 0
    lc, le, gc, ge = run_both(F.kl_div, x, target, reduction=reduction, log_target=log_target)
    torch.testing.assert_close(le, lc, **tol(torch.float32, "none" if reduction == "none" else "sum"))
    torch.testing.assert_close(ge, gc, **ELEM_TOL[torch.float32])
    stats.no_fallback()
