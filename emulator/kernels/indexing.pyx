# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Indexing kernels of the device's vector engine: the addressing unit and the kernels that
consume or produce index vectors.

  * ``index_gather`` / ``index_scatter``: the one addressing unit behind index_select, gather,
    ``x[idx]`` (aten::index), scatter/scatter_add/scatter_reduce, index_add/index_copy/
    index_fill, index_put, index_reduce, take and put_.  A *table* (the tensor being indexed) is
    walked with host-computed iteration strides, plus ``sum_k idx_k[p] * table.stride(dim_k)``
    for each index operand.
  * ``embedding_dense_backward``: the dense embedding gradient (scatter-add of rows, optional
    padding_idx and scale_grad_by_freq).
  * ``repeat_interleave``: the index vector ``[0] * rep[0] + [1] * rep[1] + ...``.

Numerics, as PyTorch CPU:
  * moves (gather, assign) are bitwise copies of the element;
  * reductions into a table (add, multiply, amax, amin, mean) are applied one source element
    at a time, in the order of the iteration, and rounded to the table's dtype after every step
    (CPU's ``*self += *src`` in scalar_t); floats are combined in double, which rounds to the
    same values as CPU's float/half arithmetic for one +, * or / of two stored values;
    integers in int64, wrapping on store; amax/amin propagate NaN like CPU;
  * an index outside its bounds (or, where CPU allows negative indices, below -size) raises
    KernelArgumentError with CPU's message, before anything is written; the firmware turns it
    into a KERNEL_FAULT (sticky for the context, reported at the next synchronising call).

Left out: index dtypes other than int64/int32, sparse gradients, and any cost: the cost model
is emulator/kernels/library.py's.
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan

include "_common.pxi"
include "_index_iter.pxi"


cdef enum:
    R_ASSIGN = 0
    R_ADD = 1
    R_MUL = 2
    R_MAX = 3
    R_MIN = 4
    R_MEAN = 5


# ---------------------------------------------------------------------------
# The addressing unit: gather from / scatter into a table through index operands.

cdef struct IndexSpec:
    int nidx
    int idt[XOPS]
    Py_ssize_t size[XOPS]          # the table's extent on the indexed dim
    Py_ssize_t tstride[XOPS]       # the table's byte stride on the indexed dim
    bint allow_negative


cdef int index_spec_init(IndexSpec* spec, list indices, tuple tshape, tuple tstrides, Py_ssize_t tsz,
                         bint allow_negative, str what) except -1:
    """``indices``: (addr, dtype, strides, dim) per index operand; dim is the table's dim."""
    cdef int k, d
    spec.nidx = len(indices)
    spec.allow_negative = allow_negative
    if spec.nidx < 1 or spec.nidx > XOPS - 2:
        raise KernelArgumentError(f"{what}: between 1 and {XOPS - 2} index operands, got {spec.nidx}")
    if len(tstrides) != len(tshape):
        raise KernelArgumentError(f"{what}: table strides {tstrides!r} do not match its shape {tshape!r}")
    for k in range(spec.nidx):
        spec.idt[k] = check_index_dtype(indices[k][1], what)
        d = indices[k][3]
        if not 0 <= d < len(tshape):
            raise KernelArgumentError(f"{what}: indexed dim {d} outside the table's rank {len(tshape)}")
        spec.size[k] = tshape[d]
        spec.tstride[k] = <Py_ssize_t>tstrides[d] * tsz
    return 0


cdef inline Py_ssize_t index_offset(IndexSpec* spec, char** ptrs, int first) noexcept nogil:
    """Byte offset into the table of the indices under ptrs[first:] (already validated)."""
    cdef Py_ssize_t off = 0
    cdef int64_t v
    cdef int k
    for k in range(spec.nidx):
        v = ld_index(ptrs[first + k], spec.idt[k])
        if v < 0:
            v += spec.size[k]
        off += <Py_ssize_t>v * spec.tstride[k]
    return off


cdef int check_indices(XIter* it, char** ptrs, IndexSpec* spec, int first, int64_t* bad, int* bad_k) noexcept nogil:
    """0 when every index is in range; else 1 with the first bad value and operand."""
    cdef Py_ssize_t n = it.shape[it.ndim - 1], i
    cdef int k
    cdef int64_t v, lo
    cdef char* p[XOPS]
    while True:
        for k in range(spec.nidx):
            p[k] = ptrs[first + k]
        for i in range(n):
            for k in range(spec.nidx):
                v = ld_index(p[k], spec.idt[k])
                lo = -spec.size[k] if spec.allow_negative else 0
                if v < lo or v >= spec.size[k]:
                    bad[0] = v
                    bad_k[0] = k
                    return 1
                p[k] += it.strides[(first + k) * MAX_RANK + it.ndim - 1]
        if not xiter_next_row(it, ptrs):
            return 0


cdef object index_error(str message, int64_t value, int dim, Py_ssize_t size):
    return KernelArgumentError(message.format(index=value, dim=dim, size=size))


cdef list index_strides(list indices):
    return [list(ix[2]) for ix in indices]


def index_gather(out_addr, dtype, out_strides, table_addr, table_shape, table_strides, table_iter_strides,
                 shape, indices, allow_negative, message):
    """out[p] = table[p . table_iter_strides + sum_k idx_k[p] * table.stride(dim_k)] over ``shape``.

    ``indices``: (addr, dtype, strides over ``shape``, dim of the table) each, int64 or int32.
    ``message`` formats an out-of-range index ({index}, {dim}, {size}).
    """
    cdef int dt = check_dtype(dtype, "index_gather dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), n, i
    cdef IndexSpec spec
    cdef XIter it
    cdef char* ptrs[XOPS]
    cdef char* p[XOPS]
    cdef int k, nops, bad_k = 0, failed
    cdef int64_t bad = 0
    cdef bint rows
    cdef const char* src
    index_spec_init(&spec, list(indices), tuple(table_shape), tuple(table_strides), isz, allow_negative,
                    "index_gather")
    nops = 2 + spec.nidx
    strides = [list(out_strides), list(table_iter_strides)] + index_strides(list(indices))
    sizes = [isz, isz] + [itemsize_of(spec.idt[k]) for k in range(spec.nidx)]
    xiter_init(&it, shape, strides, sizes, "index_gather")
    if it.size == 0:
        return
    ptrs[0] = ptrs[1] = NULL
    for k in range(spec.nidx):
        ptrs[2 + k] = as_ptr(indices[k][0], "index_gather index addr")
    for k in range(nops):
        p[k] = ptrs[k]
    with nogil:
        failed = check_indices(&it, p, &spec, 2, &bad, &bad_k)
    if failed:
        raise index_error(message, bad, indices[bad_k][3], spec.size[bad_k])
    ptrs[0] = as_ptr(out_addr, "index_gather out_addr")      # (an empty table has no address)
    ptrs[1] = as_ptr(table_addr, "index_gather table_addr")
    xiter_reset(&it)
    with nogil:
        n = it.shape[it.ndim - 1]
        # Rows along which every index is constant and out and table are contiguous (an
        # embedding's rows) are copied as bytes, when the two rows do not overlap: the same bytes
        # as the element loop.
        rows = (it.strides[it.ndim - 1] == isz and it.strides[MAX_RANK + it.ndim - 1] == isz)
        for k in range(2, nops):
            rows = rows and it.strides[k * MAX_RANK + it.ndim - 1] == 0
        while True:
            for k in range(nops):
                p[k] = ptrs[k]
            if rows:
                src = p[1] + index_offset(&spec, p, 2)
                if p[0] + n * isz <= src or src + n * isz <= p[0]:
                    memcpy(p[0], src, n * isz)
                    if not xiter_next_row(&it, ptrs):
                        break
                    continue
            for i in range(n):
                copy_elem(p[0], p[1] + index_offset(&spec, p, 2), isz)
                for k in range(nops):
                    p[k] += it.strides[k * MAX_RANK + it.ndim - 1]
            if not xiter_next_row(&it, ptrs):
                break


cdef inline void reduce_float(char* t, const char* s, int dt, int op, double alpha) noexcept nogil:
    cdef double a = ld_d(t, dt), b = ld_d(s, dt)
    if op == R_ADD or op == R_MEAN:
        st_d(t, dt, a + alpha * b if alpha != 1.0 else a + b)
    elif op == R_MUL:
        st_d(t, dt, a * b)
    elif op == R_MAX:
        if isnan(b) or a < b:
            copy_elem(t, s, itemsize_of(dt))
    elif op == R_MIN:
        if isnan(b) or b < a:
            copy_elem(t, s, itemsize_of(dt))


cdef inline void reduce_int(char* t, const char* s, int dt, int op, int64_t alpha) noexcept nogil:
    cdef int64_t a = ld_i(t, dt), b = ld_i(s, dt)
    if op == R_ADD or op == R_MEAN:
        st_i(t, dt, <int64_t>(<uint64_t>a + <uint64_t>alpha * <uint64_t>b))
    elif op == R_MUL:
        st_i(t, dt, <int64_t>(<uint64_t>a * <uint64_t>b))
    elif op == R_MAX:
        if a < b:
            st_i(t, dt, b)
    elif op == R_MIN:
        if b < a:
            st_i(t, dt, b)


cdef void identity_of(int dt, int op, char* elem):
    """The reduction's identity in dtype dt (scatter_reduce with include_self=False)."""
    cdef double inf = float("inf")
    if op == R_MUL:
        st_i(elem, dt, 1)
    elif op == R_MAX:
        if is_floating(dt):
            st_d(elem, dt, -inf)
        elif dt == DT_BOOL:
            st_i(elem, dt, 0)
        else:
            st_i(elem, dt, {DT_UINT8: 0, DT_INT8: -128, DT_INT16: -32768, DT_INT32: -2147483648,
                            DT_INT64: -9223372036854775808}[dt])
    elif op == R_MIN:
        if is_floating(dt):
            st_d(elem, dt, inf)
        elif dt == DT_BOOL:
            st_i(elem, dt, 1)
        else:
            st_i(elem, dt, {DT_UINT8: 255, DT_INT8: 127, DT_INT16: 32767, DT_INT32: 2147483647,
                            DT_INT64: 9223372036854775807}[dt])
    else:
        st_i(elem, dt, 0)


cdef inline void divide_mean(char* t, int dt, int64_t count) noexcept nogil:
    cdef int64_t a, q
    if is_floating(dt):
        st_d(t, dt, ld_d(t, dt) / <double>count)
    else:
        a = ld_i(t, dt)
        q = a / count                 # C division truncates; CPU's "floor" rounding mode floors
        if a % count != 0 and a < 0:
            q -= 1
        st_i(t, dt, q)


def index_scatter(table_addr, dtype, table_shape, table_strides, table_iter_strides,
                  values_addr, values_dtype, values_strides, shape, indices, reduce, alpha, include_self,
                  allow_negative, message):
    """For each p of ``shape`` (in C order): table[t(p)] = reduce(table[t(p)], values[p]), with
    t(p) = p . table_iter_strides + sum_k idx_k[p] * table.stride(dim_k).

    ``reduce``: 0 assign, 1 add (``alpha`` times the value), 2 multiply, 3 amax, 4 amin,
    5 mean (sum, then a division by the number of contributions, +1 when ``include_self``;
    integers divide with floor). ``include_self`` False first sets every target to the
    reduction's identity (0 for add and mean, 1 multiply, lowest/highest for amax/amin).
    """
    cdef int dt = check_dtype(dtype, "index_scatter dtype")
    cdef int vdt = check_dtype(values_dtype, "index_scatter values_dtype")
    cdef int op = reduce
    cdef Py_ssize_t isz = itemsize_of(dt), n, i, off, span = 1, d
    cdef IndexSpec spec
    cdef XIter it
    cdef char* ptrs[XOPS]
    cdef char* p[XOPS]
    cdef int k, nops, bad_k = 0, failed
    cdef int64_t bad = 0, ialpha = 0
    cdef double dalpha = 1.0
    cdef bint floating = is_floating(dt), keep_self = include_self
    cdef char ident[8]
    cdef int64_t* counts = NULL
    cdef char* base
    cdef char* tgt
    check_same_dtype(dt, vdt, "index_scatter")
    if not 0 <= op <= R_MEAN:
        raise KernelArgumentError(f"index_scatter: unknown reduction {reduce!r}")
    if floating:
        dalpha = alpha
    else:
        ialpha = int(alpha)
    index_spec_init(&spec, list(indices), tuple(table_shape), tuple(table_strides), isz, allow_negative,
                    "index_scatter")
    nops = 2 + spec.nidx
    strides = [list(table_iter_strides), list(values_strides)] + index_strides(list(indices))
    sizes = [isz, isz] + [itemsize_of(spec.idt[k]) for k in range(spec.nidx)]
    xiter_init(&it, shape, strides, sizes, "index_scatter")
    if it.size == 0:
        return
    memset(ident, 0, 8)
    identity_of(dt, op, ident)
    ptrs[0] = ptrs[1] = NULL
    for k in range(spec.nidx):
        ptrs[2 + k] = as_ptr(indices[k][0], "index_scatter index addr")
    for k in range(nops):
        p[k] = ptrs[k]
    with nogil:
        failed = check_indices(&it, p, &spec, 2, &bad, &bad_k)
    if failed:
        raise index_error(message, bad, indices[bad_k][3], spec.size[bad_k])
    ptrs[0] = base = as_ptr(table_addr, "index_scatter table_addr")   # (an empty table has no address)
    ptrs[1] = as_ptr(values_addr, "index_scatter values_addr")
    if op == R_MEAN:
        # One counter per table element (by element offset from the table's base).
        for d in range(len(table_shape)):
            span += (<Py_ssize_t>table_shape[d] - 1) * <Py_ssize_t>table_strides[d]
        counts = <int64_t*>calloc(span, sizeof(int64_t))
        if counts == NULL:
            raise MemoryError("index_scatter: cannot allocate the mean counters")
    try:
        with nogil:
            n = it.shape[it.ndim - 1]
            if op != R_ASSIGN and not keep_self:
                xiter_reset(&it)
                while True:
                    for k in range(nops):
                        p[k] = ptrs[k]
                    for i in range(n):
                        copy_elem(p[0] + index_offset(&spec, p, 2), ident, isz)
                        for k in range(nops):
                            p[k] += it.strides[k * MAX_RANK + it.ndim - 1]
                    if not xiter_next_row(&it, ptrs):
                        break
            xiter_reset(&it)
            while True:
                for k in range(nops):
                    p[k] = ptrs[k]
                for i in range(n):
                    tgt = p[0] + index_offset(&spec, p, 2)
                    if op == R_ASSIGN:
                        copy_elem(tgt, p[1], isz)
                    elif floating:
                        reduce_float(tgt, p[1], dt, op, dalpha)
                    else:
                        reduce_int(tgt, p[1], dt, op, ialpha)
                    if counts != NULL:
                        counts[(tgt - base) // isz] += 1
                    for k in range(nops):
                        p[k] += it.strides[k * MAX_RANK + it.ndim - 1]
                if not xiter_next_row(&it, ptrs):
                    break
            if counts != NULL:
                xiter_reset(&it)
                while True:
                    for k in range(nops):
                        p[k] = ptrs[k]
                    for i in range(n):
                        tgt = p[0] + index_offset(&spec, p, 2)
                        off = (tgt - base) // isz
                        if counts[off] > 0:
                            divide_mean(tgt, dt, counts[off] + (1 if keep_self else 0))
                            counts[off] = 0          # each target divides once
                        for k in range(nops):
                            p[k] += it.strides[k * MAX_RANK + it.ndim - 1]
                    if not xiter_next_row(&it, ptrs):
                        break
    finally:
        free(counts)


# ---------------------------------------------------------------------------
# Embedding backward.

def embedding_dense_backward(gw_addr, dtype, gw_strides, grad_addr, grad_strides, idx_addr, idx_dtype, idx_stride,
                             N, D, num_weights, padding_idx, scale_grad_by_freq):
    """grad_weight (num_weights, D) = 0; then for i < N in order, unless idx[i] == padding_idx:
    grad_weight[idx[i]] += grad[i] * (1 / count(idx[i]) if scale_grad_by_freq else 1)."""
    cdef int dt = check_dtype(dtype, "embedding_dense_backward dtype")
    cdef int idt = check_index_dtype(idx_dtype, "embedding_dense_backward")
    cdef Py_ssize_t isz = itemsize_of(dt), n = N, dd = D, nw = num_weights, i, j
    cdef Py_ssize_t gw0 = <Py_ssize_t>gw_strides[0] * isz, gw1 = <Py_ssize_t>gw_strides[1] * isz
    cdef Py_ssize_t g0 = <Py_ssize_t>grad_strides[0] * isz, g1 = <Py_ssize_t>grad_strides[1] * isz
    cdef Py_ssize_t s = <Py_ssize_t>idx_stride * itemsize_of(idt)
    cdef int64_t pad = padding_idx, v, bad = 0
    cdef bint scale = scale_grad_by_freq, has_bad = False
    cdef double f
    cdef char* gw
    cdef char* g = NULL
    cdef char* ix = NULL
    cdef int64_t* counts = NULL
    if nw == 0 or dd == 0:
        return
    gw = as_ptr(gw_addr, "embedding_dense_backward gw_addr")
    _zero(gw, dt, [gw_strides[0], gw_strides[1]], (nw, dd))
    if n == 0:
        return
    g = as_ptr(grad_addr, "embedding_dense_backward grad_addr")
    ix = as_ptr(idx_addr, "embedding_dense_backward idx_addr")
    counts = <int64_t*>calloc(nw, sizeof(int64_t))
    if counts == NULL:
        raise MemoryError("embedding_dense_backward: cannot allocate the counters")
    try:
        with nogil:
            for i in range(n):
                v = ld_index(ix + i * s, idt)
                if v == pad:
                    continue
                if v < 0 or v >= nw:
                    has_bad, bad = True, v
                    break
                counts[v] += 1
            if not has_bad:
                for i in range(n):
                    v = ld_index(ix + i * s, idt)
                    if v == pad:
                        continue
                    f = 1.0 / counts[v] if scale else 1.0
                    for j in range(dd):
                        st_d(gw + v * gw0 + j * gw1, dt, ld_d(gw + v * gw0 + j * gw1, dt)
                             + f * ld_d(g + i * g0 + j * g1, dt))
        if has_bad:
            raise KernelArgumentError(f"index {bad} is out of bounds for dimension 0 with size {nw}")
    finally:
        free(counts)


def repeat_interleave(out_addr, out_stride, out_len, rep_addr, rep_dtype, rep_stride, n):
    """out = [0] * rep[0] + [1] * rep[1] + ... (int64 or int32 like rep); ``out_len`` must equal
    sum(rep) and every rep[i] >= 0 (checked before anything is written)."""
    cdef int dt = check_index_dtype(rep_dtype, "repeat_interleave rep_dtype")
    cdef Py_ssize_t N = n, L = out_len, i, r, k = 0, so, sr
    cdef int64_t total = 0, v, bad = 0
    cdef char* rep
    cdef char* out
    if N < 0 or L < 0:
        raise KernelArgumentError(f"repeat_interleave: bad extents {n!r}, {out_len!r}")
    if N == 0:
        if L:
            raise KernelArgumentError("repeat_interleave: allocated size does not match required size")
        return
    rep = as_ptr(rep_addr, "repeat_interleave rep_addr")
    sr = <Py_ssize_t>rep_stride * itemsize_of(dt)
    so = <Py_ssize_t>out_stride * itemsize_of(dt)
    with nogil:
        for i in range(N):
            v = ld_index(rep + i * sr, dt)
            if v < 0:
                bad = 1
            total += v
    if bad:
        raise KernelArgumentError("repeat_interleave: repeats can not be negative")
    if total != L:
        raise KernelArgumentError("repeat_interleave: allocated size does not match required size")
    if L == 0:
        return
    out = as_ptr(out_addr, "repeat_interleave out_addr")
    with nogil:
        for i in range(N):
            v = ld_index(rep + i * sr, dt)
            for r in range(v):
                if dt == DT_INT64:
                    ek_st_i64(out + k * so, i)
                else:
                    ek_st_i32(out + k * so, <int32_t>i)
                k += 1
