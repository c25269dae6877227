"""Tests of the device kernel library (emulator/kernels/*.pyx) against PyTorch CPU.

Kernels take raw addresses and element strides; the tests build numpy arrays,
hand over ``arr.ctypes.data`` and ``arr.strides // itemsize``, and compare to
the same operation done by torch.  Needs the extensions built in place, e.g.
``cythonize -i -3 emulator/kernels/*.pyx``.
"""
import math

import ml_dtypes
import numpy as np
import pytest
import torch

from emulator.kernels import dtypes as D
from emulator.kernels import elementwise, gemm, random, strided

NP = {D.BOOL: np.bool_, D.UINT8: np.uint8, D.INT8: np.int8, D.INT16: np.int16, D.INT32: np.int32,
      D.INT64: np.int64, D.FLOAT16: np.float16, D.BFLOAT16: ml_dtypes.bfloat16,
      D.FLOAT32: np.float32, D.FLOAT64: np.float64}
TORCH = {D.BOOL: torch.bool, D.UINT8: torch.uint8, D.INT8: torch.int8, D.INT16: torch.int16,
         D.INT32: torch.int32, D.INT64: torch.int64, D.FLOAT16: torch.float16,
         D.BFLOAT16: torch.bfloat16, D.FLOAT32: torch.float32, D.FLOAT64: torch.float64}
ALL = list(range(10))
FLOATS = [D.FLOAT16, D.BFLOAT16, D.FLOAT32, D.FLOAT64]
INTS = [D.UINT8, D.INT8, D.INT16, D.INT32, D.INT64]


# ---------------------------------------------------------------- helpers

def code_of(arr):
    return next(c for c, t in NP.items() if np.dtype(t) == arr.dtype)


def st(arr):
    """Element strides of a numpy array."""
    return tuple(s // arr.itemsize for s in arr.strides)


def ptr(arr):
    return arr.ctypes.data


def to_torch(arr):
    arr = np.ascontiguousarray(arr)
    if arr.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def from_torch(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def assert_same(got, want):
    """Bit-exact equality, except that any NaN matches any NaN."""
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "fV" or got.dtype == ml_dtypes.bfloat16:
        with np.errstate(invalid="ignore"):
            gf, wf = got.astype(np.float64), want.astype(np.float64)
        gn, wn = np.isnan(gf), np.isnan(wf)
        np.testing.assert_array_equal(gn, wn)
        ib = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.itemsize]
        bad = (got.view(ib) != want.view(ib)) & ~gn
        assert not bad.any(), f"mismatch at {np.argwhere(bad)[:5].tolist()}: {got[bad][:5]} vs {want[bad][:5]}"
    else:
        np.testing.assert_array_equal(got, want)


def copy(dst, src, shape=None):
    strided.copy_cast(ptr(dst), code_of(dst), st(dst), ptr(src), code_of(src), st(src),
                      dst.shape if shape is None else shape)


def source_values(code):
    """Representative values of a source dtype (as an array of that dtype)."""
    if code == D.BOOL:
        return np.array([True, False, True, True], np.bool_)
    if code in INTS:
        vals = [0, 1, -1, 2, 127, -128, 255, 256, 300, -70000, 2**31 - 1, -2**31, 2**40 + 1,
                2**53 + 1, 2**62 + 12345, -2**63]
        return np.array(vals, np.int64).astype(NP[code])       # wraps, like a C cast
    rng = np.random.default_rng(code)
    vals = [-3.7, 0.0, -0.0, 1.5, 200.2, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-5, 6e-8,
            -2.5e-8, 3.0e38, 1e-40, 2.0**-24, 0.1, 1 / 3]
    vals += list(rng.standard_normal(300) * 10.0 ** rng.integers(-9, 6, 300))
    with np.errstate(over="ignore"):
        return np.array(vals, np.float64).astype(NP[code])


def int_safe(vals, dst):
    """Float source values whose cast to integer dtype dst is defined behaviour
    in torch (finite, within int32, and -- truncated -- representable)."""
    f = vals.astype(np.float64)
    keep = np.isfinite(f) & (np.abs(f) < 2**31)
    if dst != D.BOOL:
        info = np.iinfo(NP[dst])
        t = np.trunc(f)
        keep &= (t >= info.min) & (t <= info.max)
    return vals[keep]


# ---------------------------------------------------------------- conversions

def test_f16_to_f32_exhaustive():
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    out = np.empty(65536, np.float32)
    copy(out, h)
    assert_same(out, h.astype(np.float32))


def test_f32_to_f16_and_bf16_random_bits():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    # Add exact ties and the subnormal / overflow boundaries.
    edge = np.array([0x33000000, 0x33000001, 0x387FC000, 0x38800000, 0x477FF000, 0x477FEFFF,
                     0x477FE000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001, 0x80000000,
                     0x3F808000, 0x3F818000, 0x7F7FFFFF], np.uint32)
    f = np.concatenate([bits, edge]).view(np.float32)
    for code in (D.FLOAT16, D.BFLOAT16):
        out = np.empty(f.shape, NP[code])
        copy(out, f)
        assert_same(out, from_torch(to_torch(f).to(TORCH[code])))


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_copy_cast_all_pairs_match_torch(src, dst):
    vals = source_values(src)
    if src in FLOATS and dst not in FLOATS:
        vals = int_safe(vals, dst)
    out = np.zeros(vals.shape, NP[dst])
    copy(out, vals)
    assert_same(out, from_torch(to_torch(vals).to(TORCH[dst])))


def test_copy_broadcast_transpose_and_noncontiguous():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    # Broadcast a row across 5 rows (stride 0), into a transposed float16 destination.
    dst = np.zeros((4, 5), np.float16).T           # logical (5, 4), column-major
    strided.copy_cast(ptr(dst), D.FLOAT16, st(dst), ptr(src), D.FLOAT32, (0, 1), (5, 4))
    np.testing.assert_array_equal(dst, np.broadcast_to(src[0], (5, 4)).astype(np.float16))
    # Transposed + sliced source, same dtype (per-element path).
    big = np.arange(200, dtype=np.int64).reshape(10, 20)
    view = big[::2, 1::3].T
    out = np.empty(view.shape, np.int64)
    copy(out, view)
    np.testing.assert_array_equal(out, view)
    # Contiguous same dtype (memmove path), 3-d.
    a = np.random.default_rng(1).standard_normal((3, 4, 5))
    b = np.empty_like(a)
    copy(b, a)
    assert_same(b, a)


def test_copy_negative_strides():
    a = np.arange(24, dtype=np.int16).reshape(4, 6)
    view = a[::-1, ::-2]                            # negative element strides
    out = np.empty(view.shape, np.float32)
    copy(out, view)
    np.testing.assert_array_equal(out, view.astype(np.float32))


def test_copy_rank0_zero_size_and_errors():
    a = np.array(2.5, np.float64)
    b = np.array(0, np.int32)
    copy(b, a, ())
    assert b == 2
    strided.copy_cast(0, D.FLOAT32, (1, 1), 0, D.FLOAT32, (1, 1), (0, 7))   # nothing touched
    with pytest.raises(ValueError):
        strided.copy_cast(ptr(b), 42, (), ptr(a), D.FLOAT64, (), ())
    with pytest.raises(ValueError):
        strided.copy_cast(ptr(b), D.INT32, (1,), ptr(a), D.FLOAT64, (), ())
    with pytest.raises(ValueError):
        strided.copy_cast(ptr(b), D.INT32, (0,) * 65, ptr(a), D.FLOAT64, (0,) * 65, (1,) * 65)  # past MAX_RANK (64)
    c = np.zeros((1,) * 12, np.float32)
    strided.copy_cast(ptr(c), D.FLOAT32, (0,) * 12, ptr(a), D.FLOAT64, (0,) * 12, (1,) * 12)
    assert c.flat[0] == 2.5


@pytest.mark.parametrize("code", ALL)
def test_fill_matches_torch(code):
    for value in (True, 0, 1, -3, 300, 2**40 + 7, 1.5, -2.7, 200.2, float("nan"), float("inf")):
        if code in INTS and isinstance(value, float) and not math.isfinite(value):
            with pytest.raises(ValueError):
                strided.fill(ptr(np.zeros(1, NP[code])), code, (1,), (1,), value)
            continue
        if code not in FLOATS and code != D.BOOL and isinstance(value, float):
            info = np.iinfo(NP[code])
            if not info.min <= math.trunc(value) <= info.max:
                continue                                  # UB in C / torch
        arr = np.full((6, 4), 7, NP[code])
        view = arr[::2, ::2]                              # non-contiguous
        strided.fill(ptr(view), code, st(view), view.shape, value)
        try:
            want = from_torch(torch.empty(view.shape, dtype=TORCH[code]).fill_(value))
        except RuntimeError:
            # torch refuses out-of-range scalars; the kernel does a C cast
            # (ints wrap, float16 overflows to inf).
            with np.errstate(over="ignore"):
                want = np.full(view.shape, np.array(value, np.int64).astype(NP[code]))
        assert_same(view, want)
        assert (arr[1::2] == np.array(7, NP[code])).all()    # untouched elsewhere


def test_fill_rank0_and_broadcast_stride():
    a = np.zeros((), np.float32)
    strided.fill(ptr(a), D.FLOAT32, (), (), 3.25)
    assert a == 3.25
    b = np.zeros(3, np.int16)
    strided.fill(ptr(b), D.INT16, (0,), (5,), -2)         # all 5 writes hit element 0
    assert b.tolist() == [-2, 0, 0]


# ---------------------------------------------------------------- elementwise

def tensors(code, shape, seed):
    rng = np.random.default_rng(seed)
    if code == D.BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if code in INTS:
        lo, hi = (0, 200) if code == D.UINT8 else (-100, 100)
        return rng.integers(lo, hi, shape).astype(NP[code])
    return (rng.standard_normal(shape) * 4).astype(NP[code])


def run_binary(op, a, b, out_code, compute, alpha=1, shape=None):
    shape = np.broadcast_shapes(a.shape, b.shape) if shape is None else shape
    out = np.zeros(shape, NP[out_code])
    ab, bb = np.broadcast_to(a, shape), np.broadcast_to(b, shape)   # 0 strides
    elementwise.binary(op, ptr(out), out_code, st(out), ptr(ab), code_of(a), st(ab),
                       ptr(bb), code_of(b), st(bb), shape, compute, alpha)
    return out


TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                "maximum": torch.maximum, "minimum": torch.minimum}


@pytest.mark.parametrize("code", [D.FLOAT32, D.FLOAT64, D.FLOAT16, D.BFLOAT16, D.INT32, D.INT64,
                                  D.INT8, D.UINT8, D.INT16, D.BOOL])
@pytest.mark.parametrize("op", list(TORCH_BINARY))
def test_binary_same_dtype_matches_torch(op, code):
    # A multiple of 64 elements: PyTorch's vectorized body uses a fused
    # multiply-add for alpha (as the kernel does) but its scalar tail does not.
    a = tensors(code, (8, 40), 1)
    b = tensors(code, (8, 40), 2)
    if code in FLOATS:
        a[0, :4] = [np.nan, 0.0, -0.0, np.inf]
        b[0, :4] = [1.0, -0.0, 0.0, 1.0]
        if op in ("maximum", "minimum"):
            # PyTorch's scalar and vectorized paths disagree on +0/-0 ties.
            b[0, 1:3] = [1.0, -1.0]
    bad = (code == D.BOOL and op in ("sub", "div")) or (code not in FLOATS and op == "div")
    if bad:
        with pytest.raises(ValueError):
            run_binary(op, a, b, code, code)
        return
    alphas = [1] if op not in ("add", "sub") or code == D.BOOL else [1, 3] if code not in FLOATS else [1, 0.5, -2.3]
    for alpha in alphas:
        got = run_binary(op, a, b, code, code, alpha)
        kw = {"alpha": alpha} if alpha != 1 else {}
        want = from_torch(TORCH_BINARY[op](to_torch(a), to_torch(b), **kw))
        assert_same(got, want)


def test_binary_broadcast_transposed_and_mixed_dtypes():
    a = np.random.default_rng(3).standard_normal((3, 1, 5)).astype(np.float32)
    b = np.arange(4, dtype=np.int32).reshape(4, 1)
    got = run_binary("add", a, b, D.FLOAT32, D.FLOAT32, alpha=2)
    assert_same(got, from_torch(torch.add(to_torch(a), to_torch(b), alpha=2)))
    # Transposed inputs, int compute, wider int output: wraps at int8 first.
    x = np.full((6, 4), 100, np.int8).T
    y = np.arange(24, dtype=np.int8).reshape(4, 6)
    got = run_binary("add", x, y, D.INT32, D.INT8)
    assert_same(got, (to_torch(x) + to_torch(y)).to(torch.int32).numpy())
    # bf16 + f32 -> f32 (promotion done by caller), bf16 out from f32 compute.
    h = tensors(D.BFLOAT16, (5, 5), 4)
    f = tensors(D.FLOAT32, (5, 5), 5)
    got = run_binary("mul", h, f, D.BFLOAT16, D.FLOAT32)
    assert_same(got, from_torch((to_torch(h) * to_torch(f)).bfloat16()))
    # Bool compute with float output.
    p, q = tensors(D.BOOL, (9,), 6), tensors(D.BOOL, (9,), 7)
    got = run_binary("add", p, q, D.FLOAT32, D.BOOL)
    assert_same(got, (to_torch(p) + to_torch(q)).float().numpy())


def test_binary_large_contiguous_fast_path():
    a, b = tensors(D.FLOAT32, (100_003,), 8), tensors(D.FLOAT32, (100_003,), 9)
    for op in ("add", "sub", "mul"):
        assert_same(run_binary(op, a, b, D.FLOAT32, D.FLOAT32), from_torch(TORCH_BINARY[op](to_torch(a), to_torch(b))))


def test_binary_rank0_zero_size_and_errors():
    a, b = np.array(2.0, np.float32), np.array(3.0, np.float32)
    assert run_binary("mul", a, b, D.FLOAT32, D.FLOAT32, shape=()) == 6.0
    elementwise.binary("add", 0, D.FLOAT32, (1,), 0, D.FLOAT32, (1,), 0, D.FLOAT32, (1,), (0,), D.FLOAT32)
    with pytest.raises(ValueError):
        run_binary("pow", a, b, D.FLOAT32, D.FLOAT32, shape=())
    with pytest.raises(ValueError):
        run_binary("add", a, b, D.INT32, D.INT32, alpha=0.5, shape=())
    with pytest.raises(ValueError):
        run_binary("add", a, b, D.FLOAT32, 11, shape=())


def run_unary(op, a, out_code, compute):
    out = np.zeros(a.shape, NP[out_code])
    elementwise.unary(op, ptr(out), out_code, st(out), ptr(a), code_of(a), st(a), a.shape, compute)
    return out


@pytest.mark.parametrize("code", [D.FLOAT32, D.FLOAT64, D.FLOAT16, D.BFLOAT16, D.INT8, D.UINT8, D.INT32, D.INT64])
def test_unary_relu_exact(code):
    a = tensors(code, (5, 13), 10)
    if code in FLOATS:
        a[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    if code == D.INT8:
        a[0, 0] = -128
    got = run_unary("relu", a.T, code, code)      # transposed input
    want = from_torch(torch.relu(to_torch(a.T)))
    assert_same(got, want)


def test_unary_errors():
    b = np.array([True, False])
    with pytest.raises(ValueError, match="not supported for bool"):
        run_unary("relu", b, D.BOOL, D.BOOL)
    x = np.array([1.0, 2.0], np.float32)
    with pytest.raises(ValueError, match=r"unknown op 'exp' \(expected one of \('relu',\)\)"):
        run_unary("exp", x, D.FLOAT32, D.FLOAT32)      # the pointwise table's unary_op runs exp


# ---------------------------------------------------------------- gemm

def run_mm(a, b, out_code, beta=0.0, c=None, alpha=1.0, out=None):
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        out = np.full((M, N), np.nan if out_code in FLOATS else 0, NP[out_code])
    c_args = (0, out_code, (0, 0)) if c is None else (ptr(c), code_of(c), st(c))
    gemm.matmul(ptr(out), out_code, st(out), ptr(a), code_of(a), st(a), ptr(b), code_of(b), st(b),
                M, N, K, beta, *c_args, alpha)
    return out


def test_matmul_f32_layouts():
    rng = np.random.default_rng(20)
    a = rng.standard_normal((33, 17)).astype(np.float32)
    b = rng.standard_normal((17, 29)).astype(np.float32)
    want = (to_torch(a) @ to_torch(b)).numpy()
    variants = [(a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b)),
                (np.asfortranarray(a), np.asfortranarray(b)),
                (np.repeat(a, 2, axis=1)[:, ::2], b[::-1][::-1])]
    for x, y in variants:
        np.testing.assert_allclose(run_mm(x, y, D.FLOAT32), want, rtol=1e-5, atol=1e-5)
    # Strided (sliced) output and float64 output from float32 compute.
    out = np.full((33, 58), np.nan, np.float32)
    run_mm(a, b, D.FLOAT32, out=out[:, ::2])
    np.testing.assert_allclose(out[:, ::2], want, rtol=1e-5, atol=1e-5)
    assert np.isnan(out[:, 1::2]).all()


def test_matmul_beta_alpha_broadcast_bias_and_inplace():
    rng = np.random.default_rng(21)
    a = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    c = np.broadcast_to(bias, (8, 6))                  # strides (0, 1)
    got = run_mm(a, b, D.FLOAT32, beta=0.5, c=c, alpha=2.0)
    want = torch.addmm(to_torch(bias), to_torch(a), to_torch(b), beta=0.5, alpha=2.0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # In place: out is C.
    acc = rng.standard_normal((8, 6)).astype(np.float32)
    want = torch.addmm(to_torch(acc), to_torch(a), to_torch(b), beta=1.0).numpy()
    run_mm(a, b, D.FLOAT32, beta=1.0, c=acc, out=acc)
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-5)
    # beta == 0: NaNs in C are not read.
    cn = np.full((8, 6), np.nan, np.float32)
    assert np.isfinite(run_mm(a, b, D.FLOAT32, beta=0.0, c=cn)).all()
    # Output aliases A: must still be right (scratch output).
    sq = rng.standard_normal((6, 6)).astype(np.float32)
    want = (to_torch(sq) @ to_torch(sq)).numpy()
    run_mm(sq, sq, D.FLOAT32, out=sq)
    np.testing.assert_allclose(sq, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("code", [D.BFLOAT16, D.FLOAT16])
def test_matmul_half_types(code):
    rng = np.random.default_rng(22)
    a = rng.standard_normal((40, 64)).astype(NP[code])
    b = rng.standard_normal((64, 24)).astype(NP[code])
    c = rng.standard_normal((40, 24)).astype(NP[code])
    got = run_mm(a, b.T.copy().T, code, beta=1.0, c=c, alpha=0.5).astype(np.float32)
    ta, tb, tc = to_torch(a).float(), to_torch(b).float(), to_torch(c).float()
    want = from_torch(torch.addmm(tc, ta, tb, alpha=0.5).to(TORCH[code])).astype(np.float32)
    ulp = 2.0 ** -7 if code == D.BFLOAT16 else 2.0 ** -10
    np.testing.assert_allclose(got, want, rtol=ulp, atol=ulp)
    # Exactly representable case: the single rounding must be exact.
    ai = rng.integers(-4, 5, (16, 8)).astype(NP[code])
    bi = rng.integers(-4, 5, (8, 16)).astype(NP[code])
    want = (ai.astype(np.float32) @ bi.astype(np.float32)).astype(NP[code])
    assert_same(run_mm(ai, bi, code), want)


def test_matmul_f64_and_mixed_out():
    rng = np.random.default_rng(23)
    a, b = rng.standard_normal((9, 11)), rng.standard_normal((11, 7))
    np.testing.assert_allclose(run_mm(a, b, D.FLOAT64), a @ b, rtol=1e-12, atol=1e-12)
    got = run_mm(a, b, D.FLOAT32)
    np.testing.assert_allclose(got, (a @ b).astype(np.float32), rtol=1e-6, atol=1e-6)


def test_matmul_degenerate_and_errors():
    a = np.zeros((3, 0), np.float32)
    b = np.zeros((0, 4), np.float32)
    assert (run_mm(a, b, D.FLOAT32) == 0).all()                     # K == 0, beta == 0
    c = np.ones((3, 4), np.float32)
    assert (run_mm(a, b, D.FLOAT32, beta=2.0, c=c) == 2).all()
    gemm.matmul(0, D.FLOAT32, (1, 1), 0, D.FLOAT32, (1, 1), 0, D.FLOAT32, (1, 1), 0, 5, 7)
    i = np.ones((2, 2), np.int32)
    assert (run_mm(i, i, D.INT32) == 2).all()                       # integer GEMM (exact, wrapping)
    with pytest.raises(ValueError, match="all floating or all integer"):
        run_mm(i, i.astype(np.float32), D.FLOAT32)
    one = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError):
        gemm.matmul(ptr(one), 99, (2, 1), ptr(one), D.FLOAT32, (2, 1), ptr(one), D.FLOAT32, (2, 1), 2, 2, 2)


def test_matmul_mlp_size_is_fast():
    import time
    rng = np.random.default_rng(24)
    a = rng.standard_normal((256, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1024)).astype(np.float32)
    t = time.perf_counter()
    got = run_mm(a, b.T, D.FLOAT32)
    assert time.perf_counter() - t < 1.0
    np.testing.assert_allclose(got, (to_torch(a) @ to_torch(b.T)).numpy(), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- random

def test_philox_known_answers():
    # Random123 kat_vectors for philox4x32-10.
    assert random.philox4x32((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    f = 0xFFFFFFFF
    assert random.philox4x32((f, f, f, f), (f, f)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert random.philox4x32((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == \
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def test_stream_layout_is_philox_blocks():
    seed = 0x1234_5678_9ABC_DEF0
    out = np.zeros(10, np.int64)
    used = random.randint(ptr(out), D.INT64, (1,), (10,), seed, 4, 0, 2**32)
    assert used == 12
    key = (seed & 0xFFFFFFFF, seed >> 32)
    words = random.philox4x32((1, 0, 0, 0), key) + random.philox4x32((2, 0, 0, 0), key) + \
        random.philox4x32((3, 0, 0, 0), key)
    assert out.tolist() == list(words[:10])


def draw(fn, code, shape, seed, offset, *args, strides=None):
    out = np.zeros(shape, NP[code])
    used = fn(ptr(out), code, st(out) if strides is None else strides, shape, seed, offset, *args)
    return out, used


def test_random_determinism_and_offsets():
    a, used = draw(random.uniform, D.FLOAT32, (4, 50), 7, 0, 0.0, 1.0)
    assert used == 200
    b, _ = draw(random.uniform, D.FLOAT32, (4, 50), 7, 0, 0.0, 1.0)
    assert_same(a, b)
    c, _ = draw(random.uniform, D.FLOAT32, (4, 50), 7, 200, 0.0, 1.0)
    d, _ = draw(random.uniform, D.FLOAT32, (4, 50), 8, 0, 0.0, 1.0)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    # The stream is positional: offset 8 continues where element 8 was.
    e, _ = draw(random.uniform, D.FLOAT32, (192,), 7, 8, 0.0, 1.0)
    assert_same(e, a.ravel()[8:])
    # Element order is C order of the logical shape, whatever the strides.
    t = np.zeros((50, 4), np.float32).T
    random.uniform(ptr(t), D.FLOAT32, st(t), (4, 50), 7, 0, 0.0, 1.0)
    assert_same(t, a)
    _, used = draw(random.normal, D.FLOAT32, (3,), 1, 0, 0.0, 1.0)
    assert used == 8                                     # 2 words/element, rounded up to 4


@pytest.mark.parametrize("code", FLOATS)
def test_uniform_range_and_mean(code):
    x, _ = draw(random.uniform, code, (200_000,), 3, 0, -2.0, 3.0)
    f = x.astype(np.float64)
    assert f.min() >= -2.0 and f.max() < 3.0
    assert abs(f.mean() - 0.5) < 0.03
    # Narrow interval in low precision: rounding would often hit `high`.
    y, _ = draw(random.uniform, code, (100_000,), 4, 0, 0.0, 1.0)
    assert y.astype(np.float64).max() < 1.0
    z, _ = draw(random.uniform, code, (10_000,), 4, 0, 1000.0, 1001.0)
    zf = z.astype(np.float64)
    assert zf.min() >= 1000.0 and zf.max() < 1001.0


@pytest.mark.parametrize("code", FLOATS)
def test_normal_moments(code):
    x, used = draw(random.normal, code, (200_000,), 5, 0, 1.5, 2.0)
    f = x.astype(np.float64)
    assert abs(f.mean() - 1.5) < 0.03 and abs(f.std() - 2.0) < 0.03
    assert np.isfinite(f).all()
    assert used == 200_000 * (4 if code == D.FLOAT64 else 2)


def test_randint_ranges_and_dtypes():
    x, used = draw(random.randint, D.INT64, (100_000,), 9, 0, -3, 4)
    assert used == 100_000 and x.min() == -3 and x.max() == 3
    counts = np.bincount(x + 3)
    assert (abs(counts / 100_000 - 1 / 7) < 0.01).all()
    big, used = draw(random.randint, D.INT64, (1000,), 9, 0, 0, 2**40)
    assert used == 2000 and big.min() >= 0 and big.max() < 2**40 and big.max() > 2**39
    full, _ = draw(random.randint, D.INT64, (1000,), 9, 0, -2**63, 2**63)
    assert (full < 0).any() and (full > 0).any()
    f, _ = draw(random.randint, D.FLOAT16, (1000,), 9, 0, 0, 10)
    assert set(np.unique(f).tolist()) == set(range(10))
    b, _ = draw(random.randint, D.BOOL, (1000,), 9, 0, 0, 2)
    assert 400 < b.sum() < 600
    with pytest.raises(ValueError):
        draw(random.randint, D.INT32, (3,), 9, 0, 5, 5)


def test_bernoulli_scalar_and_tensor_p():
    n = 100_000
    out = np.zeros(n, np.bool_)
    used = random.bernoulli(ptr(out), D.BOOL, (1,), (n,), 11, 0, 0, D.FLOAT32, (1,), 0.3)
    assert used == n and abs(out.mean() - 0.3) < 0.01
    # Per-column p broadcast over rows (stride 0), float output.
    p = np.array([0.0, 0.25, 0.9, 1.0], ml_dtypes.bfloat16)
    o = np.zeros((n // 4, 4), np.float32)
    random.bernoulli(ptr(o), D.FLOAT32, st(o), o.shape, 12, 0, ptr(p), D.BFLOAT16, (0, 1), 0.0)
    rates = o.mean(axis=0)
    assert rates[0] == 0 and rates[3] == 1
    assert abs(rates[1] - 0.25) < 0.015 and abs(rates[2] - 0.9) < 0.015
    with pytest.raises(ValueError):
        random.bernoulli(ptr(out), D.BOOL, (1,), (n,), 11, 0, 0, D.FLOAT32, (1,), 1.5)


def test_random_zero_size_rank0_and_errors():
    x = np.zeros((), np.float32)
    assert random.uniform(ptr(x), D.FLOAT32, (), (), 1, 0, 5.0, 6.0) == 4
    assert 5.0 <= x < 6.0
    assert random.normal(0, D.FLOAT32, (1,), (0,), 1, 0, 0.0, 1.0) == 0
    with pytest.raises(ValueError):
        random.uniform(ptr(x), D.INT32, (), (), 1, 0, 0.0, 1.0)
    with pytest.raises(ValueError):
        random.uniform(ptr(x), D.FLOAT32, (), (), 1, 0, 1.0, 0.0)
    with pytest.raises(ValueError):
        random.normal(ptr(x), D.FLOAT32, (), (), 1, 0, 0.0, -1.0)


# ---------------------------------------------------------------- threshold_backward / sum

def test_threshold_backward_kernel_matches_torch():
    from emulator.kernels import elementwise as ew
    rng = np.random.default_rng(5)
    for code in FLOATS + INTS:
        g = source_values(code)[:64] if code in FLOATS else rng.integers(0, 100, 64).astype(NP[code])
        x = (source_values(code)[64:128] if code in FLOATS
             else rng.integers(0, 100, 64).astype(NP[code]))
        thr = 0.5 if code in FLOATS else 50
        out = np.empty_like(g)
        ew.threshold_backward(ptr(out), code, st(out), ptr(g), code, st(g), ptr(x), code, st(x),
                              g.shape, code, thr)
        want = torch.ops.aten.threshold_backward(to_torch(g), to_torch(x), thr)
        assert_same(out, from_torch(want))
    # broadcast (0 strides) and a NaN in x: NaN <= t is false, so the gradient passes
    g = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    out = np.empty_like(g)
    ew.threshold_backward(ptr(out), D.FLOAT32, st(out), ptr(g), D.FLOAT32, st(g), ptr(x), D.FLOAT32,
                          (0, 1), (2, 3), D.FLOAT32, 0.0)
    np.testing.assert_array_equal(out, [[0, 0, 2], [3, 0, 5]])
    with pytest.raises(ValueError):
        ew.threshold_backward(ptr(out), D.BOOL, (1,), ptr(g), D.BOOL, (1,), ptr(x), D.BOOL, (1,), (3,),
                              D.BOOL, 0)


@pytest.mark.parametrize("code", [D.FLOAT32, D.FLOAT64, D.INT32, D.UINT8, D.BOOL, D.FLOAT16])
def test_reduce_sum_kernel(code):
    from emulator.kernels import reduction
    rng = np.random.default_rng(code)
    if code in FLOATS:
        a = rng.standard_normal((4, 5, 300)).astype(NP[code])
    elif code == D.BOOL:
        a = rng.random((4, 5, 300)) > 0.5
    else:
        a = rng.integers(0, 100, (4, 5, 300)).astype(NP[code])
    a = a.transpose(2, 0, 1)                                   # non-contiguous input (300, 4, 5)
    ref = to_torch(a)
    ocode = code if code in FLOATS else D.INT64
    for dims in [(0,), (1, 2), (0, 2), (), (0, 1, 2)]:
        want = ref.sum(dims, keepdim=True) if dims else ref.sum((0, 1, 2), keepdim=True)
        dims = dims or (0, 1, 2)
        out = np.zeros(tuple(1 if d in dims else n for d, n in enumerate(a.shape)), NP[ocode])
        reduction.reduce_sum(ptr(out), ocode, st(out), ptr(a), code, st(a), a.shape, dims, ocode)
        got = to_torch(out)
        if code in FLOATS:
            tol = {D.FLOAT16: 1e-3, D.FLOAT32: 1e-5, D.FLOAT64: 1e-12}[code]
            torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol * 300)
        else:
            assert torch.equal(got, want)
    # empty reduction gives 0; invalid dims are rejected
    e = np.zeros((0, 3), np.float32)
    out = np.full((1, 3), 7.0, np.float32)
    reduction.reduce_sum(ptr(out), D.FLOAT32, st(out), 0, D.FLOAT32, (3, 1), (0, 3), (0,), D.FLOAT32)
    np.testing.assert_array_equal(out, 0)
    with pytest.raises(ValueError):
        reduction.reduce_sum(ptr(out), D.FLOAT32, st(out), ptr(e), D.FLOAT32, (3, 1), (0, 3), (0, 0), D.FLOAT32)
    with pytest.raises(ValueError):
        reduction.reduce_sum(ptr(out), D.FLOAT32, st(out), ptr(e), D.FLOAT32, (3, 1), (0, 3), (2,), D.FLOAT32)
