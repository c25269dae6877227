"""The helpers the indexing-family op modules share (ops/indexing.py, masking.py, layout.py,
sorting.py, hashing.py): launches, dim wrapping, dtype checks and names, out-tensor preparation,
CPU's index error messages, fill values, and the two launches of the device's addressing unit
(emulator/kernels/indexing.pyx's index_gather / index_scatter). No aten op is implemented here.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import SUPPORTED
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops.factories import _python_value

_INT_INDEX = (torch.int64, torch.int32)
_OUT_OF_BOUNDS = "index {index} is out of bounds for dimension {dim} with size {size}"
_OUT_OF_RANGE = "index out of range in self"
_REDUCE_CODES = {"sum": 1, "add": 1, "prod": 2, "multiply": 2, "amax": 3, "max": 3, "amin": 4, "min": 4, "mean": 5}


def _emu(device: int) -> torch.device:
    return torch.device("emu", device)


def _launch(kernel: str, args: tuple, device: int) -> None:
    rt().launch(kernel, args, current_stream(device))


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _supported(name: str, *tensors) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype not in SUPPORTED:
            raise unsupported_dtype(name, t.dtype, SUPPORTED)


def _shape1(t: torch.Tensor):
    """(shape, strides) of a tensor, a 0-dim one as one element of a vector (as ATen's kernels do)."""
    if t.dim() == 0:
        return (1,), (1,)
    return tuple(t.shape), tuple(t.stride())


def _ref1(t: torch.Tensor, shape=None, strides=None):
    s, st = _shape1(t)
    return device_ref(t, s if shape is None else shape, st if strides is None else strides)


def _on_device(t: torch.Tensor, device: int) -> torch.Tensor:
    """An index tensor given on the CPU (allowed for ``x[idx]``): copied to the device, not computed on."""
    return t if t.device.type == "emu" else t.to(_emu(device))


def _check_out_dtype(name: str, out: torch.Tensor, dtype) -> None:
    if out.dtype != dtype:
        raise RuntimeError(f"{name}: Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")


def _prepare_out(name: str, out, shape, dtype, device: int, *inputs):
    if out is None:
        return torch.empty(shape, dtype=dtype, device=_emu(device))
    common_device(name, out, *[t for t in inputs if isinstance(t, torch.Tensor)])
    _check_out_dtype(name, out, dtype)
    resize_out(out, shape)
    check_overlap(name, out, *inputs)
    return out


def _zero_strides_except(ndim: int, dim: int, stride: int) -> tuple:
    return tuple(stride if d == dim else 0 for d in range(ndim))


def _vector_stride(index: torch.Tensor) -> int:
    return index.stride(0) if index.dim() == 1 else 0


def _gather_launch(out, table, iter_strides, index_args, allow_negative, message, device) -> None:
    """out[p] = table[p . iter_strides + sum idx[p] * table.stride(dim)]; index_args: [(ref, dim)]."""
    tail = list(iter_strides)
    for ref, dim in index_args:
        tail += [ref, dim]
    _launch("index_gather", (device_ref(out, *_shape1(out)), _ref1(table),
                             allow_negative, message, len(index_args), *tail), device)


def _scatter_launch(table, values, iter_strides, index_args, reduce, alpha, include_self, allow_negative,
                    message, device) -> None:
    tail = list(iter_strides)
    for ref, dim in index_args:
        tail += [ref, dim]
    _launch("index_scatter", (_ref1(table), values, reduce, alpha, include_self, allow_negative, message,
                              len(index_args), *tail), device)


def _scalar_value(name: str, value, dtype, device: int):
    """A fill value: a Python number checked like CPU's Scalar.to<T>(), a CPU 0-dim tensor read as
    one, or a 0-dim emu tensor read by the kernel (as a broadcast operand: no synchronisation)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"{name} only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.dim()} dimension(s).")
        if value.device.type == "emu":
            return value
        value = value.item()
    return _python_value(value, dtype)
