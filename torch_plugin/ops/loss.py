"""log_softmax and nll_loss (the pieces of ``F.cross_entropy``) lowered to the vector engine.

Native overloads: ``_log_softmax`` / ``_log_softmax.out``, ``_log_softmax_backward_data`` /
``.out``, ``nll_loss_forward`` / ``.output``, ``nll_loss_backward`` / ``.grad_input``.

log_softmax: over one dimension of a tensor of any rank and any strides (outputs are
contiguous, as on CPU), float32/float64/float16/bfloat16. Computed in float32 (float64 for
float64) with the max subtracted first. ``half_to_float=True`` is rejected like CPU does
("softmax with half to float conversion is not supported on CPU"): the device mirrors the CPU
reference. Backward: ``grad_output - exp(output) * sum(grad_output)``, result in ``input_dtype``.

nll_loss: a 1-D (C,) or 2-D (N, C) floating input with an int64 target of shape () / (N,), an
optional weight (C,) of the input's dtype, reduction none/mean/sum and ignore_index; returns
(output, total_weight) like CPU (2-D ``none``: total_weight 0; mean divides by the total
weight; an all-ignored mean is NaN; an empty batch gives NaN (mean) / 0). Anything else (input
of another rank: ``nll_loss_nd`` sends (N, C, d1, ...) to ``nll_loss2d`` anyway; non-int64
targets; mismatched weight/grad dtypes) is handed explicitly to the host fallback
(``fallback.run_on_host``), so it is counted as host fallback and raises CPU's errors.

Out-of-range targets: checking them on the host would need reading the target back (a
synchronising copy), so the kernel checks: a target outside [0, C) that is not ignore_index
raises inside the kernel; the firmware records it as a KERNEL_FAULT, which is sticky for the
context and reported at the next synchronising call as ``torch.AcceleratorError`` (the
message names "Target T is out of bounds."). No clamping, never a silent wrong value.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops import fallback
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt

_REDUCTIONS = (0, 1, 2)  # none, mean, sum


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


# ---------------------------------------------------------------------------------------------
# log_softmax

def _log_softmax(x, dim, half_to_float, out=None):
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


def log_softmax(self, dim, half_to_float):
    return _log_softmax(self, dim, half_to_float)


def log_softmax_out(self, dim, half_to_float, *, out):
    return _log_softmax(self, dim, half_to_float, out)


def _log_softmax_backward(grad_output, output, dim, input_dtype, out=None):
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


def log_softmax_backward_data(grad_output, output, dim, input_dtype):
    return _log_softmax_backward(grad_output, output, dim, input_dtype)


def log_softmax_backward_data_out(grad_output, output, dim, input_dtype, *, out):
    return _log_softmax_backward(grad_output, output, dim, input_dtype, out)


# ---------------------------------------------------------------------------------------------
# nll_loss

def _native_nll(x, target, weight) -> bool:
    """The cases the device kernel handles; the rest go to the host (see the module docstring)."""
    return (x.dim() in (1, 2) and x.dtype in FLOATING and target.dtype == torch.int64 and target.dim() <= 1
            and (weight is None or weight.dtype == x.dtype))


def _check_nll(x, target, weight, reduction) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    no_batch_dim = x.dim() == 1 and target.dim() == 0
    if not (no_batch_dim or x.shape[0] == target.shape[0]):
        raise RuntimeError(f"size mismatch (got input: {list(x.shape)}, target: {list(target.shape)})")
    if weight is not None and not (weight.dim() <= 1 and weight.numel() == x.shape[-1]):
        raise RuntimeError("weight tensor should be defined either for all " f"{x.shape[-1]} classes or no "
                           f"classes but got weight tensor of shape: {list(weight.shape)}")


def _nll_refs(x, target, weight):
    C = x.shape[-1]
    if x.dim() == 1:
        xr = device_ref(x, (1, C), (0, x.stride(0)))
    else:
        xr = device_ref(x)
    tr = device_ref(target, (1,), (0,)) if target.dim() == 0 else device_ref(target)
    wr = None if weight is None else device_ref(weight, (C,), (weight.stride(0) if weight.dim() else 0,))
    return xr, tr, wr


def _scalar_ref(t):
    return device_ref(t, (1,), (0,)) if t.dim() == 0 else device_ref(t, (1,), (t.stride(0),))


def _nll_loss_forward(x, target, weight, reduction, ignore_index, output=None, total_weight=None):
    name = "aten::nll_loss_forward"
    if not _native_nll(x, target, weight):
        if output is None:
            return fallback.run_on_host(torch.ops.aten.nll_loss_forward.default, x, target, weight, reduction,
                                        ignore_index)
        return fallback.run_on_host(torch.ops.aten.nll_loss_forward.output, x, target, weight, reduction,
                                    ignore_index, output=output, total_weight=total_weight)
    tensors = [t for t in (x, target, weight, output, total_weight) if t is not None]
    device = common_device(name, *tensors)
    _check_nll(x, target, weight, reduction)
    per_sample = reduction == 0 and x.dim() == 2
    shape = (x.shape[0],) if per_sample else ()
    emu = torch.device("emu", device)
    if output is None:
        output = torch.empty(shape, dtype=x.dtype, device=emu)
        total_weight = torch.empty((), dtype=x.dtype, device=emu)
    else:
        _resize_out(output, shape, x.dtype, name)
        _resize_out(total_weight, (), x.dtype, name)
        check_overlap(name, output, x, target)
    n = 1 if x.dim() == 1 else x.shape[0]
    if n == 0:
        total_weight.zero_()
        if not per_sample:
            output.fill_(float("nan") if reduction == 1 else 0.0)
        return output, total_weight
    xr, tr, wr = _nll_refs(x, target, weight)
    mode = 0 if per_sample else (1 if reduction == 1 else 2)
    out_ref = device_ref(output) if per_sample else _scalar_ref(output)
    rt().launch("nll_loss", (out_ref, _scalar_ref(total_weight), xr, tr, wr, mode, int(ignore_index)),
                current_stream(device))
    return output, total_weight


def nll_loss_forward(self, target, weight, reduction, ignore_index):
    return _nll_loss_forward(self, target, weight, reduction, ignore_index)


def nll_loss_forward_output(self, target, weight, reduction, ignore_index, *, output, total_weight):
    return _nll_loss_forward(self, target, weight, reduction, ignore_index, output, total_weight)


def _nll_loss_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight, grad_input=None):
    name = "aten::nll_loss_backward"
    if not (_native_nll(x, target, weight) and grad_output.dtype == x.dtype and total_weight.dtype == x.dtype):
        args = (grad_output, x, target, weight, reduction, ignore_index, total_weight)
        if grad_input is None:
            return fallback.run_on_host(torch.ops.aten.nll_loss_backward.default, *args)
        return fallback.run_on_host(torch.ops.aten.nll_loss_backward.grad_input, *args, grad_input=grad_input)
    tensors = [t for t in (grad_output, x, target, weight, total_weight, grad_input) if t is not None]
    device = common_device(name, *tensors)
    _check_nll(x, target, weight, reduction)
    if total_weight.numel() != 1:
        raise RuntimeError(f"expected total_weight to be a single element tensor, got: {list(total_weight.shape)} "
                           f"({total_weight.numel()} elements)")
    per_sample = reduction == 0 and x.dim() == 2
    if per_sample:
        if grad_output.dim() != 1 or grad_output.shape[0] != x.shape[0]:
            raise RuntimeError(f"Expected a tensor of dimension 1 and tensor.size[0] == {x.shape[0]} but got: "
                               f"dimension {grad_output.dim()} and tensor.size[0] == "
                               f"{grad_output.shape[0] if grad_output.dim() else 1}")
    elif grad_output.numel() != 1:
        raise RuntimeError(f"Expected a single element grad_output tensor, but got: {list(grad_output.shape)}")
    if grad_input is None:
        grad_input = torch.empty(x.shape, dtype=x.dtype, device=torch.device("emu", device))
    else:
        _resize_out(grad_input, x.shape, x.dtype, name)
        check_overlap(name, grad_input, grad_output, x, target, total_weight)
    if grad_input.numel() == 0:
        return grad_input
    C = x.shape[-1]
    gi_ref = device_ref(grad_input, (1, C), (0, grad_input.stride(0))) if x.dim() == 1 else device_ref(grad_input)
    _, tr, wr = _nll_refs(x, target, weight)
    mode = 0 if per_sample else (1 if reduction == 1 else 2)
    go_ref = device_ref(grad_output) if per_sample else _scalar_ref(grad_output)
    rt().launch("nll_loss_backward", (gi_ref, go_ref, tr, wr, _scalar_ref(total_weight), mode, int(ignore_index)),
                current_stream(device))
    return grad_input


def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)


def nll_loss_backward_grad_input(grad_output, self, target, weight, reduction, ignore_index, total_weight, *,
                                 grad_input):
    return _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input)
