# Shared pieces of the kernel library, textually included by every kernel
# module (``include "_common.pxi"``).  An include rather than a cimported .pxd
# keeps each extension self-contained: no cross-module C-API, no import-time
# dependency between the compiled modules, and it builds the same from
# setup.py, cythonize or pyximport.
#
# What lives here:
#   * dtype codes (mirroring dtypes.py, which is the ABI) and argument checks;
#   * bit-exact float16/bfloat16 <-> float32 conversions (the c10::Half and
#     c10::BFloat16 algorithms, so results match PyTorch CPU bit for bit);
#   * unaligned-safe, aliasing-safe scalar loads/stores (memcpy based; they
#     compile to single moves);
#   * block converters: a run of a strided operand of any dtype <-> a
#     contiguous float / double / int64 scratch block, with C cast semantics;
#   * an N-d iterator over up to 3 operands that walks the logical shape in
#     C order row by row, after coalescing dimensions that are contiguous in
#     every operand (so a contiguous tensor becomes one long row).

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memmove, memset

# A kernel that rejects its arguments raises this (the firmware reports a KERNEL_FAULT);
# anything else a kernel raises is reported as an emulator bug.
from emulator.errors import KernelArgumentError

cdef extern from *:
    """
    #include <string.h>
    #include <stdint.h>

    static inline uint32_t ek_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
    static inline float ek_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

    /* c10::detail::fp16_ieee_to_fp32_value: exact, handles subnormals/inf/NaN. */
    static inline float ek_f16_to_f32(uint16_t h) {
        const uint32_t w = (uint32_t)h << 16;
        const uint32_t sign = w & UINT32_C(0x80000000);
        const uint32_t two_w = w + w;
        const float normalized = ek_f32_from_bits((two_w >> 4) + (UINT32_C(0xE0) << 23)) * 0x1.0p-112f;
        const float denormalized = ek_f32_from_bits((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;
        const uint32_t r = sign | (two_w < (UINT32_C(1) << 27) ? ek_f32_bits(denormalized)
                                                                : ek_f32_bits(normalized));
        return ek_f32_from_bits(r);
    }

    /* c10::detail::fp16_ieee_from_fp32_value: round-to-nearest-even via the
       FPU (needs IEEE float evaluation without flush-to-zero, true on x86-64
       and aarch64 without -ffast-math). NaN -> 0x7E00 with the sign kept. */
    static inline uint16_t ek_f16_from_f32(float f) {
        float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
        const uint32_t w = ek_f32_bits(f);
        const uint32_t shl1_w = w + w;
        const uint32_t sign = w & UINT32_C(0x80000000);
        uint32_t bias = shl1_w & UINT32_C(0xFF000000);
        if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
        base = ek_f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
        const uint32_t bits = ek_f32_bits(base);
        const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
        const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
        const uint32_t nonsign = exp_bits + mantissa_bits;
        return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
    }

    static inline float ek_bf16_to_f32(uint16_t h) { return ek_f32_from_bits((uint32_t)h << 16); }

    /* c10::BFloat16 round_to_nearest_even: NaN -> 0x7FC0. */
    static inline uint16_t ek_bf16_from_f32(float f) {
        if (f != f) return UINT16_C(0x7FC0);
        const uint32_t u = ek_f32_bits(f);
        return (uint16_t)((u + UINT32_C(0x7FFF) + ((u >> 16) & 1u)) >> 16);
    }

    /* Round a float to half / bfloat16 precision and widen back. */
    static inline float ek_round_f16(float f) { return ek_f16_to_f32(ek_f16_from_f32(f)); }
    static inline float ek_round_bf16(float f) { return ek_bf16_to_f32(ek_bf16_from_f32(f)); }

    #define EK_DEF_LS(name, T) \
        static inline T ek_ld_##name(const char *p) { T v; memcpy(&v, p, sizeof(T)); return v; } \
        static inline void ek_st_##name(char *p, T v) { memcpy(p, &v, sizeof(T)); }
    EK_DEF_LS(u8, uint8_t)
    EK_DEF_LS(i8, int8_t)
    EK_DEF_LS(i16, int16_t)
    EK_DEF_LS(u16, uint16_t)
    EK_DEF_LS(i32, int32_t)
    EK_DEF_LS(i64, int64_t)
    EK_DEF_LS(f32, float)
    EK_DEF_LS(f64, double)
    """
    uint32_t ek_f32_bits(float f) noexcept nogil
    float ek_f32_from_bits(uint32_t u) noexcept nogil
    float ek_f16_to_f32(uint16_t h) noexcept nogil
    uint16_t ek_f16_from_f32(float f) noexcept nogil
    float ek_bf16_to_f32(uint16_t h) noexcept nogil
    uint16_t ek_bf16_from_f32(float f) noexcept nogil
    float ek_round_f16(float f) noexcept nogil
    float ek_round_bf16(float f) noexcept nogil
    uint8_t ek_ld_u8(const char* p) noexcept nogil
    int8_t ek_ld_i8(const char* p) noexcept nogil
    int16_t ek_ld_i16(const char* p) noexcept nogil
    uint16_t ek_ld_u16(const char* p) noexcept nogil
    int32_t ek_ld_i32(const char* p) noexcept nogil
    int64_t ek_ld_i64(const char* p) noexcept nogil
    float ek_ld_f32(const char* p) noexcept nogil
    double ek_ld_f64(const char* p) noexcept nogil
    void ek_st_u8(char* p, uint8_t v) noexcept nogil
    void ek_st_i8(char* p, int8_t v) noexcept nogil
    void ek_st_i16(char* p, int16_t v) noexcept nogil
    void ek_st_u16(char* p, uint16_t v) noexcept nogil
    void ek_st_i32(char* p, int32_t v) noexcept nogil
    void ek_st_i64(char* p, int64_t v) noexcept nogil
    void ek_st_f32(char* p, float v) noexcept nogil
    void ek_st_f64(char* p, double v) noexcept nogil


# Dtype codes: must equal emulator/kernels/dtypes.py (the launch ABI).
cdef enum:
    DT_BOOL = 0
    DT_UINT8 = 1
    DT_INT8 = 2
    DT_INT16 = 3
    DT_INT32 = 4
    DT_INT64 = 5
    DT_FLOAT16 = 6
    DT_BFLOAT16 = 7
    DT_FLOAT32 = 8
    DT_FLOAT64 = 9
    NUM_ARITHMETIC_DTYPES = 10   # codes below: what check_dtype and the block converters take
    # Storage-only codes: the copy/convert and fill kernels (strided.pyx) take them.
    DT_UINT16 = 10
    DT_UINT32 = 11
    DT_UINT64 = 12
    DT_COMPLEX64 = 13
    DT_COMPLEX128 = 14
    DT_COMPLEX32 = 15   # two float16 (torch.chalf)
    DT_FLOAT8_E4M3FN = 16     # float8 storage types (_float8.pxi)
    DT_FLOAT8_E5M2 = 17
    DT_FLOAT8_E4M3FNUZ = 18
    DT_FLOAT8_E5M2FNUZ = 19
    NUM_DTYPES = 20

cdef enum:
    MAX_RANK = 64    # torch's own limit of dim lists (dim bitsets); every user of MAX_RANK arrays checks it first
    MAX_OPS = 4      # operands of one iteration: out plus up to three inputs
    BLOCK = 256      # scratch block length: 256 doubles x 3 stays in L1

cdef inline Py_ssize_t itemsize_of(int dt) noexcept nogil:
    if dt == DT_COMPLEX128:
        return 16
    if dt == DT_INT64 or dt == DT_FLOAT64 or dt == DT_UINT64 or dt == DT_COMPLEX64:
        return 8
    if dt == DT_INT32 or dt == DT_FLOAT32 or dt == DT_UINT32 or dt == DT_COMPLEX32:
        return 4
    if dt == DT_INT16 or dt == DT_FLOAT16 or dt == DT_BFLOAT16 or dt == DT_UINT16:
        return 2
    return 1

_DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64",
                "float16", "bfloat16", "float32", "float64",
                "uint16", "uint32", "uint64", "complex64", "complex128", "complex32",
                "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")

# Scratch element types for the block converters.
ctypedef fused acc_t:
    float
    double
    int64_t


cdef inline bint is_floating(int dt) noexcept nogil:
    return DT_FLOAT16 <= dt <= DT_FLOAT64


cdef inline bint is_float8(int dt) noexcept nogil:
    return DT_FLOAT8_E4M3FN <= dt <= DT_FLOAT8_E5M2FNUZ


cdef int check_dtype(object dt, str what) except -1:
    """Return the dtype code as a C int; KernelArgumentError (a ValueError) for anything unknown."""
    cdef long code
    if type(dt) is int:  # the common case, checked without Python-level calls (hot path)
        code = dt
        if 0 <= code < NUM_ARITHMETIC_DTYPES:
            return <int>code
    if isinstance(dt, bool) or not hasattr(dt, "__index__") or not (0 <= dt.__index__() < NUM_DTYPES):
        raise KernelArgumentError(f"{what}: unknown dtype code {dt!r} (expected 0..9)")
    if dt.__index__() >= NUM_ARITHMETIC_DTYPES:  # known, but only the copy and fill kernels take it
        raise KernelArgumentError(f"{what}: {_DTYPE_NAMES[dt.__index__()]} is a storage-only dtype "
                                  f"(copies and fills); this kernel takes codes 0..9")
    return dt.__index__()


cdef inline int check_storage_dtype(object dt, str what) except -1:
    """check_dtype for the copy/convert and fill kernels, which take every code."""
    if type(dt) is int and NUM_ARITHMETIC_DTYPES <= dt < NUM_DTYPES:
        return <int>dt
    return check_dtype(dt, what)


cdef char* as_ptr(object addr, str what) except NULL:
    """Host pointer from a Python int; only called when elements will be touched."""
    cdef unsigned long long value
    if type(addr) is int and addr > 0:  # the common case, without Python-level calls (hot path)
        try:
            value = addr
        except OverflowError:
            raise KernelArgumentError(f"{what}: invalid address {addr!r}") from None
        return <char*><uintptr_t>value
    if isinstance(addr, bool) or not hasattr(addr, "__index__") or not (0 < addr.__index__() < 2**64):
        raise KernelArgumentError(f"{what}: invalid address {addr!r}")
    return <char*><uintptr_t>(<uint64_t>addr.__index__())


# ---------------------------------------------------------------------------
# Block converters.  C cast semantics throughout: float -> int truncates
# (through int64; out-of-range/NaN is as undefined as in C, but never traps),
# int -> narrower int wraps, anything -> bool is (x != 0), float64 -> half and
# bfloat16 goes through float32 (as PyTorch does), int64 -> float32 is a single
# C conversion (not through double).

cdef void load_block(const char* p, Py_ssize_t s, int dt, Py_ssize_t n, acc_t* out) noexcept nogil:
    """out[i] = cast<acc_t>(element at p + i*s bytes), for i < n."""
    cdef Py_ssize_t i
    # (each floating dtype has a loop for contiguous elements too: a constant stride the
    # compiler vectorises)
    if dt == DT_FLOAT32:
        if s == 4:
            for i in range(n):
                out[i] = <acc_t>ek_ld_f32(p + i * 4)
        else:
            for i in range(n):
                out[i] = <acc_t>ek_ld_f32(p + i * s)
    elif dt == DT_BFLOAT16:
        if s == 2:
            for i in range(n):
                out[i] = <acc_t>ek_bf16_to_f32(ek_ld_u16(p + i * 2))
        else:
            for i in range(n):
                out[i] = <acc_t>ek_bf16_to_f32(ek_ld_u16(p + i * s))
    elif dt == DT_FLOAT16:
        for i in range(n):
            out[i] = <acc_t>ek_f16_to_f32(ek_ld_u16(p + i * s))
    elif dt == DT_FLOAT64:
        if s == 8:
            for i in range(n):
                out[i] = <acc_t>ek_ld_f64(p + i * 8)
        else:
            for i in range(n):
                out[i] = <acc_t>ek_ld_f64(p + i * s)
    elif dt == DT_INT64:
        for i in range(n):
            out[i] = <acc_t>ek_ld_i64(p + i * s)
    elif dt == DT_INT32:
        for i in range(n):
            out[i] = <acc_t>ek_ld_i32(p + i * s)
    elif dt == DT_INT16:
        for i in range(n):
            out[i] = <acc_t>ek_ld_i16(p + i * s)
    elif dt == DT_INT8:
        for i in range(n):
            out[i] = <acc_t>ek_ld_i8(p + i * s)
    elif dt == DT_UINT8:
        for i in range(n):
            out[i] = <acc_t>ek_ld_u8(p + i * s)
    else:  # DT_BOOL: any nonzero byte reads as true
        for i in range(n):
            out[i] = <acc_t>(ek_ld_u8(p + i * s) != 0)


cdef void store_block(const acc_t* v, Py_ssize_t n, int dt, char* p, Py_ssize_t s) noexcept nogil:
    """element at p + i*s bytes = cast<dt>(v[i]), for i < n."""
    cdef Py_ssize_t i
    if dt == DT_FLOAT32:
        if s == 4:
            for i in range(n):
                ek_st_f32(p + i * 4, <float>v[i])
        else:
            for i in range(n):
                ek_st_f32(p + i * s, <float>v[i])
    elif dt == DT_BFLOAT16:
        if s == 2:
            for i in range(n):
                ek_st_u16(p + i * 2, ek_bf16_from_f32(<float>v[i]))
        else:
            for i in range(n):
                ek_st_u16(p + i * s, ek_bf16_from_f32(<float>v[i]))
    elif dt == DT_FLOAT16:
        for i in range(n):
            ek_st_u16(p + i * s, ek_f16_from_f32(<float>v[i]))
    elif dt == DT_FLOAT64:
        if s == 8:
            for i in range(n):
                ek_st_f64(p + i * 8, <double>v[i])
        else:
            for i in range(n):
                ek_st_f64(p + i * s, <double>v[i])
    elif dt == DT_INT64:
        for i in range(n):
            ek_st_i64(p + i * s, <int64_t>v[i])
    elif dt == DT_INT32:
        for i in range(n):
            ek_st_i32(p + i * s, <int32_t><int64_t>v[i])
    elif dt == DT_INT16:
        for i in range(n):
            ek_st_i16(p + i * s, <int16_t><int64_t>v[i])
    elif dt == DT_INT8:
        for i in range(n):
            ek_st_i8(p + i * s, <int8_t><int64_t>v[i])
    elif dt == DT_UINT8:
        for i in range(n):
            ek_st_u8(p + i * s, <uint8_t><int64_t>v[i])
    else:  # DT_BOOL
        for i in range(n):
            ek_st_u8(p + i * s, 1 if v[i] != 0 else 0)


cdef void round_block_to(acc_t* v, Py_ssize_t n, int dt) noexcept nogil:
    """Round values in place to the precision/range of dtype dt (the "cast to
    compute dtype" step when an operand's dtype differs from it)."""
    cdef Py_ssize_t i
    if acc_t is int64_t:
        if dt == DT_INT32:
            for i in range(n):
                v[i] = <int32_t>v[i]
        elif dt == DT_INT16:
            for i in range(n):
                v[i] = <int16_t>v[i]
        elif dt == DT_INT8:
            for i in range(n):
                v[i] = <int8_t>v[i]
        elif dt == DT_UINT8:
            for i in range(n):
                v[i] = <uint8_t>v[i]
        elif dt == DT_BOOL:
            for i in range(n):
                v[i] = v[i] != 0
    else:
        if dt == DT_FLOAT16:
            for i in range(n):
                v[i] = ek_round_f16(<float>v[i])
        elif dt == DT_BFLOAT16:
            for i in range(n):
                v[i] = ek_round_bf16(<float>v[i])
        elif dt == DT_FLOAT32:
            for i in range(n):
                v[i] = <float>v[i]


# ---------------------------------------------------------------------------
# N-d iteration.

cdef struct NdIter:
    int ndim                            # >= 1 after init
    int nops
    Py_ssize_t size                     # total elements (0: nothing to do)
    Py_ssize_t shape[MAX_RANK]
    Py_ssize_t strides[MAX_OPS * MAX_RANK]   # bytes; [op * MAX_RANK + dim]
    Py_ssize_t index[MAX_RANK]


cdef int iter_init(NdIter* it, object shape, list strides, list itemsizes, str what) except -1:
    """Validate shape/strides (element units) and fill `it` with byte strides,
    dropping size-1 dims and merging dims contiguous in every operand.  The C
    order of the logical shape is preserved (random kernels rely on it)."""
    cdef int nops = len(strides), k, d, nd = 0, ndim
    cdef Py_ssize_t ext, size = 1
    cdef Py_ssize_t st[MAX_OPS]
    cdef bint merge
    shape = tuple(shape)
    ndim = len(shape)
    if ndim > MAX_RANK:
        raise KernelArgumentError(f"{what}: rank {ndim} exceeds the maximum of {MAX_RANK}")
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
    if nd == 0:                          # rank 0 or all-ones: one element
        it.shape[0] = 1
        for k in range(nops):
            it.strides[k * MAX_RANK] = 0
        nd = 1
    it.ndim = nd
    for d in range(nd):
        it.index[d] = 0
    return 0


cdef inline Py_ssize_t iter_row_len(NdIter* it) noexcept nogil:
    return it.shape[it.ndim - 1]


cdef inline Py_ssize_t iter_row_stride(NdIter* it, int op) noexcept nogil:
    return it.strides[op * MAX_RANK + it.ndim - 1]


cdef inline bint iter_next_row(NdIter* it, char** ptrs) noexcept nogil:
    """Advance ptrs to the start of the next row (odometer over all but the
    innermost dim); False when the iteration is finished."""
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


cdef inline double round_to(double v, int dt) noexcept nogil:
    """v rounded to the precision of floating dtype dt (as stored)."""
    if dt == DT_FLOAT32:
        return <float>v
    if dt == DT_FLOAT16:
        return ek_round_f16(<float>v)
    if dt == DT_BFLOAT16:
        return ek_round_bf16(<float>v)
    return v
