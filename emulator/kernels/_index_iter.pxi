# The iterator and scalar helpers the indexing-family kernels share (indexing.pyx, masking.pyx,
# layout.pyx, sorting.pyx, hashing.pyx): an N-d iterator over up to XOPS operands, typed loads
# and stores of one element, index loads and dtype checks, and a zero fill. Needs _common.pxi
# included first.

cdef enum:
    XOPS = 66          # operands of the indexing iterator: table/out, values, up to 64 indices (a 64-d mask)


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
