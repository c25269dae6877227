"""Random sampling from device generators (Philox: seed + offset, like CUDA).

Each launch reserves the generator words it will consume up front, so the
stream of numbers depends only on the seed and the order of launches; seeded
runs are reproducible and ``get_rng_state``/``set_rng_state`` round-trip.
Complex tensors (complex32/64/128) take uniform_ and normal_ (so rand, randn and their _like
forms, and normal with a complex mean) as CPU defines them, on their real parts; the other
distributions reject complex dtypes as CPU does.
"""
from __future__ import annotations

import math

import torch

from torch_plugin import _C
from torch_plugin.errors import refuse_in_projection
from torch_plugin._dtypes import FLOATING
from torch_plugin.ops._common import broadcast_shape, broadcast_strides, check_dtype, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)


def _reserve(t, generator, words_per_element: int):
    gen = generator if generator is not None else _C._default_generator(t.device.index)
    words = -(-t.numel() * words_per_element // 4) * 4
    return _C._philox_reserve(gen, words)


def _launch(kernel: str, t, args):
    rt().launch(kernel, (device_ref(t), *args), current_stream(t.device.index))
    return t


# -- complex dtypes: CPU's convention is a draw into each part of view_as_real(t) (float16, float32
# or float64 pairs): uniform_ gives each part U[from, to); normal_ gives each part N(mean, std/sqrt 2),
# so that randn's complex values have E|z|^2 = std^2 (each part variance 1/2 for randn). The part
# view has its own layout, so the draws are the real kernel's, one Philox stream over 2 * numel.
_COMPLEX_PART = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}


def _parts(t):
    if t.is_conj():  # a conjugate view has no real view; CPU refuses it the same way
        raise RuntimeError("view_as_real doesn't work on unresolved conjugated tensors.  To resolve the "
                           "conjugate tensor so you can view it as real, use self.resolve_conj()")
    return torch.view_as_real(t)


_COMPLEX_NAME = {torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}
_COMPLEX_C10 = {torch.complex32: "c10::complex<c10::Half>", torch.complex64: "c10::complex<float>",
                torch.complex128: "c10::complex<double>"}


def _reject_complex(t, cpu_kernel: str) -> None:
    """The distributions CPU has no complex kernel for refuse complex dtypes with CPU's error
    (NotImplementedError, counted as a rejection), before anything is drawn."""
    if t.dtype in _COMPLEX_PART:
        raise NotImplementedError(f"\"{cpu_kernel}\" not implemented for '{_COMPLEX_NAME[t.dtype]}' (on emu, as on CPU)")


@OVERLOADS.implements("uniform_")
def uniform_(t, from_=0.0, to=1.0, *, generator=None):
    if t.dtype in _COMPLEX_PART:
        uniform_(_parts(t), from_, to, generator=generator)
        return t
    check_dtype("aten::uniform_", t)
    if t.dtype not in FLOATING:
        raise RuntimeError(f"uniform_ is implemented for floating types only, got {t.dtype}")
    # CPU's argument checks, before launch: the kernel turns a non-finite bound into a device
    # KERNEL_FAULT, which is sticky for the context (a bad argument must never poison it).
    limit = torch.finfo(t.dtype).max
    for name, value in (("from", from_), ("to", to)):
        if not -limit <= value <= limit:  # also NaN and inf
            raise RuntimeError(f"{name} is out of bounds for {t.dtype}")
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    if to - from_ > limit:
        raise RuntimeError(f"uniform_ expects to-from <= the largest {t.dtype}, but found to={to} and "
                           f"from={from_} which result in to-from to exceed the limit")
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 2 if t.dtype == torch.float64 else 1)
    return _launch("uniform", t, (seed, offset, float(from_), float(to)))


@OVERLOADS.implements("normal_")
def normal_(t, mean=0.0, std=1.0, *, generator=None):
    if t.dtype in _COMPLEX_PART:
        if not std >= 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        normal_(_parts(t), mean, std / math.sqrt(2.0), generator=generator)
        return t
    check_dtype("aten::normal_", t)
    if t.dtype not in FLOATING:
        raise RuntimeError(f"normal_ is implemented for floating types only, got {t.dtype}")
    if not std >= 0:  # NaN too, as on CPU
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if t.numel() == 0:
        return t
    if not math.isfinite(mean) or math.isinf(std):
        # CPU gives mean + std * z (inf/NaN values); the kernel faults the device on non-finite
        # parameters (sticky for the context), so draw N(0, 1) and scale on the device.
        normal_(t, 0.0, 1.0, generator=generator)
        return t.mul_(std).add_(mean)
    seed, offset = _reserve(t, generator, 4 if t.dtype == torch.float64 else 2)
    return _launch("normal", t, (seed, offset, float(mean), float(std)))


def _dtype_range(dtype):
    if dtype == torch.bool:
        return 0, 2
    if dtype.is_floating_point:
        digits = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}[dtype]
        return -(2 ** digits), 2 ** digits + 1
    info = torch.iinfo(dtype)
    return info.min, info.max + 1


@OVERLOADS.implements("random_.from")
def random_from(t, from_, to=None, *, generator=None):
    if t.dtype in _COMPLEX_PART:
        raise RuntimeError("check_random_bounds handles only integral, floating-point and boolean types")
    check_dtype("aten::random_", t)
    lo_limit, hi_limit = _dtype_range(t.dtype)
    high = hi_limit if to is None else to
    if from_ >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={high}")
    if from_ < lo_limit or high > hi_limit:
        raise RuntimeError(f"random_ expects 'from' and 'to' within [{lo_limit}, {hi_limit}] for {t.dtype}, "
                           f"got from={from_} to={high}")
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 2 if high - from_ > 2 ** 32 else 1)
    return _launch("randint", t, (seed, offset, int(from_), int(high)))


@OVERLOADS.implements("random_.to")
def random_to(t, to, *, generator=None):
    return random_from(t, 0, to, generator=generator)


@OVERLOADS.implements("random_")
def random_(t, *, generator=None):
    _reject_complex(t, "random_kernel_cpu")
    return random_from(t, 0, _dtype_range(t.dtype)[1], generator=generator)


@OVERLOADS.implements("bernoulli_.float")
def bernoulli_float(t, p=0.5, *, generator=None):
    _reject_complex(t, "bernoulli_scalar_cpu_")
    check_dtype("aten::bernoulli_", t)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 1)
    return _launch("bernoulli", t, (seed, offset, None, float(p)))


@OVERLOADS.implements("bernoulli_.Tensor")
def bernoulli_tensor(t, p, *, generator=None):
    _reject_complex(t, "bernoulli_tensor_cpu_self_")
    _reject_complex(p, "bernoulli_tensor_cpu_p_")
    check_dtype("aten::bernoulli_", t, p)
    # Checked before launch, as CPU does: an integer/bool p made the kernel fault the device
    # (sticky for the context), and a p that does not broadcast to t was read out of bounds.
    if not p.dtype.is_floating_point:
        raise NotImplementedError(f"bernoulli_: p must be a floating point tensor on emu (as on CPU), "
                                  f"got {p.dtype}")
    try:
        expands = torch.broadcast_shapes(p.shape, t.shape) == t.shape
    except RuntimeError:
        expands = False
    if not expands:
        raise RuntimeError(f"bernoulli_: p of shape {list(p.shape)} cannot be expanded to the shape "
                           f"{list(t.shape)} of self")
    if p.device != t.device:
        p = p.to(t.device)
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 1)
    p_ref = device_ref(p, t.shape, broadcast_strides(p, t.shape))
    return _launch("bernoulli", t, (seed, offset, p_ref, 0.0))


@OVERLOADS.implements("bernoulli")
def bernoulli(p, *, generator=None):
    out = torch.empty_like(p)
    return bernoulli_tensor(out, p, generator=generator)


# ---------------------------------------------------------------------------------------------
# Further distributions, normal with tensor parameters, multinomial, dropout, logspace.
#
# The draws are CPU's transformations of a device Philox stream (random.pyx): same seed, same
# values on emu; not the CPU's mt19937 values. Two ops synchronise with the host, as CPU's
# checks need the data: normal with a std tensor (CPU's "all elements of std >= 0.0") and
# multinomial (its probability checks); each reads one small device result.

def _check_floating(name: str, t, what: str) -> None:
    check_dtype(f"aten::{name}", t)
    if not t.dtype.is_floating_point:
        raise RuntimeError(f"{what} distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {_C_NAMES.get(t.dtype, str(t.dtype))}")


_C_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}


@OVERLOADS.implements("exponential_")
def exponential_(t, lambd=1.0, *, generator=None):
    if t.dtype in _COMPLEX_PART:
        raise RuntimeError("Exponential distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {_COMPLEX_NAME[t.dtype]}")
    _check_floating("exponential_", t, "Exponential")
    if not (lambd > 0 and math.isfinite(lambd)):
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd:g}")
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 2 if t.dtype == torch.float64 else 1)
    return _launch("exponential", t, (seed, offset, float(lambd)))


@OVERLOADS.implements("cauchy_")
def cauchy_(t, median=0.0, sigma=1.0, *, generator=None):
    if t.dtype in _COMPLEX_PART:
        raise RuntimeError("Cauchy distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {_COMPLEX_C10[t.dtype]}")
    check_dtype("aten::cauchy_", t)
    if not t.dtype.is_floating_point:
        raise RuntimeError("Cauchy distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {_C_NAMES.get(t.dtype, str(t.dtype))}")
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma:g}")
    if t.numel() == 0:
        return t
    if not (math.isfinite(median) and math.isfinite(sigma)):
        # CPU gives median + sigma * draw (inf/NaN values); the kernel takes finite parameters only.
        cauchy_(t, 0.0, 1.0, generator=generator)
        return t.mul_(sigma).add_(median)
    seed, offset = _reserve(t, generator, 2 if t.dtype == torch.float64 else 1)
    return _launch("cauchy", t, (seed, offset, float(median), float(sigma)))


@OVERLOADS.implements("log_normal_")
def log_normal_(t, mean=1.0, std=2.0, *, generator=None):
    _reject_complex(t, "log_normal_cpu")
    _check_floating("log_normal_", t, "log_normal")
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std:g}")
    if t.numel() == 0:
        return t
    if not (math.isfinite(mean) and math.isfinite(std)):
        normal_(t, mean, std, generator=generator)
        return t.exp_()
    seed, offset = _reserve(t, generator, 4 if t.dtype == torch.float64 else 2)
    return _launch("log_normal", t, (seed, offset, float(mean), float(std)))


@OVERLOADS.implements("geometric_")
def geometric_(t, p, *, generator=None):
    _reject_complex(t, "geometric_cpu")
    check_dtype("aten::geometric_", t)
    if t.dtype == torch.bool:
        raise NotImplementedError("\"geometric_cpu\" not implemented for 'Bool' (on emu, as on CPU)")
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p:g}")
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 2 if t.dtype == torch.float64 else 1)
    return _launch("geometric", t, (seed, offset, float(p)))


def _check_std_tensor(std) -> None:
    """CPU's CHECK_NORMAL_TENSOR_STD: one device reduction and one host read (a synchronisation)."""
    if std.is_complex():
        raise RuntimeError("normal expects standard deviation to be non-complex")
    if std.numel():
        refuse_in_projection(None, "checks device values on the host before it launches (std >= 0)")
    if std.numel() and not bool(std.min().ge(0).item()):
        raise RuntimeError("normal expects all elements of std >= 0.0")


def _check_std_float(std) -> None:
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")


def _emu_operand(t, device):
    return t if t.device.type == "emu" else t.to(torch.device("emu", device))


def _normal_into(out, mean, std, generator):
    """CPU's normal_out_impl: draw N(0, 1) (or N(0, std) for a float std), then scale and shift
    with device ops, out.mul_(std).add_(mean)."""
    from torch_plugin.ops._common import resize_out
    device = out.device.index
    mean_shape = mean.shape if isinstance(mean, torch.Tensor) else ()
    std_shape = std.shape if isinstance(std, torch.Tensor) else ()
    if isinstance(mean, torch.Tensor) and not isinstance(std, torch.Tensor):
        # CPU infers the size from mean and an empty_like(output): the output's own shape counts
        # (so a zero-element out of another shape is an error there too).
        shape = broadcast_shape(tuple(mean_shape), tuple(out.shape))
    else:
        shape = broadcast_shape(tuple(mean_shape), tuple(std_shape))
    resize_out(out, shape)
    if out.dtype in _COMPLEX_PART:
        return _complex_normal_into(out, mean, std, generator, device)
    if isinstance(std, torch.Tensor):
        normal_(out, 0.0, 1.0, generator=generator)
        out.mul_(_emu_operand(std, device))
    else:
        normal_(out, 0.0, float(std), generator=generator)
    if isinstance(mean, torch.Tensor):
        out.add_(_emu_operand(mean, device))
    else:
        out.add_(mean)
    return out


def _complex_normal_into(out, mean, std, generator, device):
    """_normal_into for a complex out (a complex mean; std is real, CPU checks it): the complex
    draw scaled by the real std and shifted by the mean, as real arithmetic on the parts (the device
    has no complex add/mul): parts * std[..., None] + view_as_real(mean)."""
    parts = _parts(out)
    if isinstance(std, torch.Tensor):
        normal_(out, 0.0, 1.0, generator=generator)
        parts.mul_(_emu_operand(std, device).unsqueeze(-1))
    else:
        normal_(out, 0.0, float(std), generator=generator)
    if isinstance(mean, torch.Tensor):
        mean = _emu_operand(mean, device)
        if mean.is_complex():
            parts.add_(torch.view_as_real(mean.resolve_conj().resolve_neg()))
        else:
            parts[..., 0].add_(mean)
    else:
        value = complex(mean)
        parts[..., 0].add_(value.real)
        parts[..., 1].add_(value.imag)
    return out


@OVERLOADS.implements("normal.Tensor_Tensor")
def normal_tensor_tensor(mean, std, *, generator=None):
    _check_std_tensor(std)
    shape = broadcast_shape(tuple(mean.shape), tuple(std.shape))
    device = mean.device.index if mean.device.type == "emu" else std.device.index
    out = torch.empty(shape, dtype=mean.dtype, device=torch.device("emu", device))
    return _normal_into(out, mean, std, generator)


@OVERLOADS.implements("normal.Tensor_float")
def normal_tensor_float(mean, std=1.0, *, generator=None):
    _check_std_float(std)
    out = torch.empty(mean.shape, dtype=mean.dtype, device=mean.device)
    return _normal_into(out, mean, std, generator)


@OVERLOADS.implements("normal.float_Tensor")
def normal_float_tensor(mean, std, *, generator=None):
    _check_std_tensor(std)
    out = torch.empty(std.shape, dtype=std.dtype, device=std.device)
    return _normal_into(out, mean, std, generator)


@OVERLOADS.implements("normal.Tensor_Tensor_out")
def normal_tensor_tensor_out(mean, std, *, generator=None, out):
    _check_std_tensor(std)
    return _normal_into(out, mean, std, generator)


@OVERLOADS.implements("normal.Tensor_float_out")
def normal_tensor_float_out(mean, std=1.0, *, generator=None, out):
    _check_std_float(std)
    return _normal_into(out, mean, std, generator)


@OVERLOADS.implements("normal.float_Tensor_out")
def normal_float_tensor_out(mean, std, *, generator=None, out):
    _check_std_tensor(std)
    return _normal_into(out, mean, std, generator)


def _check_multinomial(probs, n_sample, replacement) -> None:
    """CPU's checks; the ones on the values cost one synchronisation (one small host read)."""
    if not probs.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_C_NAMES.get(probs.dtype, str(probs.dtype))}")
    check_dtype("aten::multinomial", probs, allowed=FLOATING)
    if n_sample <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if probs.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    categories = probs.shape[-1]
    if not replacement and n_sample > categories:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if categories > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    if probs.numel() == 0:
        return
    refuse_in_projection("aten::multinomial", "checks device values on the host before it launches (finite, non-negative probabilities)")
    rows = probs if probs.dim() == 2 else probs.unsqueeze(0)
    finite_nonneg = (rows >= 0).all() & ~rows.isinf().any()
    nonneg = (rows >= 0).all()
    zero_rows = (rows.sum(-1) == 0).any()
    flags = torch.stack([finite_nonneg, nonneg, zero_rows]).tolist()  # the one synchronisation
    if not replacement or n_sample == 1:
        if not flags[0]:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if flags[2]:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    else:
        if not flags[1]:
            raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
        if not flags[0]:
            raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity "
                               "or NaN)")
        if flags[2]:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


@OVERLOADS.implements("multinomial", "multinomial.out")
def _multinomial(probs, n_sample, replacement=False, generator=None, out=None):
    from torch_plugin.ops._common import resize_out
    _check_multinomial(probs, n_sample, replacement)
    shape = (*probs.shape[:-1], n_sample)
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=probs.device)
    else:
        if out.dtype != torch.int64:
            raise RuntimeError(f"multinomial: expected an int64 (Long) out tensor, got {out.dtype}")
        resize_out(out, shape)
    if out.numel() == 0:
        return out
    if not replacement or n_sample == 1:
        # CPU's algorithm (the Gumbel-max trick): argmax / top-k of p / q with q ~ Exp(1).
        q = torch.empty_like(probs)
        exponential_(q, 1.0, generator=generator)
        torch.div(probs, q, out=q)
        if n_sample == 1:
            torch.argmax(q, dim=-1, keepdim=True, out=out)
        else:
            values = torch.empty(shape, dtype=probs.dtype, device=probs.device)
            torch.topk(q, n_sample, out=(values, out))
        return out
    rows = probs if probs.dim() == 2 else probs.unsqueeze(0)
    result = out if out.dim() == 2 else out.unsqueeze(0)
    gen = generator if generator is not None else _C._default_generator(probs.device.index)
    seed, offset = _C._philox_reserve(gen, -(-result.numel() * 2 // 4) * 4)
    rt().launch("multinomial", (device_ref(result), device_ref(rows), seed, offset),
                current_stream(probs.device.index))
    return out


@OVERLOADS.implements("native_dropout")
def native_dropout(input, p, train=None):
    """CPU's native_dropout: mask ~ Bernoulli(1 - p) (bool), output = input * mask * 1/(1-p)
    (scale 0 for p == 1); in eval mode output is a copy and the mask all true."""
    if input.numel() == 0:
        return input, torch.empty_like(input)
    if train is None or train:
        p1m = 1.0 - p
        scale = 0.0 if p1m == 0 else 1.0 / p1m
        mask = torch.empty(input.shape, dtype=torch.bool, device=input.device)
        bernoulli_float(mask, p1m)
        return input.mul(mask).mul_(scale), mask
    return input.clone(), torch.ones_like(input, dtype=torch.bool)


@OVERLOADS.implements("native_dropout_backward")
def native_dropout_backward(grad_output, mask, scale):
    if mask.dtype != torch.bool:
        raise RuntimeError(f"Mask should be Bool Scalar Type{_C_NAMES.get(mask.dtype, mask.dtype)}")
    return grad_output.mul(mask).mul_(scale)


def _as_dtype(value, dtype):
    """A Python scalar converted as c10's Scalar.to<scalar_t>() (checked; floats round)."""
    from torch_plugin.ops.factories import _python_value
    value = _python_value(value, dtype)
    if dtype.is_floating_point:
        value = torch.tensor(float(value), dtype=torch.float64).to(dtype).item()  # a host scalar, not data
    return value


def _round_as(value: float, dtype) -> float:
    return torch.tensor(value, dtype=torch.float64).to(dtype).item() if dtype != torch.float64 else value


@OVERLOADS.implements("logspace.out")
def logspace_out(start, end, steps, base=10.0, *, out):
    """CPU's formula: base ** (start + step * i) for the first half, base ** (end - step * (steps - i - 1))
    for the rest, with start/end converted to out's dtype and step = (end - start) / (steps - 1)
    (the difference taken in out's dtype; integer outputs use a float32 base)."""
    from torch_plugin.ops.factories import _check_sequence_dtype, _sequence_out
    from torch_plugin.errors import unsupported_dtype
    start, end = (s.item() if isinstance(s, torch.Tensor) else s for s in (start, end))
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if out.dtype.is_complex:
        raise unsupported_dtype("aten::logspace", out.dtype, FLOATING)
    _check_sequence_dtype("logspace", out)
    _sequence_out(out, steps)
    if steps == 0:
        return out
    dtype = out.dtype
    if steps == 1:
        # CPU fills pow(base, start) with start as a double (not converted to the dtype first).
        args = (1, float(start), float(start), 0.0, float(base), True)
    else:
        lo, hi = _as_dtype(start, dtype), _as_dtype(end, dtype)
        if dtype.is_floating_point:
            step = _round_as(float(hi) - float(lo), dtype) / (steps - 1)
            b = float(base)
        else:
            step = float(int(hi) - int(lo)) / (steps - 1)
            b = _round_as(float(base), torch.float32)
        args = (int(steps), float(lo), float(hi), step, b, False)
    rt().launch("logspace", (device_ref(out), *args), current_stream(out.device.index))
    return out
