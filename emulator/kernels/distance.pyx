# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Pairwise distance kernels of the device's vector engine: cdist / pdist and their gradients.

p-norm distances between the rows of two (B, R, M) operands (or the upper triangle of one, for
pdist), computed in float32 (float64 for float64) and rounded once; the backward pass gives the
gradient with respect to the first operand.
Left out: tiling and timing (library.py holds the cost models); the matrix-multiply formulation
of euclidean distances (distances are always computed directly, whatever compute_mode says).
"""

from libc.stdlib cimport calloc, malloc, free
from libc.math cimport fabs, floor, ceil, floorf, INFINITY
from libc.stdint cimport INT64_MIN

include "_common.pxi"
include "_spatial.pxi"


# -- pairwise distances (cdist, pdist) and their gradients

from libc.math cimport pow as c_pow, sqrt as c_sqrt, isinf as c_isinf


cdef inline real_t _dist(const char* a, Py_ssize_t sa, const char* b, Py_ssize_t sb, int dt, Py_ssize_t m,
                         double p, real_t kind) noexcept nogil:
    cdef Py_ssize_t k
    cdef real_t s = 0, u, w, d
    for k in range(m):
        load_block(a + k * sa, 0, dt, 1, &u)
        load_block(b + k * sb, 0, dt, 1, &w)
        d = fabs(u - w)
        if p == 0:
            s = s + (d != 0)
        elif p == 1:
            s = s + d
        elif p == 2:
            s = s + d * d
        elif c_isinf(p):
            if d > s or d != d:
                s = d
        else:
            s = s + <real_t>c_pow(d, p)
    if p == 2:
        return <real_t>c_sqrt(s)
    if p == 0 or p == 1 or c_isinf(p):
        return s
    return <real_t>c_pow(s, 1.0 / p)


cdef inline real_t _dist_grad(real_t diff, real_t dist, double p) noexcept nogil:
    """d dist / d x1 of one coordinate difference x1 - x2 (CPU's Distance kernels' rules)."""
    if p == 0 or dist == 0:
        return 0
    if p == 1:
        return (diff > 0) - (diff < 0)
    if p == 2:
        return diff / dist
    if c_isinf(p):
        return ((diff > 0) - (diff < 0)) * (fabs(diff) == dist)
    if p < 2:
        return ((diff > 0) - (diff < 0)) * <real_t>c_pow(fabs(diff), p - 1) / <real_t>c_pow(dist, p - 1)
    return diff * <real_t>c_pow(fabs(diff), p - 2) / <real_t>c_pow(dist, p - 1)


cdef struct Pairs:
    Py_ssize_t B, P, R, M
    Py_ssize_t as_[3]      # x1 (B, P, M), bytes
    Py_ssize_t bs[3]       # x2 (B, R, M), bytes
    Py_ssize_t ds[3]       # distances (B, P, R), or (1, 1, pairs) when condensed, bytes
    int adt, bdt, ddt
    bint condensed         # pdist: x2 is x1, distances are the condensed upper triangle


cdef inline Py_ssize_t _pair(Pairs* q, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    # condensed index of i < j among P rows
    return q.P * i - i * (i + 1) // 2 + j - i - 1


cdef void _pairwise(Pairs* q, const char* a, const char* b, char* d, double p, real_t kind) noexcept nogil:
    cdef Py_ssize_t n, i, j
    cdef real_t r
    for n in range(q.B):
        for i in range(q.P):
            for j in range(i + 1 if q.condensed else 0, q.R):
                r = _dist(a + n * q.as_[0] + i * q.as_[1], q.as_[2], b + n * q.bs[0] + j * q.bs[1], q.bs[2],
                          q.adt, q.M, p, kind)
                if q.condensed:
                    store_block(&r, 1, q.ddt, d + _pair(q, i, j) * q.ds[2], 0)
                else:
                    store_block(&r, 1, q.ddt, d + n * q.ds[0] + i * q.ds[1] + j * q.ds[2], 0)


cdef int _pairs_args(Pairs* q, object a_shape, object a_strides, int adt, object b_shape, object b_strides, int bdt,
                     object d_strides, int ddt, bint condensed, str what) except -1:
    cdef Py_ssize_t ash[3]
    cdef Py_ssize_t bsh[3]
    _shape(a_shape, 3, ash, what)
    _shape(b_shape, 3, bsh, what)
    if ash[0] != bsh[0] or ash[2] != bsh[2] or (condensed and (ash[0] != 1 or bsh[1] != ash[1])):
        raise KernelArgumentError(f"{what}: mismatched operands {tuple(a_shape)!r} {tuple(b_shape)!r}")
    q.B, q.P, q.M, q.R = ash[0], ash[1], ash[2], bsh[1]
    q.adt, q.bdt, q.ddt, q.condensed = adt, bdt, ddt, condensed
    _byte_strides(a_strides, 3, adt, q.as_, what)
    _byte_strides(b_strides, 3, bdt, q.bs, what)
    _byte_strides(d_strides, 3, ddt, q.ds, what)
    if adt != bdt or adt != ddt:
        raise KernelArgumentError(f"{what}: operands of one dtype expected")
    return 0


def pairwise_distance(d_addr, d_dtype, d_strides, a_addr, a_dtype, a_strides, a_shape, b_addr, b_dtype, b_strides,
                      b_shape, p, condensed):
    """d (B, P, R) = p-norm distances of the rows of a (B, P, M) and b (B, R, M) (cdist), or with
    ``condensed`` the pdist vector of a (1, P, M)'s pairs i < j (b is a). p = 0 counts nonzero
    differences, p = inf takes the max. float32 arithmetic (float64 for float64)."""
    cdef int ddt = check_dtype(d_dtype, "pairwise_distance d_dtype")
    cdef int adt = check_dtype(a_dtype, "pairwise_distance a_dtype")
    cdef int bdt = check_dtype(b_dtype, "pairwise_distance b_dtype")
    cdef Pairs q
    cdef double pv = float(p)
    cdef char* d
    cdef const char* a = NULL
    cdef const char* b = NULL
    _floating(adt, "pairwise_distance")
    if pv < 0 or pv != pv:
        raise KernelArgumentError(f"pairwise_distance: p must be a non-negative number, got {p!r}")
    _pairs_args(&q, a_shape, a_strides, adt, b_shape, b_strides, bdt, d_strides, ddt, bool(condensed),
                "pairwise_distance")
    if q.B * q.P * q.R == 0:
        return
    d = as_ptr(d_addr, "pairwise_distance d_addr")
    if q.M:
        a = as_ptr(a_addr, "pairwise_distance a_addr")
        b = as_ptr(b_addr, "pairwise_distance b_addr")
    with nogil:
        if adt == DT_FLOAT64:
            _pairwise(&q, a, b, d, pv, <double>0)
        else:
            _pairwise(&q, a, b, d, pv, <float>0)


cdef void _pairwise_backward(Pairs* q, char* gx, Py_ssize_t* gs, int gdt, const char* g, const char* dist,
                             const char* a, const char* b, double p, real_t* acc) noexcept nogil:
    # gx[n, i, :] = sum over j of g[n, i, j] * d dist(i, j) / d a[n, i, :]; condensed: both pairs of i
    cdef Py_ssize_t n, i, j, k, idx
    cdef real_t gv, dv, u, w
    for n in range(q.B):
        for i in range(q.P):
            for k in range(q.M):
                acc[k] = 0
            for j in range(q.R):
                if q.condensed:
                    if j == i:
                        continue
                    idx = _pair(q, i, j) if i < j else _pair(q, j, i)
                    load_block(g + idx * q.ds[2], 0, q.ddt, 1, &gv)
                    load_block(dist + idx * q.ds[2], 0, q.ddt, 1, &dv)
                else:
                    load_block(g + n * q.ds[0] + i * q.ds[1] + j * q.ds[2], 0, q.ddt, 1, &gv)
                    load_block(dist + n * q.ds[0] + i * q.ds[1] + j * q.ds[2], 0, q.ddt, 1, &dv)
                for k in range(q.M):
                    load_block(a + n * q.as_[0] + i * q.as_[1] + k * q.as_[2], 0, q.adt, 1, &u)
                    load_block(b + n * q.bs[0] + j * q.bs[1] + k * q.bs[2], 0, q.bdt, 1, &w)
                    acc[k] += gv * _dist_grad(u - w, dv, p)
            store_block(acc, q.M, gdt, gx + n * gs[0] + i * gs[1], gs[2])


def pairwise_distance_backward(gx_addr, gx_dtype, gx_strides, g_addr, g_strides, dist_addr, dist_strides,
                               a_addr, a_dtype, a_strides, a_shape, b_addr, b_strides, b_shape, p, condensed):
    """grad of pairwise_distance with respect to a (B, P, M): grad and dist have the distances'
    layout (and a's dtype); accumulated in float32 (float64), one rounding."""
    cdef int gdt = check_dtype(gx_dtype, "pairwise_distance_backward gx_dtype")
    cdef int adt = check_dtype(a_dtype, "pairwise_distance_backward a_dtype")
    cdef Pairs q
    cdef Py_ssize_t gs[3]
    cdef Py_ssize_t ds2[3]
    cdef double pv = float(p)
    cdef char* gx
    cdef const char* g
    cdef const char* dist
    cdef const char* a
    cdef const char* b
    cdef void* acc
    _floating(adt, "pairwise_distance_backward")
    _floating(gdt, "pairwise_distance_backward")
    if pv < 0 or pv != pv:
        raise KernelArgumentError(f"pairwise_distance_backward: p must be a non-negative number, got {p!r}")
    _pairs_args(&q, a_shape, a_strides, adt, b_shape, b_strides, adt, g_strides, adt, bool(condensed),
                "pairwise_distance_backward")
    _byte_strides(dist_strides, 3, adt, ds2, "pairwise_distance_backward dist_strides")
    if tuple(dist_strides) != tuple(g_strides):
        raise KernelArgumentError("pairwise_distance_backward: grad and dist must share one layout")
    _byte_strides(gx_strides, 3, gdt, gs, "pairwise_distance_backward gx_strides")
    if q.B * q.P * q.M == 0:
        return
    gx = as_ptr(gx_addr, "pairwise_distance_backward gx_addr")
    a = as_ptr(a_addr, "pairwise_distance_backward a_addr")
    if q.R == 0 or (q.condensed and q.P < 2):
        q.R = 0
        g = dist = b = NULL
    else:
        g = as_ptr(g_addr, "pairwise_distance_backward g_addr")
        dist = as_ptr(dist_addr, "pairwise_distance_backward dist_addr")
        b = as_ptr(b_addr, "pairwise_distance_backward b_addr")
    acc = malloc(q.M * (8 if adt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError("pairwise_distance_backward: cannot allocate the accumulator")
    with nogil:
        if adt == DT_FLOAT64:
            _pairwise_backward(&q, gx, gs, gdt, g, dist, a, b, pv, <double*>acc)
        else:
            _pairwise_backward(&q, gx, gs, gdt, g, dist, a, b, pv, <float*>acc)
    free(acc)
