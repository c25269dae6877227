"""Dense linear algebra (LAPACK class) on the device: LU (factor, solve, unpack, det, slogdet,
inverse, solve), Cholesky (factor, inverse, solve), LDL^T, QR (geqrf, orgqr, ormqr), symmetric
and general eigendecomposition, SVD, least squares, triangular solves, cross and trace.

Each op lowers to the device's LAPACK kernels (emulator/kernels/lapack.pyx), which run the
routine ATen's CPU backend runs (getrf, getrs, potrf, potrs, potri, sytrf, sytrs, geqrf, orgqr,
ormqr, syevd, gesdd, geev, gelsy/gels/gelsd/gelss, trsm) with the same arguments, so signs and
phases (SVD, eigh, QR, eig) come out as on CPU. Matrix outputs are batched column-major, as
CPU's. float32 and float64 only (CPU has no float16/bfloat16 LAPACK; complex inputs are left
out and go to the host fallback when it is allowed).

Errors: the *_ex ops return int32 info tensors without raising. The ops that raise (cholesky,
check_errors=True, and the CompositeImplicit linalg_inv/linalg_solve/linalg_cholesky over the
_ex ops) read info through aten::_linalg_check_errors, which synchronises with the device.

linalg_cross and trace are composites of device views, mul/sub and sum; the structured
functional overloads are registered beside their .out forms because the functional forms reach
the .out kernels with freshly allocated outputs.
"""
from __future__ import annotations

import math

import torch

from torch_plugin.errors import refuse_in_projection, unsupported_dtype
from torch_plugin.ops._common import broadcast_shape, check_overlap, common_device, current_stream, device_ref, \
    resize_out, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops.registry import composite

OVERLOADS = Overloads(__name__)

LAPACK_DTYPES = frozenset({torch.float32, torch.float64})
_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_TYPE_NAMES = {torch.float32: "float", torch.float64: "double", torch.int32: "int", torch.int64: "long int"}


# -- helpers ---------------------------------------------------------------------------------------

def _check_dtype(op, *tensors):
    for t in tensors:
        if t is not None and t.dtype not in LAPACK_DTYPES:
            raise unsupported_dtype(op, t.dtype, LAPACK_DTYPES)


def _check_matrix(api, A, square=True, name="A"):
    if A.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor {name} must have at least 2 dimensions.")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{api}: {name} must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")


def _same_dtype(api, A, B, a="A", b="B"):
    if A.dtype != B.dtype:
        raise RuntimeError(f"{api}: Expected {a} and {b} to have the same dtype, but found {a} of type "
                           f"{A.dtype} and {b} of type {B.dtype} instead")


def _fstrides(shape):
    """Batched column-major strides (LAPACK's layout, as CPU's outputs)."""
    shape = tuple(shape)
    if len(shape) < 2:
        return torch.empty(shape, device="meta").stride()
    m, n = shape[-2], shape[-1]
    strides = [1, max(m, 1)]
    step = max(m * n, 1)
    batch = []
    for size in reversed(shape[:-2]):
        batch.append(step)
        step *= max(size, 1)
    return tuple(reversed(batch)) + tuple(strides)


def _empty_f(shape, dtype, device):
    return torch.empty_strided(tuple(shape), _fstrides(shape), dtype=dtype, device=torch.device("emu", device))


def _empty(shape, dtype, device):
    return torch.empty(tuple(shape), dtype=dtype, device=torch.device("emu", device))


def _ref(t, shape=None, strides=None):
    return device_ref(t, tuple(t.shape) if shape is None else tuple(shape),
                      tuple(t.stride()) if strides is None else tuple(strides))


def _expanded(t, shape):
    """Ref of ``t`` read as ``shape`` (batch broadcast with 0 strides)."""
    e = t.expand(tuple(shape))
    return _ref(e)


def _launch(device, kernel, nb, *args):
    rt().launch(kernel, (nb, *args), current_stream(device))


def _out(api, out, shape, dtype, name="out", fortran=True):
    """out= contract of the linalg ops: same device, exact dtype, resized when the shape differs
    (column-major when it is resized, as CPU's). Returns the tensor to write."""
    if out.device.type != "emu":
        raise RuntimeError(f"Expected out tensor to have device emu, but got {out.device} instead")
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_TYPE_NAMES.get(dtype, dtype)}, but got "
                           f"{_TYPE_NAMES.get(out.dtype, out.dtype)} instead")
    if tuple(out.shape) != tuple(shape):
        resize_out(out, shape)
        if fortran and len(shape) >= 2:
            out.as_strided_(tuple(shape), _fstrides(shape))
    return out


def _writable(api, out, *inputs):
    """An out must not overlap itself or partly overlap an input (ATen's rules)."""
    check_overlap(api, out, *inputs)


def _check_errors(info, api, is_matrix):
    torch._linalg_check_errors(info, api, is_matrix=is_matrix)


def _dev(api, *tensors):
    return common_device(api, *[t for t in tensors if t is not None])


# -- LU ----------------------------------------------------------------------------------------------

def _check_lu_input(api, A, pivot):
    if A.dim() < 2:
        raise RuntimeError(f"{api}: Expected tensor with 2 or more dimensions. Got size: {list(A.shape)} instead")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    _check_dtype(api, A)


def _lu_factor_into(device, A, LU, pivots, info):
    nb = A.dim() - 2
    _launch(device, "getrf", nb, _ref(A), _ref(LU), _ref(pivots), _ref(info))


@OVERLOADS.implements("linalg_lu_factor_ex.out")
def linalg_lu_factor_ex_out(A, *, pivot=True, check_errors=False, LU, pivots, info):
    api = "torch.linalg.lu_factor_ex"
    _check_lu_input(api, A, pivot)
    device = _dev(api, A, LU, pivots, info)
    m, n = A.shape[-2:]
    batch = tuple(A.shape[:-2])
    LU = _out(api, LU, A.shape, A.dtype)
    pivots = _out(api, pivots, batch + (min(m, n),), torch.int32, fortran=False)
    info = _out(api, info, batch, torch.int32, fortran=False)
    for t in (LU, pivots, info):
        _writable(api, t, A)
    _lu_factor_into(device, A, LU, pivots, info)
    if check_errors:
        _check_errors(info, api, A.dim() == 2)
    return LU, pivots, info


@OVERLOADS.implements("linalg_lu_factor_ex")
def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    _check_dtype("torch.linalg.lu_factor_ex", A)
    device = _dev("torch.linalg.lu_factor_ex", A)
    m, n = A.shape[-2:] if A.dim() >= 2 else (0, 0)
    batch = tuple(A.shape[:-2])
    return linalg_lu_factor_ex_out(A, pivot=pivot, check_errors=check_errors,
                                   LU=_empty_f(A.shape, A.dtype, device),
                                   pivots=_empty(batch + (min(m, n),), torch.int32, device),
                                   info=_empty(batch, torch.int32, device))


def _lu_unpack_into(device, LU, pivots, P, L, U):
    nb = LU.dim() - 2
    _launch(device, "lu_unpack", nb, _ref(LU), _ref(pivots), None if P is None else _ref(P),
            None if L is None else _ref(L), None if U is None else _ref(U))


@OVERLOADS.implements("lu_unpack.out")
def lu_unpack_out(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, P, L, U):
    api = "torch.lu_unpack"
    if LU_data.dim() < 2:
        raise RuntimeError(f"{api}: Expected tensor with 2 or more dimensions. Got size: "
                           f"{list(LU_data.shape)} instead")
    if LU_pivots.dtype != torch.int32:
        raise RuntimeError("torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 "
                           f"dtype. Note: this function is intended to be used with the output produced by "
                           f"torch.linalg.lu_factor")
    _check_dtype(api, LU_data)
    device = _dev(api, LU_data, LU_pivots)
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    batch = tuple(LU_data.shape[:-2])
    if tuple(LU_pivots.shape) != batch + (k,):
        raise RuntimeError(f"{api}: the batch dimensions of LU_pivots and LU_data do not match: "
                           f"LU_pivots has shape {list(LU_pivots.shape)}, LU_data {list(LU_data.shape)}")
    if unpack_data:
        L = _out(api, L, batch + (m, k), LU_data.dtype, fortran=False)
        U = _out(api, U, batch + (k, n), LU_data.dtype, fortran=False)
    else:
        L = _out(api, L, (0,), LU_data.dtype, fortran=False)
        U = _out(api, U, (0,), LU_data.dtype, fortran=False)
    if unpack_pivots:
        P = _out(api, P, batch + (m, m), LU_data.dtype, fortran=False)
    else:
        P = _out(api, P, (0,), LU_data.dtype, fortran=False)
    for t in (P, L, U):
        _writable(api, t, LU_data, LU_pivots)
    _lu_unpack_into(device, LU_data, LU_pivots, P if unpack_pivots else None,
                    L if unpack_data else None, U if unpack_data else None)
    return P, L, U


@OVERLOADS.implements("lu_unpack")
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    device = _dev("torch.lu_unpack", LU_data, LU_pivots)
    e = lambda: _empty((0,), LU_data.dtype, device)
    return lu_unpack_out(LU_data, LU_pivots, unpack_data, unpack_pivots, P=e(), L=e(), U=e())


@OVERLOADS.implements("linalg_lu.out")
def linalg_lu_out(A, *, pivot=True, P, L, U):
    api = "torch.linalg.lu"
    _check_lu_input(api, A, pivot)
    device = _dev(api, A)
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = tuple(A.shape[:-2])
    LU = _empty_f(A.shape, A.dtype, device)
    piv = _empty(batch + (k,), torch.int32, device)
    info = _empty(batch, torch.int32, device)
    P = _out(api, P, batch + (m, m), A.dtype)
    L = _out(api, L, batch + (m, k), A.dtype)
    U = _out(api, U, batch + (k, n), A.dtype)
    for t in (P, L, U):
        _writable(api, t, A)
    _lu_factor_into(device, A, LU, piv, info)
    _lu_unpack_into(device, LU, piv, P, L, U)
    return P, L, U


@OVERLOADS.implements("linalg_lu")
def linalg_lu(A, *, pivot=True):
    _check_dtype("torch.linalg.lu", A)
    device = _dev("torch.linalg.lu", A)
    e = lambda: _empty((0,), A.dtype, device)
    return linalg_lu_out(A, pivot=pivot, P=e(), L=e(), U=e())


def _lu_solve_into(device, LU, pivots, B, X, left, adjoint):
    """X = A^-1 B (left) or B A^-1 from LU/pivots, batch broadcast; X has the broadcast shape."""
    batch = tuple(X.shape[:-2])
    n = LU.shape[-1]
    nb = len(batch)
    lu = _expanded(LU, batch + (n, n))
    piv = _expanded(pivots, batch + (n,))
    Bx = B.expand(batch + tuple(B.shape[-2:]))
    if left:
        _launch(device, "getrs", nb, lu, piv, _ref(Bx), _ref(X), bool(adjoint))
    else:   # X A = B  <=>  A^T X^T = B^T
        _launch(device, "getrs", nb, lu, piv, _ref(Bx.mT), _ref(X.mT), not adjoint)


@OVERLOADS.implements("linalg_lu_solve.out")
def linalg_lu_solve_out(LU, pivots, B, *, left=True, adjoint=False, out):
    api = "linalg.lu_solve"
    _check_dtype(api, LU, B)
    if LU.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor LU must have at least 2 dimensions.")
    if B.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    _check_matrix(api, LU, name="LU")
    _same_dtype(api, LU, B, "LU", "B")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"{api}: pivots should be a Tensor of scalar type int32. Got: {pivots.dtype}")
    n = LU.shape[-1]
    if left and B.shape[-2] != n:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation AX = B "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    if not left and B.shape[-1] != n:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation XA = B "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    if tuple(pivots.shape) != tuple(LU.shape[:-1]):
        raise RuntimeError(f"{api}: Incompatible shapes of LU and pivots: pivots must have shape "
                           f"{list(LU.shape[:-1])}, got {list(pivots.shape)}")
    device = _dev(api, LU, pivots, B)
    batch = broadcast_shape(tuple(LU.shape[:-2]), tuple(B.shape[:-2]))
    shape = batch + tuple(B.shape[-2:])
    out = _out(api, out, shape, B.dtype)
    _writable(api, out, LU, pivots, B)
    if out.numel():
        _lu_solve_into(device, LU, pivots, B, out, left, adjoint)
    return out


@OVERLOADS.implements("linalg_lu_solve")
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    device = _dev("linalg.lu_solve", LU, pivots, B)
    _check_dtype("linalg.lu_solve", LU, B)
    return linalg_lu_solve_out(LU, pivots, B, left=left, adjoint=adjoint, out=_empty((0,), B.dtype, device))


def _is_vector_rhs(A, B):
    return B.dim() == 1 or (A.dim() - 1 == B.dim() and tuple(B.shape) == tuple(A.shape[:-1]))


@OVERLOADS.implements("_linalg_solve_ex.result")
def _linalg_solve_ex_out(A, B, *, left=True, check_errors=False, result, LU, pivots, info):
    api = "torch.linalg.solve_ex"
    _check_dtype("linalg.solve", A, B)
    _check_matrix("linalg.solve", A)
    _same_dtype("linalg.solve", A, B)
    vector = _is_vector_rhs(A, B)
    if vector and not left:
        raise RuntimeError("linalg.solve: Vector broadcasting of the left hand side is not supported for left=False. "
                           "In this case linalg.solve is equivalent to B / A.squeeze(-1)")
    B_ = B.unsqueeze(-1) if vector else B
    n = A.shape[-1]
    if B_.dim() < 2 or (left and B_.shape[-2] != n) or (not left and B_.shape[-1] != n):
        rows, cols = (B_.shape[-2], B_.shape[-1]) if B_.dim() >= 2 else (B_.shape[-1], 1)
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation {eq} "
                           f"({n}x{n} and {rows}x{cols})")
    device = _dev(api, A, B, result, LU, pivots, info)
    batch_a = tuple(A.shape[:-2])
    batch = broadcast_shape(batch_a, tuple(B_.shape[:-2]))
    shape = batch + tuple(B_.shape[-2:])
    result = _out(api, result, shape[:-1] if vector else shape, A.dtype, fortran=not vector)
    LU = _out(api, LU, A.shape, A.dtype)
    pivots = _out(api, pivots, batch_a + (n,), torch.int32, fortran=False)
    info = _out(api, info, batch_a, torch.int32, fortran=False)
    for t in (result, LU, pivots, info):
        _writable(api, t, A, B)
    # As ATen 2.13's CPU: A itself is factored (the LU output is A's, which the backward reuses).
    _lu_factor_into(device, A, LU, pivots, info)
    if check_errors:
        _check_errors(info, api, A.dim() == 2)
    if result.numel():
        _lu_solve_into(device, LU, pivots, B_, result.unsqueeze(-1) if vector else result, left, False)
    return result, LU, pivots, info


@OVERLOADS.implements("_linalg_solve_ex")
def _linalg_solve_ex(A, B, *, left=True, check_errors=False):
    _check_dtype("linalg.solve", A, B)
    device = _dev("torch.linalg.solve_ex", A, B)
    e = lambda dt: _empty((0,), dt, device)
    return _linalg_solve_ex_out(A, B, left=left, check_errors=check_errors, result=e(A.dtype), LU=e(A.dtype),
                                pivots=e(torch.int32), info=e(torch.int32))


def _square_result_and_info(api, A, result, info):
    """The checks of an op on square matrices with a result shaped as A and an info per matrix;
    returns the device and the two outs (see _out)."""
    _check_dtype(api, A)
    _check_matrix(api, A)
    device = _dev(api, A, result, info)
    result = _out(api, result, A.shape, A.dtype)
    info = _out(api, info, A.shape[:-2], torch.int32, fortran=False)
    return device, result, info


@OVERLOADS.implements("linalg_inv_ex.inverse")
def linalg_inv_ex_out(A, *, check_errors=False, inverse, info):
    api = "linalg.inv"
    device, inverse, info = _square_result_and_info(api, A, inverse, info)
    _writable(api, inverse, A)
    n = A.shape[-1]
    # As ATen: inv(A) = solve(A, I); the identity is read broadcast.
    LU = _empty_f(A.shape, A.dtype, device)
    pivots = _empty(A.shape[:-1], torch.int32, device)
    _lu_factor_into(device, A, LU, pivots, info)
    if inverse.numel():
        eye = torch.eye(n, dtype=A.dtype, device=torch.device("emu", device)).expand(A.shape)
        _lu_solve_into(device, LU, pivots, eye, inverse, True, False)
    if check_errors:
        _check_errors(info, "linalg.inv_ex", A.dim() == 2)
    return inverse, info


@OVERLOADS.implements("linalg_inv_ex")
def linalg_inv_ex(A, *, check_errors=False):
    _check_dtype("linalg.inv", A)
    device = _dev("linalg.inv", A)
    return linalg_inv_ex_out(A, check_errors=check_errors, inverse=_empty_f(A.shape, A.dtype, device),
                             info=_empty(A.shape[:-2], torch.int32, device))


def _det_common(api, A):
    _check_dtype(api, A)
    _check_matrix(api, A)
    return _dev(api, A)


def _factor_for_det(api, device, A, LU, pivots, *results):
    """getrf of A into the LU/pivots outs (after the result outs were checked); returns them."""
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    LU = _out(api, LU, A.shape, A.dtype)
    pivots = _out(api, pivots, batch + (n,), torch.int32, fortran=False)
    for t in (*results, LU, pivots):
        _writable(api, t, A)
    info = _empty(batch, torch.int32, device)
    # As ATen: a contiguous A is factored as A^T (det(A^T) = det(A)); the backward relies on it.
    _lu_factor_into(device, A.mT if A.is_contiguous() else A, LU, pivots, info)
    return LU, pivots


@OVERLOADS.implements("_linalg_det.result")
def _linalg_det_out(A, *, result, LU, pivots):
    api = "linalg.det"
    device = _det_common(api, A)
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    result = _out(api, result, batch, A.dtype, fortran=False)
    LU, pivots = _factor_for_det(api, device, A, LU, pivots, result)
    if n == 0:
        result.fill_(1)
    elif result.numel():
        _launch(device, "lu_det", len(batch), _ref(LU), _ref(pivots), None, _ref(result))
    return result, LU, pivots


@OVERLOADS.implements("_linalg_det")
def _linalg_det(A):
    device = _det_common("linalg.det", A)
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    return _linalg_det_out(A, result=_empty(batch, A.dtype, device), LU=_empty_f(A.shape, A.dtype, device),
                           pivots=_empty(batch + (n,), torch.int32, device))


@OVERLOADS.implements("_linalg_slogdet.sign")
def _linalg_slogdet_out(A, *, sign, logabsdet, LU, pivots):
    api = "linalg.slogdet"
    device = _det_common(api, A)
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    sign = _out(api, sign, batch, A.dtype, fortran=False)
    logabsdet = _out(api, logabsdet, batch, A.dtype, fortran=False)
    LU, pivots = _factor_for_det(api, device, A, LU, pivots, sign, logabsdet)
    if n == 0:
        sign.fill_(1)
        logabsdet.fill_(0)
    elif sign.numel():
        _launch(device, "lu_det", len(batch), _ref(LU), _ref(pivots), _ref(sign), _ref(logabsdet))
    return sign, logabsdet, LU, pivots


@OVERLOADS.implements("_linalg_slogdet")
def _linalg_slogdet(A):
    device = _det_common("linalg.slogdet", A)
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    return _linalg_slogdet_out(A, sign=_empty(batch, A.dtype, device), logabsdet=_empty(batch, A.dtype, device),
                               LU=_empty_f(A.shape, A.dtype, device),
                               pivots=_empty(batch + (n,), torch.int32, device))


# -- Cholesky ----------------------------------------------------------------------------------------

@OVERLOADS.implements("linalg_cholesky_ex.L")
def linalg_cholesky_ex_out(A, *, upper=False, check_errors=False, L, info):
    api = "linalg.cholesky"
    device, L, info = _square_result_and_info(api, A, L, info)
    for t in (L, info):
        _writable(api, t, A)
    _launch(device, "potrf", A.dim() - 2, _ref(A), _ref(L), _ref(info), bool(upper))
    if check_errors:
        _check_errors(info, "torch.linalg.cholesky_ex", A.dim() == 2)
    return L, info


@OVERLOADS.implements("linalg_cholesky_ex")
def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    _check_dtype("linalg.cholesky", A)
    device = _dev("linalg.cholesky", A)
    return linalg_cholesky_ex_out(A, upper=upper, check_errors=check_errors, L=_empty_f(A.shape, A.dtype, device),
                                  info=_empty(A.shape[:-2], torch.int32, device))


@OVERLOADS.implements("cholesky.out")
def cholesky_out(self, upper=False, *, out):
    api = "cholesky"
    _check_dtype(api, self)
    _check_matrix(api, self)
    device = _dev(api, self, out)
    out = _out(api, out, self.shape, self.dtype)
    _writable(api, out, self)
    info = _empty(self.shape[:-2], torch.int32, device)
    _launch(device, "potrf", self.dim() - 2, _ref(self), _ref(out), _ref(info), bool(upper))
    _check_errors(info, "cholesky", self.dim() == 2)
    return out


@OVERLOADS.implements("cholesky")
def cholesky(self, upper=False):
    _check_dtype("cholesky", self)
    device = _dev("cholesky", self)
    return cholesky_out(self, upper, out=_empty((0,), self.dtype, device))


@OVERLOADS.implements("cholesky_inverse.out")
def cholesky_inverse_out(self, upper=False, *, out):
    api = "cholesky_inverse"
    _check_dtype(api, self)
    _check_matrix(api, self, name="input")
    device = _dev(api, self, out)
    out = _out(api, out, self.shape, self.dtype)
    _writable(api, out, self)
    if out.numel():
        _launch(device, "potri", self.dim() - 2, _ref(self), _ref(out), bool(upper))
    return out


@OVERLOADS.implements("cholesky_inverse")
def cholesky_inverse(self, upper=False):
    _check_dtype("cholesky_inverse", self)
    device = _dev("cholesky_inverse", self)
    return cholesky_inverse_out(self, upper, out=_empty_f(self.shape, self.dtype, device))


@OVERLOADS.implements("_cholesky_solve_helper")
def _cholesky_solve_helper(self, A, upper):
    """cholesky_solve (CompositeExplicit) has broadcast self and A already."""
    api = "cholesky_solve"
    _check_dtype(api, self, A)
    device = _dev(api, self, A)
    out = _empty_f(self.shape, self.dtype, device)
    if out.numel():
        _launch(device, "potrs", self.dim() - 2, _ref(A), _ref(self), _ref(out), bool(upper))
    return out


# -- LDL^T -------------------------------------------------------------------------------------------

@OVERLOADS.implements("linalg_ldl_factor_ex.out")
def linalg_ldl_factor_ex_out(self, *, hermitian=False, check_errors=False, LD, pivots, info):
    api = "torch.linalg.ldl_factor_ex"
    _check_dtype(api, self)
    _check_matrix(api, self)
    device = _dev(api, self, LD, pivots, info)
    LD = _out(api, LD, self.shape, self.dtype)
    pivots = _out(api, pivots, self.shape[:-1], torch.int32, fortran=False)
    info = _out(api, info, self.shape[:-2], torch.int32, fortran=False)
    for t in (LD, pivots, info):
        _writable(api, t, self)
    _launch(device, "sytrf", self.dim() - 2, _ref(self), _ref(LD), _ref(pivots), _ref(info))
    if check_errors:
        _check_errors(info, api, self.dim() == 2)
    return LD, pivots, info


@OVERLOADS.implements("linalg_ldl_factor_ex")
def linalg_ldl_factor_ex(self, *, hermitian=False, check_errors=False):
    _check_dtype("torch.linalg.ldl_factor_ex", self)
    device = _dev("torch.linalg.ldl_factor_ex", self)
    return linalg_ldl_factor_ex_out(self, hermitian=hermitian, check_errors=check_errors,
                                    LD=_empty_f(self.shape, self.dtype, device),
                                    pivots=_empty(self.shape[:-1], torch.int32, device),
                                    info=_empty(self.shape[:-2], torch.int32, device))


@OVERLOADS.implements("linalg_ldl_solve.out")
def linalg_ldl_solve_out(LD, pivots, B, *, hermitian=False, out):
    api = "torch.linalg.ldl_solve"
    _check_dtype(api, LD, B)
    if LD.dim() < 2:
        raise RuntimeError(f"{api}: Expected LD to have at least 2 dimensions, but it has {LD.dim()} dimensions instead")
    if B.dim() < 2:
        raise RuntimeError(f"{api}: Expected B to have at least 2 dimensions, but it has {B.dim()} dimensions instead")
    _check_matrix(api, LD, name="LD")
    _same_dtype(api, LD, B, "LD", "B")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"{api}: Expected pivots to be integers. Got {pivots.dtype}")
    n = LD.shape[-1]
    if B.shape[-2] != n:
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation AX = B "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    device = _dev(api, LD, pivots, B)
    batch = broadcast_shape(tuple(LD.shape[:-2]), tuple(B.shape[:-2]))
    out = _out(api, out, batch + tuple(B.shape[-2:]), B.dtype)
    _writable(api, out, LD, pivots, B)
    if out.numel():
        _launch(device, "sytrs", len(batch), _expanded(LD, batch + (n, n)), _expanded(pivots, batch + (n,)),
                _expanded(B, batch + tuple(B.shape[-2:])), _ref(out))
    return out


@OVERLOADS.implements("linalg_ldl_solve")
def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    device = _dev("torch.linalg.ldl_solve", LD, pivots, B)
    _check_dtype("torch.linalg.ldl_solve", LD, B)
    return linalg_ldl_solve_out(LD, pivots, B, hermitian=hermitian, out=_empty((0,), B.dtype, device))


# -- QR ----------------------------------------------------------------------------------------------

@OVERLOADS.implements("linalg_qr.out")
def linalg_qr_out(A, mode="reduced", *, Q, R):
    api = "linalg.qr"
    _check_dtype(api, A)
    if A.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
                           "'r', or 'complete'")
    device = _dev(api, A, Q, R)
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = tuple(A.shape[:-2])
    qcols, rrows = (m, m) if mode == "complete" else (k, k)
    R = _out(api, R, batch + (rrows, n), A.dtype)
    Q = _out(api, Q, (0,) if mode == "r" else batch + (m, qcols), A.dtype)
    for t in (Q, R):
        _writable(api, t, A)
    if m and n or (Q.numel() and mode != "r"):
        _launch(device, "qr", len(batch), _ref(A), None if mode == "r" else _ref(Q), _ref(R), None,
                0 if mode == "r" else qcols, rrows)
    return Q, R


@OVERLOADS.implements("linalg_qr")
def linalg_qr(A, mode="reduced"):
    _check_dtype("linalg.qr", A)
    device = _dev("linalg.qr", A)
    return linalg_qr_out(A, mode, Q=_empty((0,), A.dtype, device), R=_empty((0,), A.dtype, device))


@OVERLOADS.implements("geqrf.a")
def geqrf_out(self, *, a, tau):
    api = "geqrf"
    _check_dtype(api, self)
    if self.dim() < 2:
        raise RuntimeError(f"torch.geqrf: input must have at least 2 dimensions.")
    device = _dev(api, self, a, tau)
    m, n = self.shape[-2:]
    batch = tuple(self.shape[:-2])
    a = _out(api, a, self.shape, self.dtype)
    tau = _out(api, tau, batch + (min(m, n),), self.dtype, fortran=False)
    for t in (a, tau):
        _writable(api, t, self)
    if a.numel():
        _launch(device, "qr", len(batch), _ref(self), _ref(a), None, _ref(tau), 0, 0)
    return a, tau


@OVERLOADS.implements("geqrf")
def geqrf(self):
    _check_dtype("geqrf", self)
    device = _dev("geqrf", self)
    return geqrf_out(self, a=_empty((0,), self.dtype, device), tau=_empty((0,), self.dtype, device))


@OVERLOADS.implements("linalg_householder_product.out")
def linalg_householder_product_out(input, tau, *, out):
    api = "torch.linalg.householder_product"
    _check_dtype(api, input, tau)
    if input.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    m, n = input.shape[-2:]
    if m < n:
        raise RuntimeError(f"{api}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if tau.shape[-1] > n:
        raise RuntimeError(f"{api}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if input.dim() - tau.dim() != 1:
        raise RuntimeError(f"{api}: Expected tau to have one dimension less than input, but got tau.ndim equal "
                           f"to {tau.dim()} and input.ndim is equal to {input.dim()}")
    if tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
        raise RuntimeError(f"{api}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    _same_dtype(api, input, tau, "input", "tau")
    device = _dev(api, input, tau, out)
    out = _out(api, out, input.shape, input.dtype)
    _writable(api, out, input, tau)
    if out.numel():
        _launch(device, "orgqr", input.dim() - 2, _ref(input), _ref(tau), _ref(out))
    return out


@OVERLOADS.implements("linalg_householder_product")
def linalg_householder_product(input, tau):
    _check_dtype("torch.linalg.householder_product", input, tau)
    device = _dev("torch.linalg.householder_product", input, tau)
    return linalg_householder_product_out(input, tau, out=_empty_f(input.shape, input.dtype, device))


@OVERLOADS.implements("ormqr.out")
def ormqr_out(self, input2, input3, left=True, transpose=False, *, out):
    api = "torch.ormqr"
    _check_dtype(api, self, input2, input3)
    if self.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if input3.dim() < 2:
        raise RuntimeError(f"{api}: other must have at least 2 dimensions.")
    left_size = -2 if left else -1
    if input3.shape[left_size] != self.shape[-2]:
        raise RuntimeError(f"{api}: other.shape[{left_size}] must be equal to input.shape[-2]")
    if input2.shape[-1] > self.shape[-1]:
        raise RuntimeError(f"{api}: tau.shape[-1] must be less than or equal to input.shape[-1]")
    _same_dtype(api, self, input2, "input", "tau")
    _same_dtype(api, self, input3, "input", "other")
    device = _dev(api, self, input2, input3, out)
    out = _out(api, out, input3.shape, input3.dtype)
    _writable(api, out, self, input2, input3)
    if out.numel():
        _launch(device, "ormqr", input3.dim() - 2, _ref(self), _ref(input2), _ref(input3), _ref(out),
                bool(left), bool(transpose))
    return out


@OVERLOADS.implements("ormqr")
def ormqr(self, input2, input3, left=True, transpose=False):
    _check_dtype("torch.ormqr", self, input2, input3)
    device = _dev("torch.ormqr", self, input2, input3)
    return ormqr_out(self, input2, input3, left, transpose, out=_empty_f(input3.shape, input3.dtype, device))


# -- eigen and singular value decompositions -------------------------------------------------------

@OVERLOADS.implements("_linalg_eigh.eigenvalues")
def _linalg_eigh_out(A, UPLO="L", compute_v=True, *, eigenvalues, eigenvectors):
    api = "linalg.eigh"
    _check_dtype(api, A)
    _check_matrix(api, A)
    if UPLO not in ("L", "U", "l", "u"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    device = _dev(api, A, eigenvalues, eigenvectors)
    n = A.shape[-1]
    eigenvalues = _out(api, eigenvalues, A.shape[:-1], A.dtype, fortran=False)
    eigenvectors = _out(api, eigenvectors, A.shape if compute_v else (0,), A.dtype)
    for t in (eigenvalues, eigenvectors):
        _writable(api, t, A)
    if n:
        _launch(device, "syevd", A.dim() - 2, _ref(A), _ref(eigenvalues),
                _ref(eigenvectors) if compute_v else None, UPLO.upper() == "U")
    return eigenvalues, eigenvectors


@OVERLOADS.implements("_linalg_eigh")
def _linalg_eigh(A, UPLO="L", compute_v=True):
    _check_dtype("linalg.eigh", A)
    device = _dev("linalg.eigh", A)
    return _linalg_eigh_out(A, UPLO, compute_v, eigenvalues=_empty((0,), A.dtype, device),
                            eigenvectors=_empty((0,), A.dtype, device))


@OVERLOADS.implements("_linalg_svd.U")
def _linalg_svd_out(A, full_matrices=False, compute_uv=True, *, driver=None, U, S, Vh):
    api = "linalg.svd"
    _check_dtype(api, A)
    if A.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")
    device = _dev(api, A, U, S, Vh)
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = tuple(A.shape[:-2])
    S = _out(api, S, batch + (k,), A.dtype, fortran=False)
    if compute_uv:
        U = _out(api, U, batch + ((m, m) if full_matrices else (m, k)), A.dtype)
        Vh = _out(api, Vh, batch + ((n, n) if full_matrices else (k, n)), A.dtype)
    else:
        U = _out(api, U, (0,), A.dtype, fortran=False)
        Vh = _out(api, Vh, (0,), A.dtype, fortran=False)
    for t in (U, S, Vh):
        _writable(api, t, A)
    if k:
        _launch(device, "gesdd", len(batch), _ref(A), _ref(U) if compute_uv else None, _ref(S),
                _ref(Vh) if compute_uv else None, bool(full_matrices))
    elif compute_uv and full_matrices:   # an empty matrix: the identities, as CPU
        for t, size in ((U, m), (Vh, n)):
            if t.numel():
                t.copy_(torch.eye(size, dtype=A.dtype, device=t.device).expand(t.shape))
    return U, S, Vh


@OVERLOADS.implements("_linalg_svd")
def _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    _check_dtype("linalg.svd", A)
    device = _dev("linalg.svd", A)
    e = lambda: _empty((0,), A.dtype, device)
    return _linalg_svd_out(A, full_matrices, compute_uv, driver=driver, U=e(), S=e(), Vh=e())


def _eig_checks(api, A):
    _check_dtype(api, A)
    _check_matrix(api, A)
    device = _dev(api, A)
    if A.numel() and not bool(torch.isfinite(A).all()):   # CPU's check (a host sync, as on CPU)
        raise RuntimeError(f"{api}: input tensor should not contain infs or NaNs.")
    return device


@OVERLOADS.implements("linalg_eig.out")
def linalg_eig_out(A, *, eigenvalues, eigenvectors):
    api = "torch.linalg.eig"
    device = _eig_checks(api, A)
    cdtype = _COMPLEX_OF[A.dtype]
    eigenvalues = _out(api, eigenvalues, A.shape[:-1], cdtype, fortran=False)
    eigenvectors = _out(api, eigenvectors, A.shape, cdtype)
    for t in (eigenvalues, eigenvectors):
        _writable(api, t, A)
    if A.shape[-1]:
        _launch(device, "geev", A.dim() - 2, _ref(A), _ref(eigenvalues), _ref(eigenvectors))
    return eigenvalues, eigenvectors


@OVERLOADS.implements("linalg_eig")
def linalg_eig(A):
    device = _eig_checks("torch.linalg.eig", A)
    cdtype = _COMPLEX_OF[A.dtype]
    return linalg_eig_out(A, eigenvalues=_empty(A.shape[:-1], cdtype, device),
                          eigenvectors=_empty_f(A.shape, cdtype, device))


@OVERLOADS.implements("_linalg_eigvals")
def _linalg_eigvals(A):
    api = "torch.linalg.eigvals"
    device = _eig_checks(api, A)
    w = _empty(A.shape[:-1], _COMPLEX_OF[A.dtype], device)
    if A.shape[-1] and w.numel():
        _launch(device, "geev", A.dim() - 2, _ref(A), _ref(w), None)
    return w


# -- least squares -----------------------------------------------------------------------------------

_DRIVERS = {"gelsy": 0, "gels": 1, "gelsd": 2, "gelss": 3}


@OVERLOADS.implements("linalg_lstsq.out")
def linalg_lstsq_out(self, b, rcond=None, *, driver=None, solution, residuals, rank, singular_values):
    api = "torch.linalg.lstsq"
    _check_dtype(api, self, b)
    if self.dim() < 2:
        raise RuntimeError(f"{api}: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError(f"{api}: other must have at least 1 dimension.")
    _same_dtype(api, self, b, "input", "other")
    driver = "gelsy" if driver is None else driver
    if driver not in _DRIVERS:
        raise RuntimeError(f"{api}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = b.dim() == self.dim() - 1
    B = b.unsqueeze(-1) if vector else b
    m, n = self.shape[-2:]
    if B.shape[-2] != m:
        raise RuntimeError(f"{api}: input.size(-2) should match other.size(-{1 if vector else 2})")
    device = _dev(api, self, b)
    nrhs = B.shape[-1]
    batch = broadcast_shape(tuple(self.shape[:-2]), tuple(B.shape[:-2]))
    if rcond is None:
        rcond = torch.finfo(self.dtype).eps * max(m, n)
    big = max(m, n)
    # LAPACK's B on exit: max(m, n) x nrhs per batch, column-major; the solution is its first n rows.
    work = _empty_f(batch + (big, nrhs), self.dtype, device)
    solution = _out(api, solution, batch + ((n,) if vector else (n, nrhs)), self.dtype, fortran=not vector)
    want_rank = driver != "gels"
    want_sv = driver in ("gelsd", "gelss")
    rank = _out(api, rank, batch if want_rank else (0,), torch.int64, fortran=False)
    singular_values = _out(api, singular_values, batch + (min(m, n),) if want_sv else (0,), self.dtype, fortran=False)
    rank_scratch = rank if want_rank else _empty(batch, torch.int64, device)
    sv_scratch = singular_values if want_sv else None
    for t in (solution, residuals, rank, singular_values):
        _writable(api, t, self, b)
    if m == 0 or n == 0:
        work.zero_()
        if want_rank:
            rank.zero_()
        if want_sv:
            singular_values.zero_()
    elif work.numel():
        _launch(device, "gels", len(batch), _expanded(self, batch + (m, n)), _expanded(B, batch + (m, nrhs)),
                _ref(work), _ref(rank_scratch), None if sv_scratch is None else _ref(sv_scratch),
                _DRIVERS[driver], float(rcond))
    sol = work[..., :n, :]
    solution.copy_(sol.squeeze(-1) if vector else sol)
    compute_residuals = m > n and driver != "gelsy"
    if compute_residuals and driver in ("gelsd", "gelss"):
        compute_residuals = bool((rank_scratch == n).all())   # a host sync, as CPU's check
    if compute_residuals:
        raw = work[..., n:, :]
        res = (raw * raw).sum(-2)
        _out(api, residuals, tuple(res.shape), self.dtype, fortran=False)   # (.., 1) for a vector b too, as CPU
        residuals.copy_(res)
    else:
        _out(api, residuals, (0,), self.dtype, fortran=False)
    return solution, residuals, rank, singular_values


# -- triangular solves -------------------------------------------------------------------------------

def _trsm_into(device, A, B, X, upper, left, unitriangular, transpose=False):
    batch = tuple(X.shape[:-2])
    na = A.shape[-1]
    _launch(device, "trsm", len(batch), _expanded(A, batch + (na, na)), _expanded(B, batch + tuple(B.shape[-2:])),
            _ref(X), bool(upper), bool(left), bool(transpose), bool(unitriangular))


@OVERLOADS.implements("linalg_solve_triangular.out")
def linalg_solve_triangular_out(self, B, *, upper, left=True, unitriangular=False, out):
    api = "linalg.solve_triangular"
    _check_dtype(api, self, B)
    if self.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if B.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    _check_matrix(api, self)
    _same_dtype(api, self, B)
    n = self.shape[-1]
    if (left and B.shape[-2] != n) or (not left and B.shape[-1] != n):
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{api}: Incompatible shapes of A and B for the equation {eq} "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    device = _dev(api, self, B, out)
    batch = broadcast_shape(tuple(self.shape[:-2]), tuple(B.shape[:-2]))
    out = _out(api, out, batch + tuple(B.shape[-2:]), B.dtype)
    _writable(api, out, self, B)
    if out.numel():
        _trsm_into(device, self, B, out, upper, left, unitriangular)
    return out


@OVERLOADS.implements("linalg_solve_triangular")
def linalg_solve_triangular(self, B, *, upper, left=True, unitriangular=False):
    _check_dtype("linalg.solve_triangular", self, B)
    device = _dev("linalg.solve_triangular", self, B)
    return linalg_solve_triangular_out(self, B, upper=upper, left=left, unitriangular=unitriangular,
                                       out=_empty((0,), B.dtype, device))


@OVERLOADS.implements("triangular_solve.X")
def triangular_solve_out(self, A, upper=True, transpose=False, unitriangular=False, *, X, M):
    api = "triangular_solve"
    _check_dtype(api, self, A)
    if self.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected b to have at least 2 dimensions, but it has "
                           f"{self.dim()} dimensions instead")
    if A.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected A to have at least 2 dimensions, but it has "
                           f"{A.dim()} dimensions instead")
    _check_matrix(api, A)
    _same_dtype(api, self, A, "b", "A")
    n = A.shape[-1]
    if self.shape[-2] != n:
        raise RuntimeError(f"Incompatible matrix sizes for triangular_solve: each A matrix is {n} by {n} but each "
                           f"b matrix is {self.shape[-2]} by {self.shape[-1]}")
    device = _dev(api, self, A, X, M)
    batch = broadcast_shape(tuple(self.shape[:-2]), tuple(A.shape[:-2]))
    X = _out(api, X, batch + tuple(self.shape[-2:]), self.dtype)
    M = _out(api, M, batch + (n, n), A.dtype)
    for t in (X, M):
        _writable(api, t, self, A)
    M.copy_(A.expand(batch + (n, n)))
    if X.numel():
        _trsm_into(device, A, self, X, upper, True, unitriangular, transpose)
    return X, M


@OVERLOADS.implements("triangular_solve")
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    _check_dtype("triangular_solve", self, A)
    device = _dev("triangular_solve", self, A)
    return triangular_solve_out(self, A, upper, transpose, unitriangular, X=_empty((0,), self.dtype, device),
                                M=_empty((0,), A.dtype, device))


# -- composites: cross and trace ---------------------------------------------------------------------

@OVERLOADS.implements("linalg_cross.out")
@composite
def linalg_cross_out(self, other, *, dim=-1, out):
    api = "linalg.cross"
    if self.dim() != other.dim():
        raise RuntimeError(f"{api}: inputs must have the same number of dimensions.")
    if not -self.dim() <= dim < max(self.dim(), 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-self.dim()}, {self.dim() - 1}], "
                         f"but got {dim})")
    d = dim % self.dim()
    if self.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"{api}: inputs dimension {dim} must have length 3. Got {self.shape[d]} and "
                           f"{other.shape[d]}")
    shape = broadcast_shape(tuple(self.shape), tuple(other.shape))
    dtype = torch.result_type(self, other)
    _dev(api, self, other, out)
    if out.dtype != dtype:
        raise RuntimeError(f"{api}: result type {dtype} can't be cast to the desired output type {out.dtype}")
    resize_out(out, shape)
    check_overlap(api, out, self, other)
    a, b = self.expand(shape), other.expand(shape)
    ai = [a.select(d, i) for i in range(3)]
    bi = [b.select(d, i) for i in range(3)]
    # all three parts are computed before out is written: out may alias an input exactly
    parts = [ai[1] * bi[2] - ai[2] * bi[1], ai[2] * bi[0] - ai[0] * bi[2], ai[0] * bi[1] - ai[1] * bi[0]]
    for i, p in enumerate(parts):
        out.select(d, i).copy_(p)
    return out


@OVERLOADS.implements("linalg_cross")
@composite
def linalg_cross(self, other, *, dim=-1):
    device = _dev("linalg.cross", self, other)
    return linalg_cross_out(self, other, dim=dim, out=_empty((0,), torch.result_type(self, other), device))


@OVERLOADS.implements("trace")
@composite
def trace(self):
    if self.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.dim()}")
    _dev("trace", self)
    return self.diagonal().sum()


# -- matrix exponential: a composite of device matrix products ---------------------------------------
# ATen's algorithm (Bader, Blanes, Casas 2019): per matrix, the 1-norm picks a Taylor-type
# approximant of degree 1, 2, 4, 8, 12 or 18; past the degree-18 bound the matrix is scaled by
# 2^-s, approximated at degree 18 and squared s times. The degree choice reads the norms on the
# host (one synchronisation, as ATen's CPU path decides on the host too).

_MEXP_THETAS = {
    torch.float32: (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
                    5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00),
    torch.float64: (2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
                    4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00),
}
_SQRT_177 = 0.1330413469565007072504e+2
_T12_B = ((9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740),
          (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031, 0.01108844528519167989),
          (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968, 0.00610700528898058230),
          (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079, -0.00675951846863086359))
_T18_B = ((0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.),
          (0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
           -6.37898194594723280150e-04),
          (-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
           -6.98210122488052056106e-03, 3.34975017086070470649e-05),
          (-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
           2.95552570429315521194e-02, -1.39180257516060693404e-05),
          (0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05))


def _powers(A, count):
    """[I, A, A^2, A^3, A^6][:count] of a (b, n, n) batch."""
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
    powers = [eye, A]
    if count > 2:
        powers.append(A @ A)
    if count > 3:
        powers.append(A @ powers[2])
    if count > 4:
        powers.append(powers[3] @ powers[3])
    return powers[:count]


def _combine(powers, coefficients):
    out = None
    for p, c in zip(powers, coefficients):
        if c == 0:
            continue
        term = p * c
        out = term if out is None else out + term
    return out if out is not None else torch.zeros_like(powers[0])


def _mexp_t(degree, A):
    if degree == 1:
        I, A1 = _powers(A, 2)
        return I + A1
    if degree == 2:
        I, A1, A2 = _powers(A, 3)
        return I + A1 + A2 / 2.0
    if degree == 4:
        I, A1, A2 = _powers(A, 3)
        return I + A1 + A2 @ _combine((I, A1, A2), (1 / 2.0, 1 / 6.0, 1 / 24.0))
    if degree == 8:
        x3 = 2.0 / 3.0
        x1 = x3 * ((1.0 + _SQRT_177) / 88.0)
        x2 = x3 * ((1.0 + _SQRT_177) / 352.0)
        x4 = (-271.0 + 29.0 * _SQRT_177) / (315.0 * x3)
        x5 = (-11.0 + 11.0 * _SQRT_177) / (1260.0 * x3)
        x6 = (-99.0 + 11.0 * _SQRT_177) / (5040.0 * x3)
        x7 = (89.0 - _SQRT_177) / (5040.0 * x3)
        y2 = (857.0 - 58.0 * _SQRT_177) / 630.0
        I, A1, A2 = _powers(A, 3)
        A4 = A2 @ _combine((A1, A2), (x1, x2))
        A8 = _combine((A2, A4), (x3, 1.0)) @ _combine((I, A1, A2, A4), (x4, x5, x6, x7))
        return _combine((I, A1, A2, A8), (1.0, 1.0, y2, 1.0))
    if degree == 12:
        powers = _powers(A, 4)
        B = [_combine(powers, row) for row in _T12_B]
        B2 = B[2] + B[3] @ B[3]
        return B[0] + (B[1] + B2) @ B2
    powers = _powers(A, 5)
    B = [_combine(powers, row) for row in _T18_B]
    B3 = B[3] + B[0] @ B[4]
    return B[1] + (B[2] + B3) @ B3


@OVERLOADS.implements("linalg_matrix_exp")
@composite
def linalg_matrix_exp(self):
    api = "linalg.matrix_exp"
    _check_dtype(api, self)
    _check_matrix(api, self)
    _dev(api, self)
    n = self.shape[-1]
    if n == 0 or self.numel() == 0:
        return self.clone()
    if n == 1:
        return self.exp()
    A = self.reshape(-1, n, n)
    thetas = _MEXP_THETAS[self.dtype]
    refuse_in_projection("aten::linalg_matrix_exp", "reads each matrix's norm on the host to choose its degree")
    norms = A.abs().sum(-2).amax(-1).cpu().tolist()     # the host decides each matrix's degree
    result = torch.full_like(A, float("nan"), memory_format=torch.contiguous_format)
    degrees = (1, 2, 4, 8, 12)
    groups = {}
    for i, norm in enumerate(norms):
        degree = 18 if norm >= thetas[4] else None    # ATen's degree-18 pass wins at the boundary
        for d, (low, high) in zip(degrees, zip((-1.0,) + thetas[:4], thetas[:5])):
            if degree is None and low < norm <= high:
                degree = d
        if degree is not None:            # a NaN norm keeps the NaN fill, as ATen
            groups.setdefault(degree, []).append(i)
    for degree, rows in groups.items():
        sub = A[rows[0]:rows[0] + 1] if len(rows) == 1 else torch.stack([A[i] for i in rows])
        if degree < 18:
            value = _mexp_t(degree, sub)
        else:
            squarings = [max(0, math.ceil(math.log2(norms[i] / thetas[5]))) if norms[i] > 0 else 0 for i in rows]
            scale = torch.tensor([2.0 ** -s for s in squarings], dtype=A.dtype).to(A.device).reshape(-1, 1, 1)
            value = _mexp_t(18, sub * scale)
            parts = []
            for j, s in enumerate(squarings):
                m = value[j]
                for _ in range(s):
                    m = m @ m
                parts.append(m)
            value = torch.stack(parts)
        for j, i in enumerate(rows):
            result[i].copy_(value[j])
    return result.reshape(self.shape)
