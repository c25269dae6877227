"""Layout transforms on emu: cat (strided copies, one per input), flip, roll, tril/triu and
reflection/replication padding (1d, 2d, and their backward) (emulator/kernels/layout.pyx).
constant_pad_nd and repeat are ATen composites of these.

Left out: 3d reflection/replication padding (the host fallback runs it).
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, scalar_type_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import (_byte_range, check_overlap, common_device, device_ref, empty_like_layout,
                                      resize_out)
from torch_plugin.ops._indexing_common import _emu, _launch, _prepare_out, _ref1, _supported, _wrap_dim
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# ---------------------------------------------------------------------------------------------
# cat

def _cat_memory_format(tensors):
    fmt = None
    for t in tensors:
        f = torch.channels_last if (t.dim() == 4 and not t.is_contiguous()
                                    and t.is_contiguous(memory_format=torch.channels_last)) else \
            torch.contiguous_format
        if fmt is None:
            fmt = f
        elif fmt != f:
            return torch.contiguous_format
    return fmt or torch.contiguous_format


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    alo, ahi = _byte_range(a)
    blo, bhi = _byte_range(b)
    return alo < bhi and blo < ahi


@OVERLOADS.implements("cat", "cat.out")
def _cat(tensors, dim=0, out=None):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    device = common_device("aten::cat", *tensors, *([out] if out is not None else []))
    _supported("aten::cat", *tensors)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    # Legacy: a 1-D empty tensor is skipped whatever its neighbours' shapes (ATen's should_skip).
    kept = [(i, t) for i, t in enumerate(tensors) if not (t.dim() == 1 and t.shape[0] == 0)]
    if not kept:
        shape = (0,)
        d = 0
    else:
        ref_i, ref = kept[0]
        d = _wrap_dim(dim, ref.dim())
        size = 0
        for i, t in kept:
            if t.dim() != ref.dim():
                raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.dim()} and {t.dim()}")
            for k in range(ref.dim()):
                if k != d and t.shape[k] != ref.shape[k]:
                    raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                       f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
            size += t.shape[d]
        shape = tuple(ref.shape[:d]) + (size,) + tuple(ref.shape[d + 1:])
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=_emu(device),
                          memory_format=_cat_memory_format([t for _, t in kept]) if kept else torch.contiguous_format)
    else:
        _supported("aten::cat", out)
        if not torch.can_cast(dtype, out.dtype):
            raise TypeError(f"torch.cat(): input types can't be cast to the desired output type "  # CPU's type
                            f"{scalar_type_name(out.dtype)}")
        for i, t in enumerate(tensors):
            if out.numel() and t.numel() and torch._C._is_alias_of(t, out) and _overlaps(t, out):
                raise RuntimeError("torch.cat(): unsupported operation: the input tensors cannot refer to any of the "
                                   f"output memory locations. Found overlap in input tensor {i}")
        resize_out(out, shape)
        check_overlap("aten::cat", out)
    if out.numel() and kept:
        _launch("cat", (device_ref(out), d, *[device_ref(t) for _, t in kept if t.numel()]), device)
    return out


# ---------------------------------------------------------------------------------------------
# flip, roll, tril/triu

@OVERLOADS.implements("flip")
def flip(self, dims):
    name = "aten::flip"
    device = common_device(name, self)
    _supported(name, self)
    wrapped = [_wrap_dim(d, self.dim()) for d in dims]
    if len(set(wrapped)) != len(wrapped):
        raise RuntimeError(f"dim {next(d for d in wrapped if wrapped.count(d) > 1)} appears multiple times in the "
                           "list of dims")
    out = empty_like_layout(tuple(self.shape), self.dtype, device, self)
    if out.numel():
        mask = sum(1 << d for d in wrapped if self.dim())
        _launch("flip", (_ref1(out), _ref1(self), mask), device)
    return out


@OVERLOADS.implements("roll")
def roll(self, shifts, dims=()):
    name = "aten::roll"
    device = common_device(name, self)
    _supported(name, self)
    shifts, dims = list(shifts), list(dims)
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
        flat = self if self.is_contiguous() else self.contiguous()
        return roll(flat.view(-1), shifts, [0]).view(self.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    per_dim = [0] * max(self.dim(), 1)
    for s, d in zip(shifts, dims):
        per_dim[_wrap_dim(d, self.dim())] += int(s)
    out = torch.empty(self.shape, dtype=self.dtype, device=_emu(device))
    if out.numel():
        _launch("roll", (_ref1(out), _ref1(self), *per_dim), device)
    return out


def _tril_triu(name, self, diagonal, upper, out=None, inplace=False):
    device = common_device(f"aten::{name}", self, *([out] if out is not None else []))
    _supported(f"aten::{name}", self)
    if self.dim() < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    if inplace:
        out = self
    else:
        out = _prepare_out(f"aten::{name}", out, tuple(self.shape), self.dtype, device, self) if out is not None \
            else torch.empty(self.shape, dtype=self.dtype, device=_emu(device))
    if out.numel():
        _launch("tril_triu", (device_ref(out), device_ref(self), int(diagonal), upper), device)
    return out


def _tril_triu_overloads(op: str, upper: bool) -> dict:
    """{overload: kernel} for ``op`` (tril: upper=False, triu: upper=True) in its functional,
    in-place and out= forms."""
    def functional(self, diagonal=0):
        return _tril_triu(op, self, diagonal, upper)

    def inplace(self, diagonal=0):
        return _tril_triu(op, self, diagonal, upper, inplace=True)

    def out_form(self, diagonal=0, *, out):
        return _tril_triu(op, self, diagonal, upper, out=out)
    return {op: functional, f"{op}_": inplace, f"{op}.out": out_form}


OVERLOADS.update({**_tril_triu_overloads("tril", False), **_tril_triu_overloads("triu", True)})


# ---------------------------------------------------------------------------------------------
# reflection / replication padding

_PAD_MODES = {"reflection": 0, "replication": 1}


def _pad_shape(kind, nd, self, padding):
    """Output shape of a ``kind`` pad of the last ``nd`` dims, with CPU's checks."""
    op = f"{kind}_pad{nd}d"
    if len(padding) != 2 * nd:
        raise RuntimeError(f"padding size is expected to be {2 * nd}")
    allowed = (nd + 1, nd + 2)
    if self.dim() not in allowed or any(s == 0 for s in self.shape[self.dim() - nd - 1 + (self.dim() == nd + 1):]):
        raise RuntimeError(f"Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with possibly 0 batch size and "
                           f"other non-zero dimensions for input, but got: {list(self.shape)}")
    shape = list(self.shape)
    befores = []
    for k in range(nd):
        dim = self.dim() - 1 - k
        lo, hi = padding[2 * k], padding[2 * k + 1]
        size = self.shape[dim]
        if kind == "reflection" and not (lo < size and hi < size):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({lo}, {hi}) at dimension {dim} of input {list(self.shape)}")
        shape[dim] = size + lo + hi
        if shape[dim] < 1:
            raise RuntimeError(f"input ({list(self.shape)}) is too small. Calculated output {shape[dim]}")
        befores.insert(0, lo)
    return op, tuple(shape), befores


def _pad(kind, nd, self, padding, out=None):
    op, shape, befores = _pad_shape(kind, nd, self, list(padding))
    name = f"aten::{op}"
    device = common_device(name, self, *([out] if out is not None else []))
    _supported(name, self)
    if self.dtype == torch.bool:
        raise NotImplementedError(f"\"{op}\" not implemented for 'Bool'")
    out = _prepare_out(name, out, shape, self.dtype, device, self)
    if out.numel():
        _launch("pad", (device_ref(out), device_ref(self), _PAD_MODES[kind], *befores), device)
    return out


def _pad_backward(kind, nd, grad_output, self, padding, grad_input=None):
    op, shape, befores = _pad_shape(kind, nd, self, list(padding))
    name = f"aten::{op}_backward"
    device = common_device(name, grad_output, self, *([grad_input] if grad_input is not None else []))
    _supported(name, grad_output)
    if tuple(grad_output.shape) != shape:
        raise RuntimeError(f"{name}: grad_output shape {list(grad_output.shape)} does not match the padded shape "
                           f"{list(shape)}")
    if grad_output.dtype not in FLOATING:
        raise unsupported_dtype(name, grad_output.dtype, FLOATING)
    grad_input = _prepare_out(name, grad_input, tuple(self.shape), grad_output.dtype, device, grad_output)
    if grad_input.numel():
        _launch("pad_backward", (device_ref(grad_input), device_ref(grad_output), _PAD_MODES[kind], *befores), device)
    return grad_input


def _pad_overloads(kind: str, k: int) -> dict:
    """{overload: kernel} for ``kind``_pad``k``d (reflection or replication, 1-d or 2-d) and its
    backward, each with its out= form."""
    def forward(self, padding):
        return _pad(kind, k, self, padding)

    def forward_out(self, padding, *, out):
        return _pad(kind, k, self, padding, out)

    def backward(grad_output, self, padding):
        return _pad_backward(kind, k, grad_output, self, padding)

    def backward_out(grad_output, self, padding, *, grad_input):
        return _pad_backward(kind, k, grad_output, self, padding, grad_input)
    op = f"{kind}_pad{k}d"
    return {op: forward, f"{op}.out": forward_out,
            f"{op}_backward": backward, f"{op}_backward.grad_input": backward_out}


for _kind in ("reflection", "replication"):
    for _k in (1, 2):
        OVERLOADS.update(_pad_overloads(_kind, _k))
