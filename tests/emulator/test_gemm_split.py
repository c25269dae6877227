"""Large float32/float64 GEMMs run as disjoint blocks of the output, one single-threaded BLAS call
each, on the calling thread and a helper thread (gemm.pyx, _blas_gemm): the result must be bit
for bit that of one BLAS call (the helper off), for every layout, with and without C, for shapes
that split along either side, unevenly, and in place (C is the output)."""
import itertools

import numpy as np
import pytest

from emulator.kernels import dtypes as D
from emulator.kernels import gemm


def _st(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


@pytest.fixture
def restore_helpers():
    yield
    gemm.set_gemm_helpers(1)


def _matmul(a, b, c, out, alpha, beta, code):
    m, k = a.shape
    n = b.shape[1]
    gemm.matmul(out.ctypes.data, code, _st(out), a.ctypes.data, code, _st(a), b.ctypes.data, code, _st(b),
                m, n, k, beta, c.ctypes.data if c is not None else 0, code, _st(c) if c is not None else (0, 0),
                alpha)


# (M, N, K): split along N (the longer side), along M, uneven last blocks, near the threshold
SHAPES = [(128, 1536, 384), (1536, 128, 384), (128, 1152, 384), (77, 3001, 129), (3001, 77, 129),
          (200, 1000, 300), (64, 4096, 64), (333, 777, 555), (64, 1024, 147), (130, 200, 160)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_gemm_equals_one_call(m, n, k, dtype, restore_helpers):
    code = D.FLOAT32 if dtype == np.float32 else D.FLOAT64
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    for fa, fb, (beta, bias) in itertools.product((False, True), (False, True),
                                                  ((0.0, None), (1.0, "row"), (0.5, "full"), (1.5, "out"))):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        if fa:
            a = np.asfortranarray(a)
        if fb:
            b = np.asfortranarray(b)
        c0 = rng.standard_normal((m, n)).astype(dtype)
        got = {}
        for helpers in (0, 1):
            gemm.set_gemm_helpers(helpers)
            out = c0.copy() if bias == "out" else np.zeros((m, n), dtype)
            if bias == "row":
                c = np.broadcast_to(c0[0], (m, n))
            else:
                c = out if bias == "out" else (c0 if bias == "full" else None)
            _matmul(a, b, c, out, 0.75, beta, code)
            got[helpers] = out
        assert got[0].tobytes() == got[1].tobytes(), (fa, fb, beta, bias)
        want = 0.75 * (a.astype(np.float64) @ b.astype(np.float64)) + (beta * c0[0] if bias == "row" else
                                                                       beta * c0 if bias else 0)
        np.testing.assert_allclose(got[1], want, rtol=1e-3 if dtype == np.float32 else 1e-10,
                                   atol=1e-3 if dtype == np.float32 else 1e-10)


def test_helper_switch_reports_the_previous_setting(restore_helpers):
    gemm.set_gemm_helpers(1)
    assert gemm.set_gemm_helpers(0) == 1
    assert gemm.set_gemm_helpers(1) == 0


@pytest.mark.parametrize("shift", [0, 3])
def test_bias_is_read_before_the_output_is_written(shift, restore_helpers):
    # C (here a bias-like matrix) overlapping the output: its values are those before the launch.
    m, n, k = 128, 400, 96
    rng = np.random.default_rng(11)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    buf = rng.standard_normal(m * n + 8).astype(np.float32)
    c = buf[shift:shift + m * n].reshape(m, n)
    c_before = c.copy()
    out = buf[:m * n].reshape(m, n)
    separate = np.zeros((m, n), np.float32)
    _matmul(a, b, c_before, separate, 1.0, 0.5, D.FLOAT32)     # C elsewhere: widened into the output
    _matmul(a, b, c, out, 1.0, 0.5, D.FLOAT32)
    assert out.tobytes() == separate.tobytes()


def _bmm(a, b, c, out, alpha, beta, code):
    nb, m, k = a.shape
    n = b.shape[2]
    gemm.bmatmul(out.ctypes.data, code, _st(out), a.ctypes.data, code, _st(a), b.ctypes.data, code, _st(b),
                 nb, m, n, k, beta, c.ctypes.data if c is not None else 0, code,
                 _st(c) if c is not None else (0, 0, 0), alpha)


@pytest.mark.parametrize("shape", [(6, 128, 128, 64), (7, 128, 64, 128), (3, 200, 100, 300)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["plain", "transposed_b", "bias", "c_is_out", "out_is_a"])
def test_split_bmm_equals_one_thread(shape, dtype, case, restore_helpers):
    # The batch runs in two halves on two threads unless the output overlaps an operand.
    nb, m, n, k = shape
    code = D.FLOAT32 if dtype == np.float32 else D.FLOAT64
    rng = np.random.default_rng(nb * m + n + k)
    got = []
    for helpers in (0, 1):
        gemm.set_gemm_helpers(helpers)
        r = np.random.default_rng(0)
        a = r.standard_normal((nb, m, k)).astype(dtype)
        b = r.standard_normal((nb, k, n)).astype(dtype)
        if case == "transposed_b":
            b = np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1)
        c = r.standard_normal((nb, m, n)).astype(dtype)
        out = np.zeros((nb, m, n), dtype)
        beta = 0.0
        if case == "bias":
            beta = 0.5
        elif case == "c_is_out":
            out, c, beta = c, c, 1.5
        elif case == "out_is_a" and m == k:
            out = a
        elif case == "out_is_a":
            pytest.skip("needs a square A")
        _bmm(a, b, c, out, 0.75, beta, code)
        got.append(out.copy())
    assert got[0].tobytes() == got[1].tobytes()
    del rng
