"""PyTorch's contracts across the op library: type promotion (property-based, vs CPU), the out=
rules, and clear rejections of unsupported layouts."""
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

from plugin_testing import make

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.eq, torch.lt, torch.ge,
          torch.remainder, torch.fmod, torch.floor_divide, torch.atan2, torch.pow, torch.logical_and,
          torch.bitwise_and, torch.copysign, torch.hypot, torch.fmax]
SCALARS = [True, 3, -2, 2.5, -0.75]


def _cpu_or_error(fn):
    try:
        return fn(), None
    except Exception as err:  # CPU's own rejection: emu must reject too
        return None, err


def _operand(kind, dtype, shape, seed):
    if kind == "tensor":
        return make(dtype, shape, seed=seed)
    if kind == "0-dim":
        return make(dtype, (), seed=seed)
    return SCALARS[seed % len(SCALARS)]


def _to_emu(x):
    return x.to("emu") if isinstance(x, torch.Tensor) and x.dim() > 0 else x


@settings(max_examples=250, deadline=None)
@given(op=st.sampled_from(BINARY), a_dtype=st.sampled_from(DTYPES), b_dtype=st.sampled_from(DTYPES),
       b_kind=st.sampled_from(["tensor", "0-dim", "0-dim-on-emu", "python"]), seed=st.integers(0, 50),
       broadcast=st.booleans())
def test_binary_type_promotion_and_values_match_cpu(op, a_dtype, b_dtype, b_kind, seed, broadcast):
    """result_type across dimensioned tensors, 0-dim tensors (CPU or emu), Python scalars, signed,
    unsigned, bool and reduced floats: the result dtype and values equal CPU's, or both raise."""
    a = make(a_dtype, (3, 4), seed=seed)
    kind = "0-dim" if b_kind.startswith("0-dim") else b_kind
    b = _operand(kind, b_dtype, (4,) if broadcast else (3, 4), seed + 1)
    expected, cpu_error = _cpu_or_error(lambda: op(a, b))
    b_emu = b.to("emu") if b_kind in ("tensor", "0-dim-on-emu") else b
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cpu_error is not None:
            with pytest.raises(Exception) as info:
                op(a.to("emu"), b_emu).cpu()
            if getattr(info.value, "scope", None) == "operation" and "INVALID_ARGUMENT" in str(info.value):
                # Integer division by zero is found by the kernel: an operation-scope rejection (CPU
                # raises ZeroDivisionError at once); nothing is sticky, the next example just runs.
                assert "ZeroDivisionError" in str(info.value)
            return
        got = op(a.to("emu"), b_emu)
    assert got.dtype == expected.dtype, (op, a_dtype, b, got.dtype, expected.dtype)
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, atol=1e-5 if expected.is_floating_point() else 0,
                               rtol=2e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1.3e-6)


# -- out= --------------------------------------------------------------------------------
OUT_OPS = {
    "exp": (lambda x, y, out: torch.exp(x, out=out), torch.exp),
    "add": (lambda x, y, out: torch.add(x, y, out=out), torch.add),
    "atan2": (lambda x, y, out: torch.atan2(x, y, out=out), torch.atan2),
    "clamp": (lambda x, y, out: torch.clamp(x, -0.5, 0.5, out=out), lambda x, y: torch.clamp(x, -0.5, 0.5)),
    "lt": (lambda x, y, out: torch.lt(x, y, out=out), torch.lt),
}


@pytest.fixture(params=sorted(OUT_OPS))
def out_op(request):
    return OUT_OPS[request.param]


def _xy():
    return make(torch.float32, (4, 6), seed=1), make(torch.float32, (4, 6), seed=2)


def _reference(ref, x, y):
    try:
        return ref(x, y)
    except TypeError:
        return ref(x)


def test_out_empty_is_resized(out_op):
    fn, ref = out_op
    x, y = _xy()
    expected = _reference(ref, x, y)
    out = torch.empty(0, dtype=expected.dtype, device="emu")
    result = fn(x.to("emu"), y.to("emu"), out)
    assert result is out and out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected)


def test_out_noncontiguous_keeps_its_strides(out_op):
    fn, ref = out_op
    x, y = _xy()
    expected = _reference(ref, x, y)
    out = torch.zeros(6, 4, dtype=expected.dtype, device="emu").t()
    strides = out.stride()
    fn(x.to("emu"), y.to("emu"), out)
    assert out.stride() == strides
    torch.testing.assert_close(out.cpu(), expected)


def test_out_wrong_device_or_dtype_is_rejected_before_launch(out_op):
    fn, ref = out_op
    x, y = _xy()
    expected = _reference(ref, x, y)
    if expected.dtype == torch.bool:
        bad = torch.zeros(4, 6, dtype=torch.bool, device="emu")  # bool out of a bool result is fine
        fn(x.to("emu"), y.to("emu"), bad)
        return
    bad = torch.full((4, 6), 7, dtype=torch.int64, device="emu")   # a float result cannot cast to int64
    with pytest.raises(RuntimeError, match="can't be cast"):
        fn(x.to("emu"), y.to("emu"), bad)
    assert (bad.cpu() == 7).all()
    with pytest.raises(RuntimeError, match="device"):
        fn(x.to("emu"), y.to("emu"), torch.zeros(4, 6, dtype=expected.dtype))


def test_out_exact_alias_is_allowed_and_partial_overlap_is_rejected():
    x = make(torch.float32, (4, 6), seed=3)
    e = x.to("emu")
    torch.exp(e, out=e)                                   # the in-place form
    torch.testing.assert_close(e.cpu(), x.exp())
    base = torch.arange(12, dtype=torch.float32, device="emu")
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.add(base[:8], 1, out=base[4:])              # partial overlap
    assert base.cpu().tolist() == [float(i) for i in range(12)]
    left, right = base[:6], base[6:]                      # disjoint views of one storage are fine
    torch.add(left, 1, out=right)
    assert base.cpu().tolist() == [float(i) for i in range(6)] + [float(i + 1) for i in range(6)]


def test_out_internally_overlapping_is_rejected():
    x = torch.ones(4, device="emu")
    out = torch.zeros(1, device="emu").expand(4)
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.exp(x, out=out)


def test_out_with_inputs_that_require_grad_is_rejected():
    x = torch.ones(4, device="emu", requires_grad=True)
    out = torch.empty(4, device="emu")
    with pytest.raises(RuntimeError, match="out="):
        torch.exp(x, out=out)


# -- layouts -------------------------------------------------------------------------------
@pytest.mark.parametrize("make_tensor", [lambda x: x.to_sparse(), lambda x: torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)],
                         ids=["sparse", "quantized"])
def test_unsupported_layouts_are_rejected_by_name(make_tensor):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError, match="not supported on emu .supported: strided"):
            make_tensor(torch.randn(3, 3)).to("emu")


# -- autograd ------------------------------------------------------------------------------
def test_every_registered_op_keeps_its_autograd_formula():
    """A PrivateUse1 kernel for a CompositeImplicitAutograd op (an alias such as arcsin or
    max.other) replaces the composite, and AutogradPrivateUse1 then has only the "not
    implemented" fallback: gradients through it would silently be zero. Every op the device
    registers must keep a real autograd kernel."""
    from torch_plugin.ops import decompositions, registry
    natives = registry.native_kernels()
    lost = []
    for name in [*natives, *decompositions.active(natives)]:
        table = torch._C._dispatch_dump_table(f"aten::{name}")
        entry = [line for line in table.splitlines() if line.startswith("AutogradPrivateUse1")]
        if not entry or "autograd kernel" not in entry[0]:
            lost.append(name)
    assert lost == []
