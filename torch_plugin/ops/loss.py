"""nll_loss (with log_softmax, ops/softmax.py, the pieces of ``F.cross_entropy``), nll_loss2d and
the pointwise losses lowered to the vector engine. Margin losses are in ops/margin_loss.py, CTC loss in
ops/ctc_loss.py.

Native overloads: ``nll_loss_forward`` / ``.output``, ``nll_loss_backward`` / ``.grad_input``, the
``nll_loss2d`` ones, and ``mse_loss``, ``smooth_l1_loss``, ``huber_loss``, ``binary_cross_entropy``
(forward and backward) and ``binary_cross_entropy_with_logits`` (see the sections below).

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

from torch_plugin._dtypes import FLOATING
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops import fallback
from torch_plugin.ops._common import (broadcast_shape, broadcast_strides, check_overlap, common_device, current_stream, device_ref,
                                      resize_out, rt)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

_REDUCTIONS = (0, 1, 2)  # none, mean, sum


def _resize_out(out: torch.Tensor, shape, dtype, name: str) -> None:
    if out.dtype != dtype:
        raise RuntimeError(f"{name}: Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    resize_out(out, shape)


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


def _nll_overloads(op: str, forward, backward) -> dict:
    """{overload: kernel} for ``op``_forward and ``op``_backward (op: nll_loss or nll_loss2d), each
    with its out= form."""
    def forward_kernel(self, target, weight, reduction, ignore_index):
        return forward(self, target, weight, reduction, ignore_index)

    def forward_out(self, target, weight, reduction, ignore_index, *, output, total_weight):
        return forward(self, target, weight, reduction, ignore_index, output, total_weight)

    def backward_kernel(grad_output, self, target, weight, reduction, ignore_index, total_weight):
        return backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)

    def backward_out(grad_output, self, target, weight, reduction, ignore_index, total_weight, *, grad_input):
        return backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input)
    return {f"{op}_forward": forward_kernel, f"{op}_forward.output": forward_out,
            f"{op}_backward": backward_kernel, f"{op}_backward.grad_input": backward_out}


OVERLOADS.update(_nll_overloads("nll_loss", _nll_loss_forward, _nll_loss_backward))
OVERLOADS.update(_nll_overloads("nll_loss2d", _nll_loss2d_forward, _nll_loss2d_backward))


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


@OVERLOADS.implements("mse_loss")
def mse_loss(self, target, reduction=1):
    return _elementwise_loss("aten::mse_loss", _MSE, self, target, reduction, 0.0)


@OVERLOADS.implements("mse_loss.out")
def mse_loss_out(self, target, reduction=1, *, out):
    return _elementwise_loss("aten::mse_loss.out", _MSE, self, target, reduction, 0.0, out)


@OVERLOADS.implements("mse_loss_backward")
def mse_loss_backward(grad_output, self, target, reduction):
    return _pointwise_backward("aten::mse_loss_backward", _MSE, grad_output, self, target, None, reduction, 0.0,
                               _bshape(self, target))


@OVERLOADS.implements("mse_loss_backward.grad_input")
def mse_loss_backward_grad_input(grad_output, self, target, reduction, *, grad_input):
    return _pointwise_backward("aten::mse_loss_backward.grad_input", _MSE, grad_output, self, target, None,
                               reduction, 0.0, _bshape(self, target), grad_input)


def _check_beta(beta):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")


@OVERLOADS.implements("smooth_l1_loss")
def smooth_l1_loss(self, target, reduction=1, beta=1.0):
    _check_beta(beta)
    return _elementwise_loss("aten::smooth_l1_loss", _SMOOTH_L1, self, target, reduction, beta)


@OVERLOADS.implements("smooth_l1_loss.out")
def smooth_l1_loss_out(self, target, reduction=1, beta=1.0, *, out):
    _check_beta(beta)
    return _elementwise_loss("aten::smooth_l1_loss.out", _SMOOTH_L1, self, target, reduction, beta, out)


@OVERLOADS.implements("smooth_l1_loss_backward")
def smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    return _pointwise_backward("aten::smooth_l1_loss_backward", _SMOOTH_L1, grad_output, self, target, None,
                               reduction, beta, _bshape(self, target))


@OVERLOADS.implements("smooth_l1_loss_backward.grad_input")
def smooth_l1_loss_backward_grad_input(grad_output, self, target, reduction, beta, *, grad_input):
    return _pointwise_backward("aten::smooth_l1_loss_backward.grad_input", _SMOOTH_L1, grad_output, self, target,
                               None, reduction, beta, _bshape(self, target), grad_input)


def _check_delta(delta):
    if not delta > 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")


@OVERLOADS.implements("huber_loss")
def huber_loss(self, target, reduction=1, delta=1.0):
    _check_delta(delta)
    return _elementwise_loss("aten::huber_loss", _HUBER, self, target, reduction, delta, keep_input_dtype=True)


@OVERLOADS.implements("huber_loss.out")
def huber_loss_out(self, target, reduction=1, delta=1.0, *, out):
    _check_delta(delta)
    return _elementwise_loss("aten::huber_loss.out", _HUBER, self, target, reduction, delta, out,
                             keep_input_dtype=True)


@OVERLOADS.implements("huber_loss_backward")
def huber_loss_backward(grad_output, self, target, reduction, delta):
    return _pointwise_backward("aten::huber_loss_backward", _HUBER, grad_output, self, target, None, reduction,
                               delta, _bshape(self, target))


@OVERLOADS.implements("huber_loss_backward.out")
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


@OVERLOADS.implements("binary_cross_entropy")
def binary_cross_entropy(self, target, weight=None, reduction=1):
    return _bce("aten::binary_cross_entropy", self, target, weight, reduction)


@OVERLOADS.implements("binary_cross_entropy.out")
def binary_cross_entropy_out(self, target, weight=None, reduction=1, *, out):
    return _bce("aten::binary_cross_entropy.out", self, target, weight, reduction, out)


def _bce_backward_shape(x, y, weight):
    _check_broadcasts_to(y, x.shape)
    _check_broadcasts_to(weight, x.shape)
    return tuple(x.shape)


@OVERLOADS.implements("binary_cross_entropy_backward")
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=1):
    return _pointwise_backward("aten::binary_cross_entropy_backward", _BCE, grad_output, self, target, weight,
                               reduction, 0.0, _bce_backward_shape(self, target, weight))


@OVERLOADS.implements("binary_cross_entropy_backward.grad_input")
def binary_cross_entropy_backward_grad_input(grad_output, self, target, weight=None, reduction=1, *, grad_input):
    return _pointwise_backward("aten::binary_cross_entropy_backward.grad_input", _BCE, grad_output, self, target,
                               weight, reduction, 0.0, _bce_backward_shape(self, target, weight), grad_input)


@OVERLOADS.implements("binary_cross_entropy_with_logits")
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
