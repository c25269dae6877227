"""bfloat16 x bfloat16 GEMM paths of the matrix engine (gemm.pyx, _amx.pxi on AMX hosts; BLAS
in float32 elsewhere): the operand packers for each layout, the column chunks of B, the fused
rounding of each 32 x 32 block into the output, and the outputs that must wait for the whole
product (C overlapping the output, outputs whose elements share memory). Every check holds on
both paths: the same values in any layout give the same bits, and a bfloat16 output is the
float32 result of the same GEMM rounded once (to nearest even, as c10::BFloat16)."""
import threading

import ml_dtypes
import numpy as np
import pytest

from emulator.kernels import dtypes as D
from emulator.kernels import gemm

BF16 = ml_dtypes.bfloat16
CODE = {np.dtype(BF16): D.BFLOAT16, np.dtype(np.float32): D.FLOAT32}


def _st(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


def _mm(out, a, b, c=None, beta=0.0, alpha=1.0):
    m, k = a.shape
    n = b.shape[1]
    cargs = (0, D.FLOAT32, (0, 0)) if c is None else (c.ctypes.data, CODE[c.dtype], _st(c))
    gemm.matmul(out.ctypes.data, CODE[out.dtype], _st(out), a.ctypes.data, D.BFLOAT16, _st(a),
                b.ctypes.data, D.BFLOAT16, _st(b), m, n, k, beta, *cargs, alpha)
    return out


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint16 if x.dtype == BF16 else np.uint32)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(BF16)


def _round_bf16(x32):
    """c10::BFloat16 rounding of float32 values: nearest even, any NaN -> 0x7FC0."""
    u = x32.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[np.isnan(x32)] = 0x7FC0
    return r


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 3, 70), (32, 32, 32), (33, 64, 31), (64, 1, 100),
                                   (100, 300, 37), (40, 1100, 600), (70, 16, 17000)])
def test_bf16_output_is_the_float32_result_rounded_once(m, k, n):
    # (40, 1100, 600) and (70, 16, 17000) walk B in several column chunks.
    rng = np.random.default_rng(m + 7 * k + 13 * n)
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    got = _mm(np.empty((m, n), BF16), a, b)
    f32 = _mm(np.empty((m, n), np.float32), a, b)
    np.testing.assert_array_equal(_bits(got), _round_bf16(f32))
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.all(np.abs(f32 - want) <= 1e-6 * bound + 1e-30)


def test_rounding_ties_go_to_even_and_nan_is_canonical():
    # 1 + 2**-8 and 1 + 3 * 2**-8 are exact float32 sums halfway between bfloat16 values.
    a = np.ones((3, 2), BF16)
    b = np.array([[1.0, 1.0, 1.0, -1.0], [2.0 ** -8, 3 * 2.0 ** -8, 2.0 ** -9, -(2.0 ** -8)]], BF16)
    a[2, 0] = np.nan
    got = _bits(_mm(np.empty((3, 4), BF16), a, b))
    assert list(got[0]) == [0x3F80, 0x3F82, 0x3F80, 0xBF80]
    assert list(got[2]) == [0x7FC0] * 4


def test_every_operand_layout_gives_the_same_bits():
    rng = np.random.default_rng(3)
    m, k, n = 45, 70, 52
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    want = _bits(_mm(np.empty((m, n), BF16), a, b))
    a_cols = np.asfortranarray(a)                       # column-major A
    b_cols = np.asfortranarray(b)                       # column-major B (a transposed weight)
    a_step = np.repeat(a, 3, axis=1)[:, ::3]            # every third element of wider rows
    b_step = np.repeat(b, 2, axis=0)[::2]               # every other row
    b_wide = np.zeros((k, n + 9), BF16)[:, 4:4 + n]     # rows with gaps, an odd start
    b_wide[:] = b
    for aa in (a, a_cols, a_step):
        for bb in (b, b_cols, b_step, b_wide):
            np.testing.assert_array_equal(_bits(_mm(np.empty((m, n), BF16), aa, bb)), want)
    for out in (np.empty((n, m), BF16).T, np.empty((m, 2 * n), BF16)[:, ::2]):
        np.testing.assert_array_equal(_bits(_mm(out, a, b_cols)), want)


def test_alpha_beta_and_broadcast_bias_round_once():
    rng = np.random.default_rng(5)
    m, k, n = 50, 40, 70
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = rng.standard_normal((1, n)).astype(np.float32)
    c = np.broadcast_to(bias, (m, n))                   # strides (0, 1)
    f32 = _mm(np.empty((m, n), np.float32), a, b, c, 0.5, -2.0)
    got = _mm(np.empty((m, n), BF16), a, b, c, 0.5, -2.0)
    np.testing.assert_array_equal(_bits(got), _round_bf16(f32))
    want = -2.0 * (a.astype(np.float64) @ b.astype(np.float64)) + 0.5 * bias
    np.testing.assert_allclose(f32, want, rtol=1e-5, atol=1e-4)
    scaled = _mm(np.empty((m, n), BF16), a, b, None, 0.0, 3.0)
    np.testing.assert_array_equal(_bits(scaled), _round_bf16(_mm(np.empty((m, n), np.float32), a, b) * np.float32(3)))


def test_c_that_is_the_output_or_overlaps_it():
    rng = np.random.default_rng(9)
    m, k, n = 40, 33, 36
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    c0 = _rand(rng, m + 1, n)
    # C and the output one row apart, both ways: every C element must be read before the
    # output overwrites it.
    want_down = _bits(_mm(np.empty((m, n), BF16), a, b, c0[:m].copy(), 1.5, 0.25))
    inplace = c0[:m].copy()
    np.testing.assert_array_equal(_bits(_mm(inplace, a, b, inplace, 1.5, 0.25)), want_down)
    buf = c0.copy()
    np.testing.assert_array_equal(_bits(_mm(buf[1:], a, b, buf[:m], 1.5, 0.25)), want_down)
    want_up = _bits(_mm(np.empty((m, n), BF16), a, b, c0[1:].copy(), 1.5, 0.25))
    buf = c0.copy()
    np.testing.assert_array_equal(_bits(_mm(buf[:m], a, b, buf[1:], 1.5, 0.25)), want_up)


def test_output_aliasing_an_operand():
    rng = np.random.default_rng(11)
    a, b = _rand(rng, 40, 40), _rand(rng, 40, 40)
    want = _bits(_mm(np.empty((40, 40), BF16), a, b))
    aa = a.copy()
    np.testing.assert_array_equal(_bits(_mm(aa, aa, b)), want)     # out is A
    bb = b.copy()
    np.testing.assert_array_equal(_bits(_mm(bb, a, bb)), want)     # out is B


def test_output_whose_rows_share_memory_keeps_the_last_row():
    rng = np.random.default_rng(13)
    a, b = _rand(rng, 6, 50), _rand(rng, 50, 40)
    full = _bits(_mm(np.empty((6, 40), BF16), a, b))
    row = np.zeros(40, BF16)
    out = np.lib.stride_tricks.as_strided(row, (6, 40), (0, 2))
    _mm(out, a, b)
    np.testing.assert_array_equal(_bits(row), full[5])


def test_concurrent_gemms_on_two_threads():
    # The packing scratch is per thread: two GEMMs of different shapes at once must not mix.
    rng = np.random.default_rng(17)
    jobs = [(_rand(rng, 200, 300), _rand(rng, 300, 150)), (_rand(rng, 90, 700), _rand(rng, 700, 260))]
    want = [_bits(_mm(np.empty((a.shape[0], b.shape[1]), BF16), a, b)) for a, b in jobs]
    got = [[], []]

    def work(i):
        a, b = jobs[i]
        for _ in range(20):
            got[i].append(_bits(_mm(np.empty((a.shape[0], b.shape[1]), BF16), a, b)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        assert len(got[i]) == 20
        for g in got[i]:
            np.testing.assert_array_equal(g, want[i])


def test_empty_sum_and_empty_output():
    rng = np.random.default_rng(19)
    c = _rand(rng, 5, 6)
    a, b = np.empty((5, 0), BF16), np.empty((0, 6), BF16)
    got = _mm(np.full((5, 6), np.nan, BF16), a, b, c, 2.0)          # K = 0: out = beta * C
    np.testing.assert_array_equal(_bits(got), _round_bf16(c.astype(np.float32) * np.float32(2)))
    got = _mm(np.full((5, 6), np.nan, BF16), a, b)                   # K = 0, beta = 0: zeros
    assert np.all(got.astype(np.float32) == 0)
    untouched = np.full((0, 6), np.nan, BF16)
    _mm(untouched, np.empty((0, 3), BF16), _rand(rng, 3, 6))         # M = 0: nothing to do
