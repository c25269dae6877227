"""The ``emu::`` custom operators: complete contracts (schema, reference, device kernel, fake,
autograd, autocast), registered at ``import torch_plugin``. docs/compile.md#custom-operators.

``torch.ops.emu.fused_add_rms_norm(x, residual, weight, eps) -> (out, new_residual)``
    ``new_residual = x + residual`` in x's dtype (as eager gives it: computed, then rounded once
    to x's dtype); ``out = new_residual * rsqrt(mean(new_residual^2, -1) + eps) * weight``, eps
    inside the square root, accumulated in float32, returned in x's dtype. ``residual`` has x's
    shape, ``weight`` the shape ``[x.shape[-1]]``.
``torch.ops.emu.row_normalize(x) -> (y, scale)``, x of shape [B, N]
    ``scale`` = the L2 norm of each row accumulated in float32 (shape [B], float32; an empty row
    gives 0); ``y = x / max(scale, 1e-12)`` per row in x's dtype (torch.nn.functional.normalize).

Both outputs are fresh contiguous tensors (never views of an input), whatever the inputs'
strides. Non-finite inputs propagate as in the reference's arithmetic: a NaN in a row makes that
row's statistic (and the row's outputs) NaN; an inf makes the RMS/norm inf, so finite elements of
the row normalize to 0 and infinite ones to NaN.

Paths: on emu, ONE eligibility function per op (``*_ineligibility``) decides; an eligible call
launches the device kernel (counted "native" under ``emu::<op>``), any other runs the reference
on the device's own ops (counted "composite"). On the CPU the reference is the implementation.

Also two mutating operators, to show mutation declared exactly and functionalized by
torch.compile: ``emu::scaled_add_(x, other, alpha)`` (``torch.Tag.inplace``: x += alpha * other)
and ``emu::square_sum_rows(x, *, out)`` (``torch.Tag.out``: out = sum(x^2, -1), returns out).
"""
from __future__ import annotations

import torch
from torch import Tensor

from torch_plugin.export import OPERATOR_SET_VERSION  # noqa: F401  (the emu:: operator set's version)
from torch_plugin.ops import registry
from torch_plugin.ops._common import current_stream, device_ref, rt
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# A row must fit the vector engine's scratchpad working set (3 float32 rows of 64 KiB).
MAX_HIDDEN = 16384
NORMALIZE_EPS = 1e-12

_libraries = []  # keep Library objects alive


def _acc(t: Tensor) -> Tensor:
    """t in the accumulation dtype: float32 (float64 stays float64: never narrower than the input)."""
    return t if t.dtype == torch.float64 else t.float()


# ---------------------------------------------------------------------------------------------
# argument checks shared by every implementation (reference, device, fake): metadata only

def _check_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor) -> None:
    name = "emu::fused_add_rms_norm"
    if x.dim() < 1:
        raise RuntimeError(f"{name}: x must have at least one dimension (got a 0-dim tensor)")
    if residual.shape != x.shape:
        raise RuntimeError(f"{name}: residual has shape {list(residual.shape)}, x has {list(x.shape)} "
                           "(they must be equal; no broadcasting)")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise RuntimeError(f"{name}: weight must have shape [{x.shape[-1]}] (x's last dimension), "
                           f"got {list(weight.shape)}")
    for what, t in (("x", x), ("residual", residual), ("weight", weight)):
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"{name}: {what} must be a floating tensor, got {t.dtype}")
    if residual.device != x.device or weight.device != x.device:
        raise RuntimeError(f"{name}: expected all tensors on one device, got x on {x.device}, residual on "
                           f"{residual.device}, weight on {weight.device}")


def _check_row_normalize(x: Tensor) -> None:
    if x.dim() != 2:
        raise RuntimeError(f"emu::row_normalize: x must be 2-D [B, N], got shape {list(x.shape)}")
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"emu::row_normalize: x must be a floating tensor, got {x.dtype}")


# ---------------------------------------------------------------------------------------------
# the trusted references (the CPU implementations, the fallback for ineligible inputs)

def add_rms_norm_reference(x: Tensor, residual: Tensor, weight: Tensor, eps: float):
    _check_add_rms_norm(x, residual, weight)
    new_residual = (x + residual).to(x.dtype)
    h = _acc(new_residual)
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * _acc(weight)
    return out.to(x.dtype).contiguous(), new_residual.contiguous()


def row_normalize_reference(x: Tensor):
    _check_row_normalize(x)
    xf = _acc(x)
    norm = xf.pow(2).sum(1).sqrt()
    y = (xf / norm.clamp_min(NORMALIZE_EPS).unsqueeze(1)).to(x.dtype).contiguous()
    return y, norm.float()


# ---------------------------------------------------------------------------------------------
# eligibility: the one place that decides whether an emu call may run the device kernel

def add_rms_norm_ineligibility(x: Tensor, residual: Tensor, weight: Tensor) -> str | None:
    """None if the device kernel may run these inputs, else why not (they take the reference)."""
    if x.device.type != "emu":
        return "not on emu"
    if x.dtype not in KERNEL_DTYPES:
        return f"dtype {x.dtype} (kernel: float32, float16, bfloat16)"
    if residual.dtype != x.dtype:
        return f"residual dtype {residual.dtype} differs from x's {x.dtype}"
    if weight.dtype not in (x.dtype, torch.float32):
        return f"weight dtype {weight.dtype} (kernel: x's dtype or float32)"
    if not (x.is_contiguous() and residual.is_contiguous() and weight.is_contiguous()):
        return "non-contiguous rows (the kernel reads contiguous rows only)"
    if not 1 <= x.shape[-1] <= MAX_HIDDEN:
        return f"hidden size {x.shape[-1]} outside [1, {MAX_HIDDEN}]"
    return None


def row_normalize_ineligibility(x: Tensor) -> str | None:
    if x.device.type != "emu":
        return "not on emu"
    if x.dtype not in KERNEL_DTYPES:
        return f"dtype {x.dtype} (kernel: float32, float16, bfloat16)"
    if not x.is_contiguous():
        return "non-contiguous rows (the kernel reads contiguous rows only)"
    if x.shape[1] > MAX_HIDDEN:
        return f"row length {x.shape[1]} above {MAX_HIDDEN}"
    return None


# ---------------------------------------------------------------------------------------------
# device kernels (eligible inputs only)

def _add_rms_norm_kernel(x, residual, weight, eps):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        rt().launch("fused_add_rms_norm", (device_ref(out), device_ref(new_residual), device_ref(x),
                                           device_ref(residual), device_ref(weight), float(eps)),
                    current_stream(x.get_device()))
    return out, new_residual


def _row_normalize_kernel(x):
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    scale = torch.empty((x.shape[0],), dtype=torch.float32, device=x.device)
    if x.shape[0]:
        rt().launch("row_normalize", (device_ref(y), device_ref(scale), device_ref(x)),
                    current_stream(x.get_device()))
    return y, scale


_add_rms_norm_native = registry._wrap("fused_add_rms_norm", _add_rms_norm_kernel, registry.NATIVE,
                                      op="emu::fused_add_rms_norm")
_add_rms_norm_composite = registry._wrap("fused_add_rms_norm", add_rms_norm_reference, registry.COMPOSITE,
                                         op="emu::fused_add_rms_norm")
_row_normalize_native = registry._wrap("row_normalize", _row_normalize_kernel, registry.NATIVE,
                                       op="emu::row_normalize")
_row_normalize_composite = registry._wrap("row_normalize", row_normalize_reference, registry.COMPOSITE,
                                          op="emu::row_normalize")


# ---------------------------------------------------------------------------------------------
# the operators

@torch.library.custom_op("emu::fused_add_rms_norm", mutates_args=())
def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return add_rms_norm_reference(x, residual, weight, eps)


@fused_add_rms_norm.register_kernel("emu")
def _(x, residual, weight, eps):
    _check_add_rms_norm(x, residual, weight)
    if add_rms_norm_ineligibility(x, residual, weight) is None:
        return _add_rms_norm_native(x, residual, weight, eps)
    return _add_rms_norm_composite(x, residual, weight, eps)


@fused_add_rms_norm.register_fake
def _(x, residual, weight, eps):
    _check_add_rms_norm(x, residual, weight)
    return x.new_empty(x.shape), x.new_empty(x.shape)


def _add_rms_norm_setup(ctx, inputs, output):
    # Saved: new_residual (an output, in x's dtype: exactly what the forward normalized) and the
    # weight. Recomputed in backward: rstd (one row reduction; saves a [rows] float32 tensor).
    x, residual, weight, eps = inputs
    ctx.save_for_backward(output[1], weight)
    ctx.eps, ctx.dtypes = eps, (x.dtype, residual.dtype)


def _add_rms_norm_backward(ctx, grad_out, grad_new_residual):
    new_residual, weight = ctx.saved_tensors
    h = _acc(new_residual)
    hidden = h.shape[-1]
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + ctx.eps)
    grad_h = grad_weight = None
    if grad_out is not None:
        g = grad_out.to(h.dtype)
        gw = g * _acc(weight)
        grad_h = rstd * gw - h * rstd.pow(3) * (gw * h).mean(-1, keepdim=True)
        grad_weight = (g * h * rstd).reshape(-1, hidden).sum(0).to(weight.dtype)
    if grad_new_residual is not None:
        grad_h = grad_new_residual.to(h.dtype) if grad_h is None else grad_h + grad_new_residual.to(h.dtype)
    if grad_h is None:
        return None, None, None, None
    x_dtype, residual_dtype = ctx.dtypes
    return grad_h.to(x_dtype), grad_h.to(residual_dtype), grad_weight, None


fused_add_rms_norm.register_autograd(_add_rms_norm_backward, setup_context=_add_rms_norm_setup)


@torch.library.custom_op("emu::row_normalize", mutates_args=())
def row_normalize(x: Tensor) -> tuple[Tensor, Tensor]:
    return row_normalize_reference(x)


@row_normalize.register_kernel("emu")
def _(x):
    _check_row_normalize(x)
    if row_normalize_ineligibility(x) is None:
        return _row_normalize_native(x)
    return _row_normalize_composite(x)


@row_normalize.register_fake
def _(x):
    _check_row_normalize(x)
    return x.new_empty(x.shape), x.new_empty((x.shape[0],), dtype=torch.float32)


def _row_normalize_setup(ctx, inputs, output):
    # Saved: x (the input) and scale (an output, float32). Recomputed: y in float32 from them, so
    # the gradient does not inherit y's rounding to a float16/bfloat16 x.
    ctx.save_for_backward(inputs[0], output[1])


def _row_normalize_backward(ctx, grad_y, grad_scale):
    x, scale = ctx.saved_tensors
    xf = _acc(x)
    # (scale is float32: for a float64 x the forward's norm is recomputed in float64)
    scale = xf.pow(2).sum(1).sqrt() if x.dtype == torch.float64 else scale
    d = scale.clamp_min(NORMALIZE_EPS).unsqueeze(1)
    y = xf / d
    grad = torch.zeros_like(xf)
    if grad_y is not None:
        g = grad_y.to(xf.dtype)
        # d(x/d)/dx: 1/d - y y^T / d while the norm is above eps (d = scale); 1/eps below it (d constant)
        above = (scale > NORMALIZE_EPS).unsqueeze(1)
        grad = g / d - torch.where(above, y * (g * y).sum(1, keepdim=True) / d, torch.zeros_like(y))
    if grad_scale is not None:
        positive = (scale > 0).unsqueeze(1)
        safe = torch.where(positive, scale.unsqueeze(1), torch.ones_like(d))
        grad = grad + grad_scale.to(xf.dtype).unsqueeze(1) * torch.where(positive, xf / safe, torch.zeros_like(xf))
    return grad.to(x.dtype)


row_normalize.register_autograd(_row_normalize_backward, setup_context=_row_normalize_setup)


# ---------------------------------------------------------------------------------------------
# autocast: explicit policies (registered for emu and cpu autocast)
#   fused_add_rms_norm: x, residual and weight are cast to the region's dtype (fp16/bf16); the
#     reduction stays float32 inside the op; outputs in the region's dtype.
#   row_normalize: nothing is cast (a norm in fp16 loses range; the op already reduces in
#     float32): y in x's own dtype, scale float32.

def _autocast_kernel(op, device_type: str, cast: bool):
    key = getattr(torch._C.DispatchKey, "Autocast" + torch._C._dispatch_key_for_device(device_type))

    def kernel(*args):
        if cast:
            dtype = torch.get_autocast_dtype(device_type)
            args = tuple(a.to(dtype) if isinstance(a, Tensor) and a.is_floating_point() else a for a in args)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return op(*args)
    return kernel


def _register_autocast() -> None:
    lib = torch.library.Library("emu", "IMPL")
    _libraries.append(lib)
    for device_type, key in (("emu", "AutocastPrivateUse1"), ("cpu", "AutocastCPU")):
        lib.impl("fused_add_rms_norm", _autocast_kernel(torch.ops.emu.fused_add_rms_norm.default, device_type,
                                                        True), key)
        lib.impl("row_normalize", _autocast_kernel(torch.ops.emu.row_normalize.default, device_type, False), key)


_register_autocast()


# ---------------------------------------------------------------------------------------------
# mutating operators: in-place (torch.Tag.inplace) and out= (torch.Tag.out). A custom op that returns
# the argument it mutates needs those tags, which torch has from 2.13: on 2.12 (in the window) the two
# operators are not defined, and torch.ops.emu names them as missing (docs/compatibility.md).
MUTATING_OPS = hasattr(torch.Tag, "inplace") and hasattr(torch.Tag, "out")


def scaled_add_(x: Tensor, other: Tensor, alpha: float) -> Tensor:
    """x += alpha * other, in place (other broadcasts to x's shape); returns x (schema: Tensor(a!))."""
    _check_scaled_add(x, other)
    return x.add_(other, alpha=alpha)


def _check_scaled_add(x: Tensor, other: Tensor) -> None:
    if torch.broadcast_shapes(x.shape, other.shape) != x.shape:
        raise RuntimeError(f"emu::scaled_add_: other of shape {list(other.shape)} does not broadcast to x's "
                           f"shape {list(x.shape)}")


# (Tagged in-place and out= custom ops get torch's autogenerated fake kernel: it returns the
# mutated argument, whose metadata does not change.)


def square_sum_rows(x: Tensor, *, out: Tensor) -> Tensor:
    """out = sum(x^2, dim=-1), written into ``out`` (shape x.shape[:-1], a floating dtype); returns
    out (schema: Tensor(a!))."""
    _check_square_sum_rows(x, out)
    return out.copy_((x * x).sum(-1))


def _check_square_sum_rows(x: Tensor, out: Tensor) -> None:
    if x.dim() < 1 or tuple(out.shape) != tuple(x.shape[:-1]):
        raise RuntimeError(f"emu::square_sum_rows: out must have shape {list(x.shape[:-1])}, got {list(out.shape)}")
    if not out.dtype.is_floating_point:
        raise RuntimeError(f"emu::square_sum_rows: out must be a floating tensor, got {out.dtype}")


if MUTATING_OPS:
    scaled_add_ = torch.library.custom_op("emu::scaled_add_", mutates_args=("x",),
                                          tags=(torch.Tag.inplace,))(scaled_add_)
    square_sum_rows = torch.library.custom_op("emu::square_sum_rows", mutates_args=("out",),
                                              tags=(torch.Tag.out,))(square_sum_rows)

OPERATORS = ("emu::fused_add_rms_norm", "emu::row_normalize") + (
    ("emu::scaled_add_", "emu::square_sum_rows") if MUTATING_OPS else ())
