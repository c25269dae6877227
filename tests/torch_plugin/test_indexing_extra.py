"""Indexing extras on emu against CPU (torch_plugin/ops/indexing.py second block, emulator/kernels/indexing.pyx).

Ops: index_reduce (prod/mean/amax/amin, include_self), take, put_ (and put), repeat_interleave,
isin, nonzero_static, _unique2 (torch.unique), unique_consecutive, hash_tensor.

Stated tolerances (torch.testing.assert_close): every op here is exact (rtol=atol=0) except
index_reduce prod/mean on floats: the device applies one contribution at a time in the
iteration order and rounds to the dtype after each step, as CPU's serial kernel does, so float32
and float64 are compared at rtol=1e-6 / 1e-12 and float16/bfloat16 at rtol = 2 eps (a rounding per
step; at most a few steps here). Every test checks that the op ran natively (no host fallback).
"""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_plugin  # noqa: F401
from plugin_testing import EXACT, check_operation_scope_fault, make, same

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
warnings.filterwarnings("ignore", message="index_reduce")


def emu(t):
    return t.to("emu") if isinstance(t, torch.Tensor) else t


def reduce_tol(dtype):
    return {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-6, atol=1e-6),
            torch.float16: dict(rtol=2 * 2 ** -10, atol=1e-3), torch.bfloat16: dict(rtol=2 * 2 ** -7, atol=1e-2)
            }.get(dtype, EXACT)


# -- index_reduce ---------------------------------------------------------------------------

@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_matches_cpu(reduce, dtype, include_self, stats):
    x = make(dtype, (5, 4), seed=1)
    src = make(dtype, (4, 6), seed=2).t()  # (6, 4) transposed view: non-contiguous
    if dtype.is_floating_point:
        x = x / 4
        src = src / 4
        src[1, 2] = float("nan")
    index = torch.tensor([0, 4, 0, 2, 4, 0])
    expected = x.index_reduce(0, index, src, reduce, include_self=include_self)
    got = emu(x).index_reduce(0, emu(index), emu(src), reduce, include_self=include_self)
    same(got, expected, **reduce_tol(dtype))
    assert stats.native("aten::index_reduce") > 0
    stats.no_fallback()


def test_index_reduce_inplace_out_dim1_and_int32_index(stats):
    x = make(torch.float32, (3, 6), seed=3)
    src = make(torch.float32, (3, 4), seed=4)
    index = torch.tensor([5, 0, 5, 1], dtype=torch.int32)
    expected = x.clone().index_reduce_(1, index, src, "amax", include_self=False)
    got = emu(x)
    got.index_reduce_(1, emu(index), emu(src), "amax", include_self=False)
    same(got, expected)
    out = torch.empty(0, device="emu")
    torch.index_reduce(emu(x), 1, emu(index), emu(src), "mean", out=out)
    same(out, torch.index_reduce(x, 1, index, src, "mean"), **reduce_tol(torch.float32))
    strided = torch.zeros(6, 3, device="emu").t()
    torch.index_reduce(emu(x), 1, emu(index), emu(src), "prod", out=strided)
    assert strided.stride() == (1, 3)
    same(strided, torch.index_reduce(x, 1, index, src, "prod"), **reduce_tol(torch.float32))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.index_reduce(emu(x), 1, emu(index), emu(src), "prod", out=torch.empty(3, 6, dtype=torch.float64,
                                                                                      device="emu"))
    stats.no_fallback()


def test_index_reduce_errors_like_cpu():
    x, src = torch.zeros(3), torch.ones(1)
    for index, reduce, exc in ((torch.tensor([1]), "sum", RuntimeError), (torch.tensor([1.0]), "prod", RuntimeError),
                               (torch.tensor([[1]]), "prod", IndexError)):
        with pytest.raises(exc) as cpu_err:
            x.clone().index_reduce_(0, index, src, reduce)
        with pytest.raises(exc) as emu_err:
            emu(x).index_reduce_(0, emu(index), emu(src), reduce)
        assert str(emu_err.value) == str(cpu_err.value)


# -- take, put_ -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_take_matches_cpu(dtype, stats):
    x = make(dtype, (4, 5), seed=5)
    index = torch.tensor([[0, 19, -1], [7, -20, 3]])
    same(torch.take(emu(x), emu(index)), torch.take(x, index))
    same(torch.take(emu(x).t(), emu(index)), torch.take(x.t(), index))         # non-contiguous self
    same(torch.take(emu(x), emu(index).t()), torch.take(x, index.t()))         # non-contiguous index
    same(torch.take(emu(x), emu(torch.zeros(0, dtype=torch.int64))), torch.take(x, torch.zeros(0, dtype=torch.int64)))
    assert stats.native("aten::take") > 0
    stats.no_fallback()


def test_take_out_and_errors(stats):
    x, index = make(torch.float32, (3, 3)), torch.tensor([1, 8])
    out = torch.empty(0, device="emu")
    torch.take(emu(x), emu(index), out=out)
    same(out, torch.take(x, index))
    with pytest.raises(RuntimeError, match="Expected a long tensor for index"):
        torch.take(emu(x), emu(index.int()))
    with pytest.raises(IndexError, match="tried to take from an empty tensor"):
        torch.take(torch.empty(0, device="emu"), emu(index))
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("accumulate", [False, True])
def test_put_matches_cpu(dtype, accumulate, stats):
    x = make(dtype, (4, 5), seed=6)
    index = torch.tensor([[0, 19, -1], [7, -20, 3]]) if accumulate else torch.tensor([[0, 19, -2], [7, 11, 3]])
    source = make(dtype, (3, 2), seed=7)
    for self_cpu in (x, x.t()):  # contiguous and transposed self (written through the view)
        expected = self_cpu.clone().put_(index, source, accumulate=accumulate)
        base = emu(x.clone())
        target = base if self_cpu is x else base.t()
        target.put_(emu(index), emu(source), accumulate=accumulate)
        same(target, expected)
    same(torch.put(emu(x), emu(index), emu(source), accumulate), torch.put(x, index, source, accumulate))
    assert stats.native("aten::put_") > 0
    stats.no_fallback()


def test_put_errors_leave_self_unchanged():
    x = torch.arange(3.0)
    cases = [(torch.tensor([1, 2]), torch.tensor([1.0]), IndexError),
             (torch.tensor([1]), torch.tensor([1.0], dtype=torch.float64), RuntimeError),
             (torch.tensor([1], dtype=torch.int32), torch.tensor([1.0]), RuntimeError)]
    for index, source, exc in cases:
        with pytest.raises(exc) as cpu_err:
            x.clone().put_(index, source)
        e = emu(x)
        with pytest.raises(exc) as emu_err:
            e.put_(emu(index), emu(source))
        assert str(emu_err.value) == str(cpu_err.value)
        same(e, x)


# -- repeat_interleave ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_repeat_interleave_matches_cpu(dtype, stats):
    repeats = torch.tensor([2, 0, 3, 1], dtype=dtype)
    same(torch.repeat_interleave(emu(repeats)), torch.repeat_interleave(repeats))
    same(torch.repeat_interleave(emu(repeats), output_size=6), torch.repeat_interleave(repeats, output_size=6))
    same(torch.repeat_interleave(emu(torch.zeros(0, dtype=dtype))), torch.repeat_interleave(torch.zeros(0, dtype=dtype)))
    x = make(torch.float32, (4, 3))
    same(torch.repeat_interleave(emu(x), emu(repeats), dim=0), torch.repeat_interleave(x, repeats, dim=0))
    same(torch.repeat_interleave(emu(x), 2, dim=1), torch.repeat_interleave(x, 2, dim=1))
    assert stats.native("aten::repeat_interleave.Tensor") > 0
    stats.no_fallback()


def test_repeat_interleave_errors_like_cpu():
    for repeats in (torch.tensor([1, -1]), torch.tensor([[1]]), torch.tensor([1.0])):
        with pytest.raises((RuntimeError, NotImplementedError)) as cpu_err:
            torch.repeat_interleave(repeats)
        with pytest.raises((RuntimeError, NotImplementedError)) as emu_err:
            torch.repeat_interleave(emu(repeats))
        if repeats.dtype != torch.float32:
            assert str(emu_err.value) == str(cpu_err.value)


# -- isin -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("invert", [False, True])
def test_isin_matches_cpu(dtype, invert, stats):
    elements = make(dtype, (6, 7), seed=8)
    test = torch.cat([elements.flatten()[::5], make(dtype, (9,), seed=9)])
    if dtype.is_floating_point:
        elements[0, 0] = float("nan")
        test[0] = float("nan")
        elements[1, 1], test[1] = -0.0, 0.0
    for e, t in ((elements, test), (elements.t(), test[::2]), (elements[:, :0], test), (elements, test[:0])):
        same(torch.isin(emu(e), emu(t), invert=invert), torch.isin(e, t, invert=invert))
    scalar = elements[2, 3].item()
    same(torch.isin(emu(elements), scalar, invert=invert), torch.isin(elements, scalar, invert=invert))
    same(torch.isin(scalar, emu(test), invert=invert), torch.isin(scalar, test, invert=invert))
    assert stats.native("aten::isin.Tensor_Tensor") > 0
    stats.no_fallback()


def test_isin_type_promotion_and_out(stats):
    cases = [(torch.tensor([1, 2, 300], dtype=torch.int16), torch.tensor([44.0, 300.0], dtype=torch.float16)),
             (torch.tensor([1, 2, 255], dtype=torch.uint8), torch.tensor([-1, 2], dtype=torch.int8)),
             (torch.tensor([1.5, 2.0]), torch.tensor([2], dtype=torch.int64))]
    for e, t in cases:
        same(torch.isin(emu(e), emu(t)), torch.isin(e, t))
    same(torch.isin(emu(torch.tensor([1, 2])), 1.5), torch.isin(torch.tensor([1, 2]), 1.5))
    out = torch.empty(0, dtype=torch.bool, device="emu")
    torch.isin(emu(cases[0][0]), emu(cases[0][1]), out=out)
    same(out, torch.isin(*cases[0]))
    with pytest.raises(RuntimeError, match="Bool"):
        torch.isin(emu(torch.tensor([True])), emu(torch.tensor([True])))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.isin(emu(cases[0][0]), emu(cases[0][1]), out=torch.empty(3, device="emu"))
    stats.no_fallback()


# -- nonzero_static -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.uint8, torch.bool])
def test_nonzero_static_matches_cpu(dtype, stats):
    x = make(dtype, (4, 5), seed=10)
    if dtype != torch.bool:
        x[x.abs() < (2 if dtype.is_floating_point else 300)] = 0
    for size, fill in ((3, -1), (20, -7), (0, -1), (30, 5)):
        same(torch.nonzero_static(emu(x), size=size, fill_value=fill), torch.nonzero_static(x, size=size,
                                                                                           fill_value=fill))
        same(torch.nonzero_static(emu(x).t(), size=size), torch.nonzero_static(x.t(), size=size))
    same(torch.nonzero_static(emu(torch.zeros(0, 3)), size=2), torch.nonzero_static(torch.zeros(0, 3), size=2))
    same(torch.nonzero_static(emu(torch.tensor(2.0)), size=2), torch.nonzero_static(torch.tensor(2.0), size=2))
    out = torch.empty(0, dtype=torch.int64, device="emu")
    torch.nonzero_static(emu(x), size=4, out=out)
    same(out, torch.nonzero_static(x, size=4))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.nonzero_static(emu(x), size=-1)
    assert stats.native("aten::nonzero_static") > 0
    stats.no_fallback()


# -- unique ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_unique_matches_cpu(dtype, stats):
    x = make(dtype, (6, 5), seed=11)
    x = (x / 4).round().to(dtype) if dtype.is_floating_point else x % 7 if dtype != torch.bool else x
    if dtype.is_floating_point:
        x[0, 0] = x[3, 1] = float("nan")
    for t in (x, x.t(), x[:0], x[2, 2]):
        for inv in (False, True):
            for counts in (False, True):
                got = torch.unique(emu(t), return_inverse=inv, return_counts=counts)
                expected = torch.unique(t, return_inverse=inv, return_counts=counts)
                if inv and dtype.is_floating_point:
                    # Each NaN is its own value; which NaN output an input NaN maps to depends on
                    # CPU's unstable std::sort. The contract: values[inverse] rebuilds the input, and
                    # every non-NaN element maps where CPU maps it.
                    got, expected = list(got), list(expected)
                    g_inv, e_inv = got.pop(1).cpu(), expected.pop(1)
                    same(got[0][g_inv.to("emu")], t)
                    nan = t.isnan()
                    assert torch.equal(g_inv[~nan], e_inv[~nan])
                same(got, expected)
                same(torch._unique2(emu(t), False, False, counts), torch._unique2(t, False, False, counts))
    assert stats.native("aten::_unique2") > 0
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int8, torch.bool])
def test_unique_consecutive_matches_cpu(dtype, stats):
    x = torch.tensor([1, 1, 2, 2, 2, 0, 1, 1, 3, 3]).to(dtype)
    if dtype.is_floating_point:
        x[3] = x[4] = float("nan")  # NaNs are never equal
    for t in (x, x.view(2, 5).t(), x[:0]):
        same(torch.unique_consecutive(emu(t), return_inverse=True, return_counts=True),
             torch.unique_consecutive(t, return_inverse=True, return_counts=True))
        same(torch.unique_consecutive(emu(t)), torch.unique_consecutive(t))
    same(torch.unique_consecutive(emu(x), dim=0), torch.unique_consecutive(x, dim=0))
    assert stats.native("aten::unique_consecutive") > 0
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool])
def test_unique_with_dim_matches_cpu(dtype, stats):
    x = torch.tensor([[1, 2], [1, 2], [0, 5], [1, 2], [0, 3], [0, 3]]).to(dtype)
    if dtype.is_floating_point:
        x[1, 1] = float("nan")  # that row is then unequal to every other
        x[4, 0] = -0.0
    cube = make(dtype, (3, 4, 5), seed=13)
    cube = cube if dtype == torch.bool else (cube.abs() > cube.abs().median()).to(dtype)
    for t in (x, x.t(), cube, cube.transpose(0, 2)):
        for d in range(-1, t.dim()):
            same(torch.unique(emu(t), dim=d, return_inverse=True, return_counts=True),
                 torch.unique(t, dim=d, return_inverse=True, return_counts=True))
            same(torch.unique_consecutive(emu(t), dim=d, return_inverse=True, return_counts=True),
                 torch.unique_consecutive(t, dim=d, return_inverse=True, return_counts=True))
            same(torch.ops.aten.unique_dim_consecutive(emu(t), d), torch.ops.aten.unique_dim_consecutive(t, d))
    same(torch.ops.aten.unique_dim(emu(torch.zeros(0, 3)), 0), torch.ops.aten.unique_dim(torch.zeros(0, 3), 0))
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        torch.ops.aten.unique_dim(emu(torch.zeros(3, 0)), 0)
    assert stats.native("aten::unique_dim") > 0 and stats.native("aten::unique_consecutive") > 0
    stats.no_fallback()


# -- hash_tensor ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_hash_tensor_matches_cpu(dtype, stats):
    x = make(dtype, (4, 6, 3), seed=12)
    if dtype.is_floating_point:
        x[0, 0, 0] = float("nan")
        x[1, 1, 1] = -0.0
    for kwargs in ({}, dict(dim=1), dict(dim=(0, 2), keepdim=True), dict(dim=-1)):
        same(torch.hash_tensor(emu(x), **kwargs), torch.hash_tensor(x, **kwargs))
        same(torch.hash_tensor(emu(x).transpose(0, 2), **kwargs), torch.hash_tensor(x.transpose(0, 2), **kwargs))
    same(torch.hash_tensor(emu(x[0, 0, 0])), torch.hash_tensor(x[0, 0, 0]))
    same(torch.hash_tensor(emu(torch.zeros(3, 0, dtype=dtype)), dim=0),
         torch.hash_tensor(torch.zeros(3, 0, dtype=dtype), dim=0))
    assert stats.native("aten::hash_tensor") > 0
    stats.no_fallback()


def test_hash_tensor_out_and_errors(stats):
    x = make(torch.float32, (4, 5))
    out = torch.empty(0, dtype=torch.uint64, device="emu")
    torch.hash_tensor(emu(x), dim=0, out=out)
    same(out, torch.hash_tensor(x, dim=0))
    strided = torch.empty(10, dtype=torch.uint64, device="emu")[::2]
    torch.hash_tensor(emu(x), dim=0, out=strided)
    assert strided.stride() == (2,)
    same(strided, torch.hash_tensor(x, dim=0))
    for call, exc in ((lambda t: torch.hash_tensor(t, mode=1), RuntimeError),):
        with pytest.raises(exc) as cpu_err:
            call(x)
        with pytest.raises(exc) as emu_err:
            call(emu(x))
        assert str(emu_err.value) == str(cpu_err.value)
    with pytest.raises(RuntimeError, match="reduction dim to be specified"):
        torch.hash_tensor(torch.zeros(0, device="emu"))
    stats.no_fallback()


# -- index values checked on the device -------------------------------------------------------

FAULTS = [
    ("take", lambda e: torch.take(e, emu(torch.tensor([3, 20]))), "out of range: tried to access index 20 on a "
                                                                  "tensor of 20 elements."),
    ("put_", lambda e: e.put_(emu(torch.tensor([-21])), emu(torch.tensor([1.0]))), "tried to access index -21"),
    ("index_reduce_", lambda e: e.index_reduce_(0, emu(torch.tensor([4])), emu(torch.ones(1, 5)), "amax"),
     "index out of range in self"),
    ("repeat_interleave", lambda e: torch.repeat_interleave(emu(torch.tensor([1, 2])), output_size=5),
     "allocated size does not match required size"),
]


@pytest.mark.parametrize("name,fn,message", FAULTS, ids=[f[0] for f in FAULTS])
def test_bad_index_values_are_an_operation_scope_error_and_write_nothing(name, fn, message):
    # An operation-scope INVALID_ARGUMENT (formerly a sticky KERNEL_FAULT, issue 18): no recovery.
    check_operation_scope_fault(name, fn, message)
