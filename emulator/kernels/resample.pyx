# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Resampling kernels of the device's vector engine: upsampling (nearest, nearest-exact, bilinear,
separable linear/cubic/antialiased filters) and its backward, and grid sampling.

* upsampling over (N, C, D, H, W) views, one kernel per family for 1-3 spatial dims (1-d and 2-d
  operands padded with unit dims): nearest / nearest-exact (CPU's float index arithmetic, so the
  chosen source elements are CPU's; any dtype) and separable (linear, cubic, antialiased linear /
  cubic; align_corners or half-pixel), forward and backward.
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
# Upsampling over (N, C, D, H, W) views, one kernel per family for every rank: the host pads 1-d
# and 2-d operands with leading unit spatial dims (as convolution's im2col does). Backward passes
# describe grad_input as the input side and grad_output as the output side, and accumulate one
# plane in float32 (float64) in grad_output's order, rounded once.

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


cdef inline Py_ssize_t _nearest_exact_idx(Py_ssize_t o, Py_ssize_t in_size, float scale) noexcept nogil:
    # ATen: floorf((dst_index + 0.5) * scale), the product in double, floored as float
    cdef Py_ssize_t i = <Py_ssize_t>floorf(<float>((o + 0.5) * <double>scale))
    return i if i < in_size - 1 else in_size - 1


cdef int _nearest_tables(Py_ssize_t** t, Vol* v, object scales, bint exact) except -1:
    """Per spatial dim, the source (input-side) index of every output index (CPU's float arithmetic)."""
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


cdef inline void _gather(const char* src, const Py_ssize_t* off, Py_ssize_t n, int dt, cmp_t* out) noexcept nogil:
    """out[i] = the element at src + off[i] bytes, converted as load_block does."""
    cdef Py_ssize_t i
    if cmp_t is double and dt == DT_FLOAT32:
        for i in range(n):
            out[i] = <double>ek_ld_f32(src + off[i])
    elif cmp_t is double and dt == DT_BFLOAT16:
        for i in range(n):
            out[i] = <double>ek_bf16_to_f32(ek_ld_u16(src + off[i]))
    elif cmp_t is double and dt == DT_FLOAT64:
        for i in range(n):
            out[i] = ek_ld_f64(src + off[i])
    else:
        for i in range(n):
            load_block(src + off[i], 0, dt, 1, &out[i])


cdef void _nearest(Vol* v, const char* x, int xdt, char* y, int ydt, Py_ssize_t** t, Py_ssize_t* woff,
                   cmp_t* row) noexcept nogil:
    # one output row per (od, oh): a gather of its source row, converted once and stored as a block;
    # consecutive output rows reading the same source row store the same values again
    cdef Py_ssize_t n, c, od, oh
    cdef const char* src
    cdef const char* last
    for n in range(v.N):
        for c in range(v.C):
            last = NULL
            for od in range(v.OD):
                for oh in range(v.OH):
                    src = _xat(v, x, n, c, t[0][od], t[1][oh], 0)
                    if src != last:
                        _gather(src, woff, v.OW, xdt, row)
                        last = src
                    store_block(row, v.OW, ydt, _yat(v, y, n, c, od, oh, 0), v.ys[4])


def upsample_nearest(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, exact, scales):
    """y (N, C, OD, OH, OW) = x (N, C, D, H, W) at CPU's nearest (or nearest-exact) source elements;
    ``scales`` (d, h, w), <= 0 meaning none given. Any dtype (an exact copy)."""
    cdef int ydt = check_dtype(y_dtype, "upsample_nearest y_dtype")
    cdef int xdt = check_dtype(x_dtype, "upsample_nearest x_dtype")
    cdef Vol v
    cdef Py_ssize_t* t[3]
    cdef Py_ssize_t* woff = NULL
    cdef void* row = NULL
    cdef Py_ssize_t o
    cdef char* y
    cdef const char* x
    t[0] = t[1] = t[2] = NULL
    if ydt != xdt:
        raise KernelArgumentError("upsample_nearest: the output dtype must equal the input dtype")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "upsample_nearest")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("upsample_nearest: empty input plane")
    y = as_ptr(y_addr, "upsample_nearest y_addr")
    x = as_ptr(x_addr, "upsample_nearest x_addr")
    try:
        _nearest_tables(t, &v, scales, bool(exact))
        woff = <Py_ssize_t*>malloc(v.OW * sizeof(Py_ssize_t))
        row = malloc(v.OW * 8)
        if woff == NULL or row == NULL:
            raise MemoryError("upsample_nearest: cannot allocate the row buffers")
        for o in range(v.OW):
            woff[o] = t[2][o] * v.xs[4]
        with nogil:
            if is_floating(xdt):
                _nearest(&v, x, xdt, y, ydt, t, woff, <double*>row)
            else:
                _nearest(&v, x, xdt, y, ydt, t, woff, <int64_t*>row)
    finally:
        free(t[0])
        free(t[1])
        free(t[2])
        free(woff)
        free(row)


cdef void _nearest_backward(Vol* v, acc_t* acc, acc_t* g, char* gi, int gdt, const char* go, int godt,
                            Py_ssize_t** t) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, i, plane = v.D * v.H * v.W
    cdef acc_t* arow
    cdef Py_ssize_t* wi = t[2]
    for n in range(v.N):
        for c in range(v.C):
            for i in range(plane):
                acc[i] = 0
            for od in range(v.OD):
                for oh in range(v.OH):
                    load_block(_yat(v, <char*>go, n, c, od, oh, 0), v.ys[4], godt, v.OW, g)
                    arow = acc + (t[0][od] * v.H + t[1][oh]) * v.W
                    for ow in range(v.OW):
                        arow[wi[ow]] += g[ow]
            _store_plane(v, acc, gi, gdt, n, c)


def upsample_nearest_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                              go_shape, exact, scales):
    """The adjoint of upsample_nearest: grad_input (N, C, D, H, W) sums the grad_output elements that
    read each element."""
    cdef int gdt = check_dtype(gi_dtype, "upsample_nearest_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "upsample_nearest_backward go_dtype")
    cdef Vol v
    cdef Py_ssize_t* t[3]
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc = NULL
    cdef void* g = NULL
    t[0] = t[1] = t[2] = NULL
    _floating(gdt, "upsample_nearest_backward")
    _floating(godt, "upsample_nearest_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "upsample_nearest_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    gi = as_ptr(gi_addr, "upsample_nearest_backward gi_addr")
    if v.OD * v.OH * v.OW:
        go = as_ptr(go_addr, "upsample_nearest_backward go_addr")
    else:
        v.OD = v.OH = v.OW = 0
    try:
        _nearest_tables(t, &v, scales, bool(exact))
        acc = _plane_acc(&v, gdt, "upsample_nearest_backward")
        g = malloc((v.OW if v.OW else 1) * 8)
        if g == NULL:
            raise MemoryError("upsample_nearest_backward: cannot allocate the row buffer")
        with nogil:
            if gdt == DT_FLOAT64:
                _nearest_backward(&v, <double*>acc, <double*>g, gi, gdt, go, godt, t)
            else:
                _nearest_backward(&v, <float*>acc, <float*>g, gi, gdt, go, godt, t)
    finally:
        free(t[0])
        free(t[1])
        free(t[2])
        free(acc)
        free(g)


# Separable filters: per spatial dim and output index, ``taps`` source indices and weights.
# Modes: 0 linear (2 taps), 1 cubic (4 taps, A = -0.75), 2 antialiased linear, 3 antialiased
# cubic (A = -0.5), the last two with ATen's support-scaled, normalised filters. A padded dim
# has one tap of weight 1, which the passes skip (x * 1 == x).

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


cdef inline double _filter_scale(Py_ssize_t in_size, Py_ssize_t out_size, bint align, double given) noexcept nogil:
    # area_pixel_compute_scale: align_corners (in - 1) / (out - 1), 0 for one output; else
    # compute_scales_value (1 / given, or in / out), whatever the output extent
    if align:
        return (<double>(in_size - 1) / (out_size - 1)) if out_size > 1 else 0.0
    return (1.0 / given) if given > 0 else <double>in_size / out_size


cdef void _fill_taps(Taps* t, Py_ssize_t in_size, Py_ssize_t out_size, int mode, bint align, double given,
                     bint index_in_double, real_t kind) noexcept nogil:
    cdef Py_ssize_t o, j, i0, xmin, xsize, xlast
    cdef real_t scale, real, lam, A = -0.75, support, center, invscale, total, w
    if align:
        scale = (<real_t>(in_size - 1) / <real_t>(out_size - 1)) if out_size > 1 else 0
    else:
        scale = <real_t>(1.0 / given) if given > 0 else <real_t>in_size / <real_t>out_size
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
            # taps past the window (weight 0) read a valid element: the window's first, or the last
            # element when a given scale puts the window past the input (then xsize <= 0)
            xlast = xmin if xmin < in_size - 1 else in_size - 1
            total = 0
            for j in range(t.taps):
                t.idx[o * t.taps + j] = xlast if j >= xsize else xmin + j
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
            if index_in_double:
                real = <real_t>(scale * (o + 0.5) - 0.5)
            else:
                real = scale * (o + <real_t>0.5) - <real_t>0.5
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
    """Tables for the last ``ndim`` spatial dims; the leading (padded) dims get one tap of weight 1.

    The half-pixel source index of a float32 launch: 2-d linear computes it in float32 (CPU's
    area_pixel_compute_source_index<float>, the former upsample_bilinear2d kernel); 1-d / 3-d
    linear and cubic compute it in double and round once (the former separable kernel). Both are
    kept bit for bit (issue 23); float64 launches compute in double either way."""
    cdef Py_ssize_t ins[3]
    cdef Py_ssize_t outs[3]
    cdef Py_ssize_t o, taps
    cdef int i
    cdef double support, s
    cdef bint index_in_double = not (mode == FILTER_LINEAR and ndim == 2)
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
            s = _filter_scale(ins[i], outs[i], align, sc[i])
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
            _fill_taps(&t[i], ins[i], outs[i], mode, align, <double>sc[i], index_in_double, <float>0)
        else:
            _fill_taps(&t[i], ins[i], outs[i], mode, align, <double>sc[i], index_in_double, <double>0)
    return 0


cdef void _free_taps(Taps* t) noexcept:
    cdef int i
    for i in range(3):
        free(t[i].idx)
        free(t[i].wt)


cdef struct Passes:
    # the forward's scratch (compute type), one plane at a time
    void* row              # [W]: one source row
    void* t1               # [D * H * OW]: rows filtered along W (only the rows some output reads)
    void* t2               # [D * OH * OW]: then along H (t1 when H is padded)
    void* t3               # [OD * OH * OW]: then along D (t2 when D is padded)
    char* need_d           # [D]: a source d some output reads
    char* need_h           # [H]


cdef inline void _combine(acc_t* dst, const acc_t* src, Py_ssize_t stride, Py_ssize_t n, const Py_ssize_t* idx,
                          const double* wt, Py_ssize_t taps) noexcept nogil:
    """dst[i] = sum over j of src[idx[j] * stride + i] * wt[j], from the first tap on (one output
    index of the H or D pass, for n consecutive elements)."""
    cdef Py_ssize_t i, j
    cdef const acc_t* s = src + idx[0] * stride
    cdef acc_t w = <acc_t>wt[0]
    for i in range(n):
        dst[i] = s[i] * w
    for j in range(1, taps):
        s = src + idx[j] * stride
        w = <acc_t>wt[j]
        for i in range(n):
            dst[i] = dst[i] + s[i] * w


cdef void _separable(Vol* v, const char* x, int xdt, char* y, int ydt, Taps* t, Passes* q,
                     acc_t zero) noexcept nogil:
    # Per output element: s = sum_a (sum_b (sum_e x[d_a, h_b, w_e] * ww_e) * hw_b) * dw_a, every
    # sum from its first term, in the compute type: computed as three passes (W, H, D) over the
    # plane, each element's operations in the same order.
    cdef Py_ssize_t n, c, d, h, od, oh, ow, e, tw = t[2].taps
    cdef acc_t* row = <acc_t*>q.row
    cdef acc_t* t1 = <acc_t*>q.t1
    cdef acc_t* t2 = <acc_t*>q.t2
    cdef acc_t* t3 = <acc_t*>q.t3
    cdef acc_t* out
    cdef acc_t s
    cdef Py_ssize_t* wi
    cdef double* ww
    for n in range(v.N):
        for c in range(v.C):
            for d in range(v.D):
                if not q.need_d[d]:
                    continue
                for h in range(v.H):
                    if not q.need_h[h]:
                        continue
                    load_block(_xat(v, x, n, c, d, h, 0), v.xs[4], xdt, v.W, row)
                    out = t1 + (d * v.H + h) * v.OW
                    if tw == 2:
                        for ow in range(v.OW):
                            wi = t[2].idx + ow * 2
                            ww = t[2].wt + ow * 2
                            out[ow] = row[wi[0]] * <acc_t>ww[0] + row[wi[1]] * <acc_t>ww[1]
                    else:
                        for ow in range(v.OW):
                            wi = t[2].idx + ow * tw
                            ww = t[2].wt + ow * tw
                            s = row[wi[0]] * <acc_t>ww[0]
                            for e in range(1, tw):
                                s = s + row[wi[e]] * <acc_t>ww[e]
                            out[ow] = s
            if t[1].taps > 1:
                for d in range(v.D):
                    if q.need_d[d]:
                        for oh in range(v.OH):
                            _combine(t2 + (d * v.OH + oh) * v.OW, t1 + d * v.H * v.OW, v.OW, v.OW,
                                     t[1].idx + oh * t[1].taps, t[1].wt + oh * t[1].taps, t[1].taps)
            if t[0].taps > 1:
                for od in range(v.OD):
                    _combine(t3 + od * v.OH * v.OW, t2, v.OH * v.OW, v.OH * v.OW,
                             t[0].idx + od * t[0].taps, t[0].wt + od * t[0].taps, t[0].taps)
            for od in range(v.OD):
                for oh in range(v.OH):
                    store_block(t3 + (od * v.OH + oh) * v.OW, v.OW, ydt, _yat(v, y, n, c, od, oh, 0), v.ys[4])


cdef void _free_passes(Passes* q) noexcept:
    free(q.row)
    free(q.t1)
    if q.t2 != q.t1:
        free(q.t2)
    if q.t3 != q.t2:
        free(q.t3)
    free(q.need_d)
    free(q.need_h)


cdef int _passes(Passes* q, Vol* v, Taps* t, bint single) except -1:
    cdef Py_ssize_t item = 4 if single else 8, o, j
    q.row = malloc((v.W if v.W else 1) * item)
    q.t1 = malloc((v.D * v.H * v.OW if v.D * v.H * v.OW else 1) * item)
    q.t2 = malloc((v.D * v.OH * v.OW if v.D * v.OH * v.OW else 1) * item) if t[1].taps > 1 else q.t1
    q.t3 = malloc((v.OD * v.OH * v.OW if v.OD * v.OH * v.OW else 1) * item) if t[0].taps > 1 else q.t2
    q.need_d = <char*>calloc(v.D if v.D else 1, 1)
    q.need_h = <char*>calloc(v.H if v.H else 1, 1)
    if q.row == NULL or q.t1 == NULL or q.t2 == NULL or q.t3 == NULL or q.need_d == NULL or q.need_h == NULL:
        raise MemoryError("upsample_separable: cannot allocate the pass buffers")
    for o in range(v.OD * t[0].taps):
        q.need_d[t[0].idx[o]] = 1
    for o in range(v.OH * t[1].taps):
        q.need_h[t[1].idx[o]] = 1
    return 0


def upsample_separable(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, ndim, mode,
                       align_corners, scales):
    """y (N, C, OD, OH, OW) = separable interpolation of x (N, C, D, H, W) over its last ``ndim``
    spatial dims: linear / cubic (CPU's source-index rules, align_corners, given scales) or
    antialiased linear / cubic. Weights in float32 (float64 for float64), as CPU's opmath."""
    cdef int ydt = check_dtype(y_dtype, "upsample_separable y_dtype")
    cdef int xdt = check_dtype(x_dtype, "upsample_separable x_dtype")
    cdef Vol v
    cdef Taps t[3]
    cdef Passes q
    cdef char* y
    cdef const char* x
    cdef bint single = ydt != DT_FLOAT64
    memset(t, 0, sizeof(t))
    memset(&q, 0, sizeof(q))
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
        _passes(&q, &v, t, single)
        with nogil:
            if single:
                _separable(&v, x, xdt, y, ydt, t, &q, <float>0)
            else:
                _separable(&v, x, xdt, y, ydt, t, &q, <double>0)
    finally:
        _free_taps(t)
        _free_passes(&q)


cdef void _separable_backward(Vol* v, acc_t* acc, acc_t* g, acc_t* ghs, acc_t** rows, char* gi, int gdt,
                              const char* go, int godt, Taps* t) noexcept nogil:
    # grad_output's elements in order, each scattered to its taps in (d, h, w) tap order
    cdef Py_ssize_t n, c, od, oh, ow, a, b, e, k, i, plane = v.D * v.H * v.W
    cdef Py_ssize_t td = t[0].taps, th = t[1].taps, tw = t[2].taps, tk = t[0].taps * t[1].taps
    cdef Py_ssize_t* di
    cdef Py_ssize_t* hi
    cdef Py_ssize_t* wi
    cdef double* dw
    cdef double* hw
    cdef double* ww
    cdef Py_ssize_t i0, i1
    cdef acc_t gv, gh, gh0, gh1, w0, w1
    cdef acc_t* r
    cdef acc_t* r0
    cdef acc_t* r1
    for n in range(v.N):
        for c in range(v.C):
            for i in range(plane):
                acc[i] = 0
            for od in range(v.OD):
                di = t[0].idx + od * td
                dw = t[0].wt + od * td
                for oh in range(v.OH):
                    hi = t[1].idx + oh * th
                    hw = t[1].wt + oh * th
                    for a in range(td):
                        for b in range(th):
                            rows[a * th + b] = acc + (di[a] * v.H + hi[b]) * v.W
                            ghs[a * th + b] = <acc_t>dw[a] * <acc_t>hw[b]
                    load_block(_yat(v, <char*>go, n, c, od, oh, 0), v.ys[4], godt, v.OW, g)
                    if tw == 2 and tk == 2:
                        # 2-d linear, the former bilinear2d kernel's four statements
                        r0, r1, gh0, gh1 = rows[0], rows[1], ghs[0], ghs[1]
                        for ow in range(v.OW):
                            i0, i1 = t[2].idx[ow * 2], t[2].idx[ow * 2 + 1]
                            w0, w1 = <acc_t>t[2].wt[ow * 2], <acc_t>t[2].wt[ow * 2 + 1]
                            gv = g[ow]
                            r0[i0] += gh0 * w0 * gv
                            r0[i1] += gh0 * w1 * gv
                            r1[i0] += gh1 * w0 * gv
                            r1[i1] += gh1 * w1 * gv
                        continue
                    for ow in range(v.OW):
                        wi = t[2].idx + ow * tw
                        ww = t[2].wt + ow * tw
                        gv = g[ow]
                        if tw == 2:
                            i0, i1 = wi[0], wi[1]
                            w0, w1 = <acc_t>ww[0], <acc_t>ww[1]
                            for k in range(tk):
                                r = rows[k]
                                gh = ghs[k]
                                r[i0] += gh * w0 * gv
                                r[i1] += gh * w1 * gv
                            continue
                        for k in range(tk):
                            r = rows[k]
                            gh = ghs[k]
                            for e in range(tw):
                                r[wi[e]] += gh * <acc_t>ww[e] * gv
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
    cdef void* g = NULL
    cdef void* ghs = NULL
    cdef void* rows = NULL
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
    else:
        v.OD = v.OH = v.OW = 0
    try:
        _tap_tables(t, &v, ndim, mode, bool(align_corners), scales, single)
        acc = _plane_acc(&v, gdt, "upsample_separable_backward")
        g = malloc((v.OW if v.OW else 1) * 8)
        ghs = malloc(t[0].taps * t[1].taps * 8)
        rows = malloc(t[0].taps * t[1].taps * sizeof(void*))
        if g == NULL or ghs == NULL or rows == NULL:
            raise MemoryError("upsample_separable_backward: cannot allocate the row buffers")
        with nogil:
            if single:
                _separable_backward(&v, <float*>acc, <float*>g, <float*>ghs, <float**>rows, gi, gdt, go, godt, t)
            else:
                _separable_backward(&v, <double*>acc, <double*>g, <double*>ghs, <double**>rows, gi, gdt, go,
                                    godt, t)
    finally:
        _free_taps(t)
        free(acc)
        free(g)
        free(ghs)
        free(rows)


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
