"""The reduced-precision checks of precision.py still catch wrong values.

The device's float16/bfloat16 results pass against the float64 reference; the same results with
one element moved by a few units in the last place, or computed with a second rounding (a sum
accumulated in the reduced dtype instead of float32), fail."""
import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from precision import as_float64, assert_no_worse_than_cpu, assert_reduced_close, magnitudes

LOW = [torch.float16, torch.bfloat16]


def _inputs(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 9, 9, generator=g, dtype=torch.float64).to(dtype)
    w = torch.randn(4, 3, 3, 3, generator=g, dtype=torch.float64).to(dtype)
    b = torch.randn(6, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b


def _conv_t(x, w, b):
    return F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)


def _nudge(t, index, units):
    """t with one element moved by ``units`` units in the last place of its dtype."""
    out = t.clone()
    v = out[index].double()
    out[index] = (v + units * torch.finfo(t.dtype).eps * v.abs().clamp_min(1)).to(t.dtype)
    return out


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_device_result_passes_and_a_perturbed_one_fails(dtype):
    x, w, b = _inputs(dtype)
    got = _conv_t(x.to("emu"), w.to("emu"), b.to("emu")).cpu()
    ref64, scale = _conv_t(*as_float64([x, w, b])), _conv_t(*magnitudes([x, w, b]))
    assert_reduced_close(got, ref64, scale=scale, terms=28)
    index = (1, 3, 7, 8)
    with pytest.raises(AssertionError, match=r"1 of 3888 .* elements outside the float64-reference bound"):
        assert_reduced_close(_nudge(got, index, 4), ref64, scale=scale, terms=28)
    # One output off by one product of two inputs (a term too many or too few in its sum).
    wrong = got.clone()
    wrong[index] = (ref64[index] - x[1, 2, 3, 4].double() * w[2, 1, 1, 0].double()).to(dtype)
    with pytest.raises(AssertionError, match="outside the float64-reference bound"):
        assert_reduced_close(wrong, ref64, scale=scale, terms=28)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_accumulating_in_the_reduced_dtype_fails(dtype):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(16, 256, generator=g, dtype=torch.float64).to(dtype)
    c = torch.randn(256, 8, generator=g, dtype=torch.float64).to(dtype)
    ref64, scale = as_float64(a) @ as_float64(c), magnitudes(a) @ magnitudes(c)
    assert_reduced_close((a.to("emu") @ c.to("emu")).cpu(), ref64, scale=scale, terms=256)
    acc = torch.zeros(16, 8, dtype=dtype)
    for k in range(256):       # every partial sum rounded to the dtype: not the device's contract
        acc = (acc.double() + as_float64(a[:, k:k + 1]) * as_float64(c[k:k + 1, :])).to(dtype)
    with pytest.raises(AssertionError, match="outside the float64-reference bound"):
        assert_reduced_close(acc, ref64, scale=scale, terms=256)


def test_non_finite_values_must_match():
    ref64 = torch.tensor([1.0, float("inf"), float("nan"), 70000.0], dtype=torch.float64)
    assert_reduced_close(torch.tensor([1.0, float("inf"), float("nan"), float("inf")], dtype=torch.float16), ref64)
    with pytest.raises(AssertionError, match="non-finite mismatch"):
        assert_reduced_close(torch.tensor([1.0, 65504.0, float("nan"), float("inf")], dtype=torch.float16), ref64)


def test_no_worse_than_cpu_catches_one_wrong_element():
    g = torch.Generator().manual_seed(9)
    ref64 = torch.randn(8, 4, generator=g, dtype=torch.float64)
    cpu = ref64.to(torch.bfloat16)
    assert_no_worse_than_cpu(cpu.clone(), cpu, ref64)
    wrong = cpu.clone()
    wrong[3, 2] = (ref64[3, 2] * 1.1).to(torch.bfloat16)
    with pytest.raises(AssertionError, match="error against the float64 reference"):
        assert_no_worse_than_cpu(wrong, cpu, ref64)
