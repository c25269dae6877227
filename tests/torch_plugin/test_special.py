"""Special functions and the remaining activations of the pointwise table, against CPU.

Tolerances: float64 1e-7 relative/absolute (CPU's own Cephes algorithms, evaluated in double),
float32 assert_close's defaults (1.3e-6, 1e-5; several CPU kernels evaluate in float where the
device evaluates in double), float16/bfloat16 assert_close's defaults for their dtypes.
NaN positions must match (equal_nan)."""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_plugin.device_module as emu
from plugin_testing import make

TOL = {torch.float64: dict(rtol=1e-7, atol=1e-7), torch.float32: {}, torch.float16: {}, torch.bfloat16: {}}
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, -3.0, 5.0, -5.5, 8.0, 8.5, 26.5, 30.0, 60.0, -30.0,
         1e-6, -1e-6, 0.999, -0.999, math.inf, -math.inf, math.nan]


def _close(actual, expected, dtype=None):
    dtype = dtype or expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **TOL.get(dtype, {}))


def _inputs(dtype, shape=(6, 7), scale=1.0, seed=0):
    x = make(torch.float64, shape, seed) * scale
    edges = torch.tensor(EDGES, dtype=torch.float64)
    return torch.cat([x.flatten(), edges]).to(dtype)


UNARY = [torch.digamma, torch.erfinv, torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e,
         torch.special.entr, torch.angle]
UNARY_32_64 = [torch.special.ndtri, torch.special.log_ndtr, torch.special.erfcx, torch.special.airy_ai,
               torch.special.bessel_j0, torch.special.bessel_j1, torch.special.bessel_y0, torch.special.bessel_y1,
               torch.special.modified_bessel_i0, torch.special.modified_bessel_i1,
               torch.special.modified_bessel_k0, torch.special.modified_bessel_k1,
               torch.special.scaled_modified_bessel_k0, torch.special.scaled_modified_bessel_k1,
               torch.special.spherical_bessel_j0]


@pytest.mark.parametrize("fn", UNARY + UNARY_32_64, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_special_matches_cpu(fn, dtype, stats):
    x = _inputs(dtype)
    if fn in (torch.erfinv, torch.special.ndtri):
        x = torch.cat([torch.tanh(x), x[-len(EDGES):]])   # mostly inside the domain
    with emu.host_fallback("forbid"):
        out = fn(x.to("emu"))
    _close(out, fn(x))
    stats.no_fallback()


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unary_special_reduced_precision(fn, dtype):
    x = _inputs(torch.float32, scale=0.5).to(dtype)
    if fn is torch.erfinv:
        x = torch.tanh(x.float()).to(dtype)
    with emu.host_fallback("forbid"):
        out = fn(x.to("emu"))
    assert out.dtype == dtype
    _close(out, fn(x))


@pytest.mark.parametrize("fn", UNARY_32_64[:4], ids=lambda f: f.__name__)
def test_float32_64_only_ops_reject_half(fn):
    x = torch.ones(3, dtype=torch.float16, device="emu")
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):
        fn(x)


@pytest.mark.parametrize("fn", [torch.digamma, torch.special.i1, torch.special.bessel_j0, torch.angle],
                         ids=lambda f: f.__name__)
def test_integer_inputs_promote_to_float(fn):
    x = torch.arange(-4, 5, dtype=torch.int64)
    with emu.host_fallback("forbid"):
        out = fn(x.to("emu"))
    assert out.dtype == torch.float32
    _close(out, fn(x))


def test_layouts_out_and_inplace(stats):
    base = _inputs(torch.float32, shape=(8, 9))[:72].reshape(8, 9)
    x = base.to("emu")
    with emu.host_fallback("forbid"):
        _close(torch.special.i1e(x.t()), torch.special.i1e(base.t()))
        _close(torch.digamma(x[:, ::2]), torch.digamma(base[:, ::2]))
        _close(torch.special.bessel_y1(x[:1].expand(5, 9)), torch.special.bessel_y1(base[:1].expand(5, 9)))
        out = torch.empty(0, device="emu")
        torch.special.erfcx(x, out=out)                       # an empty out is resized
        _close(out, torch.special.erfcx(base))
        strided = torch.empty(9, 8, device="emu").t()         # a correctly shaped out keeps its strides
        torch.i0(x, out=strided)
        assert strided.stride() == (1, 8)
        _close(strided, torch.i0(base))
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.digamma(x, out=torch.empty(8, 9, dtype=torch.int64, device="emu"))
        y = x.clone()
        y.digamma_()
        _close(y, torch.digamma(base))
        empty = torch.special.zeta(torch.empty(0, 3, device="emu"), 2.0)
        assert empty.shape == (0, 3)
    assert stats.native("aten::special_erfcx.out") == 1 and stats.native("aten::digamma_") == 1
    stats.no_fallback()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polygamma(n, dtype, stats):
    # poles at the non-positive integers, points close to them, large arguments
    x = torch.cat([_inputs(dtype), torch.tensor([-3.973, -0.001, 1e-3, 100.0, 1e5], dtype=dtype)])
    with emu.host_fallback("forbid"):
        _close(torch.polygamma(n, x.to("emu")), torch.polygamma(n, x))
        _close(torch.special.polygamma(n, x.to("emu")), torch.special.polygamma(n, x))
        y = x.to("emu")
        y.polygamma_(n)
        _close(y, torch.polygamma(n, x))
    assert stats.native("aten::polygamma") == 2
    stats.no_fallback()


def test_polygamma_negative_order_is_rejected():
    x = torch.ones(3, device="emu")
    with pytest.raises(RuntimeError, match="does not support negative n"):
        torch.polygamma(-1, x)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_incomplete_gamma(fn, dtype, stats):
    values = [0.0, 0.3, 0.5, 0.7, 1.0, 1.5, 3.0, 10.0, 25.0, 40.0, 150.0, 250.0, 1000.0, math.inf, math.nan, -1.0]
    a, x = torch.meshgrid(torch.tensor(values, dtype=torch.float64), torch.tensor(values, dtype=torch.float64),
                          indexing="ij")
    a, x = a.to(dtype), x.to(dtype)
    with emu.host_fallback("forbid"):
        out = fn(a.to("emu"), x.to("emu"))
    _close(out, fn(a, x))
    stats.no_fallback()


def test_incomplete_gamma_rejects_integers_and_keeps_out():
    out = torch.full((3,), 7.0, device="emu")
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        torch.igamma(torch.ones(3, dtype=torch.int64, device="emu"), torch.ones(3, dtype=torch.int64, device="emu"),
                     out=out)
    assert out.cpu().tolist() == [7.0, 7.0, 7.0]


def test_zeta(stats):
    x = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.5, 10.0, 2.0, 3.0, 2.5, 2.0], dtype=torch.float64)
    q = torch.tensor([1.0, 1.0, 2.0, 0.5, -2.0, -1.5, 0.1, 0.0, -1.5, -1.5, 1e3], dtype=torch.float64)
    with emu.host_fallback("forbid"):
        _close(torch.special.zeta(x.to("emu"), q.to("emu")), torch.special.zeta(x, q))
        _close(torch.special.zeta(x.float().to("emu"), 2.0), torch.special.zeta(x.float(), 2.0))
        _close(torch.special.zeta(3.0, q.to("emu")), torch.special.zeta(3.0, q))
    stats.no_fallback()


POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("name", POLYNOMIALS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polynomials(name, dtype, stats):
    fn = getattr(torch.special, name)
    # No NaN x: CPU's recurrences stop at a NaN and return an uninitialized value for some
    # families (a neighbouring element's result); the device returns NaN (checked below).
    x = torch.tensor([-1.0, -0.7, -0.2, 0.0, 0.3, 0.5, 0.9, 1.0, 1.7, -2.5, 8.4, 0.05], dtype=dtype)
    n = torch.tensor([-3.0, 0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0, 12.0, 40.0, 200.0, math.nan, math.inf],
                     dtype=dtype)
    xx, nn_ = x[:, None].expand(12, 13), n[None, :].expand(12, 13)
    with emu.host_fallback("forbid"):
        _close(fn(xx.to("emu"), nn_.to("emu")), fn(xx, nn_))
        # a fractional degree is truncated
        _close(fn(x.to("emu"), torch.full((12,), 4.7, dtype=dtype).to("emu")), fn(x, torch.full((12,), 4.7, dtype=dtype)))
        nan_x = fn(torch.full((4,), math.nan, dtype=dtype, device="emu"), torch.tensor([2.0, 3.0, 7.0, 12.0], dtype=dtype).to("emu"))
        assert nan_x.isnan().all().item()
        _close(fn(x.to("emu"), 6), fn(x, 6))                                   # n_scalar
        _close(fn(0.3, n.to("emu")), fn(0.3, n))                               # x_scalar
        _close(fn(x.to("emu"), torch.tensor(4)), fn(x, torch.tensor(4)))       # a CPU 0-dim n
        ints = torch.arange(0, 6)
        _close(fn(ints.to("emu"), ints.to("emu")), fn(ints, ints))             # integers promote to float
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_shrinks_logsigmoid_and_their_gradients(dtype, stats):
    x = torch.cat([make(torch.float32, (40,)) / 4, torch.tensor([0.5, -0.5, 0.0, 30.0, -30.0])]).to(dtype)
    tol = TOL[dtype]
    for fn in (lambda t: F.hardshrink(t, 0.5), lambda t: F.softshrink(t, 0.3), F.logsigmoid,
               lambda t: F.hardshrink(t)):
        xe = x.to("emu").requires_grad_()
        xc = x.clone().requires_grad_()
        with emu.host_fallback("forbid"):
            ye = fn(xe)
            g = torch.linspace(-1, 1, x.numel(), dtype=dtype)
            ye.backward(g.to("emu"))
        yc = fn(xc)
        yc.backward(g)
        torch.testing.assert_close(ye.detach().cpu(), yc.detach(), **tol)
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, **tol)
    assert stats.native("aten::log_sigmoid_forward") == 1 and stats.native("aten::log_sigmoid_backward") == 1
    assert stats.native("aten::hardshrink_backward") == 2 and stats.native("aten::softshrink_backward") == 1
    stats.no_fallback()


def test_shrink_errors_and_out():
    x = torch.ones(4, dtype=torch.int64, device="emu")
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        F.hardshrink(x)
    with pytest.raises(RuntimeError, match="lambda must be greater or equal to 0"):
        F.softshrink(torch.ones(3, device="emu"), -1.0)
    xs = make(torch.float32, (5,))
    out = torch.empty(0, device="emu")
    torch.ops.aten.hardshrink.out(xs.to("emu"), 0.5, out=out)
    _close(out, F.hardshrink(xs, 0.5))
    out, buffer = torch.ops.aten.log_sigmoid_forward(xs.to("emu"))
    _close(out, F.logsigmoid(xs))


def test_multilabel_soft_margin_loss(stats):
    x, y = make(torch.float32, (4, 6)), (make(torch.float32, (4, 6), seed=1) > 0).float()
    with emu.host_fallback("forbid"):
        out = F.multilabel_soft_margin_loss(x.to("emu"), y.to("emu"))
    _close(out, F.multilabel_soft_margin_loss(x, y))
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_frexp(dtype, stats):
    x = torch.cat([make(torch.float32, (30,)) * 100, torch.tensor([0.0, -0.0, 1.0, -0.75, 1e-5, 6e4])]).to(dtype)
    if dtype != torch.float16:
        x = torch.cat([x, torch.tensor([math.inf, -math.inf, math.nan, 1e-40], dtype=dtype)])
    with emu.host_fallback("forbid"):
        mantissa, exponent = torch.frexp(x.to("emu"))
        m_out, e_out = torch.empty(0, dtype=dtype, device="emu"), torch.empty(0, dtype=torch.int32, device="emu")
        torch.frexp(x.to("emu"), out=(m_out, e_out))
    m_ref, e_ref = torch.frexp(x)
    assert exponent.dtype == torch.int32
    finite = torch.isfinite(x)
    torch.testing.assert_close(mantissa.cpu(), m_ref, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(exponent.cpu()[finite], e_ref[finite], rtol=0, atol=0)
    torch.testing.assert_close(m_out.cpu(), m_ref, rtol=0, atol=0, equal_nan=True)
    stats.no_fallback()


def test_frexp_errors():
    x = torch.ones(3, device="emu")
    with pytest.raises(RuntimeError, match="only supports floating-point"):
        torch.frexp(torch.ones(3, dtype=torch.int32, device="emu"))
    with pytest.raises(RuntimeError, match="expects exponent to have int dtype"):
        torch.frexp(x, out=(torch.empty(3, device="emu"), torch.empty(3, device="emu")))


def test_angle_real(stats):
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, math.nan, -math.inf], dtype=torch.float64)
    with emu.host_fallback("forbid"):
        _close(torch.angle(x.to("emu")), torch.angle(x))
        out = torch.empty(0, dtype=torch.float64, device="emu")
        torch.angle(x.to("emu"), out=out)
    _close(out, torch.angle(x))
    assert stats.native("aten::angle") == 1 and stats.native("aten::angle.out") == 1


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu_forward_backward(dim, stats):
    x = make(torch.float32, (4, 6, 2))
    xe, xc = x.to("emu").requires_grad_(), x.clone().requires_grad_()
    with emu.host_fallback("forbid"):
        ye = F.glu(xe, dim)
        ye.backward(torch.ones_like(ye))
    yc = F.glu(xc, dim)
    yc.backward(torch.ones_like(yc))
    _close(ye.detach(), yc.detach())
    _close(xe.grad, xc.grad)
    assert stats.native("aten::glu") == 1 and stats.native("aten::glu_backward") == 1
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(torch.ones(3, 5, device="emu"), 1)


@pytest.mark.parametrize("channels", [1, 3])
def test_prelu_forward_backward(channels, stats):
    x = make(torch.float32, (2, 3, 4))
    w = torch.tensor([0.25, -0.5, 1.5][:channels])
    xe, we = x.to("emu").requires_grad_(), w.to("emu").requires_grad_()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    with emu.host_fallback("forbid"):
        ye = F.prelu(xe, we)
        ye.backward(torch.linspace(-1, 1, 24).reshape(2, 3, 4).to("emu"))
    yc = F.prelu(xc, wc)
    yc.backward(torch.linspace(-1, 1, 24).reshape(2, 3, 4))
    _close(ye.detach(), yc.detach())
    _close(xe.grad, xc.grad)
    _close(we.grad, wc.grad)
    assert stats.native("aten::_prelu_kernel_backward") == 1


def test_rrelu(stats):
    x = make(torch.float32, (50,))
    with emu.host_fallback("forbid"):
        _close(F.rrelu(x.to("emu"), 0.1, 0.3, training=False), F.rrelu(x, 0.1, 0.3, training=False))
        xe = x.to("emu").requires_grad_()
        torch.manual_seed(0)
        y = F.rrelu(xe, 0.1, 0.3, training=True)
        y.backward(torch.ones_like(y))
        torch.manual_seed(0)
        y2 = F.rrelu(x.to("emu"), 0.1, 0.3, training=True)
        inplace = x.to("emu")
        F.rrelu(inplace, 0.1, 0.3, training=True, inplace=True)
    y, grad = y.detach().cpu(), xe.grad.cpu()
    negative = x <= 0
    slopes = y[negative] / x[negative]
    assert ((slopes >= 0.1 - 1e-6) & (slopes <= 0.3 + 1e-6)).all()
    assert torch.equal(y[~negative], x[~negative])
    torch.testing.assert_close(grad[negative], slopes)                  # the gradient is the drawn slope
    assert torch.equal(grad[~negative], torch.ones(int((~negative).sum())))
    assert torch.equal(y2.cpu(), y)                                      # seeded: reproducible
    assert torch.equal(inplace.cpu()[~negative], x[~negative])
    with pytest.raises(RuntimeError, match="Lower bound should be less than or equal"):
        F.rrelu(x.to("emu"), 0.3, 0.1, training=True)
    stats.no_fallback()


@pytest.mark.parametrize("p, dim, maxnorm", [(2, 1, 0.5), (1, 0, 3.0), (math.inf, 2, 0.5), (2, -1, 100.0)])
def test_renorm(p, dim, maxnorm, stats):
    x = make(torch.float32, (3, 4, 5))
    with emu.host_fallback("forbid"):
        _close(torch.renorm(x.to("emu"), p, dim, maxnorm), torch.renorm(x, p, dim, maxnorm))
        y = x.to("emu")
        y.renorm_(p, dim, maxnorm)
        out = torch.empty(0, device="emu")
        torch.renorm(x.to("emu"), p, dim, maxnorm, out=out)
    _close(y, torch.renorm(x, p, dim, maxnorm))
    _close(out, torch.renorm(x, p, dim, maxnorm))
    assert stats.native("aten::renorm") == 1 and stats.native("aten::renorm_") == 1
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_nextafter(dtype, stats):
    a = torch.tensor([0.0, -0.0, 1.0, 1.0, -1.0, 65504.0, 3.0, math.nan, 1.0, -2.5, 1e-7], dtype=dtype)
    b = torch.tensor([1.0, -1.0, 2.0, 0.0, -2.0, math.inf, 3.0, 1.0, math.nan, 0.0, -1.0], dtype=dtype)
    with emu.host_fallback("forbid"):
        out = torch.nextafter(a.to("emu"), b.to("emu"))
    torch.testing.assert_close(out.cpu(), torch.nextafter(a, b), rtol=0, atol=0, equal_nan=True)
    stats.no_fallback()


def test_composite_out_variants(stats):
    x, g = make(torch.float32, (4, 6)), make(torch.float32, (4, 3), seed=1)
    with emu.host_fallback("forbid"):
        grad_input = torch.empty(0, device="emu")
        torch.ops.aten.glu_backward.grad_input(g.to("emu"), x.to("emu"), 1, grad_input=grad_input)
        out = torch.empty(0, device="emu")
        torch.ops.aten.glu.out(x.to("emu"), 1, out=out)
        output, buffer = torch.empty(0, device="emu"), torch.empty(0, device="emu")
        torch.ops.aten.log_sigmoid_forward.output(x.to("emu"), output=output, buffer=buffer)
        rrelu_out = torch.empty(0, device="emu")
        torch.ops.aten.rrelu_with_noise.out(x.to("emu"), torch.empty(4, 6, device="emu"), 0.1, 0.3, False, None,
                                            out=rrelu_out)
    _close(grad_input, torch.ops.aten.glu_backward(g, x, 1))
    _close(out, F.glu(x, 1))
    _close(output, F.logsigmoid(x))
    _close(rrelu_out, F.rrelu(x, 0.1, 0.3))
    stats.no_fallback()


def test_cost_model_counts_the_special_functions():
    from emulator.kernels.library import pointwise_cycles
    assert pointwise_cycles("igamma") > pointwise_cycles("digamma") > pointwise_cycles("exp") > pointwise_cycles("angle")
    for op in ("polygamma", "erfinv", "i0", "bessel_y1", "modified_bessel_k1", "zeta", "hermite_polynomial_h",
               "airy_ai", "log_sigmoid"):
        assert pointwise_cycles(op) >= 10, op
