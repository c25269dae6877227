# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Resampling kernels of the device's vector engine: upsampling (nearest, nearest-exact, bilinear,
separable linear/cubic/antialiased filters) and its backward, and grid sampling.

* 2-d upsampling over (N, C, H, W): nearest (CPU's float index arithmetic, so the chosen source
  pixels are CPU's) and bilinear (align_corners or half-pixel), forward and backward.
* N-d interpolation over (N, C, D, H, W) views (1-d and 2-d operands padded with unit dims):
  nearest / nearest-exact and the separable filters, forward and backward.
* grid sampling (forward): bilinear / nearest over 2-d or 3-d inputs, bicubic over 2-d.

Numerics: float16/bfloat16 compute in float32, float32 in float32, float64 in float64, one
rounding to the output dtype; backward passes accumulate one plane in that type.
Left out: tiling and timing (library.py holds the cost models), grid_sample's backward.
"""

from libc.stdlib cimport calloc, malloc, free
from libc.math cimport fabs, floor, ceil, floorf, INFINITY
from libc.stdint cimport INT64_MIN

include "_common.pxi"
include "_spatial.pxi"


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
