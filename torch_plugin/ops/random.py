"""Random sampling from device generators (Philox: seed + offset, like CUDA).

Each launch reserves the generator words it will consume up front, so the
stream of numbers depends only on the seed and the order of launches; seeded
runs are reproducible and ``get_rng_state``/``set_rng_state`` round-trip.
"""
from __future__ import annotations

import math

import torch

from torch_plugin import _C
from torch_plugin._dtypes import FLOATING
from torch_plugin.ops._common import broadcast_strides, check_dtype, current_stream, device_ref, rt


def _reserve(t, generator, words_per_element: int):
    gen = generator if generator is not None else _C._default_generator(t.device.index)
    words = -(-t.numel() * words_per_element // 4) * 4
    return _C._philox_reserve(gen, words)


def _launch(kernel: str, t, args):
    rt().launch(kernel, (device_ref(t), *args), current_stream(t.device.index))
    return t


def uniform_(t, from_=0.0, to=1.0, *, generator=None):
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


def normal_(t, mean=0.0, std=1.0, *, generator=None):
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


def random_from(t, from_, to=None, *, generator=None):
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


def random_to(t, to, *, generator=None):
    return random_from(t, 0, to, generator=generator)


def random_(t, *, generator=None):
    return random_from(t, 0, _dtype_range(t.dtype)[1], generator=generator)


def bernoulli_float(t, p=0.5, *, generator=None):
    check_dtype("aten::bernoulli_", t)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    if t.numel() == 0:
        return t
    seed, offset = _reserve(t, generator, 1)
    return _launch("bernoulli", t, (seed, offset, None, float(p)))


def bernoulli_tensor(t, p, *, generator=None):
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


def bernoulli(p, *, generator=None):
    out = torch.empty_like(p)
    return bernoulli_tensor(out, p, generator=generator)
