"""Selection (order statistics), scans, searching, histograms and segment reductions on emu.

Native (device kernels of ``emulator/kernels/selection.pyx``): median / nanmedian (all, .dim,
.dim_values), mode, kthvalue.values, _cummax_helper / _cummin_helper, _logcumsumexp (+ .out),
searchsorted (.Tensor, .Scalar, + out) / bucketize (.Tensor, .Scalar, + out), histc (+ .out),
histogram (.bin_ct, .bins_tensor, + out), _histogramdd_bin_edges / _histogramdd_from_bin_cts /
_histogramdd_from_bin_tensors, segment_reduce and _segment_reduce_backward. aminmax (+ .out)
launches the generic reduction kernel twice (min and max).

Composites of other device ops: nansum (+ .out: NaNs masked to 0, then the device sum),
count_nonzero.dim_IntList (``x != 0`` then sum), equal (eq, all, then one host read).

Host synchronisations (data-dependent results or CPU's data-dependent checks), one read each:
``equal`` (the bool it returns); histc with ``min == max`` and histogram / histogramdd without a
``range`` (the input's min and max become the outer bin edges); histogram/histogramdd with
``density`` need none (the kernel normalises); segment_reduce with ``unsafe=False`` reads the
lengths' minimum and whether every row sums to the axis size (two reads, CPU's checks).

Indices follow CPU's algorithms (see selection.pyx): median's lower median with the first NaN
for torch.median; kthvalue's quickselect; mode's introsort. A sorter index out of range is
reported by the kernel (a KERNEL_FAULT at the next synchronising call, CPU's message); CPU checks
it on the host with two synchronisations.
"""
from __future__ import annotations

import math

import torch

from torch_plugin._dtypes import SUPPORTED, TO_CODE
from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops import registry
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops.reduction import (_check_out_dtype, _check_supported, _int_dims, _keep_strides,
                                        _launch_reduce, _output, _reduced_dims, _scalar_name, _shapes, _wrap_dim)

_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _emu(device: int) -> torch.device:
    return torch.device("emu", device)


def _launch(kernel: str, args: tuple, device: int) -> None:
    rt().launch(kernel, args, current_stream(device))


def _not_implemented(kernel: str, dtype) -> NotImplementedError:
    """CPU's own rejection of a dtype (its dispatch macro's message)."""
    return NotImplementedError(f"\"{kernel}\" not implemented for '{_scalar_name(dtype)}'")


def _floating_only(kernel: str, dtype) -> None:
    if dtype not in _FLOATING:
        if dtype in SUPPORTED:
            raise _not_implemented(kernel, dtype)
        raise unsupported_dtype(kernel, dtype, _FLOATING)


# --------------------------------------------------------------------------------- order stats
def _order_stat(op, x, dims, keepdim, k=0, values=None, indices=None, with_index=True):
    """Launches order_stat over ``dims``; allocates (or resizes) values/indices."""
    name = f"aten::{op}"
    _, shape = _shapes(x, dims, keepdim)
    if values is not None:
        _check_out_dtype(values, x.dtype)
        if indices is not None:
            _check_out_dtype(indices, torch.int64)
            if torch._C._is_alias_of(values, indices):
                check_overlap(name, values, indices)
    values = _output(name, x, shape, x.dtype, values)
    if with_index:
        indices = _output(name, x, shape, torch.int64, indices)
    if values.numel():
        keep_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
        v_ref = device_ref(values, keep_shape, _keep_strides(values, x.dim(), dims, keepdim))
        i_ref = device_ref(indices, keep_shape, _keep_strides(indices, x.dim(), dims, keepdim)) if with_index else None
        _launch("order_stat", (op, v_ref, i_ref, device_ref(x), sum(1 << d for d in dims), int(k)), x.get_device())
    return (values, indices) if with_index else values


def _dim_checked(fn: str, x, dim) -> tuple:
    """CPU's zero_numel_check_dims for the .dim forms: the reduced dims (empty for 0-dim x)."""
    d = _wrap_dim(dim, x.dim())
    if x.dim() and x.numel() == 0 and x.shape[d] == 0:
        raise IndexError(f"{fn}(): Expected reduction dim {d} to have non-zero size.")
    return (d,) if x.dim() else ()


def _median_all(op, x, out=None):
    common_device(f"aten::{op}", x)
    _check_supported(f"aten::{op}", x.dtype)
    if x.dtype == torch.bool:
        raise _not_implemented("median_cpu", x.dtype)
    return _order_stat(op, x, tuple(range(x.dim())), False, values=out, with_index=False)


def median(x):
    return _median_all("median", x)


def nanmedian(x):
    return _median_all("nanmedian", x)


def _median_dim(op, x, dim, keepdim, values=None, indices=None):
    common_device(f"aten::{op}.dim", x)
    _check_supported(f"aten::{op}.dim", x.dtype)
    if x.dtype == torch.bool:
        raise _not_implemented("median_out", x.dtype)
    dims = _dim_checked(op, x, dim)
    return _order_stat(op, x, dims, keepdim, values=values, indices=indices)


def median_dim(x, dim, keepdim=False):
    return _median_dim("median", x, dim, keepdim)


def median_dim_values(x, dim, keepdim=False, *, values, indices):
    return _median_dim("median", x, dim, keepdim, values, indices)


def nanmedian_dim(x, dim, keepdim=False):
    return _median_dim("nanmedian", x, dim, keepdim)


def nanmedian_dim_values(x, dim, keepdim=False, *, values, indices):
    return _median_dim("nanmedian", x, dim, keepdim, values, indices)


def _mode(x, dim, keepdim, values=None, indices=None):
    common_device("aten::mode", x)
    _check_supported("aten::mode", x.dtype)
    dims = _dim_checked("mode", x, dim)
    return _order_stat("mode", x, dims, keepdim, values=values, indices=indices)


def mode(x, dim=-1, keepdim=False):
    return _mode(x, dim, keepdim)


def mode_values(x, dim=-1, keepdim=False, *, values, indices):
    return _mode(x, dim, keepdim, values, indices)


def _kthvalue(x, k, dim, keepdim, values=None, indices=None):
    common_device("aten::kthvalue", x)
    _check_supported("aten::kthvalue", x.dtype)
    if x.dtype == torch.bool:
        raise _not_implemented("kthvalue_cpu", x.dtype)
    d = _wrap_dim(dim, x.dim())
    size = x.shape[d] if x.dim() else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return _order_stat("kthvalue", x, (d,) if x.dim() else (), keepdim, k, values, indices)


def kthvalue(x, k, dim=-1, keepdim=False):
    return _kthvalue(x, k, dim, keepdim)


def kthvalue_values(x, k, dim=-1, keepdim=False, *, values, indices):
    return _kthvalue(x, k, dim, keepdim, values, indices)


# ----------------------------------------------------------------------------------- cum ops
def _line_refs(x, *tensors):
    """(shape, refs, dim) for a scan: a 0-dim tensor is one line of length 1."""
    if x.dim() == 0:
        return (1,), [device_ref(t, (1,), (0,)) for t in tensors]
    return tuple(x.shape), [device_ref(t) for t in tensors]


def _cum_helper(op, x, values, indices, dim):
    name = f"aten::_{op}_helper"
    common_device(name, x, values, indices)
    _check_supported(name, x.dtype)
    d = _wrap_dim(dim, x.dim())
    if tuple(values.shape) != tuple(x.shape) or tuple(indices.shape) != tuple(x.shape) \
            or values.dtype != x.dtype or indices.dtype != torch.int64:
        raise RuntimeError(f"_{op}_helper: values ({values.dtype}{list(values.shape)}) and indices "
                           f"({indices.dtype}{list(indices.shape)}) must have the input's shape "
                           f"{list(x.shape)}, its dtype and int64")
    check_overlap(name, values, x)
    check_overlap(name, indices, x)
    if x.numel():
        _, (v, i, s) = _line_refs(x, values, indices, x)
        _launch("cum_select", (op, v, i, s, d), x.get_device())


def cummax_helper(x, values, indices, dim):
    _cum_helper("cummax", x, values, indices, dim)


def cummin_helper(x, values, indices, dim):
    _cum_helper("cummin", x, values, indices, dim)


def _logcumsumexp(x, dim, out=None):
    name = "aten::_logcumsumexp"
    common_device(name, x)
    _floating_only("logcumsumexp_out_cpu", x.dtype)
    d = _wrap_dim(dim, x.dim())
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=_emu(x.get_device()))
    else:
        common_device(name, out, x)
        _check_out_dtype(out, x.dtype)
        resize_out(out, x.shape)
        check_overlap(name, out, x)
    if x.numel():
        _, (o, s) = _line_refs(x, out, x)
        _launch("cum_select", ("logcumsumexp", o, None, s, d), x.get_device())
    return out


def logcumsumexp(x, dim):
    return _logcumsumexp(x, dim)


def logcumsumexp_out(x, dim, *, out):
    return _logcumsumexp(x, dim, out)


# ------------------------------------------------------------------------------------ aminmax
def _aminmax(x, dim, keepdim, mn=None, mx=None):
    name = "aten::aminmax"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                               "no identity.")
        dims = tuple(range(x.dim()))
    else:
        d = _wrap_dim(dim, x.dim())
        if x.dim() and x.shape[d] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
        dims = (d,) if x.dim() else ()
    _, shape = _shapes(x, dims, keepdim)
    if mn is not None:
        _check_out_dtype(mn, x.dtype)
        _check_out_dtype(mx, x.dtype)
        check_overlap(name, mn, mx)
    mn = _output(name, x, shape, x.dtype, mn)
    mx = _output(name, x, shape, x.dtype, mx)
    _launch_reduce("min", x, dims, keepdim, mn, x.dtype)
    _launch_reduce("max", x, dims, keepdim, mx, x.dtype)
    return mn, mx


def aminmax(x, *, dim=None, keepdim=False):
    return _aminmax(x, dim, keepdim)


def aminmax_out(x, *, dim=None, keepdim=False, min, max):
    return _aminmax(x, dim, keepdim, min, max)


# ----------------------------------------------------------------- composites: nansum, count, equal
def _nansum(x, dim, keepdim, dtype, out=None):
    common_device("aten::nansum", x)
    _check_supported("aten::nansum", x.dtype)
    source = x.masked_fill(x.isnan(), 0) if x.dtype.is_floating_point else x
    if out is None:
        return torch.sum(source, _int_dims(dim) or [], keepdim, dtype=dtype)
    return torch.sum(source, _int_dims(dim) or [], keepdim, dtype=dtype, out=out)


@registry.composite
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    return _nansum(x, dim, keepdim, dtype)


@registry.composite
def nansum_out(x, dim=None, keepdim=False, *, dtype=None, out):
    return _nansum(x, dim, keepdim, dtype, out)


@registry.composite
def count_nonzero_dim_intlist(x, dim):
    common_device("aten::count_nonzero", x)
    _check_supported("aten::count_nonzero", x.dtype)
    _reduced_dims("aten::count_nonzero", x.dim(), list(dim))
    return torch.ne(x, 0).sum(list(dim), dtype=torch.int64)


@registry.composite
def equal(x, other):
    """CPU's torch.equal: False for different shapes; else elementwise == in the common dtype, all
    true (NaN is never equal). One host synchronisation (the bool is read back)."""
    if x.device != other.device:
        raise RuntimeError(f"Cannot compare two tensors on different devices. Got: {x.device} and {other.device}")
    common_device("aten::equal", x, other)
    if tuple(x.shape) != tuple(other.shape):
        return False
    if x.numel() == 0:
        return True
    refuse_in_projection("aten::equal", "returns a Python bool computed from device values")
    return bool(torch.eq(x, other).all().item())


# ------------------------------------------------------------------------- searchsorted / bucketize
def _scalar_tensor(value, device: int) -> torch.Tensor:
    """A Python scalar as a 0-dim emu tensor (CPU's scalar_to_tensor dtype: double, long or bool)."""
    dtype = torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float64
    return torch.full((), value, dtype=dtype, device=_emu(device))


def _searchsorted(seq, values, out_int32, right, side, sorter, out=None, scalar=None, name="aten::searchsorted"):
    tensors = [t for t in (seq, values, sorter, out) if isinstance(t, torch.Tensor)]
    device = common_device(name, *tensors)
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side != "right":
            raise RuntimeError(f"torch.searchsorted(): side and right can't be set to opposites, got side of {side} "
                               "while right was True")
        right = side == "right"
    if scalar is not None:
        values = _scalar_tensor(scalar, device)
        common = torch.result_type(seq, scalar)
    else:
        common = torch.result_type(seq, values)
    for t in (seq, values):
        _check_supported(name, t.dtype)
    if common == torch.bool or seq.dtype == torch.bool and values.dtype == torch.bool:
        raise _not_implemented("searchsorted_out_cpu", torch.bool)
    if sorter is not None:
        if tuple(sorter.shape) != tuple(seq.shape):
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got boundary "
                               f"tensor {list(seq.shape)}and got sorter tensor {list(sorter.shape)}")
        if sorter.dtype != torch.int64:
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype "
                               f"{_scalar_name(sorter.dtype)}")
    if not (values.dim() > 0 or (values.numel() == 1 and seq.dim() == 1)):
        raise RuntimeError(f"torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension "
                           f"is 1, but we got boundaries tensor dim({seq.dim()}) and input value's dim({values.dim()}) "
                           f"numel({values.numel()})")
    if seq.dim() == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    if seq.dim() != 1 and (seq.dim() != values.dim() or tuple(seq.shape[:-1]) != tuple(values.shape[:-1])):
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions "
                           f"of boundaries tensor and input value tensor must match, but we got boundaries tensor "
                           f"{list(seq.shape)} and input value tensor {list(values.shape)}")
    out_dtype = torch.int32 if out_int32 else torch.int64
    if out is None:
        out = torch.empty(values.shape, dtype=out_dtype, device=_emu(device))
    else:
        if out.dtype != out_dtype:
            raise RuntimeError("torch.searchsorted(): output tensor's dtype is wrong, it can only be Int(int32) or "
                               "Long(int64) depending on whether out_int32 flag is True, but we got output tensor's "
                               f"dtype {_scalar_name(out.dtype)} and out_int32 flag is {bool(out_int32)}")
        resize_out(out, values.shape)
        check_overlap(name, out, values, seq)
    if out.numel() == 0:
        return out
    length = seq.shape[-1]
    if values.dim() == 0:
        seq_shape = (length,)
    else:
        seq_shape = tuple(values.shape[:-1]) + (length,)

    def row_ref(t):
        if t.dim() == 1:
            strides = (0,) * (len(seq_shape) - 1) + (t.stride(0),)
        else:
            strides = tuple(t.stride())
        return device_ref(t, seq_shape, strides)
    _launch("search", (device_ref(out), device_ref(values), row_ref(seq), None if sorter is None else row_ref(sorter),
                       length, TO_CODE[common], bool(right)), device)
    return out


def searchsorted_tensor(seq, x, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(seq, x, out_int32, right, side, sorter)


def searchsorted_tensor_out(seq, x, *, out_int32=False, right=False, side=None, sorter=None, out):
    return _searchsorted(seq, x, out_int32, right, side, sorter, out)


def searchsorted_scalar(seq, x, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(seq, None, out_int32, right, side, sorter, scalar=x)


def searchsorted_scalar_out(seq, x, *, out_int32=False, right=False, side=None, sorter=None, out):
    return _searchsorted(seq, None, out_int32, right, side, sorter, out, scalar=x)


def _bucketize(x, boundaries, out_int32, right, out=None, scalar=None):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted(boundaries, x, out_int32, right, None, None, out, scalar, name="aten::bucketize")


def bucketize_tensor(x, boundaries, *, out_int32=False, right=False):
    return _bucketize(x, boundaries, out_int32, right)


def bucketize_tensor_out(x, boundaries, *, out_int32=False, right=False, out):
    return _bucketize(x, boundaries, out_int32, right, out)


def bucketize_scalar(x, boundaries, *, out_int32=False, right=False):
    return _bucketize(None, boundaries, out_int32, right, scalar=x)


# ----------------------------------------------------------------------------------- histograms
_H_LINEAR, _H_LINEAR_LOCAL, _H_BINARY = 0, 1, 2


def _as_rows(x, d: int):
    """x as (N, D) rows without a host copy (a device copy when the strides do not allow a view)."""
    n = x.numel() // d if d else 0
    try:
        return x.view(n, d)
    except RuntimeError:
        return x.contiguous().view(n, d)


def _histogram_launch(hist, rows, weight, algorithm, density, edges):
    device = rows.get_device()
    w_ref = None
    if weight is not None:
        w = weight.reshape(-1)
        w_ref = device_ref(w, (w.numel(),), (w.stride(0) if w.dim() else 0,))
    _launch("histogram", (device_ref(hist), device_ref(rows), w_ref, algorithm, bool(density),
                          *[device_ref(e, (e.numel(),), (e.stride(0),)) for e in edges]), device)


def _check_weight(x, weight, name):
    """CPU's histogramdd_check_inputs for the weight; ``x`` is the (N, D) rows."""
    if weight is None:
        return
    common_device(name, x, weight)
    if tuple(weight.shape) != tuple(x.shape[:-1]):
        raise RuntimeError(f"torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           f"input tensor excluding its innermost dimension, but got input with shape "
                           f"{list(x.shape)} and weight with shape {list(weight.shape)}")
    if weight.dtype != x.dtype:
        raise RuntimeError(f"torch.histogramdd: if weight tensor is provided, it should have the same dtype as the "
                           f"input tensor, but got weight {_scalar_name(weight.dtype)} and input "
                           f"{_scalar_name(x.dtype)}")


def _outer_edges(rows, d: int, rng) -> tuple[list, list]:
    """CPU's select_outer_bin_edges: the range, else the input's min/max per dim (one host read)."""
    if rng is not None:
        if len(rng) != 2 * d:
            raise RuntimeError(f"torch.histogramdd: for a {d}-dimensional histogram range should have {2 * d} "
                               f"elements, but got {len(rng)}")
        lo, hi = [float(rng[2 * i]) for i in range(d)], [float(rng[2 * i + 1]) for i in range(d)]
    elif rows.numel() > 0:
        refuse_in_projection(None, "reads the input's range on the host (no range given)", "pass range=")
        mn, mx = torch.aminmax(rows, dim=0)
        both = torch.stack([mn, mx]).to(torch.float64).cpu().tolist()  # one synchronisation
        lo, hi = both[0], both[1]
    else:
        lo, hi = [0.0] * d, [1.0] * d
    for i in range(d):
        if not (math.isfinite(lo[i]) and math.isfinite(hi[i])):
            raise RuntimeError(f"torch.histogramdd: dimension {i}'s range [{lo[i]:g}, {hi[i]:g}] is not finite")
        if not lo[i] <= hi[i]:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo[i]:g} max {hi[i]:g} "
                               f"for dimension {i}")
        if lo[i] == hi[i]:
            lo[i] -= 0.5
            hi[i] += 0.5
    return lo, hi


def _histogramdd_counts(x, bins, rng, weight, density, name, hist=None, edges_out=None, edges_only=False):
    """(hist, edges) for bin counts: linear edges over the range (or the data's)."""
    device = common_device(name, x)
    _check_supported(name, x.dtype)
    d = x.shape[-1] if x.dim() else 1
    if x.dtype not in _FLOATING:
        raise _not_implemented("histogram_cpu", x.dtype)
    if x.dtype not in (torch.float32, torch.float64) and rng is None:
        raise _not_implemented("histogramdd", x.dtype)  # CPU infers the edges for float/double only
    if len(bins) != d:
        raise RuntimeError(f"torch.histogramdd: expected {d} sequences of bin edges for each of the {d} dimensions of "
                           f"the input, but got {len(bins)}")
    for i, b in enumerate(bins):
        if b <= 0:
            raise RuntimeError(f"torch.histogramdd(): bins must be > 0, but got {b} for dimension {i}")
    _check_weight(x, weight, name)
    rows = _as_rows(x, d)
    lo, hi = _outer_edges(rows, d, rng)
    edges = []
    for i, b in enumerate(bins):
        e = edges_out[i] if edges_out is not None else torch.empty((b + 1,), dtype=x.dtype, device=_emu(device))
        if edges_out is not None:
            resize_out(e, (b + 1,))
        torch.linspace(lo[i], hi[i], b + 1, out=e)
        edges.append(e)
    if edges_only:
        return None, edges
    shape = tuple(bins)
    if hist is None:
        hist = torch.empty(shape, dtype=x.dtype, device=_emu(device))
    else:
        _check_out_dtype(hist, x.dtype)
        resize_out(hist, shape)
    _histogram_launch(hist, rows, weight, _H_LINEAR_LOCAL, density, edges)
    return hist, edges


def _histogramdd_tensors(x, bins, weight, density, name, hist=None):
    device = common_device(name, x, *bins)
    _check_supported(name, x.dtype)
    if x.dtype not in _FLOATING:
        raise _not_implemented("histogram_cpu", x.dtype)
    d = x.shape[-1] if x.dim() else 1
    if len(bins) != d:
        raise RuntimeError(f"torch.histogramdd: expected {d} sequences of bin edges for each of the {d} dimensions of "
                           f"the input, but got {len(bins)}")
    for i, e in enumerate(bins):
        if e.dtype != x.dtype:
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                               f"input {_scalar_name(x.dtype)} and bins for dimension {i} {_scalar_name(e.dtype)}")
        if e.dim() != 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {e.dim()} "
                               f"dimensions in the bins tensor for dimension {i}")
        if e.numel() == 0:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have at least 1 element, but got {e.numel()} "
                               f"elements in the bins tensor for dimension {i}")
    _check_weight(x, weight, name)
    shape = tuple(e.numel() - 1 for e in bins)
    if hist is None:
        hist = torch.empty(shape, dtype=x.dtype, device=_emu(device))
    else:
        _check_out_dtype(hist, x.dtype)
        resize_out(hist, shape)
    if hist.numel() == 0:
        return hist.zero_()
    _histogram_launch(hist, _as_rows(x, d), weight, _H_BINARY, density, bins)
    return hist


def histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):
    _, edges = _histogramdd_counts(x, list(bins), range, weight, density, "aten::_histogramdd_bin_edges",
                                   edges_only=True)
    return edges


def histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):
    hist, _ = _histogramdd_counts(x, list(bins), range, weight, density, "aten::_histogramdd_from_bin_cts")
    return hist


def histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    return _histogramdd_tensors(x, list(bins), weight, density, "aten::_histogramdd_from_bin_tensors")


def _histogram_1d(x, bins, rng, weight, density, hist=None, bin_edges=None):
    name = "aten::histogram"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if x.dtype not in _FLOATING:
        raise _not_implemented("histogram_cpu", x.dtype)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if weight is not None and tuple(weight.shape) != tuple(x.shape):
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           "input tensor excluding its innermost dimension")
    if bin_edges is not None:
        _check_out_dtype(bin_edges, x.dtype)
    hist, edges = _histogramdd_counts(x.reshape(-1, 1), [bins], None if rng is None else list(rng),
                                      None if weight is None else weight.reshape(-1), density, name, hist,
                                      None if bin_edges is None else [bin_edges])
    return hist, edges[0]


def histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    return _histogram_1d(x, bins, range, weight, density)


def histogram_bin_ct_out(x, bins=100, *, range=None, weight=None, density=False, hist, bin_edges):
    return _histogram_1d(x, bins, range, weight, density, hist, bin_edges)


def _histogram_tensor(x, bins, weight, density, hist=None, bin_edges=None):
    name = "aten::histogram"
    common_device(name, x, bins)
    _check_supported(name, x.dtype)
    if x.dtype not in _FLOATING:
        raise _not_implemented("histogram_cpu", x.dtype)
    if weight is not None and tuple(weight.shape) != tuple(x.shape):
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           "input tensor excluding its innermost dimension")
    rows = x.reshape(-1, 1)
    hist = _histogramdd_tensors(rows, [bins], None if weight is None else weight.reshape(-1), density, name, hist)
    if bin_edges is None:
        bin_edges = bins.clone()
    else:
        _check_out_dtype(bin_edges, x.dtype)
        resize_out(bin_edges, bins.shape)
        bin_edges.copy_(bins)
    return hist, bin_edges


def histogram_bins_tensor(x, bins, *, weight=None, density=False):
    return _histogram_tensor(x, bins, weight, density)


def histogram_bins_tensor_out(x, bins, *, weight=None, density=False, hist, bin_edges):
    return _histogram_tensor(x, bins, weight, density, hist, bin_edges)


def _histc(x, bins, lo, hi, out=None):
    name = "aten::histc"
    device = common_device(name, x)
    _check_supported(name, x.dtype)
    if x.dtype not in _FLOATING:
        if x.dtype in _HISTC_INTEGERS:
            return _histc_integer(x, bins, lo, hi, out, device)
        raise _not_implemented("histogram_histc_cpu", x.dtype)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    lo, hi = float(lo), float(hi)
    if lo == hi and x.numel() > 0:
        refuse_in_projection("aten::histc", "reads the input's range on the host (min == max)", "pass min < max")
        mn, mx = torch.aminmax(x)
        lo, hi = torch.stack([mn, mx]).to(torch.float64).cpu().tolist()  # one synchronisation
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if math.isinf(lo) or math.isinf(hi) or math.isnan(lo) or math.isnan(hi):
        raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
    if not lo < hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if out is None:
        out = torch.empty((bins,), dtype=x.dtype, device=_emu(device))
    else:
        common_device(name, out, x)
        _check_out_dtype(out, x.dtype)
        resize_out(out, (bins,))
    edges = torch.linspace(lo, hi, bins + 1, dtype=x.dtype, device=_emu(device))
    _histogram_launch(out, _as_rows(x.reshape(-1) if x.dim() != 1 else x, 1), None, _H_LINEAR, False, [edges])
    return out


_HISTC_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _histc_integer(x, bins, lo, hi, out, device):
    """histc of an integer tensor, as CUDA computes it (CPU rejects integers; ``transformers``'
    mixture-of-experts routers count tokens per expert this way on every accelerator): min and
    max are cast to the input's integer type, bin = (x - min) * bins / (max - min) in integer
    arithmetic, x == max goes to the last bin, values outside [min, max] are not counted, and
    the counts have the input's dtype. A composite of device ops; min == max reads the data's
    range (one synchronisation), as CUDA does."""
    name = "aten::histc"
    if bins <= 0:
        raise RuntimeError(f"bins must be > 0, but got {bins}")
    lo, hi = int(lo), int(hi)
    if lo == hi and x.numel() > 0:
        refuse_in_projection(name, "reads the input's range on the host (min == max)", "pass min < max")
        mn, mx = torch.aminmax(x)
        lo, hi = torch.stack([mn, mx]).to(torch.int64).cpu().tolist()  # one synchronisation
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not lo < hi:
        raise RuntimeError("max must be larger than min")
    if out is None:
        out = torch.empty((bins,), dtype=x.dtype, device=_emu(device))
    else:
        common_device(name, out, x)
        _check_out_dtype(out, x.dtype)
        resize_out(out, (bins,))
    values = x.reshape(-1).to(torch.int64)
    index = torch.div((values - lo) * bins, hi - lo, rounding_mode="floor")
    index = torch.where(index == bins, bins - 1, index)
    index = torch.where((values >= lo) & (values <= hi), index, bins)      # out of range: a spare bin
    counts = torch.zeros((bins + 1,), dtype=torch.int64, device=_emu(device))
    counts.index_add_(0, index, torch.ones_like(index))
    out.copy_(counts[:bins])
    return out


def histc(x, bins=100, min=0, max=0):
    return _histc(x, bins, min, max)


def histc_out(x, bins=100, min=0, max=0, *, out):
    return _histc(x, bins, min, max, out)


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
