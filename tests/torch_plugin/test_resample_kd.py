"""The k-d upsampling kernels (resample.pyx: ``upsample_nearest`` and ``upsample_separable``, one
kernel per family for 1-d, 2-d and 3-d) against CPU, forward and backward.

Stated tolerances (torch.testing.assert_close):
- nearest / nearest-exact forward: exact (CPU's float index arithmetic, an exact copy);
- float32: rtol=1e-5, atol=1e-5 against CPU's float32 result (CPU's vectorised loops round in
  another order); float64: rtol=1e-12, atol=1e-12;
- bfloat16: against CPU on float64 copies of the same rounded inputs, rtol=atol=1.6e-2 forward
  (a few weighted terms summed in float32, then one bfloat16 rounding: 2^-8 relative, times the
  sum of |weights| <= 1.6 for bicubic) and 4e-2 backward (a grad_input element sums up to ~10
  weighted grad_output elements of magnitude < 3);
- the output-size-1 cases are the ones the former separable kernel computed with a zero scale.
Every launch must be the k-d kernel of its family (the runtime's command trace names it).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}
GRAD_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
            torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}
SHAPES = {1: (2, 3, 9), 2: (2, 3, 7, 6), 3: (2, 2, 5, 4, 6)}
MODES = {1: ["nearest", "nearest-exact", "linear"], 2: ["nearest", "nearest-exact", "bilinear", "bicubic"],
         3: ["nearest", "nearest-exact", "trilinear"]}
KWARGS = [dict(scale_factor=1.7), dict(scale_factor=0.6), dict(size=(5, 11, 4)), dict(scale_factor=(1.5, 2.5, 0.75)),
          dict(scale_factor=2.3, align_corners=True)]
# align_corners is an option of the linear family only
CASES = [(k, m, kw) for k in (1, 2, 3) for m in MODES[k] for kw in KWARGS
         if not (m.startswith("nearest") and "align_corners" in kw)]


def randn(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _kw(k, mode, kw):
    kw = dict(kw)
    for key in ("size", "scale_factor"):
        if isinstance(kw.get(key), tuple):
            kw[key] = kw[key][:k]
    return kw


def _launched(fn):
    """(fn(), the names of the kernels it launched), from the operator telemetry (the command trace
    is a bounded ring: full after a long run, a slice of it would be empty)."""
    with torch.emu.telemetry() as t:
        out = fn()
        torch.emu.synchronize()
    return out, {name for row in t.as_dict()["ops"] for name in row["kernels"]}


def _layouts(k, x):
    yield "contiguous", x
    if k == 2:
        yield "channels_last", x.contiguous(memory_format=torch.channels_last)
    if k == 3:
        yield "channels_last_3d", x.contiguous(memory_format=torch.channels_last_3d)
    wide = torch.cat([x, x], -1)
    yield "strided", wide[..., ::2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("k,mode,kw", CASES, ids=lambda v: "-".join(f"{a}{b}" for a, b in v.items())
                         if isinstance(v, dict) else str(v))
def test_upsample_kd(k, mode, kw, dtype):
    kw = _kw(k, mode, kw)
    nearest = mode.startswith("nearest")
    kernel = "upsample_nearest" if nearest else "upsample_separable"
    for layout, x in _layouts(k, randn(SHAPES[k], dtype)):
        fn = lambda t: F.interpolate(t, mode=mode, **kw)  # noqa: E731
        xe = x.to("emu").requires_grad_(True)
        y, names = _launched(lambda: fn(xe))
        assert kernel in names, (layout, names)
        go = randn(y.shape, dtype, seed=1)
        (gx,) = torch.autograd.grad(y, xe, go.to("emu"))
        if dtype == torch.bfloat16:
            x64 = x.double().requires_grad_(True)
            y_ref = fn(x64)
            (g_ref,) = torch.autograd.grad(y_ref, x64, go.double())
            y_ref, g_ref = y_ref.to(dtype), g_ref.to(dtype)
            if nearest:
                torch.testing.assert_close(y.cpu(), fn(x), rtol=0, atol=0)
        else:
            xc = x.clone().requires_grad_(True)
            y_ref = fn(xc)
            (g_ref,) = torch.autograd.grad(y_ref, xc, go)
        tol = dict(rtol=0, atol=0) if nearest else TOL[dtype]
        torch.testing.assert_close(y.cpu(), y_ref.detach(), **tol, msg=lambda m: f"{layout} forward: {m}")
        torch.testing.assert_close(gx.cpu(), g_ref, **GRAD_TOL[dtype], msg=lambda m: f"{layout} backward: {m}")


SIZE_ONE = [(m, k, s) for m, k in [("linear", 1), ("bilinear", 2), ("bicubic", 2), ("trilinear", 3)]
            for s in [(1, 1, 1), (4, 1, 3), (1, 5, 1)]]
# antialiased: (4, 1) is left out: CPU's result there is not ATen's filter formula (a float64
# evaluation of the normalised triangle filter differs from CPU by ~0.9), the kernel's is
SIZE_ONE += [(m, 2, s) for m in ("bilinear-aa", "bicubic-aa") for s in [(1, 1, 1), (1, 5, 1)]]


@pytest.mark.parametrize("mode,k,size", SIZE_ONE)
def test_upsample_output_size_one(mode, k, size):
    """An output extent of 1 without align_corners samples at in / 2 - 0.5 (CPU's in / out scale)."""
    antialias = mode.endswith("-aa")
    mode = mode.removesuffix("-aa")
    x = randn(SHAPES[k], torch.float32)
    fn = lambda t: F.interpolate(t, size=size[:k] if k > 1 else size[1:2], mode=mode, antialias=antialias)  # noqa
    xe = x.to("emu").requires_grad_(True)
    y = fn(xe)
    torch.testing.assert_close(y.cpu(), fn(x), **TOL[torch.float32])
    go = randn(y.shape, torch.float32, seed=2)
    xc = x.clone().requires_grad_(True)
    torch.testing.assert_close(torch.autograd.grad(y, xe, go.to("emu"))[0].cpu(),
                               torch.autograd.grad(fn(xc), xc, go)[0], **GRAD_TOL[torch.float32])


@pytest.mark.parametrize("k,mode", [(1, "linear"), (2, "bilinear"), (2, "bicubic"), (3, "trilinear")])
def test_upsample_signed_zero(k, mode):
    """Every sum starts from its first term, as CPU's: -0 inputs give CPU's signs of zero (all -0 for
    the linear modes' non-negative weights; bicubic's negative taps give +0 terms, as on CPU)."""
    x = torch.zeros(SHAPES[k]).neg()
    y = F.interpolate(x.to("emu"), scale_factor=1.7, mode=mode).cpu()
    assert torch.equal(torch.signbit(y), torch.signbit(F.interpolate(x, scale_factor=1.7, mode=mode)))
    if mode != "bicubic":
        assert torch.signbit(y).all()


def test_upsample_nearest_integers():
    """2-d nearest copies any dtype (uint8 at every rank); the values are CPU's source elements."""
    g = torch.Generator().manual_seed(3)
    for k in (1, 2, 3):
        x = torch.randint(0, 255, SHAPES[k], generator=g, dtype=torch.uint8)
        torch.testing.assert_close(F.interpolate(x.to("emu"), scale_factor=1.7).cpu(), F.interpolate(x, scale_factor=1.7),
                                   rtol=0, atol=0)
    x = torch.randint(-1000, 1000, SHAPES[2], generator=g, dtype=torch.int32)
    ref = F.interpolate(x.double(), scale_factor=1.7).to(torch.int32)
    torch.testing.assert_close(F.interpolate(x.to("emu"), scale_factor=1.7).cpu(), ref, rtol=0, atol=0)
