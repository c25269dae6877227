# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Mask and condition kernels of the device's vector engine.

  * ``where``: a ternary select with the casts of CPU's where (values cast to the compute dtype,
    then to the output dtype).
  * ``count_nonzero``, ``nonzero``, ``masked_select``, ``masked_scatter``: data-dependent sizes
    (the host reads the count between a counting and a writing kernel).
  * ``nonzero_static``: the first ``size`` nonzero coordinates, then fill rows (no count needed).

Numerics, as PyTorch CPU: selected elements are bitwise copies; a mask element is true when it
is nonzero (bool/uint8 masks as CPU reads them); coordinates come in C order of the shape.

Left out: any cost (emulator/kernels/library.py's cost model).
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan

include "_common.pxi"
include "_index_iter.pxi"


# ---------------------------------------------------------------------------
# Ternary select.

def where(out_addr, out_dtype, out_strides, cond_addr, cond_dtype, cond_strides, a_addr, a_dtype, a_strides,
          b_addr, b_dtype, b_strides, shape, compute_dtype):
    """out[p] = cast<out>(cast<compute>(cond[p] ? a[p] : b[p])); cond is read as (value != 0)."""
    cdef int odt = check_dtype(out_dtype, "where out_dtype")
    cdef int cdt = check_dtype(cond_dtype, "where cond_dtype")
    cdef int adt = check_dtype(a_dtype, "where a_dtype")
    cdef int bdt = check_dtype(b_dtype, "where b_dtype")
    cdef int kdt = check_dtype(compute_dtype, "where compute_dtype")
    cdef XIter it
    cdef char* ptrs[4]
    cdef char* p[4]
    cdef char tmp[8]
    cdef Py_ssize_t n, i
    cdef int k
    cdef bint c
    xiter_init(&it, shape, [list(out_strides), list(cond_strides), list(a_strides), list(b_strides)],
               [itemsize_of(odt), itemsize_of(cdt), itemsize_of(adt), itemsize_of(bdt)], "where")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "where out_addr")
    ptrs[1] = as_ptr(cond_addr, "where cond_addr")
    ptrs[2] = as_ptr(a_addr, "where a_addr")
    ptrs[3] = as_ptr(b_addr, "where b_addr")
    with nogil:
        n = it.shape[it.ndim - 1]
        while True:
            for k in range(4):
                p[k] = ptrs[k]
            for i in range(n):
                if cdt == DT_BOOL:
                    c = p[1][0] != 0
                elif is_floating(cdt):
                    c = ld_d(p[1], cdt) != 0
                else:
                    c = ld_i(p[1], cdt) != 0
                if c:
                    cast_elem(tmp, kdt, p[2], adt)
                else:
                    cast_elem(tmp, kdt, p[3], bdt)
                cast_elem(p[0], odt, tmp, kdt)
                for k in range(4):
                    p[k] += it.strides[k * MAX_RANK + it.ndim - 1]
            if not xiter_next_row(&it, ptrs):
                break


# ---------------------------------------------------------------------------
# Data-dependent sizes: count, then (after the host read the count) write.

cdef inline bint is_nonzero(const char* p, int dt) noexcept nogil:
    if dt == DT_BOOL or dt == DT_UINT8 or dt == DT_INT8:
        return p[0] != 0
    if is_floating(dt):
        return ld_d(p, dt) != 0     # NaN counts as nonzero, -0.0 as zero, like CPU
    return ld_i(p, dt) != 0


def count_nonzero(out_addr, src_addr, src_dtype, src_strides, shape):
    """out (one int64) = the number of nonzero elements of src over ``shape``."""
    cdef int dt = check_dtype(src_dtype, "count_nonzero src_dtype")
    cdef XIter it
    cdef char* ptrs[1]
    cdef char* p
    cdef Py_ssize_t n, i, s
    cdef int64_t count = 0
    cdef char* out = as_ptr(out_addr, "count_nonzero out_addr")
    xiter_init(&it, shape, [list(src_strides)], [itemsize_of(dt)], "count_nonzero")
    if it.size:
        ptrs[0] = as_ptr(src_addr, "count_nonzero src_addr")
        with nogil:
            n = it.shape[it.ndim - 1]
            s = it.strides[it.ndim - 1]
            while True:
                p = ptrs[0]
                for i in range(n):
                    count += is_nonzero(p + i * s, dt)
                if not xiter_next_row(&it, ptrs):
                    break
    ek_st_i64(out, count)


cdef Py_ssize_t _c_order(object shape, object src_strides, int dt, int nd, Py_ssize_t* ext, Py_ssize_t* st,
                         Py_ssize_t* idx) except -1:
    """Extents, byte strides and a zero multi-index for a C-order walk of src; returns the numel."""
    cdef Py_ssize_t total = 1
    cdef int d
    for d in range(nd):
        ext[d] = shape[d]
        st[d] = <Py_ssize_t>src_strides[d] * itemsize_of(dt)
        idx[d] = 0
        total *= ext[d]
    return total


cdef inline char* _next_element(char* p, Py_ssize_t* idx, Py_ssize_t* ext, Py_ssize_t* st, int nd) noexcept nogil:
    """Step the C-order multi-index idx by one element, p following it by the byte strides st."""
    cdef int d = nd - 1
    while d >= 0:
        idx[d] += 1
        p += st[d]
        if idx[d] < ext[d]:
            break
        p -= st[d] * ext[d]
        idx[d] = 0
        d -= 1
    return p


def nonzero(out_addr, out_strides, rows, src_addr, src_dtype, src_strides, shape):
    """Row r of out (rows x ndim, int64) = the coordinates of the r-th nonzero element of src in
    C order. ``rows`` is the count the host read; a different count is a KernelArgumentError."""
    cdef int dt = check_dtype(src_dtype, "nonzero src_dtype")
    cdef int nd = len(shape), d
    cdef Py_ssize_t ext[MAX_RANK]
    cdef Py_ssize_t st[MAX_RANK]
    cdef Py_ssize_t idx[MAX_RANK]
    cdef Py_ssize_t total, e, r = 0, nrows = rows
    cdef Py_ssize_t so0, so1
    cdef char* src
    cdef char* out
    cdef char* p
    if nd > MAX_RANK or len(src_strides) != nd or len(out_strides) != 2:
        raise KernelArgumentError(f"nonzero: bad shape {tuple(shape)!r} / strides")
    total = _c_order(shape, src_strides, dt, nd, ext, st, idx)
    so0, so1 = <Py_ssize_t>out_strides[0] * 8, <Py_ssize_t>out_strides[1] * 8
    if total == 0:
        if nrows != 0:
            raise KernelArgumentError(f"nonzero: {nrows} rows for an empty input")
        return
    src = as_ptr(src_addr, "nonzero src_addr")
    out = as_ptr(out_addr, "nonzero out_addr") if nrows and nd else NULL
    with nogil:
        p = src
        for e in range(total):
            if is_nonzero(p, dt):
                if r < nrows and out != NULL:
                    for d in range(nd):
                        ek_st_i64(out + r * so0 + d * so1, idx[d])
                r += 1
            p = _next_element(p, idx, ext, st, nd)
    if r != nrows:
        raise KernelArgumentError(f"nonzero: the input has {r} nonzero elements, the output {nrows} rows")


def masked_select(out_addr, out_stride, rows, src_addr, dtype, src_strides, mask_addr, mask_dtype, mask_strides,
                  shape):
    """out[k] = the k-th src[p] (C order over ``shape``, broadcast strides) whose mask[p] is set."""
    cdef int dt = check_dtype(dtype, "masked_select dtype")
    cdef int mdt = check_dtype(mask_dtype, "masked_select mask_dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), so = <Py_ssize_t>out_stride * isz, n, i, r = 0, nrows = rows
    cdef XIter it
    cdef char* ptrs[2]
    cdef char* out
    cdef Py_ssize_t ss, sm
    xiter_init(&it, shape, [list(src_strides), list(mask_strides)], [isz, itemsize_of(mdt)], "masked_select")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(src_addr, "masked_select src_addr")
    ptrs[1] = as_ptr(mask_addr, "masked_select mask_addr")
    out = as_ptr(out_addr, "masked_select out_addr") if nrows else NULL
    with nogil:
        n = it.shape[it.ndim - 1]
        ss, sm = it.strides[it.ndim - 1], it.strides[MAX_RANK + it.ndim - 1]
        while True:
            for i in range(n):
                if is_nonzero(ptrs[1] + i * sm, mdt):
                    if r < nrows:
                        copy_elem(out + r * so, ptrs[0] + i * ss, isz)
                    r += 1
            if not xiter_next_row(&it, ptrs):
                break
    if r != nrows:
        raise KernelArgumentError(f"masked_select: the mask selects {r} elements, the output has {nrows}")


def masked_scatter(out_addr, dtype, out_strides, mask_addr, mask_dtype, mask_strides, source_addr,
                   source_stride, source_numel, shape):
    """In C order over ``shape``: the k-th position p with mask[p] set gets source[k] (a 1-D operand
    of ``source_numel`` elements); other positions keep their value."""
    cdef int dt = check_dtype(dtype, "masked_scatter dtype")
    cdef int mdt = check_dtype(mask_dtype, "masked_scatter mask_dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), ss = <Py_ssize_t>source_stride * isz, n, i, r = 0
    cdef Py_ssize_t avail = source_numel
    cdef XIter it
    cdef char* ptrs[2]
    cdef char* src = NULL
    cdef Py_ssize_t so, sm
    xiter_init(&it, shape, [list(out_strides), list(mask_strides)], [isz, itemsize_of(mdt)], "masked_scatter")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "masked_scatter out_addr")
    ptrs[1] = as_ptr(mask_addr, "masked_scatter mask_addr")
    with nogil:                                  # count first: too short a source writes nothing
        n = it.shape[it.ndim - 1]
        sm = it.strides[MAX_RANK + it.ndim - 1]
        while True:
            for i in range(n):
                r += is_nonzero(ptrs[1] + i * sm, mdt)
            if not xiter_next_row(&it, ptrs):
                break
    if r > avail:
        raise KernelArgumentError("masked_scatter: expected source to have at least as many elements as "
                                  f"the ones in mask ({r}), got {avail}")
    if r == 0:
        return
    src = as_ptr(source_addr, "masked_scatter source_addr")
    xiter_reset(&it)
    ptrs[0] = as_ptr(out_addr, "masked_scatter out_addr")
    ptrs[1] = as_ptr(mask_addr, "masked_scatter mask_addr")
    r = 0
    with nogil:
        so = it.strides[it.ndim - 1]
        while True:
            for i in range(n):
                if is_nonzero(ptrs[1] + i * sm, mdt):
                    copy_elem(ptrs[0] + i * so, src + r * ss, isz)
                    r += 1
            if not xiter_next_row(&it, ptrs):
                break


def nonzero_static(out_addr, out_strides, size, fill_value, src_addr, src_dtype, src_strides, shape):
    """Rows of out (size x ndim, int64): the coordinates of the first ``size`` nonzero elements
    of src in C order, then rows of ``fill_value``. No count is needed first (no host sync)."""
    cdef int dt = check_dtype(src_dtype, "nonzero_static src_dtype")
    cdef int nd = len(shape), d
    cdef Py_ssize_t ext[MAX_RANK]
    cdef Py_ssize_t st[MAX_RANK]
    cdef Py_ssize_t idx[MAX_RANK]
    cdef Py_ssize_t total, e, r = 0, nrows = size, so0, so1
    cdef int64_t fill = fill_value
    cdef char* src = NULL
    cdef char* out
    cdef char* p
    if nd > MAX_RANK or len(src_strides) != nd or len(out_strides) != 2 or nrows < 0:
        raise KernelArgumentError(f"nonzero_static: bad shape {tuple(shape)!r} / strides / size {size!r}")
    total = _c_order(shape, src_strides, dt, nd, ext, st, idx)
    if nrows == 0 or nd == 0:
        return
    so0, so1 = <Py_ssize_t>out_strides[0] * 8, <Py_ssize_t>out_strides[1] * 8
    out = as_ptr(out_addr, "nonzero_static out_addr")
    if total:
        src = as_ptr(src_addr, "nonzero_static src_addr")
    with nogil:
        p = src
        e = 0
        while e < total and r < nrows:
            if is_nonzero(p, dt):
                for d in range(nd):
                    ek_st_i64(out + r * so0 + d * so1, idx[d])
                r += 1
            p = _next_element(p, idx, ext, st, nd)
            e += 1
        while r < nrows:
            for d in range(nd):
                ek_st_i64(out + r * so0 + d * so1, fill)
            r += 1
