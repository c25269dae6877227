# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Convolution data movement, pooling and upsampling kernels of the device's vector engine.

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
* pooling over (N, C, H, W) operands of any strides: max (value and flat index h * W + w in its
  plane; NaN propagates and the last NaN's index wins, as CPU's kernel), average (CPU's
  count_include_pad / ceil_mode / divisor_override rules), adaptive average; and their
  backward passes, which accumulate in float32 (float64) and round once.
* upsampling: nearest (CPU's float index arithmetic, so the chosen source pixels are CPU's) and
  bilinear (align_corners or half-pixel), forward and backward.

Numerics: float16/bfloat16 compute in float32, float32 in float32, float64 in float64, one
rounding to the output dtype. Max pooling also runs on integers (exact int64 compares).
Left out: tiling and timing (library.py holds the cost models), 3-d pooling/upsampling.
"""

from libc.stdlib cimport calloc, malloc, free
from libc.math cimport floorf, INFINITY
from libc.stdint cimport INT64_MIN

include "_common.pxi"
include "_pool.pxi"


# Large im2col and max-pool launches run in two halves (of the channels; of the batch, or the
# channels, for pooling) on this thread and the pool's helper (_pool.pxi), when the output does
# not overlap the input: each half computes its own part of the output exactly as the whole would.
cdef enum:
    _SPLIT_ELEMENTS = 1 << 16

include "_split.pxi"


cdef inline bint _apart(const char* a, Py_ssize_t* sa, Py_ssize_t* ext_a, int na, int dta,
                        const char* b, Py_ssize_t* sb, Py_ssize_t* ext_b, int nb, int dtb) noexcept nogil:
    """The byte ranges of two strided operands (extents ext, byte strides s, dtypes dt) do not
    overlap; each range ends with its own last element (adjacent buffers are apart)."""
    cdef const char* lo_a = a
    cdef const char* hi_a = a + itemsize_of(dta)
    cdef const char* lo_b = b
    cdef const char* hi_b = b + itemsize_of(dtb)
    cdef int d
    for d in range(na):
        if sa[d] > 0:
            hi_a += sa[d] * (ext_a[d] - 1)
        else:
            lo_a += sa[d] * (ext_a[d] - 1)
    for d in range(nb):
        if sb[d] > 0:
            hi_b += sb[d] * (ext_b[d] - 1)
        else:
            lo_b += sb[d] * (ext_b[d] - 1)
    return hi_a <= lo_b or hi_b <= lo_a


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


cdef list _ints(object values, int n, str what):
    values = tuple(values)
    if len(values) != n:
        raise KernelArgumentError(f"{what}: expected {n} entries, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise KernelArgumentError(f"{what}: expected integers, got {values!r}")
        out.append(v.__index__())
    return out


cdef int _byte_strides(object strides, int n, int dt, Py_ssize_t* out, str what) except -1:
    cdef int i
    cdef list s = _ints(strides, n, what)
    for i in range(n):
        out[i] = <Py_ssize_t>s[i] * itemsize_of(dt)
    return 0


cdef int _shape(object shape, int n, Py_ssize_t* out, str what) except -1:
    cdef int i
    cdef list s = _ints(shape, n, what)
    for i in range(n):
        if s[i] < 0:
            raise KernelArgumentError(f"{what}: negative extent in {tuple(s)!r}")
        out[i] = s[i]
    return 0


cdef int _floating(int dt, str what) except -1:
    if not is_floating(dt):
        raise KernelArgumentError(f"{what}: {_DTYPE_NAMES[dt]} is not supported (floating dtypes only)")
    return 0


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


# ---------------------------------------------------------------------------------------------
# Pooling over (N, C, H, W)

cdef struct Planes:
    Py_ssize_t N, C, H, W, OH, OW
    Py_ssize_t xs[4]       # the (N, C, H, W) operand, bytes
    Py_ssize_t ys[4]       # the (N, C, OH, OW) operand, bytes


cdef int _planes(Planes* p, object x_shape, object x_strides, int xdt, object y_shape, object y_strides,
                 int ydt, str what) except -1:
    cdef Py_ssize_t xsh[4]
    cdef Py_ssize_t ysh[4]
    _shape(x_shape, 4, xsh, what)
    _shape(y_shape, 4, ysh, what)
    if xsh[0] != ysh[0] or xsh[1] != ysh[1]:
        raise KernelArgumentError(f"{what}: batch/channel extents differ: {tuple(x_shape)!r} {tuple(y_shape)!r}")
    p.N, p.C, p.H, p.W, p.OH, p.OW = xsh[0], xsh[1], xsh[2], xsh[3], ysh[2], ysh[3]
    _byte_strides(x_strides, 4, xdt, p.xs, what)
    _byte_strides(y_strides, 4, ydt, p.ys, what)
    return 0


ctypedef fused cmp_t:
    double
    int64_t


cdef void _max_pool(Planes* p, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                    Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                    Py_ssize_t pw, Py_ssize_t dh, Py_ssize_t dw, cmp_t lowest) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, ih0, ih1, iw0, iw1, ih, iw, idx
    cdef const char* plane
    cdef cmp_t val, best
    cdef bint take
    for n in range(p.N):
        for c in range(p.C):
            plane = x + n * p.xs[0] + c * p.xs[1]
            for oh in range(p.OH):
                ih0 = oh * sh - ph
                ih1 = ih0 + (kh - 1) * dh + 1
                if ih1 > p.H:
                    ih1 = p.H
                while ih0 < 0:
                    ih0 += dh
                for ow in range(p.OW):
                    iw0 = ow * sw - pw
                    iw1 = iw0 + (kw - 1) * dw + 1
                    if iw1 > p.W:
                        iw1 = p.W
                    while iw0 < 0:
                        iw0 += dw
                    best = lowest
                    idx = ih0 * p.W + iw0
                    ih = ih0
                    while ih < ih1:
                        iw = iw0
                        while iw < iw1:
                            if cmp_t is double and xdt == DT_FLOAT32:
                                val = (<const float*>(plane + ih * p.xs[2] + iw * p.xs[3]))[0]
                            else:
                                load_block(plane + ih * p.xs[2] + iw * p.xs[3], 0, xdt, 1, &val)
                            # Selects, not branches (the comparison of data mispredicts often).
                            if cmp_t is double:
                                take = (val > best) | (val != val)
                            else:
                                take = val > best
                            best = val if take else best
                            idx = ih * p.W + iw if take else idx
                            iw += dw
                        ih += dh
                    store_block(&best, 1, ydt, y + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0)
                    ek_st_i64(ind + n * is_[0] + c * is_[1] + oh * is_[2] + ow * is_[3], idx)


ctypedef struct _PoolJob:
    Planes p
    const char* x
    char* y
    char* ind
    int xdt, ydt
    Py_ssize_t is_[4]
    Py_ssize_t k[8]


cdef void _pool_job(void* arg) noexcept nogil:
    cdef _PoolJob* j = <_PoolJob*>arg
    if is_floating(j.xdt):
        _max_pool(&j.p, j.x, j.xdt, j.y, j.ydt, j.ind, j.is_, j.k[0], j.k[1], j.k[2], j.k[3], j.k[4], j.k[5],
                  j.k[6], j.k[7], <double>-INFINITY)
    else:
        _max_pool(&j.p, j.x, j.xdt, j.y, j.ydt, j.ind, j.is_, j.k[0], j.k[1], j.k[2], j.k[3], j.k[4], j.k[5],
                  j.k[6], j.k[7], <int64_t>INT64_MIN)


cdef void _max_pool_run(Planes* p, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                        Py_ssize_t* k, bint split) noexcept nogil:
    cdef _PoolJob jobs[2]
    cdef Py_ssize_t xext[4]
    cdef Py_ssize_t yext[4]
    cdef Py_ssize_t half
    cdef int h, d, dim
    xext[0], xext[1], xext[2], xext[3] = p.N, p.C, p.H, p.W
    yext[0], yext[1], yext[2], yext[3] = p.N, p.C, p.OH, p.OW
    dim = 0 if p.N >= 2 else 1
    split = (split and xext[dim] >= 2 and p.N * p.C * p.H * p.W >= _SPLIT_ELEMENTS
             and _apart(y, p.ys, yext, 4, ydt, x, p.xs, xext, 4, xdt)
             and _apart(ind, is_, yext, 4, DT_INT64, x, p.xs, xext, 4, xdt)
             and _apart(ind, is_, yext, 4, DT_INT64, y, p.ys, yext, 4, ydt))
    for h in range(2 if split else 1):
        jobs[h].p = p[0]
        jobs[h].x, jobs[h].y, jobs[h].ind = x, y, ind
        if split:
            half = xext[dim] // 2
            if dim == 0:
                jobs[h].p.N = half if h == 0 else p.N - half
            else:
                jobs[h].p.C = half if h == 0 else p.C - half
            if h == 1:
                jobs[h].x = x + half * p.xs[dim]
                jobs[h].y = y + half * p.ys[dim]
                jobs[h].ind = ind + half * is_[dim]
        jobs[h].xdt, jobs[h].ydt = xdt, ydt
        for d in range(4):
            jobs[h].is_[d] = is_[d]
        for d in range(8):
            jobs[h].k[d] = k[d]
    ek_pool_run(_pool_job, <void*>jobs, sizeof(_PoolJob), 2 if split else 1)


def max_pool2d(y_addr, y_dtype, y_strides, y_shape, ind_addr, ind_strides, x_addr, x_dtype, x_strides,
               x_shape, kh, kw, sh, sw, ph, pw, dh, dw):
    """y, indices (N, C, OH, OW) = max over the windows of x (N, C, H, W); indices are int64 flat
    offsets h * W + w within the plane. Any dtype but bool (y has x's dtype)."""
    cdef int ydt = check_dtype(y_dtype, "max_pool2d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "max_pool2d x_dtype")
    cdef Planes p
    cdef Py_ssize_t is_[4]
    cdef Py_ssize_t k[8]
    cdef char* y
    cdef char* ind
    cdef const char* x
    cdef int i
    cdef bint split
    vals = _ints((kh, kw, sh, sw, ph, pw, dh, dw), 8, "max_pool2d")
    for i in range(8):
        k[i] = vals[i]
    if k[0] <= 0 or k[1] <= 0 or k[2] <= 0 or k[3] <= 0 or k[4] < 0 or k[5] < 0 or k[6] <= 0 or k[7] <= 0:
        raise KernelArgumentError(f"max_pool2d: invalid window {tuple(vals)!r}")
    if xdt == DT_BOOL or ydt != xdt:
        raise KernelArgumentError(f"max_pool2d: unsupported dtypes {_DTYPE_NAMES[xdt]} -> {_DTYPE_NAMES[ydt]}")
    _planes(&p, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "max_pool2d")
    _byte_strides(ind_strides, 4, DT_INT64, is_, "max_pool2d ind_strides")
    if p.N * p.C * p.OH * p.OW == 0:
        return
    if p.H * p.W == 0:
        raise KernelArgumentError("max_pool2d: empty input plane")
    y = as_ptr(y_addr, "max_pool2d y_addr")
    ind = as_ptr(ind_addr, "max_pool2d ind_addr")
    x = as_ptr(x_addr, "max_pool2d x_addr")
    split = _split_enabled
    with nogil:
        _max_pool_run(&p, x, xdt, y, ydt, ind, is_, k, split)


cdef Py_ssize_t _max_pool_backward(Planes* p, acc_t* acc, char* gi, int gdt, const char* go, int godt,
                                   const char* ind, Py_ssize_t* is_, int64_t* bad) noexcept nogil:
    """Returns 0, or 1 with bad[0] = the offending index."""
    cdef Py_ssize_t n, c, oh, ow, plane = p.H * p.W, i, h
    cdef int64_t idx
    cdef acc_t g
    for n in range(p.N):
        for c in range(p.C):
            for i in range(plane):
                acc[i] = 0
            for oh in range(p.OH):
                for ow in range(p.OW):
                    idx = ek_ld_i64(ind + n * is_[0] + c * is_[1] + oh * is_[2] + ow * is_[3])
                    if idx < 0 or idx >= plane:
                        bad[0] = idx
                        return 1
                    load_block(go + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0, godt, 1, &g)
                    acc[idx] += g
            for h in range(p.H):
                store_block(acc + h * p.W, p.W, gdt, gi + n * p.xs[0] + c * p.xs[1] + h * p.xs[2], p.xs[3])
    return 0


def max_pool2d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides, go_shape,
                        ind_addr, ind_strides):
    """grad_input (N, C, H, W) = scatter-add of grad_output (N, C, OH, OW) at the indices; an index
    outside the plane raises KernelArgumentError."""
    cdef int gdt = check_dtype(gi_dtype, "max_pool2d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "max_pool2d_backward go_dtype")
    cdef Planes p
    cdef Py_ssize_t is_[4]
    cdef char* gi
    cdef const char* go = NULL
    cdef const char* ind = NULL
    cdef void* acc
    cdef int64_t bad = 0
    cdef Py_ssize_t rc
    _floating(gdt, "max_pool2d_backward")
    _floating(godt, "max_pool2d_backward")
    _planes(&p, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "max_pool2d_backward")
    _byte_strides(ind_strides, 4, DT_INT64, is_, "max_pool2d_backward ind_strides")
    if p.N * p.C * p.H * p.W == 0:
        return
    gi = as_ptr(gi_addr, "max_pool2d_backward gi_addr")
    if p.OH * p.OW:
        go = as_ptr(go_addr, "max_pool2d_backward go_addr")
        ind = as_ptr(ind_addr, "max_pool2d_backward ind_addr")
    else:
        p.OH = p.OW = 0
    acc = malloc(p.H * p.W * (8 if gdt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError("max_pool2d_backward: cannot allocate the accumulator")
    with nogil:
        if gdt == DT_FLOAT64:
            rc = _max_pool_backward(&p, <double*>acc, gi, gdt, go, godt, ind, is_, &bad)
        else:
            rc = _max_pool_backward(&p, <float*>acc, gi, gdt, go, godt, ind, is_, &bad)
    free(acc)
    if rc:
        raise KernelArgumentError(f"max_pool2d_backward: index {bad} is out of range for a plane of "
                                  f"{p.H} x {p.W}")


cdef struct AvgWindow:
    Py_ssize_t kh, kw, sh, sw, ph, pw, divisor
    bint include_pad


cdef inline Py_ssize_t _avg_window(AvgWindow* a, Planes* p, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t* h0,
                                   Py_ssize_t* h1, Py_ssize_t* w0, Py_ssize_t* w1) noexcept nogil:
    """CPU's avg_pool2d window: the clipped range and the divide factor (0: an empty window)."""
    cdef Py_ssize_t ih0 = oh * a.sh - a.ph, iw0 = ow * a.sw - a.pw
    cdef Py_ssize_t ih1 = ih0 + a.kh, iw1 = iw0 + a.kw, pool
    if ih1 > p.H + a.ph:
        ih1 = p.H + a.ph
    if iw1 > p.W + a.pw:
        iw1 = p.W + a.pw
    pool = (ih1 - ih0) * (iw1 - iw0)
    if ih0 < 0:
        ih0 = 0
    if iw0 < 0:
        iw0 = 0
    if ih1 > p.H:
        ih1 = p.H
    if iw1 > p.W:
        iw1 = p.W
    h0[0], h1[0], w0[0], w1[0] = ih0, ih1, iw0, iw1
    if ih0 >= ih1 or iw0 >= iw1:
        return 0
    if a.divisor:
        return a.divisor
    return pool if a.include_pad else (ih1 - ih0) * (iw1 - iw0)


cdef void _avg_pool(Planes* p, AvgWindow* a, const char* x, int xdt, char* y, int ydt, acc_t zero) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, h0, h1, w0, w1, ih, iw, div
    cdef const char* plane
    cdef acc_t s, v
    for n in range(p.N):
        for c in range(p.C):
            plane = x + n * p.xs[0] + c * p.xs[1]
            for oh in range(p.OH):
                for ow in range(p.OW):
                    div = _avg_window(a, p, oh, ow, &h0, &h1, &w0, &w1)
                    s = zero
                    if div:
                        for ih in range(h0, h1):
                            for iw in range(w0, w1):
                                load_block(plane + ih * p.xs[2] + iw * p.xs[3], 0, xdt, 1, &v)
                                s = s + v
                        s = s / <acc_t>div
                    store_block(&s, 1, ydt, y + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0)


cdef int _avg_args(AvgWindow* a, object window, object include_pad, object divisor, str what) except -1:
    w = _ints(window, 6, what)
    if w[0] <= 0 or w[1] <= 0 or w[2] <= 0 or w[3] <= 0 or w[4] < 0 or w[5] < 0:
        raise KernelArgumentError(f"{what}: invalid window {tuple(w)!r}")
    d = _ints((divisor,), 1, what)[0]    # any nonzero override, negative too (CPU divides by it)
    a.kh, a.kw, a.sh, a.sw, a.ph, a.pw = w
    a.divisor = d
    a.include_pad = bool(include_pad)
    return 0


def avg_pool2d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape,
               kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    """y (N, C, OH, OW) = window means of x; ``divisor_override`` 0 = none."""
    cdef int ydt = check_dtype(y_dtype, "avg_pool2d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "avg_pool2d x_dtype")
    cdef Planes p
    cdef AvgWindow a
    cdef char* y
    cdef const char* x = NULL
    _floating(ydt, "avg_pool2d")
    _floating(xdt, "avg_pool2d")
    _avg_args(&a, (kh, kw, sh, sw, ph, pw), count_include_pad, divisor_override, "avg_pool2d")
    _planes(&p, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "avg_pool2d")
    if p.N * p.C * p.OH * p.OW == 0:
        return
    y = as_ptr(y_addr, "avg_pool2d y_addr")
    if p.H * p.W:
        x = as_ptr(x_addr, "avg_pool2d x_addr")
    with nogil:
        if ydt == DT_FLOAT64:
            _avg_pool(&p, &a, x, xdt, y, ydt, <double>0)
        else:
            _avg_pool(&p, &a, x, xdt, y, ydt, <float>0)


cdef void _avg_pool_backward(Planes* p, AvgWindow* a, acc_t* acc, char* gi, int gdt, const char* go,
                             int godt) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, h0, h1, w0, w1, ih, iw, div, i, plane = p.H * p.W
    cdef acc_t g
    for n in range(p.N):
        for c in range(p.C):
            for i in range(plane):
                acc[i] = 0
            for oh in range(p.OH):
                for ow in range(p.OW):
                    div = _avg_window(a, p, oh, ow, &h0, &h1, &w0, &w1)
                    if not div:
                        continue
                    load_block(go + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0, godt, 1, &g)
                    g = g / <acc_t>div
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            acc[ih * p.W + iw] += g
            for i in range(p.H):
                store_block(acc + i * p.W, p.W, gdt, gi + n * p.xs[0] + c * p.xs[1] + i * p.xs[2], p.xs[3])


def avg_pool2d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides, go_shape,
                        kh, kw, sh, sw, ph, pw, count_include_pad, divisor_override):
    cdef int gdt = check_dtype(gi_dtype, "avg_pool2d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "avg_pool2d_backward go_dtype")
    cdef Planes p
    cdef AvgWindow a
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc
    _floating(gdt, "avg_pool2d_backward")
    _floating(godt, "avg_pool2d_backward")
    _avg_args(&a, (kh, kw, sh, sw, ph, pw), count_include_pad, divisor_override, "avg_pool2d_backward")
    _planes(&p, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "avg_pool2d_backward")
    if p.N * p.C * p.H * p.W == 0:
        return
    gi = as_ptr(gi_addr, "avg_pool2d_backward gi_addr")
    if p.OH * p.OW:
        go = as_ptr(go_addr, "avg_pool2d_backward go_addr")
    else:
        p.OH = p.OW = 0
    acc = malloc(p.H * p.W * (8 if gdt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError("avg_pool2d_backward: cannot allocate the accumulator")
    with nogil:
        if gdt == DT_FLOAT64:
            _avg_pool_backward(&p, &a, <double*>acc, gi, gdt, go, godt)
        else:
            _avg_pool_backward(&p, &a, <float*>acc, gi, gdt, go, godt)
    free(acc)


cdef inline Py_ssize_t _start(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c) noexcept nogil:
    return (a // b) * c + ((a % b) * c) // b


cdef inline Py_ssize_t _end(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c) noexcept nogil:
    return 1 + ((a + 1) * c - 1) // b


cdef void _adaptive_avg(Planes* p, const char* x, int xdt, char* y, int ydt, acc_t zero) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, h0, h1, w0, w1, ih, iw
    cdef const char* plane
    cdef acc_t s, v
    for n in range(p.N):
        for c in range(p.C):
            plane = x + n * p.xs[0] + c * p.xs[1]
            for oh in range(p.OH):
                h0 = _start(oh, p.OH, p.H)
                h1 = _end(oh, p.OH, p.H)
                for ow in range(p.OW):
                    w0 = _start(ow, p.OW, p.W)
                    w1 = _end(ow, p.OW, p.W)
                    s = zero
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            load_block(plane + ih * p.xs[2] + iw * p.xs[3], 0, xdt, 1, &v)
                            s = s + v
                    s = s / <acc_t>(h1 - h0) / <acc_t>(w1 - w0)   # CPU divides twice
                    store_block(&s, 1, ydt, y + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0)


def adaptive_avg_pool2d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape):
    cdef int ydt = check_dtype(y_dtype, "adaptive_avg_pool2d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "adaptive_avg_pool2d x_dtype")
    cdef Planes p
    cdef char* y
    cdef const char* x
    _floating(ydt, "adaptive_avg_pool2d")
    _floating(xdt, "adaptive_avg_pool2d")
    _planes(&p, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "adaptive_avg_pool2d")
    if p.N * p.C * p.OH * p.OW == 0:
        return
    if p.H * p.W == 0:
        raise KernelArgumentError("adaptive_avg_pool2d: empty input plane")
    y = as_ptr(y_addr, "adaptive_avg_pool2d y_addr")
    x = as_ptr(x_addr, "adaptive_avg_pool2d x_addr")
    with nogil:
        if ydt == DT_FLOAT64:
            _adaptive_avg(&p, x, xdt, y, ydt, <double>0)
        else:
            _adaptive_avg(&p, x, xdt, y, ydt, <float>0)


cdef void _adaptive_avg_backward(Planes* p, acc_t* acc, char* gi, int gdt, const char* go, int godt) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, h0, h1, w0, w1, ih, iw, i, plane = p.H * p.W
    cdef acc_t g
    for n in range(p.N):
        for c in range(p.C):
            for i in range(plane):
                acc[i] = 0
            for oh in range(p.OH):
                h0 = _start(oh, p.OH, p.H)
                h1 = _end(oh, p.OH, p.H)
                for ow in range(p.OW):
                    w0 = _start(ow, p.OW, p.W)
                    w1 = _end(ow, p.OW, p.W)
                    load_block(go + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0, godt, 1, &g)
                    g = g / <acc_t>(h1 - h0) / <acc_t>(w1 - w0)
                    for ih in range(h0, h1):
                        for iw in range(w0, w1):
                            acc[ih * p.W + iw] += g
            for i in range(p.H):
                store_block(acc + i * p.W, p.W, gdt, gi + n * p.xs[0] + c * p.xs[1] + i * p.xs[2], p.xs[3])


def adaptive_avg_pool2d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                 go_shape):
    cdef int gdt = check_dtype(gi_dtype, "adaptive_avg_pool2d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "adaptive_avg_pool2d_backward go_dtype")
    cdef Planes p
    cdef char* gi
    cdef const char* go
    cdef void* acc
    _floating(gdt, "adaptive_avg_pool2d_backward")
    _floating(godt, "adaptive_avg_pool2d_backward")
    _planes(&p, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "adaptive_avg_pool2d_backward")
    if p.N * p.C * p.H * p.W == 0:
        return
    if p.OH * p.OW == 0:
        raise KernelArgumentError("adaptive_avg_pool2d_backward: empty output plane")
    gi = as_ptr(gi_addr, "adaptive_avg_pool2d_backward gi_addr")
    go = as_ptr(go_addr, "adaptive_avg_pool2d_backward go_addr")
    acc = malloc(p.H * p.W * (8 if gdt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError("adaptive_avg_pool2d_backward: cannot allocate the accumulator")
    with nogil:
        if gdt == DT_FLOAT64:
            _adaptive_avg_backward(&p, <double*>acc, gi, gdt, go, godt)
        else:
            _adaptive_avg_backward(&p, <float*>acc, gi, gdt, go, godt)
    free(acc)


# ---------------------------------------------------------------------------------------------
# Upsampling

cdef inline float _nearest_scale(Py_ssize_t in_size, Py_ssize_t out_size, double scale) noexcept nogil:
    # compute_scales_value<float>: 1 / scale when a positive scale was given, else in / out
    if scale > 0:
        return <float>(1.0 / scale)
    return <float>in_size / <float>out_size


cdef inline Py_ssize_t _nearest_idx(Py_ssize_t o, Py_ssize_t in_size, Py_ssize_t out_size, float scale) noexcept nogil:
    cdef Py_ssize_t i
    if out_size == in_size:
        return o
    if out_size == 2 * in_size:
        return o >> 1
    i = <Py_ssize_t>floorf(<float>o * scale)
    return i if i < in_size - 1 else in_size - 1


cdef int _index_table(Py_ssize_t** table, Py_ssize_t in_size, Py_ssize_t out_size, double scale) except -1:
    cdef Py_ssize_t o
    cdef float s = _nearest_scale(in_size, out_size, scale)
    table[0] = <Py_ssize_t*>malloc((out_size if out_size else 1) * sizeof(Py_ssize_t))
    if table[0] == NULL:
        raise MemoryError("upsample_nearest2d: cannot allocate the index table")
    for o in range(out_size):
        table[0][o] = _nearest_idx(o, in_size, out_size, s)
    return 0


def upsample_nearest2d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape,
                       scale_h, scale_w):
    """y (N, C, OH, OW) = x at CPU's nearest source pixels; a scale <= 0 means none given. Any dtype
    (an exact copy)."""
    cdef int ydt = check_dtype(y_dtype, "upsample_nearest2d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "upsample_nearest2d x_dtype")
    cdef Planes p
    cdef Py_ssize_t* hs = NULL
    cdef Py_ssize_t* ws = NULL
    cdef Py_ssize_t n, c, oh, ow
    cdef double sh = float(scale_h), sw = float(scale_w)
    cdef char* y
    cdef const char* x
    cdef const char* row
    cdef char* yrow
    cdef double v
    cdef int64_t iv
    if ydt != xdt:
        raise KernelArgumentError("upsample_nearest2d: the output dtype must equal the input dtype")
    _planes(&p, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "upsample_nearest2d")
    if p.N * p.C * p.OH * p.OW == 0:
        return
    if p.H * p.W == 0:
        raise KernelArgumentError("upsample_nearest2d: empty input plane")
    y = as_ptr(y_addr, "upsample_nearest2d y_addr")
    x = as_ptr(x_addr, "upsample_nearest2d x_addr")
    try:
        _index_table(&hs, p.H, p.OH, sh)
        _index_table(&ws, p.W, p.OW, sw)
        with nogil:
            for n in range(p.N):
                for c in range(p.C):
                    for oh in range(p.OH):
                        row = x + n * p.xs[0] + c * p.xs[1] + hs[oh] * p.xs[2]
                        yrow = y + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2]
                        for ow in range(p.OW):
                            if is_floating(xdt):
                                load_block(row + ws[ow] * p.xs[3], 0, xdt, 1, &v)
                                store_block(&v, 1, ydt, yrow + ow * p.ys[3], 0)
                            else:
                                load_block(row + ws[ow] * p.xs[3], 0, xdt, 1, &iv)
                                store_block(&iv, 1, ydt, yrow + ow * p.ys[3], 0)
    finally:
        free(hs)
        free(ws)


cdef void _nearest_backward(Planes* p, acc_t* acc, char* gi, int gdt, const char* go, int godt,
                            Py_ssize_t* hs, Py_ssize_t* ws) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, i, plane = p.H * p.W
    cdef acc_t g
    for n in range(p.N):
        for c in range(p.C):
            for i in range(plane):
                acc[i] = 0
            for oh in range(p.OH):
                for ow in range(p.OW):
                    load_block(go + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0, godt, 1, &g)
                    acc[hs[oh] * p.W + ws[ow]] += g
            for i in range(p.H):
                store_block(acc + i * p.W, p.W, gdt, gi + n * p.xs[0] + c * p.xs[1] + i * p.xs[2], p.xs[3])


def upsample_nearest2d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                go_shape, scale_h, scale_w):
    cdef int gdt = check_dtype(gi_dtype, "upsample_nearest2d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "upsample_nearest2d_backward go_dtype")
    cdef Planes p
    cdef Py_ssize_t* hs = NULL
    cdef Py_ssize_t* ws = NULL
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc = NULL
    _floating(gdt, "upsample_nearest2d_backward")
    _floating(godt, "upsample_nearest2d_backward")
    _planes(&p, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "upsample_nearest2d_backward")
    if p.N * p.C * p.H * p.W == 0:
        return
    gi = as_ptr(gi_addr, "upsample_nearest2d_backward gi_addr")
    if p.OH * p.OW:
        go = as_ptr(go_addr, "upsample_nearest2d_backward go_addr")
    else:
        p.OH = p.OW = 0
    try:
        _index_table(&hs, p.H, p.OH, float(scale_h))
        _index_table(&ws, p.W, p.OW, float(scale_w))
        acc = malloc(p.H * p.W * (8 if gdt == DT_FLOAT64 else 4))
        if acc == NULL:
            raise MemoryError("upsample_nearest2d_backward: cannot allocate the accumulator")
        with nogil:
            if gdt == DT_FLOAT64:
                _nearest_backward(&p, <double*>acc, gi, gdt, go, godt, hs, ws)
            else:
                _nearest_backward(&p, <float*>acc, gi, gdt, go, godt, hs, ws)
    finally:
        free(hs)
        free(ws)
        free(acc)


cdef struct Linear:
    Py_ssize_t i0, i1       # the two source indices (i1 = i0 at the border)
    double l0, l1           # their weights (in the compute type's precision)


cdef int _linear_table(Linear** table, Py_ssize_t in_size, Py_ssize_t out_size, bint align, double scale,
                       bint single) except -1:
    """CPU's compute_indices_weights_linear, in float (``single``) or double arithmetic."""
    cdef Py_ssize_t o, i0
    cdef float fs, fr, fl
    cdef double ds, dr, dl
    table[0] = <Linear*>malloc((out_size if out_size else 1) * sizeof(Linear))
    if table[0] == NULL:
        raise MemoryError("upsample_bilinear2d: cannot allocate the weight table")
    if align:
        ds = (<double>(in_size - 1) / (out_size - 1)) if out_size > 1 else 0.0
        fs = (<float>(in_size - 1) / <float>(out_size - 1)) if out_size > 1 else 0.0
    else:
        ds = (1.0 / scale) if scale > 0 else <double>in_size / <double>out_size
        fs = <float>(1.0 / scale) if scale > 0 else <float>in_size / <float>out_size
    for o in range(out_size):
        if single:
            fr = fs * o if align else fs * (o + <float>0.5) - <float>0.5
            if not align and fr < 0:
                fr = 0
            i0 = <Py_ssize_t>floorf(fr)
            if i0 > in_size - 1:
                i0 = in_size - 1
            fl = fr - i0
            fl = 0 if fl < 0 else (1 if fl > 1 else fl)
            table[0][o].l1 = fl
            table[0][o].l0 = <float>1 - fl
        else:
            dr = ds * o if align else ds * (o + 0.5) - 0.5
            if not align and dr < 0:
                dr = 0
            i0 = <Py_ssize_t>dr          # dr >= 0 here (align: o * scale; else clamped)
            if i0 > in_size - 1:
                i0 = in_size - 1
            dl = dr - i0
            dl = 0 if dl < 0 else (1 if dl > 1 else dl)
            table[0][o].l1 = dl
            table[0][o].l0 = 1 - dl
        table[0][o].i0 = i0
        table[0][o].i1 = i0 + 1 if i0 < in_size - 1 else i0
    return 0


cdef void _bilinear(Planes* p, const char* x, int xdt, char* y, int ydt, Linear* hs, Linear* ws,
                    acc_t zero) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow
    cdef const char* plane
    cdef const char* r0
    cdef const char* r1
    cdef acc_t a, b, cc, d, h0, h1, w0, w1, v
    for n in range(p.N):
        for c in range(p.C):
            plane = x + n * p.xs[0] + c * p.xs[1]
            for oh in range(p.OH):
                r0 = plane + hs[oh].i0 * p.xs[2]
                r1 = plane + hs[oh].i1 * p.xs[2]
                h0 = <acc_t>hs[oh].l0
                h1 = <acc_t>hs[oh].l1
                for ow in range(p.OW):
                    w0 = <acc_t>ws[ow].l0
                    w1 = <acc_t>ws[ow].l1
                    load_block(r0 + ws[ow].i0 * p.xs[3], 0, xdt, 1, &a)
                    load_block(r0 + ws[ow].i1 * p.xs[3], 0, xdt, 1, &b)
                    load_block(r1 + ws[ow].i0 * p.xs[3], 0, xdt, 1, &cc)
                    load_block(r1 + ws[ow].i1 * p.xs[3], 0, xdt, 1, &d)
                    v = h0 * (w0 * a + w1 * b) + h1 * (w0 * cc + w1 * d)
                    store_block(&v, 1, ydt, y + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0)


def upsample_bilinear2d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape,
                        align_corners, scale_h, scale_w):
    """y (N, C, OH, OW) = bilinear interpolation of x; a scale <= 0 means none given."""
    cdef int ydt = check_dtype(y_dtype, "upsample_bilinear2d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "upsample_bilinear2d x_dtype")
    cdef Planes p
    cdef Linear* hs = NULL
    cdef Linear* ws = NULL
    cdef char* y
    cdef const char* x
    cdef bint single = ydt != DT_FLOAT64
    _floating(ydt, "upsample_bilinear2d")
    _floating(xdt, "upsample_bilinear2d")
    _planes(&p, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "upsample_bilinear2d")
    if p.N * p.C * p.OH * p.OW == 0:
        return
    if p.H * p.W == 0:
        raise KernelArgumentError("upsample_bilinear2d: empty input plane")
    y = as_ptr(y_addr, "upsample_bilinear2d y_addr")
    x = as_ptr(x_addr, "upsample_bilinear2d x_addr")
    try:
        _linear_table(&hs, p.H, p.OH, bool(align_corners), float(scale_h), single)
        _linear_table(&ws, p.W, p.OW, bool(align_corners), float(scale_w), single)
        with nogil:
            if single:
                _bilinear(&p, x, xdt, y, ydt, hs, ws, <float>0)
            else:
                _bilinear(&p, x, xdt, y, ydt, hs, ws, <double>0)
    finally:
        free(hs)
        free(ws)


cdef void _bilinear_backward(Planes* p, acc_t* acc, char* gi, int gdt, const char* go, int godt,
                             Linear* hs, Linear* ws) noexcept nogil:
    cdef Py_ssize_t n, c, oh, ow, i, plane = p.H * p.W
    cdef acc_t g, h0, h1, w0, w1
    cdef acc_t* r0
    cdef acc_t* r1
    for n in range(p.N):
        for c in range(p.C):
            for i in range(plane):
                acc[i] = 0
            for oh in range(p.OH):
                r0 = acc + hs[oh].i0 * p.W
                r1 = acc + hs[oh].i1 * p.W
                h0 = <acc_t>hs[oh].l0
                h1 = <acc_t>hs[oh].l1
                for ow in range(p.OW):
                    w0 = <acc_t>ws[ow].l0
                    w1 = <acc_t>ws[ow].l1
                    load_block(go + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0, godt, 1, &g)
                    r0[ws[ow].i0] += h0 * w0 * g
                    r0[ws[ow].i1] += h0 * w1 * g
                    r1[ws[ow].i0] += h1 * w0 * g
                    r1[ws[ow].i1] += h1 * w1 * g
            for i in range(p.H):
                store_block(acc + i * p.W, p.W, gdt, gi + n * p.xs[0] + c * p.xs[1] + i * p.xs[2], p.xs[3])


def upsample_bilinear2d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                 go_shape, align_corners, scale_h, scale_w):
    cdef int gdt = check_dtype(gi_dtype, "upsample_bilinear2d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "upsample_bilinear2d_backward go_dtype")
    cdef Planes p
    cdef Linear* hs = NULL
    cdef Linear* ws = NULL
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc = NULL
    cdef bint single = gdt != DT_FLOAT64
    _floating(gdt, "upsample_bilinear2d_backward")
    _floating(godt, "upsample_bilinear2d_backward")
    _planes(&p, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "upsample_bilinear2d_backward")
    if p.N * p.C * p.H * p.W == 0:
        return
    gi = as_ptr(gi_addr, "upsample_bilinear2d_backward gi_addr")
    if p.OH * p.OW:
        go = as_ptr(go_addr, "upsample_bilinear2d_backward go_addr")
    else:
        p.OH = p.OW = 0
    try:
        _linear_table(&hs, p.H, p.OH, bool(align_corners), float(scale_h), single)
        _linear_table(&ws, p.W, p.OW, bool(align_corners), float(scale_w), single)
        acc = malloc(p.H * p.W * (4 if single else 8))
        if acc == NULL:
            raise MemoryError("upsample_bilinear2d_backward: cannot allocate the accumulator")
        with nogil:
            if single:
                _bilinear_backward(&p, <float*>acc, gi, gdt, go, godt, hs, ws)
            else:
                _bilinear_backward(&p, <double*>acc, gi, gdt, go, godt, hs, ws)
    finally:
        free(hs)
        free(ws)
        free(acc)


# =============================================================================================
# Second block: N-d pooling, unpooling and separable interpolation.
#
# Every operand here is a 5-d (N, C, D, H, W) view: the host pads 1-d and 2-d operands with
# leading unit spatial dims (stride 0), so one kernel serves every rank. Plane indices (max
# pooling, unpooling) are flat d * H * W + h * W + w offsets, which equal CPU's 1-d/2-d
# indices when the padded dims have extent 1. Floating work is done in float32 (float64 for
# float64) and rounded once; backward passes accumulate one plane in that type.

from libc.math cimport floor, ceil


cdef struct Vol:
    Py_ssize_t N, C, D, H, W, OD, OH, OW
    Py_ssize_t xs[5]       # the input operand (N, C, D, H, W), bytes
    Py_ssize_t ys[5]       # the output operand (N, C, OD, OH, OW), bytes


cdef int _vol(Vol* v, object x_shape, object x_strides, int xdt, object y_shape, object y_strides,
              int ydt, str what) except -1:
    cdef Py_ssize_t xsh[5]
    cdef Py_ssize_t ysh[5]
    _shape(x_shape, 5, xsh, what)
    _shape(y_shape, 5, ysh, what)
    if xsh[0] != ysh[0] or xsh[1] != ysh[1]:
        raise KernelArgumentError(f"{what}: batch/channel extents differ: {tuple(x_shape)!r} {tuple(y_shape)!r}")
    v.N, v.C, v.D, v.H, v.W = xsh[0], xsh[1], xsh[2], xsh[3], xsh[4]
    v.OD, v.OH, v.OW = ysh[2], ysh[3], ysh[4]
    _byte_strides(x_strides, 5, xdt, v.xs, what)
    _byte_strides(y_strides, 5, ydt, v.ys, what)
    return 0


cdef inline const char* _xat(Vol* v, const char* x, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t h,
                             Py_ssize_t w) noexcept nogil:
    return x + n * v.xs[0] + c * v.xs[1] + d * v.xs[2] + h * v.xs[3] + w * v.xs[4]


cdef inline char* _yat(Vol* v, char* y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t h,
                       Py_ssize_t w) noexcept nogil:
    return y + n * v.ys[0] + c * v.ys[1] + d * v.ys[2] + h * v.ys[3] + w * v.ys[4]


cdef void _store_plane(Vol* v, acc_t* acc, char* gi, int gdt, Py_ssize_t n, Py_ssize_t c) noexcept nogil:
    """Round the (D, H, W) accumulator into plane (n, c) of the input-shaped operand gi."""
    cdef Py_ssize_t d, h
    for d in range(v.D):
        for h in range(v.H):
            store_block(acc + (d * v.H + h) * v.W, v.W, gdt, <char*>_xat(v, gi, n, c, d, h, 0), v.xs[4])


cdef void* _plane_acc(Vol* v, int dt, str what) except NULL:
    cdef void* acc = malloc((v.D * v.H * v.W if v.D * v.H * v.W else 1) * (8 if dt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError(f"{what}: cannot allocate the accumulator")
    return acc


cdef inline const char* _ind_at(const char* ind, Py_ssize_t* is_, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
                                Py_ssize_t h, Py_ssize_t w) noexcept nogil:
    return ind + n * is_[0] + c * is_[1] + d * is_[2] + h * is_[3] + w * is_[4]


# Windows are [lo, hi) per spatial dim (d, h, w), walked by step; the helpers below serve every
# pooling kind, which differ only in how they place the window.

cdef inline void _adaptive_window3(Vol* v, Py_ssize_t od, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t* lo,
                                   Py_ssize_t* hi) noexcept nogil:
    """CPU's adaptive window of output voxel (od, oh, ow)."""
    lo[0], hi[0] = _start(od, v.OD, v.D), _end(od, v.OD, v.D)
    lo[1], hi[1] = _start(oh, v.OH, v.H), _end(oh, v.OH, v.H)
    lo[2], hi[2] = _start(ow, v.OW, v.W), _end(ow, v.OW, v.W)


cdef inline acc_t _adaptive_divide(acc_t s, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    return s / <acc_t>(hi[0] - lo[0]) / <acc_t>(hi[1] - lo[1]) / <acc_t>(hi[2] - lo[2])   # CPU divides per dim


cdef inline cmp_t _window_max(Vol* v, const char* x, int xdt, Py_ssize_t n, Py_ssize_t c, Py_ssize_t* lo,
                              Py_ssize_t* hi, Py_ssize_t* step, cmp_t lowest, Py_ssize_t* idx) noexcept nogil:
    """The max of plane (n, c) of x over a window and (idx) its flat plane offset, the window's
    first voxel when nothing beats ``lowest``. NaN propagates, the last NaN winning (as CPU)."""
    cdef Py_ssize_t id_, ih, iw
    cdef cmp_t val, best = lowest
    idx[0] = (lo[0] * v.H + lo[1]) * v.W + lo[2]
    id_ = lo[0]
    while id_ < hi[0]:
        ih = lo[1]
        while ih < hi[1]:
            iw = lo[2]
            while iw < hi[2]:
                load_block(_xat(v, x, n, c, id_, ih, iw), 0, xdt, 1, &val)
                if (cmp_t is double and (val > best or val != val)) or (cmp_t is int64_t and val > best):
                    best = val
                    idx[0] = (id_ * v.H + ih) * v.W + iw
                iw += step[2]
            ih += step[1]
        id_ += step[0]
    return best


cdef inline acc_t _window_sum(Vol* v, const char* x, int xdt, Py_ssize_t n, Py_ssize_t c, Py_ssize_t* lo,
                              Py_ssize_t* hi, acc_t zero) noexcept nogil:
    cdef Py_ssize_t id_, ih, iw
    cdef acc_t s = zero, val
    for id_ in range(lo[0], hi[0]):
        for ih in range(lo[1], hi[1]):
            for iw in range(lo[2], hi[2]):
                load_block(_xat(v, x, n, c, id_, ih, iw), 0, xdt, 1, &val)
                s = s + val
    return s


cdef inline void _window_add(Vol* v, acc_t* acc, Py_ssize_t* lo, Py_ssize_t* hi, acc_t g) noexcept nogil:
    """acc (one plane) += g over a window: the adjoint of _window_sum."""
    cdef Py_ssize_t id_, ih, iw
    for id_ in range(lo[0], hi[0]):
        for ih in range(lo[1], hi[1]):
            for iw in range(lo[2], hi[2]):
                acc[(id_ * v.H + ih) * v.W + iw] += g


# -- max pooling with indices over (D, H, W) windows

cdef inline void _max_window3(Vol* v, Py_ssize_t* k, Py_ssize_t od, Py_ssize_t oh, Py_ssize_t ow,
                              Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """max_pool3d's dilated window of output voxel (od, oh, ow), lo moved to its first tap inside."""
    cdef Py_ssize_t o[3]
    cdef Py_ssize_t size[3]
    cdef int i
    o[0], o[1], o[2] = od, oh, ow
    size[0], size[1], size[2] = v.D, v.H, v.W
    for i in range(3):
        lo[i] = o[i] * k[3 + i] - k[6 + i]
        hi[i] = lo[i] + (k[i] - 1) * k[9 + i] + 1
        if hi[i] > size[i]:
            hi[i] = size[i]
        while lo[i] < 0:
            lo[i] += k[9 + i]


cdef void _max_pool3(Vol* v, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                     Py_ssize_t* k, cmp_t lowest) noexcept nogil:
    # k = kernel (3), stride (3), padding (3), dilation (3); NULL: CPU's adaptive windows
    cdef Py_ssize_t n, c, od, oh, ow, idx
    cdef Py_ssize_t lo[3]
    cdef Py_ssize_t hi[3]
    cdef Py_ssize_t unit[3]
    cdef Py_ssize_t* step = unit       # the dilation; adaptive windows are dense
    cdef cmp_t best
    unit[0] = unit[1] = unit[2] = 1
    if k != NULL:
        step = k + 9
    for n in range(v.N):
        for c in range(v.C):
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        if k == NULL:
                            _adaptive_window3(v, od, oh, ow, lo, hi)
                        else:
                            _max_window3(v, k, od, oh, ow, lo, hi)
                        best = _window_max(v, x, xdt, n, c, lo, hi, step, lowest, &idx)
                        store_block(&best, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
                        ek_st_i64(<char*>_ind_at(ind, is_, n, c, od, oh, ow), idx)


cdef int _max_pool_entry(object y_addr, int ydt, object y_strides, object y_shape, object ind_addr,
                         object ind_strides, object x_addr, int xdt, object x_strides, object x_shape, Py_ssize_t* k,
                         str what) except -1:
    """The rest of max_pool3d (k: its window) and adaptive_max_pool3d (k NULL) once their own
    arguments are read: the shared checks, then the kernel."""
    cdef Vol v
    cdef Py_ssize_t is_[5]
    cdef char* y
    cdef char* ind
    cdef const char* x
    if xdt == DT_BOOL or ydt != xdt:
        raise KernelArgumentError(f"{what}: unsupported dtypes {_DTYPE_NAMES[xdt]} -> {_DTYPE_NAMES[ydt]}")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, what)
    _byte_strides(ind_strides, 5, DT_INT64, is_, f"{what} ind_strides")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return 0
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError(f"{what}: empty input plane")
    y = as_ptr(y_addr, f"{what} y_addr")
    ind = as_ptr(ind_addr, f"{what} ind_addr")
    x = as_ptr(x_addr, f"{what} x_addr")
    with nogil:
        if is_floating(xdt):
            _max_pool3(&v, x, xdt, y, ydt, ind, is_, k, <double>-INFINITY)
        else:
            _max_pool3(&v, x, xdt, y, ydt, ind, is_, k, <int64_t>INT64_MIN)
    return 0


def max_pool3d(y_addr, y_dtype, y_strides, y_shape, ind_addr, ind_strides, x_addr, x_dtype, x_strides,
               x_shape, window):
    """y, indices (N, C, OD, OH, OW) = max over the windows of x (N, C, D, H, W); ``window`` = kernel,
    stride, padding, dilation (3 ints each); indices are flat plane offsets. NaN propagates (the
    last NaN wins, as CPU). Any dtype but bool; y has x's dtype."""
    cdef int ydt = check_dtype(y_dtype, "max_pool3d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "max_pool3d x_dtype")
    cdef Py_ssize_t k[12]
    cdef int i
    vals = _ints(window, 12, "max_pool3d window")
    for i in range(12):
        k[i] = vals[i]
        if k[i] < 0 or (k[i] == 0 and not 6 <= i < 9):
            raise KernelArgumentError(f"max_pool3d: invalid window {tuple(vals)!r}")
    _max_pool_entry(y_addr, ydt, y_strides, y_shape, ind_addr, ind_strides, x_addr, xdt, x_strides, x_shape, k,
                    "max_pool3d")


# -- adaptive max pooling

def adaptive_max_pool3d(y_addr, y_dtype, y_strides, y_shape, ind_addr, ind_strides, x_addr, x_dtype,
                        x_strides, x_shape):
    """y, indices (N, C, OD, OH, OW) = max over CPU's adaptive windows of x (N, C, D, H, W)."""
    cdef int ydt = check_dtype(y_dtype, "adaptive_max_pool3d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "adaptive_max_pool3d x_dtype")
    _max_pool_entry(y_addr, ydt, y_strides, y_shape, ind_addr, ind_strides, x_addr, xdt, x_strides, x_shape, NULL,
                    "adaptive_max_pool3d")


# -- the backward of every indexed max pooling: scatter-add at the indices

cdef Py_ssize_t _index_backward(Vol* v, acc_t* acc, char* gi, int gdt, const char* go, int godt,
                                const char* ind, Py_ssize_t* is_, int64_t* bad) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, i, plane = v.D * v.H * v.W
    cdef int64_t idx
    cdef acc_t g
    for n in range(v.N):
        for c in range(v.C):
            for i in range(plane):
                acc[i] = 0
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        idx = ek_ld_i64(_ind_at(ind, is_, n, c, od, oh, ow))
                        if idx < 0 or idx >= plane:
                            bad[0] = idx
                            return 1
                        load_block(_yat(v, <char*>go, n, c, od, oh, ow), 0, godt, 1, &g)
                        acc[idx] += g
            _store_plane(v, acc, gi, gdt, n, c)
    return 0


def pool_index_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides, go_shape,
                        ind_addr, ind_strides):
    """grad_input (N, C, D, H, W) = scatter-add of grad_output (N, C, OD, OH, OW) at the flat plane
    indices (max_pool3d, adaptive and fractional max pooling); an index outside the plane raises."""
    cdef int gdt = check_dtype(gi_dtype, "pool_index_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "pool_index_backward go_dtype")
    cdef Vol v
    cdef Py_ssize_t is_[5]
    cdef char* gi
    cdef const char* go = NULL
    cdef const char* ind = NULL
    cdef void* acc
    cdef int64_t bad = 0
    cdef Py_ssize_t rc
    _floating(gdt, "pool_index_backward")
    _floating(godt, "pool_index_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "pool_index_backward")
    _byte_strides(ind_strides, 5, DT_INT64, is_, "pool_index_backward ind_strides")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    gi = as_ptr(gi_addr, "pool_index_backward gi_addr")
    if v.OD * v.OH * v.OW:
        go = as_ptr(go_addr, "pool_index_backward go_addr")
        ind = as_ptr(ind_addr, "pool_index_backward ind_addr")
    else:
        v.OD = v.OH = v.OW = 0
    acc = _plane_acc(&v, gdt, "pool_index_backward")
    with nogil:
        if gdt == DT_FLOAT64:
            rc = _index_backward(&v, <double*>acc, gi, gdt, go, godt, ind, is_, &bad)
        else:
            rc = _index_backward(&v, <float*>acc, gi, gdt, go, godt, ind, is_, &bad)
    free(acc)
    if rc:
        raise KernelArgumentError(f"pool_index_backward: index {bad} is out of range for a plane of "
                                  f"{v.D} x {v.H} x {v.W}")


# -- max unpooling: y = 0, y[n, c, indices[n, c, i]] = x[n, c, i]

cdef Py_ssize_t _unpool(Vol* v, char* y, int ydt, const char* x, int xdt, const char* ind, Py_ssize_t* is_,
                        int64_t* bad, cmp_t zero) noexcept nogil:
    # here v.D/H/W are the input's (pooled) extents, v.OD/OH/OW the unpooled output's
    cdef Py_ssize_t n, c, d, h, w, od, oh, ow, plane = v.OD * v.OH * v.OW
    cdef int64_t idx
    cdef cmp_t val
    for n in range(v.N):
        for c in range(v.C):
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        store_block(&zero, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
            for d in range(v.D):
                for h in range(v.H):
                    for w in range(v.W):
                        idx = ek_ld_i64(_ind_at(ind, is_, n, c, d, h, w))
                        if idx < 0 or idx >= plane:
                            bad[0] = idx
                            return 1
                        load_block(_xat(v, x, n, c, d, h, w), 0, xdt, 1, &val)
                        od = idx // (v.OH * v.OW)
                        oh = (idx // v.OW) % v.OH
                        store_block(&val, 1, ydt, _yat(v, y, n, c, od, oh, idx % v.OW), 0)
    return 0


def max_unpool(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, ind_addr, ind_strides):
    """y (N, C, OD, OH, OW) = zeros with x (N, C, D, H, W) scattered at its flat plane indices
    (later elements win where indices repeat, as CPU's serial loop). Any dtype, exact."""
    cdef int ydt = check_dtype(y_dtype, "max_unpool y_dtype")
    cdef int xdt = check_dtype(x_dtype, "max_unpool x_dtype")
    cdef Vol v
    cdef Py_ssize_t is_[5]
    cdef char* y
    cdef const char* x = NULL
    cdef const char* ind = NULL
    cdef int64_t bad = 0
    cdef Py_ssize_t rc
    if ydt != xdt:
        raise KernelArgumentError("max_unpool: the output dtype must equal the input dtype")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "max_unpool")
    _byte_strides(ind_strides, 5, DT_INT64, is_, "max_unpool ind_strides")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    y = as_ptr(y_addr, "max_unpool y_addr")
    if v.D * v.H * v.W:
        x = as_ptr(x_addr, "max_unpool x_addr")
        ind = as_ptr(ind_addr, "max_unpool ind_addr")
    with nogil:
        if is_floating(xdt):
            rc = _unpool(&v, y, ydt, x, xdt, ind, is_, &bad, <double>0)
        else:
            rc = _unpool(&v, y, ydt, x, xdt, ind, is_, &bad, <int64_t>0)
    if rc:
        raise KernelArgumentError(f"max_unpool: Found an invalid max index: {bad} (output volumes are of size "
                                  f"{v.OD}x{v.OH}x{v.OW})")


# -- average pooling over (D, H, W) windows (and, with no AvgWindow3, CPU's adaptive ones)

cdef struct AvgWindow3:
    Py_ssize_t k[9]        # kernel, stride, padding
    Py_ssize_t divisor
    bint include_pad


cdef inline Py_ssize_t _avg_window3(AvgWindow3* a, Vol* v, Py_ssize_t od, Py_ssize_t oh, Py_ssize_t ow,
                                    Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """CPU's avg_pool3d window: the clipped ranges lo/hi (d, h, w) and the divide factor (0: empty)."""
    cdef Py_ssize_t o[3]
    cdef Py_ssize_t size[3]
    cdef Py_ssize_t i, pool = 1, count = 1
    o[0], o[1], o[2] = od, oh, ow
    size[0], size[1], size[2] = v.D, v.H, v.W
    for i in range(3):
        lo[i] = o[i] * a.k[3 + i] - a.k[6 + i]
        hi[i] = lo[i] + a.k[i]
        if hi[i] > size[i] + a.k[6 + i]:
            hi[i] = size[i] + a.k[6 + i]
        pool *= hi[i] - lo[i]
        if lo[i] < 0:
            lo[i] = 0
        if hi[i] > size[i]:
            hi[i] = size[i]
        if lo[i] >= hi[i]:
            return 0
        count *= hi[i] - lo[i]
    if a.divisor:
        return a.divisor
    return pool if a.include_pad else count


cdef void _avg_pool3(Vol* v, AvgWindow3* a, const char* x, int xdt, char* y, int ydt, acc_t zero) noexcept nogil:
    """Window means of x over avg_pool3d's windows, or (a NULL) over CPU's adaptive ones."""
    cdef Py_ssize_t n, c, od, oh, ow, div
    cdef Py_ssize_t lo[3]
    cdef Py_ssize_t hi[3]
    cdef acc_t s
    for n in range(v.N):
        for c in range(v.C):
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        s = zero
                        if a == NULL:
                            _adaptive_window3(v, od, oh, ow, lo, hi)
                            s = _adaptive_divide(_window_sum(v, x, xdt, n, c, lo, hi, zero), lo, hi)
                        else:
                            div = _avg_window3(a, v, od, oh, ow, lo, hi)
                            if div:
                                s = _window_sum(v, x, xdt, n, c, lo, hi, zero) / <acc_t>div
                        store_block(&s, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)


cdef int _avg_args3(AvgWindow3* a, object window, object include_pad, object divisor, str what) except -1:
    cdef int i
    w = _ints(window, 9, what)
    for i in range(9):
        if w[i] < 0 or (w[i] == 0 and i < 6):
            raise KernelArgumentError(f"{what}: invalid window {tuple(w)!r}")
        a.k[i] = w[i]
    a.divisor = _ints((divisor,), 1, what)[0]    # any nonzero override, negative too (CPU divides by it)
    a.include_pad = bool(include_pad)
    return 0


def avg_pool3d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, window,
               count_include_pad, divisor_override):
    """y (N, C, OD, OH, OW) = window means of x; ``window`` = kernel, stride, padding (3 ints each);
    ``divisor_override`` 0 = none."""
    cdef int ydt = check_dtype(y_dtype, "avg_pool3d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "avg_pool3d x_dtype")
    cdef Vol v
    cdef AvgWindow3 a
    cdef char* y
    cdef const char* x = NULL
    _floating(ydt, "avg_pool3d")
    _floating(xdt, "avg_pool3d")
    _avg_args3(&a, window, count_include_pad, divisor_override, "avg_pool3d")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "avg_pool3d")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    y = as_ptr(y_addr, "avg_pool3d y_addr")
    if v.D * v.H * v.W:
        x = as_ptr(x_addr, "avg_pool3d x_addr")
    with nogil:
        if ydt == DT_FLOAT64:
            _avg_pool3(&v, &a, x, xdt, y, ydt, <double>0)
        else:
            _avg_pool3(&v, &a, x, xdt, y, ydt, <float>0)


cdef void _avg_pool3_backward(Vol* v, AvgWindow3* a, acc_t* acc, char* gi, int gdt, const char* go,
                              int godt) noexcept nogil:
    """The adjoint of _avg_pool3 (a NULL: adaptive windows)."""
    cdef Py_ssize_t n, c, od, oh, ow, div, i, plane = v.D * v.H * v.W
    cdef Py_ssize_t lo[3]
    cdef Py_ssize_t hi[3]
    cdef acc_t g
    for n in range(v.N):
        for c in range(v.C):
            for i in range(plane):
                acc[i] = 0
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        if a == NULL:
                            _adaptive_window3(v, od, oh, ow, lo, hi)
                            load_block(_yat(v, <char*>go, n, c, od, oh, ow), 0, godt, 1, &g)
                            g = _adaptive_divide(g, lo, hi)
                        else:
                            div = _avg_window3(a, v, od, oh, ow, lo, hi)
                            if not div:
                                continue
                            load_block(_yat(v, <char*>go, n, c, od, oh, ow), 0, godt, 1, &g)
                            g = g / <acc_t>div
                        _window_add(v, acc, lo, hi, g)
            _store_plane(v, acc, gi, gdt, n, c)


def avg_pool3d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides, go_shape,
                        window, count_include_pad, divisor_override):
    cdef int gdt = check_dtype(gi_dtype, "avg_pool3d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "avg_pool3d_backward go_dtype")
    cdef Vol v
    cdef AvgWindow3 a
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc
    _floating(gdt, "avg_pool3d_backward")
    _floating(godt, "avg_pool3d_backward")
    _avg_args3(&a, window, count_include_pad, divisor_override, "avg_pool3d_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "avg_pool3d_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    gi = as_ptr(gi_addr, "avg_pool3d_backward gi_addr")
    if v.OD * v.OH * v.OW:
        go = as_ptr(go_addr, "avg_pool3d_backward go_addr")
    else:
        v.OD = v.OH = v.OW = 0
    acc = _plane_acc(&v, gdt, "avg_pool3d_backward")
    with nogil:
        if gdt == DT_FLOAT64:
            _avg_pool3_backward(&v, &a, <double*>acc, gi, gdt, go, godt)
        else:
            _avg_pool3_backward(&v, &a, <float*>acc, gi, gdt, go, godt)
    free(acc)


# -- adaptive average pooling

def adaptive_avg_pool3d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape):
    cdef int ydt = check_dtype(y_dtype, "adaptive_avg_pool3d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "adaptive_avg_pool3d x_dtype")
    cdef Vol v
    cdef char* y
    cdef const char* x
    _floating(ydt, "adaptive_avg_pool3d")
    _floating(xdt, "adaptive_avg_pool3d")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "adaptive_avg_pool3d")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("adaptive_avg_pool3d: empty input plane")
    y = as_ptr(y_addr, "adaptive_avg_pool3d y_addr")
    x = as_ptr(x_addr, "adaptive_avg_pool3d x_addr")
    with nogil:
        if ydt == DT_FLOAT64:
            _avg_pool3(&v, NULL, x, xdt, y, ydt, <double>0)
        else:
            _avg_pool3(&v, NULL, x, xdt, y, ydt, <float>0)


def adaptive_avg_pool3d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                 go_shape):
    cdef int gdt = check_dtype(gi_dtype, "adaptive_avg_pool3d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "adaptive_avg_pool3d_backward go_dtype")
    cdef Vol v
    cdef char* gi
    cdef const char* go
    cdef void* acc
    _floating(gdt, "adaptive_avg_pool3d_backward")
    _floating(godt, "adaptive_avg_pool3d_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "adaptive_avg_pool3d_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    if v.OD * v.OH * v.OW == 0:
        raise KernelArgumentError("adaptive_avg_pool3d_backward: empty output plane")
    gi = as_ptr(gi_addr, "adaptive_avg_pool3d_backward gi_addr")
    go = as_ptr(go_addr, "adaptive_avg_pool3d_backward go_addr")
    acc = _plane_acc(&v, gdt, "adaptive_avg_pool3d_backward")
    with nogil:
        if gdt == DT_FLOAT64:
            _avg_pool3_backward(&v, NULL, <double*>acc, gi, gdt, go, godt)
        else:
            _avg_pool3_backward(&v, NULL, <float*>acc, gi, gdt, go, godt)
    free(acc)


# -- interpolation over (D, H, W): nearest / nearest-exact, and separable filters

cdef inline Py_ssize_t _nearest_exact_idx(Py_ssize_t o, Py_ssize_t in_size, float scale) noexcept nogil:
    # ATen: floorf((dst_index + 0.5) * scale), the product in double, floored as float
    cdef Py_ssize_t i = <Py_ssize_t>floorf(<float>((o + 0.5) * <double>scale))
    return i if i < in_size - 1 else in_size - 1


cdef int _nearest_tables(Py_ssize_t** t, Vol* v, object scales, bint exact) except -1:
    """Per spatial dim, the source (input-side) index of every output index (CPU's float arithmetic);
    backward passes describe grad_input as the input side and grad_output as the output side."""
    cdef Py_ssize_t ins[3]
    cdef Py_ssize_t outs[3]
    cdef Py_ssize_t o
    cdef int i
    cdef float s
    sc = [float(x) for x in scales]
    if len(sc) != 3:
        raise KernelArgumentError(f"upsample_nearest: expected 3 scales, got {scales!r}")
    ins[0], ins[1], ins[2] = v.D, v.H, v.W
    outs[0], outs[1], outs[2] = v.OD, v.OH, v.OW
    for i in range(3):
        t[i] = <Py_ssize_t*>malloc((outs[i] if outs[i] else 1) * sizeof(Py_ssize_t))
        if t[i] == NULL:
            raise MemoryError("upsample_nearest: cannot allocate the index table")
        s = _nearest_scale(ins[i], outs[i], sc[i])
        for o in range(outs[i]):
            t[i][o] = _nearest_exact_idx(o, ins[i], s) if exact else _nearest_idx(o, ins[i], outs[i], s)
    return 0


cdef void _nearest3(Vol* v, const char* x, int xdt, char* y, int ydt, Py_ssize_t** t, cmp_t kind) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow
    cdef cmp_t val
    for n in range(v.N):
        for c in range(v.C):
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        load_block(_xat(v, x, n, c, t[0][od], t[1][oh], t[2][ow]), 0, xdt, 1, &val)
                        store_block(&val, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)


def upsample_nearest3d(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, exact, scales):
    """y (N, C, OD, OH, OW) = x (N, C, D, H, W) at CPU's nearest (or nearest-exact) source voxels;
    ``scales`` (d, h, w), <= 0 meaning none given. Any dtype (an exact copy)."""
    cdef int ydt = check_dtype(y_dtype, "upsample_nearest3d y_dtype")
    cdef int xdt = check_dtype(x_dtype, "upsample_nearest3d x_dtype")
    cdef Vol v
    cdef Py_ssize_t* t[3]
    cdef char* y
    cdef const char* x
    t[0] = t[1] = t[2] = NULL
    if ydt != xdt:
        raise KernelArgumentError("upsample_nearest3d: the output dtype must equal the input dtype")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "upsample_nearest3d")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("upsample_nearest3d: empty input plane")
    y = as_ptr(y_addr, "upsample_nearest3d y_addr")
    x = as_ptr(x_addr, "upsample_nearest3d x_addr")
    try:
        _nearest_tables(t, &v, scales, bool(exact))
        with nogil:
            if is_floating(xdt):
                _nearest3(&v, x, xdt, y, ydt, t, <double>0)
            else:
                _nearest3(&v, x, xdt, y, ydt, t, <int64_t>0)
    finally:
        free(t[0])
        free(t[1])
        free(t[2])


cdef void _nearest3_backward(Vol* v, acc_t* acc, char* gi, int gdt, const char* go, int godt,
                             Py_ssize_t** t) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, i, plane = v.D * v.H * v.W
    cdef acc_t g
    for n in range(v.N):
        for c in range(v.C):
            for i in range(plane):
                acc[i] = 0
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        load_block(_yat(v, <char*>go, n, c, od, oh, ow), 0, godt, 1, &g)
                        acc[(t[0][od] * v.H + t[1][oh]) * v.W + t[2][ow]] += g
            _store_plane(v, acc, gi, gdt, n, c)


def upsample_nearest3d_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                go_shape, exact, scales):
    cdef int gdt = check_dtype(gi_dtype, "upsample_nearest3d_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "upsample_nearest3d_backward go_dtype")
    cdef Vol v
    cdef Py_ssize_t* t[3]
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc = NULL
    t[0] = t[1] = t[2] = NULL
    _floating(gdt, "upsample_nearest3d_backward")
    _floating(godt, "upsample_nearest3d_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "upsample_nearest3d_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    gi = as_ptr(gi_addr, "upsample_nearest3d_backward gi_addr")
    if v.OD * v.OH * v.OW:
        go = as_ptr(go_addr, "upsample_nearest3d_backward go_addr")
    else:
        v.OD = v.OH = v.OW = 0
    try:
        _nearest_tables(t, &v, scales, bool(exact))
        acc = _plane_acc(&v, gdt, "upsample_nearest3d_backward")
        with nogil:
            if gdt == DT_FLOAT64:
                _nearest3_backward(&v, <double*>acc, gi, gdt, go, godt, t)
            else:
                _nearest3_backward(&v, <float*>acc, gi, gdt, go, godt, t)
    finally:
        free(t[0])
        free(t[1])
        free(t[2])
        free(acc)


# Separable filters: per spatial dim and output index, ``taps`` source indices and weights.
# Modes: 0 linear (2 taps), 1 cubic (4 taps, A = -0.75), 2 antialiased linear, 3 antialiased
# cubic (A = -0.5), the last two with ATen's support-scaled, normalised filters.

cdef enum:
    FILTER_LINEAR = 0
    FILTER_CUBIC = 1
    FILTER_AA_LINEAR = 2
    FILTER_AA_CUBIC = 3


cdef struct Taps:
    Py_ssize_t taps        # entries per output index
    Py_ssize_t* idx        # [out * taps]
    double* wt             # [out * taps], values of the compute type


ctypedef fused real_t:
    float
    double


cdef inline real_t _cubic1(real_t x, real_t A) noexcept nogil:
    return ((A + 2) * x - (A + 3)) * x * x + 1


cdef inline real_t _cubic2(real_t x, real_t A) noexcept nogil:
    return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A


cdef inline real_t _aa_filter(real_t x, bint cubic) noexcept nogil:
    if x < 0:
        x = -x
    if not cubic:
        return 1 - x if x < 1 else 0
    if x < 1:
        return _cubic1(x, <real_t>-0.5)
    if x < 2:
        return _cubic2(x, <real_t>-0.5)
    return 0


cdef void _fill_taps(Taps* t, Py_ssize_t in_size, Py_ssize_t out_size, int mode, bint align, double given,
                     real_t kind) noexcept nogil:
    cdef Py_ssize_t o, j, i0, xmin, xsize
    cdef real_t scale, real, lam, A = -0.75, support, center, invscale, total, w
    cdef real_t* c
    if out_size > 1:
        if align:
            scale = <real_t>(in_size - 1) / <real_t>(out_size - 1)
        else:
            scale = <real_t>(1.0 / given) if given > 0 else <real_t>in_size / <real_t>out_size
    else:
        scale = 0
    if mode == FILTER_AA_LINEAR or mode == FILTER_AA_CUBIC:
        support = <real_t>((2 if mode == FILTER_AA_LINEAR else 4) * 0.5)
        if scale >= 1:
            support = support * scale
        invscale = <real_t>(1.0 / scale) if scale >= 1 else 1
        for o in range(out_size):
            center = <real_t>(scale * (o + 0.5))
            xmin = <Py_ssize_t>(center - support + 0.5)
            if xmin < 0:
                xmin = 0
            xsize = <Py_ssize_t>(center + support + 0.5)
            if xsize > in_size:
                xsize = in_size
            xsize -= xmin
            total = 0
            for j in range(t.taps):
                t.idx[o * t.taps + j] = xmin if j >= xsize else xmin + j
                w = _aa_filter(<real_t>((j + xmin - center + 0.5) * invscale), mode == FILTER_AA_CUBIC) \
                    if j < xsize else 0
                t.wt[o * t.taps + j] = w
                total += w
            if total != 0:
                for j in range(xsize):
                    t.wt[o * t.taps + j] = <real_t>(<real_t>t.wt[o * t.taps + j] / total)
        return
    for o in range(out_size):
        if align:
            real = scale * o
        else:
            real = <real_t>(scale * (o + 0.5) - 0.5)
            if mode == FILTER_LINEAR and real < 0:
                real = 0
        # guard_index_and_lambda
        i0 = <Py_ssize_t>floor(real)
        if i0 > in_size - 1:
            i0 = in_size - 1
        lam = real - i0
        lam = 0 if lam < 0 else (1 if lam > 1 else lam)
        if mode == FILTER_LINEAR:
            t.idx[o * 2] = i0
            t.idx[o * 2 + 1] = i0 + 1 if i0 < in_size - 1 else i0
            t.wt[o * 2] = <real_t>(1 - lam)
            t.wt[o * 2 + 1] = lam
        else:
            t.wt[o * 4] = _cubic2(<real_t>(lam + 1.0), A)
            t.wt[o * 4 + 1] = _cubic1(lam, A)
            t.wt[o * 4 + 2] = _cubic1(<real_t>(1.0 - lam), A)
            t.wt[o * 4 + 3] = _cubic2(<real_t>(2.0 - lam), A)
            for j in range(4):
                i0 = <Py_ssize_t>floor(real) - 1 + j
                if i0 > in_size - 1:
                    i0 = in_size - 1
                t.idx[o * 4 + j] = i0 if i0 > 0 else 0


cdef int _tap_tables(Taps* t, Vol* v, int ndim, int mode, bint align, object scales, bint single) except -1:
    """Tables for the last ``ndim`` spatial dims; the leading (padded) dims get one tap of weight 1."""
    cdef Py_ssize_t ins[3]
    cdef Py_ssize_t outs[3]
    cdef Py_ssize_t o, taps
    cdef int i
    cdef double support
    sc = [float(x) for x in scales]
    if len(sc) != 3 or not 1 <= ndim <= 3 or not 0 <= mode <= 3:
        raise KernelArgumentError(f"upsample_separable: bad scales/ndim/mode {scales!r} {ndim} {mode}")
    ins[0], ins[1], ins[2] = v.D, v.H, v.W
    outs[0], outs[1], outs[2] = v.OD, v.OH, v.OW
    for i in range(3):
        if i < 3 - ndim:
            if ins[i] != 1 or outs[i] != 1:
                raise KernelArgumentError(f"upsample_separable: padded dim {i} has extents {ins[i]} -> {outs[i]}")
            taps = 1
        elif mode == FILTER_LINEAR:
            taps = 2
        elif mode == FILTER_CUBIC:
            taps = 4
        else:
            support = (1.0 if mode == FILTER_AA_LINEAR else 2.0)
            if outs[i] > 1:
                s = ((ins[i] - 1.0) / (outs[i] - 1.0)) if align else \
                    ((1.0 / sc[i]) if sc[i] > 0 else <double>ins[i] / outs[i])
                if s >= 1:
                    support *= s
            taps = <Py_ssize_t>ceil(support) * 2 + 1
        t[i].taps = taps
        t[i].idx = <Py_ssize_t*>malloc((outs[i] if outs[i] else 1) * taps * sizeof(Py_ssize_t))
        t[i].wt = <double*>malloc((outs[i] if outs[i] else 1) * taps * sizeof(double))
        if t[i].idx == NULL or t[i].wt == NULL:
            raise MemoryError("upsample_separable: cannot allocate the weight tables")
        if taps == 1:
            for o in range(outs[i]):
                t[i].idx[o] = 0
                t[i].wt[o] = 1
        elif single:
            _fill_taps(&t[i], ins[i], outs[i], mode, align, <double>sc[i], <float>0)
        else:
            _fill_taps(&t[i], ins[i], outs[i], mode, align, <double>sc[i], <double>0)
    return 0


cdef void _free_taps(Taps* t) noexcept:
    cdef int i
    for i in range(3):
        free(t[i].idx)
        free(t[i].wt)


cdef void _separable(Vol* v, const char* x, int xdt, char* y, int ydt, Taps* t, acc_t zero) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, a, b, e
    cdef Py_ssize_t* di
    cdef Py_ssize_t* hi
    cdef Py_ssize_t* wi
    cdef double* dw
    cdef double* hw
    cdef double* ww
    cdef acc_t s, sh, sw, val
    for n in range(v.N):
        for c in range(v.C):
            for od in range(v.OD):
                di = t[0].idx + od * t[0].taps
                dw = t[0].wt + od * t[0].taps
                for oh in range(v.OH):
                    hi = t[1].idx + oh * t[1].taps
                    hw = t[1].wt + oh * t[1].taps
                    for ow in range(v.OW):
                        wi = t[2].idx + ow * t[2].taps
                        ww = t[2].wt + ow * t[2].taps
                        s = zero
                        for a in range(t[0].taps):
                            sh = zero
                            for b in range(t[1].taps):
                                sw = zero
                                for e in range(t[2].taps):
                                    load_block(_xat(v, x, n, c, di[a], hi[b], wi[e]), 0, xdt, 1, &val)
                                    sw = sw + val * <acc_t>ww[e]
                                sh = sh + sw * <acc_t>hw[b]
                            s = s + sh * <acc_t>dw[a]
                        store_block(&s, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)


def upsample_separable(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, ndim, mode,
                       align_corners, scales):
    """y (N, C, OD, OH, OW) = separable interpolation of x (N, C, D, H, W) over its last ``ndim``
    spatial dims: linear / cubic (CPU's source-index rules, align_corners, given scales) or
    antialiased linear / cubic. Weights in float32 (float64 for float64), as CPU's opmath."""
    cdef int ydt = check_dtype(y_dtype, "upsample_separable y_dtype")
    cdef int xdt = check_dtype(x_dtype, "upsample_separable x_dtype")
    cdef Vol v
    cdef Taps t[3]
    cdef char* y
    cdef const char* x
    cdef bint single = ydt != DT_FLOAT64
    memset(t, 0, sizeof(t))
    _floating(ydt, "upsample_separable")
    _floating(xdt, "upsample_separable")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "upsample_separable")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("upsample_separable: empty input plane")
    y = as_ptr(y_addr, "upsample_separable y_addr")
    x = as_ptr(x_addr, "upsample_separable x_addr")
    try:
        _tap_tables(t, &v, ndim, mode, bool(align_corners), scales, single)
        with nogil:
            if single:
                _separable(&v, x, xdt, y, ydt, t, <float>0)
            else:
                _separable(&v, x, xdt, y, ydt, t, <double>0)
    finally:
        _free_taps(t)


cdef void _separable_backward(Vol* v, acc_t* acc, char* gi, int gdt, const char* go, int godt,
                              Taps* t) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, a, b, e, i, plane = v.D * v.H * v.W
    cdef Py_ssize_t* di
    cdef Py_ssize_t* hi
    cdef Py_ssize_t* wi
    cdef double* dw
    cdef double* hw
    cdef double* ww
    cdef acc_t g, gd, gh
    for n in range(v.N):
        for c in range(v.C):
            for i in range(plane):
                acc[i] = 0
            for od in range(v.OD):
                di = t[0].idx + od * t[0].taps
                dw = t[0].wt + od * t[0].taps
                for oh in range(v.OH):
                    hi = t[1].idx + oh * t[1].taps
                    hw = t[1].wt + oh * t[1].taps
                    for ow in range(v.OW):
                        wi = t[2].idx + ow * t[2].taps
                        ww = t[2].wt + ow * t[2].taps
                        load_block(_yat(v, <char*>go, n, c, od, oh, ow), 0, godt, 1, &g)
                        for a in range(t[0].taps):
                            gd = <acc_t>dw[a]
                            for b in range(t[1].taps):
                                gh = gd * <acc_t>hw[b]
                                for e in range(t[2].taps):
                                    acc[(di[a] * v.H + hi[b]) * v.W + wi[e]] += gh * <acc_t>ww[e] * g
            _store_plane(v, acc, gi, gdt, n, c)


def upsample_separable_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                go_shape, ndim, mode, align_corners, scales):
    """The adjoint of upsample_separable: grad_input (N, C, D, H, W) accumulates every grad_output
    element times its weights, in float32 (float64), rounded once."""
    cdef int gdt = check_dtype(gi_dtype, "upsample_separable_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "upsample_separable_backward go_dtype")
    cdef Vol v
    cdef Taps t[3]
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc = NULL
    cdef bint single = gdt != DT_FLOAT64
    memset(t, 0, sizeof(t))
    _floating(gdt, "upsample_separable_backward")
    _floating(godt, "upsample_separable_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "upsample_separable_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    gi = as_ptr(gi_addr, "upsample_separable_backward gi_addr")
    if v.OD * v.OH * v.OW:
        go = as_ptr(go_addr, "upsample_separable_backward go_addr")
    try:
        _tap_tables(t, &v, ndim, mode, bool(align_corners), scales, single)
        acc = _plane_acc(&v, gdt, "upsample_separable_backward")
        with nogil:
            if single:
                _separable_backward(&v, <float*>acc, gi, gdt, go, godt, t)
            else:
                _separable_backward(&v, <double*>acc, gi, gdt, go, godt, t)
    finally:
        _free_taps(t)
        free(acc)


# -- grid sampling (forward): bilinear / nearest over 2-d or 3-d inputs, bicubic over 2-d

from libc.math cimport fabs, fmod, nearbyint


cdef enum:
    GRID_BILINEAR = 0
    GRID_NEAREST = 1
    GRID_BICUBIC = 2
    PAD_ZEROS = 0
    PAD_BORDER = 1
    PAD_REFLECTION = 2


cdef inline real_t _unnormalize(real_t coord, Py_ssize_t size, bint align) noexcept nogil:
    if align:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


cdef inline real_t _clip(real_t x, Py_ssize_t size) noexcept nogil:
    # CPU's std::min(size - 1, std::max(x, 0)), operand order included: a NaN becomes size - 1
    if x < 0:
        x = 0
    return x if x < size - 1 else size - 1


cdef inline real_t _reflect(real_t x, Py_ssize_t twice_low, Py_ssize_t twice_high) noexcept nogil:
    cdef real_t lo, span, extra
    cdef Py_ssize_t flips
    if twice_low == twice_high:
        return 0
    lo = <real_t>twice_low / 2
    span = <real_t>(twice_high - twice_low) / 2
    x = fabs(x - lo)
    extra = fmod(x, span)
    flips = <Py_ssize_t>floor(x / span)
    return extra + lo if flips % 2 == 0 else span - extra + lo


cdef inline real_t _coordinates(real_t x, Py_ssize_t size, int padding, bint align) noexcept nogil:
    if padding == PAD_BORDER:
        return _clip(x, size)
    if padding == PAD_REFLECTION:
        x = _reflect(x, 0, 2 * (size - 1)) if align else _reflect(x, -1, 2 * size - 1)
        return _clip(x, size)
    return x


cdef inline bint _inside(Py_ssize_t i, Py_ssize_t size) noexcept nogil:
    return 0 <= i < size


cdef struct GridGeom:
    Py_ssize_t gs[5]       # the grid operand (N, OD, OH, OW, ndim), bytes
    int gdt, ndim, mode, padding
    bint align


cdef inline real_t _cubic_tap(Vol* v, const char* x, int xdt, Py_ssize_t n, Py_ssize_t c, Py_ssize_t ix,
                              Py_ssize_t iy, GridGeom* g, real_t kind) noexcept nogil:
    # CPU's get_value_bounded: the tap coordinate goes through the padding rule, zero outside
    cdef real_t fx = _coordinates(<real_t>ix, v.W, g.padding, g.align)
    cdef real_t fy = _coordinates(<real_t>iy, v.H, g.padding, g.align)
    cdef Py_ssize_t jx = <Py_ssize_t>fx, jy = <Py_ssize_t>fy
    cdef real_t val
    if _inside(jx, v.W) and _inside(jy, v.H):
        load_block(_xat(v, x, n, c, 0, jy, jx), 0, xdt, 1, &val)
        return val
    return 0


cdef void _grid_sample(Vol* v, GridGeom* g, const char* x, int xdt, const char* grid, char* y, int ydt,
                       real_t kind) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, x0, y0, z0, a, b, e, i, j
    cdef real_t gx, gy, gz, ix, iy, iz, tx, ty, tz, s, val, wx, wy, wz, row
    cdef real_t cx[4]
    cdef real_t cy[4]
    cdef real_t A = -0.75
    cdef const char* gp
    for n in range(v.N):
        for od in range(v.OD):
            for oh in range(v.OH):
                for ow in range(v.OW):
                    gp = grid + n * g.gs[0] + od * g.gs[1] + oh * g.gs[2] + ow * g.gs[3]
                    load_block(gp, 0, g.gdt, 1, &gx)
                    load_block(gp + g.gs[4], 0, g.gdt, 1, &gy)
                    gz = 0
                    if g.ndim == 3:
                        load_block(gp + 2 * g.gs[4], 0, g.gdt, 1, &gz)
                    if g.mode == GRID_BICUBIC:
                        ix = _unnormalize(gx, v.W, g.align)
                        iy = _unnormalize(gy, v.H, g.align)
                        x0 = <Py_ssize_t>floor(ix)
                        y0 = <Py_ssize_t>floor(iy)
                        tx = ix - x0
                        ty = iy - y0
                        cx[0] = _cubic2(<real_t>(tx + 1), A)
                        cx[1] = _cubic1(tx, A)
                        cx[2] = _cubic1(<real_t>(1 - tx), A)
                        cx[3] = _cubic2(<real_t>(2 - tx), A)
                        cy[0] = _cubic2(<real_t>(ty + 1), A)
                        cy[1] = _cubic1(ty, A)
                        cy[2] = _cubic1(<real_t>(1 - ty), A)
                        cy[3] = _cubic2(<real_t>(2 - ty), A)
                        for c in range(v.C):
                            s = 0
                            for i in range(4):
                                row = 0
                                for j in range(4):
                                    row = row + _cubic_tap(v, x, xdt, n, c, x0 - 1 + j, y0 - 1 + i, g, kind) * cx[j]
                                s = s + row * cy[i]
                            store_block(&s, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
                        continue
                    ix = _coordinates(_unnormalize(gx, v.W, g.align), v.W, g.padding, g.align)
                    iy = _coordinates(_unnormalize(gy, v.H, g.align), v.H, g.padding, g.align)
                    iz = _coordinates(_unnormalize(gz, v.D, g.align), v.D, g.padding, g.align) if g.ndim == 3 else 0
                    if g.mode == GRID_NEAREST:
                        x0 = <Py_ssize_t>nearbyint(ix)
                        y0 = <Py_ssize_t>nearbyint(iy)
                        z0 = <Py_ssize_t>nearbyint(iz)
                        for c in range(v.C):
                            s = 0
                            if ix == ix and iy == iy and iz == iz and _inside(x0, v.W) and _inside(y0, v.H) \
                                    and _inside(z0, v.D):
                                load_block(_xat(v, x, n, c, z0, y0, x0), 0, xdt, 1, &s)
                            store_block(&s, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
                        continue
                    # bilinear / trilinear: corner (x0 + a, y0 + b, z0 + e), weight by the distances
                    x0 = <Py_ssize_t>floor(ix)
                    y0 = <Py_ssize_t>floor(iy)
                    z0 = <Py_ssize_t>floor(iz)
                    tx = ix - x0
                    ty = iy - y0
                    tz = iz - z0
                    for c in range(v.C):
                        s = 0     # a NaN coordinate reads no corner (CPU: every corner out of bounds)
                        if ix == ix and iy == iy and iz == iz:
                            for e in range(2 if g.ndim == 3 else 1):
                                wz = (tz if e else 1 - tz) if g.ndim == 3 else 1
                                for b in range(2):
                                    wy = ty if b else 1 - ty
                                    for a in range(2):
                                        wx = tx if a else 1 - tx
                                        if _inside(x0 + a, v.W) and _inside(y0 + b, v.H) and _inside(z0 + e, v.D):
                                            load_block(_xat(v, x, n, c, z0 + e, y0 + b, x0 + a), 0, xdt, 1, &val)
                                            s = s + val * (wx * wy * wz)
                        store_block(&s, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)


def grid_sample(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, grid_addr, grid_dtype,
                grid_strides, ndim, mode, padding_mode, align_corners):
    """y (N, C, OD, OH, OW) = x (N, C, D, H, W) sampled at grid (N, OD, OH, OW, ndim) (x, y[, z]
    coordinates in [-1, 1]); mode 0 bilinear, 1 nearest, 2 bicubic (ndim 2); padding 0 zeros,
    1 border, 2 reflection: CPU's GridSampler.h rules, computed in float32 (float64)."""
    cdef int ydt = check_dtype(y_dtype, "grid_sample y_dtype")
    cdef int xdt = check_dtype(x_dtype, "grid_sample x_dtype")
    cdef Vol v
    cdef GridGeom g
    cdef char* y
    cdef const char* x = NULL
    cdef const char* grid
    g.gdt = check_dtype(grid_dtype, "grid_sample grid_dtype")
    g.ndim, g.mode, g.padding = ndim, mode, padding_mode
    g.align = bool(align_corners)
    _floating(ydt, "grid_sample")
    _floating(xdt, "grid_sample")
    _floating(g.gdt, "grid_sample")
    if g.ndim not in (2, 3) or g.mode not in (0, 1, 2) or g.padding not in (0, 1, 2) or \
            (g.mode == GRID_BICUBIC and g.ndim != 2):
        raise KernelArgumentError(f"grid_sample: unsupported ndim/mode/padding {ndim} {mode} {padding_mode}")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "grid_sample")
    _byte_strides(grid_strides, 5, g.gdt, g.gs, "grid_sample grid_strides")
    if g.ndim == 2 and v.D != 1:
        raise KernelArgumentError("grid_sample: a 2-d sampling needs a padded depth of 1")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    y = as_ptr(y_addr, "grid_sample y_addr")
    grid = as_ptr(grid_addr, "grid_sample grid_addr")
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("grid_sample: empty input plane")
    x = as_ptr(x_addr, "grid_sample x_addr")
    with nogil:
        if ydt == DT_FLOAT64:
            _grid_sample(&v, &g, x, xdt, grid, y, ydt, <double>0)
        else:
            _grid_sample(&v, &g, x, xdt, grid, y, ydt, <float>0)


# -- pairwise distances (cdist, pdist) and their gradients

from libc.math cimport pow as c_pow, sqrt as c_sqrt, isinf as c_isinf


cdef inline real_t _dist(const char* a, Py_ssize_t sa, const char* b, Py_ssize_t sb, int dt, Py_ssize_t m,
                         double p, real_t kind) noexcept nogil:
    cdef Py_ssize_t k
    cdef real_t s = 0, u, w, d
    for k in range(m):
        load_block(a + k * sa, 0, dt, 1, &u)
        load_block(b + k * sb, 0, dt, 1, &w)
        d = fabs(u - w)
        if p == 0:
            s = s + (d != 0)
        elif p == 1:
            s = s + d
        elif p == 2:
            s = s + d * d
        elif c_isinf(p):
            if d > s or d != d:
                s = d
        else:
            s = s + <real_t>c_pow(d, p)
    if p == 2:
        return <real_t>c_sqrt(s)
    if p == 0 or p == 1 or c_isinf(p):
        return s
    return <real_t>c_pow(s, 1.0 / p)


cdef inline real_t _dist_grad(real_t diff, real_t dist, double p) noexcept nogil:
    """d dist / d x1 of one coordinate difference x1 - x2 (CPU's Distance kernels' rules)."""
    if p == 0 or dist == 0:
        return 0
    if p == 1:
        return (diff > 0) - (diff < 0)
    if p == 2:
        return diff / dist
    if c_isinf(p):
        return ((diff > 0) - (diff < 0)) * (fabs(diff) == dist)
    if p < 2:
        return ((diff > 0) - (diff < 0)) * <real_t>c_pow(fabs(diff), p - 1) / <real_t>c_pow(dist, p - 1)
    return diff * <real_t>c_pow(fabs(diff), p - 2) / <real_t>c_pow(dist, p - 1)


cdef struct Pairs:
    Py_ssize_t B, P, R, M
    Py_ssize_t as_[3]      # x1 (B, P, M), bytes
    Py_ssize_t bs[3]       # x2 (B, R, M), bytes
    Py_ssize_t ds[3]       # distances (B, P, R), or (1, 1, pairs) when condensed, bytes
    int adt, bdt, ddt
    bint condensed         # pdist: x2 is x1, distances are the condensed upper triangle


cdef inline Py_ssize_t _pair(Pairs* q, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    # condensed index of i < j among P rows
    return q.P * i - i * (i + 1) // 2 + j - i - 1


cdef void _pairwise(Pairs* q, const char* a, const char* b, char* d, double p, real_t kind) noexcept nogil:
    cdef Py_ssize_t n, i, j
    cdef real_t r
    for n in range(q.B):
        for i in range(q.P):
            for j in range(i + 1 if q.condensed else 0, q.R):
                r = _dist(a + n * q.as_[0] + i * q.as_[1], q.as_[2], b + n * q.bs[0] + j * q.bs[1], q.bs[2],
                          q.adt, q.M, p, kind)
                if q.condensed:
                    store_block(&r, 1, q.ddt, d + _pair(q, i, j) * q.ds[2], 0)
                else:
                    store_block(&r, 1, q.ddt, d + n * q.ds[0] + i * q.ds[1] + j * q.ds[2], 0)


cdef int _pairs_args(Pairs* q, object a_shape, object a_strides, int adt, object b_shape, object b_strides, int bdt,
                     object d_strides, int ddt, bint condensed, str what) except -1:
    cdef Py_ssize_t ash[3]
    cdef Py_ssize_t bsh[3]
    _shape(a_shape, 3, ash, what)
    _shape(b_shape, 3, bsh, what)
    if ash[0] != bsh[0] or ash[2] != bsh[2] or (condensed and (ash[0] != 1 or bsh[1] != ash[1])):
        raise KernelArgumentError(f"{what}: mismatched operands {tuple(a_shape)!r} {tuple(b_shape)!r}")
    q.B, q.P, q.M, q.R = ash[0], ash[1], ash[2], bsh[1]
    q.adt, q.bdt, q.ddt, q.condensed = adt, bdt, ddt, condensed
    _byte_strides(a_strides, 3, adt, q.as_, what)
    _byte_strides(b_strides, 3, bdt, q.bs, what)
    _byte_strides(d_strides, 3, ddt, q.ds, what)
    if adt != bdt or adt != ddt:
        raise KernelArgumentError(f"{what}: operands of one dtype expected")
    return 0


def pairwise_distance(d_addr, d_dtype, d_strides, a_addr, a_dtype, a_strides, a_shape, b_addr, b_dtype, b_strides,
                      b_shape, p, condensed):
    """d (B, P, R) = p-norm distances of the rows of a (B, P, M) and b (B, R, M) (cdist), or with
    ``condensed`` the pdist vector of a (1, P, M)'s pairs i < j (b is a). p = 0 counts nonzero
    differences, p = inf takes the max. float32 arithmetic (float64 for float64)."""
    cdef int ddt = check_dtype(d_dtype, "pairwise_distance d_dtype")
    cdef int adt = check_dtype(a_dtype, "pairwise_distance a_dtype")
    cdef int bdt = check_dtype(b_dtype, "pairwise_distance b_dtype")
    cdef Pairs q
    cdef double pv = float(p)
    cdef char* d
    cdef const char* a = NULL
    cdef const char* b = NULL
    _floating(adt, "pairwise_distance")
    if pv < 0 or pv != pv:
        raise KernelArgumentError(f"pairwise_distance: p must be a non-negative number, got {p!r}")
    _pairs_args(&q, a_shape, a_strides, adt, b_shape, b_strides, bdt, d_strides, ddt, bool(condensed),
                "pairwise_distance")
    if q.B * q.P * q.R == 0:
        return
    d = as_ptr(d_addr, "pairwise_distance d_addr")
    if q.M:
        a = as_ptr(a_addr, "pairwise_distance a_addr")
        b = as_ptr(b_addr, "pairwise_distance b_addr")
    with nogil:
        if adt == DT_FLOAT64:
            _pairwise(&q, a, b, d, pv, <double>0)
        else:
            _pairwise(&q, a, b, d, pv, <float>0)


cdef void _pairwise_backward(Pairs* q, char* gx, Py_ssize_t* gs, int gdt, const char* g, const char* dist,
                             const char* a, const char* b, double p, real_t* acc) noexcept nogil:
    # gx[n, i, :] = sum over j of g[n, i, j] * d dist(i, j) / d a[n, i, :]; condensed: both pairs of i
    cdef Py_ssize_t n, i, j, k, idx
    cdef real_t gv, dv, u, w
    for n in range(q.B):
        for i in range(q.P):
            for k in range(q.M):
                acc[k] = 0
            for j in range(q.R):
                if q.condensed:
                    if j == i:
                        continue
                    idx = _pair(q, i, j) if i < j else _pair(q, j, i)
                    load_block(g + idx * q.ds[2], 0, q.ddt, 1, &gv)
                    load_block(dist + idx * q.ds[2], 0, q.ddt, 1, &dv)
                else:
                    load_block(g + n * q.ds[0] + i * q.ds[1] + j * q.ds[2], 0, q.ddt, 1, &gv)
                    load_block(dist + n * q.ds[0] + i * q.ds[1] + j * q.ds[2], 0, q.ddt, 1, &dv)
                for k in range(q.M):
                    load_block(a + n * q.as_[0] + i * q.as_[1] + k * q.as_[2], 0, q.adt, 1, &u)
                    load_block(b + n * q.bs[0] + j * q.bs[1] + k * q.bs[2], 0, q.bdt, 1, &w)
                    acc[k] += gv * _dist_grad(u - w, dv, p)
            store_block(acc, q.M, gdt, gx + n * gs[0] + i * gs[1], gs[2])


def pairwise_distance_backward(gx_addr, gx_dtype, gx_strides, g_addr, g_strides, dist_addr, dist_strides,
                               a_addr, a_dtype, a_strides, a_shape, b_addr, b_strides, b_shape, p, condensed):
    """grad of pairwise_distance with respect to a (B, P, M): grad and dist have the distances'
    layout (and a's dtype); accumulated in float32 (float64), one rounding."""
    cdef int gdt = check_dtype(gx_dtype, "pairwise_distance_backward gx_dtype")
    cdef int adt = check_dtype(a_dtype, "pairwise_distance_backward a_dtype")
    cdef Pairs q
    cdef Py_ssize_t gs[3]
    cdef Py_ssize_t ds2[3]
    cdef double pv = float(p)
    cdef char* gx
    cdef const char* g
    cdef const char* dist
    cdef const char* a
    cdef const char* b
    cdef void* acc
    _floating(adt, "pairwise_distance_backward")
    _floating(gdt, "pairwise_distance_backward")
    if pv < 0 or pv != pv:
        raise KernelArgumentError(f"pairwise_distance_backward: p must be a non-negative number, got {p!r}")
    _pairs_args(&q, a_shape, a_strides, adt, b_shape, b_strides, adt, g_strides, adt, bool(condensed),
                "pairwise_distance_backward")
    _byte_strides(dist_strides, 3, adt, ds2, "pairwise_distance_backward dist_strides")
    if tuple(dist_strides) != tuple(g_strides):
        raise KernelArgumentError("pairwise_distance_backward: grad and dist must share one layout")
    _byte_strides(gx_strides, 3, gdt, gs, "pairwise_distance_backward gx_strides")
    if q.B * q.P * q.M == 0:
        return
    gx = as_ptr(gx_addr, "pairwise_distance_backward gx_addr")
    a = as_ptr(a_addr, "pairwise_distance_backward a_addr")
    if q.R == 0 or (q.condensed and q.P < 2):
        q.R = 0
        g = dist = b = NULL
    else:
        g = as_ptr(g_addr, "pairwise_distance_backward g_addr")
        dist = as_ptr(dist_addr, "pairwise_distance_backward dist_addr")
        b = as_ptr(b_addr, "pairwise_distance_backward b_addr")
    acc = malloc(q.M * (8 if adt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError("pairwise_distance_backward: cannot allocate the accumulator")
    with nogil:
        if adt == DT_FLOAT64:
            _pairwise_backward(&q, gx, gs, gdt, g, dist, a, b, pv, <double*>acc)
        else:
            _pairwise_backward(&q, gx, gs, gdt, g, dist, a, b, pv, <float*>acc)
    free(acc)


# -- fractional max pooling: CPU's pseudo-random intervals from given samples in [0, 1)

cdef inline double _in_dtype(double v, int dt) noexcept nogil:
    # one c10 scalar operation of the sample's dtype: float arithmetic, rounded to that dtype
    if dt == DT_FLOAT64:
        return v
    return round_to(<float>v, dt)


cdef void _intervals(Py_ssize_t* seq, double sample, int dt, Py_ssize_t in_size, Py_ssize_t out_size,
                     Py_ssize_t pool) noexcept nogil:
    """ATen's generate_intervals in the sample's dtype."""
    cdef Py_ssize_t i
    cdef double alpha
    if out_size > 1:
        alpha = _in_dtype(_in_dtype(in_size - pool, dt) / _in_dtype(out_size - 1, dt), dt)
        for i in range(out_size - 1):
            seq[i] = <int>_in_dtype(_in_dtype(i + sample, dt) * alpha, dt) - <int>_in_dtype(sample * alpha, dt)
    if out_size > 0:
        seq[out_size - 1] = in_size - pool


cdef void _fractional3(Vol* v, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                       const char* smp, int sdt, Py_ssize_t* ss, int ndim, Py_ssize_t* pool,
                       Py_ssize_t* seq) noexcept nogil:
    # seq holds OD + OH + OW interval starts; sample j of plane (n, c) drives spatial dim 3 - ndim + j
    cdef Py_ssize_t n, c, od, oh, ow, idx, j
    cdef Py_ssize_t lo[3]
    cdef Py_ssize_t hi[3]
    cdef Py_ssize_t step[3]
    cdef Py_ssize_t* sd = seq
    cdef Py_ssize_t* sh = seq + v.OD
    cdef Py_ssize_t* sw = seq + v.OD + v.OH
    cdef Py_ssize_t ins[3]
    cdef Py_ssize_t outs[3]
    cdef Py_ssize_t* seqs[3]
    cdef double sample, best
    step[0] = step[1] = step[2] = 1
    ins[0], ins[1], ins[2] = v.D, v.H, v.W
    outs[0], outs[1], outs[2] = v.OD, v.OH, v.OW
    seqs[0], seqs[1], seqs[2] = sd, sh, sw
    for n in range(v.N):
        for c in range(v.C):
            for j in range(3):
                if j < 3 - ndim:
                    seqs[j][0] = 0
                    continue
                # 2-d samples are (w, h); 3-d (t, h, w): CPU's orders
                if ndim == 2:
                    load_block(smp + n * ss[0] + c * ss[1] + (1 - (j - 1)) * ss[2], 0, sdt, 1, &sample)
                else:
                    load_block(smp + n * ss[0] + c * ss[1] + j * ss[2], 0, sdt, 1, &sample)
                _intervals(seqs[j], sample, sdt, ins[j], outs[j], pool[j])
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        lo[0], lo[1], lo[2] = sd[od], sh[oh], sw[ow]
                        for j in range(3):
                            hi[j] = lo[j] + pool[j]
                        best = _window_max(v, x, xdt, n, c, lo, hi, step, <double>-INFINITY, &idx)
                        store_block(&best, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
                        ek_st_i64(<char*>_ind_at(ind, is_, n, c, od, oh, ow), idx)


def fractional_max_pool(y_addr, y_dtype, y_strides, y_shape, ind_addr, ind_strides, x_addr, x_dtype, x_strides,
                        x_shape, s_addr, s_dtype, s_strides, ndim, pool):
    """y, indices (N, C, OD, OH, OW) = max over CPU's fractional windows of x (N, C, D, H, W): the
    window starts come from samples (N, C, ndim) exactly as ATen's generate_intervals computes them
    (in the samples' dtype); ``pool`` = (pD, pH, pW), 1 for padded dims. Floating dtypes."""
    cdef int ydt = check_dtype(y_dtype, "fractional_max_pool y_dtype")
    cdef int xdt = check_dtype(x_dtype, "fractional_max_pool x_dtype")
    cdef int sdt = check_dtype(s_dtype, "fractional_max_pool s_dtype")
    cdef Vol v
    cdef Py_ssize_t is_[5]
    cdef Py_ssize_t ss[3]
    cdef Py_ssize_t pk[3]
    cdef Py_ssize_t* seq
    cdef char* y
    cdef char* ind
    cdef const char* x
    cdef const char* smp
    cdef int nd = ndim, i
    _floating(xdt, "fractional_max_pool")
    _floating(sdt, "fractional_max_pool")
    if ydt != xdt or nd not in (2, 3):
        raise KernelArgumentError("fractional_max_pool: y must have x's dtype; ndim must be 2 or 3")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "fractional_max_pool")
    _byte_strides(ind_strides, 5, DT_INT64, is_, "fractional_max_pool ind_strides")
    _byte_strides(s_strides, 3, sdt, ss, "fractional_max_pool s_strides")
    _shape(pool, 3, pk, "fractional_max_pool pool")
    ins = (v.D, v.H, v.W)
    outs = (v.OD, v.OH, v.OW)
    for i in range(3):
        if pk[i] < 1 or outs[i] + pk[i] - 1 > ins[i] or (i < 3 - nd and (pk[i] != 1 or ins[i] != 1)):
            raise KernelArgumentError(f"fractional_max_pool: pool {pk[i]} and output {outs[i]} do not fit the "
                                      f"input extent {ins[i]}")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    y = as_ptr(y_addr, "fractional_max_pool y_addr")
    ind = as_ptr(ind_addr, "fractional_max_pool ind_addr")
    x = as_ptr(x_addr, "fractional_max_pool x_addr")
    smp = as_ptr(s_addr, "fractional_max_pool s_addr")
    seq = <Py_ssize_t*>malloc((v.OD + v.OH + v.OW) * sizeof(Py_ssize_t))
    if seq == NULL:
        raise MemoryError("fractional_max_pool: cannot allocate the interval tables")
    with nogil:
        _fractional3(&v, x, xdt, y, ydt, ind, is_, smp, sdt, ss, nd, pk, seq)
    free(seq)


# -- embedding bags: sum / mean / max of weight rows over bags of indices

cdef void _embedding_bag(Py_ssize_t B, Py_ssize_t D, Py_ssize_t V, char* out, int odt, Py_ssize_t* os,
                         const char* w, Py_ssize_t* ws, const char* idx, Py_ssize_t is_, const char* bounds,
                         Py_ssize_t bs, const char* psw, int pdt, Py_ssize_t ps, int mode, int64_t padding,
                         char* o2b, Py_ssize_t o2bs, char* bsz, Py_ssize_t bss, char* mx, Py_ssize_t* mxs,
                         bint count_sum_bags, real_t* acc, int64_t* arg) noexcept nogil:
    cdef Py_ssize_t b, i, d, lo, hi, count
    cdef int64_t r
    cdef real_t scale, val
    cdef bint first
    for b in range(B):
        lo = ek_ld_i64(bounds + b * bs)
        hi = ek_ld_i64(bounds + (b + 1) * bs)
        for d in range(D):
            acc[d] = 0
            arg[d] = 0
        count = 0
        first = True
        for i in range(lo, hi):
            r = ek_ld_i64(idx + i * is_)
            if o2b != NULL:
                ek_st_i64(o2b + i * o2bs, b)
            if r == padding:
                continue
            count += 1
            scale = 1
            if psw != NULL:
                load_block(psw + i * ps, 0, pdt, 1, &scale)
            for d in range(D):
                load_block(w + r * ws[0] + d * ws[1], 0, odt, 1, &val)
                if mode == 2:
                    if first or val > acc[d]:
                        acc[d] = val
                        arg[d] = r
                elif psw != NULL:
                    acc[d] = acc[d] + val * scale
                else:
                    acc[d] = acc[d] + val
            first = False
        if mode == 1 and count:
            for d in range(D):
                acc[d] = acc[d] / <real_t>count
        store_block(acc, D, odt, out + b * os[0], os[1])
        if mode == 0 and not count_sum_bags:
            count = 0
        ek_st_i64(bsz + b * bss, count)
        if mode == 2:
            for d in range(D):
                ek_st_i64(mx + b * mxs[0] + d * mxs[1], arg[d])
        else:
            ek_st_i64(mx + b * mxs[0], count)


def embedding_bag(out_addr, out_dtype, out_strides, out_shape, w_addr, w_strides, w_shape, idx_addr, idx_stride,
                  n_indices, bounds_addr, bounds_stride, psw_addr, psw_dtype, psw_stride, mode, padding_idx,
                  o2b_addr, o2b_stride, bsz_addr, bsz_stride, mx_addr, mx_strides, count_sum_bags):
    """out (B, D) = per bag b (indices bounds[b] .. bounds[b + 1]) the sum (mode 0, optionally
    weighted by per-sample weights), mean (1) or max (2) of weight (V, D) rows; rows equal to
    padding_idx are skipped. Also CPU's auxiliary outputs: offset2bag (o2b_addr 0 = none),
    bag_size (0 for sum bags unless count_sum_bags) and max_indices ((B, D) argmax rows for max,
    else (B,) = bag_size). int64 indices, checked in range by the host. Accumulates in float32
    (float64 for float64)."""
    cdef int odt = check_dtype(out_dtype, "embedding_bag out_dtype")
    cdef int pdt = check_dtype(psw_dtype, "embedding_bag psw_dtype")
    cdef Py_ssize_t B = out_shape[0], D = out_shape[1], V = w_shape[0], isz = itemsize_of(odt)
    cdef Py_ssize_t os[2]
    cdef Py_ssize_t ws[2]
    cdef Py_ssize_t mxs[2]
    cdef int md = mode
    cdef int64_t pad = padding_idx
    cdef char* out
    cdef const char* w = NULL
    cdef const char* idx = NULL
    cdef const char* bounds
    cdef const char* psw = NULL
    cdef char* o2b = NULL
    cdef char* bsz
    cdef char* mx
    cdef void* acc
    cdef int64_t* arg
    cdef Py_ssize_t i_s = idx_stride * 8, b_s = bounds_stride * 8, p_s = psw_stride * itemsize_of(pdt)
    cdef Py_ssize_t o_s = o2b_stride * 8, z_s = bsz_stride * 8
    cdef bint csb = bool(count_sum_bags)
    _floating(odt, "embedding_bag")
    if md not in (0, 1, 2) or w_shape[1] != D:
        raise KernelArgumentError(f"embedding_bag: bad mode {mode!r} or shapes {tuple(out_shape)} {tuple(w_shape)}")
    os[0], os[1] = out_strides[0] * isz, out_strides[1] * isz
    ws[0], ws[1] = w_strides[0] * isz, w_strides[1] * isz
    mxs[0], mxs[1] = mx_strides[0] * 8, (mx_strides[1] * 8 if len(mx_strides) > 1 else 0)
    if B == 0:
        return
    out = as_ptr(out_addr, "embedding_bag out_addr")
    bounds = as_ptr(bounds_addr, "embedding_bag bounds_addr")
    bsz = as_ptr(bsz_addr, "embedding_bag bsz_addr")
    mx = as_ptr(mx_addr, "embedding_bag mx_addr")
    if n_indices:
        idx = as_ptr(idx_addr, "embedding_bag idx_addr")
        if V * D:
            w = as_ptr(w_addr, "embedding_bag w_addr")
        if psw_addr:
            psw = as_ptr(psw_addr, "embedding_bag psw_addr")
        if o2b_addr:
            o2b = as_ptr(o2b_addr, "embedding_bag o2b_addr")
    acc = malloc((D if D else 1) * 8)
    arg = <int64_t*>malloc((D if D else 1) * 8)
    if acc == NULL or arg == NULL:
        free(acc)
        free(arg)
        raise MemoryError("embedding_bag: cannot allocate the accumulators")
    with nogil:
        if odt == DT_FLOAT64:
            _embedding_bag(B, D, V, out, odt, os, w, ws, idx, i_s, bounds, b_s, psw, pdt,
                           p_s, md, pad, o2b, o_s, bsz, z_s, mx, mxs,
                           csb, <double*>acc, arg)
        else:
            _embedding_bag(B, D, V, out, odt, os, w, ws, idx, i_s, bounds, b_s, psw, pdt,
                           p_s, md, pad, o2b, o_s, bsz, z_s, mx, mxs,
                           csb, <float*>acc, arg)
    free(acc)
    free(arg)
