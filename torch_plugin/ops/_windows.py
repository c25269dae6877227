"""Helpers shared by the windowed op modules (convolution, pooling, resample, distance,
embedding): tensor descriptors, output allocation in the input's memory format (margin_loss's
outputs too), dtype checks, window-parameter parsing and the 5-d (N, C, D, H, W) launch of the
kernels that serve every rank. No aten kernel lives here.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, TO_CODE
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
import runtime


_TensorRef = runtime.TensorRef
_new_tuple = tuple.__new__


def _ref(t: torch.Tensor, offset: int, shape, strides) -> runtime.TensorRef:
    """Descriptor of the region of ``t`` that starts ``offset`` elements after its first element."""
    return _new_tuple(_TensorRef, (False, t.get_device(), t.data_ptr() + offset * t.element_size(),
                                   TO_CODE[t.dtype], tuple(shape), tuple(strides)))


def _suggest_format(*tensors):
    for t in tensors:
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
            return torch.channels_last
        if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
            return torch.channels_last_3d
    return torch.contiguous_format


def _empty(shape, dtype, device: int, memory_format=torch.contiguous_format):
    return torch.empty(shape, dtype=dtype, device=torch.device("emu", device), memory_format=memory_format)


def _output(name, out, shape, dtype, device, x4, *inputs):
    """A new output in the input's memory format, or the checked (and resized) out= tensor."""
    if out is None:
        return _empty(shape, dtype, device, _suggest_format(x4))
    common_device(name, out, *inputs)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    resize_out(out, shape)
    check_overlap(name, out, *inputs)
    return out


def _floating_input(name, x):
    if x.dtype not in FLOATING:
        raise unsupported_dtype(name, x.dtype, FLOATING)


# =============================================================================================
# Second block: 3-d pooling, adaptive max pooling, unpooling and N-d interpolation.
#
# The kernels of this block (conv.pyx, second block) take 5-d (N, C, D, H, W) operands: 1-d
# and 2-d tensors are padded with unit spatial dims by views here, so one kernel serves every
# rank; plane indices are flat offsets d * H * W + h * W + w, which are CPU's 1-d/2-d indices
# when the padded extents are 1. Computation: float32 (float64 for float64), one rounding.
# Left out (a clear error, or the host path when nothing is registered): integer adaptive
# pooling/unpooling (CPU rejects them too), uint8 interpolation but nearest.

_FLOAT_ONLY = frozenset({torch.float32, torch.float64})


def _as5(t: torch.Tensor, k: int, batched: bool = True) -> torch.Tensor:
    """The (N, C, D, H, W) view of an (N, C, *k spatial) tensor ((C, *spatial) when not batched)."""
    if not batched:
        t = t.unsqueeze(0)
    for _ in range(3 - k):
        t = t.unsqueeze(2)
    return t


def _ints_k(name: str, what: str, values, k: int, default=None) -> tuple:
    values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    if len(values) == 0 and default is not None:
        return tuple(default)
    if len(values) == 1:
        return (int(values[0]),) * k
    if len(values) != k:
        raise RuntimeError(f"{name}: {what} must either be a single int, or a tuple of {k} ints")
    return tuple(int(v) for v in values)


def _launch5(kernel, device, k, batched, tensors, args=()):
    """Launch a kernel of this block on the (N, C, D, H, W) views of ``tensors``, then ``args``."""
    rt().launch(kernel, tuple(device_ref(_as5(t, k, batched)) for t in tensors) + tuple(args),
                current_stream(device))


def _check_dtype_in(name, x, allowed):
    if x.dtype not in allowed:
        raise unsupported_dtype(name, x.dtype, allowed)


# -- interpolation over 1-3 spatial dims

_AXES = ("D", "H", "W")
