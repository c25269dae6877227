"""Binning on emu (emulator/kernels/binning.pyx): searchsorted (.Tensor, .Scalar, + out),
bucketize (.Tensor, .Scalar, + out), histc (+ .out), histogram (.bin_ct, .bins_tensor, + out),
_histogramdd_bin_edges / _histogramdd_from_bin_cts / _histogramdd_from_bin_tensors.

Host synchronisations, one read each: histc with ``min == max`` and histogram / histogramdd
without a ``range`` (the input's min and max become the outer bin edges); ``density`` needs none
(the kernel normalises). A sorter index out of range is reported by the kernel (a KERNEL_FAULT at
the next synchronising call, CPU's message); CPU checks it on the host with two synchronisations.

Left out: complex dtypes.
"""
from __future__ import annotations

import math

import torch

from torch_plugin._dtypes import TO_CODE, scalar_type_name
from torch_plugin.errors import refuse_in_projection
from torch_plugin.ops._common import check_overlap, common_device, device_ref, resize_out
from torch_plugin.ops.reduction import _check_out_dtype, _check_supported
from torch_plugin.ops.selection import _FLOATING, _emu, _launch, _not_implemented
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# ------------------------------------------------------------------------- searchsorted / bucketize
def _scalar_tensor(value, device: int) -> torch.Tensor:
    """A Python scalar as a 0-dim emu tensor (CPU's scalar_to_tensor dtype: double, long or bool)."""
    dtype = torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float64
    return torch.full((), value, dtype=dtype, device=_emu(device))


@OVERLOADS.implements("searchsorted.Tensor", "searchsorted.Tensor_out")
def _searchsorted(seq, values, out_int32=False, right=False, side=None, sorter=None, out=None, scalar=None,
                  name="aten::searchsorted"):
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
                               f"{scalar_type_name(sorter.dtype)}")
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
                               f"dtype {scalar_type_name(out.dtype)} and out_int32 flag is {bool(out_int32)}")
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


@OVERLOADS.implements("searchsorted.Scalar")
def searchsorted_scalar(seq, x, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(seq, None, out_int32, right, side, sorter, scalar=x)


@OVERLOADS.implements("searchsorted.Scalar_out")
def searchsorted_scalar_out(seq, x, *, out_int32=False, right=False, side=None, sorter=None, out):
    return _searchsorted(seq, None, out_int32, right, side, sorter, out, scalar=x)


@OVERLOADS.implements("bucketize.Tensor", "bucketize.Tensor_out")
def _bucketize(x, boundaries, out_int32=False, right=False, out=None, scalar=None):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted(boundaries, x, out_int32, right, None, None, out, scalar, name="aten::bucketize")


@OVERLOADS.implements("bucketize.Scalar")
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
                           f"input tensor, but got weight {scalar_type_name(weight.dtype)} and input "
                           f"{scalar_type_name(x.dtype)}")


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
                               f"input {scalar_type_name(x.dtype)} and bins for dimension {i} {scalar_type_name(e.dtype)}")
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


@OVERLOADS.implements("_histogramdd_bin_edges")
def histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):
    _, edges = _histogramdd_counts(x, list(bins), range, weight, density, "aten::_histogramdd_bin_edges",
                                   edges_only=True)
    return edges


@OVERLOADS.implements("_histogramdd_from_bin_cts")
def histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):
    hist, _ = _histogramdd_counts(x, list(bins), range, weight, density, "aten::_histogramdd_from_bin_cts")
    return hist


@OVERLOADS.implements("_histogramdd_from_bin_tensors")
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


@OVERLOADS.implements("histogram.bin_ct")
def histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    return _histogram_1d(x, bins, range, weight, density)


@OVERLOADS.implements("histogram.bin_ct_out")
def histogram_bin_ct_out(x, bins=100, *, range=None, weight=None, density=False, hist, bin_edges):
    return _histogram_1d(x, bins, range, weight, density, hist, bin_edges)


@OVERLOADS.implements("histogram.bins_tensor", "histogram.bins_tensor_out")
def _histogram_tensor(x, bins, weight=None, density=False, hist=None, bin_edges=None):
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


@OVERLOADS.implements("histc", "histc.out")
def _histc(x, bins=100, lo=0, hi=0, out=None):
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
