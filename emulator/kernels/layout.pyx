# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Layout-transform kernels of the device's vector engine: ``flip``, ``tril_triu`` and ``pad``
(reflect and replicate padding, and its backward, which sums the gradient of every padded
position into the element it copied).

Numerics, as PyTorch CPU: moves are bitwise copies of the element; pad's backward zeroes the
gradient input, then adds each gradient element into the element it was copied from, in C order
(CPU's order), rounded to the dtype after every addition.

Left out: constant padding (an ATen composite of fill and copy), roll and cat (strided copies,
emulator/kernels/library.py), and any cost.
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan

include "_common.pxi"
include "_index_iter.pxi"


# ---------------------------------------------------------------------------
# Layout transforms.

def flip(out_addr, dtype, out_strides, src_addr, src_strides, shape, dim_mask):
    """out[p] = src[p with p_d -> n_d - 1 - p_d on every dim d whose bit is set in dim_mask]."""
    cdef int dt = check_dtype(dtype, "flip dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), n, i, so, ss
    cdef XIter it
    cdef char* ptrs[2]
    cdef int d
    cdef Py_ssize_t start = 0
    shape = tuple(shape)
    sstr = list(src_strides)
    if len(sstr) != len(shape):
        raise KernelArgumentError("flip: strides do not match the shape")
    for d in range(len(shape)):
        if dim_mask >> d & 1 and shape[d] > 1:
            start += (shape[d] - 1) * sstr[d]
            sstr[d] = -sstr[d]
    xiter_init(&it, shape, [list(out_strides), sstr], [isz, isz], "flip")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "flip out_addr")
    ptrs[1] = as_ptr(src_addr, "flip src_addr") + start * isz
    with nogil:
        n = it.shape[it.ndim - 1]
        so, ss = it.strides[it.ndim - 1], it.strides[MAX_RANK + it.ndim - 1]
        while True:
            for i in range(n):
                copy_elem(ptrs[0] + i * so, ptrs[1] + i * ss, isz)
            if not xiter_next_row(&it, ptrs):
                break


def tril_triu(out_addr, dtype, out_strides, src_addr, src_strides, shape, diagonal, upper):
    """Over the last two dims (i, j): out = src where j - i <= diagonal (tril) or j - i >= diagonal
    (triu), else 0. out may be src itself (the in-place form)."""
    cdef int dt = check_dtype(dtype, "tril_triu dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), rows, cols, i, j, r, si0, si1, so0, so1, bo, bs
    cdef int nd
    cdef int64_t k = diagonal
    cdef bint up = upper, keep, same
    cdef XIter it
    cdef char* ptrs[2]
    cdef char zero[8]
    shape = tuple(shape)
    if len(shape) < 2 or len(out_strides) != len(shape) or len(src_strides) != len(shape):
        raise KernelArgumentError(f"tril_triu: need at least 2 dims with matching strides, got {shape!r}")
    nd = len(shape)
    rows, cols = shape[nd - 2], shape[nd - 1]
    so0, so1 = <Py_ssize_t>out_strides[nd - 2] * isz, <Py_ssize_t>out_strides[nd - 1] * isz
    si0, si1 = <Py_ssize_t>src_strides[nd - 2] * isz, <Py_ssize_t>src_strides[nd - 1] * isz
    xiter_init(&it, shape[:nd - 2], [list(out_strides)[:nd - 2], list(src_strides)[:nd - 2]], [isz, isz],
               "tril_triu")
    if it.size == 0 or rows == 0 or cols == 0:
        return
    memset(zero, 0, 8)
    ptrs[0] = as_ptr(out_addr, "tril_triu out_addr")
    ptrs[1] = as_ptr(src_addr, "tril_triu src_addr")
    same = ptrs[0] == ptrs[1] and so0 == si0 and so1 == si1
    with nogil:
        while True:
            for i in range(it.shape[it.ndim - 1]):
                bo = i * it.strides[it.ndim - 1]
                bs = i * it.strides[MAX_RANK + it.ndim - 1]
                for r in range(rows):
                    for j in range(cols):
                        keep = (j - r >= k) if up else (j - r <= k)
                        if keep:
                            if not same:
                                copy_elem(ptrs[0] + bo + r * so0 + j * so1, ptrs[1] + bs + r * si0 + j * si1, isz)
                        else:
                            copy_elem(ptrs[0] + bo + r * so0 + j * so1, zero, isz)
            if not xiter_next_row(&it, ptrs):
                break


cdef inline Py_ssize_t pad_map(Py_ssize_t q, Py_ssize_t before, Py_ssize_t w, int mode) noexcept nogil:
    cdef Py_ssize_t i = q - before
    if mode == 0:                      # reflect (without repeating the edge)
        if i < 0:
            i = -i
        elif i >= w:
            i = 2 * (w - 1) - i
    else:                              # replicate
        if i < 0:
            i = 0
        elif i >= w:
            i = w - 1
    return i


def pad(big_addr, big_strides, small_addr, small_strides, dtype, big_shape, small_shape, pads_before, mode,
        backward):
    """Reflection (mode 0) / replication (mode 1) padding of the last len(pads_before) dims.

    Forward: big[q] = small[map(q)]. Backward: small = 0, then small[map(q)] += big[q] for q in
    C order (CPU's order), rounded to the dtype after every addition.
    """
    cdef int dt = check_dtype(dtype, "pad dtype")
    cdef Py_ssize_t isz = itemsize_of(dt)
    cdef int npad = len(pads_before), nd = len(big_shape), d, m = mode
    cdef Py_ssize_t bext[3]
    cdef Py_ssize_t sext[3]
    cdef Py_ssize_t bst[3]
    cdef Py_ssize_t sst[3]
    cdef Py_ssize_t pb[3]
    cdef Py_ssize_t q[3]
    cdef Py_ssize_t inner = 1, e, i, boff, soff
    cdef bint bwd = backward, floating = is_floating(dt)
    cdef XIter it
    cdef char* ptrs[2]
    cdef char zero[8]
    if not 1 <= npad <= 3 or npad > nd or len(small_shape) != nd or mode not in (0, 1):
        raise KernelArgumentError(f"pad: bad shapes {tuple(big_shape)!r} / {tuple(small_shape)!r} or mode {mode!r}")
    for d in range(npad):
        bext[d] = big_shape[nd - npad + d]
        sext[d] = small_shape[nd - npad + d]
        bst[d] = <Py_ssize_t>big_strides[nd - npad + d] * isz
        sst[d] = <Py_ssize_t>small_strides[nd - npad + d] * isz
        pb[d] = pads_before[d]
        inner *= bext[d]
        if sext[d] <= 0 and bext[d] > 0:
            raise KernelArgumentError("pad: cannot pad an empty dimension")
    outer = tuple(big_shape)[:nd - npad]
    xiter_init(&it, outer, [list(big_strides)[:nd - npad], list(small_strides)[:nd - npad]], [isz, isz], "pad")
    if it.size == 0:
        return
    memset(zero, 0, 8)
    ptrs[0] = as_ptr(big_addr, "pad big_addr") if inner else NULL
    ptrs[1] = as_ptr(small_addr, "pad small_addr")
    if bwd:
        # zero the gradient of the input first (its extent may exceed what the padding reads)
        _zero(ptrs[1], dt, list(small_strides), tuple(small_shape))
    if inner == 0:
        return
    with nogil:
        while True:
            for e in range(it.shape[it.ndim - 1]):
                for d in range(npad):
                    q[d] = 0
                for i in range(inner):
                    boff = e * it.strides[it.ndim - 1]
                    soff = e * it.strides[MAX_RANK + it.ndim - 1]
                    for d in range(npad):
                        boff += q[d] * bst[d]
                        soff += pad_map(q[d], pb[d], sext[d], m) * sst[d]
                    if not bwd:
                        copy_elem(ptrs[0] + boff, ptrs[1] + soff, isz)
                    elif floating:
                        st_d(ptrs[1] + soff, dt, ld_d(ptrs[1] + soff, dt) + ld_d(ptrs[0] + boff, dt))
                    else:
                        st_i(ptrs[1] + soff, dt, <int64_t>(<uint64_t>ld_i(ptrs[1] + soff, dt)
                                                          + <uint64_t>ld_i(ptrs[0] + boff, dt)))
                    d = npad - 1
                    while d >= 0:
                        q[d] += 1
                        if q[d] < bext[d]:
                            break
                        q[d] = 0
                        d -= 1
            if not xiter_next_row(&it, ptrs):
                break
