# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Data-movement kernels of the device: strided copy with dtype conversion, and fill.

Models the vector engine's copy/convert unit as seen by PyTorch's ``copy_``
and ``fill_`` on CPU: elementwise, any strides (0 = broadcast, non-contiguous,
transposed), any rank up to 12, and bit-exact dtype conversion (C casts,
round-to-nearest-even to float16/bfloat16, float64 -> half via float32).

Left out: overlapping source/destination with different layouts (undefined,
as for PyTorch's copy_ of overlapping tensors), complex and float8 dtypes, and
any timing -- the cost model lives in library.py.
"""

include "_common.pxi"


cdef void _copy_same(char* dst, Py_ssize_t ds, const char* src, Py_ssize_t ss,
                     Py_ssize_t n, Py_ssize_t isz) noexcept nogil:
    """One row, same dtype: a bitwise copy (keeps NaN payloads, -0.0)."""
    cdef Py_ssize_t i
    if ds == isz and ss == isz:
        memmove(dst, src, <size_t>(n * isz))   # memmove: tolerate in-place copies
    elif isz == 1:
        for i in range(n):
            dst[i * ds] = src[i * ss]
    elif isz == 2:
        for i in range(n):
            ek_st_u16(dst + i * ds, ek_ld_u16(src + i * ss))
    elif isz == 4:
        for i in range(n):
            ek_st_i32(dst + i * ds, ek_ld_i32(src + i * ss))
    else:
        for i in range(n):
            ek_st_i64(dst + i * ds, ek_ld_i64(src + i * ss))


cdef void _copy_rows(NdIter* it, char** ptrs, int ddt, int sdt) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it), ds = iter_row_stride(it, 0), ss = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m
    cdef float fbuf[BLOCK]
    cdef double dbuf[BLOCK]
    cdef int64_t ibuf[BLOCK]
    while True:
        if ddt == sdt:
            _copy_same(ptrs[0], ds, ptrs[1], ss, n, itemsize_of(ddt))
        else:
            j = 0
            while j < n:
                m = n - j if n - j < BLOCK else BLOCK
                # The scratch type is chosen by the source so that every
                # conversion is a single C cast from the source's own type:
                # integers via int64 (exact, wraps on narrowing), float64 via
                # double, and the 16/32-bit floats via float (exact widening).
                if not is_floating(sdt):
                    load_block(ptrs[1] + j * ss, ss, sdt, m, ibuf)
                    store_block(ibuf, m, ddt, ptrs[0] + j * ds, ds)
                elif sdt == DT_FLOAT64:
                    load_block(ptrs[1] + j * ss, ss, sdt, m, dbuf)
                    store_block(dbuf, m, ddt, ptrs[0] + j * ds, ds)
                else:
                    load_block(ptrs[1] + j * ss, ss, sdt, m, fbuf)
                    store_block(fbuf, m, ddt, ptrs[0] + j * ds, ds)
                j += m
        if not iter_next_row(it, ptrs):
            break


def copy_cast(dst_addr, dst_dtype, dst_strides, src_addr, src_dtype, src_strides, shape):
    """dst[i] = cast<dst_dtype>(src[i]) for every index i of `shape`.

    Strides are in elements (0 broadcasts the source).  Same-dtype copies are
    bitwise; contiguous same-dtype copies are a single memmove.
    """
    cdef int ddt = check_dtype(dst_dtype, "copy_cast dst_dtype")
    cdef int sdt = check_dtype(src_dtype, "copy_cast src_dtype")
    cdef NdIter it
    cdef char* ptrs[2]
    iter_init(&it, shape, [dst_strides, src_strides], [itemsize_of(ddt), itemsize_of(sdt)], "copy_cast")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(dst_addr, "copy_cast dst_addr")
    ptrs[1] = as_ptr(src_addr, "copy_cast src_addr")
    with nogil:
        _copy_rows(&it, ptrs, ddt, sdt)


cdef void _fill_rows(NdIter* it, char* p, const char* elem, Py_ssize_t isz) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it), s = iter_row_stride(it, 0), i
    cdef char* ptrs[1]
    ptrs[0] = p
    while True:
        p = ptrs[0]
        if isz == 1:
            if s == 1:
                memset(p, elem[0], <size_t>n)
            else:
                for i in range(n):
                    p[i * s] = elem[0]
        elif isz == 2:
            for i in range(n):
                ek_st_u16(p + i * s, ek_ld_u16(elem))
        elif isz == 4:
            for i in range(n):
                ek_st_i32(p + i * s, ek_ld_i32(elem))
        else:
            for i in range(n):
                ek_st_i64(p + i * s, ek_ld_i64(elem))
        if not iter_next_row(it, ptrs):
            break


cdef int encode_scalar(object value, int dt, char* elem, str what) except -1:
    """Write `value` converted to dtype dt into elem (8 bytes), with the same
    conversions a copy from an int64/float64 scalar tensor would do."""
    cdef int64_t iv
    cdef double dv
    if dt == DT_BOOL:
        elem[0] = 1 if bool(value) else 0          # NaN -> True, like x != 0
        return 0
    integral = isinstance(value, int) or (not isinstance(value, float) and hasattr(value, "__index__"))
    if integral:
        # Python ints are unbounded: wrap to 64 bits first, then C-cast to
        # the dtype (so fill(int8, 300) stores 44 like a C cast would).
        iv = <int64_t>(<uint64_t>(int(value) & 0xFFFFFFFFFFFFFFFF))
        store_block(&iv, 1, dt, elem, 0)
        return 0
    dv = float(value)
    if not is_floating(dt):
        if dv != dv or dv in (float("inf"), float("-inf")):
            raise KernelArgumentError(f"{what}: cannot store {value!r} in an integer dtype")
        iv = <int64_t>(<uint64_t>(int(dv) & 0xFFFFFFFFFFFFFFFF))   # truncation toward zero
        store_block(&iv, 1, dt, elem, 0)
        return 0
    store_block(&dv, 1, dt, elem, 0)
    return 0


def fill(dst_addr, dst_dtype, dst_strides, shape, value):
    """dst[i] = value for every index i of `shape` (value: bool, int or float)."""
    cdef int dt = check_dtype(dst_dtype, "fill dst_dtype")
    cdef NdIter it
    cdef char elem[8]
    cdef char* p
    memset(elem, 0, 8)
    iter_init(&it, shape, [dst_strides], [itemsize_of(dt)], "fill")
    encode_scalar(value, dt, elem, "fill")
    if it.size == 0:
        return
    p = as_ptr(dst_addr, "fill dst_addr")
    with nogil:
        _fill_rows(&it, p, elem, itemsize_of(dt))
