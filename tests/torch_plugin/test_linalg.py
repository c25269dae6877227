"""Matrix-engine ops against CPU: bmm, baddbmm, addbmm, mv, addmv, dot, vdot, addr (+ out= and in-place
forms), integer GEMM, and the composites that reach them (matmul of every rank pair, nn.Linear, outer,
scaled_dot_product_attention's math path).

Stated tolerances (torch.testing.assert_close), against a reference computed on CPU:
- float32: rtol=1e-5, atol=1e-5 (reference: the CPU op in float64, rounded to float32);
- float64: rtol=atol=1e-12;
- float16: rtol=atol=1e-3 and bfloat16: rtol=1.6e-2, atol=1e-2, against the CPU op computed in float32
  and rounded once (the device's contract: fp32 accumulation, one rounding);
- integer dtypes: exact (64-bit accumulation wraps to the dtype as CPU's does).
Autograd (float32): gradients rtol=1e-5, atol=1e-5 against CPU autograd.
Every op checked must run natively: no host fallback (the ``stats`` fixture).
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from plugin_testing import EXACT

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def rand(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    lo, hi = (0, 256) if dtype == torch.uint8 else (-128, 128) if dtype == torch.int8 else (-1000, 1000)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def emu(t):
    return t.to("emu")


def reference(fn, dtype, *args, **kwargs):
    """CPU result: computed in float64 (float32 for float16/bfloat16, float64 for float32) and rounded once."""
    if dtype in (torch.float16, torch.bfloat16):
        wide = torch.float32
    elif dtype == torch.float32:
        wide = torch.float64
    else:
        return fn(*args, **kwargs)
    cast = [a.to(wide) if isinstance(a, torch.Tensor) else a for a in args]
    return fn(*cast, **kwargs).to(dtype)


def check(fn, dtype, *args, **kwargs):
    got = fn(*(emu(a) if isinstance(a, torch.Tensor) else a for a in args), **kwargs)
    expected = reference(fn, dtype, *args, **kwargs)
    assert got.device.type == "emu" and got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, **(TOL.get(dtype) or EXACT))
    return got


# ------------------------------------------------------------------------------ batched GEMM
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.int8])
def test_bmm_family_matches_cpu(stats, dtype):
    b1, b2 = rand((3, 5, 7), dtype, 1), rand((3, 7, 4), dtype, 2)
    check(torch.bmm, dtype, b1, b2)
    check(torch.bmm, dtype, b1.transpose(1, 2).contiguous().transpose(1, 2), b2[:, :, :])     # column-major
    check(torch.bmm, dtype, rand((6, 5, 7), dtype, 3)[::2], rand((3, 4, 7), dtype, 4).transpose(1, 2))  # sliced
    check(torch.bmm, dtype, rand((1, 5, 7), dtype, 5).expand(3, 5, 7), b2)                  # broadcast batch
    ints = not dtype.is_floating_point
    beta, alpha = (2, 3) if ints else (0.5, -1.5)
    for bias in (rand((3, 5, 4), dtype, 6), rand((4,), dtype, 7), rand((5, 1), dtype, 8)):
        check(torch.baddbmm, dtype, bias, b1, b2, beta=beta, alpha=alpha)
    for bias in (rand((5, 4), dtype, 9), rand((1, 4), dtype, 10), rand((), dtype, 11)):
        check(torch.addbmm, dtype, bias, b1, b2, beta=beta, alpha=alpha)
    assert stats.native("aten::bmm") == 4 and stats.native("aten::baddbmm") == 3
    assert stats.native("aten::addbmm") == 3
    stats.no_fallback()


def test_bmm_larger_shapes_against_float64(stats):
    b1, b2 = rand((4, 33, 130), seed=1), rand((4, 130, 17), seed=2)
    got = torch.bmm(emu(b1), emu(b2))
    torch.testing.assert_close(got.cpu(), (b1.double() @ b2.double()).float(), rtol=1e-5, atol=1e-4)
    got = torch.addbmm(emu(torch.ones(33, 17)), emu(b1), emu(b2))
    torch.testing.assert_close(got.cpu(), (1 + (b1.double() @ b2.double()).sum(0)).float(), rtol=1e-5, atol=1e-4)
    stats.no_fallback()


# ------------------------------------------------------------------------------ vectors
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int16])
def test_mv_addmv_dot_vdot_match_cpu(stats, dtype):
    mat, vec = rand((6, 9), dtype, 1), rand((9,), dtype, 2)
    check(torch.mv, dtype, mat, vec)
    check(torch.mv, dtype, rand((9, 6), dtype, 3).t(), rand((18,), dtype, 4)[::2])          # transposed, strided
    check(torch.mv, dtype, mat, rand((1,), dtype, 5).expand(9))                            # stride-0 vector
    ints = not dtype.is_floating_point
    beta, alpha = (3, -2) if ints else (0.25, 2.0)
    for bias in (rand((6,), dtype, 6), rand((1,), dtype, 7), rand((), dtype, 8)):
        check(torch.addmv, dtype, bias, mat, vec, beta=beta, alpha=alpha)
    for fn in (torch.dot, torch.vdot):
        check(fn, dtype, vec, rand((9,), dtype, 9))
        check(fn, dtype, rand((27,), dtype, 10)[::3], rand((9,), dtype, 11))
    assert stats.native("aten::mv") == 3 and stats.native("aten::addmv") == 3
    assert stats.native("aten::dot") == 2 and stats.native("aten::vdot") == 2
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.uint8, torch.bool])
def test_addr_matches_cpu(stats, dtype):
    v1, v2 = rand((5,), dtype, 1) if dtype != torch.bool else rand((5,), torch.float32, 1) > 0, \
        rand((7,), dtype, 2) if dtype != torch.bool else rand((7,), torch.float32, 2) > 0
    bias = rand((5, 7), dtype, 3) if dtype != torch.bool else rand((5, 7), torch.float32, 3) > 0
    scalars = [dict(), dict(beta=0)] + ([dict(beta=2, alpha=3)] if not dtype.is_floating_point else
                                        [dict(beta=0.5, alpha=-2.0)])
    for kwargs in scalars:
        got = torch.addr(emu(bias), emu(v1), emu(v2), **kwargs)
        expected = torch.addr(bias, v1, v2, **kwargs)
        torch.testing.assert_close(got.cpu(), expected, **(TOL.get(dtype) or EXACT))
    got = torch.addr(emu(bias[:, :1]), emu(v1), emu(v2))                                 # broadcast self
    torch.testing.assert_close(got.cpu(), torch.addr(bias[:, :1], v1, v2), **(TOL.get(dtype) or EXACT))
    assert stats.native("aten::addr") == len(scalars) + 1
    stats.no_fallback()


def test_addr_type_promotion_and_outer(stats):
    bias, v1, v2 = rand((3, 4), torch.float16), rand((3,), torch.float32, 1), rand((4,), torch.int64, 2)
    got = torch.addr(emu(bias), emu(v1), emu(v2))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), torch.addr(bias, v1, v2), rtol=1e-5, atol=1e-5)
    x = rand((6,), seed=3)
    torch.testing.assert_close(torch.outer(emu(x), emu(v1)).cpu(), torch.outer(x, v1), **EXACT)
    stats.no_fallback()


# ------------------------------------------------------------------------------ integers
@pytest.mark.parametrize("dtype", INTS)
def test_integer_products_are_exact_and_wrap(stats, dtype):
    a, b = rand((4, 6), dtype, 1), rand((6, 3), dtype, 2)
    big = torch.full((5, 40), 100 if dtype != torch.uint8 else 250, dtype=dtype)   # overflows int8/uint8/int16
    for fn, args in [(torch.mm, (a, b)), (torch.mm, (big, big.t())), (torch.addmm, (rand((3,), dtype, 3), a, b)),
                     (torch.bmm, (a.expand(2, 4, 6), b.expand(2, 6, 3))), (torch.mv, (a, b[:, 0])),
                     (torch.dot, (big[0], big[1]))]:
        got = fn(*map(emu, args))
        torch.testing.assert_close(got.cpu(), fn(*args), **EXACT)
    # float alpha/beta are truncated to integers, as CPU's Scalar.to<int64_t>() does
    bias = rand((4, 3), dtype, 4)
    alpha = 1.2 if dtype == torch.uint8 else -1.2
    got = torch.addmm(emu(bias), emu(a), emu(b), beta=2.7, alpha=alpha)
    torch.testing.assert_close(got.cpu(), torch.addmm(bias, a, b, beta=2.7, alpha=alpha), **EXACT)
    bad = 300 if dtype in (torch.int8, torch.uint8) else 2 ** 40 if dtype != torch.int64 else None
    if bad is not None:  # a scalar that does not fit the dtype is CPU's error, not a wrapped value
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.addmm(bias, a, b, beta=bad)
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.addmm(emu(bias), emu(a), emu(b), beta=bad)
    assert stats.native("aten::mm") == 2 and stats.native("aten::addmm") == 2
    stats.no_fallback()


def test_bool_products_are_rejected_like_cpu():
    t = torch.ones(3, 3, dtype=torch.bool)
    for fn, args in [(torch.mm, (t, t)), (torch.bmm, (t[None], t[None])), (torch.mv, (t, t[0])),
                     (torch.dot, (t[0], t[0])), (torch.addmm, (t, t, t))]:
        with pytest.raises(NotImplementedError):
            fn(*args)  # CPU rejects bool too
        with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
            fn(*map(emu, args))   # the device has no bool product: CPU's own error, through the fallback
        with torch.emu.host_fallback("forbid"), pytest.raises(
                torch_plugin.HostFallbackError, match=r"aten::\w+.*dtype torch.bool is not supported on emu"):
            fn(*map(emu, args))


# ------------------------------------------------------------------------------ special values
def test_beta_zero_ignores_self_and_alpha_zero_ignores_matrices():
    nan_self = torch.full((2, 3, 4), float("nan"))
    b1, b2 = rand((2, 3, 5), seed=1), rand((2, 5, 4), seed=2)
    for fn, args in [(torch.baddbmm, (nan_self, b1, b2)), (torch.addbmm, (nan_self[0], b1, b2)),
                     (torch.addmv, (nan_self[0, 0, :3], b1[0], b1[0, 0])),
                     (torch.addr, (nan_self[0], b1[0, :, 0], b2[0, 0]))]:
        got = fn(*map(emu, args), beta=0)
        torch.testing.assert_close(got.cpu(), fn(*args, beta=0), rtol=1e-5, atol=1e-5)
        assert not got.cpu().isnan().any()
    nan_mat = b1.clone()
    nan_mat[0, 1, 1] = float("nan")
    # CPU's addbmm/addmv skip the product when alpha == 0 (BLAS); addr multiplies (0 * NaN = NaN)
    for fn, args in [(torch.addbmm, (torch.ones(3, 4), nan_mat, b2)),
                     (torch.addmv, (torch.ones(3), nan_mat[0], b1[0, 0])),
                     (torch.addr, (torch.ones(3, 4), nan_mat[0, :, 1], b2[0, 0]))]:
        torch.testing.assert_close(fn(*map(emu, args), alpha=0).cpu(), fn(*args, alpha=0), equal_nan=True)
    inf = torch.tensor([1e30, 1e30])
    assert torch.dot(emu(inf), emu(inf)).item() == float("inf")  # float32 accumulation overflows, as on CPU


def test_empty_operands():
    for fn, args in [(torch.bmm, (torch.empty(0, 3, 4), torch.empty(0, 4, 5))),
                     (torch.bmm, (torch.empty(2, 3, 0), torch.empty(2, 0, 5))),
                     (torch.baddbmm, (rand((2, 3, 5)), torch.empty(2, 3, 0), torch.empty(2, 0, 5))),
                     (torch.addbmm, (rand((3, 5)), torch.empty(0, 3, 4), torch.empty(0, 4, 5))),
                     (torch.mv, (torch.empty(3, 0), torch.empty(0))), (torch.mv, (torch.empty(0, 3), rand((3,)))),
                     (torch.dot, (torch.empty(0), torch.empty(0))),
                     (torch.addr, (rand((3, 0)), rand((3,)), torch.empty(0)))]:
        kwargs = dict(beta=2) if fn in (torch.baddbmm, torch.addbmm) else {}
        got, expected = fn(*map(emu, args), **kwargs), fn(*args, **kwargs)
        assert got.shape == expected.shape
        torch.testing.assert_close(got.cpu(), expected, **EXACT)


# ------------------------------------------------------------------------------ out= and in-place
OUT_CASES = {
    "bmm": (torch.bmm, lambda: (rand((2, 3, 4), seed=1), rand((2, 4, 5), seed=2)), (2, 3, 5)),
    "baddbmm": (torch.baddbmm, lambda: (rand((5,), seed=3), rand((2, 3, 4), seed=1), rand((2, 4, 5), seed=2)),
                (2, 3, 5)),
    "addbmm": (torch.addbmm, lambda: (rand((3, 5), seed=3), rand((2, 3, 4), seed=1), rand((2, 4, 5), seed=2)),
               (3, 5)),
    "mm": (torch.mm, lambda: (rand((3, 4), seed=1), rand((4, 5), seed=2)), (3, 5)),
    "mv": (torch.mv, lambda: (rand((3, 4), seed=1), rand((4,), seed=2)), (3,)),
    "addmv": (torch.addmv, lambda: (rand((3,), seed=3), rand((3, 4), seed=1), rand((4,), seed=2)), (3,)),
    "dot": (torch.dot, lambda: (rand((4,), seed=1), rand((4,), seed=2)), ()),
    "vdot": (torch.vdot, lambda: (rand((4,), seed=1), rand((4,), seed=2)), ()),
    "addr": (torch.addr, lambda: (rand((3, 5), seed=3), rand((3,), seed=1), rand((5,), seed=2)), (3, 5)),
}


@pytest.mark.parametrize("name", OUT_CASES)
def test_out_variants(stats, name):
    fn, make, shape = OUT_CASES[name]
    args = make()
    expected = fn(*args)
    out = torch.empty(0, device="emu")                                   # zero elements: resized
    assert fn(*map(emu, args), out=out) is out
    torch.testing.assert_close(out.cpu(), expected, **TOL[torch.float32])
    if len(shape) >= 2:                                                  # non-contiguous out keeps its strides
        base = torch.full(tuple(reversed(shape)), 7.0, device="emu")
        out = base.permute(*reversed(range(len(shape))))
        strides = out.stride()
        fn(*map(emu, args), out=out)
        assert out.stride() == strides
        torch.testing.assert_close(out.cpu(), expected, **TOL[torch.float32])
    out = torch.zeros(7, device="emu")                                   # wrong shape: resized with a warning
    with pytest.warns(UserWarning, match="was resized"):
        fn(*map(emu, args), out=out)
    assert out.shape == expected.shape
    keep = torch.full((2,), 3.0, dtype=torch.float16, device="emu")
    with pytest.raises(RuntimeError, match="dtype|can't be cast"):
        fn(*map(emu, args), out=torch.empty(shape, dtype=torch.int32, device="emu"))
    assert keep.cpu().eq(3).all()
    overload = "aten::addr.out" if name == "addr" else f"aten::{name}.out"
    assert stats.native(overload) == (3 if len(shape) >= 2 else 2)
    stats.no_fallback()


def test_out_overlapping_inputs_rejected():
    x = emu(rand((4, 8)))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        torch.mm(x[:, :4], x[:, 2:6], out=x[:, 1:5])
    b = emu(rand((2, 4, 4)))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        y = emu(rand((2, 4, 8)))
        torch.bmm(y[:, :, :4], y[:, :, :4], out=y[:, :, 2:6])
    # An exact alias is allowed (as on CPU) and still correct: inputs are read before out is written.
    expected = torch.bmm(b.cpu(), b.cpu())
    torch.testing.assert_close(torch.bmm(b, b, out=b).cpu(), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.mv(x[:, :4], x[0, :4], out=torch.zeros(1, device="emu").expand(4))


def test_in_place_forms(stats):
    b1, b2 = rand((2, 3, 4), seed=1), rand((2, 4, 5), seed=2)
    cases = [("baddbmm_", rand((2, 3, 5), seed=3), (b1, b2), dict(beta=0.5, alpha=2)),
             ("addbmm_", rand((3, 5), seed=4), (b1, b2), dict(alpha=-1)),
             ("addmm_", rand((3, 5), seed=5), (b1[0], b2[0]), dict(beta=2)),
             ("addmv_", rand((3,), seed=6), (b1[0], b2[0, :, 0]), {}),
             ("addr_", rand((3, 5), seed=7), (b1[0, :, 0], b2[0, 0]), dict(alpha=3))]
    for name, self, args, kwargs in cases:
        expected = getattr(self.clone(), name)(*args, **kwargs)
        base = emu(self)
        view = base[:]  # an alias: the update is visible through it
        assert getattr(base, name)(*map(emu, args), **kwargs) is base
        torch.testing.assert_close(view.cpu(), expected, rtol=1e-5, atol=1e-5)
        assert stats.native(f"aten::{name}") == 1
    with pytest.raises(RuntimeError, match="Bad in-place call"):
        emu(rand((3, 1))).baddbmm_(emu(b1[:1]), emu(b2[:1]))
    stats.no_fallback()


# ------------------------------------------------------------------------------ errors
ERROR_CASES = {
    "bmm_dtype": lambda d: torch.bmm(rand((2, 3, 4)).to(d), rand((2, 4, 5), torch.float64).to(d)),
    "bmm_shape": lambda d: torch.bmm(rand((2, 3, 4)).to(d), rand((2, 3, 4)).to(d)),
    "bmm_rank": lambda d: torch.bmm(rand((3, 4)).to(d), rand((2, 4, 5)).to(d)),
    "baddbmm_bias": lambda d: torch.baddbmm(rand((4, 5)).to(d), rand((2, 3, 4)).to(d), rand((2, 4, 5)).to(d)),
    "baddbmm_dtype": lambda d: torch.baddbmm(rand((3, 5), torch.float64).to(d), rand((2, 3, 4)).to(d),
                                             rand((2, 4, 5)).to(d)),
    "addbmm_batches": lambda d: torch.addbmm(rand((3, 5)).to(d), rand((2, 3, 4)).to(d), rand((3, 4, 5)).to(d)),
    "mv_size": lambda d: torch.mv(rand((3, 4)).to(d), rand((5,)).to(d)),
    "mv_rank": lambda d: torch.mv(rand((3, 4)).to(d), rand((4, 1)).to(d)),
    "mv_dtype": lambda d: torch.mv(rand((3, 4)).to(d), rand((4,), torch.float64).to(d)),
    "addmv_bias": lambda d: torch.addmv(rand((4,)).to(d), rand((3, 4)).to(d), rand((4,)).to(d)),
    "dot_size": lambda d: torch.dot(rand((3,)).to(d), rand((4,)).to(d)),
    "dot_rank": lambda d: torch.dot(rand((3, 1)).to(d), rand((3,)).to(d)),
    "dot_dtype": lambda d: torch.dot(rand((3,)).to(d), rand((3,), torch.float64).to(d)),
    "addr_rank": lambda d: torch.addr(rand((3, 4)).to(d), rand((3, 1)).to(d), rand((4,)).to(d)),
    "addr_bias": lambda d: torch.addr(rand((3, 4)).to(d), rand((3,)).to(d), rand((5,)).to(d)),
    "addr_int_alpha": lambda d: torch.addr(*(t.to(d) for t in (torch.ones(3, 4, dtype=torch.int64),
                                                                torch.ones(3, dtype=torch.int64),
                                                                torch.ones(4, dtype=torch.int64))), alpha=0.5),
    "addr_bool_beta": lambda d: torch.addr(rand((3, 4)).to(d), rand((3,)).to(d), rand((4,)).to(d), beta=True),
}


@pytest.mark.parametrize("name", ERROR_CASES)
def test_errors_match_cpu(name):
    with pytest.raises(RuntimeError) as cpu_error:
        ERROR_CASES[name]("cpu")
    with pytest.raises(type(cpu_error.value)) as emu_error:
        ERROR_CASES[name]("emu")
    assert str(emu_error.value).split("\n")[0].endswith(str(cpu_error.value).split("\n")[0]), \
        (str(emu_error.value), str(cpu_error.value))


def test_error_leaves_out_unchanged():
    out = emu(torch.full((2, 3, 5), 4.0))
    with pytest.raises(RuntimeError):
        torch.bmm(emu(rand((2, 3, 4))), emu(rand((2, 3, 4))), out=out)
    assert out.cpu().eq(4).all()


# ------------------------------------------------------------------------------ autograd and composites
AUTOGRAD_CASES = {
    "bmm": (torch.bmm, [(2, 3, 4), (2, 4, 5)], {}),
    "baddbmm": (torch.baddbmm, [(2, 3, 5), (2, 3, 4), (2, 4, 5)], dict(beta=0.5, alpha=2)),
    "addbmm": (torch.addbmm, [(3, 5), (2, 3, 4), (2, 4, 5)], dict(beta=2, alpha=-1)),
    "mv": (torch.mv, [(3, 4), (4,)], {}),
    "addmv": (torch.addmv, [(3,), (3, 4), (4,)], dict(beta=3)),
    "dot": (torch.dot, [(5,), (5,)], {}),
    "vdot": (torch.vdot, [(5,), (5,)], {}),
    "addr": (torch.addr, [(3, 4), (3,), (4,)], dict(alpha=2)),
    "outer": (torch.outer, [(3,), (4,)], {}),
}


@pytest.mark.parametrize("name", AUTOGRAD_CASES)
def test_autograd_matches_cpu(stats, name):
    fn, shapes, kwargs = AUTOGRAD_CASES[name]
    cpu = [rand(s, seed=i).requires_grad_(True) for i, s in enumerate(shapes)]
    dev = [emu(t.detach()).requires_grad_(True) for t in cpu]
    yc, ye = fn(*cpu, **kwargs), fn(*dev, **kwargs)
    g = rand(yc.shape, seed=9)
    yc.backward(g)
    ye.backward(emu(g))
    torch.testing.assert_close(ye.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-5)
    for tc, te in zip(cpu, dev):
        torch.testing.assert_close(te.grad.cpu(), tc.grad, rtol=1e-5, atol=1e-5)
    stats.no_fallback()


RANKS = [(4,), (3, 4), (2, 3, 4), (2, 2, 3, 4)]


@pytest.mark.parametrize("left", RANKS, ids=str)
@pytest.mark.parametrize("right", [(4,), (4, 5), (2, 4, 5), (2, 2, 4, 5)], ids=str)
def test_matmul_every_rank_pair_is_native(stats, left, right):
    a, b = rand(left, seed=1).requires_grad_(True), rand(right, seed=2).requires_grad_(True)
    ea, eb = emu(a.detach()).requires_grad_(True), emu(b.detach()).requires_grad_(True)
    torch.emu.set_host_fallback(False)
    try:
        got = torch.matmul(ea, eb)
        got.sum().backward()
    finally:
        torch.emu.set_host_fallback(True)
    expected = torch.matmul(a, b)
    expected.sum().backward()
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ea.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(eb.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)
    ops = ("aten::dot", "aten::mv", "aten::mm", "aten::bmm")
    assert sum(stats.native(op) for op in ops) >= 1
    stats.no_fallback()


@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 8)], ids=str)
def test_linear_forward_backward_native(stats, shape):
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 5)
    dev_layer = torch.nn.Linear(8, 5).to("emu")
    dev_layer.load_state_dict(layer.state_dict())
    x = rand(shape, seed=3)
    expected = layer(x)
    expected.square().sum().backward()
    torch.emu.set_host_fallback(False)
    try:
        got = dev_layer(emu(x))
        got.square().sum().backward()
    finally:
        torch.emu.set_host_fallback(True)
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dev_layer.weight.grad.cpu(), layer.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dev_layer.bias.grad.cpu(), layer.bias.grad, rtol=1e-5, atol=1e-5)
    assert stats.native("aten::addmm") == 1 and stats.native("aten::mm") >= 1
    stats.no_fallback()


@pytest.mark.parametrize("variant", ["plain", "causal", "bool_mask", "float_mask"])
def test_scaled_dot_product_attention_math_path(stats, variant):
    # SDPA's math path, chosen with sdpa_kernel(MATH) (the default on emu is the fused kernel,
    # test_fused_attention.py): bmm, _softmax, mul, add... all native.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (rand((2, 3, 6, 8), seed=i).requires_grad_(True) for i in range(3))
    kwargs = {"causal": dict(is_causal=True), "plain": {},
              "bool_mask": dict(attn_mask=torch.ones(6, 6, dtype=torch.bool).tril()),
              "float_mask": dict(attn_mask=rand((6, 6), seed=5))}[variant]
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    expected.sum().backward()
    dev = [emu(t.detach()).requires_grad_(True) for t in (q, k, v)]
    ekw = {n: (emu(t) if isinstance(t, torch.Tensor) else t) for n, t in kwargs.items()}
    torch.emu.set_host_fallback(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            got = F.scaled_dot_product_attention(*dev, **ekw)
        got.sum().backward()
    finally:
        torch.emu.set_host_fallback(True)
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    for tc, te in zip((q, k, v), dev):
        torch.testing.assert_close(te.grad.cpu(), tc.grad, rtol=1e-4, atol=1e-5)
    assert stats.native("aten::bmm") >= 2
    stats.no_fallback()


def test_cost_model_counts_batched_flops():
    from emulator.config import load_preset
    from emulator.device import CostDevice
    from emulator.kernels.library import KERNELS, Operand

    Device = CostDevice(load_preset("tiny").device)   # the cost model without device memory
    a = Operand(0, 8, (3, 4, 5), (20, 5, 1))
    b = Operand(0, 8, (3, 5, 6), (30, 6, 1))
    out = Operand(0, 8, (3, 4, 6), (24, 6, 1))
    ns, moved, flops = KERNELS["bmm"].cost(Device, out, a, b, None, 0.0, 1.0)[:3]
    # Tiny has two cores: the batch of 3 is spread over both, and the cost covers that work.
    work = Device.matrix_engine.gemm(4, 6, 5, 8, batch=3)
    assert flops == 2 * 3 * 4 * 5 * 6 and work.cores == 2 and ns >= work.ns > 0
    assert moved == (60 + 90 + 72) * 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert KERNELS["addbmm"].engine == "matrix" and KERNELS["addr"].engine == "vector"
