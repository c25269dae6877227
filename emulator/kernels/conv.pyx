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
    """Window columns ow in [lo, hi) read an image column iw = ow * sw + off inside [0, W)."""
    cdef Py_ssize_t o = kw * g.dw - g.pw
    cdef Py_ssize_t a = _floordiv(-o + g.sw - 1, g.sw)        # ceil(-o / sw)
    cdef Py_ssize_t b = _floordiv(g.W - 1 - o, g.sw) + 1
    if a < 0:
        a = 0
    if b > g.oW:
        b = g.oW
    if b < a:
        b = a
    lo[0], hi[0], off[0] = a, b, o


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
    cdef bint fast = (cdt == xdt and (cdt == DT_FLOAT32 or cdt == DT_FLOAT64) and cs[6] == isz
                      and g.sw * xs[3] == isz)
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
                            if fast and lo == 0 and hi == g.oW:
                                memcpy(row, src + off * isz, g.oW * isz)    # a whole row, as is
                                continue
                            if fast:                  # padded row: zeros, the copied run, zeros
                                memset(row, 0, lo * isz)
                                memcpy(row + lo * isz, src + (lo + off) * isz, (hi - lo) * isz)
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
    with nogil:
        _im2col(&g, col, cdt, cs, x, xdt, xs)


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
                            load_block(plane + ih * p.xs[2] + iw * p.xs[3], 0, xdt, 1, &val)
                            if cmp_t is double:
                                if val > best or val != val:
                                    best = val
                                    idx = ih * p.W + iw
                            else:
                                if val > best:
                                    best = val
                                    idx = ih * p.W + iw
                            iw += dw
                        ih += dh
                    store_block(&best, 1, ydt, y + n * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3], 0)
                    ek_st_i64(ind + n * is_[0] + c * is_[1] + oh * is_[2] + ow * is_[3], idx)


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
    with nogil:
        if is_floating(xdt):
            _max_pool(&p, x, xdt, y, ydt, ind, is_, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7],
                      <double>-INFINITY)
        else:
            _max_pool(&p, x, xdt, y, ydt, ind, is_, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7],
                      <int64_t>INT64_MIN)


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
    d = _ints((divisor,), 1, what)[0]
    if d < 0:
        raise KernelArgumentError(f"{what}: invalid divisor {divisor!r}")
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
