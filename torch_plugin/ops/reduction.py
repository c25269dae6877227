"""Reductions lowered to the vector engine.

Native: sum (below); mean, prod, amax/amin, max/min (full and .dim), argmax/argmin,
var/std/var_mean/std_mean (.correction overloads; the unbiased= ones are composite and reach
them), linalg_vector_norm and the norm overloads with a dim, all/any (full, dim, dims),
logsumexp, with their .out and in-place forms: each is one launch of the kernel library's
"reduce" kernel (emulator/kernels/reduction.pyx); the scans (cumsum/cumprod) are in
ops/scan.py. Result dtypes, out= rules, errors and NaN behaviour are CPU's (NaN propagates in
max/min/amax/amin; argmax/argmin and max/min.dim pick the first NaN, else the first extremum).
Accumulation: float32 for float16/bfloat16/float32, float64 for float64, int64 (wrapping) for
integers and bool; var/std in float64 (two passes).

sum:

``x.sum()``, ``x.sum(dim)``, ``x.sum(dim, keepdim=True)`` and ``x.sum(dtype=...)`` reach
``aten::sum.dim_IntList`` (``aten::sum`` and ``aten::sum.out`` are CompositeExplicitAutograd
and redispatch to ``sum.dim_IntList`` / ``sum.IntList_out``).

dtype rules are CPU's: ``dtype=`` wins; else an ``out=`` tensor's dtype; else integer and bool
inputs give int64 and floating inputs keep their dtype. The input is cast to that dtype first
and summed in float32 (float16/bfloat16/float32), float64 or int64 (integers and bool,
wrapping), then rounded once. An empty reduction gives 0.
"""
from __future__ import annotations

import warnings

import torch

from torch_plugin._dtypes import SUPPORTED, TO_CODE, scalar_type_name, type_meta_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import check_overlap, common_device, current_stream, device_ref, resize_out, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)


def _reduced_dims(op: str, ndim: int, dim) -> tuple:
    if dim is None or len(dim) == 0:
        return tuple(range(ndim))
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    seen = []
    for d in dim:
        if not lo <= d <= hi:
            raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {d})")
        d = d % max(ndim, 1)
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        seen.append(d)
    return tuple(d for d in seen if d < ndim)  # a 0-dim tensor reduces over nothing


@OVERLOADS.implements("sum.dim_IntList", "sum.IntList_out")
def _sum(x, dim=None, keepdim=False, dtype=None, out=None):
    name = "aten::sum"
    device = common_device(name, x)
    if x.dtype not in SUPPORTED:
        raise unsupported_dtype(name, x.dtype, SUPPORTED)
    if out is not None:
        common_device(name, out, x)
        if dtype is not None and out.dtype != dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
        dtype = out.dtype
    elif dtype is None:
        dtype = x.dtype if x.dtype.is_floating_point else torch.int64
    if dtype not in SUPPORTED:
        raise unsupported_dtype(name, dtype, SUPPORTED)
    dims = _reduced_dims(name, x.dim(), dim)
    keep_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    shape = keep_shape if keepdim else tuple(n for d, n in enumerate(x.shape) if d not in dims)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=torch.device("emu", device))
    else:
        resize_out(out, shape)
        check_overlap(name, out, x)
    if out.numel() == 0:
        return out
    if x.numel() == 0:
        return out.zero_()
    if keepdim:
        out_strides = tuple(out.stride())
    else:
        it = iter(out.stride())
        out_strides = tuple(0 if d in dims else next(it) for d in range(x.dim()))
    dim_mask = sum(1 << d for d in dims)  # launch arguments are scalars: the dims as a bit mask
    rt().launch("sum", (device_ref(out, keep_shape, out_strides), device_ref(x), dim_mask, TO_CODE[dtype]),
                current_stream(device))
    return out


# ---------------------------------------------------------------------------------------------
# The generic reduction kernel ("reduce": sum, prod, mean, max, min, argmax, argmin, var, std,
# all, any, norm, logsumexp over a set of dims); the scan kernel ("scan") is ops/scan.py's.

def _check_supported(name: str, *dtypes) -> None:
    for dtype in dtypes:
        if dtype not in SUPPORTED:
            raise unsupported_dtype(name, dtype, SUPPORTED)


def _check_out_dtype(out, dtype) -> None:
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {type_meta_name(dtype)}, but got "
                           f"{type_meta_name(out.dtype)} instead")


def _check_out_cast(out, result_dtype) -> None:
    if not torch.can_cast(result_dtype, out.dtype):
        raise RuntimeError(f"result type {scalar_type_name(result_dtype)} can't be cast to the desired output type "
                           f"{scalar_type_name(out.dtype)}")


def _wrap_dim(dim: int, ndim: int) -> int:
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim % max(ndim, 1) if ndim else 0


def _int_dims(dim) -> list | None:
    if dim is None:
        return None
    return [dim] if isinstance(dim, int) else list(dim)


def _shapes(x, dims, keepdim) -> tuple:
    keep_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    shape = keep_shape if keepdim else tuple(n for d, n in enumerate(x.shape) if d not in dims)
    return keep_shape, shape


def _keep_strides(t, ndim: int, dims, keepdim) -> tuple:
    """The strides of an output in keepdim form (the kernel's layout: one per input dimension)."""
    if keepdim:
        return tuple(t.stride())
    it = iter(t.stride())
    return tuple(0 if d in dims else next(it) for d in range(ndim))


def _output(name, x, shape, dtype, out, *inputs):
    """A fresh contiguous output, or ``out`` resized (ATen's resize_output) and checked for overlap."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=torch.device("emu", x.get_device()))
    common_device(name, out, x)
    _check_supported(name, out.dtype)
    resize_out(out, shape)
    check_overlap(name, out, x, *inputs)
    return out


def _launch_reduce(op, x, dims, keepdim, out, compute_dtype, aux=None, param=0.0):
    """Enqueues the generic reduction of ``x`` over ``dims`` into ``out`` (and ``aux``)."""
    if out.numel() == 0:
        return
    keep_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    out_ref = device_ref(out, keep_shape, _keep_strides(out, x.dim(), dims, keepdim))
    aux_ref = None if aux is None else device_ref(aux, keep_shape, _keep_strides(aux, x.dim(), dims, keepdim))
    dim_mask = sum(1 << d for d in dims)
    rt().launch("reduce", (op, out_ref, aux_ref, device_ref(x), dim_mask, TO_CODE[compute_dtype], float(param)),
                current_stream(x.get_device()))


def _integral_promoted(dtype):
    """CPU's get_dtype_from_self(..., promote_integers=True): integers and bool give int64."""
    return dtype if dtype.is_floating_point else torch.int64


def _accumulating_dtype(x, dtype, out):
    """The result dtype of prod and the scans (cumsum, cumprod): out's (which must equal ``dtype=``
    when both are given), else ``dtype=``, else the input's with integers and bool promoted."""
    if out is not None:
        if dtype is not None:
            _check_out_dtype(out, dtype)
        return out.dtype
    return _integral_promoted(x.dtype) if dtype is None else dtype


def _check_nonempty(opname: str, x, dims, all_dims: bool, index_error_for_all=False) -> None:
    """CPU's check for reductions without identity (max, min, amax, amin, argmax, argmin)."""
    if x.numel() != 0:
        return
    if all_dims:
        msg = (f"{opname}(): Expected reduction dim to be specified for input.numel() == 0." +
               ("" if index_error_for_all else " Specify the reduction dim with the 'dim' argument."))
        raise (IndexError if index_error_for_all else RuntimeError)(msg)
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"{opname}(): Expected reduction dim {d} to have non-zero size.")


# ----------------------------------------------------------------------------------------- mean
@OVERLOADS.implements("mean.dim", "mean.out")
def _mean(x, dim=None, keepdim=False, dtype=None, out=None):
    name = "aten::mean"
    common_device(name, x)
    _check_supported(name, x.dtype)
    in_dtype = dtype if dtype is not None else x.dtype
    if not in_dtype.is_floating_point:
        which = "Optional" if dtype is not None else "Input"
        raise RuntimeError(f"mean(): could not infer output dtype. {which} dtype must be either a floating point "
                           f"or complex dtype. Got: {scalar_type_name(in_dtype)}")
    if out is not None:
        if dtype is not None:
            _check_out_dtype(out, dtype)
        else:
            _check_out_cast(out, x.dtype)
        result_dtype = out.dtype
    else:
        result_dtype = in_dtype
    _check_supported(name, result_dtype)
    dims = _reduced_dims(name, x.dim(), _int_dims(dim))
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, result_dtype, out)
    _launch_reduce("mean", x, dims, keepdim, out, result_dtype)
    return out


# ----------------------------------------------------------------------------------------- prod
def _prod(x, dims_arg, keepdim, dtype, out=None):
    name = "aten::prod"
    common_device(name, x)
    _check_supported(name, x.dtype)
    dtype = _accumulating_dtype(x, dtype, out)
    _check_supported(name, dtype)
    dims = _reduced_dims(name, x.dim(), dims_arg)
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, dtype, out)
    _launch_reduce("prod", x, dims, keepdim, out, dtype)
    return out


@OVERLOADS.implements("prod")
def prod(x, *, dtype=None):
    return _prod(x, None, False, dtype)


@OVERLOADS.implements("prod.out")
def prod_out(x, *, dtype=None, out):
    return _prod(x, None, False, dtype, out)


@OVERLOADS.implements("prod.dim_int")
def prod_dim_int(x, dim, keepdim=False, *, dtype=None):
    return _prod(x, [dim], keepdim, dtype)


@OVERLOADS.implements("prod.int_out")
def prod_int_out(x, dim, keepdim=False, *, dtype=None, out):
    return _prod(x, [dim], keepdim, dtype, out)


# ------------------------------------------------------------------------------- amax / amin
def _amax_amin(op, x, dim, keepdim, out=None):
    name = f"aten::a{op}"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if out is not None and out.dtype != x.dtype:
        raise RuntimeError(f"Expected the dtype for input and out to match, but got {scalar_type_name(x.dtype)} for "
                           f"input's dtype and {scalar_type_name(out.dtype)} for out's dtype.")
    dim = _int_dims(dim)
    dims = _reduced_dims(name, x.dim(), dim)
    _check_nonempty(f"a{op}", x, dims, not dim)
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, x.dtype, out)
    _launch_reduce(op, x, dims, keepdim, out, x.dtype)
    return out


def _amax_amin_overloads(op: str) -> dict:
    """{overload: kernel} for a``op`` (amax or amin) and its out= form."""
    def functional(x, dim=(), keepdim=False):
        return _amax_amin(op, x, dim, keepdim)

    def out_form(x, dim=(), keepdim=False, *, out):
        return _amax_amin(op, x, dim, keepdim, out)
    return {f"a{op}": functional, f"a{op}.out": out_form}


for _op in ("max", "min"):
    OVERLOADS.update(_amax_amin_overloads(_op))


# ---------------------------------------------------------------------------------- max / min
def _max_min_all(op, x, out=None):
    name = f"aten::{op}"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if x.numel() == 0:
        raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.")
    if out is not None and not torch.can_cast(x.dtype, out.dtype):
        raise RuntimeError("Expected canCast( typeMetaToScalarType(self.dtype()), "
                           "typeMetaToScalarType(out.dtype())) to be true, but got false.")
    dims = tuple(range(x.dim()))
    out = _output(name, x, (), x.dtype, out)
    _launch_reduce(op, x, dims, False, out, x.dtype)
    return out


def _max_min_dim(op, x, dim, keepdim, values=None, indices=None):
    name = f"aten::{op}.dim"
    common_device(name, x)
    _check_supported(name, x.dtype)
    d = _wrap_dim(dim, x.dim())
    dims = (d,) if x.dim() else ()
    _check_nonempty(op, x, dims, False)
    if values is not None:
        _check_out_dtype(values, x.dtype)
        _check_out_dtype(indices, torch.int64)
        if torch._C._is_alias_of(values, indices):
            check_overlap(name, values, indices)
    _, shape = _shapes(x, dims, keepdim)
    values = _output(name, x, shape, x.dtype, values)
    indices = _output(name, x, shape, torch.int64, indices)
    _launch_reduce(op, x, dims, keepdim, values, x.dtype, aux=indices)
    return values, indices


def _max_min_overloads(op: str, values: str, indices: str) -> dict:
    """{overload: kernel} for ``op`` (max or min) over all elements and over one dim, with their
    out= forms (``op``.dim_``op`` names its outs ``values`` and ``indices``)."""
    def all_elements(x):
        return _max_min_all(op, x)

    def all_elements_out(x, *, out):
        return _max_min_all(op, x, out)

    def one_dim(x, dim, keepdim=False):
        return _max_min_dim(op, x, dim, keepdim)

    def one_dim_out(x, dim, keepdim=False, **outs):
        return _max_min_dim(op, x, dim, keepdim, outs[values], outs[indices])
    return {op: all_elements, f"{op}.unary_out": all_elements_out, f"{op}.dim": one_dim, f"{op}.dim_{op}": one_dim_out}


OVERLOADS.update(_max_min_overloads("max", "max", "max_values"))
OVERLOADS.update(_max_min_overloads("min", "min", "min_indices"))


# ---------------------------------------------------------------------------- argmax / argmin
def _arg(op, x, dim, keepdim, out=None):
    name = f"aten::{op}"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if x.dtype == torch.bool:
        raise RuntimeError(f"{op}(): does not support bool input")
    if out is not None:
        _check_out_dtype(out, torch.int64)
    if dim is None:
        dims = tuple(range(x.dim()))
        _check_nonempty(op, x, dims, True, index_error_for_all=True)
        # argmax over the flattened input; keepdim keeps every dimension as 1
    else:
        d = _wrap_dim(dim, x.dim())
        dims = (d,) if x.dim() else ()
        _check_nonempty(op, x, dims, False)
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, torch.int64, out)
    _launch_reduce(op, x, dims, keepdim, out, x.dtype)
    return out


def _arg_overloads(op: str) -> dict:
    """{overload: kernel} for ``op`` (argmax or argmin) and its out= form."""
    def functional(x, dim=None, keepdim=False):
        return _arg(op, x, dim, keepdim)

    def out_form(x, dim=None, keepdim=False, *, out):
        return _arg(op, x, dim, keepdim, out)
    return {op: functional, f"{op}.out": out_form}


for _op in ("argmax", "argmin"):
    OVERLOADS.update(_arg_overloads(_op))


# ---------------------------------------------------------------------------- var / std (+ mean)
def _var_std(op, x, dim, correction, keepdim, out=None, mean_out=None, with_mean=False):
    name = f"aten::{op}_mean" if with_mean else f"aten::{op}"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{op}_mean only support floating point and complex dtypes" if with_mean else
                           "std and var only support floating point and complex dtypes")
    correction = 1.0 if correction is None else float(correction)
    dims = _reduced_dims(name, x.dim(), _int_dims(dim))
    n = 1
    for d in dims:
        n *= x.shape[d]
    if n - correction <= 0:
        warnings.warn(f"{op}{'_mean' if with_mean else ''}(): degrees of freedom is <= 0. Correction should be "
                      "strictly less than the reduction factor (input numel divided by output numel).",
                      UserWarning, stacklevel=3)
    for t in (out, mean_out):
        if t is not None:
            if with_mean:
                _check_out_dtype(t, x.dtype)
            else:
                _check_out_cast(t, x.dtype)
    _, shape = _shapes(x, dims, keepdim)
    if out is not None and mean_out is not None:
        check_overlap(name, out, mean_out)
    out = _output(name, x, shape, x.dtype, out)
    if with_mean:
        mean_out = _output(name, x, shape, x.dtype, mean_out)
    _launch_reduce(op, x, dims, keepdim, out, x.dtype, aux=mean_out, param=correction)
    return (out, mean_out) if with_mean else out


def _var_std_overloads(op: str) -> dict:
    """{overload: kernel} for ``op`` (var or std) and ``op``_mean, with their out= forms."""
    def functional(x, dim=None, *, correction=None, keepdim=False):
        return _var_std(op, x, dim, correction, keepdim)

    def out_form(x, dim=None, *, correction=None, keepdim=False, out):
        return _var_std(op, x, dim, correction, keepdim, out)

    def with_mean(x, dim=None, *, correction=None, keepdim=False):
        return _var_std(op, x, dim, correction, keepdim, with_mean=True)

    def with_mean_out(x, dim=None, *, correction=None, keepdim=False, out0, out1):
        return _var_std(op, x, dim, correction, keepdim, out0, out1, with_mean=True)
    return {f"{op}.correction": functional, f"{op}.correction_out": out_form,
            f"{op}_mean.correction": with_mean, f"{op}_mean.correction_out": with_mean_out}


for _op in ("var", "std"):
    OVERLOADS.update(_var_std_overloads(_op))


# ------------------------------------------------------------------------------ vector norms
def _format_ord(p: float) -> str:
    return f"{p:g}"


@OVERLOADS.implements("linalg_vector_norm", "linalg_vector_norm.out")
def _vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None, out=None, api="linalg.vector_norm"):
    name = "aten::linalg_vector_norm" if api == "linalg.vector_norm" else "aten::norm"
    common_device(name, x)
    _check_supported(name, x.dtype)
    if not x.dtype.is_floating_point:
        if api == "norm":
            raise RuntimeError(f"norm(): input dtype should be either floating point or complex. Got "
                               f"{scalar_type_name(x.dtype)} instead.")
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{scalar_type_name(x.dtype)}")
    if dtype is not None:
        _check_supported(name, dtype)
        if not dtype.is_floating_point:
            if api == "norm":
                raise RuntimeError(f"norm(): the desired output dtype should be either floating point or complex. "
                                   f"Got {scalar_type_name(dtype)} instead.")
            raise RuntimeError(f"linalg.vector_norm: dtype should be floating point or complex, but got "
                               f"{scalar_type_name(dtype)}")
        if torch.promote_types(x.dtype, dtype) != dtype:
            raise RuntimeError(f"linalg.vector_norm: the dtype of the input ({scalar_type_name(x.dtype)}) should be "
                               f"convertible without narrowing to the specified dtype ({scalar_type_name(dtype)})")
    result_dtype = dtype if dtype is not None else x.dtype
    if out is not None:
        _check_out_dtype(out, result_dtype)
    p = float(ord)
    dim = _int_dims(dim)
    dims = _reduced_dims(name, x.dim(), dim)
    if (p < 0 or p == float("inf")) and x.numel() == 0:
        if not dim:
            raise RuntimeError(f"linalg.vector_norm cannot compute the {_format_ord(p)} norm on an empty tensor "
                               "because the operation does not have an identity")
        for d in dims:
            if x.shape[d] == 0:
                raise RuntimeError(f"linalg.vector_norm cannot compute the {_format_ord(p)} norm on the dimension "
                                   f"{d}because this dimension is empty and the operation does not have an identity")
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, result_dtype, out)
    _launch_reduce("norm", x, dims, keepdim, out, result_dtype, param=p)
    return out


def _norm_p(p):
    return 2 if p is None else p


@OVERLOADS.implements("norm.ScalarOpt_dim")
def norm_scalaropt_dim(x, p, dim, keepdim=False):
    return _vector_norm(x, _norm_p(p), dim, keepdim, None, api="norm")


@OVERLOADS.implements("norm.ScalarOpt_dim_dtype")
def norm_scalaropt_dim_dtype(x, p, dim, keepdim, *, dtype):
    return _vector_norm(x, _norm_p(p), dim, keepdim, dtype, api="norm")


@OVERLOADS.implements("norm.out")
def norm_out(x, p, dim, keepdim=False, *, out):
    return _vector_norm(x, _norm_p(p), dim, keepdim, None, out, api="norm")


@OVERLOADS.implements("norm.dtype_out")
def norm_dtype_out(x, p, dim, keepdim, *, dtype, out):
    return _vector_norm(x, _norm_p(p), dim, keepdim, dtype, out, api="norm")


# ----------------------------------------------------------------------------------- all / any
def _all_any(op, x, dim, keepdim, out=None, reduce_all_for_empty=True):
    name = f"aten::{op}"
    common_device(name, x)
    _check_supported(name, x.dtype)
    result_dtype = torch.uint8 if x.dtype == torch.uint8 else torch.bool
    if out is not None and out.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(f"{op} only supports bool tensor for result, got: {scalar_type_name(out.dtype)}")
    if dim is not None and len(dim) == 0 and not reduce_all_for_empty:
        dims = ()  # all.dims / any.dims with dim=[]: nothing is reduced
    else:
        dims = _reduced_dims(name, x.dim(), dim)
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, result_dtype if out is None else out.dtype, out)
    _launch_reduce(op, x, dims, keepdim, out, x.dtype)
    return out


def _all_any_kernels(op: str):
    """The six all/any overloads: full reduction, dim, dims (an empty dims list reduces nothing),
    each functional and out=."""
    def full(x):
        return _all_any(op, x, None, False)

    def full_out(x, *, out):
        return _all_any(op, x, None, False, out)

    def dim(x, dim, keepdim=False):
        return _all_any(op, x, [dim], keepdim)

    def dim_out(x, dim, keepdim=False, *, out):
        return _all_any(op, x, [dim], keepdim, out)

    def dims(x, dim=None, keepdim=False):
        return _all_any(op, x, _int_dims(dim), keepdim, reduce_all_for_empty=False)

    def dims_out(x, dim=None, keepdim=False, *, out):
        return _all_any(op, x, _int_dims(dim), keepdim, out, reduce_all_for_empty=False)
    return full, full_out, dim, dim_out, dims, dims_out


all_all, all_all_out, all_dim, all_out, all_dims, all_dims_out = _all_any_kernels("all")
OVERLOADS.update({
    "all": all_all,
    "all.all_out": all_all_out,
    "all.dim": all_dim,
    "all.out": all_out,
    "all.dims": all_dims,
    "all.dims_out": all_dims_out,
})
any_all, any_all_out, any_dim, any_out, any_dims, any_dims_out = _all_any_kernels("any")
OVERLOADS.update({
    "any": any_all,
    "any.all_out": any_all_out,
    "any.dim": any_dim,
    "any.out": any_out,
    "any.dims": any_dims,
    "any.dims_out": any_dims_out,
})


# ------------------------------------------------------------------------------------ logsumexp
@OVERLOADS.implements("logsumexp", "logsumexp.out")
def _logsumexp(x, dim, keepdim=False, out=None):
    name = "aten::logsumexp"
    common_device(name, x)
    _check_supported(name, x.dtype)
    # Integer and bool inputs are computed in the default floating dtype (CPU casts them first).
    in_dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    if out is None:
        result_dtype = in_dtype
    else:
        if not out.dtype.is_floating_point:
            raise RuntimeError(f"logsumexp(): Expected floating point type for result tensor, but got: "
                               f"{scalar_type_name(out.dtype)}")
        result_dtype = out.dtype
    dim = _int_dims(dim)
    if not dim and x.dim() > 0 and x.numel() > 0:
        # CPU: amax(x, [], keepdim=True) reduces everything while sum_out(..., []) gives a 0-dim
        # result, and the two disagree; the device mirrors the error.
        raise RuntimeError(f"output with shape [] doesn't match the broadcast shape {[1] * x.dim()}")
    dims = _reduced_dims(name, x.dim(), dim)
    _, shape = _shapes(x, dims, keepdim)
    out = _output(name, x, shape, result_dtype, out)
    # CPU takes exp(x - max) in the input's dtype and sums into out's: computing in the wider of
    # the two is closest (a float64 out of a float32 input differs from CPU by ~1e-8, relative).
    _launch_reduce("logsumexp", x, dims, keepdim, out, torch.promote_types(in_dtype, result_dtype))
    return out
