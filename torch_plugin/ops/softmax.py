"""softmax and log_softmax over one dimension, forward and backward, lowered to the vector engine
(device kernels: softmax's in emulator/kernels/norm.pyx, log_softmax's in softmax.pyx; nll_loss,
ops/loss.py, is the other piece of ``F.cross_entropy``).

Native overloads: ``_softmax`` / ``.out``, ``_safe_softmax``, ``_softmax_backward_data`` / ``.out``;
``_log_softmax`` / ``.out``, ``_log_softmax_backward_data`` / ``.out``.

Any rank and any strides (outputs are contiguous, as on CPU), float32/float64/float16/bfloat16.
Computed in float32 (float64 for float64) with the max subtracted first. log_softmax's
``half_to_float=True`` is rejected like CPU does ("softmax with half to float conversion is not
supported on CPU"); its backward is ``grad_output - exp(output) * sum(grad_output)``, result in
``input_dtype``. Beyond CPU: ``_softmax(half_to_float=True)`` gives a float32 result for a
float16/bfloat16 input, as CUDA does (CPU has no such kernel and raises); float32/float64 inputs
are rejected like CUDA rejects them. ``_safe_softmax`` (scaled_dot_product_attention's) zeroes the
rows that are entirely -inf in the same kernel.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED, scalar_type_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops.normalization import _REDUCED, _check_floating

OVERLOADS = Overloads(__name__)


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _resize_out(out: torch.Tensor, shape, dtype, name: str) -> None:
    if out.dtype != dtype:
        raise RuntimeError(f"{name}: Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    resize_out(out, shape)


def _check_log_softmax_dtype(name: str, dtype) -> None:
    if dtype not in SUPPORTED:
        raise unsupported_dtype(name, dtype, SUPPORTED)
    if dtype not in FLOATING:
        raise RuntimeError(f"{name}: \"log_softmax\" not implemented for '{str(dtype).replace('torch.', '')}'"
                           " (floating dtypes only)")


def _softmax_ref(t: torch.Tensor):
    """Descriptor for the kernel: a 0-dim tensor is one vector of length 1."""
    return device_ref(t, (1,), (0,)) if t.dim() == 0 else device_ref(t)


@OVERLOADS.implements("_softmax", "_softmax.out")
def _softmax(x, dim, half_to_float, out=None, safe=False):
    name = "aten::_safe_softmax" if safe else "aten::_softmax"
    device = common_device(name, x) if out is None else common_device(name, x, out)
    _check_floating(name, "softmax_lastdim_kernel_impl", x.dtype)
    dtype = x.dtype
    if half_to_float:
        if x.dtype not in _REDUCED:
            raise RuntimeError(f"{name}: conversion is supported for Half and BFloat16 types only "
                               f"(got {x.dtype} with half_to_float=True)")
        dtype = torch.float32
    d = _wrap_dim(dim, x.dim())
    if out is None:
        out = torch.empty(x.shape, dtype=dtype, device=torch.device("emu", device))
    else:
        if out.dtype != dtype:
            raise RuntimeError(f"{name}: Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
        resize_out(out, x.shape)
        check_overlap(name, out, x)
    if out.numel():
        rt().launch("softmax", (_softmax_ref(out), _softmax_ref(x), d) + ((True,) if safe else ()), current_stream(device))
    return out


@OVERLOADS.implements("_safe_softmax")
def safe_softmax(self, dim, dtype=None):
    """aten::_safe_softmax (scaled_dot_product_attention's softmax): ``softmax(self, dim, dtype)``
    with the rows whose every element is -inf (fully masked) set to zero, in one kernel instead of
    CPU's softmax + eq + all + where."""
    x = self if dtype is None or dtype == self.dtype else self.to(dtype)
    return _softmax(x, dim, False, safe=True)


@OVERLOADS.implements("_softmax_backward_data", "_softmax_backward_data.out")
def softmax_backward_data(grad_output, output, dim, input_dtype, grad_input=None):
    name = "aten::_softmax_backward_data"
    out = grad_input  # the .out form's result tensor
    tensors = (grad_output, output) if out is None else (grad_output, output, out)
    device = common_device(name, *tensors)
    _check_floating(name, "softmax_backward_data", grad_output.dtype, output.dtype, input_dtype)
    if grad_output.dtype != output.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(output.dtype)} but found "
                           f"{scalar_type_name(grad_output.dtype)}")
    if input_dtype != output.dtype and not (input_dtype in _REDUCED and output.dtype == torch.float32):
        raise RuntimeError(f"{name}: expected input and grad types to match, or input to be float16/bfloat16 "
                           f"and grad to be float32 (got input_dtype {input_dtype}, grad {output.dtype})")
    if grad_output.shape != output.shape:
        raise RuntimeError(f"{name}: grad_output shape {list(grad_output.shape)} does not match output shape "
                           f"{list(output.shape)}")
    d = _wrap_dim(dim, output.dim())
    if out is None:
        out = torch.empty(output.shape, dtype=input_dtype, device=torch.device("emu", device))
    else:
        if out.dtype != input_dtype:
            raise RuntimeError(f"{name}: Expected out tensor to have dtype {input_dtype}, but got {out.dtype} "
                               "instead")
        resize_out(out, output.shape)
        check_overlap(name, out, grad_output, output)
    if out.numel():
        rt().launch("softmax_backward", (_softmax_ref(out), _softmax_ref(grad_output), _softmax_ref(output), d),
                    current_stream(device))
    return out


@OVERLOADS.implements("_log_softmax", "_log_softmax.out")
def log_softmax(x, dim, half_to_float, out=None):
    name = "aten::_log_softmax"
    device = common_device(name, x) if out is None else common_device(name, x, out)
    _check_log_softmax_dtype(name, x.dtype)
    if half_to_float:
        raise RuntimeError("softmax with half to float conversion is not supported on CPU")
    d = _wrap_dim(dim, x.dim())
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=torch.device("emu", device))
    else:
        _resize_out(out, x.shape, x.dtype, name)
        check_overlap(name, out, x)
    if out.numel():
        rt().launch("log_softmax", (_softmax_ref(out), _softmax_ref(x), d), current_stream(device))
    return out


@OVERLOADS.implements("_log_softmax_backward_data", "_log_softmax_backward_data.out")
def log_softmax_backward_data(grad_output, output, dim, input_dtype, out=None):
    name = "aten::_log_softmax_backward_data"
    device = common_device(name, grad_output, output) if out is None else \
        common_device(name, grad_output, output, out)
    for dt in (grad_output.dtype, output.dtype, input_dtype):
        _check_log_softmax_dtype(name, dt)
    if grad_output.shape != output.shape:
        raise RuntimeError(f"{name}: grad_output shape {list(grad_output.shape)} does not match output "
                           f"shape {list(output.shape)}")
    d = _wrap_dim(dim, output.dim())
    if out is None:
        out = torch.empty(output.shape, dtype=input_dtype, device=torch.device("emu", device))
    else:
        _resize_out(out, output.shape, input_dtype, name)
        check_overlap(name, out, grad_output, output)
    if out.numel():
        rt().launch("log_softmax_backward", (_softmax_ref(out), _softmax_ref(grad_output), _softmax_ref(output), d),
                    current_stream(device))
    return out
