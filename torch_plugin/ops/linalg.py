"""Matrix products on the matrix engine: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, vdot,
and the outer-product update addr (with their out= and in-place forms).

Numerics (the device's contract, see emulator/kernels/gemm.pyx): float32 accumulates in fp32;
float16/bfloat16 are widened to fp32, accumulated in fp32 and rounded once; float64 in fp64.
Integer dtypes (uint8, int8, int16, int32, int64) accumulate in 64-bit two's complement and wrap
to the result dtype, which is CPU's result exactly; their alpha and beta are truncated to
integers as CPU's Scalar.to<int64_t>() does. bool is rejected (CPU has no bool mm/bmm/mv/dot)
except for addr, which CPU defines for bool as logic.

alpha == 0 (addmm, baddbmm, addbmm, addmv) does not read the matrices, so NaN/inf in them never
reaches the result (BLAS semantics, as CPU's addmm); beta == 0 does not read ``self``.
addr follows CPU's elementwise formula instead: beta == 0 ignores ``self``, alpha == 0 still
multiplies (0 * NaN = NaN), with torch.result_type promotion.

matmul, linear, outer/ger, inner, einsum are CompositeImplicitAutograd and reach these ops
(and mul/sum) by themselves; they are not registered here.
"""
from __future__ import annotations

import torch

from torch_plugin._dtypes import FLOATING, SUPPORTED, TO_CODE, scalar_type_name, type_meta_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import (broadcast_strides, check_overlap, common_device, current_stream,
                                      device_ref, resize_out, rt)
from torch_plugin.ops._overloads import Overloads

OVERLOADS = Overloads(__name__)

# Dtypes of the matrix engine's GEMM: floating and integer, not bool.
GEMM_DTYPES = frozenset(SUPPORTED - {torch.bool})
def _check_gemm_dtypes(op: str, *tensors) -> None:
    for t in tensors:  # before anything is allocated or launched
        if t is not None and t.dtype not in GEMM_DTYPES:
            raise unsupported_dtype(op, t.dtype, GEMM_DTYPES)


_C_TYPES = {torch.int64: "int64_t", torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
            torch.uint8: "uint8_t"}


def _scalars(dtype, beta, alpha):
    """alpha/beta in the compute domain: Python ints for integer dtypes (truncated toward zero and
    range-checked against the dtype, as CPU's Scalar.to<scalar_t>()), else floats."""
    if dtype in FLOATING:
        return float(beta), float(alpha)
    info = torch.iinfo(dtype)
    values = []
    for value in (beta, alpha):
        value = int(value)
        if not info.min <= value <= info.max:
            raise RuntimeError(f"value cannot be converted to type {_C_TYPES[dtype]} without overflow")
        values.append(value)
    return tuple(values)


def _expand_error(shape, target) -> RuntimeError:
    shape, target = list(shape), list(target)
    offset = len(target) - len(shape)
    for i, n in enumerate(shape):
        if n != 1 and n != target[i + offset]:
            return RuntimeError(f"The expanded size of the tensor ({target[i + offset]}) must match the existing "
                                f"size ({n}) at non-singleton dimension {i + offset}.  Target sizes: {target}.  "
                                f"Tensor sizes: {shape}")
    return RuntimeError(f"expand: the number of sizes provided ({len(target)}) must be greater or equal to the "
                        f"number of dimensions in the tensor ({len(shape)})")


def _check_broadcast_to(t, target) -> None:
    shape = tuple(t.shape)
    if len(shape) > len(target) or any(n != 1 and n != m for n, m in zip(reversed(shape), reversed(target))):
        raise _expand_error(shape, target)


def _check_inplace_shape(self, target) -> None:
    if tuple(self.shape) != tuple(target):
        raise RuntimeError(f"Bad in-place call: input tensor size {list(self.shape)} and output tensor size "
                           f"{list(target)} should match")


def _prepare_out(op, out, shape, dtype, *inputs, products=()):
    """out= of a matrix product: exact dtype (as CPU), resized like ATen's resize_output.
    ``products``: the multiplied operands, which out may not alias at all (the added term may
    alias it exactly: the in-place form)."""
    common_device(op, out, *inputs)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {type_meta_name(dtype)}, but got "
                           f"{type_meta_name(out.dtype)} instead")
    # An out that must be resized cannot alias a multiplied operand: the resize would change the
    # operand under the product (CPU computes garbage there). Refuse it before anything changes.
    # (An exact alias of the right shape is fine: the kernel reads its inputs before it writes.)
    if tuple(out.shape) != tuple(shape) and any(
            isinstance(t, torch.Tensor) and t.numel() and out.numel() and torch._C._is_alias_of(t, out)
            for t in products):
        raise RuntimeError(f"{op}: unsupported operation: some elements of the input tensor and the written-to "
                           "tensor refer to a single memory location.")
    resize_out(out, shape)
    check_overlap(op, out, *inputs)


def _fill_scaled(out, bias, beta, shape):
    """out = beta * bias (broadcast), or 0 without a bias: the alpha == 0 result, launched on the device."""
    if bias is None or beta == 0:
        return out.zero_()
    return torch.mul(bias.expand(shape), beta, out=out)


# ---------------------------------------------------------------------------------------------
# mm / addmm

def _check(op: str, a, b):
    _check_gemm_dtypes(op, a, b)
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"{op}: self must be a matrix" if a.dim() != 2 else f"{op}: mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"{op}: mat1 and mat2 shapes cannot be multiplied "
                           f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{op}: expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")


def _matmul(op, out, a, b, bias, beta, alpha):
    """out (M, N) = beta * bias + alpha * a @ b; ``a``/``b`` may be vectors described as matrices
    by the caller (mv, dot), so shapes come from the descriptors passed in."""
    device = common_device(op, a, b, *([bias] if bias is not None else []))
    M, N = a.shape[0], b.shape[1]
    beta, alpha = _scalars(a.dtype, beta, alpha)
    if out is None:
        out = torch.empty((M, N), dtype=a.dtype, device=torch.device("emu", device))
    else:
        # bias too: out= may alias it exactly (the in-place form), never partly.
        _prepare_out(op, out, (M, N), a.dtype, a, b, *([bias] if bias is not None else []), products=(a, b))
    if out.numel() == 0:
        return out
    if alpha == 0:
        # BLAS (and CPU/CUDA addmm) semantics: alpha == 0 does not read mat1 @ mat2, so NaN/inf
        # in them must not reach the result (the GEMM kernel computed 0 * NaN = NaN).
        return _fill_scaled(out, bias, beta, (M, N))
    c = None
    if bias is not None and beta != 0:
        c = device_ref(bias, (M, N), broadcast_strides(bias, (M, N)))
    rt().launch("matmul", (device_ref(out), device_ref(a), device_ref(b), c, beta, alpha),
                current_stream(device))
    return out


@OVERLOADS.implements("mm")
def mm(a, b):
    _check("aten::mm", a, b)
    return _matmul("aten::mm", None, a, b, None, 0, 1)


@OVERLOADS.implements("mm.out")
def mm_out(a, b, *, out):
    _check("aten::mm.out", a, b)
    return _matmul("aten::mm.out", out, a, b, None, 0, 1)


def _check_bias(op, bias, a, b):
    _check_gemm_dtypes(op, bias)
    try:
        torch.broadcast_shapes(bias.shape, (a.shape[0], b.shape[1]))
    except RuntimeError:
        raise RuntimeError(f"{op}: self of shape {list(bias.shape)} cannot be broadcast to "
                           f"[{a.shape[0]}, {b.shape[1]}]") from None
    if bias.dim() > 2:
        raise _expand_error(bias.shape, (a.shape[0], b.shape[1]))
    if bias.dtype != a.dtype:
        raise RuntimeError(f"{op}: self and mat2 must have the same dtype, but got {bias.dtype} and {a.dtype}")


@OVERLOADS.implements("addmm")
def addmm(bias, a, b, *, beta=1, alpha=1):
    _check("aten::addmm", a, b)
    _check_bias("aten::addmm", bias, a, b)
    return _matmul("aten::addmm", None, a, b, bias, beta, alpha)


@OVERLOADS.implements("addmm.out")
def addmm_out(bias, a, b, *, beta=1, alpha=1, out):
    _check("aten::addmm.out", a, b)
    _check_bias("aten::addmm.out", bias, a, b)
    return _matmul("aten::addmm.out", out, a, b, bias, beta, alpha)


@OVERLOADS.implements("addmm_")
def addmm_(self, a, b, *, beta=1, alpha=1):
    _check("aten::addmm_", a, b)
    _check_bias("aten::addmm_", self, a, b)
    _check_inplace_shape(self, (a.shape[0], b.shape[1]))
    return _matmul("aten::addmm_", self, a, b, self, beta, alpha)


# ---------------------------------------------------------------------------------------------
# bmm / baddbmm / addbmm

def _check_batches(op, b1, b2, same_batch_message=False):
    _check_gemm_dtypes(op, b1, b2)
    if b1.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b2.dim() != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if same_batch_message and b1.shape[0] != b2.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got {b1.shape[0]} and "
                           f"{b2.shape[0]}")
    if b2.shape[0] != b1.shape[0] or b2.shape[1] != b1.shape[2]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{b1.shape[0]}, {b1.shape[2]}] but got: [{b2.shape[0]}, {b2.shape[1]}].")


def _check_same_dtype_3(self, b1, b2):
    if self is not None and not (self.dtype == b1.dtype == b2.dtype):
        raise RuntimeError(f"Input dtypes must be the same, got: input {type_meta_name(self.dtype)}, "
                           f"batch1: {type_meta_name(b1.dtype)}, batch2: {type_meta_name(b2.dtype)}")
    if b1.dtype != b2.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(b1.dtype)} but found {scalar_type_name(b2.dtype)}")


def _batched(op, kernel, out, b1, b2, bias, beta, alpha):
    """bmm/baddbmm (kernel "bmm", out (B, M, N)) or addbmm (kernel "addbmm", out (M, N))."""
    tensors = [t for t in (b1, b2, bias) if t is not None]
    device = common_device(op, *tensors)
    B, M, N = b1.shape[0], b1.shape[1], b2.shape[2]
    shape = (B, M, N) if kernel == "bmm" else (M, N)
    beta, alpha = _scalars(b1.dtype, beta, alpha)
    if out is None:
        out = torch.empty(shape, dtype=b1.dtype, device=torch.device("emu", device))
    else:
        _prepare_out(op, out, shape, b1.dtype, *tensors, products=(b1, b2))
    if out.numel() == 0:
        return out
    if alpha == 0:
        return _fill_scaled(out, bias, beta, shape)
    c = None
    if bias is not None and beta != 0:
        c = device_ref(bias, shape, broadcast_strides(bias, shape))
    rt().launch(kernel, (device_ref(out), device_ref(b1), device_ref(b2), c, beta, alpha),
                current_stream(device))
    return out


@OVERLOADS.implements("bmm")
def bmm(b1, b2):
    _check_batches("aten::bmm", b1, b2)
    _check_same_dtype_3(None, b1, b2)
    return _batched("aten::bmm", "bmm", None, b1, b2, None, 0, 1)


@OVERLOADS.implements("bmm.out")
def bmm_out(b1, b2, *, out):
    _check_batches("aten::bmm.out", b1, b2)
    _check_same_dtype_3(None, b1, b2)
    return _batched("aten::bmm.out", "bmm", out, b1, b2, None, 0, 1)


def _check_baddbmm(op, self, b1, b2):
    _check_batches(op, b1, b2)
    _check_gemm_dtypes(op, self)
    _check_broadcast_to(self, (b1.shape[0], b1.shape[1], b2.shape[2]))
    _check_same_dtype_3(self, b1, b2)


def _check_addbmm(op, self, b1, b2):
    _check_batches(op, b1, b2, same_batch_message=True)
    _check_gemm_dtypes(op, self)
    _check_broadcast_to(self, (b1.shape[1], b2.shape[2]))
    _check_same_dtype_3(self, b1, b2)


def _batched_overloads(op: str, kernel: str, check, result_shape) -> dict:
    """{overload: kernel} for ``op`` (baddbmm: a result per batch, the "bmm" kernel; addbmm: the
    batches summed, the "addbmm" kernel) in its functional, out= and in-place forms: ``check``, then
    one _batched launch. ``result_shape(b1, b2)``: the shape the in-place form's self must have."""
    def functional(self, b1, b2, *, beta=1, alpha=1):
        check(f"aten::{op}", self, b1, b2)
        return _batched(f"aten::{op}", kernel, None, b1, b2, self, beta, alpha)

    def out_form(self, b1, b2, *, beta=1, alpha=1, out):
        check(f"aten::{op}.out", self, b1, b2)
        return _batched(f"aten::{op}.out", kernel, out, b1, b2, self, beta, alpha)

    def inplace(self, b1, b2, *, beta=1, alpha=1):
        # CPU's addbmm_ resizes a broadcastable ``self`` in place; here the in-place form needs self's own shape.
        check(f"aten::{op}_", self, b1, b2)
        _check_inplace_shape(self, result_shape(b1, b2))
        return _batched(f"aten::{op}_", kernel, self, b1, b2, self, beta, alpha)
    return {op: functional, f"{op}.out": out_form, f"{op}_": inplace}


OVERLOADS.update(_batched_overloads("baddbmm", "bmm", _check_baddbmm,
                                    lambda b1, b2: (b1.shape[0], b1.shape[1], b2.shape[2])))
OVERLOADS.update(_batched_overloads("addbmm", "addbmm", _check_addbmm, lambda b1, b2: (b1.shape[1], b2.shape[2])))


# ---------------------------------------------------------------------------------------------
# mv / addmv / dot / vdot: GEMMs with a vector described as an (n, 1) or (1, n) matrix

def _col(v):
    """A vector as an (n, 1) matrix descriptor."""
    return v.as_strided((v.shape[0], 1), (v.stride(0), 1))


def _row(v):
    """A vector as a (1, n) matrix descriptor."""
    return v.as_strided((1, v.shape[0]), (1, v.stride(0)))


def _check_addmv(op, self, mat, vec):
    _check_gemm_dtypes(op, *(t for t in (self, mat, vec) if t is not None))
    self_dim = 1 if self is None else self.dim()
    if not (mat.dim() == 2 and vec.dim() == 1 and self_dim <= 1):
        raise RuntimeError(f"vector + matrix @ vector expected, got {self_dim}, {mat.dim()}, {vec.dim()}")
    M = mat.shape[0]
    if mat.shape[1] != vec.shape[0] or (self is not None and self.numel() not in (1, M)):
        size = M if self is None else self.numel()
        raise RuntimeError(f"size mismatch, got input ({size}), mat ({mat.shape[0]}x{mat.shape[1]}), "
                           f"vec ({vec.shape[0]})")
    result_dtype = vec.dtype if self is None else self.dtype
    if not (mat.dtype == vec.dtype == result_dtype):
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {scalar_type_name(result_dtype)}, "
                           f"{scalar_type_name(mat.dtype)}, and {scalar_type_name(vec.dtype)}")


def _addmv(op, out, self, mat, vec, beta, alpha):
    device = common_device(op, *(t for t in (self, mat, vec) if t is not None))
    M = mat.shape[0]
    emu = torch.device("emu", device)
    if out is None:
        out = torch.empty((M,), dtype=mat.dtype, device=emu)
    else:
        _prepare_out(op, out, (M,), mat.dtype, *(t for t in (self, mat, vec) if t is not None), products=(mat, vec))
    if out.numel() == 0:
        return out
    bias = None if self is None else (self.reshape(1, 1) if self.numel() == 1 else _col(self))
    _matmul(op, _col(out), mat, _col(vec), bias, beta, alpha)
    return out


@OVERLOADS.implements("mv")
def mv(self, vec):
    _check_addmv("aten::mv", None, self, vec)
    return _addmv("aten::mv", None, None, self, vec, 0, 1)


@OVERLOADS.implements("mv.out")
def mv_out(self, vec, *, out):
    _check_addmv("aten::mv.out", None, self, vec)
    return _addmv("aten::mv.out", out, None, self, vec, 0, 1)


@OVERLOADS.implements("addmv")
def addmv(self, mat, vec, *, beta=1, alpha=1):
    _check_addmv("aten::addmv", self, mat, vec)
    return _addmv("aten::addmv", None, self, mat, vec, beta, alpha)


@OVERLOADS.implements("addmv.out")
def addmv_out(self, mat, vec, *, beta=1, alpha=1, out):
    _check_addmv("aten::addmv.out", self, mat, vec)
    return _addmv("aten::addmv.out", out, self, mat, vec, beta, alpha)


@OVERLOADS.implements("addmv_")
def addmv_(self, mat, vec, *, beta=1, alpha=1):
    _check_addmv("aten::addmv_", self, mat, vec)
    _check_inplace_shape(self, (mat.shape[0],))
    return _addmv("aten::addmv_", self, self, mat, vec, beta, alpha)


def _check_dot(op, a, b):
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{op.split('::')[-1].split('.')[0]} : expected both vectors to have same dtype, "
                           f"but found {scalar_type_name(a.dtype)} and {scalar_type_name(b.dtype)}")
    if a.numel() != b.numel():
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.numel()}] and src [{b.numel()}] to have "
                           f"the same number of elements, but got {a.numel()} and {b.numel()} elements respectively")
    _check_gemm_dtypes(op, a, b)


def _dot(op, a, b, out=None):
    device = common_device(op, a, b)
    if out is None:
        out = torch.empty((), dtype=a.dtype, device=torch.device("emu", device))
    else:
        common_device(op, out, a, b)
        if out.dtype != a.dtype:
            raise RuntimeError(f"result dtype {scalar_type_name(out.dtype)} does not match input dtype {scalar_type_name(a.dtype)}")
        resize_out(out, ())
        check_overlap(op, out, a, b)
    _matmul(op, out.as_strided((1, 1), (1, 1)), _row(a), _col(b), None, 0, 1)
    return out


@OVERLOADS.implements("dot")
def dot(a, b):
    _check_dot("aten::dot", a, b)
    return _dot("aten::dot", a, b)


@OVERLOADS.implements("dot.out")
def dot_out(a, b, *, out):
    _check_dot("aten::dot.out", a, b)
    return _dot("aten::dot.out", a, b, out)


@OVERLOADS.implements("vdot")
def vdot(a, b):
    # Real dtypes only (the device has no complex), where vdot is dot.
    _check_dot("aten::vdot", a, b)
    return _dot("aten::vdot", a, b)


@OVERLOADS.implements("vdot.out")
def vdot_out(a, b, *, out):
    _check_dot("aten::vdot.out", a, b)
    return _dot("aten::vdot.out", a, b, out)


# ---------------------------------------------------------------------------------------------
# addr

def _check_addr_scalars(result_dtype, beta, alpha):
    for name, value in (("beta", beta), ("alpha", alpha)):
        if result_dtype == torch.bool:
            continue  # bool results take any number (CPU converts it to bool)
        if isinstance(value, bool):
            raise RuntimeError(f"Boolean {name} only supported for Boolean results.")
        if result_dtype not in FLOATING and isinstance(value, float):
            raise RuntimeError(f"For integral input tensors, argument {name} must not be a floating point number.")


def _addr(op, out, self, v1, v2, beta, alpha, inplace=False):
    device = common_device(op, self, v1, v2)
    for name, v in (("vec1", v1), ("vec2", v2)):
        if v.dim() != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.dim()}-D")
    for t in (self, v1, v2):
        if t.dtype not in SUPPORTED:
            raise unsupported_dtype(op, t.dtype, SUPPORTED)
    result_dtype = torch.promote_types(torch.result_type(self, v1), v2.dtype)
    _check_addr_scalars(result_dtype, beta, alpha)
    M, N = v1.shape[0], v2.shape[0]
    if inplace:
        if tuple(self.shape) != (M, N):
            raise RuntimeError(f"size mismatch, input: {list(self.shape)}, v1: {list(v1.shape)}, "
                               f"v2: {list(v2.shape)}")
    _check_broadcast_to(self, (M, N))
    if out is None:
        out = torch.empty((M, N), dtype=result_dtype, device=torch.device("emu", device))
    else:
        common_device(op, out, self)
        if out.dtype not in SUPPORTED:
            raise unsupported_dtype(op, out.dtype, SUPPORTED)
        if not torch.can_cast(result_dtype, out.dtype):
            raise RuntimeError(f"result type {scalar_type_name(result_dtype)} can't be cast to the desired output type "
                               f"{scalar_type_name(out.dtype)}")
        resize_out(out, (M, N))
        check_overlap(op, out, self, v1, v2)
    if out.numel() == 0:
        return out
    if result_dtype == torch.bool:
        beta, alpha = bool(beta), bool(alpha)
    elif result_dtype in FLOATING:
        beta, alpha = float(beta), float(alpha)
    else:
        beta, alpha = int(beta), int(alpha)
    c = device_ref(self, (M, N), broadcast_strides(self, (M, N))) if beta else None
    rt().launch("addr", (device_ref(out), c, device_ref(v1), device_ref(v2), beta, alpha, TO_CODE[result_dtype]),
                current_stream(device))
    return out


@OVERLOADS.implements("addr")
def addr(self, vec1, vec2, *, beta=1, alpha=1):
    return _addr("aten::addr", None, self, vec1, vec2, beta, alpha)


@OVERLOADS.implements("addr.out")
def addr_out(self, vec1, vec2, *, beta=1, alpha=1, out):
    return _addr("aten::addr.out", out, self, vec1, vec2, beta, alpha)


@OVERLOADS.implements("addr_")
def addr_(self, vec1, vec2, *, beta=1, alpha=1):
    return _addr("aten::addr_", self, self, vec1, vec2, beta, alpha, inplace=True)
