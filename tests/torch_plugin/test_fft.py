"""FFT on the device (aten::_fft_c2c, _fft_r2c, _fft_c2r and their .out forms, reached by every
torch.fft transform), the complex construction ops (complex, polar), conj_physical and complex mul,
against CPU.

Stated tolerances (torch.testing.assert_close). The device transforms in float64 and rounds once;
CPU's pocketfft/MKL transforms in the dtype, so its error grows with the signal's magnitude:
- transforms: float32/complex64 rtol=1e-5, atol=2e-6 * max|expected| (at least 2e-6);
  float64/complex128 rtol=1e-12, atol=1e-12 * max|expected|;
- complex, conj_physical: exact; polar: float32 rtol=2e-6, atol=1e-6, float64 rtol=atol=1e-14;
- complex mul: exact for the vectorized lengths, rtol=1e-6 otherwise (CPU's scalar loop may fuse).
Every op checked runs natively (the ``stats`` fixture, or the host fallback forbidden).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import torch_plugin  # noqa: F401
from plugin_testing import EXACT

REAL = [torch.float32, torch.float64]
COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def randn(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)


def emu(t):
    return t.to("emu") if isinstance(t, torch.Tensor) else t


def assert_fft_close(actual, expected):
    actual = actual.cpu()
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    if expected.dtype in (torch.float32, torch.complex64):
        tol = dict(rtol=1e-5, atol=2e-6 * scale)
    else:
        tol = dict(rtol=1e-12, atol=1e-12 * scale)
    torch.testing.assert_close(actual, expected, **tol)


def check_like_cpu(fn, x, **kwargs):
    """fn on emu matches fn on CPU, or raises what CPU raises (irfft of one term has no length)."""
    try:
        expected = fn(x, **kwargs)
    except RuntimeError as err:
        with pytest.raises(type(err), match="Invalid number of data points"):
            fn(emu(x), **kwargs)
        return
    assert_fft_close(fn(emu(x), **kwargs), expected)


@pytest.fixture
def forbid():
    torch.emu.set_host_fallback(False)
    yield
    torch.emu.set_host_fallback(True)


# -- the torch.fft frontends ------------------------------------------------------
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"]
# irfft/hfft take a (half) spectrum: complex inputs; the others: real and complex inputs where defined.
COMPLEX_INPUT = {"irfft", "hfft", "irfft2", "hfft2", "irfftn", "hfftn"}
REAL_ONLY = {"rfft", "ihfft", "rfft2", "ihfft2", "rfftn", "ihfftn"}


def _input(name, dtype, shape, seed=0):
    return randn(shape, COMPLEX_OF[dtype] if name in COMPLEX_INPUT else dtype, seed)


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("length", [1, 2, 7, 12, 16, 67])  # 67: Bluestein (a prime above the direct limit)
def test_1d_transforms_match_cpu(name, dtype, length, stats):
    x = _input(name, dtype, (3, length))
    fn = getattr(torch.fft, name)
    for kwargs in ({}, {"norm": "ortho"}, {"norm": "forward"}, {"n": length + 3}, {"n": max(1, length - 1), "dim": 1}):
        check_like_cpu(fn, x, **kwargs)
    if name not in REAL_ONLY and name not in COMPLEX_INPUT:  # fft/ifft of a complex signal: c2c
        xc = randn((3, length), COMPLEX_OF[dtype], seed=1)
        assert_fft_close(fn(emu(xc)), fn(xc))
    stats.no_fallback()


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("name", N_D)
def test_nd_transforms_match_cpu(name, dtype, stats):
    x = _input(name, dtype, (4, 5, 6))
    fn = getattr(torch.fft, name)
    cases = [{}, {"norm": "ortho"}, {"dim": (0, 2)}, {"s": (3, 8), "dim": (2, 0)}]
    if name.endswith("n"):
        cases.append({"dim": (0, 1, 2), "norm": "forward"})
    for kwargs in cases:
        assert_fft_close(fn(emu(x), **kwargs), fn(x, **kwargs))
    stats.no_fallback()
    assert sum(stats.native(f"aten::_fft_{k}") for k in ("c2c", "r2c", "c2r")) > 0


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fftn", "irfftn", "ihfftn"])
def test_non_contiguous_inputs(name, stats):
    base = _input(name, torch.float32, (6, 8, 10))
    fn = getattr(torch.fft, name)
    views = [lambda t: t.transpose(0, 2), lambda t: t[::2, 1:, ::3], lambda t: t[:, :1].expand(6, 5, 10)]
    for view in views:
        assert_fft_close(fn(view(emu(base))), fn(view(base)))
    stats.no_fallback()


def test_conjugated_and_shifted_inputs(stats):
    x = randn((5, 9), torch.complex64)
    for fn in (torch.fft.fft, torch.fft.irfft, torch.fft.hfft):
        assert_fft_close(fn(emu(x).conj()), fn(x.conj()))
    y = randn((4, 6))
    assert_fft_close(torch.fft.fftshift(torch.fft.rfft2(emu(y)).real), torch.fft.fftshift(torch.fft.rfft2(y).real))
    stats.no_fallback()


def test_empty_batches(stats):
    # (CPU's MKL refuses an empty batch; the expected result is that of one row, sliced to none)
    for fn in (torch.fft.fft, torch.fft.rfft, torch.fft.ifft, torch.fft.ihfft, torch.fft.irfft):
        for shape in ((0, 8), (3, 0, 8)):
            x = torch.randn(shape)
            expected = fn(torch.randn(tuple(max(n, 1) for n in shape)))[tuple(slice(0, n) for n in shape[:-1])]
            actual = fn(emu(x))
            assert actual.shape == expected.shape and actual.dtype == expected.dtype
    stats.no_fallback()


# -- the aten backend ops ----------------------------------------------------------
@pytest.mark.parametrize("dtype", REAL)
def test_backend_ops_any_dims_and_layouts(dtype, stats):
    xr = randn((4, 5, 6), dtype).permute(2, 0, 1)  # non-contiguous
    xc = randn((4, 5, 6), COMPLEX_OF[dtype]).transpose(0, 1)
    cases = [
        (torch._fft_c2c, xc, ([2, 0], 1, True)), (torch._fft_c2c, xc, ([1], 2, False)),
        (torch._fft_c2c, xc, ([0, 1, 2], 0, True)), (torch._fft_c2c, xc, ([], 2, True)),
        (torch._fft_r2c, xr, ([0, 2], 2, True)), (torch._fft_r2c, xr, ([1], 1, False)),
        (torch._fft_r2c, xr, ([2, 1, 0], 0, True)),
        (torch._fft_c2r, xc, ([1], 2, 6)), (torch._fft_c2r, xc, ([2, 0], 1, 9)), (torch._fft_c2r, xc, ([0, 1], 0, 7)),
    ]
    for op, x, args in cases:
        expected = op(x, *args)
        actual = op(emu(x), *args)
        assert_fft_close(actual, expected)
        assert actual.stride() == expected.stride(), (op, args)  # CPU's output layout
    stats.no_fallback()


def test_c2r_ignores_terms_beyond_the_half_spectrum(stats):
    x = randn((3, 7), torch.complex64)
    assert_fft_close(torch._fft_c2r(emu(x), [1], 0, 6), torch._fft_c2r(x[:, :4], [1], 0, 6))
    stats.no_fallback()


def test_out_variants(stats):
    x = randn((3, 8), torch.complex64)
    expected = torch._fft_c2c(x, [1], 0, True)
    out = torch.empty(0, dtype=torch.complex64, device="emu")
    assert torch._fft_c2c(emu(x), [1], 0, True, out=out) is out
    assert_fft_close(out, expected)
    # a correctly shaped non-contiguous out keeps its strides
    out = torch.empty(8, 3, dtype=torch.complex64, device="emu").t()
    torch._fft_c2c(emu(x), [1], 0, True, out=out)
    assert out.stride() == (1, 3)
    assert_fft_close(out, expected)
    # a wrong-shaped out with elements is resized, with ATen's warning
    out = torch.empty(5, dtype=torch.complex64, device="emu")
    with pytest.warns(UserWarning, match="was resized"):
        torch._fft_c2c(emu(x), [1], 0, True, out=out)
    assert_fft_close(out, expected)
    # another dtype is copied into (CPU's *_mkl_out copies its result)
    out = torch.empty(0, dtype=torch.complex128, device="emu")
    torch._fft_c2c(emu(x), [1], 0, True, out=out)
    assert out.dtype == torch.complex128
    assert_fft_close(out.to(torch.complex64), expected)
    # r2c / c2r out, and the frontends' out=
    r = randn((3, 8))
    out = torch.empty(0, dtype=torch.complex64, device="emu")
    torch._fft_r2c(emu(r), [1], 2, True, out=out)
    assert_fft_close(out, torch._fft_r2c(r, [1], 2, True))
    out = torch.empty(0, device="emu")
    torch._fft_c2r(emu(x), [1], 1, 14, out=out)
    assert_fft_close(out, torch._fft_c2r(x, [1], 1, 14))
    out = torch.empty(0, dtype=torch.complex64, device="emu")
    torch.fft.ihfft(emu(r), out=out)  # r2c, then conj_physical.out
    assert_fft_close(out, torch.fft.ihfft(r))
    with pytest.raises(RuntimeError, match="expects a complex output tensor"):
        torch.fft.fft(emu(r), out=torch.empty(0, device="emu"))
    stats.no_fallback()
    assert stats.native("aten::_fft_c2c.out") > 0 and stats.native("aten::_fft_r2c.out") > 0
    assert stats.native("aten::_fft_c2r.out") > 0


def test_internally_overlapping_out_is_rejected():
    x = emu(randn((3, 4), torch.complex64))
    out = torch.zeros(1, dtype=torch.complex64, device="emu").expand(3, 4)
    with pytest.raises(RuntimeError, match="more than one element"):
        torch._fft_c2c(x, [1], 0, True, out=out)


def test_bad_input_errors_leave_tensors_unchanged(forbid):
    xr = emu(randn((3, 4)))
    xc = emu(randn((3, 4), torch.complex64))
    before = (xr.cpu(), xc.cpu())
    with pytest.raises(RuntimeError, match="Only supports complex dtypes, but found: Float"):
        torch._fft_c2c(xr, [1], 0, True)
    with pytest.raises(RuntimeError, match="Only supports floating-point dtypes, but found: ComplexFloat"):
        torch._fft_r2c(xc, [1], 0, True)
    with pytest.raises(RuntimeError, match="Only supports complex dtypes, but found: Float"):
        torch._fft_c2r(xr, [1], 0, 4)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch._fft_c2c(xc, [2], 0, True)
    with pytest.raises(RuntimeError, match="more than once"):
        torch._fft_c2c(xc, [1, -1], 0, True)
    with pytest.raises(RuntimeError, match="normalization 7"):
        torch._fft_c2c(xc, [1], 7, True)
    with pytest.raises(RuntimeError, match="needs 5"):
        torch._fft_c2r(xc, [1], 0, 8)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(xc, n=0)
    # float16 has no device FFT (nor a CPU one): the counted fallback, refused when forbidden
    with pytest.raises(torch_plugin.HostFallbackError, match="_fft_r2c"):
        torch._fft_r2c(emu(torch.ones(4, dtype=torch.float16)), [0], 0, True)
    torch.testing.assert_close(xr.cpu(), before[0], **EXACT)
    torch.testing.assert_close(xc.cpu(), before[1], **EXACT)


# -- autograd ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "rfft2", "irfftn", "hfftn", "fftn"])
def test_backward_matches_cpu(name, stats):
    fn = getattr(torch.fft, name)
    x = _input(name, torch.float64, (4, 7), seed=3)
    xc = x.clone().requires_grad_(True)
    xe = emu(x).requires_grad_(True)
    yc, ye = fn(xc), fn(xe)
    w = randn(tuple(yc.shape) + ((2,) if yc.is_complex() else ()), torch.float64, seed=4)

    def loss(y, w):
        return ((torch.view_as_real(y.resolve_conj()) if y.is_complex() else y) * w).sum()
    loss(yc, w).backward()
    loss(ye, emu(w)).backward()
    assert_fft_close(xe.grad, xc.grad)
    stats.no_fallback()


# -- complex, polar, conj_physical, complex mul ------------------------------------------
@pytest.mark.parametrize("dtype", REAL)
def test_complex_and_polar(dtype, stats):
    a, b = randn((4, 5), dtype), randn((5,), dtype, seed=1)
    torch.testing.assert_close(torch.complex(emu(a), emu(b)).cpu(), torch.complex(a, b), **EXACT)
    c = randn((5, 4), dtype, seed=2)
    torch.testing.assert_close(torch.complex(emu(a).t(), emu(c)[:, ::1]).cpu(), torch.complex(a.t(), c), **EXACT)
    d = randn((3, 4), dtype, seed=3)
    torch.testing.assert_close(torch.complex(emu(a)[:, :1].expand(4, 3), emu(d).t()).cpu(),
                               torch.complex(a[:, :1].expand(4, 3), d.t()), **EXACT)
    tol = dict(rtol=2e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(torch.polar(emu(a.abs()), emu(b)).cpu(), torch.polar(a.abs(), b), **tol)
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0], dtype=dtype)
    angles = torch.tensor([0.0, math.pi, 1.0, math.nan, 2.0, math.inf], dtype=dtype)
    torch.testing.assert_close(torch.complex(emu(special), emu(angles)).cpu(), torch.complex(special, angles),
                               equal_nan=True, **EXACT)
    torch.testing.assert_close(torch.polar(emu(special.abs()), emu(angles)).cpu(), torch.polar(special.abs(), angles),
                               equal_nan=True, **tol)
    # out=: a zero-element out is resized, a non-contiguous one keeps its strides
    out = torch.empty(0, dtype=COMPLEX_OF[dtype], device="emu")
    torch.complex(emu(a), emu(b), out=out)
    torch.testing.assert_close(out.cpu(), torch.complex(a, b), **EXACT)
    out = torch.empty(5, 4, dtype=COMPLEX_OF[dtype], device="emu").t()
    torch.polar(emu(a), emu(b), out=out)
    assert out.stride() == (1, 4)
    torch.testing.assert_close(out.cpu(), torch.polar(a, b), **tol)
    stats.no_fallback()
    assert stats.native("aten::complex") > 0 and stats.native("aten::polar.out") > 0


def test_complex_errors(forbid):
    a = emu(randn((3,)))
    target = torch.zeros(3, dtype=torch.complex64, device="emu")
    with pytest.raises(RuntimeError, match="Expected object of scalar type Float but got scalar type Double"):
        torch.complex(a, a.double())
    with pytest.raises(RuntimeError, match="Expected both inputs to be Half, Float or Double"):
        torch.polar(a.long(), a.long())
    with pytest.raises(RuntimeError, match="Expected object of scalar type ComplexFloat but got scalar type "
                                           "ComplexDouble for argument 'out'"):
        torch.complex(a, a, out=torch.empty(3, dtype=torch.complex128, device="emu"))
    # CPU's complex kernel words this unsafe cast its own way; the out= contract (ops/contract.py)
    # raises it before the kernel, in TensorIterator's words.
    with pytest.raises(RuntimeError, match="Expected object of scalar type ComplexFloat but got scalar type Float|"
                                           "result type ComplexFloat can't be cast to the desired output type Float"):
        torch.complex(a, a, out=torch.empty(3, device="emu"))
    with pytest.raises(torch_plugin.HostFallbackError, match="float16"):  # complex32: no device storage
        torch.complex(a.half(), a.half())
    torch.testing.assert_close(target.cpu(), torch.zeros(3, dtype=torch.complex64), **EXACT)


def test_complex_backward(stats):
    w = randn((6, 2), torch.float64, seed=2)
    grads = []
    for device in ("cpu", "emu"):
        a, b = randn((6,), torch.float64), randn((6,), torch.float64, seed=1)
        ac, bc = a.to(device).requires_grad_(True), b.to(device).requires_grad_(True)  # fresh leaves
        (torch.view_as_real(torch.complex(ac, bc)) * w.to(device)).sum().backward()
        grads.append((ac.grad.cpu(), bc.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0], **EXACT)
    stats.no_fallback()


def test_conj_physical(stats):
    x = randn((4, 3), torch.complex128)
    torch.testing.assert_close(torch.conj_physical(emu(x)).cpu(), torch.conj_physical(x), **EXACT)
    torch.testing.assert_close(torch.conj_physical(emu(x).conj()).cpu(), x, **EXACT)
    y = emu(x).t().clone()
    y.conj_physical_()
    torch.testing.assert_close(y.cpu(), x.t().conj_physical(), **EXACT)
    r = randn((3,))
    torch.testing.assert_close(torch.conj_physical(emu(r)).cpu(), r, **EXACT)
    stats.no_fallback()


def test_complex_mul(stats):
    x, y = randn((64, 32), torch.complex64), randn((32,), torch.complex64, seed=1)
    torch.testing.assert_close((emu(x) * emu(y)).cpu(), x * y, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close((emu(x) * 2).cpu(), x * 2, **EXACT)
    torch.testing.assert_close((emu(x) * 1j).cpu(), x * 1j, **EXACT)
    r = randn((64, 1))
    torch.testing.assert_close((emu(r) * emu(y)).cpu(), r * y, rtol=1e-6, atol=1e-7)
    z = emu(x).clone()
    z[:, 1:].mul_(2)
    expected = x.clone()
    expected[:, 1:].mul_(2)
    torch.testing.assert_close(z.cpu(), expected, **EXACT)
    out = torch.empty(0, dtype=torch.complex128, device="emu")
    torch.mul(emu(x), emu(y.to(torch.complex128)), out=out)
    torch.testing.assert_close(out.cpu(), x * y.to(torch.complex128), **EXACT)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        emu(r).mul_(emu(y))
    # real products still take elementwise.py's kernel
    torch.testing.assert_close((emu(r) * emu(r)).cpu(), r * r, **EXACT)
    stats.no_fallback()
    assert stats.native("aten::mul.Tensor") >= 4


# -- the kernel itself ---------------------------------------------------------------
def _addr(a):
    return a.__array_interface__["data"][0]


def _strides(a):
    return tuple(s // a.itemsize for s in a.strides)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 64, 65, 128, 257, 1009])
def test_kernel_against_numpy_float64(n):
    from emulator.kernels import dtypes, fft
    x = np.random.default_rng(n).standard_normal((2, n)) + 1j * np.random.default_rng(n + 1).standard_normal((2, n))
    for forward in (True, False):
        out = np.empty_like(x)
        fft.fft(0, _addr(out), dtypes.COMPLEX128, _strides(out), out.shape, _addr(x), dtypes.COMPLEX128, _strides(x),
                x.shape, (1,), forward, 1.0)
        expected = np.fft.fft(x, axis=1) if forward else np.fft.ifft(x, axis=1) * n
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12 * n)


def test_kernel_rejects_bad_arguments():
    from emulator.errors import KernelArgumentError
    from emulator.kernels import dtypes, fft
    x = np.zeros((2, 4), np.complex64)
    src = (_addr(x), dtypes.COMPLEX64, (4, 1), (2, 4))
    with pytest.raises(KernelArgumentError, match="c2c: takes complex operands"):
        fft.fft(0, _addr(x), dtypes.FLOAT32, (4, 1), (2, 4), *src, (1,), True, 1.0)
    with pytest.raises(KernelArgumentError, match="distinct dims"):
        fft.fft(0, _addr(x), dtypes.COMPLEX64, (4, 1), (2, 4), *src, (2,), True, 1.0)
    with pytest.raises(KernelArgumentError, match="less than"):
        fft.fft(2, _addr(x), dtypes.FLOAT32, (8, 1), (2, 8), *src, (1,), False, 1.0)


def test_cost_model():
    from emulator.kernels.library import KERNELS, Operand
    from emulator.kernels import dtypes

    from emulator.config import load_preset
    from emulator.device import CostDevice

    def Device():
        return CostDevice(load_preset("tiny").device)   # the cost model without device memory
    inp = Operand(1, dtypes.COMPLEX64, (4, 16), (16, 1))
    out = Operand(1, dtypes.COMPLEX64, (4, 16), (16, 1))
    ns, nbytes, flops = KERNELS["fft"].cost(Device(), 0, out, inp, 0b11, 1, True, 1.0)[:3]
    assert flops == 5 * 64 * 4 + 5 * 64 * 2  # 5 n log2 n per line: 4 lines of 16, 16 lines of 4
    assert nbytes == 2 * 64 * 8
    assert KERNELS["fft"].engine == "vector"


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_abs_is_hypot_of_the_parts(dtype, stats):
    """|z| of complex tensors runs on the device (hypot of the real and imaginary parts, as CPU's
    std::abs): plain, conjugated, negated and strided views, out=, and extreme values."""
    x = torch.randn(6, 5, dtype=dtype)
    x[0, 0] = complex(3e38, 3e38) if dtype == torch.complex64 else complex(1e308, 1e308)
    x[0, 1] = complex(float("inf"), float("nan"))
    x[0, 2] = complex(float("nan"), 0)
    x[0, 3] = 0
    e = x.to("emu")
    with torch.emu.host_fallback("forbid"):
        got = [e.abs(), e.conj().abs(), torch._neg_view(e).abs(), e[:, ::2].t().abs()]
        out = torch.empty(6, 5, dtype=x.real.dtype, device="emu")
        torch.abs(e, out=out)
        real = torch.randn(7).to("emu").abs()
    want = [x.abs(), x.conj().abs(), x.abs(), x[:, ::2].t().abs()]
    # hypot is correctly rounded on the device; CPU's may be 1 ulp off it
    tol = dict(rtol=2 * torch.finfo(x.real.dtype).eps, atol=0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tol)
    torch.testing.assert_close(out.cpu(), x.abs(), equal_nan=True, **tol)
    assert real.dtype == torch.float32
    stats.no_fallback()
