# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Convolution data movement of the device's vector engine: im2col, col2im and depthwise convolution.

Convolutions are lowered by the host to im2col / col2im here plus the matrix engine's GEMM
(gemm.pyx); this module never multiplies matrices.

* ``im2col``: an image (C, D, H, W) -> a column matrix described as the 7-d operand
  (C, kD, kH, kW, oD, oH, oW) (row = (c, kd, kh, kw), column = window position). Windows read
  ``x[c, od*sd - pd + kd*dd, ...]``; positions in the padding read 0. An exact copy: the column
  matrix may have any floating dtype, values are converted with the device's cast rules.
* ``col2im``: the adjoint: out[c, pos] = sum of the column entries that read pos, plus an
  optional per-channel bias added after the sum; accumulated in float32 (float64 for a float64
  output) in the order CPU's col2im uses, rounded once to the output dtype.
* ``depthwise_conv`` (+ its input and weight gradients): a convolution with one input channel per
  group computed directly over the window (see its section), one launch for the whole batch.

Numerics: float16/bfloat16 compute in float32, float32 in float32, float64 in float64, one
rounding to the output dtype.
Left out: the GEMMs (gemm.pyx), tiling and timing (library.py holds the cost models).
"""

from libc.stdlib cimport calloc, malloc, free
from libc.math cimport fabs, floor, ceil, floorf, INFINITY
from libc.stdint cimport INT64_MIN

include "_common.pxi"
include "_pool.pxi"
include "_spatial.pxi"


# Large im2col and max-pool launches run in two halves (of the channels; of the batch, or the
# channels, for pooling) on this thread and the pool's helper (_pool.pxi), when the output does
# not overlap the input: each half computes its own part of the output exactly as the whole would.
cdef enum:
    _SPLIT_ELEMENTS = 1 << 16

include "_split.pxi"


cdef inline double _ld(const char* p, int dt) noexcept nogil:
    cdef double v
    load_block(p, 0, dt, 1, &v)
    return v


cdef inline void _st(char* p, int dt, double v) noexcept nogil:
    store_block(&v, 1, dt, p, 0)


cdef inline Py_ssize_t _floordiv(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    # b > 0
    if a >= 0:
        return a // b
    return -((-a + b - 1) // b)


# ---------------------------------------------------------------------------------------------
# im2col / col2im

cdef struct Geometry:
    Py_ssize_t C, D, H, W                   # image
    Py_ssize_t kD, kH, kW, oD, oH, oW       # kernel extents and window grid
    Py_ssize_t sd, sh, sw, pd, ph, pw, dd, dh, dw


cdef int _geometry(Geometry* g, object image_shape, object col_shape, object params, str what) except -1:
    cdef Py_ssize_t im[4]
    cdef Py_ssize_t col[7]
    _shape(image_shape, 4, im, what)
    _shape(col_shape, 7, col, what)
    p = _ints(params, 9, what)
    if col[0] != im[0]:
        raise KernelArgumentError(f"{what}: {col[0]} column channels for an image of {im[0]} channels")
    if p[0] <= 0 or p[1] <= 0 or p[2] <= 0 or p[6] <= 0 or p[7] <= 0 or p[8] <= 0 or \
            p[3] < 0 or p[4] < 0 or p[5] < 0:
        raise KernelArgumentError(f"{what}: invalid stride/padding/dilation {tuple(p)!r}")
    g.C, g.D, g.H, g.W = im[0], im[1], im[2], im[3]
    g.kD, g.kH, g.kW, g.oD, g.oH, g.oW = col[1], col[2], col[3], col[4], col[5], col[6]
    g.sd, g.sh, g.sw, g.pd, g.ph, g.pw, g.dd, g.dh, g.dw = p
    return 0


cdef inline void _w_range(Geometry* g, Py_ssize_t kw, Py_ssize_t* lo, Py_ssize_t* hi,
                          Py_ssize_t* off) noexcept nogil:
    """Window columns ow in [lo, hi) read an image column iw = ow * sw + off inside [0, W);
    0 <= lo <= hi <= oW always (callers zero row[:lo] and row[hi:oW], so lo past oW would write past
    the row: a window column whose every position lies in the left padding has lo = hi = oW)."""
    cdef Py_ssize_t o = kw * g.dw - g.pw
    cdef Py_ssize_t a = _floordiv(-o + g.sw - 1, g.sw)        # ceil(-o / sw)
    cdef Py_ssize_t b = _floordiv(g.W - 1 - o, g.sw) + 1
    if a < 0:
        a = 0
    if a > g.oW:
        a = g.oW
    if b > g.oW:
        b = g.oW
    if b < a:
        b = a
    lo[0], hi[0], off[0] = a, b, o


cdef inline void _window_row(char* row, const char* src, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t n,
                             Py_ssize_t isz) noexcept nogil:
    """row[:lo] = 0, row[lo:hi] = src[lo:hi], row[hi:n] = 0 for 4- or 8-byte elements, copied as
    integers (bit for bit, as memcpy/memset): loops the compiler vectorises, cheaper than three
    library calls on the short rows of small images. src may be NULL when lo == hi."""
    if isz == 4:
        _window_words(<uint32_t*>row, <const uint32_t*>src, lo, hi, n)
    else:
        _window_words(<uint64_t*>row, <const uint64_t*>src, lo, hi, n)


ctypedef fused word_t:
    uint32_t
    uint64_t


cdef inline void _window_words(word_t* row, const word_t* src, Py_ssize_t lo, Py_ssize_t hi,
                               Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(lo):
        row[j] = 0
    for j in range(lo, hi):
        row[j] = src[j]
    for j in range(hi, n):
        row[j] = 0


cdef void _im2col_2d(Geometry* g, char* col, Py_ssize_t* cs, const char* x, Py_ssize_t* xs,
                     Py_ssize_t isz) noexcept nogil:
    """_im2col's fast case, a 2-d image (one depth of a depth-1 window without depth padding) of float32/float64
    read with unit stride along its rows into contiguous column rows: the same bytes, with the row
    and image pointers stepped instead of recomputed (small images have many short rows)."""
    cdef Py_ssize_t c, kh, kw, oh, ih, lo, hi, off
    cdef char* row
    cdef const char* src
    for c in range(g.C):
        for kh in range(g.kH):
            for kw in range(g.kW):
                _w_range(g, kw, &lo, &hi, &off)
                row = col + c * cs[0] + kh * cs[2] + kw * cs[3]
                src = x + c * xs[0] + off * isz
                ih = kh * g.dh - g.ph
                for oh in range(g.oH):
                    if ih < 0 or ih >= g.H:
                        _window_row(row, NULL, 0, 0, g.oW, isz)
                    else:
                        _window_row(row, src + ih * xs[2], lo, hi, g.oW, isz)
                    row += cs[5]
                    ih += g.sh


cdef void _im2col(Geometry* g, char* col, int cdt, Py_ssize_t* cs, const char* x, int xdt,
                  Py_ssize_t* xs) noexcept nogil:
    cdef double buf[BLOCK]
    cdef double zeros[BLOCK]
    cdef Py_ssize_t c, kd, kh, kw, od, oh, idd, ih, lo, hi, off, j, m
    cdef char* row
    cdef const char* src
    # Speed only: float32/float64 rows that are contiguous in the column matrix and read with
    # unit stride from the image are copied as bytes (the load/store round trip through double
    # is exact for them), and their padding is zero bytes (+0.0).
    cdef Py_ssize_t isz = itemsize_of(cdt)
    cdef bint typed = cdt == xdt and (cdt == DT_FLOAT32 or cdt == DT_FLOAT64) and cs[6] == isz
    cdef bint fast = typed and g.sw * xs[3] == isz
    cdef Py_ssize_t step = g.sw * xs[3]
    if fast and g.kD == 1 and g.pd == 0 and g.sd == 1:
        # A depth-1 window with unit stride and no padding: output depth od reads input depth od
        # only, so each depth is a 2-d im2col (the plugin stands a batch's samples there).
        for od in range(g.oD):
            _im2col_2d(g, col + od * cs[4], cs, x + od * xs[1], xs, isz)
        return
    for j in range(BLOCK):
        zeros[j] = 0
    for c in range(g.C):
        for kd in range(g.kD):
            for kh in range(g.kH):
                for kw in range(g.kW):
                    _w_range(g, kw, &lo, &hi, &off)
                    for od in range(g.oD):
                        idd = od * g.sd - g.pd + kd * g.dd
                        for oh in range(g.oH):
                            ih = oh * g.sh - g.ph + kh * g.dh
                            row = col + c * cs[0] + kd * cs[1] + kh * cs[2] + kw * cs[3] + od * cs[4] + oh * cs[5]
                            if idd < 0 or idd >= g.D or ih < 0 or ih >= g.H:
                                if typed:
                                    _window_row(row, NULL, 0, 0, g.oW, isz)
                                    continue
                                j = 0
                                while j < g.oW:
                                    m = g.oW - j if g.oW - j < BLOCK else BLOCK
                                    store_block(zeros, m, cdt, row + j * cs[6], cs[6])
                                    j += m
                                continue
                            j = 0
                            while j < lo:
                                m = lo - j if lo - j < BLOCK else BLOCK
                                store_block(zeros, m, cdt, row + j * cs[6], cs[6])
                                j += m
                            src = x + c * xs[0] + idd * xs[1] + ih * xs[2]
                            if fast:                  # zeros, the copied run, zeros
                                _window_row(row, src + off * isz, lo, hi, g.oW, isz)
                                continue
                            if typed:                 # a strided read (stride > 1), element by element
                                if lo > 0:
                                    memset(row, 0, lo * isz)
                                src = src + off * xs[3]
                                if cdt == DT_FLOAT32:
                                    for j in range(lo, hi):
                                        (<float*>row)[j] = (<const float*>(src + j * step))[0]
                                else:
                                    for j in range(lo, hi):
                                        (<double*>row)[j] = (<const double*>(src + j * step))[0]
                                if hi < g.oW:
                                    memset(row + hi * isz, 0, (g.oW - hi) * isz)
                                continue
                            while j < hi:
                                m = hi - j if hi - j < BLOCK else BLOCK
                                load_block(src + (j * g.sw + off) * xs[3], g.sw * xs[3], xdt, m, buf)
                                store_block(buf, m, cdt, row + j * cs[6], cs[6])
                                j += m
                            while j < g.oW:
                                m = g.oW - j if g.oW - j < BLOCK else BLOCK
                                store_block(zeros, m, cdt, row + j * cs[6], cs[6])
                                j += m


ctypedef struct _Im2colJob:
    Geometry g
    char* col
    const char* x
    int cdt, xdt
    Py_ssize_t cs[7]
    Py_ssize_t xs[4]


cdef void _im2col_job(void* arg) noexcept nogil:
    cdef _Im2colJob* j = <_Im2colJob*>arg
    _im2col(&j.g, j.col, j.cdt, j.cs, j.x, j.xdt, j.xs)


cdef void _im2col_run(Geometry* g, char* col, int cdt, Py_ssize_t* cs, const char* x, int xdt,
                      Py_ssize_t* xs, bint split) noexcept nogil:
    cdef _Im2colJob jobs[2]
    cdef Py_ssize_t cext[7]
    cdef Py_ssize_t xext[4]
    cdef Py_ssize_t half = g.C // 2
    cdef int h, d
    cext[0], cext[1], cext[2], cext[3], cext[4], cext[5], cext[6] = g.C, g.kD, g.kH, g.kW, g.oD, g.oH, g.oW
    xext[0], xext[1], xext[2], xext[3] = g.C, g.D, g.H, g.W
    if (not split or g.C < 2 or x == NULL or g.C * g.kD * g.kH * g.kW * g.oD * g.oH * g.oW < _SPLIT_ELEMENTS
            or not _apart(col, cs, cext, 7, cdt, x, xs, xext, 4, xdt)):
        _im2col(g, col, cdt, cs, x, xdt, xs)
        return
    for h in range(2):
        jobs[h].g = g[0]
        jobs[h].g.C = half if h == 0 else g.C - half
        jobs[h].col = col + (0 if h == 0 else half * cs[0])
        jobs[h].x = x + (0 if h == 0 else half * xs[0])
        jobs[h].cdt, jobs[h].xdt = cdt, xdt
        for d in range(7):
            jobs[h].cs[d] = cs[d]
        for d in range(4):
            jobs[h].xs[d] = xs[d]
    ek_pool_run(_im2col_job, <void*>jobs, sizeof(_Im2colJob), 2)


def im2col(col_addr, col_dtype, col_strides, col_shape, x_addr, x_dtype, x_strides, x_shape, params):
    """col (C, kD, kH, kW, oD, oH, oW) = windows of x (C, D, H, W); ``params`` = (sd, sh, sw, pd,
    ph, pw, dd, dh, dw). Strides in elements."""
    cdef int cdt = check_dtype(col_dtype, "im2col col_dtype")
    cdef int xdt = check_dtype(x_dtype, "im2col x_dtype")
    cdef Geometry g
    cdef Py_ssize_t cs[7]
    cdef Py_ssize_t xs[4]
    cdef char* col
    cdef char* x
    cdef bint split
    _floating(cdt, "im2col")
    _floating(xdt, "im2col")
    _geometry(&g, x_shape, col_shape, params, "im2col")
    _byte_strides(col_strides, 7, cdt, cs, "im2col col_strides")
    _byte_strides(x_strides, 4, xdt, xs, "im2col x_strides")
    if g.C * g.kD * g.kH * g.kW * g.oD * g.oH * g.oW == 0:
        return
    col = as_ptr(col_addr, "im2col col_addr")
    # An empty image is never read: every window position then lies in the padding.
    x = as_ptr(x_addr, "im2col x_addr") if g.D * g.H * g.W else NULL
    split = _split_enabled
    with nogil:
        _im2col_run(&g, col, cdt, cs, x, xdt, xs, split)


cdef void _col2im(Geometry* g, acc_t* acc, const char* col, int cdt, Py_ssize_t* cs) noexcept nogil:
    cdef acc_t buf[BLOCK]
    cdef Py_ssize_t c, kd, kh, kw, od, oh, idd, ih, lo, hi, off, j, m, i
    cdef const char* row
    cdef acc_t* dst
    for c in range(g.C):
        for kd in range(g.kD):
            for kh in range(g.kH):
                for kw in range(g.kW):
                    _w_range(g, kw, &lo, &hi, &off)
                    if lo >= hi:
                        continue
                    for od in range(g.oD):
                        idd = od * g.sd - g.pd + kd * g.dd
                        if idd < 0 or idd >= g.D:
                            continue
                        for oh in range(g.oH):
                            ih = oh * g.sh - g.ph + kh * g.dh
                            if ih < 0 or ih >= g.H:
                                continue
                            row = col + c * cs[0] + kd * cs[1] + kh * cs[2] + kw * cs[3] + od * cs[4] + oh * cs[5]
                            dst = acc + ((c * g.D + idd) * g.H + ih) * g.W + off
                            j = lo
                            while j < hi:
                                m = hi - j if hi - j < BLOCK else BLOCK
                                load_block(row + j * cs[6], cs[6], cdt, m, buf)
                                for i in range(m):
                                    dst[(j + i) * g.sw] += buf[i]
                                j += m


cdef void _store_image(Geometry* g, acc_t* acc, char* out, int odt, Py_ssize_t* os,
                       const char* bias, int bdt, Py_ssize_t bs) noexcept nogil:
    cdef Py_ssize_t c, d, h, i, plane = g.D * g.H * g.W
    cdef acc_t b
    cdef acc_t* p
    for c in range(g.C):
        if bias != NULL:
            b = <acc_t>_ld(bias + c * bs, bdt)
            p = acc + c * plane
            for i in range(plane):
                p[i] = p[i] + b
        for d in range(g.D):
            for h in range(g.H):
                store_block(acc + ((c * g.D + d) * g.H + h) * g.W, g.W, odt,
                            out + c * os[0] + d * os[1] + h * os[2], os[3])


def col2im(out_addr, out_dtype, out_strides, out_shape, col_addr, col_dtype, col_strides, col_shape,
           bias_addr, bias_dtype, bias_stride, params):
    """out (C, D, H, W) = col2im(col (C, kD, kH, kW, oD, oH, oW)) [+ bias[c]]; ``bias_addr`` 0 = no
    bias. Accumulates in float32 (float64 for a float64 output), one rounding."""
    cdef int odt = check_dtype(out_dtype, "col2im out_dtype")
    cdef int cdt = check_dtype(col_dtype, "col2im col_dtype")
    cdef int bdt = check_dtype(bias_dtype, "col2im bias_dtype")
    cdef Geometry g
    cdef Py_ssize_t cs[7]
    cdef Py_ssize_t os[4]
    cdef Py_ssize_t bs = 0, n
    cdef char* out
    cdef const char* col = NULL
    cdef const char* bias = NULL
    cdef void* acc
    _floating(odt, "col2im")
    _floating(cdt, "col2im")
    _geometry(&g, out_shape, col_shape, params, "col2im")
    _byte_strides(out_strides, 4, odt, os, "col2im out_strides")
    _byte_strides(col_strides, 7, cdt, cs, "col2im col_strides")
    n = g.C * g.D * g.H * g.W
    if n == 0:
        return
    out = as_ptr(out_addr, "col2im out_addr")
    if g.kD * g.kH * g.kW * g.oD * g.oH * g.oW:
        col = as_ptr(col_addr, "col2im col_addr")
    if bias_addr:
        _floating(bdt, "col2im")
        bias = as_ptr(bias_addr, "col2im bias_addr")
        bs = <Py_ssize_t>bias_stride * itemsize_of(bdt)
    acc = calloc(n, 8 if odt == DT_FLOAT64 else 4)
    if acc == NULL:
        raise MemoryError("col2im: cannot allocate the accumulator")
    with nogil:
        if odt == DT_FLOAT64:
            if col != NULL:
                _col2im(&g, <double*>acc, col, cdt, cs)
            _store_image(&g, <double*>acc, out, odt, os, bias, bdt, bs)
        else:
            if col != NULL:
                _col2im(&g, <float*>acc, col, cdt, cs)
            _store_image(&g, <float*>acc, out, odt, os, bias, bdt, bs)
    free(acc)


# ---------------------------------------------------------------------------------------------
# Depthwise convolution: one input channel per group (groups = C, O = C * M output channels,
# output channel o reads input channel o // M), computed directly instead of as im2col + one
# GEMM per (sample, group). Operands: the image (N, C, D, H, W), the result (N, O, oD, oH, oW),
# the weight (O, kD, kH, kW) (its size-1 input-channel dim dropped), any strides.
#
# * forward: res[n, o, p] = sum over taps (kd, kh, kw in order) of w[o, k] * img[n, o // M, window]
#   + bias[o], accumulated in float32 (float64 for float64), rounded once;
# * input gradient: img[n, c, q] = sum over its M output channels and the taps that read q of
#   w[o, k] * res[n, o, p], accumulated the same way in a per-plane buffer, rounded once;
# * weight gradient: w[o, k] = sum over n and p of res[n, o, p] * img[n, c, window], accumulated
#   in float64 whatever the dtype (a reduction of N * oD * oH * oW terms), rounded once.
# The outputs must not overlap the inputs (the plugin passes fresh tensors). Large launches run
# their planes (or output channels) in two halves on two threads: each half computes its own
# planes exactly as the whole launch would.

cdef extern from *:
    """
    #include <stddef.h>
    /* out[i] = (...((out[i] + w[0] * src[shift[0] + i * step]) + w[1] * src[shift[1] + i * step]) ...):
       the taps of a depthwise window in order, four per pass over out (fewer loads and stores).
       Compiled for the baseline and for AVX2 without FMA, chosen at run time: the same
       operations, one rounding each, so the same bits either way. */
    #define EK_DW_LOOP(T, step)                                                                   \
        for (; t + 4 <= taps; t += 4) {                                                          \
            const T *a = src + shift[t], *b = src + shift[t + 1], *c = src + shift[t + 2],       \
                    *d = src + shift[t + 3];                                                     \
            T wa = w[t], wb = w[t + 1], wc = w[t + 2], wd = w[t + 3];                            \
            for (i = 0; i < n; i++)                                                              \
                out[i] = (((out[i] + wa * a[i * step]) + wb * b[i * step]) + wc * c[i * step])   \
                         + wd * d[i * step];                                                     \
        }                                                                                        \
        for (; t < taps; t++) {                                                                  \
            const T *a = src + shift[t];                                                         \
            T wa = w[t];                                                                         \
            for (i = 0; i < n; i++) out[i] = out[i] + wa * a[i * step];                          \
        }
    #define EK_DW_BODY(T, name)                                                                  \
    static inline __attribute__((always_inline)) void name##_body(                               \
            T *restrict out, const T *src, const T *w, const ptrdiff_t *shift, ptrdiff_t taps,   \
            ptrdiff_t n, ptrdiff_t step) {                                                      \
        ptrdiff_t t = 0, i;                                                                      \
        if (step == 1) { EK_DW_LOOP(T, 1) } else if (step == 2) { EK_DW_LOOP(T, 2) } else { EK_DW_LOOP(T, step) } \
    }                                                                                            \
    __attribute__((target("avx2"))) static void name##_avx2(                                     \
            T *restrict out, const T *src, const T *w, const ptrdiff_t *shift, ptrdiff_t taps,   \
            ptrdiff_t n, ptrdiff_t step) { name##_body(out, src, w, shift, taps, n, step); }     \
    static void name(T *restrict out, const T *src, const T *w, const ptrdiff_t *shift,         \
                     ptrdiff_t taps, ptrdiff_t n, ptrdiff_t step) {                             \
        static int avx2 = -1;                                                                    \
        if (avx2 < 0) { __builtin_cpu_init(); avx2 = __builtin_cpu_supports("avx2") != 0; }      \
        if (avx2) name##_avx2(out, src, w, shift, taps, n, step);                                \
        else name##_body(out, src, w, shift, taps, n, step);                                     \
    }
    #if defined(__x86_64__) && defined(__GNUC__)
    EK_DW_BODY(float, ek_dw_taps_f32)
    EK_DW_BODY(double, ek_dw_taps_f64)
    #else
    #error "conv.pyx's depthwise taps need GCC on x86-64"
    #endif
    """
    void ek_dw_taps_f32(float* out, const float* src, const float* w, const Py_ssize_t* shift, Py_ssize_t taps,
                        Py_ssize_t n, Py_ssize_t step) noexcept nogil
    void ek_dw_taps_f64(double* out, const double* src, const double* w, const Py_ssize_t* shift, Py_ssize_t taps,
                        Py_ssize_t n, Py_ssize_t step) noexcept nogil


cdef inline void _taps_pass(acc_t* out, const acc_t* src, const acc_t* w, const Py_ssize_t* shift, Py_ssize_t taps,
                            Py_ssize_t n, Py_ssize_t step=1) noexcept nogil:
    if acc_t is float:
        ek_dw_taps_f32(out, src, w, shift, taps, n, step)
    elif acc_t is double:
        ek_dw_taps_f64(out, src, w, shift, taps, n, step)


cdef struct Depthwise:
    Geometry g                 # C, D, H, W of the image; the kernel, grid and parameters
    Py_ssize_t N, M, O
    char* img
    char* res
    char* w
    const char* bias
    int idt, rdt, wdt, bdt
    Py_ssize_t is_[5]          # image strides, bytes
    Py_ssize_t rs[5]           # result strides, bytes
    Py_ssize_t ws[4]           # weight strides, bytes
    Py_ssize_t bs


ctypedef struct _DepthwiseJob:
    Depthwise* d
    Py_ssize_t first, last     # planes (n, o) / (n, c), or output channels o
    int mode                   # 0 forward, 1 input gradient, 2 weight gradient
    int failed


cdef inline void _load_taps(Depthwise* d, Py_ssize_t o, acc_t* taps) noexcept nogil:
    cdef Py_ssize_t kd, kh
    cdef Geometry* g = &d.g
    for kd in range(g.kD):
        for kh in range(g.kH):
            load_block(d.w + o * d.ws[0] + kd * d.ws[1] + kh * d.ws[2], d.ws[3], d.wdt, g.kW,
                       taps + (kd * g.kH + kh) * g.kW)


# One plane of the image padded with zeros (Dp, Hp, Wp), and the flat offset of each tap: with
# unit strides, output position i of the "wide" grid (oD, Hp, Wp) reads the padded plane at
# i + shift[tap] (the columns past oW and rows past oH of the wide grid are never stored).
cdef struct Padded:
    Py_ssize_t Dp, Hp, Wp, volume, wide
    bint unit


cdef void _padded(Depthwise* d, Padded* q, Py_ssize_t* shift) noexcept nogil:
    cdef Geometry* g = &d.g
    cdef Py_ssize_t kd, kh, kw
    q.Dp, q.Hp, q.Wp = g.D + 2 * g.pd, g.H + 2 * g.ph, g.W + 2 * g.pw
    q.volume = q.Dp * q.Hp * q.Wp
    q.unit = g.sd == 1 and g.sh == 1 and g.sw == 1
    q.wide = ((g.oD - 1) * q.Hp + g.oH - 1) * q.Wp + g.oW
    for kd in range(g.kD):
        for kh in range(g.kH):
            for kw in range(g.kW):
                shift[(kd * g.kH + kh) * g.kW + kw] = (kd * g.dd * q.Hp + kh * g.dh) * q.Wp + kw * g.dw


cdef void _load_padded(Depthwise* d, Padded* q, const char* plane, acc_t* xp) noexcept nogil:
    cdef Geometry* g = &d.g
    cdef Py_ssize_t i, idd, ih
    for i in range(q.volume):
        xp[i] = 0
    for idd in range(g.D):
        for ih in range(g.H):
            load_block(plane + idd * d.is_[2] + ih * d.is_[3], d.is_[4], d.idt, g.W,
                       xp + ((idd + g.pd) * q.Hp + ih + g.ph) * q.Wp + g.pw)


cdef inline Py_ssize_t _window_start(Geometry* g, Padded* q, Py_ssize_t od, Py_ssize_t oh) noexcept nogil:
    """Offset in the padded plane of the window of output row (od, oh), tap (0, 0, 0)."""
    return (od * g.sd * q.Hp + oh * g.sh) * q.Wp


cdef int _dw_forward(Depthwise* d, Py_ssize_t first, Py_ssize_t last, acc_t zero) noexcept nogil:
    cdef Geometry* g = &d.g
    cdef Padded q
    cdef Py_ssize_t K = g.kD * g.kH * g.kW
    cdef Py_ssize_t* shift = <Py_ssize_t*>malloc(K * sizeof(Py_ssize_t))
    cdef acc_t* taps
    cdef acc_t* xp
    cdef acc_t* wide
    cdef const acc_t* src
    cdef acc_t* row
    cdef acc_t b, wv
    cdef Py_ssize_t p, n, o, c, od, oh, t, i, j, sw = g.sw, start
    if shift == NULL:
        return -1
    _padded(d, &q, shift)
    taps = <acc_t*>malloc((K + q.volume + (q.wide if q.unit else g.oW)) * sizeof(acc_t))
    if taps == NULL:
        free(shift)
        return -1
    xp = taps + K
    wide = xp + q.volume
    for p in range(first, last):
        n, o = p // d.O, p % d.O
        c = o // d.M
        _load_taps(d, o, taps)
        b = zero
        if d.bias != NULL:
            load_block(d.bias + o * d.bs, 0, d.bdt, 1, &b)
        _load_padded(d, &q, d.img + n * d.is_[0] + c * d.is_[1], xp)
        if q.unit:
            # the whole plane, one tap at a time: long contiguous loops the compiler vectorises
            for i in range(q.wide):
                wide[i] = zero
            _taps_pass(wide, xp, taps, shift, K, q.wide)
        for od in range(g.oD):
            for oh in range(g.oH):
                if q.unit:
                    row = wide + (od * q.Hp + oh) * q.Wp
                else:
                    row = wide
                    start = _window_start(g, &q, od, oh)
                    for j in range(g.oW):
                        row[j] = zero
                    _taps_pass(row, xp + start, taps, shift, K, g.oW, sw)
                if d.bias != NULL:
                    for j in range(g.oW):
                        row[j] = row[j] + b
                store_block(row, g.oW, d.rdt, d.res + n * d.rs[0] + o * d.rs[1] + od * d.rs[2] + oh * d.rs[3],
                            d.rs[4])
    free(taps)
    free(shift)
    return 0


cdef void _load_wide(Depthwise* d, Padded* q, Py_ssize_t n, Py_ssize_t o, acc_t* wide) noexcept nogil:
    """The result plane (n, o) on the wide grid (zeros between its rows)."""
    cdef Geometry* g = &d.g
    cdef Py_ssize_t i, od, oh
    for i in range(q.wide):
        wide[i] = 0
    for od in range(g.oD):
        for oh in range(g.oH):
            load_block(d.res + n * d.rs[0] + o * d.rs[1] + od * d.rs[2] + oh * d.rs[3], d.rs[4], d.rdt, g.oW,
                       wide + (od * q.Hp + oh) * q.Wp)


cdef int _dw_input_grad(Depthwise* d, Py_ssize_t first, Py_ssize_t last, acc_t zero) noexcept nogil:
    cdef Geometry* g = &d.g
    cdef Padded q
    cdef Py_ssize_t K = g.kD * g.kH * g.kW
    cdef Py_ssize_t* shift = <Py_ssize_t*>malloc(K * sizeof(Py_ssize_t))
    cdef acc_t* taps
    cdef acc_t* gp
    cdef acc_t* grow
    cdef acc_t* dst
    cdef acc_t wv
    cdef Py_ssize_t* back
    cdef Py_ssize_t p, n, o, c, m, od, oh, t, i, j, idd, ih, sw = g.sw, start, margin
    if shift == NULL:
        return -1
    _padded(d, &q, shift)
    margin = shift[K - 1]                   # the largest shift
    back = <Py_ssize_t*>malloc(K * sizeof(Py_ssize_t))
    taps = <acc_t*>malloc((K + q.volume + (margin + q.volume if q.unit else g.oW)) * sizeof(acc_t))
    if taps == NULL or back == NULL:
        free(taps)
        free(back)
        free(shift)
        return -1
    for t in range(K):
        back[t] = margin - shift[t]
    gp = taps + K
    grow = gp + q.volume
    for p in range(first, last):
        n, c = p // g.C, p % g.C
        for i in range(q.volume):
            gp[i] = zero
        for m in range(d.M):
            o = c * d.M + m
            _load_taps(d, o, taps)
            if q.unit:
                # the adjoint as a gather: gp[j] += w[t] * wide[j - shift[t]], the wide grid
                # placed after a margin of zeros as long as the largest shift (and zeros after it)
                for i in range(margin):
                    grow[i] = zero
                _load_wide(d, &q, n, o, grow + margin)
                for i in range(margin + q.wide, margin + q.volume):
                    grow[i] = zero
                _taps_pass(gp, grow, taps, back, K, q.volume)
                continue
            for od in range(g.oD):
                for oh in range(g.oH):
                    load_block(d.res + n * d.rs[0] + o * d.rs[1] + od * d.rs[2] + oh * d.rs[3], d.rs[4], d.rdt,
                               g.oW, grow)
                    start = _window_start(g, &q, od, oh)
                    for t in range(K):
                        wv = taps[t]
                        dst = gp + start + shift[t]
                        for j in range(g.oW):
                            dst[j * sw] = dst[j * sw] + wv * grow[j]
        for idd in range(g.D):
            for ih in range(g.H):
                store_block(gp + ((idd + g.pd) * q.Hp + ih + g.ph) * q.Wp + g.pw, g.W, d.idt,
                            d.img + n * d.is_[0] + c * d.is_[1] + idd * d.is_[2] + ih * d.is_[3], d.is_[4])
    free(taps)
    free(back)
    free(shift)
    return 0


cdef inline double _dot(const double* a, const double* b, Py_ssize_t n, Py_ssize_t sb) noexcept nogil:
    """sum a[i] * b[i * sb] in four interleaved partial sums (then added in order)."""
    cdef double s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t i = 0
    while i + 4 <= n:
        s0 += a[i] * b[i * sb]
        s1 += a[i + 1] * b[(i + 1) * sb]
        s2 += a[i + 2] * b[(i + 2) * sb]
        s3 += a[i + 3] * b[(i + 3) * sb]
        i += 4
    while i < n:
        s0 += a[i] * b[i * sb]
        i += 1
    return (s0 + s1) + (s2 + s3)


cdef int _dw_weight_grad(Depthwise* d, Py_ssize_t first, Py_ssize_t last) noexcept nogil:
    cdef Geometry* g = &d.g
    cdef Padded q
    cdef Py_ssize_t K = g.kD * g.kH * g.kW
    cdef Py_ssize_t* shift = <Py_ssize_t*>malloc(K * sizeof(Py_ssize_t))
    cdef double* acc
    cdef double* xp
    cdef double* grow
    cdef Py_ssize_t o, n, c, od, oh, t, kd, kh, start
    if shift == NULL:
        return -1
    _padded(d, &q, shift)
    acc = <double*>malloc((K + q.volume + (q.wide if q.unit else g.oW)) * sizeof(double))
    if acc == NULL:
        free(shift)
        return -1
    xp = acc + K
    grow = xp + q.volume
    for o in range(first, last):
        c = o // d.M
        for t in range(K):
            acc[t] = 0
        for n in range(d.N):
            _load_padded(d, &q, d.img + n * d.is_[0] + c * d.is_[1], xp)
            if q.unit:
                _load_wide(d, &q, n, o, grow)
                for t in range(K):
                    acc[t] += _dot(grow, xp + shift[t], q.wide, 1)
                continue
            for od in range(g.oD):
                for oh in range(g.oH):
                    load_block(d.res + n * d.rs[0] + o * d.rs[1] + od * d.rs[2] + oh * d.rs[3], d.rs[4], d.rdt,
                               g.oW, grow)
                    start = _window_start(g, &q, od, oh)
                    for t in range(K):
                        acc[t] += _dot(grow, xp + start + shift[t], g.oW, g.sw)
        for kd in range(g.kD):
            for kh in range(g.kH):
                store_block(acc + (kd * g.kH + kh) * g.kW, g.kW, d.wdt, d.w + o * d.ws[0] + kd * d.ws[1] + kh * d.ws[2],
                            d.ws[3])
    free(acc)
    free(shift)
    return 0


cdef void _depthwise_job(void* arg) noexcept nogil:
    cdef _DepthwiseJob* j = <_DepthwiseJob*>arg
    cdef bint f64 = (j.d.idt if j.mode == 1 else j.d.rdt) == DT_FLOAT64
    if j.mode == 2:
        j.failed = _dw_weight_grad(j.d, j.first, j.last)
    elif j.mode == 1:
        j.failed = _dw_input_grad(j.d, j.first, j.last, <double>0) if f64 else \
            _dw_input_grad(j.d, j.first, j.last, <float>0)
    else:
        j.failed = _dw_forward(j.d, j.first, j.last, <double>0) if f64 else \
            _dw_forward(j.d, j.first, j.last, <float>0)


cdef inline bint _grid_too_large(Py_ssize_t o, Py_ssize_t i, Py_ssize_t k, Py_ssize_t s, Py_ssize_t p,
                                 Py_ssize_t dl) noexcept:
    return o > 0 and (o - 1) * s + (k - 1) * dl + 1 > i + 2 * p


cdef int _depthwise_args(Depthwise* d, object img, object res, object w, object params, str what) except -1:
    """img, res: (addr, dtype, strides, shape) of the 5-d image and result; w: (addr, dtype,
    strides, shape) of the 4-d weight."""
    cdef Py_ssize_t ish[5]
    cdef Py_ssize_t rsh[5]
    cdef Py_ssize_t wsh[4]
    cdef Py_ssize_t col[7]
    d.idt = check_dtype(img[1], what + " image dtype")
    d.rdt = check_dtype(res[1], what + " result dtype")
    d.wdt = check_dtype(w[1], what + " weight dtype")
    _floating(d.idt, what)
    _floating(d.rdt, what)
    _floating(d.wdt, what)
    _shape(img[3], 5, ish, what + " image shape")
    _shape(res[3], 5, rsh, what + " result shape")
    _shape(w[3], 4, wsh, what + " weight shape")
    _byte_strides(img[2], 5, d.idt, d.is_, what + " image strides")
    _byte_strides(res[2], 5, d.rdt, d.rs, what + " result strides")
    _byte_strides(w[2], 4, d.wdt, d.ws, what + " weight strides")
    if rsh[0] != ish[0] or wsh[0] != rsh[1] or ish[1] == 0 or rsh[1] % ish[1]:
        raise KernelArgumentError(f"{what}: image {tuple(img[3])!r}, result {tuple(res[3])!r} and weight "
                                  f"{tuple(w[3])!r} do not form a depthwise convolution")
    col[0], col[1], col[2], col[3], col[4], col[5], col[6] = ish[1], wsh[1], wsh[2], wsh[3], rsh[2], rsh[3], rsh[4]
    _geometry(&d.g, (ish[1], ish[2], ish[3], ish[4]), (col[0], col[1], col[2], col[3], col[4], col[5], col[6]),
              params, what)
    # Every window must lie in the padded image (the output size CPU computes); reads and writes
    # stay inside the image whatever the grid, this catches a grid that does not match the image.
    if (_grid_too_large(d.g.oD, d.g.D, d.g.kD, d.g.sd, d.g.pd, d.g.dd) or
            _grid_too_large(d.g.oH, d.g.H, d.g.kH, d.g.sh, d.g.ph, d.g.dh) or
            _grid_too_large(d.g.oW, d.g.W, d.g.kW, d.g.sw, d.g.pw, d.g.dw)):
        raise KernelArgumentError(f"{what}: output grid {(rsh[2], rsh[3], rsh[4])!r} reads outside the padded "
                                  f"image {(ish[2], ish[3], ish[4])!r}")
    d.N, d.O = ish[0], rsh[1]
    d.M = d.O // d.g.C
    d.img = as_ptr(img[0], what + " image addr")
    d.res = as_ptr(res[0], what + " result addr")
    d.w = as_ptr(w[0], what + " weight addr")
    d.bias = NULL
    d.bdt = DT_FLOAT32
    d.bs = 0
    return 0


cdef int _depthwise_run(Depthwise* d, int mode, Py_ssize_t count, Py_ssize_t work, str what) except -1:
    cdef _DepthwiseJob jobs[2]
    cdef Py_ssize_t half = count // 2
    cdef int h, parts = 2 if _split_enabled and count >= 2 and work >= _SPLIT_ELEMENTS else 1
    for h in range(2):
        jobs[h].d = d
        jobs[h].mode = mode
        jobs[h].failed = 0
        jobs[h].first = 0 if (h == 0 or parts == 1) else half
        jobs[h].last = count if parts == 1 else (half if h == 0 else count)
    with nogil:
        if parts == 1:
            _depthwise_job(<void*>&jobs[0])
        else:
            ek_pool_run(_depthwise_job, <void*>jobs, sizeof(_DepthwiseJob), 2)
    if jobs[0].failed or (parts == 2 and jobs[1].failed):
        raise MemoryError(f"{what}: cannot allocate the row buffers")
    return 0


def depthwise_conv(res, img, w, bias, params):
    """res (N, O, oD, oH, oW) = depthwise convolution of img (N, C, D, H, W) with w (O, kD, kH, kW)
    [+ bias (O,)]; each operand is (addr, dtype, strides in elements, shape), bias (addr, dtype,
    stride) or None; ``params`` = (sd, sh, sw, pd, ph, pw, dd, dh, dw)."""
    cdef Depthwise d
    _depthwise_args(&d, img, res, w, params, "depthwise_conv")
    if bias is not None:
        d.bdt = check_dtype(bias[1], "depthwise_conv bias dtype")
        _floating(d.bdt, "depthwise_conv")
        d.bias = as_ptr(bias[0], "depthwise_conv bias addr")
        d.bs = <Py_ssize_t>bias[2] * itemsize_of(d.bdt)
    if d.N * d.O * d.g.oD * d.g.oH * d.g.oW == 0:
        return
    _depthwise_run(&d, 0, d.N * d.O, d.N * d.O * d.g.oD * d.g.oH * d.g.oW * d.g.kD * d.g.kH * d.g.kW,
                   "depthwise_conv")


def depthwise_conv_input_grad(img, res, w, params):
    """img (N, C, D, H, W) = the input gradient of a depthwise convolution from the output gradient
    res (N, O, oD, oH, oW) and the weight w (O, kD, kH, kW); operands as depthwise_conv's."""
    cdef Depthwise d
    _depthwise_args(&d, img, res, w, params, "depthwise_conv_input_grad")
    if d.N * d.g.C * d.g.D * d.g.H * d.g.W == 0:
        return
    _depthwise_run(&d, 1, d.N * d.g.C, d.N * d.O * d.g.oD * d.g.oH * d.g.oW * d.g.kD * d.g.kH * d.g.kW,
                   "depthwise_conv_input_grad")


def depthwise_conv_weight_grad(w, res, img, params):
    """w (O, kD, kH, kW) = the weight gradient of a depthwise convolution from the output gradient
    res (N, O, oD, oH, oW) and the input img (N, C, D, H, W); operands as depthwise_conv's."""
    cdef Depthwise d
    _depthwise_args(&d, img, res, w, params, "depthwise_conv_weight_grad")
    if d.O * d.g.kD * d.g.kH * d.g.kW == 0:
        return
    _depthwise_run(&d, 2, d.O, d.N * d.O * d.g.oD * d.g.oH * d.g.oW * d.g.kD * d.g.kH * d.g.kW,
                   "depthwise_conv_weight_grad")
