"""Elementwise ops lowered to the vector engine: add, sub, mul, div (true division), relu,
threshold_backward (the relu gradient).

Type promotion is ``torch.result_type``; a CPU 0-dim operand (a Python scalar
wrapped by ATen) becomes a device scalar. Broadcasting is expressed as zero
strides, so no operand is materialised at the broadcast shape.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED, TO_CODE
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import (binary_refs, broadcast_shape, broadcast_strides, check_overlap,
                                      common_device, current_stream, device_ref, empty_like_layout,
                                      prepare_out, rt)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_REDUCED_FLOAT = (torch.float16, torch.bfloat16)


def _as_device_operand(t, dtype, device: int) -> torch.Tensor:
    if isinstance(t, torch.Tensor) and t.device.type == "emu":
        return t
    # A Python scalar or CPU 0-dim tensor: put it on the device in ``dtype``, as ATen casts
    # scalars to the op's dtype. The cast happens on the host, from the scalar's own dtype (ATen
    # wraps Python numbers as float64/int64/bool), with CPU's wrapping semantics (int8 + 300 adds
    # 44); fill_ would (rightly) reject the out-of-range value.
    if not isinstance(t, torch.Tensor):
        t = torch.tensor(t, dtype=torch.bool if isinstance(t, bool) else
                         torch.int64 if isinstance(t, int) else torch.float64)
    value = t.to(dtype).item()
    return torch.full((), value, dtype=dtype, device=torch.device("emu", device))


def _is_scalar_operand(t) -> bool:
    """A Python number or a 0-dim tensor (CPU or emu): what CPU's TensorIterator treats as a scalar."""
    return not isinstance(t, torch.Tensor) or t.dim() == 0


def _shape(t):
    return t.shape if isinstance(t, torch.Tensor) else ()


def _check_supported(op: str, *dtypes) -> None:
    # Operands and the promoted result (float + 1j is complex): rejected before anything is
    # allocated or launched. (_common.check_dtype raises TypeError, which `a + b` hides.)
    for dtype in dtypes:
        if dtype not in SUPPORTED:
            raise unsupported_dtype(op, dtype, SUPPORTED)


def _is_bool(t) -> bool:
    return t.dtype == torch.bool if isinstance(t, torch.Tensor) else isinstance(t, bool)


def _check_sub_operands(a, b) -> None:
    # ATen's sub_check: any bool operand is an error, with CPU's wording.
    if _is_bool(a) and _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(a) or _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def _check_alpha(result_dtype, alpha):
    if alpha == 1:
        return
    if result_dtype == torch.bool and not isinstance(alpha, bool):
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if result_dtype not in FLOATING and result_dtype != torch.bool and isinstance(alpha, float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _immediate(t):
    """A Python number or CPU 0-dim tensor as an immediate launch argument (a Python number the
    kernel casts to the compute dtype with the device's cast rules); None for a device operand."""
    if isinstance(t, torch.Tensor):
        if t.get_device() >= 0:
            return None
        return t.item()  # a CPU 0-dim tensor (ATen's wrapped number): bool, int or float
    return t


_Tensor = torch.Tensor
_is_alias_of = torch._C._is_alias_of
_INPLACE_NAMES = {op: f"aten::{op}_" for op in ("add", "sub", "mul", "div")}


_IN_PLACE = 1  # binary_refs' flags (csrc/tensor_ref.cpp)
_NO_REDUCED_0DIM = {"mul": 2, "div": 2}


def _binary(op: str, a, b, alpha=1, out=None):
    # The common case first, in as few Python operations as possible (it runs on every step of a
    # training loop): two emu tensors of one floating dtype, one shape and one device, functional
    # or in place. Its result dtype is theirs, with no scalar, cast, broadcast or alpha rule to
    # apply; everything else takes the general path below. binary_refs decides it in C++ and
    # builds both descriptors; it answers None for a case with no elements or one that could
    # overlap, which the Python test below takes.
    if out is None:
        refs = binary_refs(a, b, _NO_REDUCED_0DIM.get(op, 0))
        if refs is not None:
            ref_a, ref_b = refs
            device = ref_a[1]
            out = empty_like_layout(a.shape, a.dtype, device, a, b)
            rt().launch("binary", (op, device_ref(out), ref_a, ref_b, ref_a[3], alpha), current_stream(device))
            return out
    elif out is a:
        refs = binary_refs(a, b, _IN_PLACE | _NO_REDUCED_0DIM.get(op, 0))
        if refs is not None:
            ref_a, ref_b = refs  # out is a: one descriptor serves both
            device = ref_a[1]
            rt().launch("binary", (op, ref_a, ref_a, ref_b, ref_a[3], alpha), current_stream(device))
            return out
    if (isinstance(a, _Tensor) and isinstance(b, _Tensor) and (out is None or out is a)
            and a.dtype is b.dtype and a.dtype in FLOATING and a.shape == b.shape):
        device = a.get_device()
        if device >= 0 and device == b.get_device() and not (
                a.dtype in _REDUCED_FLOAT and op in ("mul", "div") and b.dim() == 0):
            if out is None:
                out = empty_like_layout(a.shape, a.dtype, device, a, b)
            elif not out.is_contiguous() or _is_alias_of(b, out):
                check_overlap(_INPLACE_NAMES[op], out, b)  # only then can out overlap itself or b
            if out.numel():
                ref = device_ref(a)  # in place, out is a: one descriptor serves both
                rt().launch("binary", (op, ref if out is a else device_ref(out), ref, device_ref(b),
                                       TO_CODE[a.dtype], alpha), current_stream(device))
            return out
    return _binary_general(op, a, b, alpha, out)


def _binary_general(op: str, a, b, alpha, out):
    name = f"aten::{op}"
    device = common_device(name, a, b)
    result_dtype = torch.result_type(a, b)
    a_dtype = a.dtype if isinstance(a, torch.Tensor) else None
    b_dtype = b.dtype if isinstance(b, torch.Tensor) else None
    if op == "div" and not result_dtype.is_floating_point and result_dtype in SUPPORTED:
        result_dtype = torch.get_default_dtype()  # true division of integers/bools is floating
    if result_dtype not in SUPPORTED or (a_dtype is not None and a_dtype not in SUPPORTED) \
            or (b_dtype is not None and b_dtype not in SUPPORTED):
        _check_supported(name, *(d for d in (a_dtype, b_dtype) if d is not None), result_dtype)
    if op == "sub":
        _check_sub_operands(a, b)
    if alpha != 1:
        _check_alpha(result_dtype, alpha)
    shape = broadcast_shape(_shape(a), _shape(b))
    if out is None:
        out = empty_like_layout(shape, result_dtype, device, a, b)
    else:
        if out is not a:
            common_device(name, out, a)
            _check_supported(name, out.dtype)
        prepare_out(name, out, shape, result_dtype, a, b)
        check_overlap(name, out, a, b)
    if out.numel() == 0:
        return out
    compute_dtype = result_dtype
    if (result_dtype in _REDUCED_FLOAT and op in ("mul", "div") and _is_scalar_operand(b)
            and a_dtype == result_dtype and out.dtype == result_dtype):
        # CPU's mul for float16/bfloat16 reads a scalar second operand unrounded in float32
        # ("opmath", TensorIterator's original_scalar_value) and rounds the product once; rounding
        # the scalar to float16 first differed from CPU in ~1/3 of the elements. float32 compute
        # is exact for a float16/bfloat16 ``a`` and the store rounds once. (add/sub round the
        # scalar to the tensor dtype on CPU, and so does this kernel.)
        compute_dtype = torch.float32
    # Python scalars and CPU 0-dim operands travel in the launch itself: the kernel casts them to
    # the compute dtype (CPU's wrapping and rounding), with no device buffer and no extra command.
    a_arg = _immediate(a)
    if a_arg is None:
        a_arg = device_ref(a, shape, broadcast_strides(a, shape))
    b_arg = _immediate(b)
    if b_arg is None:
        b_arg = device_ref(b, shape, broadcast_strides(b, shape))
    if result_dtype not in FLOATING:
        alpha = int(alpha)
    rt().launch("binary", (op, device_ref(out), a_arg, b_arg, TO_CODE[compute_dtype], alpha),
                current_stream(device))
    return out


def _binary_overloads(op: str) -> dict:
    """{overload: kernel} for ``op``'s functional, in-place and out= forms (add and sub scale
    ``b`` by ``alpha``; div's schema has no alpha, which is then always 1)."""
    def functional(a, b, *, alpha=1):
        return _binary(op, a, b, alpha)

    def inplace(a, b, *, alpha=1):
        return _binary(op, a, b, alpha, out=a)

    def out_form(a, b, *, alpha=1, out):
        return _binary(op, a, b, alpha, out=out)
    return {f"{op}.Tensor": functional, f"{op}_.Tensor": inplace, f"{op}.out": out_form}


for _op in ("add", "sub", "div"):
    OVERLOADS.update(_binary_overloads(_op))


def true_divide(a, b, out=None):
    """div with rounding_mode=None (the pointwise table's div row hands it here)."""
    return _binary("div", a, b, out=out)


# The mul overloads are registered through fft.py's mul kernels (complex results there, every
# other case back here).
def mul(a, b):
    return _binary("mul", a, b)


def mul_(a, b):
    return _binary("mul", a, b, out=a)


def mul_out(a, b, *, out):
    return _binary("mul", a, b, out=out)


def _relu(a, out):
    common_device("aten::relu", a)
    _check_supported("aten::relu", a.dtype)
    if a.dtype == torch.bool:
        raise RuntimeError("\"clamp_min_scalar_cpu\" not implemented for 'Bool'")
    if out is None:
        out = empty_like_layout(a.shape, a.dtype, a.device.index, a)
    else:
        check_overlap("aten::relu_", out, a)
    if a.numel():
        rt().launch("unary", ("relu", device_ref(out), device_ref(a), TO_CODE[a.dtype]),
                    current_stream(a.device.index))
    return out


@OVERLOADS.implements("relu")
def relu(a):
    return _relu(a, None)


@OVERLOADS.implements("relu_")
def relu_(a):
    return _relu(a, a)


def _threshold_value(threshold, dtype):
    """The threshold as CPU's kernel sees it: Scalar.to<scalar_t>() (checked: out-of-range raises
    like CPU), in float32 for float16/bfloat16 (CPU compares ``float(x) <= threshold``)."""
    if isinstance(threshold, torch.Tensor):
        threshold = threshold.item()
    as_dtype = torch.float32 if dtype in _REDUCED_FLOAT else dtype
    return torch.full((), threshold, dtype=as_dtype).item()


def _threshold_backward(grad, x, threshold, out=None):
    name = "aten::threshold_backward"
    device = common_device(name, grad, x)
    _check_supported(name, grad.dtype, x.dtype)
    result_dtype = torch.result_type(grad, x)
    _check_supported(name, result_dtype)
    if result_dtype == torch.bool:
        raise RuntimeError("\"threshold_cpu\" not implemented for 'Bool'")
    thr = _threshold_value(threshold, result_dtype)
    shape = broadcast_shape(tuple(grad.shape), tuple(x.shape))
    if out is None:
        out = empty_like_layout(shape, result_dtype, device, grad, x)
    else:
        common_device(name, out, grad, x)
        _check_supported(name, out.dtype)
        prepare_out(name, out, shape, result_dtype, grad, x)
        check_overlap(name, out, grad, x)
    if out.numel() == 0:
        return out
    grad = _as_device_operand(grad, result_dtype, device)
    x = _as_device_operand(x, result_dtype, device)
    rt().launch("threshold_backward", (device_ref(out), device_ref(grad, shape, broadcast_strides(grad, shape)),
                                       device_ref(x, shape, broadcast_strides(x, shape)),
                                       TO_CODE[result_dtype], thr),
                current_stream(device))
    return out


@OVERLOADS.implements("threshold_backward")
def threshold_backward(grad_output, self, threshold):
    return _threshold_backward(grad_output, self, threshold)


@OVERLOADS.implements("threshold_backward.grad_input")
def threshold_backward_out(grad_output, self, threshold, *, grad_input):
    return _threshold_backward(grad_output, self, threshold, out=grad_input)
