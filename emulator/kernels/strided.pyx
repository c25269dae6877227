# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Data-movement kernels of the device: strided copy with dtype conversion, and fill.

Models the vector engine's copy/convert unit as seen by PyTorch's ``copy_``
and ``fill_`` on CPU: elementwise, any strides (0 = broadcast, non-contiguous,
transposed), any rank up to 12, and bit-exact dtype conversion (C casts,
round-to-nearest-even to float16/bfloat16, float64 -> half via float32).

Besides the arithmetic dtypes it takes the storage-only ones (uint16, uint32,
uint64, complex32, complex64, complex128), converting as torch CPU does on x86-64:
uint64 <-> floating converts the unsigned value itself (not through int64);
floating -> uint16 goes through int32, -> uint32 through int64 (wrapping),
-> uint64 with the x86 unsigned sequence; out-of-range and NaN results
follow those C conversions (torch's AVX2 path for contiguous float -> uint32
differs outside [-2**31, 2**32); see docs/operators.md). complex -> real takes
the real part, real -> complex sets the imaginary part to +0.0, complex ->
complex converts each part, complex -> bool is (re != 0 or im != 0).
The float8 types convert through float32 with CPU's rounding and saturation
(_float8.pxi).

Left out: overlapping source/destination with different layouts (undefined,
as for PyTorch's copy_ of overlapping tensors), and any timing -- the cost
model lives in library.py.
"""

include "_common.pxi"
include "_float8.pxi"

cdef extern from *:
    """
    /* x86-64's truncating conversions without C's undefined behaviour: out of range or NaN
       gives the "integer indefinite" value (INT_MIN), as cvttsd2si does. */
    static inline int32_t sk_cvt_i32(double f) {
        return (f > -2147483649.0 && f < 2147483648.0) ? (int32_t)f : INT32_MIN;
    }
    static inline int64_t sk_cvt_i64(double f) {
        return (f >= -9223372036854775808.0 && f < 9223372036854775808.0) ? (int64_t)f : INT64_MIN;
    }
    /* static_cast<uintN_t>(floating) as gcc compiles it for x86-64 (what torch CPU runs). */
    static inline uint16_t sk_f_to_u16(double f) { return (uint16_t)sk_cvt_i32(f); }
    static inline uint32_t sk_f_to_u32(double f) { return (uint32_t)sk_cvt_i64(f); }
    static inline uint64_t sk_f_to_u64(double f) {
        return f >= 9223372036854775808.0
            ? ((uint64_t)sk_cvt_i64(f - 9223372036854775808.0) ^ UINT64_C(0x8000000000000000))
            : (uint64_t)sk_cvt_i64(f);
    }
    """
    uint16_t sk_f_to_u16(double f) noexcept nogil
    uint32_t sk_f_to_u32(double f) noexcept nogil
    uint64_t sk_f_to_u64(double f) noexcept nogil


cdef inline bint _is_complex(int dt) noexcept nogil:
    return dt == DT_COMPLEX64 or dt == DT_COMPLEX128 or dt == DT_COMPLEX32


cdef inline bint _is_unsigned_wide(int dt) noexcept nogil:
    return dt == DT_UINT16 or dt == DT_UINT32 or dt == DT_UINT64


cdef void _load(const char* p, Py_ssize_t s, int dt, Py_ssize_t n, acc_t* out) noexcept nogil:
    """load_block, plus the wide unsigned types (uint64 into int64 keeps the bits; into
    float/double it converts the unsigned value)."""
    cdef Py_ssize_t i
    if is_float8(dt):
        f8_load(p, s, dt, n, out)
    elif dt == DT_UINT16:
        for i in range(n):
            out[i] = <acc_t>ek_ld_u16(p + i * s)
    elif dt == DT_UINT32:
        for i in range(n):
            out[i] = <acc_t><uint32_t>ek_ld_i32(p + i * s)
    elif dt == DT_UINT64:
        for i in range(n):
            out[i] = <acc_t><uint64_t>ek_ld_i64(p + i * s)
    else:
        load_block(p, s, dt, n, out)


cdef void _store(const acc_t* v, Py_ssize_t n, int dt, char* p, Py_ssize_t s) noexcept nogil:
    """store_block, plus the wide unsigned types (from int64: wraps; from floating: x86's casts)."""
    cdef Py_ssize_t i
    if is_float8(dt):
        f8_store(v, n, dt, p, s)
    elif dt == DT_UINT16:
        for i in range(n):
            if acc_t is int64_t:
                ek_st_u16(p + i * s, <uint16_t>v[i])
            else:
                ek_st_u16(p + i * s, sk_f_to_u16(<double>v[i]))
    elif dt == DT_UINT32:
        for i in range(n):
            if acc_t is int64_t:
                ek_st_i32(p + i * s, <int32_t><uint32_t>v[i])
            else:
                ek_st_i32(p + i * s, <int32_t>sk_f_to_u32(<double>v[i]))
    elif dt == DT_UINT64:
        for i in range(n):
            if acc_t is int64_t:
                ek_st_i64(p + i * s, v[i])
            else:
                ek_st_i64(p + i * s, <int64_t>sk_f_to_u64(<double>v[i]))
    else:
        store_block(v, n, dt, p, s)


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
    elif isz == 8:
        for i in range(n):
            ek_st_i64(dst + i * ds, ek_ld_i64(src + i * ss))
    else:  # 16: complex128
        for i in range(n):
            memmove(dst + i * ds, src + i * ss, 16)


cdef void _fnuz_to_u64(const char* p, Py_ssize_t s, int sdt, Py_ssize_t n, char* d, Py_ssize_t ds) noexcept nogil:
    """fnuz float8 -> uint64 as CPU converts it: its one NaN (a signalling float32 NaN there) gives
    0 where the quiet NaNs of the other formats give 2**63 (x86's unsigned sequence takes the other
    branch); every other code as any float -> uint64."""
    cdef Py_ssize_t i
    cdef uint8_t c
    cdef float f
    for i in range(n):
        c = <uint8_t>p[i * s]
        if c == 0x80:
            ek_st_i64(d + i * ds, 0)
        else:
            f8_load(p + i * s, s, sdt, 1, &f)
            ek_st_i64(d + i * ds, <int64_t>sk_f_to_u64(<double>f))


cdef void _copy_rows(NdIter* it, char** ptrs, int ddt, int sdt) noexcept nogil:
    """Real dtypes (any pair), or the same dtype (complex too)."""
    cdef Py_ssize_t n = iter_row_len(it), ds = iter_row_stride(it, 0), ss = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m
    cdef float fbuf[BLOCK]
    cdef double dbuf[BLOCK]
    cdef int64_t ibuf[BLOCK]
    # The scratch type is chosen so that every conversion is a single C cast from the source's
    # own type: integers via int64 (exact, wraps on narrowing), float64 via double, the 16/32-bit
    # floats via float (exact widening). uint64 to a floating type converts the unsigned value
    # straight to float (float32, float16, bfloat16: float32 first, as c10 does) or to double.
    # float8 converts through float32 both ways.
    cdef bint u64_to_float = sdt == DT_UINT64 and (is_floating(ddt) or is_float8(ddt))
    while True:
        if ddt == sdt:
            _copy_same(ptrs[0], ds, ptrs[1], ss, n, itemsize_of(ddt))
        elif ddt == DT_FLOAT16 and is_float8(sdt):
            f8_to_half(ptrs[1], ss, sdt, n, ptrs[0], ds)
        elif ddt == DT_UINT64 and (sdt == DT_FLOAT8_E4M3FNUZ or sdt == DT_FLOAT8_E5M2FNUZ):
            _fnuz_to_u64(ptrs[1], ss, sdt, n, ptrs[0], ds)
        else:
            j = 0
            while j < n:
                m = n - j if n - j < BLOCK else BLOCK
                if u64_to_float:
                    if ddt == DT_FLOAT64:
                        _load(ptrs[1] + j * ss, ss, sdt, m, dbuf)
                        _store(dbuf, m, ddt, ptrs[0] + j * ds, ds)
                    else:
                        _load(ptrs[1] + j * ss, ss, sdt, m, fbuf)
                        _store(fbuf, m, ddt, ptrs[0] + j * ds, ds)
                elif not is_floating(sdt) and not is_float8(sdt):
                    _load(ptrs[1] + j * ss, ss, sdt, m, ibuf)
                    _store(ibuf, m, ddt, ptrs[0] + j * ds, ds)
                elif sdt == DT_FLOAT64:
                    _load(ptrs[1] + j * ss, ss, sdt, m, dbuf)
                    _store(dbuf, m, ddt, ptrs[0] + j * ds, ds)
                else:
                    _load(ptrs[1] + j * ss, ss, sdt, m, fbuf)
                    _store(fbuf, m, ddt, ptrs[0] + j * ds, ds)
                j += m
        if not iter_next_row(it, ptrs):
            break


cdef void _complex_to_bool_rows(NdIter* it, char** ptrs, int sdt) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it), ds = iter_row_stride(it, 0), ss = iter_row_stride(it, 1), i
    cdef Py_ssize_t half = itemsize_of(sdt) // 2
    cdef bint nonzero
    while True:
        for i in range(n):
            if sdt == DT_COMPLEX64:
                nonzero = ek_ld_f32(ptrs[1] + i * ss) != 0 or ek_ld_f32(ptrs[1] + i * ss + half) != 0
            elif sdt == DT_COMPLEX32:   # a float16 part is nonzero unless its bits are +-0 (NaN is)
                nonzero = (ek_ld_u16(ptrs[1] + i * ss) & 0x7FFF) != 0 or (ek_ld_u16(ptrs[1] + i * ss + half) & 0x7FFF) != 0
            else:
                nonzero = ek_ld_f64(ptrs[1] + i * ss) != 0 or ek_ld_f64(ptrs[1] + i * ss + half) != 0
            ptrs[0][i * ds] = 1 if nonzero else 0
        if not iter_next_row(it, ptrs):
            break


cdef int _copy(object dst_addr, int ddt, object dst_strides, object src_addr, int sdt, object src_strides,
               object shape) except -1:
    cdef NdIter it
    cdef char* ptrs[2]
    iter_init(&it, shape, [dst_strides, src_strides], [itemsize_of(ddt), itemsize_of(sdt)], "copy_cast")
    if it.size == 0:
        return 0
    ptrs[0] = as_ptr(dst_addr, "copy_cast dst_addr")
    ptrs[1] = as_ptr(src_addr, "copy_cast src_addr")
    with nogil:
        if ddt == DT_BOOL and _is_complex(sdt):
            _complex_to_bool_rows(&it, ptrs, sdt)
        else:
            _copy_rows(&it, ptrs, ddt, sdt)
    return 0


cdef inline int _part_dtype(int dt) noexcept nogil:
    """The real dtype of each part of a complex dtype."""
    if dt == DT_COMPLEX32:
        return DT_FLOAT16
    return DT_FLOAT32 if dt == DT_COMPLEX64 else DT_FLOAT64


cdef list _parts(object strides):
    """Element strides of a complex operand's real (or imaginary) part, in part-sized units."""
    return [2 * s for s in strides]


cdef int _copy_complex(object dst_addr, int ddt, object dst_strides, object src_addr, int sdt,
                       object src_strides, object shape) except -1:
    """A conversion with a complex side, as copies between the parts (each a strided real view)."""
    cdef int dpart, spart
    cdef NdIter it
    cdef char* p
    cdef char zero[8]
    if _is_complex(ddt) and _is_complex(sdt):   # complex64 <-> complex128: each part
        dpart, spart = _part_dtype(ddt), _part_dtype(sdt)
        _copy(dst_addr, dpart, _parts(dst_strides), src_addr, spart, _parts(src_strides), shape)
        # (an empty copy returns before it reads the addresses, so the offsets are harmless)
        _copy(dst_addr + itemsize_of(dpart), dpart, _parts(dst_strides),
              src_addr + itemsize_of(spart), spart, _parts(src_strides), shape)
    elif _is_complex(sdt):                      # complex -> real: the real part (bool: either part)
        if ddt == DT_BOOL:
            _copy(dst_addr, ddt, dst_strides, src_addr, sdt, src_strides, shape)
        else:
            _copy(dst_addr, ddt, dst_strides, src_addr, _part_dtype(sdt), _parts(src_strides), shape)
    else:                                       # real -> complex: the real part, imaginary +0.0
        dpart = _part_dtype(ddt)
        _copy(dst_addr, dpart, _parts(dst_strides), src_addr, sdt, src_strides, shape)
        iter_init(&it, shape, [_parts(dst_strides)], [itemsize_of(dpart)], "copy_cast")
        if it.size:
            memset(zero, 0, 8)
            p = as_ptr(dst_addr + itemsize_of(dpart), "copy_cast dst_addr")
            with nogil:
                _fill_rows(&it, p, zero, itemsize_of(dpart))
    return 0


def copy_cast(dst_addr, dst_dtype, dst_strides, src_addr, src_dtype, src_strides, shape):
    """dst[i] = cast<dst_dtype>(src[i]) for every index i of `shape`.

    Strides are in elements (0 broadcasts the source).  Same-dtype copies are
    bitwise; contiguous same-dtype copies are a single memmove.
    """
    cdef int ddt = check_storage_dtype(dst_dtype, "copy_cast dst_dtype")
    cdef int sdt = check_storage_dtype(src_dtype, "copy_cast src_dtype")
    if ddt != sdt and (_is_complex(ddt) or _is_complex(sdt)):
        _copy_complex(dst_addr, ddt, dst_strides, src_addr, sdt, src_strides, shape)
    else:
        _copy(dst_addr, ddt, dst_strides, src_addr, sdt, src_strides, shape)


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
        elif isz == 8:
            for i in range(n):
                ek_st_i64(p + i * s, ek_ld_i64(elem))
        else:  # 16: complex128
            for i in range(n):
                memcpy(p + i * s, elem, 16)
        if not iter_next_row(it, ptrs):
            break


cdef int encode_scalar(object value, int dt, char* elem, str what) except -1:
    """Write `value` converted to dtype dt into elem (16 bytes), with the same
    conversions a copy from an int64/float64/complex128 scalar tensor would do."""
    cdef int64_t iv
    cdef double dv
    cdef int part
    if _is_complex(dt):
        # The real part, then the imaginary part, each as the part dtype (a real value: imag 0).
        part = _part_dtype(dt)
        if isinstance(value, complex):
            encode_scalar(value.real, part, elem, what)
            encode_scalar(value.imag, part, elem + itemsize_of(part), what)
        else:
            encode_scalar(value, part, elem, what)
        return 0
    if isinstance(value, complex):
        raise KernelArgumentError(f"{what}: cannot store the complex value {value!r} in {_DTYPE_NAMES[dt]}")
    if dt == DT_BOOL:
        elem[0] = 1 if bool(value) else 0          # NaN -> True, like x != 0
        return 0
    integral = isinstance(value, int) or (not isinstance(value, float) and hasattr(value, "__index__"))
    if integral:
        # Python ints are unbounded: wrap to 64 bits first, then C-cast to
        # the dtype (so fill(int8, 300) stores 44 like a C cast would).
        iv = <int64_t>(<uint64_t>(int(value) & 0xFFFFFFFFFFFFFFFF))
        _store(&iv, 1, dt, elem, 0)
        return 0
    dv = float(value)
    if is_float8(dt):
        _store(&dv, 1, dt, elem, 0)   # through float32, CPU's rounding and saturation
        return 0
    if not is_floating(dt):
        if dv != dv or dv in (float("inf"), float("-inf")):
            raise KernelArgumentError(f"{what}: cannot store {value!r} in an integer dtype")
        iv = <int64_t>(<uint64_t>(int(dv) & 0xFFFFFFFFFFFFFFFF))   # truncation toward zero
        _store(&iv, 1, dt, elem, 0)
        return 0
    store_block(&dv, 1, dt, elem, 0)
    return 0


def fill(dst_addr, dst_dtype, dst_strides, shape, value):
    """dst[i] = value for every index i of `shape` (value: bool, int or float; complex too for
    a complex dst; a real value there sets the imaginary part to 0)."""
    cdef int dt = check_storage_dtype(dst_dtype, "fill dst_dtype")
    cdef NdIter it
    cdef char elem[16]
    cdef char* p
    memset(elem, 0, 16)
    iter_init(&it, shape, [dst_strides], [itemsize_of(dt)], "fill")
    encode_scalar(value, dt, elem, "fill")
    if it.size == 0:
        return
    p = as_ptr(dst_addr, "fill dst_addr")
    with nogil:
        _fill_rows(&it, p, elem, itemsize_of(dt))
