"""Matrix products on the matrix engine: mm, addmm (and their out= forms).

float32 accumulates in fp32; float16/bfloat16 are widened to fp32, accumulated
in fp32 and rounded once (the device's numerics contract); float64 in fp64.
Integer matrix products have no device kernel and take the host fallback.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops import fallback
from torch_plugin.ops._common import (broadcast_strides, check_overlap, common_device, current_stream,
                                      device_ref, prepare_out, rt)


def _check(op: str, a, b):
    for t in (a, b):  # before the host fallback, which could not move them to the host either
        if t.dtype not in SUPPORTED:
            raise unsupported_dtype(op, t.dtype, SUPPORTED)
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"{op}: self must be a matrix" if a.dim() != 2 else f"{op}: mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"{op}: mat1 and mat2 shapes cannot be multiplied "
                           f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{op}: expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")


def _matmul(op, out, a, b, bias, beta, alpha):
    device = common_device(op, a, b, *( [bias] if bias is not None else []))
    M, N = a.shape[0], b.shape[1]
    if out is None:
        out = torch.empty((M, N), dtype=a.dtype, device=torch.device("emu", device))
    else:
        common_device(op, out, a)
        prepare_out(op, out, (M, N), a.dtype)
        if out.dtype != a.dtype:
            raise RuntimeError(f"{op}: expected out tensor to have dtype {a.dtype}, but got {out.dtype} instead")
        # bias too: out= may alias it exactly (the in-place form), never partly.
        check_overlap(op, out, a, b, *([bias] if bias is not None else []))
    if out.numel() == 0:
        return out
    if alpha == 0:
        # BLAS (and CPU/CUDA addmm) semantics: alpha == 0 does not read mat1 @ mat2, so NaN/inf
        # in them must not reach the result (the GEMM kernel computed 0 * NaN = NaN).
        if bias is None or beta == 0:
            out.zero_()
        else:
            torch.mul(bias.expand(M, N), beta, out=out)
        return out
    c = None
    if bias is not None and beta != 0:
        c = device_ref(bias, (M, N), broadcast_strides(bias, (M, N)))
    rt().launch("matmul", (device_ref(out), device_ref(a), device_ref(b), c, float(beta), float(alpha)),
                current_stream(device))
    return out


def mm(a, b):
    _check("aten::mm", a, b)
    if a.dtype not in FLOATING:
        return fallback.run_on_host(torch.ops.aten.mm.default, a, b)
    return _matmul("aten::mm", None, a, b, None, 0.0, 1.0)


def mm_out(a, b, *, out):
    _check("aten::mm.out", a, b)
    if a.dtype not in FLOATING:
        return fallback.run_on_host(torch.ops.aten.mm.out, a, b, out=out)
    return _matmul("aten::mm.out", out, a, b, None, 0.0, 1.0)


def _check_bias(op, bias, a, b):
    try:
        torch.broadcast_shapes(bias.shape, (a.shape[0], b.shape[1]))
    except RuntimeError:
        raise RuntimeError(f"{op}: self of shape {list(bias.shape)} cannot be broadcast to "
                           f"[{a.shape[0]}, {b.shape[1]}]") from None
    if bias.dtype != a.dtype:
        raise RuntimeError(f"{op}: self and mat2 must have the same dtype, but got {bias.dtype} and {a.dtype}")


def addmm(bias, a, b, *, beta=1, alpha=1):
    _check("aten::addmm", a, b)
    _check_bias("aten::addmm", bias, a, b)
    if a.dtype not in FLOATING:
        return fallback.run_on_host(torch.ops.aten.addmm.default, bias, a, b, beta=beta, alpha=alpha)
    return _matmul("aten::addmm", None, a, b, bias, beta, alpha)


def addmm_out(bias, a, b, *, beta=1, alpha=1, out):
    _check("aten::addmm.out", a, b)
    _check_bias("aten::addmm.out", bias, a, b)
    if a.dtype not in FLOATING:
        return fallback.run_on_host(torch.ops.aten.addmm.out, bias, a, b, beta=beta, alpha=alpha, out=out)
    return _matmul("aten::addmm.out", out, a, b, bias, beta, alpha)
