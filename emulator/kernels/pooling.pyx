# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Pooling kernels of the device's vector engine: max (with indices), average, adaptive average /
max, fractional max pooling, max unpooling and their backward passes, one kernel per family for
1-d, 2-d and 3-d pooling.

Every operand is a 5-d (N, C, D, H, W) view of any strides: the host pads 1-d and 2-d operands
with leading unit spatial dims, so ``max_pool``, ``avg_pool`` (+ ``_backward``),
``adaptive_avg_pool`` (+ ``_backward``), ``adaptive_max_pool``, ``fractional_max_pool``,
``pool_index_backward`` (the scatter-add backward of every indexed max pooling) and
``max_unpool`` serve every rank. Plane indices are flat d * H * W + h * W + w offsets, CPU's
1-d/2-d indices when the padded extents are 1. Max pooling propagates NaN (the last NaN's index
wins, as CPU's kernel); average pooling follows CPU's count_include_pad / ceil_mode /
divisor_override rules; adaptive windows are CPU's.

Numerics: float16/bfloat16 compute in float32, float32 in float32, float64 in float64, one
rounding to the output dtype; backward passes accumulate one plane in that type. Max pooling
also runs on integers (exact int64 compares).
Left out: tiling and timing (library.py holds the cost models); the random samples of
fractional pooling are an input (drawn by the host).
"""

from libc.stdlib cimport calloc, malloc, free
from libc.math cimport fabs, floor, ceil, floorf, INFINITY
from libc.stdint cimport INT64_MIN

include "_common.pxi"
include "_pool.pxi"
include "_spatial.pxi"


# Large max-pool launches run in two halves (of the batch, or of the channels for one sample) on
# this thread and the pool's helper (_pool.pxi), when the output does not overlap the input: each
# half computes its own part of the output exactly as the whole would.
cdef enum:
    _SPLIT_ELEMENTS = 1 << 16

include "_split.pxi"


# ---------------------------------------------------------------------------------------------
# Max pooling with indices over 1-3 spatial dims: every operand is a 5-d (N, C, D, H, W) view (the
# host pads 1-d and 2-d operands with leading unit spatial dims), the window is 12 ints: kernel,
# stride, padding, dilation, each (d, h, w). Indices are flat d * H * W + h * W + w plane offsets
# (CPU's 1-d/2-d indices when the padded extents are 1). NaN propagates and the last NaN's index
# wins, as CPU's kernel; a window that reads nothing beats no value and keeps its first tap.

cdef inline void _dilated(Py_ssize_t o, Py_ssize_t k, Py_ssize_t s, Py_ssize_t p, Py_ssize_t d, Py_ssize_t size,
                          Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """The taps [lo, hi) (step d) of output index o's dilated window, lo moved to its first tap inside."""
    lo[0] = o * s - p
    hi[0] = lo[0] + (k - 1) * d + 1
    if hi[0] > size:
        hi[0] = size
    while lo[0] < 0:
        lo[0] += d


cdef void _max_pool(Vol* v, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                    Py_ssize_t* k, cmp_t lowest) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, d0, d1, h0, h1, w0, w1, id_, ih, iw, idx
    cdef const char* plane
    cdef const char* row
    cdef cmp_t val, best
    cdef bint take
    for n in range(v.N):
        for c in range(v.C):
            plane = x + n * v.xs[0] + c * v.xs[1]
            for od in range(v.OD):
                _dilated(od, k[0], k[3], k[6], k[9], v.D, &d0, &d1)
                for oh in range(v.OH):
                    _dilated(oh, k[1], k[4], k[7], k[10], v.H, &h0, &h1)
                    for ow in range(v.OW):
                        _dilated(ow, k[2], k[5], k[8], k[11], v.W, &w0, &w1)
                        best = lowest
                        idx = (d0 * v.H + h0) * v.W + w0
                        id_ = d0
                        while id_ < d1:
                            ih = h0
                            while ih < h1:
                                row = plane + id_ * v.xs[2] + ih * v.xs[3]
                                iw = w0
                                while iw < w1:
                                    if cmp_t is double and xdt == DT_FLOAT32:
                                        val = (<const float*>(row + iw * v.xs[4]))[0]
                                    else:
                                        load_block(row + iw * v.xs[4], 0, xdt, 1, &val)
                                    # Selects, not branches (the comparison of data mispredicts often).
                                    if cmp_t is double:
                                        take = (val > best) | (val != val)
                                    else:
                                        take = val > best
                                    best = val if take else best
                                    idx = (id_ * v.H + ih) * v.W + iw if take else idx
                                    iw += k[11]
                                ih += k[10]
                            id_ += k[9]
                        store_block(&best, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
                        ek_st_i64(<char*>_ind_at(ind, is_, n, c, od, oh, ow), idx)


ctypedef struct _PoolJob:
    Vol v
    const char* x
    char* y
    char* ind
    int xdt, ydt
    Py_ssize_t is_[5]
    Py_ssize_t k[12]


cdef void _pool_job(void* arg) noexcept nogil:
    cdef _PoolJob* j = <_PoolJob*>arg
    if is_floating(j.xdt):
        _max_pool(&j.v, j.x, j.xdt, j.y, j.ydt, j.ind, j.is_, j.k, <double>-INFINITY)
    else:
        _max_pool(&j.v, j.x, j.xdt, j.y, j.ydt, j.ind, j.is_, j.k, <int64_t>INT64_MIN)


cdef void _max_pool_run(Vol* v, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                        Py_ssize_t* k, bint split) noexcept nogil:
    """One pass, or two halves of the batch (of the channels for one sample) on two threads."""
    cdef _PoolJob jobs[2]
    cdef Py_ssize_t xext[5]
    cdef Py_ssize_t yext[5]
    cdef Py_ssize_t half
    cdef int h, d, dim
    xext[0], xext[1], xext[2], xext[3], xext[4] = v.N, v.C, v.D, v.H, v.W
    yext[0], yext[1], yext[2], yext[3], yext[4] = v.N, v.C, v.OD, v.OH, v.OW
    dim = 0 if v.N >= 2 else 1
    split = (split and xext[dim] >= 2 and v.N * v.C * v.D * v.H * v.W >= _SPLIT_ELEMENTS
             and _apart(y, v.ys, yext, 5, ydt, x, v.xs, xext, 5, xdt)
             and _apart(ind, is_, yext, 5, DT_INT64, x, v.xs, xext, 5, xdt)
             and _apart(ind, is_, yext, 5, DT_INT64, y, v.ys, yext, 5, ydt))
    for h in range(2 if split else 1):
        jobs[h].v = v[0]
        jobs[h].x, jobs[h].y, jobs[h].ind = x, y, ind
        if split:
            half = xext[dim] // 2
            if dim == 0:
                jobs[h].v.N = half if h == 0 else v.N - half
            else:
                jobs[h].v.C = half if h == 0 else v.C - half
            if h == 1:
                jobs[h].x = x + half * v.xs[dim]
                jobs[h].y = y + half * v.ys[dim]
                jobs[h].ind = ind + half * is_[dim]
        jobs[h].xdt, jobs[h].ydt = xdt, ydt
        for d in range(5):
            jobs[h].is_[d] = is_[d]
        for d in range(12):
            jobs[h].k[d] = k[d]
    ek_pool_run(_pool_job, <void*>jobs, sizeof(_PoolJob), 2 if split else 1)


def max_pool(y_addr, y_dtype, y_strides, y_shape, ind_addr, ind_strides, x_addr, x_dtype, x_strides,
             x_shape, window):
    """y, indices (N, C, OD, OH, OW) = max over the windows of x (N, C, D, H, W); ``window`` = kernel,
    stride, padding, dilation (3 ints each, (d, h, w)); indices are int64 flat plane offsets. Any
    dtype but bool (y has x's dtype)."""
    cdef int ydt = check_dtype(y_dtype, "max_pool y_dtype")
    cdef int xdt = check_dtype(x_dtype, "max_pool x_dtype")
    cdef Vol v
    cdef Py_ssize_t is_[5]
    cdef Py_ssize_t k[12]
    cdef char* y
    cdef char* ind
    cdef const char* x
    cdef int i
    cdef bint split
    vals = _ints(window, 12, "max_pool window")
    for i in range(12):
        k[i] = vals[i]
        if k[i] < 0 or (k[i] == 0 and not 6 <= i < 9):
            raise KernelArgumentError(f"max_pool: invalid window {tuple(vals)!r}")
    if xdt == DT_BOOL or ydt != xdt:
        raise KernelArgumentError(f"max_pool: unsupported dtypes {_DTYPE_NAMES[xdt]} -> {_DTYPE_NAMES[ydt]}")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "max_pool")
    _byte_strides(ind_strides, 5, DT_INT64, is_, "max_pool ind_strides")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("max_pool: empty input plane")
    y = as_ptr(y_addr, "max_pool y_addr")
    ind = as_ptr(ind_addr, "max_pool ind_addr")
    x = as_ptr(x_addr, "max_pool x_addr")
    split = _split_enabled
    with nogil:
        _max_pool_run(&v, x, xdt, y, ydt, ind, is_, k, split)


cdef inline Py_ssize_t _start(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c) noexcept nogil:
    return (a // b) * c + ((a % b) * c) // b


cdef inline Py_ssize_t _end(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c) noexcept nogil:
    return 1 + ((a + 1) * c - 1) // b


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


# -- adaptive max pooling with indices (CPU's adaptive windows, dense)

cdef void _adaptive_max(Vol* v, const char* x, int xdt, char* y, int ydt, char* ind, Py_ssize_t* is_,
                        cmp_t lowest) noexcept nogil:
    cdef Py_ssize_t n, c, od, oh, ow, idx
    cdef Py_ssize_t lo[3]
    cdef Py_ssize_t hi[3]
    cdef Py_ssize_t unit[3]
    cdef cmp_t best
    unit[0] = unit[1] = unit[2] = 1
    for n in range(v.N):
        for c in range(v.C):
            for od in range(v.OD):
                for oh in range(v.OH):
                    for ow in range(v.OW):
                        _adaptive_window3(v, od, oh, ow, lo, hi)
                        best = _window_max(v, x, xdt, n, c, lo, hi, unit, lowest, &idx)
                        store_block(&best, 1, ydt, _yat(v, y, n, c, od, oh, ow), 0)
                        ek_st_i64(<char*>_ind_at(ind, is_, n, c, od, oh, ow), idx)


def adaptive_max_pool(y_addr, y_dtype, y_strides, y_shape, ind_addr, ind_strides, x_addr, x_dtype,
                      x_strides, x_shape):
    """y, indices (N, C, OD, OH, OW) = max over CPU's adaptive windows of x (N, C, D, H, W)."""
    cdef int ydt = check_dtype(y_dtype, "adaptive_max_pool y_dtype")
    cdef int xdt = check_dtype(x_dtype, "adaptive_max_pool x_dtype")
    cdef Vol v
    cdef Py_ssize_t is_[5]
    cdef char* y
    cdef char* ind
    cdef const char* x
    if xdt == DT_BOOL or ydt != xdt:
        raise KernelArgumentError(f"adaptive_max_pool: unsupported dtypes {_DTYPE_NAMES[xdt]} -> "
                                  f"{_DTYPE_NAMES[ydt]}")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "adaptive_max_pool")
    _byte_strides(ind_strides, 5, DT_INT64, is_, "adaptive_max_pool ind_strides")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("adaptive_max_pool: empty input plane")
    y = as_ptr(y_addr, "adaptive_max_pool y_addr")
    ind = as_ptr(ind_addr, "adaptive_max_pool ind_addr")
    x = as_ptr(x_addr, "adaptive_max_pool x_addr")
    with nogil:
        if is_floating(xdt):
            _adaptive_max(&v, x, xdt, y, ydt, ind, is_, <double>-INFINITY)
        else:
            _adaptive_max(&v, x, xdt, y, ydt, ind, is_, <int64_t>INT64_MIN)


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
    indices (max, adaptive max and fractional max pooling of every rank); an index outside the plane raises."""
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
    """CPU's avg_pool window: the clipped ranges lo/hi (d, h, w) and the divide factor (0: empty)."""
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
    """Window means of x over avg_pool's windows, or (a NULL) over CPU's adaptive ones."""
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


def avg_pool(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape, window,
               count_include_pad, divisor_override):
    """y (N, C, OD, OH, OW) = window means of x; ``window`` = kernel, stride, padding (3 ints each);
    ``divisor_override`` 0 = none."""
    cdef int ydt = check_dtype(y_dtype, "avg_pool y_dtype")
    cdef int xdt = check_dtype(x_dtype, "avg_pool x_dtype")
    cdef Vol v
    cdef AvgWindow3 a
    cdef char* y
    cdef const char* x = NULL
    _floating(ydt, "avg_pool")
    _floating(xdt, "avg_pool")
    _avg_args3(&a, window, count_include_pad, divisor_override, "avg_pool")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "avg_pool")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    y = as_ptr(y_addr, "avg_pool y_addr")
    if v.D * v.H * v.W:
        x = as_ptr(x_addr, "avg_pool x_addr")
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


def avg_pool_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides, go_shape,
                        window, count_include_pad, divisor_override):
    cdef int gdt = check_dtype(gi_dtype, "avg_pool_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "avg_pool_backward go_dtype")
    cdef Vol v
    cdef AvgWindow3 a
    cdef char* gi
    cdef const char* go = NULL
    cdef void* acc
    _floating(gdt, "avg_pool_backward")
    _floating(godt, "avg_pool_backward")
    _avg_args3(&a, window, count_include_pad, divisor_override, "avg_pool_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "avg_pool_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    gi = as_ptr(gi_addr, "avg_pool_backward gi_addr")
    if v.OD * v.OH * v.OW:
        go = as_ptr(go_addr, "avg_pool_backward go_addr")
    else:
        v.OD = v.OH = v.OW = 0
    acc = _plane_acc(&v, gdt, "avg_pool_backward")
    with nogil:
        if gdt == DT_FLOAT64:
            _avg_pool3_backward(&v, &a, <double*>acc, gi, gdt, go, godt)
        else:
            _avg_pool3_backward(&v, &a, <float*>acc, gi, gdt, go, godt)
    free(acc)


# -- adaptive average pooling

def adaptive_avg_pool(y_addr, y_dtype, y_strides, y_shape, x_addr, x_dtype, x_strides, x_shape):
    cdef int ydt = check_dtype(y_dtype, "adaptive_avg_pool y_dtype")
    cdef int xdt = check_dtype(x_dtype, "adaptive_avg_pool x_dtype")
    cdef Vol v
    cdef char* y
    cdef const char* x
    _floating(ydt, "adaptive_avg_pool")
    _floating(xdt, "adaptive_avg_pool")
    _vol(&v, x_shape, x_strides, xdt, y_shape, y_strides, ydt, "adaptive_avg_pool")
    if v.N * v.C * v.OD * v.OH * v.OW == 0:
        return
    if v.D * v.H * v.W == 0:
        raise KernelArgumentError("adaptive_avg_pool: empty input plane")
    y = as_ptr(y_addr, "adaptive_avg_pool y_addr")
    x = as_ptr(x_addr, "adaptive_avg_pool x_addr")
    with nogil:
        if ydt == DT_FLOAT64:
            _avg_pool3(&v, NULL, x, xdt, y, ydt, <double>0)
        else:
            _avg_pool3(&v, NULL, x, xdt, y, ydt, <float>0)


def adaptive_avg_pool_backward(gi_addr, gi_dtype, gi_strides, gi_shape, go_addr, go_dtype, go_strides,
                                 go_shape):
    cdef int gdt = check_dtype(gi_dtype, "adaptive_avg_pool_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "adaptive_avg_pool_backward go_dtype")
    cdef Vol v
    cdef char* gi
    cdef const char* go
    cdef void* acc
    _floating(gdt, "adaptive_avg_pool_backward")
    _floating(godt, "adaptive_avg_pool_backward")
    _vol(&v, gi_shape, gi_strides, gdt, go_shape, go_strides, godt, "adaptive_avg_pool_backward")
    if v.N * v.C * v.D * v.H * v.W == 0:
        return
    if v.OD * v.OH * v.OW == 0:
        raise KernelArgumentError("adaptive_avg_pool_backward: empty output plane")
    gi = as_ptr(gi_addr, "adaptive_avg_pool_backward gi_addr")
    go = as_ptr(go_addr, "adaptive_avg_pool_backward go_addr")
    acc = _plane_acc(&v, gdt, "adaptive_avg_pool_backward")
    with nogil:
        if gdt == DT_FLOAT64:
            _avg_pool3_backward(&v, NULL, <double*>acc, gi, gdt, go, godt)
        else:
            _avg_pool3_backward(&v, NULL, <float*>acc, gi, gdt, go, godt)
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
