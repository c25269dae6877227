# The device's float8 conversions (included after _common.pxi).
#
# Four one-byte formats, each (exponent bits, mantissa bits, bias):
#   e4m3fn   (4, 3, 7)   no inf; 0x7F/0xFF are NaN; out-of-range and +-inf SATURATE to +-448
#   e5m2     (5, 2, 15)  IEEE-like: +-inf, NaN; out of range rounds to +-inf
#   e4m3fnuz (4, 3, 8)   no inf, no -0: 0x80 is the only NaN; out of range, inf and NaN give it
#   e5m2fnuz (5, 2, 16)  the same rules
# Conversions to float8 start from float32 (a float64 or integer source is converted to float32
# first, as torch CPU does, so a float64 is rounded twice) and round to nearest, ties to even,
# subnormals included. -0 keeps its sign except in the fnuz formats (their -0 is 0). A NaN keeps
# its sign in e4m3fn/e5m2. Conversions from float8 are exact into float32; NaN codes give the
# float32 NaNs CPU's kernels give (checked bit for bit over all 256 codes in
# tests/torch_plugin/test_float8.py): e4m3fn 0x7FF00000 | sign, e5m2 the float16 NaN of the
# same byte widened (quiet bit set, payload shifted), fnuz 0x7F800001.

cdef extern from *:
    """
    #include <math.h>
    #include <string.h>
    #include <stdint.h>
    /* Format table, indexed by dtype code - 16. */
    static const int sk_f8_ebits[4] = {4, 5, 4, 5};
    static const int sk_f8_mbits[4] = {3, 2, 3, 2};
    static const int sk_f8_bias[4] = {7, 15, 8, 16};
    static const int sk_f8_fnuz[4] = {0, 0, 1, 1};
    static float sk_f8_table[4][256];
    static uint16_t sk_f8_half[4][256];   /* float16 bits of each code (every float8 value is a float16) */
    static int sk_f8_ready = 0;

    static inline float sk_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

    static float sk_f8_decode_slow(int fmt, unsigned c) {
        int E = sk_f8_ebits[fmt], M = sk_f8_mbits[fmt], bias = sk_f8_bias[fmt];
        uint32_t sign = (uint32_t)(c & 0x80) << 24;
        unsigned e = (c >> M) & ((1u << E) - 1), m = c & ((1u << M) - 1);
        double v;
        if (sk_f8_fnuz[fmt]) {
            if (c == 0x80) return sk_bits_f32(0x7F800001u);
        } else if (E == 4) {
            if (e == 15 && m == 7) return sk_bits_f32(0x7FF00000u | sign);
        } else if (e == 31) {
            if (m == 0) return sk_bits_f32(0x7F800000u | sign);
            return sk_bits_f32(0x7FC00000u | sign | ((uint32_t)m << (23 - M)));
        }
        v = e ? ldexp(1.0 + ldexp((double)m, -M), (int)e - bias) : ldexp((double)m, 1 - bias - M);
        return sign ? -(float)v : (float)v;
    }

    /* float16 bits of a float32 that a float16 holds exactly; a NaN keeps its payload's top bits
       and gets the quiet bit (as CPU's float8 -> float16 conversion, F16C's). */
    static uint16_t sk_exact_half(float f) {
        uint32_t u; int ex; double a; uint16_t sign;
        memcpy(&u, &f, 4);
        sign = (uint16_t)((u >> 16) & 0x8000);
        if ((u & 0x7F800000u) == 0x7F800000u) {
            if (u & 0x007FFFFFu) return (uint16_t)(sign | 0x7E00 | ((u & 0x007FFFFFu) >> 13));
            return (uint16_t)(sign | 0x7C00);
        }
        a = fabs((double)f);
        if (a == 0.0) return sign;
        frexp(a, &ex);
        if (ex - 1 >= -14)
            return (uint16_t)(sign | ((ex - 1 + 15) << 10) | (uint16_t)(ldexp(a, -(ex - 1)) * 1024.0 - 1024.0));
        return (uint16_t)(sign | (uint16_t)ldexp(a, 24));
    }

    static void sk_f8_init(void) {
        int fmt; unsigned c;
        if (sk_f8_ready) return;
        for (fmt = 0; fmt < 4; fmt++)
            for (c = 0; c < 256; c++) {
                sk_f8_table[fmt][c] = sk_f8_decode_slow(fmt, c);
                sk_f8_half[fmt][c] = sk_exact_half(sk_f8_table[fmt][c]);
            }
        sk_f8_ready = 1;
    }

    static inline uint16_t sk_f8_to_half_bits(int fmt, uint8_t c) { return sk_f8_half[fmt][c]; }

    static inline float sk_f8_decode(int fmt, uint8_t c) { return sk_f8_table[fmt][c]; }

    /* The largest finite value of a format. */
    static inline double sk_f8_max(int fmt) {
        int E = sk_f8_ebits[fmt], M = sk_f8_mbits[fmt], bias = sk_f8_bias[fmt];
        int top = (1 << E) - 1;
        if (sk_f8_fnuz[fmt]) return ldexp(2.0 - ldexp(1.0, -M), top - bias);
        if (E == 4) return ldexp(2.0 - ldexp(1.0, 1 - M), top - bias);   /* 0x7E: 448 */
        return ldexp(2.0 - ldexp(1.0, -M), top - 1 - bias);              /* 0x7B: 57344 */
    }

    static inline uint8_t sk_f8_encode(int fmt, float f) {
        int E = sk_f8_ebits[fmt], M = sk_f8_mbits[fmt], bias = sk_f8_bias[fmt], fnuz = sk_f8_fnuz[fmt];
        int emin = 1 - bias, ex, e;
        uint32_t u; uint8_t sign, code;
        double a, r, q;
        memcpy(&u, &f, 4);
        sign = (uint8_t)((u >> 24) & 0x80);
        a = fabs((double)f);
        if (a != a) return fnuz ? 0x80 : (uint8_t)(0x7F | sign);
        if (a == 0.0) return fnuz ? 0 : sign;
        if (isinf(a)) {
            r = INFINITY;
        } else {
            /* Round to nearest even on the format's grid at a's binade (subnormals share the
               smallest normal binade's quantum); a and a / q are exact in double. */
            frexp(a, &ex);
            e = ex - 1 < emin ? emin : ex - 1;
            q = ldexp(1.0, e - M);
            r = rint(a / q) * q;
        }
        if (r > sk_f8_max(fmt)) {
            if (fnuz) return 0x80;
            if (E == 4) return (uint8_t)(0x7E | sign);   /* e4m3fn saturates */
            return (uint8_t)(0x7C | sign);               /* e5m2: inf */
        }
        if (r == 0.0) return fnuz ? 0 : sign;
        frexp(r, &ex);
        e = ex - 1;
        if (e >= emin)
            code = (uint8_t)(((e + bias) << M) | (int)rint((ldexp(r, -e) - 1.0) * (double)(1 << M)));
        else
            code = (uint8_t)rint(ldexp(r, M - emin));
        return (uint8_t)(code | sign);
    }
    """
    void sk_f8_init() noexcept nogil
    float sk_f8_decode(int fmt, uint8_t c) noexcept nogil
    uint16_t sk_f8_to_half_bits(int fmt, uint8_t c) noexcept nogil
    uint8_t sk_f8_encode(int fmt, float f) noexcept nogil

sk_f8_init()


cdef void f8_load(const char* p, Py_ssize_t s, int dt, Py_ssize_t n, acc_t* out) noexcept nogil:
    """out[i] = float8 element i widened (exact in float and double; int64: truncated like a
    float -> int64 C cast)."""
    cdef Py_ssize_t i
    cdef int fmt = dt - DT_FLOAT8_E4M3FN
    for i in range(n):
        out[i] = <acc_t>sk_f8_decode(fmt, <uint8_t>p[i * s])


cdef void f8_store(const acc_t* v, Py_ssize_t n, int dt, char* p, Py_ssize_t s) noexcept nogil:
    """element i = float8 of v[i], through float32 (as CPU converts)."""
    cdef Py_ssize_t i
    cdef int fmt = dt - DT_FLOAT8_E4M3FN
    for i in range(n):
        p[i * s] = <char>sk_f8_encode(fmt, <float>v[i])


cdef void f8_to_half(const char* p, Py_ssize_t s, int dt, Py_ssize_t n, char* d, Py_ssize_t ds) noexcept nogil:
    """float8 -> float16, exact (NaN payloads as CPU's conversion keeps them)."""
    cdef Py_ssize_t i
    cdef int fmt = dt - DT_FLOAT8_E4M3FN
    for i in range(n):
        ek_st_u16(d + i * ds, sk_f8_to_half_bits(fmt, <uint8_t>p[i * s]))
