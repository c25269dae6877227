"""Native emu kernels against the CPU reference: add/mul/relu, mm/addmm, factories,
autograd through a small MLP, and ops issued from several Python threads.

Stated tolerances (torch.testing.assert_close):
- add/mul/relu: exact (rtol=atol=0) for every dtype. The vector engine models CPU's
  TensorIterator numerics: float16/bfloat16 compute in float32 and round once; integers wrap.
  Exception: ``alpha`` with float16/bfloat16 may differ by one unit in the last place (CPU's
  vectorized body uses an fma, its scalar tail does not), so those use the dtype's default
  tolerance.
- mm/addmm float32: against a float64 reference, rtol = 1.3e-6 * K and atol = 1e-5 * K.
- mm/addmm float16/bfloat16: the device widens to float32, accumulates in float32 and rounds
  once, so it is compared with CPU float32 math on the same (rounded) inputs, rounded to the
  dtype: bfloat16 rtol = 1.6e-2, float16 rtol = 1e-3 (atol 1e-2 / 1e-3 for values near 0).
- float64 mm: rtol = 1e-12 * K.
- factories: exact, except floating linspace/arange (the device computes in float64 and rounds
  once; CPU computes in the output dtype, or accumulates across vector lanes: 1 ulp), which use
  the dtype's default tolerance.
Every op checked here must show up in torch.emu.op_stats() as native.
"""
from __future__ import annotations

import itertools
import threading
import warnings

import pytest
import torch

import torch_plugin  # noqa: F401
from plugin_testing import DTYPES, EXACT, make


def emu(t):
    return t.to("emu") if isinstance(t, torch.Tensor) else t


def check(op, *args, tol=EXACT, **kwargs):
    """Runs op on CPU and on emu; results must agree in dtype, shape and values."""
    expected = op(*args, **kwargs)
    got = op(*[emu(a) for a in args], **{k: emu(v) for k, v in kwargs.items()})
    assert got.device.type == "emu"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tol)
    return got


# --------------------------------------------------------------------- add / mul / relu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_mul_relu_every_dtype(dtype, stats):
    a, b = make(dtype, (5, 7), 1), make(dtype, (5, 7), 2)
    check(torch.add, a, b)
    check(torch.mul, a, b)
    assert stats.native("aten::add.Tensor") == 1 and stats.native("aten::mul.Tensor") == 1
    if dtype == torch.bool:
        with pytest.raises(RuntimeError):  # CPU has no bool relu either
            torch.relu(emu(a))
    else:
        check(torch.relu, a)
        assert stats.native("aten::relu") == 1
    assert stats.fallback("aten::add.Tensor") == 0


def test_integer_overflow_wraps_like_cpu():
    for dtype in (torch.int8, torch.uint8, torch.int32):
        info = torch.iinfo(dtype)
        a = torch.tensor([info.max, info.min, info.max - 1, 3], dtype=dtype)
        check(torch.add, a, a)
        check(torch.mul, a, a)
        check(torch.add, a, 7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_special_float_values(dtype):
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -2.5], dtype=dtype)
    other = torch.tensor([-0.0, -0.0, -float("inf"), 3.0, 1.0, float("nan"), 0.0], dtype=dtype)
    check(torch.add, special, other)
    check(torch.mul, special, other)
    got = check(torch.relu, special)
    assert torch.isnan(got.cpu()[4])  # relu keeps NaN


@pytest.mark.parametrize("shapes", [((3, 1, 4), (2, 4)), ((4,), (3, 4)), ((1,), (5,)), ((2, 1), (1, 3)),
                                    ((3, 4), ()), ((0, 4), (1, 4)), ((1, 1, 1), (2, 3, 4))])
def test_broadcasting(shapes):
    a, b = make(torch.float32, shapes[0], 1), make(torch.float32, shapes[1], 2)
    check(torch.add, a, b)
    check(torch.mul, b, a)
    check(torch.add, a, b, alpha=-2)


VIEWS = {  # (left, right) operand views of two (6, 8, 5) tensors
    "transposed": lambda t, u: (t.transpose(0, 2), u.transpose(0, 2)),
    "permuted_vs_contiguous": lambda t, u: (t.permute(2, 0, 1), u.permute(2, 0, 1).contiguous()),
    "contiguous_vs_transposed": lambda t, u: (t.permute(2, 0, 1).contiguous(), u.permute(2, 0, 1)),
    "sliced_step": lambda t, u: (t[::2, 1::3], u[1::2, ::3]),
    "offset": lambda t, u: (t[2:, 3:, 1:], u[:4, :5, :4]),
    "expanded": lambda t, u: (t[:, :1, :].expand(6, 8, 5), u),
    "column": lambda t, u: (t[:, 3, :], u[:, :5, 2]),
}


@pytest.mark.parametrize("name", VIEWS)
def test_non_contiguous_inputs(name):
    base, other = make(torch.float32, (6, 8, 5), 3), make(torch.float32, (6, 8, 5), 4)
    a, b = VIEWS[name](base, other)
    a_emu, b_emu = VIEWS[name](emu(base), emu(other))
    assert (a_emu.stride(), b_emu.stride()) == (a.stride(), b.stride())
    for op in (torch.add, torch.mul):
        expected = op(a, b)
        got = op(a_emu, b_emu)
        torch.testing.assert_close(got.cpu(), expected, **EXACT)
        if name in ("transposed", "permuted_vs_contiguous"):
            assert got.stride() == expected.stride()  # the output takes the first operand's layout
    torch.testing.assert_close(torch.relu(a_emu).cpu(), torch.relu(a), **EXACT)
    if name in ("transposed", "permuted_vs_contiguous"):
        assert torch.relu(a_emu).stride() == torch.relu(a).stride()


SCALARS = [2, -3, 2.5, 0.1, 1 / 3, True, False, 1e-3]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_python_scalar_operands(dtype):
    a = make(dtype, (64,), 5)
    for scalar in SCALARS:
        for op in (torch.add, torch.mul):
            expected_dtype = torch.result_type(a, scalar)
            got = check(op, a, scalar)
            assert got.dtype == expected_dtype
            check(lambda x, s=scalar: s * x if op is torch.mul else s + x, a)  # scalar on the left


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_zero_dim_cpu_and_emu_tensor_operands(dtype):
    a = make(dtype, (4, 16), 6)
    for value in (torch.tensor(2.5), torch.tensor(0.1, dtype=torch.float64), torch.tensor(300),
                  torch.tensor(-7, dtype=torch.int8), torch.tensor(True), torch.tensor(1.5, dtype=torch.float16)):
        for op in (torch.add, torch.mul):
            expected = op(a, value)
            assert torch.result_type(a, value) == expected.dtype
            got_cpu_scalar = op(emu(a), value)  # a 0-dim CPU tensor counts as a scalar
            got_emu_scalar = op(emu(a), emu(value))
            for got in (got_cpu_scalar, got_emu_scalar):
                assert got.dtype == expected.dtype and got.device.type == "emu"
                torch.testing.assert_close(got.cpu(), expected, **EXACT)
            torch.testing.assert_close(op(emu(value), emu(a)).cpu(), op(value, a), **EXACT)


def test_two_zero_dim_operands():
    x, y = torch.tensor(3.5), torch.tensor(2, dtype=torch.int64)
    check(torch.add, x, y)
    check(torch.mul, y, y)


def test_mixed_dtype_promotion_equals_result_type():
    for da, db in itertools.product(DTYPES, DTYPES):
        a, b = make(da, (3, 5), 7), make(db, (3, 5), 8)
        for op in (torch.add, torch.mul):
            got = op(emu(a), emu(b))
            assert got.dtype == torch.result_type(a, b), (da, db)
            torch.testing.assert_close(got.cpu(), op(a, b), **EXACT, msg=f"{op.__name__} {da} {db}")


@pytest.mark.parametrize("dtype,alpha", [(torch.float32, 0.5), (torch.float32, -3), (torch.float64, 1 / 3),
                                         (torch.float16, 0.1), (torch.bfloat16, 2.5), (torch.int64, 3),
                                         (torch.int32, -2), (torch.uint8, 5), (torch.bool, True), (torch.int8, 0)])
def test_alpha(dtype, alpha):
    a, b = make(dtype, (40,), 1), make(dtype, (40,), 2)
    tol = {} if dtype in (torch.float16, torch.bfloat16) else EXACT  # 1 ulp: fma (see module doc)
    check(torch.add, a, b, alpha=alpha, tol=tol)
    check(torch.add, a, True if dtype == torch.bool else 3, alpha=alpha, tol=tol)


def test_alpha_errors_match_cpu():
    i = emu(torch.arange(4))
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(i, i, alpha=1.5)
    b = emu(torch.tensor([True, False]))
    with pytest.raises(RuntimeError, match="Boolean alpha only supported"):
        torch.add(b, b, alpha=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8], ids=str)
def test_in_place(dtype, stats):
    a, b = make(dtype, (6, 5), 1), make(dtype, (6, 5), 2)
    x = emu(a)
    ptr = x.data_ptr()
    assert x.add_(emu(b), alpha=2) is x
    assert x.mul_(3) is x
    assert x.relu_() is x
    assert x.data_ptr() == ptr
    torch.testing.assert_close(x.cpu(), a.clone().add_(b, alpha=2).mul_(3).relu_(), **EXACT)
    assert stats.native("aten::add_.Tensor") == 1 and stats.native("aten::mul_.Tensor") == 1
    assert stats.native("aten::relu_") == 1


def test_in_place_through_views_and_broadcast_operand():
    a = make(torch.float32, (4, 6), 1)
    x = emu(a)
    x[:, 2].add_(100)  # visible through the base
    x[1:3].mul_(emu(torch.tensor([1.0, -1.0, 2.0, 0.0, 1.0, 1.0])))  # broadcast right operand
    x.t()[::2].relu_()
    ref = a.clone()
    ref[:, 2].add_(100)
    ref[1:3].mul_(torch.tensor([1.0, -1.0, 2.0, 0.0, 1.0, 1.0]))
    ref.t()[::2].relu_()
    torch.testing.assert_close(x.cpu(), ref, **EXACT)


def test_in_place_cannot_change_dtype_or_shape():
    x = emu(torch.arange(6, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.mul_(emu(torch.ones(6)))
    y = emu(torch.ones(1, 3))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        y.add_(emu(torch.ones(2, 3)))
    assert x.cpu().tolist() == list(range(6)) and y.cpu().tolist() == [[1.0, 1.0, 1.0]]


# --------------------------------------------------------------------------- out=
def test_out_correct_shape_and_strides_kept(stats):
    a, b = make(torch.float32, (3, 4), 1), make(torch.float32, (3, 4), 2)
    out = emu(torch.zeros(4, 3)).t()  # correctly shaped, non-contiguous
    ptr = out.data_ptr()
    assert torch.add(emu(a), emu(b), alpha=2, out=out) is out
    assert out.stride() == (1, 3) and out.data_ptr() == ptr
    torch.testing.assert_close(out.cpu(), torch.add(a, b, alpha=2), **EXACT)
    torch.mul(emu(a), emu(b), out=out)
    torch.testing.assert_close(out.cpu(), a * b, **EXACT)
    assert stats.native("aten::add.out") == 1 and stats.native("aten::mul.out") == 1


def test_out_empty_is_resized():
    a, b = make(torch.float32, (3, 1), 1), make(torch.float32, (1, 4), 2)
    for op in (torch.add, torch.mul):
        out = torch.empty(0, device="emu")
        op(emu(a), emu(b), out=out)
        assert out.shape == (3, 4)
        torch.testing.assert_close(out.cpu(), op(a, b), **EXACT)


def test_out_safe_cast_allowed_unsafe_rejected():
    a, b = make(torch.int32, (5,), 1), make(torch.int32, (5,), 2)
    out = torch.empty(5, dtype=torch.float64, device="emu")  # int32 -> float64 is a safe cast
    torch.add(emu(a), emu(b), out=out)
    torch.testing.assert_close(out.cpu(), (a + b).double(), **EXACT)
    f = make(torch.float32, (5,), 3)
    bad = emu(torch.full((5,), 9, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.add(emu(f), emu(f), out=bad)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.mul(emu(f), 2, out=bad)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.add(emu(a), emu(b), out=torch.empty(5, dtype=torch.bool, device="emu"))
    assert bad.cpu().tolist() == [9] * 5  # untouched


def test_out_wrong_shape_and_wrong_device():
    a = emu(make(torch.float32, (3, 4), 1))
    out = emu(torch.full((2, 2), 7.0))
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(a, a, out=torch.empty(3, 4))
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(a, a, out=torch.empty(3, 4, device="emu:1"))
    assert out.cpu().unique().tolist() == [7.0]
    # A non-empty out of the wrong shape is resized with ATen's deprecation warning, as on CPU.
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.add(a, a, out=out)
    torch.testing.assert_close(out.cpu(), 2 * a.cpu(), **EXACT)


def test_out_overlap_rules():
    buf = emu(torch.arange(20, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        torch.add(buf[2:14], 1, out=buf[:12])  # partial overlap with an input
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        torch.mul(buf[:12], buf[1:13], out=buf[6:18])
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.add(emu(torch.ones(4)), 1, out=emu(torch.zeros(1)).expand(4))  # internal overlap
    assert buf.cpu().tolist() == list(map(float, range(20)))  # nothing was written
    torch.add(buf[:12], 1, out=buf[:12])  # exact alias: the in-place form is legal
    torch.mul(buf[::2], buf[::2], out=buf[::2])
    ref = torch.arange(20, dtype=torch.float32)
    ref[:12] += 1
    ref[::2] *= ref[::2].clone()
    torch.testing.assert_close(buf.cpu(), ref, **EXACT)


def test_out_zero_elements():
    out = emu(torch.empty(0, 4))
    torch.add(emu(torch.ones(0, 4)), 1, out=out)
    assert out.shape == (0, 4)
    assert torch.relu(emu(torch.ones(0, 3))).shape == (0, 3)


# -------------------------------------------------------------------------- mm / addmm
def _rand(shape, seed, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (33, 7, 17), (64, 64, 64), (5, 300, 40), (70, 513, 3)])
def test_mm_float32(m, k, n, stats):
    a, b = _rand((m, k), 1), _rand((k, n), 2)
    got = torch.mm(emu(a), emu(b))
    assert got.dtype == torch.float32 and got.shape == (m, n)
    reference = (a.double() @ b.double()).float()
    torch.testing.assert_close(got.cpu(), reference, rtol=1.3e-6 * k, atol=1e-5 * k)
    assert stats.native("aten::mm") == 1 and stats.fallback("aten::mm") == 0


def test_mm_float64():
    a, b = _rand((20, 100), 1, torch.float64), _rand((100, 9), 2, torch.float64)
    torch.testing.assert_close(torch.mm(emu(a), emu(b)).cpu(), a @ b, rtol=1e-12 * 100, atol=1e-12 * 100)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, dict(rtol=1.6e-2, atol=1e-2)),
                                       (torch.float16, dict(rtol=1e-3, atol=1e-3))], ids=["bf16", "fp16"])
@pytest.mark.parametrize("k", [8, 96, 500])
def test_mm_reduced_precision(dtype, tol, k, stats):
    a, b = _rand((24, k), 3, dtype), _rand((k, 40), 4, dtype)
    got = torch.mm(emu(a), emu(b))
    assert got.dtype == dtype
    reference = (a.float() @ b.float()).to(dtype)  # fp32 accumulation, one rounding
    torch.testing.assert_close(got.cpu(), reference, **tol)
    assert stats.native("aten::mm") == 1


def test_mm_transposed_and_sliced_operands():
    a, b = _rand((30, 20), 5), _rand((40, 30), 6)
    ea, eb = emu(a), emu(b)
    torch.testing.assert_close(torch.mm(ea.t(), eb.t()).cpu(), a.t() @ b.t(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(torch.mm(ea[::2, 1:11], eb[3:13, ::3]).cpu(), a[::2, 1:11] @ b[3:13, ::3],
                               rtol=1e-5, atol=1e-4)
    torch.testing.assert_close((ea.t() @ ea).cpu(), a.t() @ a, rtol=1e-5, atol=1e-4)


def test_mm_empty_dimensions():
    check(torch.mm, torch.empty(3, 0), torch.empty(0, 4))  # K = 0: zeros
    check(torch.mm, torch.empty(0, 3), _rand((3, 2), 1))
    check(torch.addmm, _rand((3, 4), 2), torch.empty(3, 0), torch.empty(0, 4), beta=2)


@pytest.mark.parametrize("bias_shape", [(9,), (6, 9), (6, 1), ()], ids=str)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2), (-1, 0.25), (0, 1), (2, 0)])
def test_addmm_beta_alpha(bias_shape, beta, alpha, stats):
    bias, a, b = _rand(bias_shape, 1), _rand((6, 13), 2), _rand((13, 9), 3)
    got = torch.addmm(emu(bias), emu(a), emu(b), beta=beta, alpha=alpha)
    reference = torch.addmm(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha).float()
    torch.testing.assert_close(got.cpu(), reference, rtol=1.3e-6 * 13, atol=1e-5 * 13)
    assert stats.native("aten::addmm") == 1


def test_addmm_beta_zero_ignores_nan_in_input():
    bias = torch.full((4, 5), float("nan"))
    bias[0, 0] = float("inf")
    a, b = _rand((4, 3), 1), _rand((3, 5), 2)
    got = torch.addmm(emu(bias), emu(a), emu(b), beta=0, alpha=1.5)
    assert not got.cpu().isnan().any() and not got.cpu().isinf().any()
    torch.testing.assert_close(got.cpu(), 1.5 * (a @ b), rtol=1e-6, atol=1e-6)


def test_addmm_alpha_zero_ignores_nan_in_matrices():
    a = _rand((4, 3), 1)
    a[1, 1] = float("nan")
    bias = _rand((5,), 3)
    check(torch.addmm, bias, a, _rand((3, 5), 2), beta=2, alpha=0)  # CPU: 2 * bias, no NaN


def test_addmm_bf16_and_out_forms(stats):
    bias, a, b = _rand((16,), 1, torch.bfloat16), _rand((8, 32), 2, torch.bfloat16), _rand((32, 16), 3, torch.bfloat16)
    got = torch.addmm(emu(bias), emu(a), emu(b), beta=0.5, alpha=2)
    reference = (0.5 * bias.float() + 2 * (a.float() @ b.float())).to(torch.bfloat16)
    torch.testing.assert_close(got.cpu(), reference, rtol=1.6e-2, atol=1e-2)
    out = torch.empty(0, device="emu")
    fa, fb = _rand((8, 32), 2), _rand((32, 16), 3)
    torch.mm(emu(fa), emu(fb), out=out)
    assert out.shape == (8, 16)
    torch.testing.assert_close(out.cpu(), fa @ fb, rtol=1e-5, atol=1e-4)
    c = emu(_rand((8, 16), 4))
    torch.addmm(c, emu(fa), emu(fb), out=c)  # exact alias of the bias: the in-place form
    torch.testing.assert_close(c.cpu(), _rand((8, 16), 4) + fa @ fb, rtol=1e-5, atol=1e-4)
    assert stats.native("aten::mm.out") == 1 and stats.native("aten::addmm.out") == 1
    with pytest.raises(RuntimeError, match="dtype"):
        torch.mm(emu(fa), emu(fb), out=torch.empty(8, 16, dtype=torch.float64, device="emu"))


def test_mm_errors():
    a = emu(_rand((3, 4), 1))
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(3x4 and 3x4\)"):
        torch.mm(a, a)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(a, emu(_rand((4, 2), 2, torch.float64)))
    with pytest.raises(RuntimeError, match="matrix"):
        torch.mm(a, emu(torch.ones(4)))
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(a, emu(_rand((4, 2), 3)).to("emu:1"))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_mm_runs_natively(dtype, stats):
    # Integer GEMM is a device kernel (64-bit accumulation wrapping to the dtype: CPU's result
    # exactly); more integer cases in test_linalg.py.
    a = torch.randint(-9, 9, (5, 6), dtype=dtype)
    b = torch.randint(-9, 9, (6, 4), dtype=dtype)
    got = torch.mm(emu(a), emu(b))
    got_addmm = torch.addmm(emu(torch.ones(4, dtype=dtype)), emu(a), emu(b))
    assert got.device.type == "emu" and got.dtype == dtype
    torch.testing.assert_close(got.cpu(), a @ b, **EXACT)
    torch.testing.assert_close(got_addmm.cpu(), 1 + a @ b, **EXACT)
    assert stats.native("aten::mm") == 1 and stats.fallback("aten::mm") == 0
    assert stats.native("aten::addmm") == 1 and stats.fallback("aten::addmm") == 0


# ------------------------------------------------------------------------------ factories
FACTORIES = {
    "zeros": (lambda d: torch.zeros(3, 4, device=d), "aten::zero_"),
    "zeros_int8": (lambda d: torch.zeros(5, dtype=torch.int8, device=d), "aten::zero_"),
    "ones": (lambda d: torch.ones(2, 3, dtype=torch.float16, device=d), "aten::fill_.Scalar"),
    "ones_bool": (lambda d: torch.ones(4, dtype=torch.bool, device=d), "aten::fill_.Scalar"),
    "full": (lambda d: torch.full((2, 3), 7.5, device=d), "aten::fill_.Scalar"),
    "full_int": (lambda d: torch.full((4,), -3, dtype=torch.int32, device=d), "aten::fill_.Scalar"),
    "full_inf": (lambda d: torch.full((2,), float("-inf"), dtype=torch.bfloat16, device=d), "aten::fill_.Scalar"),
    "arange": (lambda d: torch.arange(10, device=d), "aten::arange.start_out"),
    "arange_int_neg_step": (lambda d: torch.arange(10, -4, -3, device=d), "aten::arange.start_out"),
    "arange_float": (lambda d: torch.arange(0, 1, 0.1, device=d), "aten::arange.start_out"),
    "arange_float_neg_step": (lambda d: torch.arange(5, -5, -1.5, device=d), "aten::arange.start_out"),
    "arange_f64": (lambda d: torch.arange(-2, 2, 0.25, dtype=torch.float64, device=d), "aten::arange.start_out"),
    "arange_bf16": (lambda d: torch.arange(0, 300, 7, dtype=torch.bfloat16, device=d), "aten::arange.start_out"),
    "arange_int32": (lambda d: torch.arange(-5, 5, 2, dtype=torch.int32, device=d), "aten::arange.start_out"),
    "arange_empty": (lambda d: torch.arange(3, 3, device=d), None),
    "arange_f64_inexact": (lambda d: torch.arange(-3, 3.5, 0.7, dtype=torch.float64, device=d),
                           "aten::arange.start_out"),
    # integer dtypes truncate float arguments first, as CPU does (length rules differ for int64)
    "arange_int64_float_start": (lambda d: torch.arange(-2.5, 2, dtype=torch.int64, device=d), "aten::arange.start_out"),
    "arange_int64_float_step": (lambda d: torch.arange(0, 5, 1.5, dtype=torch.int64, device=d), "aten::arange.start_out"),
    "arange_int64_float_neg": (lambda d: torch.arange(10.7, -4, -2.5, dtype=torch.int64, device=d),
                               "aten::arange.start_out"),
    "arange_int32_float_step": (lambda d: torch.arange(0, 2, 0.3, dtype=torch.int32, device=d), "aten::arange.start_out"),
    "arange_int8_wraps": (lambda d: torch.arange(120, 140, 5, dtype=torch.int8, device=d), "aten::arange.start_out"),
    "linspace_int_float_args": (lambda d: torch.linspace(0.7, 3.9, 5, dtype=torch.int64, device=d), "aten::linspace.out"),
    "linspace": (lambda d: torch.linspace(-1, 1, 7, device=d), "aten::linspace.out"),
    "linspace_one": (lambda d: torch.linspace(-1, 1, 1, device=d), None),
    "linspace_big": (lambda d: torch.linspace(-3, 100, 1001, device=d), "aten::linspace.out"),
    "linspace_f16": (lambda d: torch.linspace(0, 1, 11, dtype=torch.float16, device=d), "aten::linspace.out"),
    "linspace_int": (lambda d: torch.linspace(-10, 10, 7, dtype=torch.int64, device=d), "aten::linspace.out"),
    "linspace_desc": (lambda d: torch.linspace(5, -5, 6, device=d), "aten::linspace.out"),
    "eye": (lambda d: torch.eye(4, device=d), "aten::eye.m_out"),
    "eye_nm": (lambda d: torch.eye(3, 5, device=d), "aten::eye.m_out"),
    "eye_mn_int": (lambda d: torch.eye(5, 2, dtype=torch.int32, device=d), "aten::eye.m_out"),
    "zeros_like": (lambda d: torch.zeros_like(torch.empty(2, 3, device=d).t()), "aten::zero_"),
    "ones_like": (lambda d: torch.ones_like(torch.empty(3, dtype=torch.int64, device=d)), "aten::fill_.Scalar"),
    "full_like": (lambda d: torch.full_like(torch.empty(2, 3, dtype=torch.int32, device=d), 4), "aten::fill_.Scalar"),
}


@pytest.mark.parametrize("name", FACTORIES)
def test_factories_match_cpu(name, stats):
    make_on, native_op = FACTORIES[name]
    expected = make_on("cpu")
    got = make_on("emu")
    assert got.device == torch.device("emu", 0)
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.stride() == expected.stride()
    tol = {} if name.startswith(("linspace", "arange")) and expected.dtype.is_floating_point else EXACT
    torch.testing.assert_close(got.cpu(), expected, **tol)
    if native_op is not None:
        assert stats.native(native_op) >= 1, torch.emu.op_stats()
    assert torch.emu.op_stats()["host_fallback"] == {}


def test_linspace_one_step_is_start():
    assert torch.linspace(-1, 1, 1, device="emu").cpu().tolist() == [-1.0]
    assert torch.linspace(3, 1, 1, dtype=torch.int32, device="emu").cpu().tolist() == [3]


FILL_CASES = [(torch.int8, 127), (torch.int8, 128), (torch.int8, -129), (torch.uint8, -1), (torch.uint8, -256),
              (torch.uint8, 256), (torch.int32, 2.7), (torch.int32, -2.7), (torch.int32, 1e10), (torch.int8, 127.9),
              (torch.uint8, -0.5), (torch.int64, 2 ** 63 - 1), (torch.int64, -2 ** 63), (torch.int64, 9.3e18),
              (torch.int8, float("inf")), (torch.int32, float("nan")), (torch.float16, 1e6), (torch.float16, 65519),
              (torch.bfloat16, 1e39), (torch.float32, 1e39), (torch.float32, float("-inf")), (torch.bool, 0.5),
              (torch.bool, 5), (torch.float64, 1e300)]


@pytest.mark.parametrize("dtype,value", FILL_CASES, ids=[f"{d}-{v}" for d, v in FILL_CASES])
def test_fill_value_range_checks_match_cpu(dtype, value):
    """CPU raises 'value cannot be converted ... without overflow' where c10::checked_convert
    does; the device used to wrap silently (int8 fill_(300) stored 44)."""
    try:
        expected = torch.zeros(3, dtype=dtype).fill_(value)
    except RuntimeError:
        expected = None
    target = torch.full((3,), 1, dtype=dtype, device="emu")
    if expected is None:
        with pytest.raises(RuntimeError, match="without overflow"):
            target.fill_(value)
        assert target.cpu().tolist() == [1, 1, 1]  # unchanged
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.full((2,), value, dtype=dtype, device="emu")
    else:
        torch.testing.assert_close(target.fill_(value).cpu(), expected, **EXACT, equal_nan=True)


def test_scalar_operands_wrap_like_cpu():
    """A scalar operand is cast to the result dtype as CPU's TensorIterator does (wrapping)."""
    check(torch.add, torch.tensor([1, 2, 3], dtype=torch.int8), 300)
    check(torch.mul, torch.tensor([1, 2, 3], dtype=torch.int8), -200)
    check(torch.add, torch.tensor([1, 2, 3], dtype=torch.uint8), -1)
    check(torch.add, torch.tensor([1.0, 2.0], dtype=torch.float16), 1e6)  # inf, like CPU
    check(torch.mul, torch.tensor([1, 2], dtype=torch.int32), torch.tensor(2 ** 40))


def test_empty_like_keeps_metadata():
    src = torch.empty(4, 6, dtype=torch.bfloat16, device="emu:1").t()
    e = torch.empty_like(src)
    assert e.device == src.device and e.dtype == src.dtype and e.shape == src.shape
    assert e.stride() == torch.empty_like(torch.empty(4, 6).t()).stride()
    assert torch.empty_like(src, dtype=torch.int8).dtype == torch.int8


def test_factory_errors():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 10, 0, device="emu")
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        torch.arange(0, 10, -1, device="emu")
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.linspace(0, 1, -2, device="emu")
    with pytest.raises(RuntimeError, match="without overflow"):  # CPU: start/end must fit the dtype
        torch.linspace(0, 1e30, 3, dtype=torch.int32, device="emu")
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.linspace(0, 1e6, 3, dtype=torch.float16, device="emu")
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.arange(0, 3, dtype=torch.bool, device="emu")  # CPU has no bool arange/linspace either
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.linspace(0, 1, 3, dtype=torch.bool, device="emu")
    with pytest.raises((RuntimeError, ValueError), match="step must be nonzero"):
        torch.arange(0, 2, 0.3, dtype=torch.int64, device="emu")  # the step truncates to 0


# ------------------------------------------------------------------- autograd: an MLP
def test_mlp_forward_backward_matches_cpu(stats):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16),
                                    torch.nn.ReLU(), torch.nn.Linear(16, 4))
    emu_model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16),
                                    torch.nn.ReLU(), torch.nn.Linear(16, 4))
    emu_model.load_state_dict(cpu_model.state_dict())
    emu_model.to("emu")
    assert all(p.device.type == "emu" for p in emu_model.parameters())
    x = torch.randn(8, 12)
    target = torch.randn(8, 4)

    threads = []
    hidden = emu_model[1]
    hidden.register_full_backward_hook(lambda *_: threads.append(threading.get_ident()))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the loss reductions take the host fallback
        cpu_loss = ((cpu_model(x) - target) * (cpu_model(x) - target)).sum()
        out = emu_model(emu(x))
        diff = out - emu(target)
        emu_loss = (diff * diff).sum()
        cpu_loss.backward()
        emu_loss.backward()

    torch.testing.assert_close(out.cpu(), cpu_model(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(emu_loss.cpu(), cpu_loss, rtol=1e-5, atol=1e-4)
    for (name, p_cpu), p_emu in zip(cpu_model.named_parameters(), emu_model.parameters()):
        assert p_emu.grad is not None and p_emu.grad.device.type == "emu", name
        torch.testing.assert_close(p_emu.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-5, msg=name)
    # backward of emu tensors runs on the autograd engine's device worker thread
    assert threads and threads[0] != threading.get_ident()
    assert stats.native("aten::addmm") >= 3 and stats.native("aten::mm") >= 4  # forward + weight grads
    assert stats.native("aten::relu") == 2
    assert stats.fallback("aten::addmm") == 0 and stats.fallback("aten::mm") == 0


# ------------------------------------------------------------------------------- threads
def test_four_threads_run_independent_work():
    errors, barrier = [], threading.Barrier(4)

    def work(i):
        try:
            torch.emu.set_device(i % 2)  # thread-local, like CUDA
            barrier.wait()
            g = torch.Generator().manual_seed(100 + i)
            for _ in range(6):
                a, b = torch.randn(24, 40, generator=g), torch.randn(40, 16, generator=g)
                ea, eb = a.to("emu"), b.to("emu")
                assert ea.device.index == i % 2
                torch.testing.assert_close((ea @ eb).cpu(), a @ b, rtol=1e-5, atol=1e-4)
                torch.testing.assert_close((ea + i).mul_(2).cpu(), (a + i) * 2, **EXACT)
            assert torch.emu.current_device() == i % 2
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append((i, err))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert torch.emu.current_device() == 0  # other threads' set_device does not leak here


# -- sub and div (true division) -------------------------------------------------------------
# sub is exact like add. div computes in the (floating) result dtype's opmath and rounds
# once; CPU may use a reciprocal or fused form in its vectorized body, so div uses the
# dtype's default tolerance.

@pytest.mark.parametrize("da,db", list(itertools.product(DTYPES, DTYPES)), ids=str)
def test_sub_div_every_dtype_pair(da, db, stats):
    a, b = make(da, (5, 7)), make(db, (5, 7), seed=1)
    for op, tol in ((torch.sub, EXACT), (torch.div, {})):
        try:
            expected = op(a, b)
        except RuntimeError as cpu_error:
            with pytest.raises(RuntimeError) as info:
                op(emu(a), emu(b))
            assert str(info.value) == str(cpu_error)
            continue
        got = op(emu(a), emu(b))
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tol)
    assert "aten::div.Tensor" in torch.emu.op_stats()["native"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32], ids=str)
def test_sub_div_scalars_in_place_and_out(dtype):
    a = make(dtype, (16,))
    check(torch.sub, a, 3, alpha=2)
    check(torch.div, a, 3, tol={})
    check(torch.div, 2.5, a.abs().to(torch.float32) + 1, tol={})
    x = emu(a.clone())
    x.sub_(emu(a.flip(0)))
    torch.testing.assert_close(x.cpu(), a - a.flip(0), rtol=0, atol=0)
    if dtype.is_floating_point:
        y = emu(a.clone())
        y.div_(4)
        torch.testing.assert_close(y.cpu(), a / 4)
    else:  # true division cannot write back into an integer tensor, as on CPU
        with pytest.raises(RuntimeError, match="can't be cast"):
            emu(a.clone()).div_(4)
    out = torch.empty(16, dtype=torch.float64, device="emu")
    torch.div(emu(a), 7, out=out)
    torch.testing.assert_close(out.cpu(), torch.div(a, 7).to(torch.float64))
