"""Indexing on emu, lowered to the device's addressing unit (emulator/kernels/indexing.pyx).

Ops: index_select, gather, ``x[idx]`` (index.Tensor); scatter (src / value, reduce add /
multiply), scatter_add, scatter_reduce (sum/prod/mean/amax/amin, include_self), index_add,
index_copy, index_fill_, index_put (``_index_put_impl_``, accumulate), index_reduce, take, put_;
embedding_dense_backward; repeat_interleave.Tensor. The functional forms of index_fill,
index_put, embedding and one_hot are ATen composites of these.

Every op validates on the host what its metadata can tell (devices, dtypes, shapes, dims), with
CPU's messages. Index values are data: checking them on the host would need a device->host
copy (a synchronisation) per op, so the kernel checks them before it writes anything. An index
out of range raises inside the kernel with CPU's message ("index 5 is out of bounds for
dimension 0 with size 3", "index out of range in self" for index_select / index_add /
embedding); the firmware records a KERNEL_FAULT, sticky for the context and reported at the next
synchronising call as ``torch.AcceleratorError`` (as nll_loss's targets are).

Host synchronisations: boolean-mask indexing (one count, ops/masking.py's nonzero),
repeat_interleave without output_size (one read of the sum and min of the repeats).

Left out: sparse gradients (embedding's sparse=True is a composite of other ops), and index
dtypes other than int64/int32.
"""
from __future__ import annotations

import warnings

import torch

from torch_plugin._dtypes import FLOATING, scalar_type_name
from torch_plugin.errors import AROUND_SHAPE, refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import broadcast_shape, broadcast_strides, check_overlap, common_device, device_ref
from torch_plugin.ops._indexing_common import (_INT_INDEX, _OUT_OF_BOUNDS, _OUT_OF_RANGE, _REDUCE_CODES,
                                               _emu, _gather_launch, _launch, _on_device, _prepare_out, _ref1,
                                               _scalar_value, _scatter_launch, _shape1, _supported, _vector_stride,
                                               _wrap_dim, _zero_strides_except)
from torch_plugin.ops.factories import _python_value
from torch_plugin.ops.masking import _nonzero
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# ---------------------------------------------------------------------------------------------
# index_select, gather, index.Tensor

@OVERLOADS.implements("index_select", "index_select.out")
def _index_select(x, dim, index, out=None):
    name = "index_select()"
    device = common_device("aten::index_select", x, index, *([out] if out is not None else []))
    _supported("aten::index_select", x)
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in _INT_INDEX:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if out is not None and out.dtype != x.dtype:
        raise RuntimeError("index_select(): self and result must have the same scalar type")
    d = _wrap_dim(dim, x.dim())
    if x.dim() == 0 and index.numel() != 1:
        raise IndexError("index_select(): Index to scalar can have only 1 value, got "
                         f"{index.numel()} value(s)")
    if x.dim() and x.shape[d] == 0 and index.numel():
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    shape = () if x.dim() == 0 else tuple(x.shape[:d]) + (index.numel(),) + tuple(x.shape[d + 1:])
    out = _prepare_out(name, out, shape, x.dtype, device, x, index)
    if out.numel() == 0:
        return out
    oshape, _ = _shape1(out)
    _, xstrides = _shape1(x)
    iter_strides = tuple(0 if k == d else s for k, s in enumerate(xstrides))
    idx_ref = device_ref(index, oshape, _zero_strides_except(len(oshape), d, _vector_stride(index)))
    _launch("index_gather", (device_ref(out, *_shape1(out)), _ref1(x), False, _OUT_OF_RANGE, 1, *iter_strides,
                             idx_ref, d), device)
    return out


def _check_gather_shapes(name: str, x, dim: int, index, src=None) -> None:
    if index.numel() == 0:
        return  # CPU checks nothing more of an empty index (a 1-d empty index gathers from any rank)
    if max(index.dim(), 1) != max(x.dim(), 1):
        raise RuntimeError(f"Index tensor must have the same number of dimensions as {'self' if src is not None else 'input'} tensor")
    if src is not None and max(src.dim(), 1) != max(x.dim(), 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    ishape, xshape = _shape1(index)[0], _shape1(x)[0]
    for k in range(len(ishape)):
        too_big = (k != dim and ishape[k] > xshape[k]) or (src is not None and ishape[k] > _shape1(src)[0][k])
        if too_big and index.numel():
            if src is None:
                raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                                   f"no larger than self {list(x.shape)} apart from dimension {dim}")
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(x.shape)} apart "
                               f"from dimension {dim} and to be no larger size than src {list(src.shape)}")


def _check_empty_dim(x, d: int, index) -> None:
    """Every index into an extent-0 dim is out of bounds: known without reading the index."""
    if index.numel() and _shape1(x)[0][d] == 0:
        raise RuntimeError(f"index is out of bounds for dimension {d} with size 0")


def _gather(x, dim, index, out=None):
    name = "gather()"
    device = common_device("aten::gather", x, index, *([out] if out is not None else []))
    _supported("aten::gather", x)
    if index.dtype not in _INT_INDEX and index.numel():  # CPU checks the dtype of a non-empty index only
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    d = _wrap_dim(dim, x.dim())
    _check_gather_shapes(name, x, d, index)
    _check_empty_dim(x, d, index)
    out = _prepare_out("aten::gather", out, tuple(index.shape), x.dtype, device, x, index)
    if out.numel() == 0:
        return out
    _, xstrides = _shape1(x)
    iter_strides = tuple(0 if k == d else s for k, s in enumerate(xstrides))
    _launch("index_gather", (device_ref(out, *_shape1(out)), _ref1(x), False, _OUT_OF_BOUNDS, 1, *iter_strides,
                             _ref1(index), d), device)
    return out


@OVERLOADS.implements("gather")
def gather(self, dim, index, *, sparse_grad=False):
    return _gather(self, dim, index)


@OVERLOADS.implements("gather.out")
def gather_out(self, dim, index, *, sparse_grad=False, out):
    return _gather(self, dim, index, out)


def _expand_bool_indices(x, indices, device):
    """Replaces each boolean/uint8 mask by the index tensors of its nonzero positions (ATen's
    expandTensors), moves CPU indices to the device and checks dtypes and counts."""
    result = []
    for t in indices:
        if t is None:
            result.append(None)
            continue
        if t.dtype in (torch.bool, torch.uint8) and t.dim() == 0:
            raise RuntimeError("aten::index: a 0-dim boolean index is not supported on emu (CPU's kernel fails an "
                               "internal assert on it too); Python's x[True] adds a dimension without reaching it")
        if t.dtype in (torch.bool, torch.uint8):
            if t.dtype == torch.uint8:
                warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                              "instead.", UserWarning, stacklevel=4)
            t = _on_device(t, device)
            start = len(result)
            for j in range(t.dim()):
                if start + j >= x.dim() or t.shape[j] != x.shape[start + j]:
                    raise IndexError(f"The shape of the mask {list(t.shape)} at index {j} does not match the shape of "
                                     f"the indexed tensor {list(x.shape)} at index {start + j}")
            nz = _nonzero(t)
            result.extend(nz.select(1, j) for j in range(t.dim()))
            continue
        if t.dtype not in _INT_INDEX:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        result.append(_on_device(t, device))
    if len(result) > x.dim():
        raise IndexError(f"too many indices for tensor of dimension {x.dim()} (got {len(result)})")
    return result


def _check_indexed_extents(x, indices) -> None:
    for k, t in enumerate(indices):
        if t is not None and t.numel() and x.shape[k] == 0:
            raise IndexError("index is out of bounds for dimension with size 0")


def _advanced_plan(x, indices):
    """ATen's advanced indexing layout: (result shape, table iteration strides, [(index, broadcast
    strides, dim)]) for ``x[indices]`` where indices (after mask expansion) are int tensors or None."""
    indices = list(indices) + [None] * (x.dim() - len(indices))
    dims = [k for k, t in enumerate(indices) if t is not None]
    bshape = broadcast_shape(*[tuple(indices[k].shape) for k in dims])
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    rest = [k for k in range(x.dim()) if indices[k] is None]
    if adjacent:
        before = [k for k in rest if k < dims[0]]
        after = [k for k in rest if k > dims[-1]]
    else:
        before, after = [], rest
    nb = len(bshape)
    shape = tuple(x.shape[k] for k in before) + tuple(bshape) + tuple(x.shape[k] for k in after)
    iter_strides = tuple(x.stride(k) for k in before) + (0,) * nb + tuple(x.stride(k) for k in after)
    args = []
    for k in dims:
        t = indices[k]
        bstr = broadcast_strides(t, tuple(bshape)) if bshape else ()
        args.append((t, (0,) * len(before) + tuple(bstr) + (0,) * len(after), k))
    return shape, iter_strides, args


def _index(x, indices, out=None):
    name = "aten::index"
    device = common_device(name, x, *([out] if out is not None else []))
    _supported(name, x)
    if all(t is None for t in indices):
        raise RuntimeError("index(): at least one index must be defined")  # ATen builds a view instead
    expanded = _expand_bool_indices(x, indices, device)
    _check_indexed_extents(x, expanded)
    shape, iter_strides, args = _advanced_plan(x, expanded)
    out = _prepare_out(name, out, shape, x.dtype, device, x)
    if out.numel() == 0:
        return out
    index_args = [(device_ref(t, shape, strides), dim) for t, strides, dim in args]
    _gather_launch(out, x, iter_strides, index_args, True, _OUT_OF_BOUNDS, device)
    return out


@OVERLOADS.implements("index.Tensor")
def index_tensor(self, indices):
    return _index(self, indices)


@OVERLOADS.implements("index.Tensor_out")
def index_tensor_out(self, indices, *, out):
    return _index(self, indices, out)


def _fill_mask(self, indices, values):
    """The mask of ``self[mask] = value`` when that is a masked_fill (as ATen dispatches it): one
    bool index on self's device, matching the dims it indexes, and a 0-dim value (a host one, or
    one on self's device, which is where Python's ``x[mask] = 0`` puts it for emu); the mask is
    returned shaped to broadcast over self. None otherwise (uint8 masks keep the general path and
    its deprecation warning)."""
    if values.dim() != 0 or values.device not in (self.device, torch.device("cpu")):
        return None
    defined = [(i, t) for i, t in enumerate(indices) if t is not None]
    if len(defined) != 1:
        return None
    position, mask = defined[0]
    if mask.dtype != torch.bool or mask.device != self.device or \
            tuple(mask.shape) != tuple(self.shape[position:position + mask.dim()]) or position + mask.dim() > self.dim():
        return None
    return mask.reshape(tuple(mask.shape) + (1,) * (self.dim() - position - mask.dim()))


def _index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    name = "aten::index_put_"
    device = common_device(name, self, values)
    _supported(name, self, values)
    if values.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{scalar_type_name(self.dtype)} for the destination and {scalar_type_name(values.dtype)} for the source.")
    if torch._debug_has_internal_overlap(self) == 1:
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")
    mask = None if accumulate else _fill_mask(self, indices, values)
    if mask is not None:  # x[mask] = scalar is a masked_fill: no nonzero, so no data-dependent shape
        return self.masked_fill_(mask, values.item() if values.device.type == "cpu" else values)
    expanded = _expand_bool_indices(self, indices, device)
    if all(t is None for t in expanded):
        raise RuntimeError("index_put_: at least one index must be defined")
    _check_indexed_extents(self, expanded)
    shape, iter_strides, args = _advanced_plan(self, expanded)
    try:
        vshape = broadcast_shape(shape, tuple(values.shape))
    except RuntimeError:
        vshape = None
    if vshape != tuple(shape):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(shape)}")
    check_overlap(name, self, values, *[t for t, _, _ in args])
    if 0 in shape:
        return self
    if values.device.type == "emu":
        vals = device_ref(values, shape, broadcast_strides(values, tuple(shape)))
    else:
        vals = values.item()  # a CPU 0-dim value: an immediate
    index_args = [(device_ref(t, shape, strides), dim) for t, strides, dim in args]
    _scatter_launch(self, vals, iter_strides, index_args, 1 if accumulate else 0, 1, True, True, _OUT_OF_BOUNDS,
                    device)
    return self


@OVERLOADS.implements("_index_put_impl_")
def index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    return _index_put_impl_(self, indices, values, accumulate, unsafe)


# ---------------------------------------------------------------------------------------------
# scatter, scatter_add, scatter_reduce

def _scatter(name, self, dim, index, src, reduce_code, include_self=True, out=None, inplace=False):
    tensors = [t for t in (self, index, src, out) if isinstance(t, torch.Tensor)]
    device = common_device(f"aten::{name}", *tensors)
    _supported(f"aten::{name}", self, src)
    if index.dtype not in _INT_INDEX and index.numel():  # CPU checks the dtype of a non-empty index only
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if isinstance(src, torch.Tensor) and src.dtype != self.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    d = _wrap_dim(dim, self.dim())
    _check_gather_shapes(name, self, d, index, src if isinstance(src, torch.Tensor) else None)
    _check_empty_dim(self, d, index)
    if reduce_code == 5 and self.dtype == torch.bool:
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'")
    if inplace:
        result = self
        if torch._debug_has_internal_overlap(self) == 1:
            check_overlap(f"aten::{name}", self)
    else:
        result = _prepare_out(f"aten::{name}", out, tuple(self.shape), self.dtype, device, self, index,
                              *([src] if isinstance(src, torch.Tensor) else []))
        if result.numel():
            result.copy_(self)
    check_overlap(f"aten::{name}", result, index, *([src] if isinstance(src, torch.Tensor) else []))
    if index.numel() == 0:
        return result
    ishape, istrides = _shape1(index)
    _, rstrides = _shape1(result)
    iter_strides = tuple(0 if k == d else s for k, s in enumerate(rstrides))
    if isinstance(src, torch.Tensor):
        values = _ref1(src, ishape, _shape1(src)[1]) if src.device.type == "emu" else src.item()
    else:
        values = _python_value(src, self.dtype)
    _scatter_launch(result, values, iter_strides, [(_ref1(index), d)], reduce_code, 1, include_self, False,
                    _OUT_OF_BOUNDS, device)
    return result


def _old_reduce(reduce, src_is_tensor=False):
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply. Got {reduce}")
    if src_is_tensor:
        warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in a "
                      "future PyTorch release. Use torch.scatter_reduce instead for more reduction options.",
                      UserWarning, stacklevel=4)
    return _REDUCE_CODES[reduce]


@OVERLOADS.implements("scatter.src")
def scatter_src(self, dim, index, src):
    return _scatter("scatter", self, dim, index, src, 0)


@OVERLOADS.implements("scatter_.src")
def scatter_src_(self, dim, index, src):
    return _scatter("scatter", self, dim, index, src, 0, inplace=True)


@OVERLOADS.implements("scatter.src_out")
def scatter_src_out(self, dim, index, src, *, out):
    return _scatter("scatter", self, dim, index, src, 0, out=out)


@OVERLOADS.implements("scatter.value")
def scatter_value(self, dim, index, value):
    return _scatter("scatter", self, dim, index, value, 0)


@OVERLOADS.implements("scatter_.value")
def scatter_value_(self, dim, index, value):
    return _scatter("scatter", self, dim, index, value, 0, inplace=True)


@OVERLOADS.implements("scatter.value_out")
def scatter_value_out(self, dim, index, value, *, out):
    return _scatter("scatter", self, dim, index, value, 0, out=out)


@OVERLOADS.implements("scatter.reduce")
def scatter_reduce_src(self, dim, index, src, *, reduce):
    return _scatter("scatter", self, dim, index, src, _old_reduce(reduce, True))


@OVERLOADS.implements("scatter_.reduce")
def scatter_reduce_src_(self, dim, index, src, *, reduce):
    return _scatter("scatter", self, dim, index, src, _old_reduce(reduce, True), inplace=True)


@OVERLOADS.implements("scatter.reduce_out")
def scatter_reduce_src_out(self, dim, index, src, *, reduce, out):
    return _scatter("scatter", self, dim, index, src, _old_reduce(reduce, True), out=out)


@OVERLOADS.implements("scatter.value_reduce")
def scatter_value_reduce(self, dim, index, value, *, reduce):
    return _scatter("scatter", self, dim, index, value, _old_reduce(reduce))


@OVERLOADS.implements("scatter_.value_reduce")
def scatter_value_reduce_(self, dim, index, value, *, reduce):
    return _scatter("scatter", self, dim, index, value, _old_reduce(reduce), inplace=True)


@OVERLOADS.implements("scatter.value_reduce_out")
def scatter_value_reduce_out(self, dim, index, value, *, reduce, out):
    return _scatter("scatter", self, dim, index, value, _old_reduce(reduce), out=out)


@OVERLOADS.implements("scatter_add")
def scatter_add(self, dim, index, src):
    return _scatter("scatter_add", self, dim, index, src, 1)


@OVERLOADS.implements("scatter_add_")
def scatter_add_(self, dim, index, src):
    return _scatter("scatter_add", self, dim, index, src, 1, inplace=True)


@OVERLOADS.implements("scatter_add.out")
def scatter_add_out(self, dim, index, src, *, out):
    return _scatter("scatter_add", self, dim, index, src, 1, out=out)


def _two_reduce(reduce):
    if reduce not in ("sum", "prod", "mean", "amax", "amin", "max", "min"):  # CPU takes max/min too
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return _REDUCE_CODES[reduce]


@OVERLOADS.implements("scatter_reduce.two")
def scatter_reduce_two(self, dim, index, src, reduce, *, include_self=True):
    return _scatter("scatter_reduce", self, dim, index, src, _two_reduce(reduce), include_self)


@OVERLOADS.implements("scatter_reduce_.two")
def scatter_reduce_two_(self, dim, index, src, reduce, *, include_self=True):
    return _scatter("scatter_reduce", self, dim, index, src, _two_reduce(reduce), include_self, inplace=True)


@OVERLOADS.implements("scatter_reduce.two_out")
def scatter_reduce_two_out(self, dim, index, src, reduce, *, include_self=True, out):
    return _scatter("scatter_reduce", self, dim, index, src, _two_reduce(reduce), include_self, out=out)


# ---------------------------------------------------------------------------------------------
# index_add, index_copy, index_fill_

def _check_index_source(name, self, d, index, source) -> None:
    """CPU's checks (index_add: RuntimeError; index_copy: an IndexError for the count)."""
    n = index.numel()
    copy = name.startswith("index_copy")
    mismatch = RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified "
                            f"dimension. Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    if not (source.dim() == 0 and self.dim() <= 1 or max(source.dim(), 1) == max(self.dim(), 1)):
        raise mismatch
    sshape, xshape = _shape1(source)[0], _shape1(self)[0]
    for k in range(len(xshape)):
        if k != d and sshape[k] != xshape[k]:
            if copy:
                raise RuntimeError(f"{name}: Source/destination tensor must have same slice shapes. Destination "
                                   f"slice shape: {xshape[k]} at dimension {k} and source slice shape: {sshape[k]} "
                                   f"at dimension {k}.")
            raise mismatch
    if sshape[d] != n:
        if copy:
            raise IndexError(f"{name}: Number of indices ({n}) should be equal to source.size(dim) ({sshape[d]})")
        raise RuntimeError(f"{name}: Number of indices ({n}) should be equal to source.size(dim): ({sshape[d]}), "
                           f"for dim: {d}")


def _index_accumulate(kind, self, dim, index, source, alpha=1, out=None, inplace=False):
    name = f"{kind}_()"
    tensors = [t for t in (self, index, source, out) if t is not None]
    device = common_device(f"aten::{kind}", *tensors)
    _supported(f"aten::{kind}", self, source)
    if index.dim() > 1:
        if kind == "index_add":
            raise IndexError(f"{name}: Index is supposed to be a vector, but got dim: {index.dim()} with type: "
                             f"{scalar_type_name(index.dtype)} and size: {list(index.shape)}")
        raise IndexError(f"{name}: Index should have dimension 1 or 0 (got {index.dim()})")
    if kind == "index_add":
        if index.dtype not in _INT_INDEX:
            raise RuntimeError(f"{name}: Expected dtype int32/int64 for index")
        if source.dtype != self.dtype:
            raise RuntimeError(f"{name}: self ({scalar_type_name(self.dtype)}) and source ({scalar_type_name(source.dtype)}) "
                               "must have the same scalar type")
    else:
        if index.dtype != torch.int64:
            raise RuntimeError(f"{name}: Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
        if source.dtype != self.dtype:
            raise RuntimeError(f"{name}: self and source expected to have the same dtype, but got (self) "
                               f"{scalar_type_name(self.dtype)} and (source) {scalar_type_name(source.dtype)}")
    d = _wrap_dim(dim, self.dim())
    _check_index_source(name, self, d, index, source)
    if inplace:
        result = self
    else:
        result = _prepare_out(f"aten::{kind}", out, tuple(self.shape), self.dtype, device, self, index, source)
        if result.numel():
            result.copy_(self)
    check_overlap(f"aten::{kind}", result, index, source)
    if index.numel() == 0 or source.numel() == 0:
        return result
    sshape, sstrides = _shape1(source)
    _, rstrides = _shape1(result)
    iter_strides = tuple(0 if k == d else s for k, s in enumerate(rstrides))
    idx_ref = device_ref(index, sshape, _zero_strides_except(len(sshape), d, _vector_stride(index)))
    if kind == "index_add":
        if self.dtype not in FLOATING and isinstance(alpha, float) and self.dtype != torch.bool:
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
        reduce, message = 1, _OUT_OF_RANGE
        alpha = float(alpha) if self.dtype in FLOATING else int(alpha)
    else:
        reduce, message, alpha = 0, "index_copy_(): " + _OUT_OF_BOUNDS, 1
    _scatter_launch(result, device_ref(source, sshape, sstrides), iter_strides, [(idx_ref, d)], reduce, alpha,
                    True, False, message, device)
    return result


@OVERLOADS.implements("index_add")
def index_add(self, dim, index, source, *, alpha=1):
    return _index_accumulate("index_add", self, dim, index, source, alpha)


@OVERLOADS.implements("index_add_")
def index_add_(self, dim, index, source, *, alpha=1):
    return _index_accumulate("index_add", self, dim, index, source, alpha, inplace=True)


@OVERLOADS.implements("index_add.out")
def index_add_out(self, dim, index, source, *, alpha=1, out):
    return _index_accumulate("index_add", self, dim, index, source, alpha, out=out)


@OVERLOADS.implements("index_copy")
def index_copy(self, dim, index, source):
    return _index_accumulate("index_copy", self, dim, index, source)


@OVERLOADS.implements("index_copy_")
def index_copy_(self, dim, index, source):
    return _index_accumulate("index_copy", self, dim, index, source, inplace=True)


@OVERLOADS.implements("index_copy.out")
def index_copy_out(self, dim, index, source, *, out):
    return _index_accumulate("index_copy", self, dim, index, source, out=out)


@OVERLOADS.implements("index_fill_.int_Scalar", "index_fill_.int_Tensor")
def _index_fill_(self, dim, index, value):
    name = "index_fill_"
    device = common_device(f"aten::{name}", self, index, *([value] if isinstance(value, torch.Tensor) else []))
    _supported(f"aten::{name}", self)
    if index.dtype != torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if index.dim() > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    d = _wrap_dim(dim, self.dim())
    value = _scalar_value(name, value, self.dtype, device)
    check_overlap(f"aten::{name}", self, index)
    if torch._debug_has_internal_overlap(self) == 1:
        check_overlap(f"aten::{name}", self)
    xshape, xstrides = _shape1(self)
    shape = tuple(xshape[:d]) + (index.numel(),) + tuple(xshape[d + 1:])
    if 0 in shape:
        return self
    iter_strides = tuple(0 if k == d else s for k, s in enumerate(xstrides))
    idx_ref = device_ref(index, shape, _zero_strides_except(len(shape), d, _vector_stride(index)))
    if isinstance(value, torch.Tensor):
        if value.dtype != self.dtype:
            value = value.to(self.dtype)
        value = device_ref(value, shape, (0,) * len(shape))
    _scatter_launch(self, value, iter_strides, [(idx_ref, d)], 0, 1, True, True, _OUT_OF_BOUNDS, device)
    return self


# ---------------------------------------------------------------------------------------------
# embedding_dense_backward

@OVERLOADS.implements("embedding_dense_backward")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    name = "aten::embedding_dense_backward"
    device = common_device(name, grad_output, indices)
    _supported(name, grad_output)
    if indices.dtype not in _INT_INDEX:
        raise RuntimeError("embedding_backward: Expected tensor for argument #2 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {indices.type()} instead (while checking "
                           "arguments for embedding_backward)")
    if grad_output.dtype not in FLOATING:
        raise unsupported_dtype(name, grad_output.dtype, FLOATING)
    n = indices.numel()
    d = grad_output.shape[-1] if grad_output.dim() else 1
    grad = grad_output.reshape(n, d)
    flat = indices.reshape(n)
    out = torch.empty((num_weights, d), dtype=grad_output.dtype, device=_emu(device))
    if out.numel():
        _launch("embedding_dense_backward", (device_ref(out), device_ref(grad), device_ref(flat), int(padding_idx),
                                             bool(scale_grad_by_freq)), device)
    return out


# ---------------------------------------------------------------------------------------------
# index_reduce, take, put_: on the addressing unit (index_gather / index_scatter)


_INDEX_REDUCE_CODES = {"prod": 2, "amax": 3, "amin": 4, "mean": 5}
_index_reduce_warned = False


def _index_reduce(self, dim, index, source, reduce, include_self, out=None, inplace=False):
    name = "index_reduce_()"
    tensors = [t for t in (self, index, source, out) if t is not None]
    device = common_device("aten::index_reduce", *tensors)
    if reduce not in _INDEX_REDUCE_CODES:
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    global _index_reduce_warned
    if not _index_reduce_warned:  # CPU's TORCH_WARN_ONCE
        _index_reduce_warned = True
        warnings.warn("index_reduce() is in beta and the API may change at any time.", UserWarning, stacklevel=3)
    _supported("aten::index_reduce", self, source)
    if index.dim() > 1:
        raise IndexError(f"{name}: Index is supposed to be a vector, but got dim: {index.dim()} with type: "
                         f"{scalar_type_name(index.dtype)} and size: {list(index.shape)}")
    if index.dtype not in _INT_INDEX:
        raise RuntimeError(f"{name}: Expected dtype int32/int64 for index but got: {scalar_type_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"{name}: self ({scalar_type_name(self.dtype)}) and source ({scalar_type_name(source.dtype)}) "
                           "must have the same scalar type")
    if self.dtype == torch.bool:
        raise NotImplementedError("\"index_reduce_func_cpu_\" not implemented for 'Bool' (on emu, as on CPU)")
    d = _wrap_dim(dim, self.dim())
    _check_index_source(name, self, d, index, source)
    if inplace:
        result = self
    else:
        result = _prepare_out("aten::index_reduce", out, tuple(self.shape), self.dtype, device, self, index, source)
        if result.numel():
            result.copy_(self)
    check_overlap("aten::index_reduce", result, index, source)
    if index.numel() == 0 or source.numel() == 0:
        return result
    sshape, sstrides = _shape1(source)
    _, rstrides = _shape1(result)
    iter_strides = tuple(0 if k == d else s for k, s in enumerate(rstrides))
    idx_ref = device_ref(index, sshape, _zero_strides_except(len(sshape), d, _vector_stride(index)))
    _scatter_launch(result, device_ref(source, sshape, sstrides), iter_strides, [(idx_ref, d)],
                    _INDEX_REDUCE_CODES[reduce], 1, bool(include_self), False, _OUT_OF_RANGE, device)
    return result


@OVERLOADS.implements("index_reduce")
def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    return _index_reduce(self, dim, index, source, reduce, include_self)


@OVERLOADS.implements("index_reduce_")
def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return _index_reduce(self, dim, index, source, reduce, include_self, inplace=True)


@OVERLOADS.implements("index_reduce.out")
def index_reduce_out(self, dim, index, source, reduce, *, include_self=True, out):
    return _index_reduce(self, dim, index, source, reduce, include_self, out=out)


_FLAT_OUT_OF_RANGE = "out of range: tried to access index {index} on a tensor of {size} elements."


def _flat_table(t: torch.Tensor) -> torch.Tensor:
    """t as one dim of its elements in C order (a contiguous copy on the device when needed)."""
    return (t if t.is_contiguous() else t.contiguous()).view(-1)


@OVERLOADS.implements("take", "take.out")
def _take(self, index, out=None):
    name = "aten::take"
    device = common_device(name, self, index, *([out] if out is not None else []))
    _supported(name, self)
    if index.dtype != torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
    if self.numel() == 0 and index.numel() != 0:
        raise IndexError("take(): tried to take from an empty tensor")
    result = _prepare_out(name, out, tuple(index.shape), self.dtype, device, self, index)
    if index.numel() == 0:
        return result
    table = _flat_table(self)
    shape, _ = _shape1(index)
    _gather_launch(result, table, (0,) * len(shape), [(_ref1(index), 0)], True, _FLAT_OUT_OF_RANGE, device)
    return result


@OVERLOADS.implements("put_")
def put_(self, index, source, accumulate=False):
    name = "aten::put_"
    device = common_device(name, self, index, source)
    _supported(name, self, source)
    if index.dtype != torch.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{scalar_type_name(self.dtype)} and source.dtype = {scalar_type_name(source.dtype)}")
    if source.numel() != index.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    if self.numel() == 0 and index.numel() != 0:
        raise IndexError("put_(): Tried to put elements into an empty tensor")
    if torch._debug_has_internal_overlap(self) == 1:
        check_overlap(name, self)
    check_overlap(name, self, index, source)
    if index.numel() == 0:
        return self
    table = _flat_table(self)
    shape, _ = _shape1(index)
    if tuple(source.shape) == tuple(index.shape):
        src_ref = _ref1(source)
    else:  # same number of elements, another shape: read it in C order over index's shape
        source = source.contiguous()
        src_ref = device_ref(source, shape, _shape1(source.view(shape))[1])
    _scatter_launch(table, src_ref, (0,) * len(shape), [(_ref1(index), 0)], 1 if accumulate else 0, 1, True, True,
                    _FLAT_OUT_OF_RANGE, device)
    if table.data_ptr() != self.data_ptr() or not self.is_contiguous():
        self.copy_(table.view(self.shape))
    return self


# ---------------------------------------------------------------------------------------------
# repeat_interleave.Tensor: its own kernel; without output_size, one read of the repeats' sum and min


@OVERLOADS.implements("repeat_interleave.Tensor")
def repeat_interleave_tensor(repeats, *, output_size=None):
    name = "aten::repeat_interleave"
    device = common_device(name, repeats)
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in _INT_INDEX:
        raise RuntimeError("repeats has to be Long or Int tensor")
    n = repeats.numel()
    if output_size is None:
        if n == 0:
            total = 0
        else:
            refuse_in_projection("aten::repeat_interleave", "without output_size its output size is the sum "
                                 "of the repeats (data)", AROUND_SHAPE)
            total, smallest = torch.stack([repeats.sum().to(torch.int64), repeats.min().to(torch.int64)]).tolist()
            if smallest < 0:
                raise RuntimeError("repeats can not be negative")
    else:
        total = int(output_size)  # no synchronisation: the kernel checks the sum
    out = torch.empty((total,), dtype=repeats.dtype, device=_emu(device))
    if n:
        _launch("repeat_interleave", (device_ref(out), device_ref(repeats)), device)
    return out
