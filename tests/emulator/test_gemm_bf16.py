"""bfloat16 GEMM of the matrix engine (gemm.pyx; on the host's AMX tiles where it has them,
_amx.pxi): products of bf16 values accumulated in float32, alpha/beta in float32 and one
rounding to the output dtype, for every shape that pads to the 32 x 32 tile grid, any strides,
and an output that is C itself."""
import ml_dtypes
import numpy as np
import pytest

from emulator.kernels import dtypes as D
from emulator.kernels import gemm


def _st(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


def _reference(a, b, c, alpha, beta):
    # Exact float64 products of the bf16 values; the float32 accumulation differs from it by at
    # most K * 2**-24 relative to sum(|a||b|), far below the bf16 output rounding checked here.
    p = a.astype(np.float64) @ b.astype(np.float64)
    return alpha * p + (beta * c.astype(np.float64) if beta else 0)


def _check(got, a, b, c, alpha, beta):
    want = _reference(a, b, c, alpha, beta)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) * abs(alpha)
    if beta:
        bound = bound + abs(beta) * np.abs(c.astype(np.float64))
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 2.0 ** -8 * np.abs(want) + 1e-6 * bound + 1e-30), err.max()


def test_reports_amx_availability_as_a_bool():
    assert gemm.amx_available() in (True, False)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (16, 32, 16), (31, 33, 47), (33, 65, 17),
                                   (64, 64, 64), (100, 300, 37)])
def test_shapes_match_the_float32_accumulation(m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    out = np.empty((m, n), dtype=ml_dtypes.bfloat16)
    gemm.matmul(out.ctypes.data, D.BFLOAT16, _st(out), a.ctypes.data, D.BFLOAT16, _st(a),
                b.ctypes.data, D.BFLOAT16, _st(b), m, n, k)
    _check(out, a, b, None, 1.0, 0.0)


def test_strided_operands_alpha_beta_and_c_as_output():
    rng = np.random.default_rng(7)
    a_base = rng.standard_normal((70, 50)).astype(ml_dtypes.bfloat16)
    b_base = rng.standard_normal((45, 80)).astype(ml_dtypes.bfloat16)
    a = a_base[::2, 3:43].T            # 40 x 35, column-major-ish with a row step
    b = b_base[5:40, ::2]              # 35 x 40, every other column
    c = rng.standard_normal((40, 40)).astype(np.float32)
    c_before = c.copy()
    gemm.matmul(c.ctypes.data, D.FLOAT32, _st(c), a.ctypes.data, D.BFLOAT16, _st(a),
                b.ctypes.data, D.BFLOAT16, _st(b), 40, 40, 35, 0.5, c.ctypes.data, D.FLOAT32, _st(c), 2.0)
    want = _reference(a, b, c_before, 2.0, 0.5)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def test_beta_zero_does_not_read_c_and_specials_propagate():
    a = np.ones((4, 40), dtype=ml_dtypes.bfloat16)
    b = np.ones((40, 3), dtype=ml_dtypes.bfloat16)
    a[1, 7] = np.inf
    a[2, 0] = np.nan
    out = np.full((4, 3), np.nan, dtype=np.float32)   # beta == 0: the NaNs here must not leak
    gemm.matmul(out.ctypes.data, D.FLOAT32, _st(out), a.ctypes.data, D.BFLOAT16, _st(a),
                b.ctypes.data, D.BFLOAT16, _st(b), 4, 3, 40)
    assert np.all(out[0] == 40) and np.all(out[3] == 40)
    assert np.all(np.isposinf(out[1])) and np.all(np.isnan(out[2]))
