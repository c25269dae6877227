"""FFT ops lowered to the vector engine's transform kernel (emulator/kernels/fft.pyx), and the
complex construction ops.

ATen's spectral frontends (torch.fft.fft, rfft, irfft, hfft, ihfft, their 2-D and n-D forms)
pad or trim the signal, conjugate where the transform needs it, and then reach one of three
backend ops, each implemented here over any list of dims and any strides:

- ``_fft_c2c``: complex -> complex, forward or inverse;
- ``_fft_r2c``: real -> complex, forward (onesided: the last dim keeps n//2 + 1 terms);
- ``_fft_c2r``: the first n//2 + 1 terms of a Hermitian spectrum -> real, inverse
  (``last_dim_size`` is n).

``normalization`` is ATen's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n, with n the product
of the signal extents (the output's for c2r). The transform is computed in float64 and rounded
once to complex64/complex128 (float32/float64 for c2r); the output takes CPU's layout (batch
dims outermost in their input stride order, then the transformed dims, as MKL's _exec_fft).

``complex`` (real, imag -> complex) and ``polar`` (abs, angle -> complex) run on the same
kernel library, and so does ``mul`` with a complex result (what the c2r backward needs);
``conj_physical`` is a composite of device copies. Half precision is left out: complex32 is no
device storage dtype, and CPU's FFT has no float16/bfloat16 path either.
"""
from __future__ import annotations

import math

import torch

from torch_plugin._dtypes import scalar_type_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import (broadcast_shape, broadcast_strides, check_overlap, common_device,
                                      current_stream, device_ref, empty_like_layout, prepare_out, resize_out, rt)
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops.elementwise import mul as _real_mul, mul_ as _real_mul_, mul_out as _real_mul_out
from torch_plugin.ops.registry import composite

OVERLOADS = Overloads(__name__)

_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL_OF = {c: r for r, c in _COMPLEX_OF.items()}
_FFT_REAL = tuple(_COMPLEX_OF)
_FFT_COMPLEX = tuple(_REAL_OF)

C2C, R2C, C2R = 0, 1, 2


def _plain(t: torch.Tensor) -> torch.Tensor:
    """t with its conjugate/negative bits resolved (on the device): the kernel reads stored values."""
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def _wrap_dims(op: str, dims, ndim: int) -> list:
    wrapped = []
    for d in dims:
        d = int(d)
        if not -max(ndim, 1) <= d < max(ndim, 1) or ndim == 0:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, "
                             f"{max(ndim, 1) - 1}], but got {d})")
        wrapped.append(d % ndim)
    if len(set(wrapped)) != len(wrapped):
        raise RuntimeError(f"{op}: dims {list(dims)} name a dim more than once")
    return wrapped


def _scale(op: str, normalization: int, n: int) -> float:
    if normalization == 0:
        return 1.0
    if normalization == 1:
        return 1.0 / math.sqrt(n)
    if normalization == 2:
        return 1.0 / n
    raise RuntimeError(f"{op}: normalization {normalization} is not one of 0 (none), 1 (by 1/sqrt(n)), "
                       "2 (by 1/n)")


def _by_stride(dims, strides) -> list:
    return sorted(dims, key=lambda d: -strides[d])  # stable: ties keep their order


def _out_layout(kind: int, shape, in_strides, dims) -> tuple:
    """CPU's output strides (MKL's _exec_fft after _sort_dims): contiguous in the order batch dims
    (by input stride, largest first), then the transformed dims, sorted the same way except the
    last dim of r2c/c2r; c2r runs its other dims as a c2c first, whose layout its last step keeps."""
    ndim = len(shape)
    if kind == C2C:
        order = _by_stride([d for d in range(ndim) if d not in dims], in_strides) + _by_stride(dims, in_strides)
    elif kind == R2C:
        order = _by_stride([d for d in range(ndim) if d not in dims], in_strides) + \
            _by_stride(dims[:-1], in_strides) + [dims[-1]]
    else:
        first = dims[:-1]
        if first:
            inner = _by_stride([d for d in range(ndim) if d not in first], in_strides) + _by_stride(first, in_strides)
        else:
            inner = _by_stride(range(ndim), in_strides)
        order = [d for d in inner if d != dims[-1]] + [dims[-1]]
    strides = [0] * ndim
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def _launch(kind: int, out: torch.Tensor, inp: torch.Tensor, dims, forward: bool, scale: float) -> None:
    mask = 0
    for d in dims:
        mask |= 1 << d
    rt().launch("fft", (kind, device_ref(out), device_ref(inp), mask, dims[-1], bool(forward), float(scale)),
                current_stream(inp.get_device()))


def _into_out(op: str, out: torch.Tensor, shape, result_dtype, compute) -> torch.Tensor:
    """ATen's *_mkl_out: resize_output(out), then the result copied in (any dtype copy_ takes). With
    out's own dtype the kernel writes out directly (any strides; it reads its whole input first)."""
    if out.device.type != "emu":
        raise RuntimeError(f"{op}: expected all tensors to be on the same device, but found at least two "
                           f"devices, emu and {out.device}!")
    resize_out(out, shape)
    if out.dtype == result_dtype and not out.is_conj() and not out.is_neg():
        check_overlap(op, out)
        compute(out)
    else:
        out.copy_(compute(None))
    return out


def _checked_input(op: str, self, dim, complex_input: bool):
    """The input's device and its wrapped transform dims, after ATen's dtype checks for a complex
    (c2c, c2r) or real (r2c) input."""
    device = common_device(op, self)
    if complex_input:
        if not self.is_complex():
            raise RuntimeError(f"Only supports complex dtypes, but found: {scalar_type_name(self.dtype)}")
        allowed = _FFT_COMPLEX
    else:
        if not self.is_floating_point():
            raise RuntimeError(f"Only supports floating-point dtypes, but found: {scalar_type_name(self.dtype)}")
        allowed = _FFT_REAL
    if self.dtype not in allowed:
        raise unsupported_dtype(op, self.dtype, allowed)
    return device, _wrap_dims(op, dim, self.dim())


def _transform(op: str, kind: int, self, device: int, shape, result_dtype, dims, forward: bool, scale: float,
               out):
    """The transform into a new tensor with CPU's layout, or into ``out`` (see _into_out)."""
    def compute(target):
        src = _plain(self)
        if target is None:
            target = torch.empty_strided(shape, _out_layout(kind, shape, src.stride(), dims), dtype=result_dtype,
                                         device=torch.device("emu", device))
        if target.numel() == 0:
            return target
        if not dims:  # c2c over no dims (r2c and c2r need one): a copy, n = 1 for every normalization
            return target.copy_(src)
        _launch(kind, target, src, dims, forward, scale)
        return target
    return compute(None) if out is None else _into_out(op, out, shape, result_dtype, compute)


@OVERLOADS.implements("_fft_c2c", "_fft_c2c.out")
def _c2c(self, dim, normalization, forward, out=None):
    op = "aten::_fft_c2c"
    device, dims = _checked_input(op, self, dim, complex_input=True)
    shape = tuple(self.shape)
    scale = _scale(op, normalization, math.prod(shape[d] for d in dims))
    return _transform(op, C2C, self, device, shape, self.dtype, dims, forward, scale, out)


@OVERLOADS.implements("_fft_r2c", "_fft_r2c.out")
def _r2c(self, dim, normalization, onesided, out=None):
    op = "aten::_fft_r2c"
    device, dims = _checked_input(op, self, dim, complex_input=False)
    if not dims:
        raise RuntimeError(f"{op}: expects at least one dim to transform")
    last = dims[-1]
    shape = list(self.shape)
    if onesided:
        shape[last] = shape[last] // 2 + 1
    shape = tuple(shape)
    n = math.prod(self.shape[d] for d in dims)
    result_dtype = _COMPLEX_OF[self.dtype]
    if self.shape[last] == 0 and math.prod(shape):
        raise RuntimeError(f"{op}: the signal on dim {last} is empty (Invalid number of data points (0) specified)")
    scale = _scale(op, normalization, max(n, 1))
    return _transform(op, R2C, self, device, shape, result_dtype, dims, True, scale, out)


@OVERLOADS.implements("_fft_c2r", "_fft_c2r.out")
def _c2r(self, dim, normalization, last_dim_size, out=None):
    op = "aten::_fft_c2r"
    device, dims = _checked_input(op, self, dim, complex_input=True)
    if not dims:
        raise RuntimeError(f"{op}: expects at least one dim to transform")
    last = dims[-1]
    last_dim_size = int(last_dim_size)
    if last_dim_size < 1:
        raise RuntimeError(f"Invalid number of data points ({last_dim_size}) specified")
    shape = list(self.shape)
    shape[last] = last_dim_size
    shape = tuple(shape)
    if self.shape[last] < last_dim_size // 2 + 1:
        raise RuntimeError(f"{op}: the input has {self.shape[last]} terms on dim {last}; a real signal of "
                           f"{last_dim_size} points needs {last_dim_size // 2 + 1}")
    result_dtype = _REAL_OF[self.dtype]
    scale = _scale(op, normalization, math.prod(shape[d] for d in dims))
    return _transform(op, C2R, self, device, shape, result_dtype, dims, False, scale, out)


# -- complex construction ------------------------------------------------------
_COMPLEX_PART_DTYPES = (torch.float16, torch.float32, torch.float64)


def _launch_binary(kernel: str, params: tuple, out, a, b, shape, result_dtype, device: int, via_plain: bool):
    """Launch the elementwise ``kernel`` (params, out, a, b) over the broadcast ``shape``; with
    ``via_plain`` (out's stored bits differ from the result's) into a plain result copied into out."""
    target = torch.empty(shape, dtype=result_dtype, device=torch.device("emu", device)) if via_plain else out
    rt().launch(kernel, (*params, device_ref(target), device_ref(a, shape, broadcast_strides(a, shape)),
                         device_ref(b, shape, broadcast_strides(b, shape))), current_stream(device))
    if target is not out:
        out.copy_(target)
    return out


def _complex_parts(op: str, mode: int, a, b, out=None):
    device = common_device(op, a, b, *(() if out is None else (out,)))
    if a.dtype not in _COMPLEX_PART_DTYPES or b.dtype not in _COMPLEX_PART_DTYPES:
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got {scalar_type_name(a.dtype)} "
                           f"and {scalar_type_name(b.dtype)}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"Expected object of scalar type {scalar_type_name(a.dtype)} but got scalar type {scalar_type_name(b.dtype)} "
                           "for second argument")
    if a.dtype not in _COMPLEX_OF:  # float16 -> complex32, which the device cannot store
        raise unsupported_dtype(op, a.dtype, _FFT_REAL)
    result_dtype = _COMPLEX_OF[a.dtype]
    if out is not None and out.dtype != result_dtype:
        raise RuntimeError(f"Expected object of scalar type {scalar_type_name(result_dtype)} but got scalar type "
                           f"{scalar_type_name(out.dtype)} for argument 'out'")
    shape = broadcast_shape(tuple(a.shape), tuple(b.shape))
    if out is None:
        out = empty_like_layout(shape, result_dtype, device, a, b)
    else:
        prepare_out(op, out, shape, result_dtype, a, b)
        check_overlap(op, out, a, b)
    if out.numel() == 0:
        return out
    emu = torch.device("emu", device)
    a, b = (t if t.device.type == "emu" else t.to(emu) for t in (a, b))  # CPU 0-dim operands
    # stored bits that are not the value: a plain result, copied in
    return _launch_binary("complex_parts", (mode,), out, a, b, shape, result_dtype, device,
                          via_plain=out.is_conj() or out.is_neg())


def _complex_parts_overloads(op: str, mode: int) -> dict:
    """{overload: kernel} for ``op`` (complex: mode 0, from real and imaginary parts; polar: mode 1,
    from magnitude and angle) and its out= form."""
    def functional(a, b):
        return _complex_parts(f"aten::{op}", mode, a, b)

    def out_form(a, b, *, out):
        return _complex_parts(f"aten::{op}.out", mode, a, b, out)
    return {op: functional, f"{op}.out": out_form}


OVERLOADS.update({**_complex_parts_overloads("complex", 0), **_complex_parts_overloads("polar", 1)})


# -- conj_physical (ihfft's out= path, and what autograd of complex ops reaches) -----------------
# A composite of device copies: copying a conjugate view writes the stored values and then negates
# the imaginary parts (ops/copy.py), which is the physical conjugate; a real tensor is copied.
def _conj_source(self):
    return self.conj() if self.is_complex() else self


@OVERLOADS.implements("_conj_physical")
@composite
def conj_physical(self):
    common_device("aten::_conj_physical", self)
    out = empty_like_layout(tuple(self.shape), self.dtype, self.get_device(), self)
    return out.copy_(_conj_source(self)) if self.numel() else out


@OVERLOADS.implements("conj_physical.out")
@composite
def conj_physical_out(self, *, out):
    op = "aten::conj_physical.out"
    common_device(op, self, out)
    prepare_out(op, out, tuple(self.shape), self.dtype, self)
    check_overlap(op, out, self)
    if out.numel():
        out.copy_(_conj_source(self))
    return out


@OVERLOADS.implements("conj_physical_")
@composite
def conj_physical_(self):
    common_device("aten::conj_physical_", self)
    if self.is_complex() and self.numel():
        self.copy_(self.conj())
    return self


# -- complex multiply (the gradient of c2r: irfft/hfft backward scales part of a complex grad) ----
# mul is elementwise.py's hand-written kernel; complex results are handled here and every other
# case is handed to it unchanged (its fast path first). So the mul overloads are declared here,
# not in elementwise.py.
_COMPLEX_RESULT = frozenset(_FFT_COMPLEX) | {torch.complex32}


def _is_complex_operand(t) -> bool:
    return t.dtype in _COMPLEX_RESULT if isinstance(t, torch.Tensor) else isinstance(t, complex)


def _is_complex_mul(a, b) -> bool:
    # (a Python number may arrive as either operand: the dispatcher passes what the caller gave)
    return _is_complex_operand(a) or _is_complex_operand(b)


def _complex_mul(op: str, a, b, out=None):
    device = common_device(op, a, b, *(() if out is None else (out,)))
    result_dtype = torch.result_type(a, b)
    if result_dtype not in _FFT_COMPLEX:
        raise unsupported_dtype(op, result_dtype, _FFT_COMPLEX)
    emu = torch.device("emu", device)
    # A Python number: CPU casts it to the result dtype.
    a, b = (t if isinstance(t, torch.Tensor) else torch.full((), t, dtype=result_dtype, device=emu) for t in (a, b))
    shape = broadcast_shape(tuple(a.shape), tuple(b.shape))
    if out is None:
        out = empty_like_layout(shape, result_dtype, device, a, b)
    else:
        prepare_out(op, out, shape, result_dtype, a, b)
        if out.dtype not in _FFT_COMPLEX:
            raise unsupported_dtype(op, out.dtype, _FFT_COMPLEX)
        check_overlap(op, out, a, b)
    if out.numel() == 0:
        return out
    a, b = (_plain(t if t.device.type == "emu" else t.to(emu)) for t in (a, b))
    return _launch_binary("complex_mul", (), out, a, b, shape, result_dtype, device,
                          via_plain=out.is_conj() or out.is_neg() or out.dtype != result_dtype)


@OVERLOADS.implements("mul.Tensor")
def mul(self, other):
    if _is_complex_mul(self, other):
        return _complex_mul("aten::mul.Tensor", self, other)
    return _real_mul(self, other)


@OVERLOADS.implements("mul_.Tensor")
def mul_(self, other):
    if _is_complex_mul(self, other):
        return _complex_mul("aten::mul_.Tensor", self, other, out=self)
    return _real_mul_(self, other)


@OVERLOADS.implements("mul.out")
def mul_out(self, other, *, out):
    if _is_complex_mul(self, other):
        return _complex_mul("aten::mul.out", self, other, out=out)
    return _real_mul_out(self, other, out=out)


# -- complex abs (|z| = hypot(re, im), as CPU's std::abs; what linalg.eig's OpInfo compares) -----
# abs is the pointwise table's row; complex inputs are handled here as a composite of device ops
# (a real view of the storage and the table's hypot), every other case goes to the row's kernel.
# (A hand-written kernel's declaration wins over the table's generated row: ops/_overloads.py.)
def _real_abs_kernels():
    from torch_plugin.ops import pointwise
    kernels = pointwise.registrations()
    return kernels["abs"], kernels["abs.out"]


_REAL_ABS, _REAL_ABS_OUT = _real_abs_kernels()


def _complex_parts_of(self):
    """(re, im) real views of a complex tensor's values (conjugate and negative bits do not change
    |z|, so they are dropped from the view)."""
    plain = self.conj() if self.is_conj() else self
    if plain.is_neg():
        plain = torch._neg_view(plain)
    parts = torch.view_as_real(plain)
    return parts[..., 0], parts[..., 1]


@OVERLOADS.implements("abs")
@composite
def abs(self):
    if not self.is_complex():
        return _REAL_ABS(self)
    if self.dtype not in _FFT_COMPLEX:
        raise unsupported_dtype("aten::abs", self.dtype, _FFT_COMPLEX)
    re, im = _complex_parts_of(self)
    return torch.hypot(re, im)


@OVERLOADS.implements("abs.out")
@composite
def abs_out(self, *, out):
    if not self.is_complex():
        return _REAL_ABS_OUT(self, out=out)
    if self.dtype not in _FFT_COMPLEX:
        raise unsupported_dtype("aten::abs.out", self.dtype, _FFT_COMPLEX)
    re, im = _complex_parts_of(self)
    return torch.hypot(re, im, out=out)
