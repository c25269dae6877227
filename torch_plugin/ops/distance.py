"""Pairwise distances on the device: ``_cdist_forward`` / ``_cdist_backward`` and
``_pdist_forward`` / ``_pdist_backward``, one vector-engine kernel each way.

p-norm distances (p = 0 counts nonzero differences, p = inf takes the max) computed directly
in float32 (float64 for float64) and rounded once; batch dims broadcast on the host by views.
Left out: compute_mode's matrix-multiply formulation of euclidean distances (ignored: the
distances are always computed directly).
"""
from __future__ import annotations

from math import prod

import torch

from torch_plugin._dtypes import FLOATING
from torch_plugin.ops._common import common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops._windows import _empty, _ref


OVERLOADS = Overloads(__name__)


# -- pairwise distances: _cdist_forward / _cdist_backward, _pdist_forward / _pdist_backward

def _check_p(what, p):
    p = float(p)
    if not p >= 0:
        raise RuntimeError(f"{what} only supports non-negative p values")
    return p


def _batch3(t, batch):
    """``t`` (..., R, M) expanded to the batch dims and viewed (or copied) as (B, R, M)."""
    return t.expand(tuple(batch) + tuple(t.shape[-2:])).reshape((prod(batch), t.shape[-2], t.shape[-1]))


def _cdist_inputs(name, x1, x2):
    device = common_device(name, x1, x2)
    for t in (x1, x2):
        if t.dtype not in FLOATING:
            raise RuntimeError(f"cdist only supports floating-point dtypes, X{1 if t is x1 else 2} got: {t.dtype}")
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D X2 got: {x2.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"cdist: X1 and X2 must have the same dtype, got {x1.dtype} and {x2.dtype}")
    return device, tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))


@OVERLOADS.implements("_cdist_forward")
def cdist_forward(x1, x2, p, compute_mode=None):
    name = "aten::_cdist_forward"
    device, batch = _cdist_inputs(name, x1, x2)
    p = _check_p("cdist", p)
    out = _empty(batch + (x1.shape[-2], x2.shape[-2]), x1.dtype, device)
    if out.numel():
        a, b = _batch3(x1, batch), _batch3(x2, batch)
        rt().launch("pairwise_distance", (device_ref(out.view((prod(batch),) + tuple(out.shape[-2:]))),
                                          device_ref(a), device_ref(b), p, False), current_stream(device))
    return out


@OVERLOADS.implements("_cdist_backward")
def cdist_backward(grad, x1, x2, p, cdist):
    name = "aten::_cdist_backward"
    device, batch = _cdist_inputs(name, x1, x2)
    common_device(name, grad, cdist, x1)
    p = _check_p("cdist", p)
    shape = batch + (x1.shape[-2], x2.shape[-2])
    if tuple(grad.shape) != shape or tuple(cdist.shape) != shape:
        raise RuntimeError(f"{name}: grad {list(grad.shape)} and cdist {list(cdist.shape)} must have the "
                           f"distances' size {list(shape)}")
    B = prod(batch)
    grad_x1 = _empty((B,) + tuple(x1.shape[-2:]), x1.dtype, device)
    if grad_x1.numel():
        if x2.shape[-2] == 0:
            grad_x1.zero_()
        else:
            g = grad.to(x1.dtype).reshape((B,) + shape[-2:]).contiguous()
            d = cdist.to(x1.dtype).reshape((B,) + shape[-2:]).contiguous()
            # Both operands are bound to names: a copy made by _batch3 (a channels-last input) must
            # stay alive until the launch is queued, or the second copy takes the first one's freed
            # block and overwrites it before the kernel reads it (a silent wrong gradient).
            a, b = _batch3(x1, batch), _batch3(x2, batch)
            rt().launch("pairwise_distance_backward", (device_ref(grad_x1), device_ref(g), device_ref(d),
                                                       device_ref(a), device_ref(b), p, False), current_stream(device))
    grad_x1 = grad_x1.view(batch + tuple(x1.shape[-2:]))
    return grad_x1.sum_to_size(x1.shape) if tuple(grad_x1.shape) != tuple(x1.shape) else grad_x1


def _pdist_input(name, x, p):
    device = common_device(name, x)
    if x.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {x.dim()}D")
    if x.dtype not in FLOATING:
        raise RuntimeError(f"pdist only supports floating-point dtypes")
    return device, _check_p("pdist", p)


@OVERLOADS.implements("_pdist_forward")
def pdist_forward(self, p=2):
    name = "aten::_pdist_forward"
    device, p = _pdist_input(name, self, p)
    n = self.shape[0]
    out = _empty((n * (n - 1) // 2,), self.dtype, device)
    if out.numel():
        a = self.unsqueeze(0)
        rt().launch("pairwise_distance", (_ref(out, 0, (1, 1, out.numel()), (0, 0, out.stride(0))), device_ref(a),
                                          device_ref(a), p, True), current_stream(device))
    return out


@OVERLOADS.implements("_pdist_backward")
def pdist_backward(grad, self, p, pdist):
    name = "aten::_pdist_backward"
    device, p = _pdist_input(name, self, p)
    common_device(name, grad, self, pdist)
    n = self.shape[0]
    pairs = n * (n - 1) // 2
    if tuple(grad.shape) != (pairs,) or tuple(pdist.shape) != (pairs,):
        raise RuntimeError(f"{name}: grad {list(grad.shape)} and pdist {list(pdist.shape)} must have {pairs} entries")
    grad_x = _empty(self.shape, self.dtype, device)
    if grad_x.numel():
        if pairs == 0:
            grad_x.zero_()
        else:
            g, d = grad.to(self.dtype).contiguous(), pdist.to(self.dtype).contiguous()
            a = self.unsqueeze(0)
            rt().launch("pairwise_distance_backward", (device_ref(grad_x.unsqueeze(0)),
                                                       _ref(g, 0, (1, 1, pairs), (0, 0, 1)),
                                                       _ref(d, 0, (1, 1, pairs), (0, 0, 1)), device_ref(a),
                                                       device_ref(a), p, True), current_stream(device))
    return grad_x
