# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Embedding-bag kernel of the device's vector engine: sum / mean / max of weight rows over bags
of indices, with CPU's auxiliary outputs (offset2bag, bag_size, max_indices).

Accumulation in float32 (float64 for float64), one rounding to the weight's dtype.
Left out: tiling and timing (library.py holds the cost models); the backward pass (no kernel
here), sparse gradients.
"""

from libc.stdlib cimport calloc, malloc, free
from libc.math cimport fabs, floor, ceil, floorf, INFINITY
from libc.stdint cimport INT64_MIN

include "_common.pxi"
include "_spatial.pxi"


# -- embedding bags: sum / mean / max of weight rows over bags of indices

cdef void _embedding_bag(Py_ssize_t B, Py_ssize_t D, Py_ssize_t V, char* out, int odt, Py_ssize_t* os,
                         const char* w, Py_ssize_t* ws, const char* idx, Py_ssize_t is_, const char* bounds,
                         Py_ssize_t bs, const char* psw, int pdt, Py_ssize_t ps, int mode, int64_t padding,
                         char* o2b, Py_ssize_t o2bs, char* bsz, Py_ssize_t bss, char* mx, Py_ssize_t* mxs,
                         bint count_sum_bags, real_t* acc, int64_t* arg) noexcept nogil:
    cdef Py_ssize_t b, i, d, lo, hi, count
    cdef int64_t r
    cdef real_t scale, val
    cdef bint first
    for b in range(B):
        lo = ek_ld_i64(bounds + b * bs)
        hi = ek_ld_i64(bounds + (b + 1) * bs)
        for d in range(D):
            acc[d] = 0
            arg[d] = 0
        count = 0
        first = True
        for i in range(lo, hi):
            r = ek_ld_i64(idx + i * is_)
            if o2b != NULL:
                ek_st_i64(o2b + i * o2bs, b)
            if r == padding:
                continue
            count += 1
            scale = 1
            if psw != NULL:
                load_block(psw + i * ps, 0, pdt, 1, &scale)
            for d in range(D):
                load_block(w + r * ws[0] + d * ws[1], 0, odt, 1, &val)
                if mode == 2:
                    if first or val > acc[d]:
                        acc[d] = val
                        arg[d] = r
                elif psw != NULL:
                    acc[d] = acc[d] + val * scale
                else:
                    acc[d] = acc[d] + val
            first = False
        if mode == 1 and count:
            for d in range(D):
                acc[d] = acc[d] / <real_t>count
        store_block(acc, D, odt, out + b * os[0], os[1])
        if mode == 0 and not count_sum_bags:
            count = 0
        ek_st_i64(bsz + b * bss, count)
        if mode == 2:
            for d in range(D):
                ek_st_i64(mx + b * mxs[0] + d * mxs[1], arg[d])
        else:
            ek_st_i64(mx + b * mxs[0], count)


def embedding_bag(out_addr, out_dtype, out_strides, out_shape, w_addr, w_strides, w_shape, idx_addr, idx_stride,
                  n_indices, bounds_addr, bounds_stride, psw_addr, psw_dtype, psw_stride, mode, padding_idx,
                  o2b_addr, o2b_stride, bsz_addr, bsz_stride, mx_addr, mx_strides, count_sum_bags):
    """out (B, D) = per bag b (indices bounds[b] .. bounds[b + 1]) the sum (mode 0, optionally
    weighted by per-sample weights), mean (1) or max (2) of weight (V, D) rows; rows equal to
    padding_idx are skipped. Also CPU's auxiliary outputs: offset2bag (o2b_addr 0 = none),
    bag_size (0 for sum bags unless count_sum_bags) and max_indices ((B, D) argmax rows for max,
    else (B,) = bag_size). int64 indices, checked in range by the host. Accumulates in float32
    (float64 for float64)."""
    cdef int odt = check_dtype(out_dtype, "embedding_bag out_dtype")
    cdef int pdt = check_dtype(psw_dtype, "embedding_bag psw_dtype")
    cdef Py_ssize_t B = out_shape[0], D = out_shape[1], V = w_shape[0], isz = itemsize_of(odt)
    cdef Py_ssize_t os[2]
    cdef Py_ssize_t ws[2]
    cdef Py_ssize_t mxs[2]
    cdef int md = mode
    cdef int64_t pad = padding_idx
    cdef char* out
    cdef const char* w = NULL
    cdef const char* idx = NULL
    cdef const char* bounds
    cdef const char* psw = NULL
    cdef char* o2b = NULL
    cdef char* bsz
    cdef char* mx
    cdef void* acc
    cdef int64_t* arg
    cdef Py_ssize_t i_s = idx_stride * 8, b_s = bounds_stride * 8, p_s = psw_stride * itemsize_of(pdt)
    cdef Py_ssize_t o_s = o2b_stride * 8, z_s = bsz_stride * 8
    cdef bint csb = bool(count_sum_bags)
    _floating(odt, "embedding_bag")
    if md not in (0, 1, 2) or w_shape[1] != D:
        raise KernelArgumentError(f"embedding_bag: bad mode {mode!r} or shapes {tuple(out_shape)} {tuple(w_shape)}")
    os[0], os[1] = out_strides[0] * isz, out_strides[1] * isz
    ws[0], ws[1] = w_strides[0] * isz, w_strides[1] * isz
    mxs[0], mxs[1] = mx_strides[0] * 8, (mx_strides[1] * 8 if len(mx_strides) > 1 else 0)
    if B == 0:
        return
    out = as_ptr(out_addr, "embedding_bag out_addr")
    bounds = as_ptr(bounds_addr, "embedding_bag bounds_addr")
    bsz = as_ptr(bsz_addr, "embedding_bag bsz_addr")
    mx = as_ptr(mx_addr, "embedding_bag mx_addr")
    if n_indices:
        idx = as_ptr(idx_addr, "embedding_bag idx_addr")
        if V * D:
            w = as_ptr(w_addr, "embedding_bag w_addr")
        if psw_addr:
            psw = as_ptr(psw_addr, "embedding_bag psw_addr")
        if o2b_addr:
            o2b = as_ptr(o2b_addr, "embedding_bag o2b_addr")
    acc = malloc((D if D else 1) * 8)
    arg = <int64_t*>malloc((D if D else 1) * 8)
    if acc == NULL or arg == NULL:
        free(acc)
        free(arg)
        raise MemoryError("embedding_bag: cannot allocate the accumulators")
    with nogil:
        if odt == DT_FLOAT64:
            _embedding_bag(B, D, V, out, odt, os, w, ws, idx, i_s, bounds, b_s, psw, pdt,
                           p_s, md, pad, o2b, o_s, bsz, z_s, mx, mxs,
                           csb, <double*>acc, arg)
        else:
            _embedding_bag(B, D, V, out, odt, os, w, ws, idx, i_s, bounds, b_s, psw, pdt,
                           p_s, md, pad, o2b, o_s, bsz, z_s, mx, mxs,
                           csb, <float*>acc, arg)
    free(acc)
    free(arg)
