"""The float32 vector-math path of the softmax kernels (emulator/kernels/_vecmath.pxi).

The vectorised exp and row reductions must give CPU's results (torch's vectorised softmax,
within a few ulps) on every row length (tails of 1..15 after the 8-lane blocks), and CPU's
special values: NaN anywhere in a row, an all -inf row, +inf, float32 subnormal results and
overflow at the ends of exp's range.
"""
import numpy as np
import pytest
import torch

from emulator.kernels import dtypes as D
from emulator.kernels import norm, softmax


def _run(kernel, x: np.ndarray, dim: int) -> np.ndarray:
    out = np.empty_like(x)
    strides = tuple(s // x.itemsize for s in x.strides)
    kernel(out.ctypes.data, D.FLOAT32, strides, x.ctypes.data, D.FLOAT32, strides, x.shape, dim)
    return out


KERNELS = [(norm.softmax, torch.softmax), (softmax.log_softmax, torch.log_softmax)]


@pytest.mark.parametrize("kernel,reference", KERNELS)
@pytest.mark.parametrize("length", [1, 2, 7, 8, 9, 15, 16, 17, 31, 100, 4099])
def test_every_row_length_matches_torch(kernel, reference, length):
    rng = np.random.default_rng(length)
    x = (rng.standard_normal((6, length)) * np.array([[0.1], [1], [10], [30], [80], [200]])).astype(np.float32)
    got = _run(kernel, x, 1)
    torch.testing.assert_close(torch.from_numpy(got), reference(torch.from_numpy(x), 1), rtol=4e-6, atol=1e-6)


@pytest.mark.parametrize("kernel,reference", KERNELS)
def test_special_values_match_torch(kernel, reference):
    inf, nan = float("inf"), float("nan")
    rows = [
        [0.0, 1.0, nan, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],      # NaN in a block: the row is NaN
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, nan],      # NaN in the tail
        [-inf] * 11,                                                   # all -inf: NaN
        [0.0, inf, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],      # +inf: NaN (inf - inf)
        [0.0, -inf, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -inf],
        [0.0, -87.0, -88.0, -90.0, -100.0, -103.0, -103.9, -104.5, -120.0, -1e30, -0.0],  # subnormals, 0
        [88.7, 0.0, -1.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    ]
    x = np.array(rows, dtype=np.float32)
    got = torch.from_numpy(_run(kernel, x, 1))
    torch.testing.assert_close(got, reference(torch.from_numpy(x), 1), rtol=4e-6, atol=1e-6, equal_nan=True)


def test_softmax_subnormal_results_keep_their_value():
    # exp(-100) and exp(-103) are float32 subnormals; they must not flush to zero.
    x = np.array([[0.0, -100.0, -103.0, -104.5]], dtype=np.float32)
    got = _run(norm.softmax, x, 1)[0]
    want = np.exp(x[0].astype(np.float64))
    want = (want / want.sum()).astype(np.float32)
    assert got[1] > 0 and got[2] > 0
    np.testing.assert_allclose(got[:3], want[:3], rtol=2e-2)
    assert got[3] == want[3] == 0.0
