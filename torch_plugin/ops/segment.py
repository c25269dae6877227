"""segment_reduce and _segment_reduce_backward on emu (emulator/kernels/segment.pyx), CPU's loops
with lengths or offsets. With lengths and ``unsafe=False``, CPU's checks read the lengths'
minimum and whether every row sums to the axis size: two host synchronisations.

Left out: the ``indices`` form (CPU refuses it too), non-floating dtypes (as CPU).
"""
from __future__ import annotations

import math

import torch

from torch_plugin.errors import refuse_in_projection
from torch_plugin.ops._common import common_device, device_ref
from torch_plugin.ops.reduction import _check_supported, _wrap_dim
from torch_plugin.ops.selection import _floating_only, _launch, _not_implemented
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# ------------------------------------------------------------------------------ segment_reduce
_SEGMENT_NAMES = {"sum": "sum", "prod": "prod", "mean": "mean", "max": "max", "amax": "max", "min": "min",
                  "amin": "min"}


def _segment_op(reduce: str) -> str:
    if reduce not in _SEGMENT_NAMES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return _SEGMENT_NAMES[reduce]


def _segment_view(data, lengths, axis):
    """(data (outer, size, inner), lengths (outer, L)) contiguous device views (copies if needed)."""
    data = data.contiguous()
    lengths = lengths.contiguous()
    outer = math.prod(data.shape[:axis])
    inner = math.prod(data.shape[axis + 1:])
    size = data.shape[axis] if data.dim() else 1
    return data.view(outer, size, inner), lengths.view(outer, lengths.shape[-1] if lengths.dim() else 1)


def _initial(initial):
    return (False, 0.0) if initial is None else (True, float(initial))


@OVERLOADS.implements("segment_reduce")
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """CPU's segment_reduce. With lengths and ``unsafe=False``, CPU's checks read the lengths'
    minimum and whether each row sums to the axis size: two host synchronisations."""
    name = "aten::segment_reduce"
    common_device(name, data, *(t for t in (lengths, offsets) if t is not None))
    _check_supported(name, data.dtype)
    axis = _wrap_dim(axis, data.dim())
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    op = _segment_op(reduce)
    _floating_only("_segment_reduce_cpu", data.dtype)
    segs = offsets if offsets is not None else lengths
    which = "offsets" if offsets is not None else "lengths"
    if segs.dtype not in (torch.int64, torch.int32):
        raise _not_implemented(f"_segment_reduce_{which}_cpu_kernel1", segs.dtype)
    if data.dim() < segs.dim():
        raise RuntimeError(f"segment_reduce(): data.dim() ({data.dim()}) must be at least {which}.dim() "
                           f"({segs.dim()})")
    if axis != segs.dim() - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of {which} but got {axis}.")
    if offsets is None and not unsafe:
        refuse_in_projection(None, "checks device values on the host before it launches (the lengths)", "pass unsafe=True with lengths known to be valid")
        if lengths.numel() and int(lengths.min().item()) < 0:
            raise RuntimeError("lengths contains negative value!")
        if not bool((lengths.sum(-1) == data.shape[axis]).all().item()):
            raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum to "
                               "data.size(lengths.dim()-1) when !unsafe.")
    nseg = segs.shape[-1] - (1 if offsets is not None else 0)
    out_shape = tuple(data.shape[:axis]) + (nseg,) + tuple(data.shape[axis + 1:])
    out = torch.empty(out_shape, dtype=data.dtype, device=data.device)
    if out.numel() == 0:
        return out
    d3, l2 = _segment_view(data, segs, axis)
    o3 = out.view(d3.shape[0], nseg, d3.shape[2])
    has_init, init = _initial(initial)
    _launch("segment_reduce", (device_ref(o3), device_ref(d3), device_ref(l2), offsets is not None, op, has_init,
                               init), data.get_device())
    return out


@OVERLOADS.implements("_segment_reduce_backward")
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    name = "aten::_segment_reduce_backward"
    common_device(name, grad, output, data, *(t for t in (lengths, offsets) if t is not None))
    _check_supported(name, data.dtype)
    axis = _wrap_dim(axis, data.dim())
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
    op = _segment_op(reduce)
    _floating_only("_segment_reduce_cpu", data.dtype)
    segs = offsets if offsets is not None else lengths
    nseg = segs.shape[-1] - (1 if offsets is not None else 0)
    grad_input = torch.empty(data.shape, dtype=grad.dtype, device=data.device)
    if grad_input.numel() == 0:
        return grad_input
    if grad.dtype != data.dtype or output.dtype != data.dtype:
        raise RuntimeError(f"_segment_reduce_backward: grad ({grad.dtype}), output ({output.dtype}) and data "
                           f"({data.dtype}) must have the same dtype on emu")
    d3, l2 = _segment_view(data, segs, axis)
    outer, inner = d3.shape[0], d3.shape[2]
    g3 = grad.contiguous().view(outer, nseg, inner)
    o3 = output.contiguous().view(outer, nseg, inner)
    gi3 = grad_input.view(d3.shape)
    has_init, init = _initial(initial)
    _launch("segment_reduce_backward", (device_ref(gi3), device_ref(g3), device_ref(o3), device_ref(d3),
                                        device_ref(l2), offsets is not None, op, has_init, init), data.get_device())
    return grad_input
