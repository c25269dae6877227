# Vector math for the float32 paths of the vector-engine kernels (softmax, log_softmax, and
# the pointwise kernels' check that a vector-libm result rounds as the scalar one).
#
# Speed only: written with GCC/Clang vector extensions (8 floats per vector) so that each
# row function compiles to AVX-512 (x86-64-v4), AVX2+FMA (x86-64-v3) and baseline x86-64 (SSE2)
# code; each call takes the copy of the module's instruction-set cap (_isa.pxi, EMU_CPU_ISA):
# AVX-512 for avx512 and amx, AVX2+FMA for avx2, SSE2 for baseline. The copies' bodies are
# one always-inlined function, compiled three times. Numerics:
#   * exp is evaluated in float32 as Cephes' expf is (and as PyTorch's vectorised CPU exp,
#     within 1 ulp): round-to-nearest range reduction x = k*ln2 + r with ln2 split in two
#     (Cody-Waite), a degree-7 minimax polynomial on |r| <= ln2/2, and 2**k applied as two
#     factors so that results down to the float32 subnormals keep one rounding. Inputs are
#     clamped to [-104, 89] (exp(-104) rounds to 0, exp(89) overflows to inf, as the true
#     values do; below -104 the result is set to +0 without the arithmetic). NaN propagates.
#   * x - max is rounded in float32 first, as CPU computes it.
#   * sums accumulate in double, 4 lanes at a time (another summation order than a scalar
#     loop; the float32 sum is the double sum rounded once).

cdef extern from *:
    """
    #include <stddef.h>
    #include <string.h>
    #pragma GCC diagnostic ignored "-Wpsabi"          /* the vector helpers are inline-only */
    #pragma GCC diagnostic ignored "-Wunused-function"  /* each module uses some of the rows */
    typedef float ek_vf __attribute__((vector_size(32)));
    typedef int ek_vi __attribute__((vector_size(32)));
    typedef float ek_vf4 __attribute__((vector_size(16)));
    typedef double ek_vd4 __attribute__((vector_size(32)));

    #define EK_INLINE static inline __attribute__((always_inline))
    /* EK_DISPATCH(ret, name, (params), (args)): name(params) runs name_body, the always-inlined
       body, compiled for x86-64-v4, x86-64-v3 or the baseline as ek_isa_cap (_isa.pxi) says.
       EK_DISPATCH_VOID: the same for a body that returns nothing. */
    #if defined(__x86_64__) && defined(__GNUC__)
    #define EK_COPIES(ret, name, params, call)                                                     \
        __attribute__((target("arch=x86-64-v4"))) static ret name##_v4 params { call; }          \
        __attribute__((target("arch=x86-64-v3"))) static ret name##_v3 params { call; }
    #define EK_DISPATCH(ret, name, params, args)                                                   \
        EK_COPIES(ret, name, params, return name##_body args)                                    \
        static ret name params {                                                                 \
            if (ek_isa_cap >= EK_ISA_AVX512) return name##_v4 args;                              \
            if (ek_isa_cap >= EK_ISA_AVX2) return name##_v3 args;                                \
            return name##_body args;                                                             \
        }
    #define EK_DISPATCH_VOID(name, params, args)                                                   \
        EK_COPIES(void, name, params, name##_body args)                                          \
        static void name params {                                                                \
            if (ek_isa_cap >= EK_ISA_AVX512) name##_v4 args;                                     \
            else if (ek_isa_cap >= EK_ISA_AVX2) name##_v3 args;                                  \
            else name##_body args;                                                               \
        }
    #else
    #define EK_DISPATCH(ret, name, params, args) static ret name params { return name##_body args; }
    #define EK_DISPATCH_VOID(name, params, args) static void name params { name##_body args; }
    #endif

    EK_INLINE ek_vf ek_blendf(ek_vi mask, ek_vf yes, ek_vf no) {
        return (ek_vf)(((ek_vi)yes & mask) | ((ek_vi)no & ~mask));
    }

    EK_INLINE ek_vf ek_loadf(const float *v) {
        ek_vf f;
        memcpy(&f, v, sizeof f);
        return f;
    }

    /* 8 floats from v[:rest] (rest < 8), the other lanes set to pad. */
    EK_INLINE ek_vf ek_load_tailf(const float *v, Py_ssize_t rest, float pad) {
        float t[8];
        Py_ssize_t k;
        for (k = 0; k < 8; k++) t[k] = k < rest ? v[k] : pad;
        return ek_loadf(t);
    }

    EK_INLINE void ek_store_tailf(float *v, Py_ssize_t rest, ek_vf f) {
        float t[8];
        memcpy(t, &f, sizeof f);
        memcpy(v, t, rest * sizeof(float));
    }

    /* exp(x) lane-wise in float32 (see the header). */
    EK_INLINE ek_vf ek_expf8(ek_vf x) {
        const ek_vf lo = {-104, -104, -104, -104, -104, -104, -104, -104};
        const ek_vf hi = {89, 89, 89, 89, 89, 89, 89, 89};
        const ek_vf magic = {12582912.0f, 12582912.0f, 12582912.0f, 12582912.0f,
                             12582912.0f, 12582912.0f, 12582912.0f, 12582912.0f};   /* 1.5 * 2**23 */
        const ek_vf zero = {0, 0, 0, 0, 0, 0, 0, 0};
        ek_vf src = x, kd, k, r, p;
        ek_vi ki, k1, under = x < lo;
        /* Below -104 the result is +0 (what the clamped lane computed: 0.97 * 2**-150 rounds to
           0): such lanes (a softmax row's masked -inf) compute exp(0) instead and are zeroed at
           the end, so they cost no subnormal arithmetic (a microcode assist per vector). */
        x = ek_blendf(under, zero, x);
        x = ek_blendf(x > hi, hi, x);
        kd = x * 1.44269504088896341f + magic;             /* round(x / ln2) in the low bits */
        k = kd - magic;
        r = x - k * 0.693359375f;                          /* 0.693359375 + -2.12194440e-4 = ln2 */
        r = r - k * -2.12194440e-4f;
        p = r * 1.9875691500e-4f + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * (r * r) + r + 1.0f;
        ki = (ek_vi)kd - (ek_vi)magic;                     /* k, in [-150, 129] */
        k1 = ki >> 1;                                      /* 2**k = 2**k1 * 2**(k - k1), both normal */
        p = (p * (ek_vf)((k1 + 127) << 23)) * (ek_vf)((ki - k1 + 127) << 23);
        p = ek_blendf(under, zero, p);
        return ek_blendf(src != src, src, p);
    }

    EK_INLINE ek_vd4 ek_widen_sum(ek_vf f) {
        ek_vf4 a = {f[0], f[1], f[2], f[3]}, b = {f[4], f[5], f[6], f[7]};
        return __builtin_convertvector(a, ek_vd4) + __builtin_convertvector(b, ek_vd4);
    }

    EK_INLINE double ek_hsum4(ek_vd4 s) {
        return (s[0] + s[1]) + (s[2] + s[3]);
    }

    /* Largest element of v[:n] (n >= 1); NaN if any element is NaN. */
    EK_INLINE float ek_row_max_f32_body(const float *v, Py_ssize_t n) {
        ek_vf m = ek_load_tailf(v, 1, v[0]), x;
        ek_vi nan = {0, 0, 0, 0, 0, 0, 0, 0};
        Py_ssize_t i, k;
        float best;
        for (i = 0; i + 8 <= n; i += 8) {
            x = ek_loadf(v + i);
            nan |= x != x;
            m = ek_blendf(x > m, x, m);
        }
        x = ek_load_tailf(v + i, n - i, v[0]);
        nan |= x != x;
        m = ek_blendf(x > m, x, m);
        best = m[0];
        for (k = 0; k < 8; k++) {
            if (nan[k]) return __builtin_nanf("");
            if (m[k] > best) best = m[k];
        }
        return best;
    }
    EK_DISPATCH(float, ek_row_max_f32, (const float *v, Py_ssize_t n), (v, n))

    /* v[i] = exp(v[i] - shift) in place; returns the double sum of the stored values. */
    EK_INLINE double ek_row_exp_shift_f32_body(float *v, Py_ssize_t n, float shift) {
        ek_vd4 s = {0, 0, 0, 0};
        ek_vf f;
        Py_ssize_t i;
        for (i = 0; i + 8 <= n; i += 8) {
            f = ek_expf8(ek_loadf(v + i) - shift);
            memcpy(v + i, &f, sizeof f);
            s += ek_widen_sum(f);
        }
        if (i < n) {
            f = ek_expf8(ek_load_tailf(v + i, n - i, -__builtin_inff()) - shift);
            ek_store_tailf(v + i, n - i, f);
            s += ek_widen_sum(ek_load_tailf(v + i, n - i, 0));
        }
        return ek_hsum4(s);
    }
    EK_DISPATCH(double, ek_row_exp_shift_f32, (float *v, Py_ssize_t n, float shift), (v, n, shift))

    /* The double sum of exp(v[i] - shift) over v[:n]; v is not written. */
    EK_INLINE double ek_row_sum_exp_shift_f32_body(const float *v, Py_ssize_t n, float shift) {
        ek_vd4 s = {0, 0, 0, 0};
        ek_vf f;
        Py_ssize_t i;
        float t[8];
        for (i = 0; i + 8 <= n; i += 8)
            s += ek_widen_sum(ek_expf8(ek_loadf(v + i) - shift));
        if (i < n) {
            f = ek_expf8(ek_load_tailf(v + i, n - i, -__builtin_inff()) - shift);
            ek_store_tailf(t, n - i, f);
            s += ek_widen_sum(ek_load_tailf(t, n - i, 0));
        }
        return ek_hsum4(s);
    }
    EK_DISPATCH(double, ek_row_sum_exp_shift_f32, (const float *v, Py_ssize_t n, float shift), (v, n, shift))

    /* v[i] *= scale in place (float32 arithmetic). */
    EK_INLINE void ek_row_scale_f32_body(float *v, Py_ssize_t n, float scale) {
        Py_ssize_t i;
        for (i = 0; i < n; i++) v[i] = v[i] * scale;
    }
    EK_DISPATCH_VOID(ek_row_scale_f32, (float *v, Py_ssize_t n, float scale), (v, n, scale))

    /* v[i] = (v[i] - shift) - lse in place (float32 arithmetic, log_softmax's order). */
    EK_INLINE void ek_row_shift2_f32_body(float *v, Py_ssize_t n, float shift, float lse) {
        Py_ssize_t i;
        for (i = 0; i < n; i++) v[i] = (v[i] - shift) - lse;
    }
    EK_DISPATCH_VOID(ek_row_shift2_f32, (float *v, Py_ssize_t n, float shift, float lse), (v, n, shift, lse))

    /* keep[i] = whether a[i] (a double result within `margin` double ulps of the exact one)
       rounds to the same float32 as it: a normal float32 value in [2**-125, 2**127] whose
       low 29 bits keep more than `margin` from the float32 rounding midpoint. NaN is not kept.
       Returns the count kept. A branch-free loop the compiler vectorises. */
    EK_INLINE Py_ssize_t ek_rounds_like_f32_body(const double *a, unsigned char *keep, Py_ssize_t n,
                                                    long long margin) {
        Py_ssize_t i, kept = 0;
        for (i = 0; i < n; i++) {
            unsigned long long u, mag;
            long long low;
            memcpy(&u, a + i, 8);
            mag = u & 0x7fffffffffffffffULL;
            low = (long long)(u & ((1ULL << 29) - 1)) - (1LL << 28);
            keep[i] = (mag >= 0x3820000000000000ULL) & (mag <= 0x47e0000000000000ULL)
                      & ((unsigned long long)(low + margin) > (unsigned long long)(2 * margin));
            kept += keep[i];
        }
        return kept;
    }
    EK_DISPATCH(Py_ssize_t, ek_rounds_like_f32, (const double *a, unsigned char *keep, Py_ssize_t n, long long margin), (a, keep, n, margin))

    /* The argument and result maps around a vector-libm call (pointwise.pyx's fast path), as
       loops the compiler vectorises: a = scale * x, or the tanh-gelu cubic; then the result
       expression of the op from x and the libm values v. */
    enum { EK_PREP_SCALE = 0, EK_PREP_GELU_TANH = 1 };
    enum { EK_POST_COPY = 0, EK_POST_GELU = 1, EK_POST_SIGMOID = 2, EK_POST_SILU = 3 };

    EK_INLINE void ek_vec_prep_body(int kind, const double *x, double *a, Py_ssize_t n, double scale) {
        Py_ssize_t i;
        if (kind == EK_PREP_GELU_TANH)
            for (i = 0; i < n; i++) a[i] = scale * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
        else
            for (i = 0; i < n; i++) a[i] = x[i] * scale;
    }
    EK_DISPATCH_VOID(ek_vec_prep, (int kind, const double *x, double *a, Py_ssize_t n, double scale), (kind, x, a, n, scale))

    /* gelu: 0.5 x (1 + v), NaN (recomputed by the scalar path) where 1 + v < tail cancels. */
    EK_INLINE void ek_vec_post_body(int kind, const double *x, const double *v, double *a, Py_ssize_t n,
                                      double tail) {
        Py_ssize_t i;
        if (kind == EK_POST_GELU)
            for (i = 0; i < n; i++) a[i] = 1.0 + v[i] >= tail ? 0.5 * x[i] * (1.0 + v[i]) : __builtin_nan("");
        else if (kind == EK_POST_SIGMOID)
            for (i = 0; i < n; i++) a[i] = 1.0 / (1.0 + v[i]);
        else if (kind == EK_POST_SILU)
            for (i = 0; i < n; i++) a[i] = x[i] / (1.0 + v[i]);
        else
            memcpy(a, v, n * sizeof(double));
    }
    EK_DISPATCH_VOID(ek_vec_post, (int kind, const double *x, const double *v, double *a, Py_ssize_t n, double tail), (kind, x, v, a, n, tail))
    """
    int EK_PREP_SCALE, EK_PREP_GELU_TANH, EK_POST_COPY, EK_POST_GELU, EK_POST_SIGMOID, EK_POST_SILU
    void ek_vec_prep(int kind, const double* x, double* a, Py_ssize_t n, double scale) noexcept nogil
    void ek_vec_post(int kind, const double* x, const double* v, double* a, Py_ssize_t n, double tail) noexcept nogil
    Py_ssize_t ek_rounds_like_f32(const double* a, unsigned char* keep, Py_ssize_t n, long long margin) noexcept nogil
    float ek_row_max_f32(const float* v, Py_ssize_t n) noexcept nogil
    double ek_row_exp_shift_f32(float* v, Py_ssize_t n, float shift) noexcept nogil
    double ek_row_sum_exp_shift_f32(const float* v, Py_ssize_t n, float shift) noexcept nogil
    void ek_row_scale_f32(float* v, Py_ssize_t n, float scale) noexcept nogil
    void ek_row_shift2_f32(float* v, Py_ssize_t n, float shift, float lse) noexcept nogil
