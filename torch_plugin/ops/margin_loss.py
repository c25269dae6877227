"""Margin losses (pooling and sampling extras): multi_margin_loss and multilabel_margin_loss,
forward and backward, float32/float64 (CPU has no float16/bfloat16 kernels either). Target
ranges are checked before the launch with one device reduction and one synchronisation, so a
bad target is CPU's error and never a kernel fault that would poison the context.
"""
from __future__ import annotations

import torch

from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops._windows import _output  # new outputs are contiguous: the inputs have at most 2 dims

OVERLOADS = Overloads(__name__)

_MARGIN_DTYPES = frozenset({torch.float32, torch.float64})


def _target_range(target):
    refuse_in_projection(None, "checks device values on the host before it launches (the target's range)")
    return tuple(int(v) for v in torch.stack((target.min(), target.max())).tolist()) if target.numel() else (0, 0)


def _multi_margin_args(name, x, target, p, weight):
    tensors = [x, target] + ([weight] if weight is not None else [])
    device = common_device(name, *tensors)
    if x.dtype not in _MARGIN_DTYPES:
        raise unsupported_dtype(name, x.dtype, _MARGIN_DTYPES)
    if x.dim() > 2 or (x.dim() == 2 and x.shape[1] == 0) or (x.dim() == 1 and x.numel() == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(x.shape)}")
    nframe = x.shape[0] if x.dim() == 2 else 1
    C = x.shape[-1] if x.dim() else 1
    if target.dim() > 1 or target.numel() != nframe:
        raise RuntimeError(f"inconsistent target size, expected {nframe} but got {list(target.shape)}")
    if target.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    if weight is not None and (weight.dim() > 1 or weight.numel() != C):
        raise RuntimeError(f"inconsistent weight size, expected {C} but got {list(weight.shape)}")
    if weight is not None and weight.dtype != x.dtype:
        raise RuntimeError(f"expected scalar type {x.dtype} but found {weight.dtype}")
    p = int(p) if float(p) == int(p) else p
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    lo, hi = _target_range(target)
    if lo < 0 or hi >= C:
        raise RuntimeError("target out of range")
    return device, nframe, C, p, weight


def _weight_args(weight, C):
    if weight is None:
        return None
    return device_ref(weight.reshape(C))


@OVERLOADS.implements("multi_margin_loss", "multi_margin_loss.out")
def _multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=1, out=None):
    name = "aten::multi_margin_loss"
    device, nframe, C, p, weight = _multi_margin_args(name, x, target, p, weight)
    reduction = int(reduction)
    shape = (nframe,) if reduction == 0 and target.dim() > 0 else ()
    out = _output(name, out, shape, x.dtype, device, x, x, target)
    if out.numel():
        flat = out.reshape(-1) if out.dim() else out.view(1)
        rt().launch("multi_margin_loss", (device_ref(flat, (max(flat.numel(), 1),), flat.stride()),
                                          device_ref(x.reshape(nframe, C)), device_ref(target.reshape(nframe)),
                                          _weight_args(weight, C), p, float(margin), reduction),
                    current_stream(device))
    return out


@OVERLOADS.implements("multi_margin_loss_backward", "multi_margin_loss_backward.grad_input")
def _multi_margin_loss_backward(grad_output, x, target, p, margin, weight=None, reduction=1, grad_input=None):
    name = "aten::multi_margin_loss_backward"
    device, nframe, C, p, weight = _multi_margin_args(name, x, target, p, weight)
    common_device(name, grad_output, x)
    reduction = int(reduction)
    per_sample = reduction == 0 and target.dim() > 0
    if grad_output.numel() != (nframe if per_sample else 1) or grad_output.dtype != x.dtype:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} and dtype {grad_output.dtype} "
                           f"does not match the loss")
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x, grad_output, x, target)
    if grad_input.numel():
        go = grad_output.reshape(-1)
        go_ref = device_ref(go, (nframe,), (go.stride(0) if per_sample else 0,))
        rt().launch("multi_margin_loss_backward", (device_ref(grad_input.view(nframe, C)), go_ref,
                                                   device_ref(x.reshape(nframe, C)),
                                                   device_ref(target.reshape(nframe)), _weight_args(weight, C), p,
                                                   float(margin), reduction), current_stream(device))
    return grad_input


def _multilabel_args(name, x, target):
    device = common_device(name, x, target)
    if x.dtype not in _MARGIN_DTYPES:
        raise unsupported_dtype(name, x.dtype, _MARGIN_DTYPES)
    if x.dim() > 2 or (x.dim() == 2 and x.shape[1] == 0) or (x.dim() == 1 and x.numel() == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(x.shape)}")
    if tuple(target.shape) != tuple(x.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: {list(x.shape)}")
    if target.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    nframe = x.shape[0] if x.dim() == 2 else 1
    C = x.shape[-1] if x.dim() else 1
    lo, hi = _target_range(target)
    if lo < -1 or hi >= C:
        raise RuntimeError("argument #2 'target' is out of range")
    return device, nframe, C


@OVERLOADS.implements("multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output")
def _multilabel_forward(x, target, reduction, output=None, is_target=None):
    name = "aten::multilabel_margin_loss_forward"
    device, nframe, C = _multilabel_args(name, x, target)
    reduction = int(reduction)
    shape = (nframe,) if reduction == 0 and x.dim() > 1 else ()
    output = _output(name, output, shape, x.dtype, device, x, x, target)
    is_target = _output(name, is_target, target.shape, x.dtype, device, x, x, target, output)
    if output.numel():
        flat = output.reshape(-1) if output.dim() else output.view(1)
        rt().launch("multilabel_margin_loss", (device_ref(flat, (flat.numel(),), flat.stride()),
                                               device_ref(is_target.view(nframe, C)), device_ref(x.reshape(nframe, C)),
                                               device_ref(target.reshape(nframe, C)), reduction),
                    current_stream(device))
    return output, is_target


@OVERLOADS.implements("multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input")
def _multilabel_backward(grad_output, x, target, reduction, is_target, grad_input=None):
    name = "aten::multilabel_margin_loss_backward"
    device, nframe, C = _multilabel_args(name, x, target)
    common_device(name, grad_output, x, is_target)
    reduction = int(reduction)
    per_sample = reduction == 0 and x.dim() > 1
    if grad_output.numel() != (nframe if per_sample else 1) or grad_output.dtype != x.dtype:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} and dtype {grad_output.dtype} "
                           f"does not match the loss")
    if tuple(is_target.shape) != tuple(x.shape) or is_target.dtype != x.dtype:
        raise RuntimeError(f"inconsistent is_target size: {list(is_target.shape)} for input of size: "
                           f"{list(x.shape)}")
    grad_input = _output(name, grad_input, x.shape, x.dtype, device, x, grad_output, x, target, is_target)
    if grad_input.numel():
        go = grad_output.reshape(-1)
        go_ref = device_ref(go, (nframe,), (go.stride(0) if per_sample else 0,))
        rt().launch("multilabel_margin_loss_backward", (device_ref(grad_input.view(nframe, C)), go_ref,
                                                        device_ref(x.reshape(nframe, C)),
                                                        device_ref(target.reshape(nframe, C)),
                                                        device_ref(is_target.reshape(nframe, C)), reduction),
                    current_stream(device))
    return grad_input
