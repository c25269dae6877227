"""Elementwise ops lowered to the vector engine: add, mul, relu.

Type promotion is ``torch.result_type``; a CPU 0-dim operand (a Python scalar
wrapped by ATen) becomes a device scalar. Broadcasting is expressed as zero
strides, so no operand is materialised at the broadcast shape.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, TO_CODE
from torch_plugin.ops._common import (broadcast_strides, check_dtype, common_device, current_stream,
                                      check_overlap, device_ref, empty_like_layout, prepare_out, rt)


def _as_device_operand(t, dtype, device: int) -> torch.Tensor:
    if isinstance(t, torch.Tensor) and t.device.type == "emu":
        return t
    # A Python scalar or CPU 0-dim tensor: put it on the device in the result dtype, as ATen
    # casts scalars to the op's dtype.
    value = t.item() if isinstance(t, torch.Tensor) else t
    return torch.full((), value, dtype=dtype, device=torch.device("emu", device))


def _shape(t):
    return t.shape if isinstance(t, torch.Tensor) else ()


def _check_alpha(result_dtype, alpha):
    if alpha == 1:
        return
    if result_dtype == torch.bool and not isinstance(alpha, bool):
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if result_dtype not in FLOATING and result_dtype != torch.bool and isinstance(alpha, float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _binary(op: str, a, b, alpha=1, out=None):
    name = f"aten::{op}"
    device = common_device(name, a, b)
    check_dtype(name, a, b)
    result_dtype = torch.result_type(a, b)
    if op == "sub" and result_dtype == torch.bool:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    _check_alpha(result_dtype, alpha)
    shape = torch.broadcast_shapes(_shape(a), _shape(b))
    if out is None:
        out = empty_like_layout(shape, result_dtype, device, a, b)
    else:
        common_device(name, out, a)
        check_dtype(name, out)
        prepare_out(name, out, shape, result_dtype)
        check_overlap(name, out, a, b)
    if out.numel() == 0:
        return out
    a = _as_device_operand(a, result_dtype, device)
    b = _as_device_operand(b, result_dtype, device)
    alpha = alpha if result_dtype in FLOATING else int(alpha)
    rt().launch("binary", (op, device_ref(out), device_ref(a, shape, broadcast_strides(a, shape)),
                           device_ref(b, shape, broadcast_strides(b, shape)), TO_CODE[result_dtype], alpha),
                current_stream(device))
    return out


def add(a, b, *, alpha=1):
    return _binary("add", a, b, alpha)


def add_(a, b, *, alpha=1):
    return _binary("add", a, b, alpha, out=a)


def add_out(a, b, *, alpha=1, out):
    return _binary("add", a, b, alpha, out=out)


def mul(a, b):
    return _binary("mul", a, b)


def mul_(a, b):
    return _binary("mul", a, b, out=a)


def mul_out(a, b, *, out):
    return _binary("mul", a, b, out=out)


def _relu(a, out):
    common_device("aten::relu", a)
    check_dtype("aten::relu", a)
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


def relu(a):
    return _relu(a, None)


def relu_(a):
    return _relu(a, a)
