# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Indexing and data-movement kernels of the device's vector engine.

  * ``index_gather`` / ``index_scatter``: the one addressing unit behind index_select, gather,
    ``x[idx]`` (aten::index), scatter/scatter_add/scatter_reduce, index_add/index_copy/
    index_fill and index_put.  A *table* (the tensor being indexed) is walked with host-computed
    iteration strides, plus ``sum_k idx_k[p] * table.stride(dim_k)`` for each index operand.
  * ``where``: a ternary select with the casts of CPU's where (values cast to the compute dtype,
    then to the output dtype).
  * ``count_nonzero``, ``nonzero``, ``masked_select``, ``masked_scatter``: the data-dependent
    ones (the host reads the count between a counting and a writing kernel).
  * ``flip``, ``tril_triu``, ``pad`` / ``pad_backward`` (reflect, replicate), ``sort`` (also
    topk), ``embedding_dense_backward``.

Numerics, as PyTorch CPU:
  * moves (gather, assign, flip, pad, sort values, ...) are bitwise copies of the element;
  * reductions into a table (add, multiply, amax, amin, mean) are applied one source element
    at a time, in the order of the iteration, and rounded to the table's dtype after every step
    (CPU's ``*self += *src`` in scalar_t); floats are combined in double, which rounds to the
    same values as CPU's float/half arithmetic for one +, * or / of two stored values;
    integers in int64, wrapping on store; amax/amin propagate NaN like CPU;
  * an index outside its bounds (or, where CPU allows negative indices, below -size) raises
    KernelArgumentError with CPU's message, before anything is written; the firmware turns it
    into a KERNEL_FAULT (sticky for the context, reported at the next synchronising call).
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan

include "_common.pxi"
include "_stdsort.pxi"

cdef enum:
    XOPS = 66          # operands of the indexing iterator: table/out, values, up to 64 indices (a 64-d mask)

cdef enum:
    R_ASSIGN = 0
    R_ADD = 1
    R_MUL = 2
    R_MAX = 3
    R_MIN = 4
    R_MEAN = 5


# ---------------------------------------------------------------------------
# An N-d iterator over up to XOPS operands (iter_init's algorithm: drop extent-1 dims, merge
# dims contiguous in every operand; C order of the logical shape is kept).

cdef struct XIter:
    int ndim
    int nops
    Py_ssize_t size
    Py_ssize_t shape[MAX_RANK]
    Py_ssize_t strides[XOPS * MAX_RANK]
    Py_ssize_t index[MAX_RANK]


cdef int xiter_init(XIter* it, object shape, list strides, list itemsizes, str what) except -1:
    cdef int nops = len(strides), k, d, nd = 0, ndim
    cdef Py_ssize_t ext, size = 1
    cdef Py_ssize_t st[XOPS]
    cdef bint merge
    shape = tuple(shape)
    ndim = len(shape)
    if ndim > MAX_RANK:
        raise KernelArgumentError(f"{what}: rank {ndim} exceeds the maximum of {MAX_RANK}")
    if nops > XOPS:
        raise KernelArgumentError(f"{what}: {nops} operands exceed the maximum of {XOPS}")
    for k in range(nops):
        if len(strides[k]) != ndim:
            raise KernelArgumentError(f"{what}: strides {tuple(strides[k])!r} do not match shape {shape!r}")
    for d in range(ndim):
        if shape[d] < 0:
            raise KernelArgumentError(f"{what}: negative extent in shape {shape!r}")
        size *= shape[d]
    it.nops = nops
    it.size = size
    for d in range(ndim):
        ext = shape[d]
        if ext == 1:
            continue
        for k in range(nops):
            st[k] = <Py_ssize_t>strides[k][d] * <Py_ssize_t>itemsizes[k]
        merge = nd > 0
        if merge:
            for k in range(nops):
                if it.strides[k * MAX_RANK + nd - 1] != st[k] * ext:
                    merge = False
                    break
        if merge:
            it.shape[nd - 1] *= ext
            for k in range(nops):
                it.strides[k * MAX_RANK + nd - 1] = st[k]
        else:
            it.shape[nd] = ext
            for k in range(nops):
                it.strides[k * MAX_RANK + nd] = st[k]
            nd += 1
    if nd == 0:
        it.shape[0] = 1
        for k in range(nops):
            it.strides[k * MAX_RANK] = 0
        nd = 1
    it.ndim = nd
    for d in range(nd):
        it.index[d] = 0
    return 0


cdef inline void xiter_reset(XIter* it) noexcept nogil:
    cdef int d
    for d in range(it.ndim):
        it.index[d] = 0


cdef inline bint xiter_next_row(XIter* it, char** ptrs) noexcept nogil:
    cdef int d = it.ndim - 2, k
    while d >= 0:
        it.index[d] += 1
        for k in range(it.nops):
            ptrs[k] += it.strides[k * MAX_RANK + d]
        if it.index[d] < it.shape[d]:
            return True
        for k in range(it.nops):
            ptrs[k] -= it.strides[k * MAX_RANK + d] * it.shape[d]
        it.index[d] = 0
        d -= 1
    return False


# ---------------------------------------------------------------------------
# Scalar helpers.

cdef inline double ld_d(const char* p, int dt) noexcept nogil:
    cdef double v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline int64_t ld_i(const char* p, int dt) noexcept nogil:
    cdef int64_t v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline void st_d(char* p, int dt, double v) noexcept nogil:
    store_block(&v, 1, dt, p, 0)


cdef inline void st_i(char* p, int dt, int64_t v) noexcept nogil:
    store_block(&v, 1, dt, p, 0)


cdef inline void copy_elem(char* dst, const char* src, Py_ssize_t isz) noexcept nogil:
    if isz == 1:
        dst[0] = src[0]
    elif isz == 2:
        ek_st_u16(dst, ek_ld_u16(src))
    elif isz == 4:
        ek_st_i32(dst, ek_ld_i32(src))
    else:
        ek_st_i64(dst, ek_ld_i64(src))


cdef inline void cast_elem(char* dst, int ddt, const char* src, int sdt) noexcept nogil:
    """dst = cast<ddt>(src) with the copy kernel's rules (the scratch type follows the source)."""
    cdef int64_t iv
    cdef double dv
    cdef float fv
    if ddt == sdt:
        copy_elem(dst, src, itemsize_of(ddt))
    elif not is_floating(sdt):
        load_block(src, 0, sdt, 1, &iv)
        store_block(&iv, 1, ddt, dst, 0)
    elif sdt == DT_FLOAT64:
        load_block(src, 0, sdt, 1, &dv)
        store_block(&dv, 1, ddt, dst, 0)
    else:
        load_block(src, 0, sdt, 1, &fv)
        store_block(&fv, 1, ddt, dst, 0)


cdef inline int64_t ld_index(const char* p, int idt) noexcept nogil:
    if idt == DT_INT64:
        return ek_ld_i64(p)
    return ek_ld_i32(p)


cdef int check_index_dtype(object dt, str what) except -1:
    cdef int code = check_dtype(dt, what)
    if code != DT_INT64 and code != DT_INT32:
        raise KernelArgumentError(f"{what}: index operands must be int64 or int32, got {_DTYPE_NAMES[code]}")
    return code


cdef int check_same_dtype(int a, int b, str what) except -1:
    if a != b:
        raise KernelArgumentError(f"{what}: operands must share a dtype, got {_DTYPE_NAMES[a]} and {_DTYPE_NAMES[b]}")
    return 0


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


cdef int _zero(char* p, int dt, list strides, tuple shape) except -1:
    cdef XIter it
    cdef char* ptrs[1]
    cdef Py_ssize_t n, i, s, isz = itemsize_of(dt)
    cdef char zero[8]
    memset(zero, 0, 8)
    xiter_init(&it, shape, [strides], [isz], "zero")
    if it.size == 0:
        return 0
    ptrs[0] = p
    with nogil:
        n = it.shape[it.ndim - 1]
        s = it.strides[it.ndim - 1]
        while True:
            for i in range(n):
                copy_elem(ptrs[0] + i * s, zero, isz)
            if not xiter_next_row(&it, ptrs):
                break
    return 0


# ---------------------------------------------------------------------------
# Sorting.

cdef inline bint before_d(double a, double b, bint desc) noexcept nogil:
    """a sorts strictly before b (NaN is the largest value, as on CPU)."""
    if desc:
        return (isnan(a) and not isnan(b)) or a > b
    return (isnan(b) and not isnan(a)) or a < b


cdef inline bint before_i(int64_t a, int64_t b, bint desc) noexcept nogil:
    return a > b if desc else a < b


cdef struct SortKeys:
    double* dk          # floating keys, or NULL: the int64 keys ik
    int64_t* ik
    Py_ssize_t m        # slice length (unique_dim's slice order)
    bint desc


ctypedef bint (*sorts_before_fn)(SortKeys* keys, int64_t a, int64_t b) noexcept nogil


cdef bint key_before(SortKeys* keys, int64_t a, int64_t b) noexcept nogil:
    if keys.dk != NULL:
        return before_d(keys.dk[a], keys.dk[b], keys.desc)
    return before_i(keys.ik[a], keys.ik[b], keys.desc)


cdef void stable_merge_sort(int64_t* perm, int64_t* tmp, Py_ssize_t n, SortKeys* keys,
                            sorts_before_fn before) noexcept nogil:
    """Stable bottom-up merge sort of perm[0:n]: an element moves ahead of an earlier one only when
    ``before`` says it sorts strictly before it."""
    cdef Py_ssize_t width = 1, lo, mid, hi, a, b, o
    cdef int64_t* src = perm
    cdef int64_t* dst = tmp
    cdef int64_t* sw
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width if lo + width < n else n
            hi = lo + 2 * width if lo + 2 * width < n else n
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                if before(keys, src[b], src[a]):
                    dst[o] = src[b]
                    b += 1
                else:
                    dst[o] = src[a]
                    a += 1
                o += 1
            while a < mid:
                dst[o] = src[a]
                a += 1
                o += 1
            while b < hi:
                dst[o] = src[b]
                b += 1
                o += 1
            lo = hi
        sw = src
        src = dst
        dst = sw
        width *= 2
    if src != perm:
        memcpy(perm, src, n * sizeof(int64_t))


cdef void sort_buffers(Py_ssize_t n, Py_ssize_t nkeys, bint floating, int64_t** perm, int64_t** tmp,
                       double** dk, int64_t** ik) noexcept:
    """malloc a permutation of n and its merge buffer, and nkeys float (or int64) keys; a failure
    leaves NULL, for the caller to raise inside the try whose finally frees them all."""
    perm[0] = <int64_t*>malloc(n * sizeof(int64_t))
    tmp[0] = <int64_t*>malloc(n * sizeof(int64_t))
    if floating:
        dk[0] = <double*>malloc(nkeys * sizeof(double))
    else:
        ik[0] = <int64_t*>malloc(nkeys * sizeof(int64_t))


cdef void merge_sort(int64_t* perm, int64_t* tmp, Py_ssize_t n, double* dk, int64_t* ik, bint desc) noexcept nogil:
    """Stable sort of perm[0:n] by key (dk when not NULL, else ik)."""
    cdef SortKeys keys
    keys.dk, keys.ik, keys.m, keys.desc = dk, ik, 1, desc
    stable_merge_sort(perm, tmp, n, &keys, key_before)


cdef enum:
    ALG_STABLE = 0
    ALG_CPU_UNSTABLE = 1
    ALG_CPU_TOPK = 2
    ALG_CPU_TOPK_UNSORTED = 3

SORT_STABLE, SORT_CPU_UNSTABLE, SORT_CPU_TOPK, SORT_CPU_TOPK_UNSORTED = (ALG_STABLE, ALG_CPU_UNSTABLE, ALG_CPU_TOPK,
                                                                         ALG_CPU_TOPK_UNSORTED)


cdef int _sort_like_cpu(XIter* it, char** ptrs, Py_ssize_t n, Py_ssize_t kk, int dt, Py_ssize_t isz,
                        bint floating, bint desc, Py_ssize_t sv, Py_ssize_t si, Py_ssize_t ss,
                        int algorithm) except -1:
    """The unstable sort and the topk of CPU's kernels (_stdsort.pxi) on (key, position) pairs."""
    cdef SPair* q = <SPair*>malloc(max(n, 1) * sizeof(SPair))
    cdef Py_ssize_t e, i
    cdef char* base_v
    cdef char* base_i
    cdef char* base_s
    cdef int mode = (SD_DESC_FLOAT if desc else SD_ASC_FLOAT) if floating else (SD_DESC_INT if desc else SD_ASC_INT)
    if q == NULL:
        raise MemoryError("sort: cannot allocate the sort buffer")
    try:
        with nogil:
            while True:
                for e in range(it.shape[it.ndim - 1]):
                    base_v = ptrs[0] + e * it.strides[it.ndim - 1]
                    base_i = ptrs[1] + e * it.strides[MAX_RANK + it.ndim - 1]
                    base_s = ptrs[2] + e * it.strides[2 * MAX_RANK + it.ndim - 1]
                    for i in range(n):
                        q[i].pos = i
                        if floating:
                            q[i].d = ld_d(base_s + i * ss, dt)
                        else:
                            q[i].i = ld_i(base_s + i * ss, dt)
                    if algorithm == ALG_CPU_UNSTABLE:
                        std_sort(q, n, mode)
                    else:
                        cpu_topk(q, n, kk, algorithm == ALG_CPU_TOPK, mode)
                    for i in range(kk):
                        copy_elem(base_v + i * sv, base_s + q[i].pos * ss, isz)
                        ek_st_i64(base_i + i * si, q[i].pos)
                if not xiter_next_row(it, ptrs):
                    break
    finally:
        free(q)
    return 0


def sort(values_addr, values_strides, indices_addr, indices_strides, src_addr, dtype, src_strides, shape, dim,
         descending, k, algorithm=SORT_STABLE):
    """Sorts every slice of src along ``dim`` (ascending, or descending; NaN is the largest value);
    the first ``k`` sorted values and their int64 positions are written along ``dim`` of
    values / indices (k = the slice length for sort, k for topk). ``algorithm``: SORT_STABLE (a
    stable merge sort); SORT_CPU_UNSTABLE (CPU's std::sort, so ties come out in CPU's order);
    SORT_CPU_TOPK / SORT_CPU_TOPK_UNSORTED (CPU's topk selection, sorted or not)."""
    cdef int dt = check_dtype(dtype, "sort dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), n, kk = k, e, i, sv, si, ss
    cdef int d = dim, nd = len(shape)
    cdef bint desc = descending, floating = is_floating(dt)
    cdef XIter it
    cdef char* ptrs[3]
    cdef char* base_v
    cdef char* base_i
    cdef char* base_s
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    shape = tuple(shape)
    if not 0 <= d < nd or len(values_strides) != nd or len(indices_strides) != nd or len(src_strides) != nd:
        raise KernelArgumentError(f"sort: bad dim {dim!r} for shape {shape!r}")
    n = shape[d]
    if not 0 <= kk <= n:
        raise KernelArgumentError(f"sort: k {k!r} outside [0, {n}]")
    outer = shape[:d] + (1,) + shape[d + 1:]
    xiter_init(&it, outer, [list(values_strides), list(indices_strides), list(src_strides)], [isz, 8, isz], "sort")
    if it.size == 0 or kk == 0:
        return
    sv = <Py_ssize_t>values_strides[d] * isz
    si = <Py_ssize_t>indices_strides[d] * 8
    ss = <Py_ssize_t>src_strides[d] * isz
    ptrs[0] = as_ptr(values_addr, "sort values_addr")
    ptrs[1] = as_ptr(indices_addr, "sort indices_addr")
    ptrs[2] = as_ptr(src_addr, "sort src_addr")
    if algorithm != SORT_STABLE:
        if algorithm not in (SORT_CPU_UNSTABLE, SORT_CPU_TOPK, SORT_CPU_TOPK_UNSORTED):
            raise KernelArgumentError(f"sort: unknown algorithm {algorithm!r}")
        _sort_like_cpu(&it, ptrs, n, kk, dt, isz, floating, desc, sv, si, ss, algorithm)
        return
    sort_buffers(n, n, floating, &perm, &tmp, &dk, &ik)
    try:
        if perm == NULL or tmp == NULL or (dk == NULL and ik == NULL):
            raise MemoryError("sort: cannot allocate the sort buffers")
        with nogil:
            while True:
                for e in range(it.shape[it.ndim - 1]):
                    base_v = ptrs[0] + e * it.strides[it.ndim - 1]
                    base_i = ptrs[1] + e * it.strides[MAX_RANK + it.ndim - 1]
                    base_s = ptrs[2] + e * it.strides[2 * MAX_RANK + it.ndim - 1]
                    for i in range(n):
                        perm[i] = i
                        if floating:
                            dk[i] = ld_d(base_s + i * ss, dt)
                        else:
                            ik[i] = ld_i(base_s + i * ss, dt)
                    merge_sort(perm, tmp, n, dk, ik, desc)
                    for i in range(kk):
                        copy_elem(base_v + i * sv, base_s + perm[i] * ss, isz)
                        ek_st_i64(base_i + i * si, perm[i])
                if not xiter_next_row(&it, ptrs):
                    break
    finally:
        free(perm)
        free(tmp)
        free(dk)
        free(ik)


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


# ===========================================================================
# Second block: take/put reuse index_gather/index_scatter; the kernels below serve
# hash_tensor, isin, nonzero_static, repeat_interleave and unique / unique_consecutive.

cdef inline int64_t hash_bits(const char* p, int dt) noexcept nogil:
    """An element widened to its 64-bit float / integer type and read as 64 bits (hash_tensor)."""
    cdef double dv
    cdef int64_t iv
    if is_floating(dt):
        dv = ld_d(p, dt)
        memcpy(&iv, &dv, 8)
        return iv
    return ld_i(p, dt)


def hash_xor(out_addr, out_strides, src_addr, src_dtype, src_strides, shape):
    """out[q] = xor over the elements p of src that map to q (out's strides over src's ``shape``
    are 0 on the reduced dims) of hash_bits(src[p]); out is 64-bit (uint64 read as int64)."""
    cdef int dt = check_dtype(src_dtype, "hash_xor src_dtype")
    cdef NdIter it
    cdef char* ptrs[2]
    cdef char* p[2]
    cdef Py_ssize_t n, i, so, ss
    cdef int pass_
    iter_init(&it, shape, [list(out_strides), list(src_strides)], [8, itemsize_of(dt)], "hash_xor")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "hash_xor out_addr")
    ptrs[1] = as_ptr(src_addr, "hash_xor src_addr")
    with nogil:
        n = iter_row_len(&it)
        so = iter_row_stride(&it, 0)
        ss = iter_row_stride(&it, 1)
        for pass_ in range(2):                    # 0: clear the outputs, 1: accumulate
            p[0], p[1] = ptrs[0], ptrs[1]
            while True:
                for i in range(n):
                    if pass_ == 0:
                        ek_st_i64(p[0] + i * so, 0)
                    else:
                        ek_st_i64(p[0] + i * so, ek_ld_i64(p[0] + i * so) ^ hash_bits(p[1] + i * ss, dt))
                if not iter_next_row(&it, p):
                    break


cdef inline bint same_d(double a, double b) noexcept nogil:
    return a == b                                 # NaN never equals; -0.0 equals 0.0


def isin(out_addr, out_strides, elem_addr, elem_dtype, elem_strides, shape, test_addr, test_dtype, test_strides,
         test_shape, compute_dtype, invert):
    """out[p] (bool) = (elem[p] is equal to some test element) xor invert, both cast to
    ``compute_dtype`` first (torch.result_type of the two): the test elements are sorted once,
    each element is a binary search."""
    cdef int edt = check_dtype(elem_dtype, "isin elem_dtype")
    cdef int tdt = check_dtype(test_dtype, "isin test_dtype")
    cdef int cdt = check_dtype(compute_dtype, "isin compute_dtype")
    cdef bint floating = is_floating(cdt), inv = invert, found
    cdef NdIter it, tit
    cdef char* ptrs[2]
    cdef char* tp[1]
    cdef Py_ssize_t m, k = 0, i, n, lo, hi, mid, so, se, ts
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    cdef double dv
    cdef int64_t iv
    iter_init(&it, shape, [list(out_strides), list(elem_strides)], [1, itemsize_of(edt)], "isin")
    iter_init(&tit, test_shape, [list(test_strides)], [itemsize_of(tdt)], "isin test")
    if it.size == 0:
        return
    m = tit.size
    perm = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    tmp = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    dk = <double*>malloc((m + 1) * sizeof(double))
    ik = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    try:
        if perm == NULL or tmp == NULL or dk == NULL or ik == NULL:
            raise MemoryError("isin: cannot allocate the sorted test elements")
        ptrs[0] = as_ptr(out_addr, "isin out_addr")
        ptrs[1] = as_ptr(elem_addr, "isin elem_addr")
        if m:
            tp[0] = as_ptr(test_addr, "isin test_addr")
        with nogil:
            if m:
                ts = iter_row_stride(&tit, 0)
                while True:                       # gather the test elements, cast to compute dtype
                    for i in range(iter_row_len(&tit)):
                        if floating:
                            load_block(tp[0] + i * ts, 0, tdt, 1, &dv)
                            round_block_to(&dv, 1, cdt)
                            dk[k] = dv
                        else:
                            load_block(tp[0] + i * ts, 0, tdt, 1, &iv)
                            round_block_to(&iv, 1, cdt)
                            ik[k] = iv
                        perm[k] = k
                        k += 1
                    if not iter_next_row(&tit, tp):
                        break
                merge_sort(perm, tmp, m, dk if floating else NULL, ik, False)
            n = iter_row_len(&it)
            so = iter_row_stride(&it, 0)
            se = iter_row_stride(&it, 1)
            while True:
                for i in range(n):
                    found = False
                    if m:
                        lo, hi = 0, m             # first sorted test value >= the element
                        if floating:
                            load_block(ptrs[1] + i * se, 0, edt, 1, &dv)
                            round_block_to(&dv, 1, cdt)
                            if not isnan(dv):
                                while lo < hi:
                                    mid = lo + (hi - lo) // 2
                                    if dk[perm[mid]] < dv:
                                        lo = mid + 1
                                    else:
                                        hi = mid
                                found = lo < m and same_d(dk[perm[lo]], dv)
                        else:
                            load_block(ptrs[1] + i * se, 0, edt, 1, &iv)
                            round_block_to(&iv, 1, cdt)
                            while lo < hi:
                                mid = lo + (hi - lo) // 2
                                if ik[perm[mid]] < iv:
                                    lo = mid + 1
                                else:
                                    hi = mid
                            found = lo < m and ik[perm[lo]] == iv
                    (ptrs[0] + i * so)[0] = 1 if found != inv else 0
                if not iter_next_row(&it, ptrs):
                    break
    finally:
        free(perm)
        free(tmp)
        free(dk)
        free(ik)


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


cdef inline bint same_key(double* dk, int64_t* ik, int64_t a, int64_t b) noexcept nogil:
    if dk != NULL:
        return dk[a] == dk[b]                     # NaNs stay distinct, as CPU's unique
    return ik[a] == ik[b]


def unique(values_addr, inverse_addr, counts_addr, count_addr, src_addr, dtype, src_strides, shape, sort,
           want_inverse, want_counts):
    """Unique elements of src (C order over ``shape``): sorted (a stable sort; NaN last, each NaN
    its own value) when ``sort``, else runs of consecutive equal elements. Writes the values into
    values (contiguous, room for numel), the int64 inverse (contiguous over ``shape``) and counts
    (room for numel) when asked, and their number into count (one int64) for the host to read."""
    cdef int dt = check_dtype(dtype, "unique dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), n, i, k, u = 0, e, ss
    cdef bint floating = is_floating(dt), sorting = sort, inv = want_inverse, cnt = want_counts
    cdef NdIter it
    cdef char* ptrs[1]
    cdef char* values
    cdef char* inverse = NULL
    cdef char* counts = NULL
    cdef char* src_elems
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    cdef int64_t run
    iter_init(&it, shape, [list(src_strides)], [isz], "unique")
    n = it.size
    if n == 0:
        ek_st_i64(as_ptr(count_addr, "unique count_addr"), 0)
        return
    values = as_ptr(values_addr, "unique values_addr")
    if inv:
        inverse = as_ptr(inverse_addr, "unique inverse_addr")
    if cnt:
        counts = as_ptr(counts_addr, "unique counts_addr")
    ptrs[0] = as_ptr(src_addr, "unique src_addr")
    sort_buffers(n, n, floating, &perm, &tmp, &dk, &ik)
    src_elems = <char*>malloc(n * isz)
    try:
        if perm == NULL or tmp == NULL or src_elems == NULL or (dk == NULL and ik == NULL):
            raise MemoryError("unique: cannot allocate the sort buffers")
        with nogil:
            k = 0
            ss = iter_row_stride(&it, 0)
            while True:                           # gather src (C order) and its keys
                for i in range(iter_row_len(&it)):
                    copy_elem(src_elems + k * isz, ptrs[0] + i * ss, isz)
                    if floating:
                        dk[k] = ld_d(ptrs[0] + i * ss, dt)
                    else:
                        ik[k] = ld_i(ptrs[0] + i * ss, dt)
                    perm[k] = k
                    k += 1
                if not iter_next_row(&it, ptrs):
                    break
            if sorting:
                merge_sort(perm, tmp, n, dk, ik, False)
            run = 0
            for e in range(n):
                if e > 0 and not same_key(dk, ik, perm[e], perm[e - 1]):
                    if cnt:
                        ek_st_i64(counts + (u - 1) * 8, run)
                    run = 0
                if e == 0 or run == 0:
                    copy_elem(values + u * isz, src_elems + perm[e] * isz, isz)
                    u += 1
                run += 1
                if inv:
                    ek_st_i64(inverse + perm[e] * 8, u - 1)
            if cnt:
                ek_st_i64(counts + (u - 1) * 8, run)
    finally:
        free(perm)
        free(tmp)
        free(src_elems)
        free(dk)
        free(ik)
    ek_st_i64(as_ptr(count_addr, "unique count_addr"), u)


cdef inline int slice_cmp(double* dk, int64_t* ik, Py_ssize_t m, int64_t a, int64_t b) noexcept nogil:
    """CPU's unique_dim order of slices a and b: lexicographic by < / > (a NaN pair is "equal"
    for the order, as CPU's comparator sees it)."""
    cdef Py_ssize_t i
    for i in range(m):
        if dk != NULL:
            if dk[a * m + i] < dk[b * m + i]:
                return -1
            if dk[a * m + i] > dk[b * m + i]:
                return 1
        else:
            if ik[a * m + i] < ik[b * m + i]:
                return -1
            if ik[a * m + i] > ik[b * m + i]:
                return 1
    return 0


cdef inline bint slice_equal(double* dk, int64_t* ik, Py_ssize_t m, int64_t a, int64_t b) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(m):
        if dk != NULL:
            if not dk[a * m + i] == dk[b * m + i]:   # NaN: never equal (CPU's at::equal)
                return False
        elif ik[a * m + i] != ik[b * m + i]:
            return False
    return True


cdef bint slice_before(SortKeys* keys, int64_t a, int64_t b) noexcept nogil:
    return slice_cmp(keys.dk, keys.ik, keys.m, a, b) < 0


cdef void slice_merge_sort(int64_t* perm, int64_t* tmp, Py_ssize_t n, Py_ssize_t m, double* dk,
                           int64_t* ik) noexcept nogil:
    """Stable sort of the slice numbers perm[0:n] by slice_cmp."""
    cdef SortKeys keys
    keys.dk, keys.ik, keys.m, keys.desc = dk, ik, m, False
    stable_merge_sort(perm, tmp, n, &keys, slice_before)


def unique_dim(firsts_addr, inverse_addr, counts_addr, count_addr, src_addr, dtype, src_strides, shape, sort):
    """Unique slices along dim 0 of src (the host moved the unique dim to the front): sorted
    (stable, CPU's lexicographic order) when ``sort``, else runs of consecutive equal slices.
    Writes for each unique slice the number of its first representative (firsts, int64, room
    for n), the int64 inverse (n) and counts (room for n), and their number into count; the host
    then gathers the output slices with index_select."""
    cdef int dt = check_dtype(dtype, "unique_dim dtype")
    cdef bint floating = is_floating(dt), sorting = sort
    cdef NdIter it
    cdef char* ptrs[1]
    cdef Py_ssize_t n, m, total, i, k = 0, u = 0, e, ss
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    cdef char* firsts
    cdef char* inverse
    cdef char* counts
    cdef int64_t run = 0
    shape = tuple(shape)
    if len(shape) < 1:
        raise KernelArgumentError("unique_dim: need at least one dim")
    iter_init(&it, shape, [list(src_strides)], [itemsize_of(dt)], "unique_dim")
    n = shape[0]
    total = it.size
    if n == 0 or total == 0:
        raise KernelArgumentError("unique_dim: empty slices are handled by the host")
    m = total // n
    firsts = as_ptr(firsts_addr, "unique_dim firsts_addr")
    inverse = as_ptr(inverse_addr, "unique_dim inverse_addr")
    counts = as_ptr(counts_addr, "unique_dim counts_addr")
    ptrs[0] = as_ptr(src_addr, "unique_dim src_addr")
    sort_buffers(n, total, floating, &perm, &tmp, &dk, &ik)
    try:
        if perm == NULL or tmp == NULL or (dk == NULL and ik == NULL):
            raise MemoryError("unique_dim: cannot allocate the sort buffers")
        with nogil:
            ss = iter_row_stride(&it, 0)
            while True:                               # slice-major C order: element i of slice a at a*m + i
                for i in range(iter_row_len(&it)):
                    if floating:
                        dk[k] = ld_d(ptrs[0] + i * ss, dt)
                    else:
                        ik[k] = ld_i(ptrs[0] + i * ss, dt)
                    k += 1
                if not iter_next_row(&it, ptrs):
                    break
            for i in range(n):
                perm[i] = i
            if sorting:
                slice_merge_sort(perm, tmp, n, m, dk, ik)
            for e in range(n):
                if e == 0 or not slice_equal(dk, ik, m, perm[e], perm[e - 1]):
                    if e > 0:
                        ek_st_i64(counts + (u - 1) * 8, run)
                    ek_st_i64(firsts + u * 8, perm[e])
                    u += 1
                    run = 0
                run += 1
                ek_st_i64(inverse + perm[e] * 8, u - 1)
            ek_st_i64(counts + (u - 1) * 8, run)
    finally:
        free(perm)
        free(tmp)
        free(dk)
        free(ik)
    ek_st_i64(as_ptr(count_addr, "unique_dim count_addr"), u)
