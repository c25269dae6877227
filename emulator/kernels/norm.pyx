# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Normalization kernels of the device's vector engine: softmax (and its gradient) and one
normalize kernel pair shared by layer norm, group norm, batch norm and RMS norm.

softmax / softmax_backward: over one dimension of any stride, walked over the outer positions
like log_softmax (softmax.pyx). ``y = exp(x - max) * (1 / sum(exp(x - max)))``; a NaN in the
vector makes the whole vector NaN (as on CPU). Backward: ``gx = y * (gy - sum(gy * y))``.

norm_forward / norm_backward: every operand is described over one logical shape split into
``n_outer`` outer dimensions (one statistic each) and inner dimensions (the elements reduced
into that statistic). Parameters (weight, bias and their gradients) are given over the same
full shape with stride 0 where they broadcast, which expresses all four layers:

  layer norm  (rows..., normalized...)          weight strides (0..., own...)
  group norm  (N, G, C/G, HxW)                  weight strides (0, C/G*s, s, 0)
  batch norm  (C, N, HxW)  (channel first)      weight strides (s, 0, 0)
  rms norm    like layer norm, not centred

Statistics (mean/rstd in, out, running stats) are described over the outer shape only.

Numerics: float32 accumulation for float16/bfloat16/float32 (float64 when the input is
float64); mean by blockwise pairwise sums, the variance by a second pass over ``x - mean``
(never negative). ``rstd = 1 / sqrt(var + eps)``. Results are rounded once on store. Parameter
gradients accumulate in a scratch array of the accumulation type and are rounded once at the
end. An empty inner extent gives mean 0 and rstd NaN (as CPU's layer and group norm).
"""

from libc.math cimport exp, expf, sqrt, sqrtf, INFINITY
from libc.stdlib cimport calloc, malloc, free

include "_common.pxi"
include "_isa.pxi"
include "_vecmath.pxi"
include "_pool.pxi"

ctypedef fused flt_t:
    float
    double

cdef enum:
    WALK_OPS = 10


# ---------------------------------------------------------------------------------------------
# A walk over one shape with up to WALK_OPS operands (NdIter takes at most three).

cdef struct Walk:
    int ndim
    int nops
    Py_ssize_t size
    Py_ssize_t shape[MAX_RANK]
    Py_ssize_t strides[WALK_OPS * MAX_RANK]   # bytes; [op * MAX_RANK + dim]
    Py_ssize_t index[MAX_RANK]


cdef int walk_init(Walk* w, tuple shape, list strides, list itemsizes, str what) except -1:
    """Like iter_init: drops extent-1 dims and merges dims contiguous in every operand."""
    cdef int nops = len(strides), k, d, nd = 0, ndim = len(shape)
    cdef Py_ssize_t ext, size = 1
    cdef Py_ssize_t st[WALK_OPS]
    cdef bint merge
    if ndim > MAX_RANK:
        raise KernelArgumentError(f"{what}: rank {ndim} exceeds the maximum of {MAX_RANK}")
    if nops > WALK_OPS:
        raise KernelArgumentError(f"{what}: too many operands")
    for d in range(ndim):
        if shape[d] < 0:
            raise KernelArgumentError(f"{what}: negative extent in shape {shape!r}")
        size *= shape[d]
    w.nops = nops
    w.size = size
    for d in range(ndim):
        ext = shape[d]
        if ext == 1:
            continue
        for k in range(nops):
            st[k] = <Py_ssize_t>strides[k][d] * <Py_ssize_t>itemsizes[k]
        merge = nd > 0
        if merge:
            for k in range(nops):
                if w.strides[k * MAX_RANK + nd - 1] != st[k] * ext:
                    merge = False
                    break
        if merge:
            w.shape[nd - 1] *= ext
            for k in range(nops):
                w.strides[k * MAX_RANK + nd - 1] = st[k]
        else:
            w.shape[nd] = ext
            for k in range(nops):
                w.strides[k * MAX_RANK + nd] = st[k]
            nd += 1
    if nd == 0:
        w.shape[0] = 1
        for k in range(nops):
            w.strides[k * MAX_RANK] = 0
        nd = 1
    w.ndim = nd
    for d in range(nd):
        w.index[d] = 0
    return 0


cdef inline Py_ssize_t walk_row_len(Walk* w) noexcept nogil:
    return w.shape[w.ndim - 1]


cdef inline Py_ssize_t walk_row_stride(Walk* w, int op) noexcept nogil:
    return w.strides[op * MAX_RANK + w.ndim - 1]


cdef inline bint walk_next_row(Walk* w, char** ptrs) noexcept nogil:
    """Odometer over all but the innermost dim; False (and every index back at 0) at the end."""
    cdef int d = w.ndim - 2, k
    while d >= 0:
        w.index[d] += 1
        for k in range(w.nops):
            ptrs[k] += w.strides[k * MAX_RANK + d]
        if w.index[d] < w.shape[d]:
            return True
        for k in range(w.nops):
            ptrs[k] -= w.strides[k * MAX_RANK + d] * w.shape[d]
        w.index[d] = 0
        d -= 1
    return False


cdef inline flt_t _pairwise(flt_t* v, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t i, h
    if m == 0:
        return 0
    while m > 1:
        h = m >> 1
        for i in range(h):
            v[i] = v[i] + v[i + h]
        if m & 1:
            v[h] = v[m - 1]
            m = h + 1
        else:
            m = h
    return v[0]


cdef inline flt_t _load1(const char* p, int dt, flt_t* scratch) noexcept nogil:
    load_block(p, 0, dt, 1, scratch)
    return scratch[0]


cdef inline void _store1(flt_t v, int dt, char* p, flt_t* scratch) noexcept nogil:
    scratch[0] = v
    store_block(scratch, 1, dt, p, 0)


cdef inline flt_t _rsqrt(flt_t v) noexcept nogil:
    if flt_t is float:
        return 1.0 / sqrtf(v)
    else:
        return 1.0 / sqrt(v)


# ---------------------------------------------------------------------------------------------
# Operand plumbing: each operand arrives as None or (addr, dtype, strides in elements).

cdef class _Ops:
    """Addresses, dtypes and element strides of the operands of one launch."""
    cdef list strides
    cdef list itemsizes
    cdef int dt[WALK_OPS]
    cdef bint has[WALK_OPS]
    cdef object addrs

    def __init__(self, list ops, list ranks, str what):
        cdef int k
        self.strides, self.itemsizes, self.addrs = [], [], []
        for k in range(len(ops)):
            op = ops[k]
            if op is None:
                self.has[k] = False
                self.dt[k] = DT_FLOAT32
                self.strides.append((0,) * ranks[k])
                self.itemsizes.append(0)
                self.addrs.append(0)
                continue
            if not isinstance(op, tuple) or len(op) != 3:
                raise KernelArgumentError(f"{what}: operand {k} must be (addr, dtype, strides), got {op!r}")
            addr, dtype, st = op
            self.has[k] = True
            self.dt[k] = check_dtype(dtype, what)
            if not is_floating(self.dt[k]):
                raise KernelArgumentError(f"{what}: operand {k} has dtype {_DTYPE_NAMES[self.dt[k]]}; "
                                          "floating dtypes only")
            st = tuple(st)
            if len(st) != ranks[k]:
                raise KernelArgumentError(f"{what}: operand {k} strides {st!r} do not match rank {ranks[k]}")
            for s in st:
                if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                    raise KernelArgumentError(f"{what}: operand {k} has invalid strides {st!r}")
            self.strides.append(st)
            self.itemsizes.append(itemsize_of(self.dt[k]))
            self.addrs.append(addr)

    cdef list part(self, list which, int lo, int hi):
        return [tuple(self.strides[k])[lo:hi] for k in which]

    cdef list sizes(self, list which):
        return [self.itemsizes[k] for k in which]

    cdef int pointers(self, list which, char** ptrs, str what) except -1:
        cdef int i
        for i in range(len(which)):
            k = which[i]
            ptrs[i] = as_ptr(self.addrs[k], f"{what} operand {k}") if self.has[k] else NULL
        return 0


cdef tuple _shape_of(object shape, str what):
    shape = tuple(shape)
    for n in shape:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise KernelArgumentError(f"{what}: invalid shape {shape!r}")
    return shape


# ---------------------------------------------------------------------------------------------
# softmax

cdef bint _all_neg_inf(flt_t* buf, Py_ssize_t L) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(L):
        if not buf[k] == -INFINITY:
            return False
    return True


cdef void _softmax_rows(NdIter* it, char** ptrs, Py_ssize_t L, Py_ssize_t so, int odt,
                        Py_ssize_t si, int idt, flt_t* buf, bint safe) noexcept nogil:
    """``safe``: a row whose every element is -inf gives zeros (aten::_safe_softmax), not NaN."""
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t ro = iter_row_stride(it, 0), ri = iter_row_stride(it, 1)
    cdef Py_ssize_t j, k
    cdef flt_t m, s
    while True:
        for j in range(n):
            load_block(ptrs[1] + j * ri, si, idt, L, buf)
            if safe and buf[0] == -INFINITY and _all_neg_inf(buf, L):
                for k in range(L):
                    buf[k] = 0
            elif flt_t is float:
                # The vector-math path (_vecmath.pxi): the same arithmetic, 8 lanes at a time.
                m = ek_row_max_f32(buf, L)
                s = <float>ek_row_exp_shift_f32(buf, L, m)
                ek_row_scale_f32(buf, L, 1 / s)
            else:
                m = buf[0]
                for k in range(1, L):
                    if buf[k] > m or buf[k] != buf[k]:
                        m = buf[k]
                        if m != m:
                            break
                s = 0
                for k in range(L):
                    buf[k] = exp(buf[k] - m)
                    s = s + buf[k]
                s = 1 / s
                for k in range(L):
                    buf[k] = buf[k] * s
            store_block(buf, L, odt, ptrs[0] + j * ro, so)
        if not iter_next_row(it, ptrs):
            break


cdef void _softmax_bwd_rows(NdIter* it, char** ptrs, Py_ssize_t L, Py_ssize_t sgi, int gidt,
                            Py_ssize_t sgo, int godt, Py_ssize_t sy, int ydt, flt_t* g, flt_t* y) noexcept nogil:
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t r0 = iter_row_stride(it, 0), r1 = iter_row_stride(it, 1), r2 = iter_row_stride(it, 2)
    cdef Py_ssize_t j, k
    cdef flt_t s
    while True:
        for j in range(n):
            load_block(ptrs[1] + j * r1, sgo, godt, L, g)
            load_block(ptrs[2] + j * r2, sy, ydt, L, y)
            s = 0
            for k in range(L):
                s = s + g[k] * y[k]
            for k in range(L):
                g[k] = y[k] * (g[k] - s)
            store_block(g, L, gidt, ptrs[0] + j * r0, sgi)
        if not iter_next_row(it, ptrs):
            break


cdef int _check_dim(tuple shape, object dim, list strides_list, str what) except -1:
    nd = len(shape)
    if isinstance(dim, bool) or not isinstance(dim, int) or not (0 <= dim < nd):
        raise KernelArgumentError(f"{what}: dim {dim!r} out of range for rank {nd}")
    for st in strides_list:
        if len(st) != nd:
            raise KernelArgumentError(f"{what}: strides {tuple(st)!r} do not match shape {shape!r}")
    return 0


cdef tuple _outer(tuple shape, int dim, list strides_list):
    outer_shape = tuple(n for d, n in enumerate(shape) if d != dim)
    outer_strides = [tuple(s for d, s in enumerate(st) if d != dim) for st in strides_list]
    return outer_shape, outer_strides


def softmax(out_addr, out_dtype, out_strides, in_addr, in_dtype, in_strides, shape, dim, bint safe=False):
    """out = softmax(input) along ``dim`` (strides in elements, any layout); ``safe``: rows of
    only -inf give zeros (aten::_safe_softmax)."""
    cdef int odt = check_dtype(out_dtype, "softmax out_dtype")
    cdef int idt = check_dtype(in_dtype, "softmax in_dtype")
    cdef NdIter it
    cdef char* ptrs[2]
    cdef Py_ssize_t L, so, si
    cdef void* buf
    cdef int d
    shape = _shape_of(shape, "softmax")
    _check_dim(shape, dim, [out_strides, in_strides], "softmax")
    d = dim
    if not is_floating(odt) or not is_floating(idt):
        raise KernelArgumentError("softmax: floating dtypes only")
    L = shape[d]
    outer_shape, outer_strides = _outer(shape, d, [out_strides, in_strides])
    iter_init(&it, outer_shape, outer_strides, [itemsize_of(odt), itemsize_of(idt)], "softmax")
    if it.size == 0 or L == 0:
        return
    so = <Py_ssize_t>out_strides[d] * itemsize_of(odt)
    si = <Py_ssize_t>in_strides[d] * itemsize_of(idt)
    buf = malloc(L * sizeof(double))
    if buf == NULL:
        raise MemoryError("softmax: cannot allocate scratch")
    try:
        ptrs[0] = as_ptr(out_addr, "softmax out_addr")
        ptrs[1] = as_ptr(in_addr, "softmax in_addr")
        with nogil:
            if odt == DT_FLOAT64 or idt == DT_FLOAT64:
                _softmax_rows(&it, ptrs, L, so, odt, si, idt, <double*>buf, safe)
            else:
                _softmax_rows(&it, ptrs, L, so, odt, si, idt, <float*>buf, safe)
    finally:
        free(buf)


def softmax_backward(gi_addr, gi_dtype, gi_strides, go_addr, go_dtype, go_strides,
                     y_addr, y_dtype, y_strides, shape, dim):
    """grad_input = output * (grad_output - sum(grad_output * output)) along ``dim``."""
    cdef int gidt = check_dtype(gi_dtype, "softmax_backward gi_dtype")
    cdef int godt = check_dtype(go_dtype, "softmax_backward go_dtype")
    cdef int ydt = check_dtype(y_dtype, "softmax_backward y_dtype")
    cdef NdIter it
    cdef char* ptrs[3]
    cdef Py_ssize_t L, sgi, sgo, sy
    cdef void* g
    cdef void* y
    cdef int d
    shape = _shape_of(shape, "softmax_backward")
    _check_dim(shape, dim, [gi_strides, go_strides, y_strides], "softmax_backward")
    d = dim
    if not (is_floating(gidt) and is_floating(godt) and is_floating(ydt)):
        raise KernelArgumentError("softmax_backward: floating dtypes only")
    L = shape[d]
    outer_shape, outer_strides = _outer(shape, d, [gi_strides, go_strides, y_strides])
    iter_init(&it, outer_shape, outer_strides, [itemsize_of(gidt), itemsize_of(godt), itemsize_of(ydt)],
              "softmax_backward")
    if it.size == 0 or L == 0:
        return
    sgi = <Py_ssize_t>gi_strides[d] * itemsize_of(gidt)
    sgo = <Py_ssize_t>go_strides[d] * itemsize_of(godt)
    sy = <Py_ssize_t>y_strides[d] * itemsize_of(ydt)
    g = malloc(L * sizeof(double))
    y = malloc(L * sizeof(double))
    if g == NULL or y == NULL:
        free(g)
        free(y)
        raise MemoryError("softmax_backward: cannot allocate scratch")
    try:
        ptrs[0] = as_ptr(gi_addr, "softmax_backward gi_addr")
        ptrs[1] = as_ptr(go_addr, "softmax_backward go_addr")
        ptrs[2] = as_ptr(y_addr, "softmax_backward y_addr")
        with nogil:
            if gidt == DT_FLOAT64 or godt == DT_FLOAT64 or ydt == DT_FLOAT64:
                _softmax_bwd_rows(&it, ptrs, L, sgi, gidt, sgo, godt, sy, ydt, <double*>g, <double*>y)
            else:
                _softmax_bwd_rows(&it, ptrs, L, sgi, gidt, sgo, godt, sy, ydt, <float*>g, <float*>y)
    finally:
        free(g)
        free(y)


# ---------------------------------------------------------------------------------------------
# normalize forward
#
# Operand slots: full shape Y X W B; outer shape MEAN_OUT RSTD_OUT MEAN_IN VAR_IN RUN_MEAN RUN_VAR.

cdef enum:
    F_Y = 0
    F_X = 1
    F_W = 2
    F_B = 3
    F_MEAN_OUT = 4
    F_RSTD_OUT = 5
    F_MEAN_IN = 6
    F_VAR_IN = 7
    F_RUN_MEAN = 8
    F_RUN_VAR = 9


cdef struct FwdArgs:
    Py_ssize_t n            # inner elements per statistic
    double eps
    double momentum
    bint center
    bint round_stats        # apply with the statistics as rounded to their stored dtype (CPU's batch norm)
    int dt[WALK_OPS]
    bint has[WALK_OPS]


cdef flt_t _inner_sum(Walk* inner, char** base, int x_slot, int xdt, flt_t mean, bint squares,
                      flt_t* bx) noexcept nogil:
    """sum of x (squares=False) or of (x - mean)^2 (squares=True) over the inner walk."""
    cdef Py_ssize_t L = walk_row_len(inner), rs = walk_row_stride(inner, x_slot), j, m, i
    cdef flt_t total = 0, d
    cdef char* p[WALK_OPS]
    cdef int k
    for k in range(inner.nops):
        p[k] = base[k]
    while True:
        j = 0
        while j < L:
            m = L - j if L - j < BLOCK else BLOCK
            load_block(p[x_slot] + j * rs, rs, xdt, m, bx)
            if squares:
                for i in range(m):
                    d = bx[i] - mean
                    bx[i] = d * d
            total = total + _pairwise(bx, m)
            j += m
        if not walk_next_row(inner, p):
            break
    return total


cdef void _forward(Walk* outer, Walk* inner, char** op, FwdArgs* a, flt_t* bx, flt_t* bw, flt_t* bb,
                   flt_t* one) noexcept nogil:
    cdef Py_ssize_t on = walk_row_len(outer), j, jj, m, i, L = walk_row_len(inner)
    cdef Py_ssize_t os[WALK_OPS]
    cdef Py_ssize_t rs[4]
    cdef char* base[WALK_OPS]
    cdef char* p[4]
    cdef int k
    cdef flt_t mean, var, rstd, eps = a.eps, mom = a.momentum, v
    cdef Py_ssize_t n = a.n
    for k in range(WALK_OPS):
        os[k] = walk_row_stride(outer, k)
    for k in range(4):
        rs[k] = walk_row_stride(inner, k)
    while True:
        for j in range(on):
            for k in range(WALK_OPS):
                base[k] = op[k] + j * os[k] if op[k] != NULL else NULL
            if a.has[F_VAR_IN]:
                mean = _load1(base[F_MEAN_IN], a.dt[F_MEAN_IN], one) if a.center else 0
                var = _load1(base[F_VAR_IN], a.dt[F_VAR_IN], one)
                rstd = _rsqrt(var + eps)
            else:
                if not a.center:
                    mean = 0
                elif n == 0:
                    mean = 0
                else:
                    mean = _inner_sum(inner, base, F_X, a.dt[F_X], 0, False, bx) / n
                var = _inner_sum(inner, base, F_X, a.dt[F_X], mean, True, bx) if n else 0
                if a.has[F_RUN_VAR]:
                    v = _load1(base[F_RUN_VAR], a.dt[F_RUN_VAR], one)
                    _store1(mom * (var / (n - 1)) + (1 - mom) * v, a.dt[F_RUN_VAR], base[F_RUN_VAR], one)
                if a.has[F_RUN_MEAN]:
                    v = _load1(base[F_RUN_MEAN], a.dt[F_RUN_MEAN], one)
                    _store1(mom * mean + (1 - mom) * v, a.dt[F_RUN_MEAN], base[F_RUN_MEAN], one)
                var = var / n
                rstd = _rsqrt(var + eps)
                if a.has[F_MEAN_OUT]:
                    _store1(mean, a.dt[F_MEAN_OUT], base[F_MEAN_OUT], one)
                    if a.round_stats:
                        mean = round_to(mean, a.dt[F_MEAN_OUT])
                if a.has[F_RSTD_OUT]:
                    _store1(rstd, a.dt[F_RSTD_OUT], base[F_RSTD_OUT], one)
                    if a.round_stats:
                        rstd = round_to(rstd, a.dt[F_RSTD_OUT])
            for k in range(4):
                p[k] = base[k]
            if n:
                while True:
                    jj = 0
                    while jj < L:
                        m = L - jj if L - jj < BLOCK else BLOCK
                        load_block(p[F_X] + jj * rs[F_X], rs[F_X], a.dt[F_X], m, bx)
                        for i in range(m):
                            bx[i] = (bx[i] - mean) * rstd
                        # A weight or bias constant along the row (batch norm's, per channel) is
                        # loaded once: the same products and sums.
                        if a.has[F_W] and rs[F_W] == 0:
                            v = _load1(p[F_W], a.dt[F_W], one)
                            for i in range(m):
                                bx[i] = bx[i] * v
                        elif a.has[F_W]:
                            load_block(p[F_W] + jj * rs[F_W], rs[F_W], a.dt[F_W], m, bw)
                            for i in range(m):
                                bx[i] = bx[i] * bw[i]
                        if a.has[F_B] and rs[F_B] == 0:
                            v = _load1(p[F_B], a.dt[F_B], one)
                            for i in range(m):
                                bx[i] = bx[i] + v
                        elif a.has[F_B]:
                            load_block(p[F_B] + jj * rs[F_B], rs[F_B], a.dt[F_B], m, bb)
                            for i in range(m):
                                bx[i] = bx[i] + bb[i]
                        store_block(bx, m, a.dt[F_Y], p[F_Y] + jj * rs[F_Y], rs[F_Y])
                        jj += m
                    if not walk_next_row(inner, p):
                        break
        if not walk_next_row(outer, op):
            break


# Large norm forwards run the outer dimension (one statistic each) in two halves on this thread and
# the pool's helper (_pool.pxi): a statistic, its outputs and its running statistics belong to one
# outer index, so each is computed exactly as in one pass.
cdef enum:
    _SPLIT_ELEMENTS = 1 << 16

include "_split.pxi"


ctypedef struct _FwdJob:
    Walk outer
    Walk inner
    char* ptrs[WALK_OPS]
    FwdArgs a
    bint f64
    double scratch[4 * BLOCK]


cdef void _fwd_job(void* arg) noexcept nogil:
    cdef _FwdJob* j = <_FwdJob*>arg
    cdef float* fs = <float*>j.scratch
    if j.f64:
        _forward(&j.outer, &j.inner, j.ptrs, &j.a, j.scratch, j.scratch + BLOCK, j.scratch + 2 * BLOCK,
                 j.scratch + 3 * BLOCK)
    else:
        _forward(&j.outer, &j.inner, j.ptrs, &j.a, fs, fs + BLOCK, fs + 2 * BLOCK, fs + 3 * BLOCK)


cdef bint _y_apart_from_x(Walk* outer, Walk* inner, char** ptrs, int* dts) noexcept nogil:
    """y overlaps x nowhere, or is x itself (same address and strides: in place). Each extent ends
    with its own last element (adjacent buffers do not overlap)."""
    cdef const char* lo[2]
    cdef const char* hi[2]
    cdef int k, d
    cdef bint same = ptrs[F_Y] == ptrs[F_X]
    for d in range(outer.ndim):
        same = same and outer.strides[F_Y * MAX_RANK + d] == outer.strides[F_X * MAX_RANK + d]
    for d in range(inner.ndim):
        same = same and inner.strides[F_Y * MAX_RANK + d] == inner.strides[F_X * MAX_RANK + d]
    if same:
        return True
    for k in range(2):
        lo[k] = hi[k] = ptrs[k]
        for d in range(outer.ndim):
            if outer.strides[k * MAX_RANK + d] > 0:
                hi[k] += outer.strides[k * MAX_RANK + d] * (outer.shape[d] - 1)
            else:
                lo[k] += outer.strides[k * MAX_RANK + d] * (outer.shape[d] - 1)
        for d in range(inner.ndim):
            if inner.strides[k * MAX_RANK + d] > 0:
                hi[k] += inner.strides[k * MAX_RANK + d] * (inner.shape[d] - 1)
            else:
                lo[k] += inner.strides[k * MAX_RANK + d] * (inner.shape[d] - 1)
        hi[k] += itemsize_of(dts[k])
    return hi[0] <= lo[1] or hi[1] <= lo[0]


def norm_forward(y, x, w, b, mean_out, rstd_out, mean_in, var_in, run_mean, run_var,
                 shape, n_outer, eps, momentum, center, round_stats):
    """y = (x - mean) * rstd * w + b over ``shape``; statistics over the inner dims (see the module
    docstring). With ``var_in`` the statistics are given (mean_in, var_in: batch norm in eval);
    otherwise they are computed, written to mean_out / rstd_out when given, and the running
    statistics (run_mean, run_var; unbiased variance) updated in place with ``momentum``.
    ``center=False``: no mean is subtracted (RMS norm; ``var`` is then the mean of squares)."""
    cdef Walk outer, inner
    cdef FwdArgs a
    cdef char* ptrs[WALK_OPS]
    cdef int k, no
    cdef Py_ssize_t n = 1
    cdef float fs[3 * BLOCK + 1]
    cdef double ds[3 * BLOCK + 1]
    cdef _Ops ops
    cdef bint split
    cdef _FwdJob* jobs = NULL
    cdef int h
    cdef Py_ssize_t half
    what = "norm_forward"
    shape = _shape_of(shape, what)
    if isinstance(n_outer, bool) or not isinstance(n_outer, int) or not 0 <= n_outer <= len(shape):
        raise KernelArgumentError(f"{what}: n_outer {n_outer!r} out of range for rank {len(shape)}")
    no = n_outer
    if y is None or x is None:
        raise KernelArgumentError(f"{what}: y and x are required")
    if var_in is not None and (run_mean is not None or run_var is not None or mean_out is not None
                               or rstd_out is not None):
        raise KernelArgumentError(f"{what}: given statistics exclude computed ones")
    if var_in is not None and center and mean_in is None:
        raise KernelArgumentError(f"{what}: a centred normalization with given statistics needs mean_in")
    nd = len(shape)
    ops = _Ops([y, x, w, b, mean_out, rstd_out, mean_in, var_in, run_mean, run_var],
               [nd] * 4 + [no] * 6, what)
    for d in range(no, nd):
        n *= shape[d]
    a.n = n
    a.eps = eps
    a.momentum = momentum
    a.center = bool(center)
    a.round_stats = bool(round_stats)
    for k in range(WALK_OPS):
        a.dt[k] = ops.dt[k]
        a.has[k] = ops.has[k]
    if (run_var is not None or run_mean is not None) and n == 0:
        raise KernelArgumentError(f"{what}: running statistics need at least one element per statistic")
    full = list(range(4))
    outer_strides = ops.part(full, 0, no) + ops.part(list(range(4, WALK_OPS)), 0, no)
    walk_init(&outer, shape[:no], outer_strides, ops.sizes(list(range(WALK_OPS))), what)
    walk_init(&inner, shape[no:], ops.part(full, no, nd), ops.sizes(full), what)
    if outer.size == 0:
        return
    touched = list(range(WALK_OPS)) if n else [k for k in range(WALK_OPS) if k >= 4]
    for k in range(WALK_OPS):
        ptrs[k] = NULL
    for k in touched:
        if ops.has[k]:
            ptrs[k] = as_ptr(ops.addrs[k], f"{what} operand {k}")
    split = (_split_enabled and n > 0 and outer.shape[0] >= 2 and outer.size * n >= _SPLIT_ELEMENTS
             and _y_apart_from_x(&outer, &inner, ptrs, a.dt))
    if split:
        jobs = <_FwdJob*>malloc(2 * sizeof(_FwdJob))
        split = jobs != NULL
    if split:
        with nogil:
            for h in range(2):
                jobs[h].outer = outer
                jobs[h].inner = inner
                jobs[h].a = a
                jobs[h].f64 = a.dt[F_X] == DT_FLOAT64
                half = outer.shape[0] // 2
                jobs[h].outer.shape[0] = half if h == 0 else outer.shape[0] - half
                for k in range(WALK_OPS):
                    jobs[h].ptrs[k] = ptrs[k]
                    if h == 1 and ptrs[k] != NULL:
                        jobs[h].ptrs[k] = ptrs[k] + half * outer.strides[k * MAX_RANK]
            ek_pool_run(_fwd_job, <void*>jobs, sizeof(_FwdJob), 2)
        free(jobs)
        return
    with nogil:
        if a.dt[F_X] == DT_FLOAT64:
            _forward(&outer, &inner, ptrs, &a, ds, ds + BLOCK, ds + 2 * BLOCK, ds + 3 * BLOCK)
        else:
            _forward(&outer, &inner, ptrs, &a, fs, fs + BLOCK, fs + 2 * BLOCK, fs + 3 * BLOCK)


# ---------------------------------------------------------------------------------------------
# normalize backward
#
# Operand slots: full shape DX DY X W ACC_W ACC_B (the last two: scratch accumulators); outer
# shape MEAN RSTD.

cdef enum:
    B_DX = 0
    B_DY = 1
    B_X = 2
    B_W = 3
    B_ACC_W = 4
    B_ACC_B = 5
    B_MEAN = 6
    B_RSTD = 7
    B_OPS = 8


cdef struct BwdArgs:
    Py_ssize_t n
    double eps
    bint center
    bint batch_stats        # the statistics were computed from x (their gradient flows into dx)
    bint rstd_is_var        # the RSTD slot holds a variance: rstd = 1 / sqrt(var + eps)
    bint want_dx
    bint want_w
    bint want_b
    int dt[B_OPS]
    bint has[B_OPS]


cdef void _backward(Walk* outer, Walk* inner, char** op, BwdArgs* a, flt_t* bdy, flt_t* bx, flt_t* bw,
                    flt_t* one) noexcept nogil:
    cdef Py_ssize_t on = walk_row_len(outer), j, jj, m, i, L = walk_row_len(inner)
    cdef Py_ssize_t os[B_OPS]
    cdef Py_ssize_t rs[6]
    cdef char* base[B_OPS]
    cdef char* p[6]
    cdef int k
    cdef flt_t mean, rstd, sa, sc, ca, cc, xh, g, t
    cdef flt_t* acc
    cdef Py_ssize_t n = a.n
    for k in range(B_OPS):
        os[k] = walk_row_stride(outer, k)
    for k in range(6):
        rs[k] = walk_row_stride(inner, k)
    while True:
        for j in range(on):
            for k in range(B_OPS):
                base[k] = op[k] + j * os[k] if op[k] != NULL else NULL
            mean = _load1(base[B_MEAN], a.dt[B_MEAN], one) if a.center else 0
            rstd = _load1(base[B_RSTD], a.dt[B_RSTD], one)
            if a.rstd_is_var:
                rstd = _rsqrt(rstd + <flt_t>a.eps)
            ca = 0
            cc = 0
            if a.want_dx and a.batch_stats:
                sa = 0
                sc = 0
                for k in range(6):
                    p[k] = base[k]
                while True:
                    jj = 0
                    while jj < L:
                        m = L - jj if L - jj < BLOCK else BLOCK
                        load_block(p[B_DY] + jj * rs[B_DY], rs[B_DY], a.dt[B_DY], m, bdy)
                        load_block(p[B_X] + jj * rs[B_X], rs[B_X], a.dt[B_X], m, bx)
                        if a.has[B_W]:
                            load_block(p[B_W] + jj * rs[B_W], rs[B_W], a.dt[B_W], m, bw)
                            for i in range(m):
                                bdy[i] = bdy[i] * bw[i]
                        for i in range(m):
                            bx[i] = bdy[i] * ((bx[i] - mean) * rstd)
                        sa = sa + _pairwise(bdy, m)
                        sc = sc + _pairwise(bx, m)
                        jj += m
                    if not walk_next_row(inner, p):
                        break
                ca = sa / n if a.center else 0
                cc = sc / n
            for k in range(6):
                p[k] = base[k]
            while True:
                jj = 0
                while jj < L:
                    m = L - jj if L - jj < BLOCK else BLOCK
                    load_block(p[B_DY] + jj * rs[B_DY], rs[B_DY], a.dt[B_DY], m, bdy)
                    load_block(p[B_X] + jj * rs[B_X], rs[B_X], a.dt[B_X], m, bx)
                    for i in range(m):
                        bx[i] = (bx[i] - mean) * rstd          # x_hat
                    if a.want_b:
                        if rs[B_ACC_B] == 0:
                            for i in range(m):
                                bw[i] = bdy[i]
                            (<flt_t*>(p[B_ACC_B] + jj * rs[B_ACC_B]))[0] += _pairwise(bw, m)
                        else:
                            for i in range(m):
                                (<flt_t*>(p[B_ACC_B] + (jj + i) * rs[B_ACC_B]))[0] += bdy[i]
                    if a.want_w:
                        if rs[B_ACC_W] == 0:
                            for i in range(m):
                                bw[i] = bdy[i] * bx[i]
                            (<flt_t*>(p[B_ACC_W] + jj * rs[B_ACC_W]))[0] += _pairwise(bw, m)
                        else:
                            for i in range(m):
                                (<flt_t*>(p[B_ACC_W] + (jj + i) * rs[B_ACC_W]))[0] += bdy[i] * bx[i]
                    if a.want_dx:
                        if a.has[B_W]:
                            load_block(p[B_W] + jj * rs[B_W], rs[B_W], a.dt[B_W], m, bw)
                            for i in range(m):
                                bdy[i] = bdy[i] * bw[i]
                        if a.batch_stats:
                            for i in range(m):
                                bdy[i] = rstd * (bdy[i] - ca - bx[i] * cc)
                        else:
                            for i in range(m):
                                bdy[i] = bdy[i] * rstd
                        store_block(bdy, m, a.dt[B_DX], p[B_DX] + jj * rs[B_DX], rs[B_DX])
                    jj += m
                if not walk_next_row(inner, p):
                    break
        if not walk_next_row(outer, op):
            break


cdef tuple _scratch_layout(tuple shape, tuple strides):
    """Dense element strides over the dims where ``strides`` is nonzero (0 elsewhere), the kept
    extents and the parameter's own strides on them, and the number of scratch slots."""
    nd = len(shape)
    dense = [0] * nd
    kept_shape, kept_own, kept_dense = [], [], []
    k = 1
    for d in range(nd - 1, -1, -1):
        if strides[d] != 0 and shape[d] != 1:
            dense[d] = k
            k *= shape[d]
    for d in range(nd):
        if dense[d]:
            kept_shape.append(shape[d])
            kept_own.append(strides[d])
            kept_dense.append(dense[d])
    return tuple(dense), tuple(kept_shape), tuple(kept_own), tuple(kept_dense), k


cdef void _store_acc(Walk* w, char** ptrs, int odt, flt_t* scratch) noexcept nogil:
    # ptrs[0]: the parameter gradient, ptrs[1]: its accumulator
    cdef Py_ssize_t n = walk_row_len(w), so = walk_row_stride(w, 0), sa = walk_row_stride(w, 1)
    cdef Py_ssize_t j, m, i
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            for i in range(m):
                scratch[i] = (<flt_t*>(ptrs[1] + (j + i) * sa))[0]
            store_block(scratch, m, odt, ptrs[0] + j * so, so)
            j += m
        if not walk_next_row(w, ptrs):
            break


def norm_backward(dx, dw, db, dy, x, w, mean, rstd, shape, n_outer, eps, center, batch_stats, rstd_is_var):
    """Gradients of norm_forward. dx over the full shape; dw / db (weight and bias gradients) over
    the full shape with stride 0 where the parameter broadcasts: each is the sum of its terms
    (``dy * x_hat`` / ``dy``) over the positions that share the element. ``batch_stats``: the
    statistics were computed from x (training), so dx carries their gradient; else (batch norm
    in eval) ``dx = dy * w * rstd``. ``rstd_is_var``: the ``rstd`` operand holds a variance."""
    cdef Walk outer, inner, wstore
    cdef BwdArgs a
    cdef char* ptrs[B_OPS]
    cdef char* sp[2]
    cdef int k, no
    cdef Py_ssize_t n = 1
    cdef void* acc_w = NULL
    cdef void* acc_b = NULL
    cdef float fs[3 * BLOCK + 1]
    cdef double ds[3 * BLOCK + 1]
    cdef bint dbl
    cdef size_t acc_size
    cdef _Ops ops
    what = "norm_backward"
    shape = _shape_of(shape, what)
    if isinstance(n_outer, bool) or not isinstance(n_outer, int) or not 0 <= n_outer <= len(shape):
        raise KernelArgumentError(f"{what}: n_outer {n_outer!r} out of range for rank {len(shape)}")
    no = n_outer
    nd = len(shape)
    if dy is None or x is None or rstd is None or (center and mean is None):
        raise KernelArgumentError(f"{what}: dy, x, rstd (and mean when centred) are required")
    ops = _Ops([dx, dy, x, w, dw, db, mean, rstd], [nd] * 6 + [no] * 2, what)
    for d in range(no, nd):
        n *= shape[d]
    a.n = n
    a.eps = eps
    a.center = bool(center)
    a.batch_stats = bool(batch_stats)
    a.rstd_is_var = bool(rstd_is_var)
    a.want_dx = dx is not None
    a.want_w = dw is not None
    a.want_b = db is not None
    for k in range(B_OPS):
        a.dt[k] = ops.dt[k]
        a.has[k] = ops.has[k]
    dbl = a.dt[B_X] == DT_FLOAT64
    acc_size = sizeof(double) if dbl else sizeof(float)
    # The accumulators replace dw / db in the walks: dense scratch with their broadcast pattern.
    strides = list(ops.strides)
    sizes = list(ops.itemsizes)
    layouts = [None, None]
    for slot, i in ((B_ACC_W, 0), (B_ACC_B, 1)):
        if ops.has[slot]:
            layouts[i] = _scratch_layout(shape, tuple(ops.strides[slot]))
            strides[slot] = layouts[i][0]
            sizes[slot] = acc_size
    try:
        if layouts[0] is not None:
            acc_w = calloc(max(layouts[0][4], 1), acc_size)
            if acc_w == NULL:
                raise MemoryError(f"{what}: cannot allocate the weight accumulator")
        if layouts[1] is not None:
            acc_b = calloc(max(layouts[1][4], 1), acc_size)
            if acc_b == NULL:
                raise MemoryError(f"{what}: cannot allocate the bias accumulator")
        walk_init(&outer, shape[:no], [tuple(s)[:no] for s in strides], sizes, what)
        walk_init(&inner, shape[no:], [tuple(s)[no:] for s in strides[:6]], sizes[:6], what)
        for k in range(B_OPS):
            ptrs[k] = NULL
        if outer.size and n:
            for k in (B_DX, B_DY, B_X, B_W, B_MEAN, B_RSTD):
                if ops.has[k]:
                    ptrs[k] = as_ptr(ops.addrs[k], f"{what} operand {k}")
            ptrs[B_ACC_W] = <char*>acc_w
            ptrs[B_ACC_B] = <char*>acc_b
            with nogil:
                if dbl:
                    _backward(&outer, &inner, ptrs, &a, ds, ds + BLOCK, ds + 2 * BLOCK, ds + 3 * BLOCK)
                else:
                    _backward(&outer, &inner, ptrs, &a, fs, fs + BLOCK, fs + 2 * BLOCK, fs + 3 * BLOCK)
        for slot, i, scratch in ((B_ACC_W, 0, <uintptr_t>acc_w), (B_ACC_B, 1, <uintptr_t>acc_b)):
            if layouts[i] is None:
                continue
            _, kept_shape, kept_own, kept_dense, count = layouts[i]
            walk_init(&wstore, kept_shape, [kept_own, kept_dense], [ops.itemsizes[slot], acc_size], what)
            if wstore.size == 0:
                continue
            sp[0] = as_ptr(ops.addrs[slot], f"{what} operand {slot}")
            sp[1] = <char*><uintptr_t>scratch
            k = ops.dt[slot]
            with nogil:
                if dbl:
                    _store_acc(&wstore, sp, k, ds)
                else:
                    _store_acc(&wstore, sp, k, fs)
    finally:
        free(acc_w)
        free(acc_b)
