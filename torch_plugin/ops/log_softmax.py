"""log_softmax (with nll_loss, ops/loss.py, the pieces of ``F.cross_entropy``) lowered to the vector engine.

Native overloads: ``_log_softmax`` / ``_log_softmax.out``, ``_log_softmax_backward_data`` / ``.out``.

log_softmax: over one dimension of a tensor of any rank and any strides (outputs are
contiguous, as on CPU), float32/float64/float16/bfloat16. Computed in float32 (float64 for
float64) with the max subtracted first. ``half_to_float=True`` is rejected like CPU does
("softmax with half to float conversion is not supported on CPU"): the device mirrors the CPU
reference. Backward: ``grad_output - exp(output) * sum(grad_output)``, result in ``input_dtype``.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops._overloads import Overloads

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


def _softmax_ref(t: torch.Tensor):
    """Descriptor for the kernel: a 0-dim tensor is one vector of length 1."""
    if t.dim() == 0:
        return device_ref(t, (1,), (0,))
    return device_ref(t)


def _check_floating(name: str, dtype) -> None:
    if dtype not in SUPPORTED:
        raise unsupported_dtype(name, dtype, SUPPORTED)
    if dtype not in FLOATING:
        raise RuntimeError(f"{name}: \"log_softmax\" not implemented for '{str(dtype).replace('torch.', '')}'"
                           " (floating dtypes only)")


@OVERLOADS.implements("_log_softmax", "_log_softmax.out")
def log_softmax(x, dim, half_to_float, out=None):
    name = "aten::_log_softmax"
    device = common_device(name, x) if out is None else common_device(name, x, out)
    _check_floating(name, x.dtype)
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
        _check_floating(name, dt)
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
