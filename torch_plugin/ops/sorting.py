"""Sorting on emu (emulator/kernels/sorting.pyx): sort (stable), topk, isin, _unique2,
unique_consecutive, unique_dim, unique_dim_consecutive. argsort is an ATen composite of sort.

Equal keys come out in CPU's order, whichever of CPU's algorithms the call would take. Host
synchronisations: _unique2, unique_consecutive and the unique_dim forms read the number of unique
values once (the outputs are then copied out of scratch buffers).

Left out: complex dtypes.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import SUPPORTED, TO_CODE
from torch_plugin.errors import AROUND_SHAPE, refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, device_ref, empty_like_layout, resize_out
from torch_plugin.ops._indexing_common import (_check_out_dtype, _emu, _launch, _on_device, _ref1, _shape1, _supported,
                                               _wrap_dim)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# ---------------------------------------------------------------------------------------------
# sort, topk

# The device sort kernel's algorithms (emulator/kernels/sorting.pyx): equal keys come out in
# CPU's order, whichever CPU's kernel would take for the call.
_STABLE, _CPU_UNSTABLE, _CPU_TOPK, _CPU_TOPK_UNSORTED = 0, 1, 2, 3
_RADIX_MIN = 32768   # at::internal::GRAIN_SIZE: CPU radix-sorts (stably) 1-D integers from here on


def _sort_algorithm(self, stable, descending) -> int:
    """CPU's choice: std::stable_sort when asked; its (stable) radix sort for an ascending 1-D
    integer tensor of at least GRAIN_SIZE elements; std::sort otherwise."""
    if stable:
        return _STABLE
    integral = not self.dtype.is_floating_point and not self.dtype.is_complex and self.dtype != torch.bool
    if integral and self.dim() == 1 and not descending and self.numel() >= _RADIX_MIN:
        return _STABLE
    return _CPU_UNSTABLE


def _sort(self, dim, descending, k, values=None, indices=None, name="aten::sort", algorithm=_STABLE):
    tensors = [t for t in (self, values, indices) if t is not None]
    device = common_device(name, *tensors)
    _supported(name, self)
    d = _wrap_dim(dim, self.dim())
    shape = list(self.shape)
    if self.dim():
        shape[d] = k
    shape = tuple(shape)
    if values is None:
        values = torch.empty(shape, dtype=self.dtype, device=_emu(device))
        indices = torch.empty(shape, dtype=torch.int64, device=_emu(device))
    else:
        _check_out_dtype(name, values, self.dtype)
        _check_out_dtype(name, indices, torch.int64)
        resize_out(values, shape)
        resize_out(indices, shape)
        check_overlap(name, values, self)
        check_overlap(name, indices, self)
    if values.numel():
        _launch("sort", (_ref1(values), _ref1(indices), _ref1(self), d if self.dim() else 0, bool(descending),
                         algorithm), device)
    return values, indices


@OVERLOADS.implements("sort.stable")
def sort_stable(self, *, stable=None, dim=-1, descending=False):
    n = self.shape[_wrap_dim(dim, self.dim())] if self.dim() else 1
    return _sort(self, dim, descending, n, algorithm=_sort_algorithm(self, stable, descending))


@OVERLOADS.implements("sort.values_stable")
def sort_values_stable(self, *, stable=None, dim=-1, descending=False, values, indices):
    n = self.shape[_wrap_dim(dim, self.dim())] if self.dim() else 1
    return _sort(self, dim, descending, n, values, indices, algorithm=_sort_algorithm(self, stable, descending))


def _topk(self, k, dim, largest, values=None, indices=None, sorted=True):
    d = _wrap_dim(dim, self.dim())
    n = self.shape[d] if self.dim() else 1
    if not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    if self.dtype == torch.bool:
        raise RuntimeError("topk does not support bool dtypes on CPU (nor on emu)")
    return _sort(self, dim, largest, k, values, indices, name="aten::topk",
                 algorithm=_CPU_TOPK if sorted else _CPU_TOPK_UNSORTED)


@OVERLOADS.implements("topk")
def topk(self, k, dim=-1, largest=True, sorted=True):
    return _topk(self, k, dim, largest, sorted=sorted)


@OVERLOADS.implements("topk.values")
def topk_values(self, k, dim=-1, largest=True, sorted=True, *, values, indices):
    return _topk(self, k, dim, largest, values, indices, sorted=sorted)


# ---------------------------------------------------------------------------------------------
# isin: the test elements sorted once, a binary search per element


@OVERLOADS.implements("isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "isin.Tensor_Scalar", "isin.Tensor_Scalar_out",
                       "isin.Scalar_Tensor", "isin.Scalar_Tensor_out")
def _isin(elements, test_elements, assume_unique=False, invert=False, out=None):
    name = "aten::isin"
    tensors = [t for t in (elements, test_elements, out) if isinstance(t, torch.Tensor)]
    device = common_device(name, *tensors)
    for t in (elements, test_elements):
        if isinstance(t, torch.Tensor):
            if t.dtype == torch.bool:
                raise RuntimeError("Unsupported input type encountered for isin(): Bool")
            _supported(name, t)
    compute = torch.result_type(elements, test_elements)
    if compute == torch.bool:
        raise RuntimeError("Unsupported input type encountered for isin(): Bool")
    if compute not in SUPPORTED:
        raise unsupported_dtype(name, compute, SUPPORTED)
    dev = _emu(device)
    if not isinstance(elements, torch.Tensor):
        elements = torch.full((), elements, dtype=compute, device=dev)
    if not isinstance(test_elements, torch.Tensor):
        test_elements = torch.full((), test_elements, dtype=compute, device=dev)
    elements, test_elements = _on_device(elements, device), _on_device(test_elements, device)
    shape = tuple(elements.shape)
    if out is None:
        result = empty_like_layout(shape, torch.bool, device, elements)
    else:
        _check_out_dtype("isin", out, torch.bool)
        resize_out(out, shape)
        check_overlap(name, out, elements, test_elements)
        result = out
    if result.numel() == 0:
        return result
    eshape, estrides = _shape1(elements)
    tshape, tstrides = _shape1(test_elements)
    _launch("isin", (device_ref(result, eshape, _shape1(result)[1]), device_ref(elements, eshape, estrides),
                     device_ref(test_elements, tshape, tstrides), TO_CODE[compute], bool(invert)), device)
    return result


# ---------------------------------------------------------------------------------------------
# _unique2, unique_consecutive, unique_dim


def _unique(name, self, sort, return_inverse, return_counts):
    device = common_device(f"aten::{name}", self)
    _supported(f"aten::{name}", self)
    if self.numel():
        refuse_in_projection(f"aten::{name}", "its output size is the number of distinct values (data)",
                             AROUND_SHAPE)
    dev = _emu(device)
    n = self.numel()
    values = torch.empty((n,), dtype=self.dtype, device=dev)
    inverse = torch.empty(self.shape if return_inverse else (0,), dtype=torch.int64, device=dev)
    counts = torch.empty((n,) if return_counts else (0,), dtype=torch.int64, device=dev)
    if n == 0:
        return values, inverse, counts
    count = torch.empty((), dtype=torch.int64, device=dev)
    _launch("unique", (device_ref(values), device_ref(inverse, (inverse.numel(),), (1,)),
                       device_ref(counts, (counts.numel(),), (1,)), device_ref(count, (1,), (1,)), device_ref(self),
                       bool(sort), bool(return_inverse), bool(return_counts)), device)
    u = int(count.item())  # the one synchronisation: the output size is data
    output = values[:u].clone()
    counts = counts[:u].clone() if return_counts else counts
    return output, inverse, counts


@OVERLOADS.implements("_unique2")
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    # CPU sorts whatever ``sorted`` says (its sort is faster than hashing), so does the device.
    return _unique("_unique2", self, True, return_inverse, return_counts)


@OVERLOADS.implements("unique_consecutive")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    if dim is not None and not (self.dim() == 1 and dim in (0, -1)):
        return _unique_dim("unique_consecutive", self, dim, False)
    return _unique("unique_consecutive", self, False, return_inverse, return_counts)


def _unique_dim(name, self, dim, sort):
    """Unique slices along ``dim``: the kernel finds the first slice of each group, inverse and
    counts; the host reads the number of groups (one synchronisation) and gathers the output
    slices with index_select. Returns inverse and counts always, as CPU's unique_dim does."""
    device = common_device(f"aten::{name}", self)
    _supported(f"aten::{name}", self)
    refuse_in_projection(f"aten::{name}", "its output size is the number of distinct slices (data)", AROUND_SHAPE)
    if self.dim() == 0:
        from torch_plugin.errors import UnsupportedDtypeError
        raise UnsupportedDtypeError(f"aten::{name}: a 0-dim tensor with dim= is not supported on emu "
                                    "(supported: tensors of rank >= 1)")
    d = _wrap_dim(dim, self.dim())
    dev = _emu(device)
    n = self.shape[d]
    if n == 0:
        return self.clone(), torch.empty((0,), dtype=torch.int64, device=dev), \
            torch.empty((0,), dtype=torch.int64, device=dev)
    if self.numel() == 0:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    moved = self.movedim(d, 0)  # a view: slice a is moved[a]
    firsts = torch.empty((n,), dtype=torch.int64, device=dev)
    inverse = torch.empty((n,), dtype=torch.int64, device=dev)
    counts = torch.empty((n,), dtype=torch.int64, device=dev)
    count = torch.empty((), dtype=torch.int64, device=dev)
    _launch("unique_dim", (device_ref(firsts), device_ref(inverse), device_ref(counts), device_ref(count, (1,), (1,)),
                           device_ref(moved), bool(sort)), device)
    u = int(count.item())  # the one synchronisation: the output size is data
    return torch.index_select(self, d, firsts[:u]), inverse, counts[:u].clone()


@OVERLOADS.implements("unique_dim")
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    # CPU sorts whatever ``sorted`` says, and returns inverse and counts either way.
    return _unique_dim("unique_dim", self, dim, True)


@OVERLOADS.implements("unique_dim_consecutive")
def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_dim("unique_dim_consecutive", self, dim, False)
