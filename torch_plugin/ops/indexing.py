"""Indexing and data movement, lowered to the device's addressing unit (emulator/kernels/indexing.pyx).

Ops: cat; index_select, gather, ``x[idx]`` (index.Tensor); scatter (src / value, reduce add /
multiply), scatter_add, scatter_reduce (sum/prod/mean/amax/amin, include_self), index_add,
index_copy, index_fill_, masked_fill_, index_put (``_index_put_impl_``, accumulate), masked_scatter_;
embedding_dense_backward; nonzero, masked_select; flip, roll, tril/triu, reflection/replication
padding (1d, 2d, and their backward); sort (stable), topk; where.self. The functional forms of
index_fill, masked_fill, index_put, masked_scatter, embedding, sort, constant_pad_nd, repeat,
argsort and one_hot are ATen composites of these.

Every op validates on the host what its metadata can tell (devices, dtypes, shapes, dims), with
CPU's messages. Index values are data: checking them on the host would need a device->host
copy (a synchronisation) per op, so the kernel checks them before it writes anything. An index
out of range raises inside the kernel with CPU's message ("index 5 is out of bounds for
dimension 0 with size 3", "index out of range in self" for index_select / index_add /
embedding); the firmware records a KERNEL_FAULT, sticky for the context and reported at the next
synchronising call as ``torch.AcceleratorError`` (as nll_loss's targets are).

Data-dependent output sizes (nonzero, masked_select, boolean-mask indexing) cost one
synchronisation each: a kernel counts, the host reads the count (``item()``), a second kernel
writes the output of that size.
"""
from __future__ import annotations

import warnings

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED, TO_CODE
from torch_plugin.errors import AROUND_SHAPE, refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import (_byte_range, broadcast_shape, broadcast_strides, check_overlap, common_device,
                                      current_stream, device_ref, empty_like_layout, prepare_out, resize_out,
                                      rt)
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


def _dtype_name(dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
            torch.uint8: "Byte", torch.bool: "Bool"}.get(dtype, str(dtype))


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


def _cat(tensors, dim, out=None):
    name = "torch.cat()"
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
                            f"{_CAT_DTYPE_NAMES.get(out.dtype, out.dtype)}")
        for i, t in enumerate(tensors):
            if out.numel() and t.numel() and torch._C._is_alias_of(t, out) and _overlaps(t, out):
                raise RuntimeError("torch.cat(): unsupported operation: the input tensors cannot refer to any of the "
                                   f"output memory locations. Found overlap in input tensor {i}")
        resize_out(out, shape)
        check_overlap("aten::cat", out)
    if out.numel() and kept:
        _launch("cat", (device_ref(out), d, *[device_ref(t) for _, t in kept if t.numel()]), device)
    return out


def cat(tensors, dim=0):
    return _cat(tensors, dim)


def cat_out(tensors, dim=0, *, out):
    return _cat(tensors, dim, out)


# ---------------------------------------------------------------------------------------------
# index_select, gather, index.Tensor

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


def index_select(self, dim, index):
    return _index_select(self, dim, index)


def index_select_out(self, dim, index, *, out):
    return _index_select(self, dim, index, out)


_CAT_DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                    torch.uint8: "Byte", torch.bool: "Bool"}


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


def gather(self, dim, index, *, sparse_grad=False):
    return _gather(self, dim, index)


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
                    other = x.shape[start + j] if start + j < x.dim() else None
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


def index_tensor(self, indices):
    return _index(self, indices)


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
                           f"{_dtype_name(self.dtype)} for the destination and {_dtype_name(values.dtype)} for the source.")
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


def scatter_src(self, dim, index, src):
    return _scatter("scatter", self, dim, index, src, 0)


def scatter_src_(self, dim, index, src):
    return _scatter("scatter", self, dim, index, src, 0, inplace=True)


def scatter_src_out(self, dim, index, src, *, out):
    return _scatter("scatter", self, dim, index, src, 0, out=out)


def scatter_value(self, dim, index, value):
    return _scatter("scatter", self, dim, index, value, 0)


def scatter_value_(self, dim, index, value):
    return _scatter("scatter", self, dim, index, value, 0, inplace=True)


def scatter_value_out(self, dim, index, value, *, out):
    return _scatter("scatter", self, dim, index, value, 0, out=out)


def scatter_reduce_src(self, dim, index, src, *, reduce):
    return _scatter("scatter", self, dim, index, src, _old_reduce(reduce, True))


def scatter_reduce_src_(self, dim, index, src, *, reduce):
    return _scatter("scatter", self, dim, index, src, _old_reduce(reduce, True), inplace=True)


def scatter_reduce_src_out(self, dim, index, src, *, reduce, out):
    return _scatter("scatter", self, dim, index, src, _old_reduce(reduce, True), out=out)


def scatter_value_reduce(self, dim, index, value, *, reduce):
    return _scatter("scatter", self, dim, index, value, _old_reduce(reduce))


def scatter_value_reduce_(self, dim, index, value, *, reduce):
    return _scatter("scatter", self, dim, index, value, _old_reduce(reduce), inplace=True)


def scatter_value_reduce_out(self, dim, index, value, *, reduce, out):
    return _scatter("scatter", self, dim, index, value, _old_reduce(reduce), out=out)


def scatter_add(self, dim, index, src):
    return _scatter("scatter_add", self, dim, index, src, 1)


def scatter_add_(self, dim, index, src):
    return _scatter("scatter_add", self, dim, index, src, 1, inplace=True)


def scatter_add_out(self, dim, index, src, *, out):
    return _scatter("scatter_add", self, dim, index, src, 1, out=out)


def _two_reduce(reduce):
    if reduce not in ("sum", "prod", "mean", "amax", "amin", "max", "min"):  # CPU takes max/min too
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return _REDUCE_CODES[reduce]


def scatter_reduce_two(self, dim, index, src, reduce, *, include_self=True):
    return _scatter("scatter_reduce", self, dim, index, src, _two_reduce(reduce), include_self)


def scatter_reduce_two_(self, dim, index, src, reduce, *, include_self=True):
    return _scatter("scatter_reduce", self, dim, index, src, _two_reduce(reduce), include_self, inplace=True)


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
                             f"{_dtype_name(index.dtype)} and size: {list(index.shape)}")
        raise IndexError(f"{name}: Index should have dimension 1 or 0 (got {index.dim()})")
    if kind == "index_add":
        if index.dtype not in _INT_INDEX:
            raise RuntimeError(f"{name}: Expected dtype int32/int64 for index")
        if source.dtype != self.dtype:
            raise RuntimeError(f"{name}: self ({_dtype_name(self.dtype)}) and source ({_dtype_name(source.dtype)}) "
                               "must have the same scalar type")
    else:
        if index.dtype != torch.int64:
            raise RuntimeError(f"{name}: Expected a long tensor for index, but got {_dtype_name(index.dtype)}")
        if source.dtype != self.dtype:
            raise RuntimeError(f"{name}: self and source expected to have the same dtype, but got (self) "
                               f"{_dtype_name(self.dtype)} and (source) {_dtype_name(source.dtype)}")
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


def index_add(self, dim, index, source, *, alpha=1):
    return _index_accumulate("index_add", self, dim, index, source, alpha)


def index_add_(self, dim, index, source, *, alpha=1):
    return _index_accumulate("index_add", self, dim, index, source, alpha, inplace=True)


def index_add_out(self, dim, index, source, *, alpha=1, out):
    return _index_accumulate("index_add", self, dim, index, source, alpha, out=out)


def index_copy(self, dim, index, source):
    return _index_accumulate("index_copy", self, dim, index, source)


def index_copy_(self, dim, index, source):
    return _index_accumulate("index_copy", self, dim, index, source, inplace=True)


def index_copy_out(self, dim, index, source, *, out):
    return _index_accumulate("index_copy", self, dim, index, source, out=out)


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


def index_fill_int_scalar_(self, dim, index, value):
    return _index_fill_(self, dim, index, value)


def index_fill_int_tensor_(self, dim, index, value):
    return _index_fill_(self, dim, index, value)


# ---------------------------------------------------------------------------------------------
# where, masked_fill_

def _select_operand(t, shape, device):
    """A where() value operand: a device tensor broadcast to ``shape``, or an immediate number."""
    if isinstance(t, torch.Tensor):
        if t.device.type == "emu":
            return device_ref(t, shape, broadcast_strides(t, shape))
        return t.item()
    return t


def _where(cond, a, b, out=None):
    name = "aten::where"
    device = common_device(name, cond, a, b, *([out] if out is not None else []))
    _supported(name, a, b)
    if cond.dtype != torch.bool:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{_dtype_name(cond.dtype)}")
    dtype = torch.result_type(a, b)
    if dtype not in SUPPORTED:
        raise unsupported_dtype(name, dtype, SUPPORTED)
    shape = broadcast_shape(tuple(cond.shape), tuple(a.shape), tuple(b.shape))
    if out is None:
        out = empty_like_layout(shape, dtype, device, a, b, cond)
    else:
        _supported(name, out)
        prepare_out(name, out, shape, dtype)
        check_overlap(name, out, cond, a, b)
    if out.numel() == 0:
        return out
    cond = _on_device(cond, device)
    _launch("where", (device_ref(out), device_ref(cond, shape, broadcast_strides(cond, shape)),
                      _select_operand(a, shape, device), _select_operand(b, shape, device), TO_CODE[dtype]), device)
    return out


def where_self(condition, self, other):
    return _where(condition, self, other)


def where_self_out(condition, self, other, *, out):
    return _where(condition, self, other, out)


def _masked_fill_(self, mask, value):
    name = "masked_fill_"
    device = common_device(f"aten::{name}", self, mask, *([value] if isinstance(value, torch.Tensor) else []))
    _supported(f"aten::{name}", self)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{str(mask.dtype).replace('torch.', '')}")
    value = _scalar_value(name, value, self.dtype, device)
    shape = tuple(self.shape)
    if broadcast_shape(shape, tuple(mask.shape)) != shape:
        raise RuntimeError(f"The expanded size of the tensor ({shape[-1] if shape else 1}) must match the existing "
                           f"size ({mask.shape[-1]}) at non-singleton dimension {len(shape) - 1}.  Target sizes: "
                           f"{list(shape)}.  Tensor sizes: {list(mask.shape)}")
    if torch._debug_has_internal_overlap(self) == 1:
        warnings.warn("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
                      "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar",
                      UserWarning, stacklevel=4)
    check_overlap(f"aten::{name}", self, mask)
    if self.numel() == 0:
        return self
    if isinstance(value, torch.Tensor):
        value = device_ref(value, shape, (0,) * len(shape))
    mref = device_ref(mask, shape, broadcast_strides(mask, shape))
    _launch("where", (device_ref(self), mref, value, device_ref(self), TO_CODE[self.dtype]), device)
    return self


def masked_fill_scalar_(self, mask, value):
    return _masked_fill_(self, mask, value)


def masked_fill_tensor_(self, mask, value):
    return _masked_fill_(self, mask, value)


# ---------------------------------------------------------------------------------------------
# nonzero, masked_select, masked_scatter_

def _count(t: torch.Tensor, shape=None, strides=None) -> int:
    """Number of nonzero elements: a counting kernel, then one synchronising read of the count."""
    device = t.get_device()
    count = torch.empty((), dtype=torch.int64, device=_emu(device))
    _launch("count_nonzero", (device_ref(count, (1,), (1,)), device_ref(t, shape, strides)), device)
    return int(count.item())


def _nonzero(x, out=None):
    name = "aten::nonzero"
    device = common_device(name, x, *([out] if out is not None else []))
    _supported(name, x)
    if out is not None and out.dtype != torch.int64:
        raise RuntimeError(f"nonzero: Expected out tensor to have scalar type Long but got scalar type "
                           f"{_dtype_name(out.dtype)}")
    if x.numel():
        refuse_in_projection(name, "its output size is the number of nonzero elements (data)", AROUND_SHAPE)
    n = _count(x) if x.numel() else 0
    shape = (n, x.dim())
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=_emu(device))
    else:
        check_overlap(name, out, x)
        if tuple(out.shape) != shape:
            out.resize_(shape)  # ATen's nonzero_out resizes without a warning
    if x.numel():
        _launch("nonzero", (device_ref(out), device_ref(x), n), device)
    return out


def nonzero(self):
    return _nonzero(self)


def nonzero_out(self, *, out):
    return _nonzero(self, out)


def _masked_select(x, mask, out=None):
    name = "aten::masked_select"
    device = common_device(name, x, mask, *([out] if out is not None else []))
    _supported(name, x)
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    if out is not None:
        _check_out_dtype(name, out, x.dtype)
    shape = broadcast_shape(tuple(x.shape), tuple(mask.shape))
    mstrides = broadcast_strides(mask, shape)
    if 0 not in shape:
        refuse_in_projection(name, "its output size is the number of true mask elements (data)", AROUND_SHAPE)
    n = _count(mask, shape, mstrides) if 0 not in shape else 0
    if out is None:
        out = torch.empty((n,), dtype=x.dtype, device=_emu(device))
    else:
        check_overlap(name, out, x, mask)
        resize_out(out, (n,))
    if n:
        _launch("masked_select", (device_ref(out), device_ref(x, shape, broadcast_strides(x, shape)),
                                  device_ref(mask, shape, mstrides), n), device)
    return out


def masked_select(self, mask):
    return _masked_select(self, mask)


def masked_select_out(self, mask, *, out):
    return _masked_select(self, mask, out)


def masked_scatter_(self, mask, source):
    name = "aten::masked_scatter_"
    device = common_device(name, self, mask, source)
    _supported(name, self, source)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{str(mask.dtype).replace('torch.', '')}")
    if self.dtype != source.dtype:
        raise RuntimeError(f"masked_scatter_: expected self and source to have same dtypes but got "
                           f"{_dtype_name(self.dtype)} and {_dtype_name(source.dtype)}")
    shape = tuple(self.shape)
    if broadcast_shape(shape, tuple(mask.shape)) != shape:
        raise RuntimeError(f"masked_scatter_: mask of shape {list(mask.shape)} cannot be broadcast to self "
                           f"of shape {list(shape)}")
    check_overlap(name, self, mask, source)
    if self.numel() == 0:
        return self
    flat = source if source.is_contiguous() else source.contiguous()
    src_ref = device_ref(flat, (flat.numel(),), (1,))
    _launch("masked_scatter", (device_ref(self), device_ref(mask, shape, broadcast_strides(mask, shape)), src_ref),
            device)
    return self


# ---------------------------------------------------------------------------------------------
# embedding_dense_backward

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
# flip, roll, tril/triu

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


def tril(self, diagonal=0):
    return _tril_triu("tril", self, diagonal, False)


def tril_(self, diagonal=0):
    return _tril_triu("tril", self, diagonal, False, inplace=True)


def tril_out(self, diagonal=0, *, out):
    return _tril_triu("tril", self, diagonal, False, out=out)


def triu(self, diagonal=0):
    return _tril_triu("triu", self, diagonal, True)


def triu_(self, diagonal=0):
    return _tril_triu("triu", self, diagonal, True, inplace=True)


def triu_out(self, diagonal=0, *, out):
    return _tril_triu("triu", self, diagonal, True, out=out)


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


def reflection_pad1d(self, padding):
    return _pad("reflection", 1, self, padding)


def reflection_pad1d_out(self, padding, *, out):
    return _pad("reflection", 1, self, padding, out)


def reflection_pad2d(self, padding):
    return _pad("reflection", 2, self, padding)


def reflection_pad2d_out(self, padding, *, out):
    return _pad("reflection", 2, self, padding, out)


def replication_pad1d(self, padding):
    return _pad("replication", 1, self, padding)


def replication_pad1d_out(self, padding, *, out):
    return _pad("replication", 1, self, padding, out)


def replication_pad2d(self, padding):
    return _pad("replication", 2, self, padding)


def replication_pad2d_out(self, padding, *, out):
    return _pad("replication", 2, self, padding, out)


def reflection_pad1d_backward(grad_output, self, padding):
    return _pad_backward("reflection", 1, grad_output, self, padding)


def reflection_pad1d_backward_out(grad_output, self, padding, *, grad_input):
    return _pad_backward("reflection", 1, grad_output, self, padding, grad_input)


def reflection_pad2d_backward(grad_output, self, padding):
    return _pad_backward("reflection", 2, grad_output, self, padding)


def reflection_pad2d_backward_out(grad_output, self, padding, *, grad_input):
    return _pad_backward("reflection", 2, grad_output, self, padding, grad_input)


def replication_pad1d_backward(grad_output, self, padding):
    return _pad_backward("replication", 1, grad_output, self, padding)


def replication_pad1d_backward_out(grad_output, self, padding, *, grad_input):
    return _pad_backward("replication", 1, grad_output, self, padding, grad_input)


def replication_pad2d_backward(grad_output, self, padding):
    return _pad_backward("replication", 2, grad_output, self, padding)


def replication_pad2d_backward_out(grad_output, self, padding, *, grad_input):
    return _pad_backward("replication", 2, grad_output, self, padding, grad_input)


# ---------------------------------------------------------------------------------------------
# sort, topk

# The device sort kernel's algorithms (emulator/kernels/indexing.pyx): equal keys come out in
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


def sort_stable(self, *, stable=None, dim=-1, descending=False):
    n = self.shape[_wrap_dim(dim, self.dim())] if self.dim() else 1
    return _sort(self, dim, descending, n, algorithm=_sort_algorithm(self, stable, descending))


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


def topk(self, k, dim=-1, largest=True, sorted=True):
    return _topk(self, k, dim, largest, sorted=sorted)


def topk_values(self, k, dim=-1, largest=True, sorted=True, *, values, indices):
    return _topk(self, k, dim, largest, values, indices, sorted=sorted)


# =============================================================================================
# Second block: index_reduce, take, put_, repeat_interleave.Tensor, isin, nonzero_static,
# _unique2 / unique_consecutive, hash_tensor.
#
# index_reduce, take and put_ run on the addressing unit above (index_gather / index_scatter);
# the others have kernels of their own. Host synchronisations: repeat_interleave without
# output_size (one read of sum and min of the repeats), _unique2 and unique_consecutive (one
# read of the number of unique values; the outputs are then copied out of scratch buffers).

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
                         f"{_dtype_name(index.dtype)} and size: {list(index.shape)}")
    if index.dtype not in _INT_INDEX:
        raise RuntimeError(f"{name}: Expected dtype int32/int64 for index but got: {_dtype_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"{name}: self ({_dtype_name(self.dtype)}) and source ({_dtype_name(source.dtype)}) "
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


def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    return _index_reduce(self, dim, index, source, reduce, include_self)


def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return _index_reduce(self, dim, index, source, reduce, include_self, inplace=True)


def index_reduce_out(self, dim, index, source, reduce, *, include_self=True, out):
    return _index_reduce(self, dim, index, source, reduce, include_self, out=out)


_FLAT_OUT_OF_RANGE = "out of range: tried to access index {index} on a tensor of {size} elements."


def _flat_table(t: torch.Tensor) -> torch.Tensor:
    """t as one dim of its elements in C order (a contiguous copy on the device when needed)."""
    return (t if t.is_contiguous() else t.contiguous()).view(-1)


def _take(self, index, out=None):
    name = "aten::take"
    device = common_device(name, self, index, *([out] if out is not None else []))
    _supported(name, self)
    if index.dtype != torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {_dtype_name(index.dtype)}")
    if self.numel() == 0 and index.numel() != 0:
        raise IndexError("take(): tried to take from an empty tensor")
    result = _prepare_out(name, out, tuple(index.shape), self.dtype, device, self, index)
    if index.numel() == 0:
        return result
    table = _flat_table(self)
    shape, _ = _shape1(index)
    _gather_launch(result, table, (0,) * len(shape), [(_ref1(index), 0)], True, _FLAT_OUT_OF_RANGE, device)
    return result


def take(self, index):
    return _take(self, index)


def take_out(self, index, *, out):
    return _take(self, index, out)


def put_(self, index, source, accumulate=False):
    name = "aten::put_"
    device = common_device(name, self, index, source)
    _supported(name, self, source)
    if index.dtype != torch.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {_dtype_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{_dtype_name(self.dtype)} and source.dtype = {_dtype_name(source.dtype)}")
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


def isin_tensor_tensor(elements, test_elements, *, assume_unique=False, invert=False):
    return _isin(elements, test_elements, assume_unique, invert)


def isin_tensor_tensor_out(elements, test_elements, *, assume_unique=False, invert=False, out):
    return _isin(elements, test_elements, assume_unique, invert, out)


def isin_tensor_scalar(elements, test_element, *, assume_unique=False, invert=False):
    return _isin(elements, test_element, assume_unique, invert)


def isin_tensor_scalar_out(elements, test_element, *, assume_unique=False, invert=False, out):
    return _isin(elements, test_element, assume_unique, invert, out)


def isin_scalar_tensor(element, test_elements, *, assume_unique=False, invert=False):
    return _isin(element, test_elements, assume_unique, invert)


def isin_scalar_tensor_out(element, test_elements, *, assume_unique=False, invert=False, out):
    return _isin(element, test_elements, assume_unique, invert, out)


def _nonzero_static(self, size, fill_value=-1, out=None):
    name = "aten::nonzero_static"
    device = common_device(name, self, *([out] if out is not None else []))
    _supported(name, self)
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    shape = (size, self.dim())
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=_emu(device))
    else:
        if out.dtype != torch.int64:
            raise RuntimeError(f"nonzero_static: Expected out tensor to have scalar type Long but got scalar type "
                               f"{_dtype_name(out.dtype)}")
        check_overlap(name, out, self)
        if tuple(out.shape) != shape:
            out.resize_(shape)
    if out.numel():
        _launch("nonzero_static", (device_ref(out), device_ref(self), int(size), int(fill_value)), device)
    return out


def nonzero_static(self, *, size, fill_value=-1):
    return _nonzero_static(self, size, fill_value)


def nonzero_static_out(self, *, size, fill_value=-1, out):
    return _nonzero_static(self, size, fill_value, out)


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


def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    # CPU sorts whatever ``sorted`` says (its sort is faster than hashing), so does the device.
    return _unique("_unique2", self, True, return_inverse, return_counts)


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


def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    # CPU sorts whatever ``sorted`` says, and returns inverse and counts either way.
    return _unique_dim("unique_dim", self, dim, True)


def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_dim("unique_dim_consecutive", self, dim, False)


def _hash_tensor(self, dim=(), keepdim=False, mode=0, out=None):
    name = "aten::hash_tensor"
    device = common_device(name, self, *([out] if out is not None else []))
    _supported(name, self)
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    nd = self.dim()
    dims = list(range(nd)) if not dim else sorted({_wrap_dim(d, nd) for d in dim})
    if self.numel() == 0:
        if not dim:
            raise RuntimeError("hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        for d in dims:
            if self.shape[d] == 0:
                raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    keep_shape = tuple(1 if k in dims else n for k, n in enumerate(self.shape))
    shape = keep_shape if keepdim else tuple(n for k, n in enumerate(self.shape) if k not in dims)
    if out is None:
        out = torch.empty(shape, dtype=torch.uint64, device=_emu(device))
    else:
        _check_out_dtype("hash_tensor", out, torch.uint64)
        resize_out(out, shape)
    if out.numel() == 0:
        return out
    bits = out.view(torch.int64)  # the same 64 bits; the kernel writes int64
    if keepdim:
        strides = tuple(0 if k in dims else st for k, st in enumerate(bits.stride()))
    else:  # the kept dims take out's strides in order, the reduced ones 0
        kept = iter(bits.stride())
        strides = tuple(0 if k in dims else next(kept) for k in range(nd))
    s_shape, s_strides = _shape1(self)
    if nd == 0:
        strides = (0,)
    _launch("hash_xor", (device_ref(bits, s_shape, strides), device_ref(self, s_shape, s_strides)), device)
    return out


def hash_tensor(self, dim=(), *, keepdim=False, mode=0):
    return _hash_tensor(self, dim, keepdim, mode)


def hash_tensor_out(self, dim=(), *, keepdim=False, mode=0, out):
    return _hash_tensor(self, dim, keepdim, mode, out)
