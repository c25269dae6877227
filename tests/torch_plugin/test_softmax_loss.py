"""Native log_softmax / nll_loss (forward and backward, the pieces of F.cross_entropy) against CPU.

Stated tolerances (torch.testing.assert_close), per dtype of the input:
- log_softmax and its backward compute in float32 (float64 for float64) with the max subtracted,
  summing in another order than CPU's vectorised kernels:
  float32 rtol=1e-5, atol=1e-5; float64 rtol=1e-12, atol=1e-12;
  float16 rtol=atol=2e-3 (about 2 ulps); bfloat16 rtol=atol=1.6e-2 (about 2 ulps). The backward
  ``g - exp(y) * sum(g)`` cancels terms of size max|g|, so its atol is multiplied by max(1, max|g|).
- nll_loss per-sample (reduction none) and nll_loss backward: exact (rtol=atol=0) for every dtype:
  one product and (mean) one division, rounded as on CPU.
- nll_loss mean/sum and total_weight: float32 rtol=1e-6, atol=1e-6; float64 rtol=atol=1e-12;
  float16 rtol=atol=1e-2 and bfloat16 rtol=atol=4e-2 (the device accumulates in float64 and
  rounds once; CPU keeps its partial sums in float16/bfloat16).
- F.cross_entropy forward + autograd backward, float32: rtol=1e-5, atol=1e-6.
Every op checked here must be counted native by torch.emu.op_stats(), with no host fallback.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from plugin_testing import EXACT

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SOFTMAX_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
               torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}
REDUCED_TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12),
               torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}
REDUCTIONS = ["none", "mean", "sum"]


def randn(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((4, 10), 1), ((4, 10), 0), ((3, 4, 5), 1), ((3, 4, 5), -1),
                                       ((2, 3, 4, 300), 3), ((), 0), ((0, 5), 1), ((5, 1), 1)])
def test_log_softmax_matches_cpu(stats, dtype, shape, dim):
    x = randn(shape, dtype)
    got = F.log_softmax(x.to("emu"), dim)
    expected = F.log_softmax(x, dim)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, **SOFTMAX_TOL[dtype])
    assert stats.native("aten::_log_softmax") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_log_softmax_non_contiguous_and_backward(stats, dtype):
    base = randn((6, 5, 8), dtype)
    for view, dim in [(base.transpose(0, 2), 1), (base[:, ::2, 1::3], 0), (base.permute(2, 0, 1), 2)]:
        xc = view.clone().requires_grad_(True)
        xe = view.to("emu").requires_grad_(True)
        g = randn(view.shape, dtype, seed=1)
        yc, ye = F.log_softmax(xc, dim), F.log_softmax(xe, dim)
        torch.testing.assert_close(ye.detach().cpu(), yc.detach(), **SOFTMAX_TOL[dtype])
        yc.backward(g)
        ye.backward(g.to("emu"))
        tol = dict(SOFTMAX_TOL[dtype])
        tol["atol"] *= max(1.0, float(g.double().abs().max()))  # the result cancels terms of size |g|
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, **tol)
    assert stats.native("aten::_log_softmax_backward_data") == 3
    stats.no_fallback()


def test_log_softmax_stable_and_special_values(stats):
    x = torch.tensor([[1000.0, 0.0, -1000.0], [float("nan"), 1.0, 2.0], [float("inf"), 1.0, 2.0],
                      [-float("inf"), 1.0, 2.0]])
    torch.testing.assert_close(F.log_softmax(x.to("emu"), 1).cpu(), F.log_softmax(x, 1), equal_nan=True)
    stats.no_fallback()


def test_log_softmax_out_and_errors(stats):
    x = randn((3, 4), torch.float32)
    out = torch.empty(0, device="emu")
    r = torch._log_softmax(x.to("emu"), 1, False, out=out)
    assert r is out
    torch.testing.assert_close(out.cpu(), F.log_softmax(x, 1), **SOFTMAX_TOL[torch.float32])
    assert stats.native("aten::_log_softmax.out") == 1
    gout = torch.empty(0, device="emu")
    torch._log_softmax_backward_data(torch.ones(3, 4, device="emu"), out, 1, torch.float32, out=gout)
    torch.testing.assert_close(gout.cpu(), torch._log_softmax_backward_data(torch.ones(3, 4), out.cpu(), 1,
                                                                           torch.float32), rtol=1e-5, atol=1e-5)
    assert stats.native("aten::_log_softmax_backward_data.out") == 1
    with pytest.raises(RuntimeError, match="half to float"):  # as on CPU
        torch._log_softmax(x.half().to("emu"), 1, True)
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.log_softmax(x.to("emu"), 2)
    with pytest.raises(RuntimeError):
        F.log_softmax(torch.ones(3, dtype=torch.int64, device="emu"), 0)
    stats.no_fallback()


def nll_case(dtype, n, c, seed=0, ignore=None):
    x = F.log_softmax(randn((n, c), torch.float32, seed), 1).to(dtype)
    g = torch.Generator().manual_seed(seed + 7)
    t = torch.randint(0, c, (n,), generator=g)
    if ignore is not None:
        t[::3] = ignore
    return x, t


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_backward(stats, dtype, reduction, weighted):
    x, t = nll_case(dtype, 37, 11, ignore=4)
    w = (torch.rand(11, generator=torch.Generator().manual_seed(3)) + 0.5).to(dtype) if weighted else None
    rcode = REDUCTIONS.index(reduction)  # aten's codes: none 0, mean 1, sum 2
    args_e = (x.to("emu"), t.to("emu"), None if w is None else w.to("emu"), rcode, 4)
    out_e, tw_e = torch.ops.aten.nll_loss_forward(*args_e)
    out_c, tw_c = torch.ops.aten.nll_loss_forward(x, t, w, rcode, 4)
    tol = EXACT if reduction == "none" else REDUCED_TOL[dtype]
    torch.testing.assert_close(out_e.cpu(), out_c, **tol)
    torch.testing.assert_close(tw_e.cpu(), tw_c, **REDUCED_TOL[dtype])
    go = randn(out_c.shape, dtype, seed=5)
    gi_e = torch.ops.aten.nll_loss_backward(go.to("emu"), *args_e[:2], args_e[2], rcode, 4, tw_c.to("emu"))
    gi_c = torch.ops.aten.nll_loss_backward(go, x, t, w, rcode, 4, tw_c)
    torch.testing.assert_close(gi_e.cpu(), gi_c, **EXACT)
    assert stats.native("aten::nll_loss_forward") == 1 and stats.native("aten::nll_loss_backward") == 1
    stats.no_fallback()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_unbatched_and_non_contiguous(stats, reduction):
    x = randn((11, 6), torch.float32).t()  # (6, 11), non-contiguous
    t = torch.tensor([0, 10, 3, 3, 7, 1])
    w = randn((22,), torch.float32).abs()[::2]
    for xi, ti in [(x, t), (x[2], t[2])]:
        xe = xi.to("emu").requires_grad_(True)
        xc = xi.clone().requires_grad_(True)
        le = F.nll_loss(xe, ti.to("emu"), weight=w.to("emu"), reduction=reduction)
        lc = F.nll_loss(xc, ti, weight=w, reduction=reduction)
        torch.testing.assert_close(le.detach().cpu(), lc.detach(), **REDUCED_TOL[torch.float32])
        le.sum().backward()
        lc.sum().backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, **EXACT)
    stats.no_fallback()


def test_nll_loss_all_ignored_and_empty(stats):
    x = randn((4, 5), torch.float32)
    t = torch.full((4,), -100)
    for reduction in (0, 1, 2):
        for w in (None, torch.rand(5)):
            got = torch.ops.aten.nll_loss_forward(x.to("emu"), t.to("emu"), None if w is None else w.to("emu"),
                                                 reduction, -100)
            exp = torch.ops.aten.nll_loss_forward(x, t, w, reduction, -100)
            for a, b in zip(got, exp):
                torch.testing.assert_close(a.cpu(), b, equal_nan=True, **EXACT)
    for reduction in (0, 1, 2):
        got = torch.ops.aten.nll_loss_forward(x[:0].to("emu"), t[:0].to("emu"), None, reduction, -100)
        exp = torch.ops.aten.nll_loss_forward(x[:0], t[:0], None, reduction, -100)
        for a, b in zip(got, exp):
            torch.testing.assert_close(a.cpu(), b, equal_nan=True, **EXACT)
    stats.no_fallback()


def test_nll_loss_out_overloads(stats):
    x, t = nll_case(torch.float32, 9, 4)
    out, tw = torch.empty(0, device="emu"), torch.empty(0, device="emu")
    r = torch.ops.aten.nll_loss_forward.output(x.to("emu"), t.to("emu"), None, 1, -100, output=out,
                                               total_weight=tw)
    assert r[0] is out and r[1] is tw
    exp = torch.ops.aten.nll_loss_forward(x, t, None, 1, -100)
    torch.testing.assert_close(out.cpu(), exp[0], **REDUCED_TOL[torch.float32])
    torch.testing.assert_close(tw.cpu(), exp[1], **EXACT)
    gi = torch.empty(0, device="emu")
    torch.ops.aten.nll_loss_backward.grad_input(torch.tensor(1.5, device="emu"), x.to("emu"), t.to("emu"), None, 1,
                                                -100, tw, grad_input=gi)
    torch.testing.assert_close(gi.cpu(), torch.ops.aten.nll_loss_backward(torch.tensor(1.5), x, t, None, 1, -100,
                                                                         exp[1]), **EXACT)
    assert stats.native("aten::nll_loss_forward.output") == 1
    assert stats.native("aten::nll_loss_backward.grad_input") == 1
    stats.no_fallback()


def test_nll_loss_host_validation_errors():
    x = torch.randn(4, 5, device="emu")
    with pytest.raises(RuntimeError, match="size mismatch"):
        torch.ops.aten.nll_loss_forward(x, torch.zeros(3, dtype=torch.int64, device="emu"), None, 1, -100)
    with pytest.raises(RuntimeError, match="weight tensor should be defined"):
        F.nll_loss(x, torch.zeros(4, dtype=torch.int64, device="emu"), weight=torch.ones(3, device="emu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cross_entropy_autograd(stats, dtype):
    x = randn((64, 10), dtype)
    t = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(1))
    w = torch.rand(10, generator=torch.Generator().manual_seed(2)).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype != torch.bfloat16 else dict(rtol=4e-2, atol=4e-2)
    for kwargs in (dict(), dict(weight=w), dict(ignore_index=3, reduction="sum")):
        xc = x.clone().requires_grad_(True)
        xe = x.to("emu").requires_grad_(True)
        ekw = {k: (v.to("emu") if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        lc = F.cross_entropy(xc, t, **kwargs)
        le = F.cross_entropy(xe, t.to("emu"), **ekw)
        torch.testing.assert_close(le.detach().cpu(), lc.detach(), **tol)
        lc.backward()
        le.backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, **tol)
    assert stats.native("aten::_log_softmax") == 3 and stats.native("aten::_log_softmax_backward_data") == 3
    assert stats.native("aten::nll_loss_forward") == 3 and stats.native("aten::nll_loss_backward") == 3
    stats.no_fallback()


def test_higher_dim_nll_loss_is_native(stats):
    # (N, C, d1) reaches nll_loss2d, which has a device kernel (more cases in test_losses.py).
    x = randn((2, 3, 4), torch.float32)
    t = torch.randint(0, 3, (2, 4), generator=torch.Generator().manual_seed(0))
    got = F.nll_loss(x.to("emu"), t.to("emu"))
    torch.testing.assert_close(got.cpu(), F.nll_loss(x, t), **REDUCED_TOL[torch.float32])
    assert stats.native("aten::nll_loss2d_forward") == 1
    stats.no_fallback()


def test_out_of_range_target_is_an_operation_scope_error():
    code = textwrap.dedent("""
        import torch, torch.nn.functional as F
        import torch_plugin
        x = torch.randn(4, 5, device="emu")
        loss = F.nll_loss(x, torch.tensor([0, 1, 7, 2], device="emu"))  # launches; faults on the device
        try:
            torch.emu.synchronize()
        except torch.AcceleratorError as err:
            print("FAULT", err)
            scope = err.scope
        else:
            raise SystemExit("no fault reported")
        # operation scope (no longer a sticky context fault, issue 18): later calls just work
        print("SCOPE", scope, torch.ones(2, device="emu").sum().item())
    """)
    env = dict(os.environ, EMU_PRESET="tiny")
    env.pop("EMU_LAUNCH_BLOCKING", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAULT" in r.stdout and "INVALID_ARGUMENT" in r.stdout and "Target 7 is out of bounds" in r.stdout, r.stdout + r.stderr
    assert "SCOPE operation 2.0" in r.stdout, r.stdout + r.stderr
