# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Segment-reduction kernels of the device's vector engine: ``segment_reduce`` /
``segment_reduce_backward``, CPU's loops over contiguous (outer, axis, inner) data, with lengths
or offsets, arithmetic rounded to the dtype after each step as CPU's.

Left out: the ``indices`` form (CPU refuses it too), non-floating dtypes (as CPU), and any cost.
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan, isinf, isfinite, log1p, log1pf, exp, expf, INFINITY, NAN

include "_common.pxi"


# ----------------------------------------------------------------------------- segment_reduce
cdef enum:
    SR_MAX = 0
    SR_MEAN = 1
    SR_MIN = 2
    SR_SUM = 3
    SR_PROD = 4

SEGMENT_OPS = {"max": SR_MAX, "mean": SR_MEAN, "min": SR_MIN, "sum": SR_SUM, "prod": SR_PROD}


cdef inline int64_t _ld_len(const char* p, int ldt) noexcept nogil:
    return ek_ld_i64(p) if ldt == DT_INT64 else <int64_t>ek_ld_i32(p)


cdef int _segment_check(str what, object op, int ldt, Py_ssize_t outer, Py_ssize_t nseg, Py_ssize_t size_axis,
                        Py_ssize_t inner) except -1:
    if op not in SEGMENT_OPS:
        raise KernelArgumentError(f"{what}: unknown reduction {op!r} (expected one of {tuple(SEGMENT_OPS)})")
    if ldt != DT_INT64 and ldt != DT_INT32:
        raise KernelArgumentError(f"{what}: lengths/offsets must be int64 or int32, got {_DTYPE_NAMES[ldt]}")
    if outer < 0 or nseg < 0 or size_axis < 0 or inner < 0:
        raise KernelArgumentError(f"{what}: negative extent")
    return 0


cdef bint _segment_bounds(const char* lp, int ldt, Py_ssize_t outer, Py_ssize_t nseg, bint offsets,
                          Py_ssize_t size_axis) noexcept nogil:
    """Every segment lies inside [0, size_axis) (the kernel never reads outside data)."""
    cdef Py_ssize_t o, s, lsz = nseg + 1 if offsets else nseg, isz = 8 if ldt == DT_INT64 else 4
    cdef int64_t start, end, length
    for o in range(outer):
        end = _ld_len(lp + (o * lsz) * isz, ldt) if offsets else 0
        for s in range(nseg):
            start = end
            if offsets:
                end = _ld_len(lp + (o * lsz + s + 1) * isz, ldt)
            else:
                length = _ld_len(lp + (o * lsz + s) * isz, ldt)
                end = start + length
            if start < 0 or end < start or end > size_axis:
                return False
    return True


def segment_reduce(out_addr, data_addr, dtype, lengths_addr, lengths_dtype, outer, size_axis, inner, nseg,
                   offsets, op, has_initial, initial):
    """out (outer, nseg, inner) = ``op`` over each segment of data (outer, size_axis, inner), both
    contiguous; segments from lengths (outer, nseg) or offsets (outer, nseg + 1), contiguous int64
    or int32. CPU's loop: the running value in the dtype (rounded after each step), max/min
    propagate NaN, an empty segment gives ``initial`` (or -inf / inf / 0 / 1, NaN for mean)."""
    cdef int dt = check_dtype(dtype, "segment_reduce dtype")
    cdef int ldt = check_dtype(lengths_dtype, "segment_reduce lengths dtype")
    cdef Py_ssize_t O = outer, A = size_axis, I = inner, S = nseg, o, s, j, q, lsz
    cdef Py_ssize_t isz = itemsize_of(dt), lisz
    cdef bint offs = offsets, has_init = has_initial, ok = True
    cdef int code
    cdef double init = initial, val, a
    cdef int64_t start, end, length
    cdef char* outp
    cdef char* dp = NULL
    cdef char* lp = NULL
    _segment_check("segment_reduce", op, ldt, O, S, A, I)
    if not is_floating(dt):
        raise KernelArgumentError(f"segment_reduce: needs a floating dtype, got {_DTYPE_NAMES[dt]}")
    code = SEGMENT_OPS[op]
    if O * S * I == 0:
        return
    lisz = itemsize_of(ldt)
    lsz = S + 1 if offs else S
    outp = as_ptr(out_addr, "segment_reduce out_addr")
    lp = as_ptr(lengths_addr, "segment_reduce lengths_addr")
    if O * A * I:
        dp = as_ptr(data_addr, "segment_reduce data_addr")
    with nogil:
        ok = _segment_bounds(lp, ldt, O, S, offs, A)
        if ok:
            for o in range(O):
                end = _ld_len(lp + (o * lsz) * lisz, ldt) if offs else 0
                for s in range(S):
                    start = end
                    if offs:
                        end = _ld_len(lp + (o * lsz + s + 1) * lisz, ldt)
                    else:
                        end = start + _ld_len(lp + (o * lsz + s) * lisz, ldt)
                    length = end - start
                    for q in range(I):
                        if has_init:
                            a = round_to(init, dt)
                        elif code == SR_MAX:
                            a = -INFINITY
                        elif code == SR_MIN:
                            a = INFINITY
                        elif code == SR_PROD:
                            a = 1
                        else:
                            a = 0
                        for j in range(start, end):
                            load_block(dp + ((o * A + j) * I + q) * isz, 0, dt, 1, &val)
                            if code == SR_MAX:
                                if isnan(val):
                                    a = val
                                elif a < val:       # std::max(a, val): a unless a < val
                                    a = val
                            elif code == SR_MIN:
                                if isnan(val):
                                    a = val
                                elif val < a:       # std::min(a, val): a unless val < a
                                    a = val
                            elif code == SR_PROD:
                                a = round_to(a * val, dt)
                            else:
                                a = round_to(a + val, dt)
                        if length == 0 and not has_init and code == SR_MEAN:
                            a = NAN
                        elif code == SR_MEAN and length > 0 and not isnan(a):
                            a = round_to(a / <double>length, dt)
                        store_block(&a, 1, dt, outp + ((o * S + s) * I + q) * isz, 0)
    if not ok:
        raise KernelArgumentError("segment_reduce: a segment lies outside the data along the axis "
                                  "(lengths/offsets out of range)")


def segment_reduce_backward(gin_addr, grad_addr, out_addr, data_addr, dtype, lengths_addr, lengths_dtype, outer,
                            size_axis, inner, nseg, offsets, op, has_initial, initial):
    """grad_input (outer, size_axis, inner) = CPU's segment_reduce backward, from grad and output
    (outer, nseg, inner) and data, all contiguous and of ``dtype``: zeros, then per segment sum /
    mean (grad / length) / max, min (grad to the NaN or equal elements, averaged over them when
    there are several) / prod (grad * output / x, or the exclusive product where x is 0 or NaN)."""
    cdef int dt = check_dtype(dtype, "segment_reduce_backward dtype")
    cdef int ldt = check_dtype(lengths_dtype, "segment_reduce_backward lengths dtype")
    cdef Py_ssize_t O = outer, A = size_axis, I = inner, S = nseg, o, s, j, q, r, lsz, di, oi, n_all
    cdef Py_ssize_t isz = itemsize_of(dt), lisz
    cdef bint offs = offsets, ok = True
    cdef int code
    cdef double init_prod, g, outv, x, gv, ex, cur
    cdef int64_t start, end, length, counter
    cdef char* gin
    cdef char* gp = NULL
    cdef char* op_ = NULL
    cdef char* dp = NULL
    cdef char* lp = NULL
    _segment_check("segment_reduce_backward", op, ldt, O, S, A, I)
    if not is_floating(dt):
        raise KernelArgumentError(f"segment_reduce_backward: needs a floating dtype, got {_DTYPE_NAMES[dt]}")
    code = SEGMENT_OPS[op]
    init_prod = round_to(initial, dt) if has_initial else 1.0
    n_all = O * A * I
    if n_all == 0:
        return
    gin = as_ptr(gin_addr, "segment_reduce_backward grad_input_addr")
    dp = as_ptr(data_addr, "segment_reduce_backward data_addr")
    lisz = itemsize_of(ldt)
    lsz = S + 1 if offs else S
    if O * S * I:
        gp = as_ptr(grad_addr, "segment_reduce_backward grad_addr")
        op_ = as_ptr(out_addr, "segment_reduce_backward output_addr")
        lp = as_ptr(lengths_addr, "segment_reduce_backward lengths_addr")
    with nogil:
        if O * S * I:
            ok = _segment_bounds(lp, ldt, O, S, offs, A)
        if ok:
            x = 0
            for j in range(n_all):
                store_block(&x, 1, dt, gin + j * isz, 0)
            for o in range(O if O * S * I else 0):
                end = _ld_len(lp + (o * lsz) * lisz, ldt) if offs else 0
                for s in range(S):
                    start = end
                    if offs:
                        end = _ld_len(lp + (o * lsz + s + 1) * lisz, ldt)
                    else:
                        end = start + _ld_len(lp + (o * lsz + s) * lisz, ldt)
                    length = end - start
                    if length == 0:
                        continue
                    for q in range(I):
                        oi = ((o * S + s) * I + q) * isz
                        load_block(gp + oi, 0, dt, 1, &g)
                        load_block(op_ + oi, 0, dt, 1, &outv)
                        if code == SR_MAX or code == SR_MIN:
                            counter = 0
                            for j in range(start, end):
                                di = ((o * A + j) * I + q) * isz
                                load_block(dp + di, 0, dt, 1, &x)
                                if isnan(x) or x == outv:
                                    store_block(&g, 1, dt, gin + di, 0)
                                    counter += 1
                            if counter >= 2:
                                for j in range(start, end):
                                    di = ((o * A + j) * I + q) * isz
                                    load_block(gin + di, 0, dt, 1, &cur)
                                    if cur > 0:
                                        cur = round_to(cur / <double>counter, dt)
                                        store_block(&cur, 1, dt, gin + di, 0)
                        elif code == SR_MEAN or code == SR_SUM:
                            gv = round_to(g / <double>length, dt) if code == SR_MEAN else g
                            for j in range(start, end):
                                di = ((o * A + j) * I + q) * isz
                                store_block(&gv, 1, dt, gin + di, 0)
                        else:
                            gv = round_to(g * outv, dt)
                            for j in range(start, end):
                                di = ((o * A + j) * I + q) * isz
                                load_block(dp + di, 0, dt, 1, &x)
                                if isnan(x) or x == 0:
                                    ex = init_prod
                                    for r in range(start, end):
                                        if r != j:
                                            load_block(dp + ((o * A + r) * I + q) * isz, 0, dt, 1, &cur)
                                            ex = round_to(ex * cur, dt)
                                    cur = round_to(g * ex, dt)
                                else:
                                    cur = round_to(gv / x, dt)
                                store_block(&cur, 1, dt, gin + di, 0)
    if not ok:
        raise KernelArgumentError("segment_reduce_backward: a segment lies outside the data along the axis "
                                  "(lengths/offsets out of range)")
