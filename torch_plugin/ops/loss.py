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
from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops import fallback
from torch_plugin.ops._common import (broadcast_shape, broadcast_strides, check_overlap, common_device, current_stream, device_ref,
                                      resize_out, rt)

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


# ---------------------------------------------------------------------------------------------
# nll_loss2d: (N, C, H, W) input, (N, H, W) target. nll_loss of any rank reaches it: nll_loss_nd
# views a 3-D input as 4-D and a 5-D+ input as (N, C, d1, rest), then calls nll_loss2d.

def _native_nll2d(x, target, weight) -> bool:
    return (x.dim() == 4 and x.dtype in FLOATING and target.dtype == torch.int64 and target.dim() == 3
            and (weight is None or weight.dtype == x.dtype))


def _check_nll2d(x, target, weight, reduction) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if target.dim() != 3:
        raise RuntimeError(f"only batches of spatial targets supported (3D tensors) but got targets of dimension: "
                           f"{target.dim()}")
    if x.dim() != 4:
        raise RuntimeError(f"only batches of spatial inputs supported (4D tensors), but got input of dimension: "
                           f"{x.dim()}")
    if weight is not None and weight.numel() != x.shape[1]:
        raise RuntimeError("weight tensor should be defined either for all or no classes")
    if (x.shape[0], x.shape[2], x.shape[3]) != tuple(target.shape):
        raise RuntimeError(f"size mismatch (got input: {list(x.shape)} , target: {list(target.shape)}")


def _weight_ref(weight, C):
    return None if weight is None else device_ref(weight, (C,), (weight.stride(-1) if weight.dim() else 0,))


def _nll_loss2d_forward(x, target, weight, reduction, ignore_index, output=None, total_weight=None):
    name = "aten::nll_loss2d_forward"
    _check_nll2d(x, target, weight, reduction)  # shape errors are CPU's, whichever path runs
    if not _native_nll2d(x, target, weight):
        if output is None:
            return fallback.run_on_host(torch.ops.aten.nll_loss2d_forward.default, x, target, weight, reduction,
                                        ignore_index)
        return fallback.run_on_host(torch.ops.aten.nll_loss2d_forward.output, x, target, weight, reduction,
                                    ignore_index, output=output, total_weight=total_weight)
    device = common_device(name, *(t for t in (x, target, weight, output, total_weight) if t is not None))
    _check_nll2d(x, target, weight, reduction)
    N, C, H, W = x.shape
    shape = (N, H, W) if reduction == 0 else ()
    emu = torch.device("emu", device)
    if output is None:
        output = torch.empty(shape, dtype=x.dtype, device=emu)
        total_weight = torch.empty((), dtype=x.dtype, device=emu)
    else:
        _resize_out(output, shape, x.dtype, name)
        _resize_out(total_weight, (), x.dtype, name)
        check_overlap(name, output, x, target)
    if N * H * W == 0:
        total_weight.zero_()
        if reduction != 0:
            output.fill_(float("nan") if reduction == 1 else 0.0)
        return output, total_weight
    out_ref = device_ref(output) if reduction == 0 else _scalar_ref(output)
    rt().launch("nll_loss2d", (out_ref, _scalar_ref(total_weight), device_ref(x), device_ref(target),
                               _weight_ref(weight, C), reduction, int(ignore_index)), current_stream(device))
    return output, total_weight


def nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    return _nll_loss2d_forward(self, target, weight, reduction, ignore_index)


def nll_loss2d_forward_output(self, target, weight, reduction, ignore_index, *, output, total_weight):
    return _nll_loss2d_forward(self, target, weight, reduction, ignore_index, output, total_weight)


def _nll_loss2d_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight, grad_input=None):
    name = "aten::nll_loss2d_backward"
    _check_nll2d(x, target, weight, reduction)
    if not (_native_nll2d(x, target, weight) and grad_output.dtype == x.dtype and total_weight.dtype == x.dtype):
        args = (grad_output, x, target, weight, reduction, ignore_index, total_weight)
        if grad_input is None:
            return fallback.run_on_host(torch.ops.aten.nll_loss2d_backward.default, *args)
        return fallback.run_on_host(torch.ops.aten.nll_loss2d_backward.grad_input, *args, grad_input=grad_input)
    device = common_device(name, *(t for t in (grad_output, x, target, weight, total_weight, grad_input)
                                   if t is not None))
    _check_nll2d(x, target, weight, reduction)
    if total_weight.numel() != 1:
        raise RuntimeError(f"expected total_weight to be a single element tensor, got: {list(total_weight.shape)} "
                           f"({total_weight.numel()} elements)")
    N, C, H, W = x.shape
    if reduction == 0:
        if tuple(grad_output.shape) != (N, H, W):
            raise RuntimeError(f"grad_output must have the shape of the target {list(target.shape)}, got "
                               f"{list(grad_output.shape)}")
    elif grad_output.numel() != 1:
        raise RuntimeError(f"Expected a single element grad_output tensor, but got: {list(grad_output.shape)}")
    if grad_input is None:
        grad_input = torch.empty(x.shape, dtype=x.dtype, device=torch.device("emu", device))
    else:
        _resize_out(grad_input, x.shape, x.dtype, name)
        check_overlap(name, grad_input, grad_output, x, target, total_weight)
    if grad_input.numel() == 0:
        return grad_input
    go_ref = device_ref(grad_output) if reduction == 0 else _scalar_ref(grad_output.reshape(()))
    rt().launch("nll_loss2d_backward", (device_ref(grad_input), go_ref, device_ref(target), _weight_ref(weight, C),
                                        _scalar_ref(total_weight.reshape(())), reduction, int(ignore_index)),
                current_stream(device))
    return grad_input


def nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)


def nll_loss2d_backward_grad_input(grad_output, self, target, weight, reduction, ignore_index, total_weight, *,
                                   grad_input):
    return _nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                                grad_input)


# ---------------------------------------------------------------------------------------------
# Pointwise losses (one vector-engine kernel each way): mse_loss, smooth_l1_loss, huber_loss,
# binary_cross_entropy, binary_cross_entropy_with_logits (forward; its backward is autograd's
# composite of sigmoid/sub/mul). Computed in float64 per element, rounded once; mean/sum
# accumulate in float64 and round once (CPU computes in the tensor's dtype, so the last bits
# may differ; see tests/torch_plugin/test_losses.py for the tolerances).

_MSE, _SMOOTH_L1, _HUBER, _BCE, _BCE_LOGITS = range(5)


def _check_loss_dtypes(name, *tensors):
    for t in tensors:
        if t is not None and t.dtype not in FLOATING:
            raise unsupported_dtype(name, t.dtype, FLOATING)


def _check_same_dtype(expected, *tensors):
    for t in tensors:
        if t is not None and t.dtype != expected:
            raise RuntimeError(f"Found dtype {_TITLES.get(t.dtype, t.dtype)} but expected "
                               f"{_TITLES.get(expected, expected)}")


_TITLES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _bshape(*tensors):
    return tuple(broadcast_shape(*(tuple(t.shape) for t in tensors if t is not None)))


def _bref(t, shape):
    return None if t is None else device_ref(t, shape, broadcast_strides(t, shape))


def _check_broadcasts_to(t, shape):
    """``t`` must broadcast to ``shape`` without growing it (CPU's in-place broadcasting rule)."""
    if t is None:
        return
    joint = broadcast_shape(tuple(shape), tuple(t.shape))  # raises CPU's size-mismatch error
    if tuple(joint) != tuple(shape):
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape {list(joint)}")


def _pointwise_forward(name, op, x, y, weight, pos_weight, reduction, param, shape, dtype, out=None):
    tensors = [t for t in (x, y, weight, pos_weight, out) if t is not None]
    device = common_device(name, *tensors)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    out_shape = tuple(shape) if reduction == 0 else ()
    if out is None:
        out = torch.empty(out_shape, dtype=dtype, device=torch.device("emu", device))
    else:
        _resize_out(out, out_shape, dtype, name)
        check_overlap(name, out, x, y, *(t for t in (weight, pos_weight) if t is not None))
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0:
        if reduction != 0:
            out.fill_(float("nan") if reduction == 1 else 0.0)
        return out
    out_ref = device_ref(out) if reduction == 0 else device_ref(out, tuple(shape), (0,) * len(shape))
    rt().launch("pointwise_loss", (op, out_ref, _bref(x, shape), _bref(y, shape), _bref(weight, shape),
                                   _bref(pos_weight, shape), reduction, float(param)), current_stream(device))
    return out


def _pointwise_backward(name, op, grad_output, x, y, weight, reduction, param, shape, grad_input=None):
    tensors = [t for t in (grad_output, x, y, weight, grad_input) if t is not None]
    device = common_device(name, *tensors)
    _check_loss_dtypes(name, grad_output, x, y, weight)
    _check_same_dtype(x.dtype, grad_output, y, weight)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    _check_broadcasts_to(grad_output, shape)
    if grad_input is None:
        grad_input = torch.empty(shape, dtype=x.dtype, device=torch.device("emu", device))
    else:
        _resize_out(grad_input, shape, x.dtype, name)
        check_overlap(name, grad_input, grad_output, x, y, *([weight] if weight is not None else []))
    if grad_input.numel() == 0:
        return grad_input
    rt().launch("pointwise_loss_backward", (op, device_ref(grad_input), _bref(grad_output, shape), _bref(x, shape),
                                            _bref(y, shape), _bref(weight, shape), reduction, float(param)),
                current_stream(device))
    return grad_input


def _elementwise_loss(name, op, x, y, reduction, param, out=None, keep_input_dtype=False):
    _check_loss_dtypes(name, x, y)
    dtype = x.dtype if keep_input_dtype else torch.result_type(x, y)
    return _pointwise_forward(name, op, x, y, None, None, reduction, param, _bshape(x, y), dtype, out)


def mse_loss(self, target, reduction=1):
    return _elementwise_loss("aten::mse_loss", _MSE, self, target, reduction, 0.0)


def mse_loss_out(self, target, reduction=1, *, out):
    return _elementwise_loss("aten::mse_loss.out", _MSE, self, target, reduction, 0.0, out)


def mse_loss_backward(grad_output, self, target, reduction):
    return _pointwise_backward("aten::mse_loss_backward", _MSE, grad_output, self, target, None, reduction, 0.0,
                               _bshape(self, target))


def mse_loss_backward_grad_input(grad_output, self, target, reduction, *, grad_input):
    return _pointwise_backward("aten::mse_loss_backward.grad_input", _MSE, grad_output, self, target, None,
                               reduction, 0.0, _bshape(self, target), grad_input)


def _check_beta(beta):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")


def smooth_l1_loss(self, target, reduction=1, beta=1.0):
    _check_beta(beta)
    return _elementwise_loss("aten::smooth_l1_loss", _SMOOTH_L1, self, target, reduction, beta)


def smooth_l1_loss_out(self, target, reduction=1, beta=1.0, *, out):
    _check_beta(beta)
    return _elementwise_loss("aten::smooth_l1_loss.out", _SMOOTH_L1, self, target, reduction, beta, out)


def smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    return _pointwise_backward("aten::smooth_l1_loss_backward", _SMOOTH_L1, grad_output, self, target, None,
                               reduction, beta, _bshape(self, target))


def smooth_l1_loss_backward_grad_input(grad_output, self, target, reduction, beta, *, grad_input):
    return _pointwise_backward("aten::smooth_l1_loss_backward.grad_input", _SMOOTH_L1, grad_output, self, target,
                               None, reduction, beta, _bshape(self, target), grad_input)


def _check_delta(delta):
    if not delta > 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")


def huber_loss(self, target, reduction=1, delta=1.0):
    _check_delta(delta)
    return _elementwise_loss("aten::huber_loss", _HUBER, self, target, reduction, delta, keep_input_dtype=True)


def huber_loss_out(self, target, reduction=1, delta=1.0, *, out):
    _check_delta(delta)
    return _elementwise_loss("aten::huber_loss.out", _HUBER, self, target, reduction, delta, out,
                             keep_input_dtype=True)


def huber_loss_backward(grad_output, self, target, reduction, delta):
    return _pointwise_backward("aten::huber_loss_backward", _HUBER, grad_output, self, target, None, reduction,
                               delta, _bshape(self, target))


def huber_loss_backward_out(grad_output, self, target, reduction, delta, *, grad_input):
    return _pointwise_backward("aten::huber_loss_backward.out", _HUBER, grad_output, self, target, None, reduction,
                               delta, _bshape(self, target), grad_input)


def _bce(name, x, y, weight, reduction, out=None):
    """Values outside [0, 1] (or NaN) in the input or the target are reported by the kernel (a sticky
    KERNEL_FAULT at the next synchronising call, naming CPU's message): checking them here would need
    reading the data back."""
    _check_loss_dtypes(name, x, y, weight)
    _check_same_dtype(x.dtype, y, weight)
    _check_broadcasts_to(y, x.shape)
    _check_broadcasts_to(weight, x.shape)
    return _pointwise_forward(name, _BCE, x, y, weight, None, reduction, 0.0, tuple(x.shape), x.dtype, out)


def binary_cross_entropy(self, target, weight=None, reduction=1):
    return _bce("aten::binary_cross_entropy", self, target, weight, reduction)


def binary_cross_entropy_out(self, target, weight=None, reduction=1, *, out):
    return _bce("aten::binary_cross_entropy.out", self, target, weight, reduction, out)


def _bce_backward_shape(x, y, weight):
    _check_broadcasts_to(y, x.shape)
    _check_broadcasts_to(weight, x.shape)
    return tuple(x.shape)


def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=1):
    return _pointwise_backward("aten::binary_cross_entropy_backward", _BCE, grad_output, self, target, weight,
                               reduction, 0.0, _bce_backward_shape(self, target, weight))


def binary_cross_entropy_backward_grad_input(grad_output, self, target, weight=None, reduction=1, *, grad_input):
    return _pointwise_backward("aten::binary_cross_entropy_backward.grad_input", _BCE, grad_output, self, target,
                               weight, reduction, 0.0, _bce_backward_shape(self, target, weight), grad_input)


def binary_cross_entropy_with_logits(self, target, weight=None, pos_weight=None, reduction=1):
    """CPU's composite: loss = (1 - y) * x - ((pos_weight - 1) * y + 1) * log_sigmoid(x), times weight;
    its shape is the target's (CPU computes ``(1 - target).mul_(...)`` in place)."""
    name = "aten::binary_cross_entropy_with_logits"
    _check_loss_dtypes(name, self, target, weight, pos_weight)
    dtype = self.dtype
    for t in (target, weight, pos_weight):
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    shape = tuple(target.shape)
    _check_broadcasts_to(self, shape)
    _check_broadcasts_to(pos_weight, shape)
    _check_broadcasts_to(weight, shape)
    return _pointwise_forward(name, _BCE_LOGITS, self, target, weight, pos_weight, reduction, 0.0, shape, dtype)


# ---------------------------------------------------------------------------------------------
# Margin losses (pooling and sampling extras): multi_margin_loss and multilabel_margin_loss,
# forward and backward, float32/float64 (CPU has no float16/bfloat16 kernels either). Target
# ranges are checked before the launch with one device reduction and one synchronisation, so a
# bad target is CPU's error and never a kernel fault that would poison the context.

_MARGIN_DTYPES = frozenset({torch.float32, torch.float64})


def _target_range(target):
    refuse_in_projection(None, "checks device values on the host before it launches (the target's range)")
    return tuple(int(v) for v in torch.stack((target.min(), target.max())).tolist()) if target.numel() else (0, 0)


def _margin_out(name, out, shape, dtype, device, *inputs):
    if out is None:
        return torch.empty(shape, dtype=dtype, device=torch.device("emu", device))
    common_device(name, out, *inputs)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    resize_out(out, shape)
    check_overlap(name, out, *inputs)
    return out


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


def _multi_margin_loss(x, target, p, margin, weight, reduction, out=None):
    name = "aten::multi_margin_loss"
    device, nframe, C, p, weight = _multi_margin_args(name, x, target, p, weight)
    reduction = int(reduction)
    shape = (nframe,) if reduction == 0 and target.dim() > 0 else ()
    out = _margin_out(name, out, shape, x.dtype, device, x, target)
    if out.numel():
        flat = out.reshape(-1) if out.dim() else out.view(1)
        rt().launch("multi_margin_loss", (device_ref(flat, (max(flat.numel(), 1),), flat.stride()),
                                          device_ref(x.reshape(nframe, C)), device_ref(target.reshape(nframe)),
                                          _weight_args(weight, C), p, float(margin), reduction),
                    current_stream(device))
    return out


def multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1):
    return _multi_margin_loss(self, target, p, margin, weight, reduction)


def multi_margin_loss_out(self, target, p=1, margin=1, weight=None, reduction=1, *, out):
    return _multi_margin_loss(self, target, p, margin, weight, reduction, out)


def _multi_margin_loss_backward(grad_output, x, target, p, margin, weight, reduction, grad_input=None):
    name = "aten::multi_margin_loss_backward"
    device, nframe, C, p, weight = _multi_margin_args(name, x, target, p, weight)
    common_device(name, grad_output, x)
    reduction = int(reduction)
    per_sample = reduction == 0 and target.dim() > 0
    if grad_output.numel() != (nframe if per_sample else 1) or grad_output.dtype != x.dtype:
        raise RuntimeError(f"{name}: grad_output of size {list(grad_output.shape)} and dtype {grad_output.dtype} "
                           f"does not match the loss")
    grad_input = _margin_out(name, grad_input, x.shape, x.dtype, device, grad_output, x, target)
    if grad_input.numel():
        go = grad_output.reshape(-1)
        go_ref = device_ref(go, (nframe,), (go.stride(0) if per_sample else 0,))
        rt().launch("multi_margin_loss_backward", (device_ref(grad_input.view(nframe, C)), go_ref,
                                                   device_ref(x.reshape(nframe, C)),
                                                   device_ref(target.reshape(nframe)), _weight_args(weight, C), p,
                                                   float(margin), reduction), current_stream(device))
    return grad_input


def multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=1):
    return _multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction)


def multi_margin_loss_backward_grad_input(grad_output, self, target, p, margin, weight=None, reduction=1, *,
                                          grad_input):
    return _multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction, grad_input)


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


def _multilabel_forward(x, target, reduction, output=None, is_target=None):
    name = "aten::multilabel_margin_loss_forward"
    device, nframe, C = _multilabel_args(name, x, target)
    reduction = int(reduction)
    shape = (nframe,) if reduction == 0 and x.dim() > 1 else ()
    output = _margin_out(name, output, shape, x.dtype, device, x, target)
    is_target = _margin_out(name, is_target, target.shape, x.dtype, device, x, target, output)
    if output.numel():
        flat = output.reshape(-1) if output.dim() else output.view(1)
        rt().launch("multilabel_margin_loss", (device_ref(flat, (flat.numel(),), flat.stride()),
                                               device_ref(is_target.view(nframe, C)), device_ref(x.reshape(nframe, C)),
                                               device_ref(target.reshape(nframe, C)), reduction),
                    current_stream(device))
    return output, is_target


def multilabel_margin_loss_forward(self, target, reduction):
    return _multilabel_forward(self, target, reduction)


def multilabel_margin_loss_forward_output(self, target, reduction, *, output, is_target):
    return _multilabel_forward(self, target, reduction, output, is_target)


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
    grad_input = _margin_out(name, grad_input, x.shape, x.dtype, device, grad_output, x, target, is_target)
    if grad_input.numel():
        go = grad_output.reshape(-1)
        go_ref = device_ref(go, (nframe,), (go.stride(0) if per_sample else 0,))
        rt().launch("multilabel_margin_loss_backward", (device_ref(grad_input.view(nframe, C)), go_ref,
                                                        device_ref(x.reshape(nframe, C)),
                                                        device_ref(target.reshape(nframe, C)),
                                                        device_ref(is_target.reshape(nframe, C)), reduction),
                    current_stream(device))
    return grad_input


def multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target):
    return _multilabel_backward(grad_output, self, target, reduction, is_target)


def multilabel_margin_loss_backward_grad_input(grad_output, self, target, reduction, is_target, *, grad_input):
    return _multilabel_backward(grad_output, self, target, reduction, is_target, grad_input)


# ---------------------------------------------------------------------------------------------
# CTC loss forward (_ctc_loss, _ctc_loss.Tensor): the alpha recursion on the device (losses.pyx),
# float32/float64 log_probs as CPU. The backward pass (_ctc_loss_backward) is not native yet.

def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    name = "aten::_ctc_loss"
    device = common_device(name, log_probs, targets)
    if log_probs.dtype not in _MARGIN_DTYPES:
        raise unsupported_dtype(name, log_probs.dtype, _MARGIN_DTYPES)
    if targets.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"{name}: targets must be int32 or int64, got {targets.dtype}")
    if log_probs.dim() != 3:
        raise RuntimeError(f"{name}: expected a 3-D (T, N, C) log_probs, got {list(log_probs.shape)}")
    T, N, C = log_probs.shape
    blank = int(blank)
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    input_lengths, target_lengths = [int(v) for v in input_lengths], [int(v) for v in target_lengths]
    if len(input_lengths) != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    if targets.dim() == 1:
        offsets, pos = [], 0
        for n in target_lengths:
            offsets.append(pos * targets.stride(0))
            pos += n
        stride = targets.stride(0) if targets.dim() else 1
    else:
        offsets = [b * targets.stride(0) for b in range(N)]
        stride = targets.stride(1)
        for n in target_lengths:
            if n > targets.shape[1]:
                raise RuntimeError(f"Expected tensor to have size at least {n} at dimension 1, but got size "
                                   f"{targets.shape[1]} for argument #2 'targets' (while checking arguments for "
                                   "ctc_loss_cpu)")
    for n in input_lengths:
        if n > T:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value {n} (while checking "
                               "arguments for ctc_loss_cpu)")
    if any(n < 0 for n in input_lengths + target_lengths):
        raise RuntimeError(f"{name}: lengths must be non-negative")
    max_target = max(target_lengths, default=0)
    nll = torch.empty((N,), dtype=log_probs.dtype, device=log_probs.device)
    log_alpha = torch.empty((N, T, 2 * max_target + 1), dtype=log_probs.dtype, device=log_probs.device)
    if N:
        # the per-sample table travels as a small device tensor (a host-to-device copy)
        meta = torch.tensor([offsets, input_lengths, target_lengths], dtype=torch.int64).to(log_probs.device)
        rt().launch("ctc_loss", (device_ref(nll), device_ref(log_alpha), device_ref(log_probs), device_ref(targets),
                                 device_ref(meta), stride, blank, max_target), current_stream(device))
    return nll, log_alpha


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)


def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    # lengths are host-side metadata of the recursion (CPU's kernel reads them on the host too)
    if input_lengths.device.type == "emu" or target_lengths.device.type == "emu":
        refuse_in_projection("aten::ctc_loss", "reads the lengths tensors on the host",
                             "pass input_lengths and target_lengths as Python lists or CPU tensors")
    return _ctc_loss(log_probs, targets, input_lengths.tolist(), target_lengths.tolist(), blank, zero_infinity)
