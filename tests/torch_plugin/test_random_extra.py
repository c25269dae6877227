"""Random sampling extras and dropout on emu (torch_plugin/ops/random.py, emulator/kernels/random.pyx).

The device draws from its own Philox stream, so values are not CPU's: each distribution is
checked by its support and by the sample mean / variance (or median, for Cauchy) of a large
sample, within bounds of about 6 standard errors (a false failure is then ~1e-9 likely), and by
reproducibility under the same seed. logspace is deterministic: compared with CPU exactly for
integer dtypes, float64 rtol=1e-12, float32 rtol=1e-6, float16/bfloat16 within one ulp
(rtol = eps of the dtype). Every test checks that the op ran natively (no host fallback).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
N = 200_000


def draw(fn, dtype, n=N, seed=1234):
    torch.manual_seed(seed)
    t = torch.empty(n, dtype=dtype, device="emu")
    fn(t)
    return t.cpu().double()


def check_moments(x, mean, var, rel=None):
    n = x.numel()
    se_mean = math.sqrt(var / n)
    assert abs(x.mean().item() - mean) < 6 * se_mean + 1e-2 * abs(mean) * (rel or 0), (x.mean().item(), mean)
    # variance: loose bound (the fourth moment of these distributions is moderate)
    assert abs(x.var().item() - var) < (rel or 0.05) * var, (x.var().item(), var)


@pytest.mark.parametrize("dtype", FLOATS)
def test_exponential(dtype, stats):
    lambd = 2.0
    x = draw(lambda t: t.exponential_(lambd), dtype)
    assert (x >= 0).all() and torch.isfinite(x).all()
    check_moments(x, 1 / lambd, 1 / lambd ** 2, rel=0.05)
    assert stats.native("aten::exponential_") > 0
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_log_normal(dtype, stats):
    mean, std = 0.5, 0.4
    x = draw(lambda t: t.log_normal_(mean, std), dtype)
    assert (x > 0).all()
    m = math.exp(mean + std ** 2 / 2)
    v = (math.exp(std ** 2) - 1) * math.exp(2 * mean + std ** 2)
    check_moments(x, m, v, rel=0.05)
    assert abs(x.log().mean().item() - mean) < 0.01
    assert stats.native("aten::log_normal_") > 0
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8])
def test_geometric(dtype, stats):
    p = 0.3
    x = draw(lambda t: t.geometric_(p), dtype)
    assert (x >= 1).all() and (x == x.round()).all()
    check_moments(x, 1 / p, (1 - p) / p ** 2, rel=0.08)
    # P(X = 1) = p
    assert abs((x == 1).double().mean().item() - p) < 0.01
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_cauchy(dtype, stats):
    median, sigma = 1.0, 2.0
    x = draw(lambda t: t.cauchy_(median, sigma), dtype)
    assert abs(x.median().item() - median) < 0.05
    q1, q3 = x.quantile(torch.tensor([0.25, 0.75], dtype=torch.float64)).tolist()
    assert abs(q1 - (median - sigma)) < 0.1 and abs(q3 - (median + sigma)) < 0.1
    stats.no_fallback()


def test_same_seed_same_values_and_offsets_advance(stats):
    for fn in (lambda t: t.exponential_(), lambda t: t.cauchy_(), lambda t: t.log_normal_(),
               lambda t: t.geometric_(0.5)):
        a, b = draw(fn, torch.float32, 1000, seed=7), draw(fn, torch.float32, 1000, seed=7)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.manual_seed(7)
        t = torch.empty(1000, device="emu")
        fn(t)
        first = t.cpu()
        fn(t)
        assert not torch.equal(first, t.cpu())
    g = torch.Generator(device="emu").manual_seed(3)
    x = torch.empty(100, device="emu").exponential_(generator=g).cpu()
    g.manual_seed(3)
    torch.testing.assert_close(torch.empty(100, device="emu").exponential_(generator=g).cpu(), x, rtol=0, atol=0)
    stats.no_fallback()


def test_distribution_errors_like_cpu():
    for call in (lambda t: t.exponential_(0), lambda t: t.exponential_(-1), lambda t: t.cauchy_(0, 0),
                 lambda t: t.log_normal_(0, 0), lambda t: t.geometric_(1.0), lambda t: t.geometric_(0)):
        with pytest.raises(RuntimeError) as cpu_err:
            call(torch.empty(3))
        t = torch.ones(3, device="emu")
        with pytest.raises(RuntimeError) as emu_err:
            call(t)
        assert str(emu_err.value) == str(cpu_err.value)
        assert t.cpu().eq(1).all()  # nothing written
    with pytest.raises(RuntimeError, match="dtype must be a floating point"):
        torch.empty(3, dtype=torch.int64, device="emu").exponential_()
    with pytest.raises(NotImplementedError, match="\"geometric_cpu\" not implemented for 'Bool'"):
        torch.empty(3, dtype=torch.bool, device="emu").geometric_(0.5)


def test_empty_tensors(stats):
    for fn in (lambda t: t.exponential_(), lambda t: t.cauchy_(), lambda t: t.log_normal_(),
               lambda t: t.geometric_(0.5)):
        assert fn(torch.empty(0, 3, device="emu")).shape == (0, 3)
    stats.no_fallback()


def test_non_contiguous_fill_only_the_view(stats):
    base = torch.full((6, 8), -5.0, device="emu")
    base.t()[::2].exponential_()
    c = base.cpu()
    assert (c[:, ::2] >= 0).all() and (c[:, 1::2] == -5).all()
    stats.no_fallback()


# -- normal with tensor parameters ---------------------------------------------------------

def test_normal_tensor_tensor_moments_and_broadcast(stats):
    torch.manual_seed(0)
    mean = torch.tensor([[-3.0], [5.0]], device="emu")
    std = torch.tensor([0.5, 2.0, 0.0], device="emu")
    samples = torch.stack([torch.normal(mean, std) for _ in range(2000)]).cpu()
    assert samples.shape == (2000, 2, 3)
    m, s = samples.mean(0), samples.std(0)
    torch.testing.assert_close(m, torch.tensor([[-3.0] * 3, [5.0] * 3]), atol=0.15, rtol=0)
    torch.testing.assert_close(s, torch.tensor([[0.5, 2.0, 0.0]] * 2), atol=0.1, rtol=0)
    assert stats.native("aten::normal.Tensor_Tensor") > 0
    stats.no_fallback()


def test_normal_number_variants_and_out(stats):
    torch.manual_seed(1)
    x = torch.normal(torch.full((50_000,), 2.0, device="emu"), 3.0).cpu()
    assert abs(x.mean().item() - 2.0) < 0.1 and abs(x.std().item() - 3.0) < 0.1
    y = torch.normal(-1.0, torch.full((50_000,), 0.5, device="emu", dtype=torch.float64)).cpu()
    assert y.dtype == torch.float64 and abs(y.mean().item() + 1.0) < 0.02 and abs(y.std().item() - 0.5) < 0.02
    out = torch.empty(0, device="emu")
    torch.normal(torch.zeros(4, device="emu"), torch.ones(4, device="emu"), out=out)
    assert out.shape == (4,)
    strided = torch.zeros(4, 6, device="emu").t()
    torch.normal(torch.zeros(6, 4, device="emu"), 1.0, out=strided)
    assert strided.stride() == (1, 6)
    torch.manual_seed(5)
    a = torch.normal(torch.zeros(10, device="emu"), torch.ones(10, device="emu")).cpu()
    torch.manual_seed(5)
    b = torch.normal(torch.zeros(10, device="emu"), torch.ones(10, device="emu")).cpu()
    assert torch.equal(a, b)
    stats.no_fallback()


def test_normal_negative_std_rejected_like_cpu():
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        torch.normal(torch.zeros(3, device="emu"), torch.tensor([1.0, -1.0, 1.0], device="emu"))
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        torch.normal(torch.zeros(3, device="emu"), -1.0)


# -- multinomial ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_multinomial_with_replacement_frequencies(dtype, stats):
    torch.manual_seed(0)
    p = torch.tensor([[0.1, 0.0, 0.5, 0.4], [1.0, 1.0, 2.0, 0.0]], dtype=dtype, device="emu")
    n = 40_000
    s = torch.multinomial(p, n, replacement=True).cpu()
    assert s.shape == (2, n) and s.dtype == torch.int64
    for row, probs in zip(s, ([0.1, 0.0, 0.5, 0.4], [0.25, 0.25, 0.5, 0.0])):
        freq = torch.bincount(row, minlength=4).double() / n
        torch.testing.assert_close(freq, torch.tensor(probs, dtype=torch.float64), atol=0.015, rtol=0)
    assert stats.native("aten::multinomial") > 0
    stats.no_fallback()


def test_multinomial_without_replacement(stats):
    torch.manual_seed(0)
    p = torch.tensor([0.05, 0.0, 0.6, 0.35], device="emu")
    draws = torch.stack([torch.multinomial(p, 3) for _ in range(3000)]).cpu()
    assert all(len(set(r.tolist())) == 3 for r in draws[:200])
    assert not (draws == 1).any()  # a zero-probability category is never drawn
    first = torch.bincount(draws[:, 0], minlength=4).double() / len(draws)
    torch.testing.assert_close(first, torch.tensor([0.05, 0.0, 0.6, 0.35], dtype=torch.float64), atol=0.03, rtol=0)
    one = torch.multinomial(p, 1)
    assert one.shape == (1,)
    out = torch.empty(0, dtype=torch.int64, device="emu")
    torch.multinomial(p.expand(2, 4), 2, out=out)
    assert out.shape == (2, 2)
    stats.no_fallback()


def test_multinomial_errors_like_cpu():
    cases = [(torch.tensor([1.0, -1.0]), 1, False), (torch.tensor([0.0, 0.0]), 1, False),
             (torch.tensor([1.0, 1.0]), 3, False), (torch.tensor([1.0, float("nan")]), 3, True),
             (torch.tensor([1.0, float("inf")]), 3, True), (torch.tensor([0.0, 0.0]), 3, True),
             (torch.tensor([1.0, 1.0]), 0, False), (torch.ones(2, 2, 2), 1, False)]
    for probs, n, replacement in cases:
        with pytest.raises(RuntimeError) as cpu_err:
            torch.multinomial(probs, n, replacement)
        with pytest.raises(RuntimeError) as emu_err:
            torch.multinomial(probs.to("emu"), n, replacement)
        assert str(emu_err.value) == str(cpu_err.value)
    with pytest.raises(RuntimeError, match="floating-point"):
        torch.multinomial(torch.ones(2, dtype=torch.int64, device="emu"), 1)


# -- dropout --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_native_dropout_mask_scale_and_rate(dtype, stats):
    torch.manual_seed(0)
    x = torch.randn(400, 500, dtype=dtype).to("emu")
    p = 0.3
    out, mask = torch.native_dropout(x, p, True)
    assert mask.dtype == torch.bool and out.dtype == dtype and out.shape == x.shape
    out, mask, xc = out.cpu(), mask.cpu(), x.cpu()
    assert abs(mask.double().mean().item() - (1 - p)) < 0.005
    expected = xc * mask * (1 / (1 - p))
    tol = dict(rtol=0, atol=0) if dtype in (torch.float32, torch.float64) else dict(rtol=2 ** -7, atol=0)
    torch.testing.assert_close(out, expected, **tol)
    assert stats.native("aten::native_dropout") > 0
    stats.no_fallback()


def test_native_dropout_edge_cases_like_cpu(stats):
    x = torch.randn(5, 6)
    for p, train in ((0.5, False), (0.0, True), (1.0, True)):
        out_c, mask_c = torch.native_dropout(x, p, train)
        out_e, mask_e = torch.native_dropout(x.to("emu"), p, train)
        torch.testing.assert_close(out_e.cpu(), out_c, rtol=0, atol=0)
        assert torch.equal(mask_e.cpu(), mask_c) and mask_e.dtype == mask_c.dtype
    empty = torch.empty(0, 3, device="emu")
    out, mask = torch.native_dropout(empty, 0.5, True)
    assert out.shape == (0, 3) and mask.shape == (0, 3) and mask.dtype == torch.float32
    stats.no_fallback()


def test_dropout_backward_matches_the_mask(stats):
    torch.manual_seed(0)
    x = torch.randn(64, 32, device="emu", requires_grad=True)
    y = F.dropout(x, 0.25, training=True)
    y.backward(torch.ones_like(y))
    kept = (y.detach().cpu() != 0) | (x.detach().cpu() == 0)
    expected = kept.float() / 0.75
    torch.testing.assert_close(x.grad.cpu(), expected, rtol=1e-6, atol=0)
    grad = torch.randn(4, 4)
    mask = torch.rand(4, 4) > 0.5
    torch.testing.assert_close(torch.ops.aten.native_dropout_backward(grad.to("emu"), mask.to("emu"), 2.0).cpu(),
                               torch.ops.aten.native_dropout_backward(grad, mask, 2.0), rtol=0, atol=0)
    assert stats.native("aten::native_dropout_backward") > 0
    stats.no_fallback()


# -- logspace -------------------------------------------------------------------------------

LOGSPACE_CASES = [(0, 3, 4, 10.0), (-2.0, 2.0, 9, 2.0), (1.5, -1.25, 7, 10.0), (0, 1, 1, 3.0), (2, 2, 0, 10.0),
                  (0.3, 4.7, 6, 2.5), (-1, 5, 11, 2.0)]


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_logspace_matches_cpu(dtype, stats):
    tol = {torch.float64: dict(rtol=1e-12, atol=0), torch.float32: dict(rtol=1e-6, atol=0),
           torch.float16: dict(rtol=2 ** -10, atol=0), torch.bfloat16: dict(rtol=2 ** -7, atol=0)}.get(
        dtype, dict(rtol=0, atol=0))
    for start, end, steps, base in LOGSPACE_CASES:
        if not dtype.is_floating_point and (start < 0 or end < 0) and dtype == torch.uint8:
            continue
        expected = torch.logspace(start, end, steps, base, dtype=dtype)
        got = torch.logspace(start, end, steps, base, dtype=dtype, device="emu")
        torch.testing.assert_close(got.cpu(), expected, **tol)
    assert stats.native("aten::logspace.out") > 0
    stats.no_fallback()


def test_logspace_out_and_tensor_overloads(stats):
    out = torch.zeros(10, device="emu")[::2]
    torch.logspace(0, 2, 5, out=out)
    assert out.stride() == (2,)
    torch.testing.assert_close(out.cpu(), torch.logspace(0, 2, 5))
    got = torch.logspace(torch.tensor(0.0), torch.tensor(2.0), 5, device="emu")
    torch.testing.assert_close(got.cpu(), torch.logspace(0, 2, 5))
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        torch.logspace(0, 1, -1, device="emu")
    stats.no_fallback()


def test_multinomial_reproducible_with_a_generator(stats):
    p = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.0, 0.4]], device="emu").t().contiguous().t()  # non-contiguous
    g = torch.Generator(device="emu")
    runs = []
    for _ in range(2):
        g.manual_seed(11)
        runs.append((torch.multinomial(p, 50, True, generator=g).cpu(), torch.multinomial(p, 2, generator=g).cpu()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not (runs[0][0][1] == 1).any()
    stats.no_fallback()


def test_normal_shape_errors_like_cpu():
    cases = [lambda dev: torch.normal(torch.zeros(3, device=dev), 1.0, out=torch.empty(0, device=dev)),
             lambda dev: torch.normal(torch.zeros(3, device=dev), torch.ones(2, device=dev))]
    for call in cases:
        with pytest.raises(RuntimeError) as cpu_err:
            call("cpu")
        with pytest.raises(RuntimeError) as emu_err:
            call("emu")
        assert str(emu_err.value) == str(cpu_err.value)
