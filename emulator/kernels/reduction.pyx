# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Reduction kernels of the device's vector engine.

``reduce_sum`` (sum over a set of dimensions, described below), ``reduce`` (the generic
reduction: sum, prod, mean, max, min, argmax, argmin, var, std, all, any, norm-p, logsumexp over a
set of dimensions, with a second output for max/min's indices or var/std's mean) and ``scan``
(cumsum, cumprod along one dimension); their numerics are described where they are defined.

reduce_sum:

The input is walked in C order of its logical shape (after coalescing, like the
elementwise kernels) with a second, virtual operand: an accumulator array laid
out contiguously over the kept dimensions, with stride 0 on the reduced ones.
A row whose accumulator stride is 0 (the innermost dimension is reduced) is
summed pairwise within each block of BLOCK elements and the block sums are
added to the accumulator; otherwise each element is added to its own
accumulator slot.  At the end the accumulators are cast to the output dtype
and stored through the output's strides.

Numerics (the compute dtype is the output dtype, chosen on the host):
  * every input element is first cast to the compute dtype (``sum(x, dtype=)``
    semantics: ``x.to(dtype).sum()``);
  * float16/bfloat16/float32 accumulate in float32, float64 in float64, and
    integers and bool in int64 (wrapping); the result is rounded/wrapped once
    on store.  CPU's cascade summation adds in a different order, so floating
    results agree with CPU within a few ulps of the float32/float64 sum, not
    bit for bit; integer sums are exact.
  * an empty reduction gives 0.
"""

from libc.stdlib cimport calloc, free

include "_common.pxi"


cdef acc_t _pairwise(acc_t* v, Py_ssize_t m) noexcept nogil:
    """Sum of v[0:m] by pairwise halving in place (m <= BLOCK); integers wrap."""
    cdef Py_ssize_t i, h
    if m == 0:
        return 0
    while m > 1:
        h = m >> 1
        for i in range(h):
            if acc_t is int64_t:
                v[i] = <int64_t>(<uint64_t>v[i] + <uint64_t>v[i + h])
            else:
                v[i] = v[i] + v[i + h]
        if m & 1:
            v[h] = v[m - 1]
            m = h + 1
        else:
            m = h
    return v[0]


cdef void _sum_rows(NdIter* it, char** ptrs, int idt, int cdt, acc_t* scratch) noexcept nogil:
    # ptrs[0]: accumulator (acc_t array), ptrs[1]: input
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t sa = iter_row_stride(it, 0), si = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m, i
    cdef acc_t* acc
    cdef acc_t s
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            load_block(ptrs[1] + j * si, si, idt, m, scratch)
            if idt != cdt:
                round_block_to(scratch, m, cdt)
            if sa == 0:
                acc = <acc_t*>ptrs[0]
                s = _pairwise(scratch, m)
                if acc_t is int64_t:
                    acc[0] = <int64_t>(<uint64_t>acc[0] + <uint64_t>s)
                else:
                    acc[0] = acc[0] + s
            else:
                acc = <acc_t*>(ptrs[0] + j * sa)
                for i in range(m):
                    if acc_t is int64_t:
                        acc[i] = <int64_t>(<uint64_t>acc[i] + <uint64_t>scratch[i])
                    else:
                        acc[i] = acc[i] + scratch[i]
            j += m
        if not iter_next_row(it, ptrs):
            break


cdef void _store_rows(NdIter* it, char** ptrs, int odt, acc_t* scratch) noexcept nogil:
    # ptrs[0]: output, ptrs[1]: accumulator (acc_t array, read with memcpy-based loads)
    cdef Py_ssize_t n = iter_row_len(it)
    cdef Py_ssize_t so = iter_row_stride(it, 0), sa = iter_row_stride(it, 1)
    cdef Py_ssize_t j, m, i
    while True:
        j = 0
        while j < n:
            m = n - j if n - j < BLOCK else BLOCK
            for i in range(m):
                scratch[i] = (<acc_t*>(ptrs[1] + (j + i) * sa))[0]
            store_block(scratch, m, odt, ptrs[0] + j * so, so)
            j += m
        if not iter_next_row(it, ptrs):
            break


def reduce_sum(out_addr, out_dtype, out_strides, in_addr, in_dtype, in_strides, shape, dims, compute_dtype):
    """out = sum over `dims` of cast<compute>(input), cast to the output dtype.

    ``shape`` and ``in_strides`` describe the input; ``out_strides`` are the
    output's strides in keepdim form (one per input dimension; the value on a
    reduced dimension is ignored).  ``dims``: distinct dimensions in
    [0, len(shape)).  Accumulates in float32 (float16/bfloat16/float32
    compute), float64, or int64 (integer and bool compute, wrapping).
    """
    cdef int odt, idt, cdt, nd, d, acc_kind
    cdef Py_ssize_t n_out = 1, acc_size, k
    cdef NdIter it
    cdef char* ptrs[2]
    cdef char* acc = NULL
    cdef float fs[BLOCK]
    cdef double ds[BLOCK]
    cdef int64_t is_[BLOCK]
    odt = check_dtype(out_dtype, "sum out_dtype")
    idt = check_dtype(in_dtype, "sum in_dtype")
    cdt = check_dtype(compute_dtype, "sum compute_dtype")
    shape = tuple(shape)
    nd = len(shape)
    if len(in_strides) != nd or len(out_strides) != nd:
        raise KernelArgumentError(f"sum: strides {tuple(in_strides)!r} / {tuple(out_strides)!r} do not match shape {shape!r}")
    reduced = set()
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__") or not (0 <= d < nd) or d in reduced:
            raise KernelArgumentError(f"sum: invalid or repeated dim {d!r} for rank {nd}")
        reduced.add(int(d))
    for d in range(nd):
        if shape[d] < 0:
            raise KernelArgumentError(f"sum: negative extent in shape {shape!r}")
    out_shape = tuple(1 if d in reduced else shape[d] for d in range(nd))
    for d in range(nd):
        n_out *= out_shape[d]
    if n_out == 0:
        return
    if cdt == DT_FLOAT64:
        acc_kind, acc_size = 1, 8
    elif is_floating(cdt):
        acc_kind, acc_size = 0, 4
    else:
        acc_kind, acc_size = 2, 8
    # Accumulator strides (elements): C-contiguous over out_shape, 0 on reduced dims.
    acc_strides = [0] * nd
    k = 1
    for d in range(nd - 1, -1, -1):
        acc_strides[d] = 0 if d in reduced else k
        k *= out_shape[d]
    acc = <char*>calloc(n_out, acc_size)
    if acc == NULL:
        raise MemoryError("sum: cannot allocate the accumulator")
    try:
        iter_init(&it, shape, [acc_strides, in_strides], [acc_size, itemsize_of(idt)], "sum")
        if it.size:
            ptrs[0] = acc
            ptrs[1] = as_ptr(in_addr, "sum in_addr")
            with nogil:
                if acc_kind == 0:
                    _sum_rows(&it, ptrs, idt, cdt, fs)
                elif acc_kind == 1:
                    _sum_rows(&it, ptrs, idt, cdt, ds)
                else:
                    _sum_rows(&it, ptrs, idt, cdt, is_)
        out_acc_strides = [0 if d in reduced else acc_strides[d] for d in range(nd)]
        iter_init(&it, out_shape, [list(out_strides), out_acc_strides],
                  [itemsize_of(odt), acc_size], "sum")
        ptrs[0] = as_ptr(out_addr, "sum out_addr")
        ptrs[1] = acc
        with nogil:
            if acc_kind == 0:
                _store_rows(&it, ptrs, odt, fs)
            elif acc_kind == 1:
                _store_rows(&it, ptrs, odt, ds)
            else:
                _store_rows(&it, ptrs, odt, is_)
    finally:
        free(acc)


# ---------------------------------------------------------------------------
# The generic reduction: one entry point, an op code, any set of reduced dims.
#
# The input is split into outer (kept) and inner (reduced) dimensions. Each output
# slot walks its inner elements in C order of the reduced dimensions (so a running
# position is the index argmax/max.dim report, the linear index over the reduced dims),
# in blocks of BLOCK elements cast to the compute dtype. Accumulation: float32 for
# float16/bfloat16/float32 compute, float64 for float64, int64 (wrapping) for integer and
# bool compute; var/std always in float64 (two passes: the mean, then the squared
# deviations), as CPU's Welford reduction accumulates in double.

from libc.math cimport sqrt, pow, powf, exp, expf, log, logf, fabs, fabsf, isinf, INFINITY, NAN

cdef enum:
    R_SUM = 0
    R_PROD = 1
    R_MEAN = 2
    R_MAX = 3
    R_MIN = 4
    R_ARGMAX = 5
    R_ARGMIN = 6
    R_VAR = 7
    R_STD = 8
    R_ALL = 9
    R_ANY = 10
    R_NORM = 11
    R_LOGSUMEXP = 12

REDUCE_OPS = {"sum": R_SUM, "prod": R_PROD, "mean": R_MEAN, "max": R_MAX, "min": R_MIN,
              "argmax": R_ARGMAX, "argmin": R_ARGMIN, "var": R_VAR, "std": R_STD, "all": R_ALL,
              "any": R_ANY, "norm": R_NORM, "logsumexp": R_LOGSUMEXP}
# Ops without an identity: an empty reduction is rejected (the host raises CPU's error first).
_NO_IDENTITY = (R_MAX, R_MIN, R_ARGMAX, R_ARGMIN)
_FLOAT_ONLY = (R_MEAN, R_VAR, R_STD, R_NORM, R_LOGSUMEXP)


cdef inline acc_t _abs(acc_t v) noexcept nogil:
    if acc_t is float:
        return fabsf(v)
    elif acc_t is double:
        return fabs(v)
    else:
        return v if v >= 0 else -v


cdef inline acc_t _mul(acc_t a, acc_t b) noexcept nogil:
    if acc_t is int64_t:
        return <int64_t>(<uint64_t>a * <uint64_t>b)
    else:
        return a * b


cdef inline acc_t _add(acc_t a, acc_t b) noexcept nogil:
    if acc_t is int64_t:
        return <int64_t>(<uint64_t>a + <uint64_t>b)
    else:
        return a + b


cdef void _reduce_slot(NdIter* it, char* base, int idt, int cdt, int op, double param, acc_t* buf,
                       acc_t* res, acc_t* res2, int64_t* res_idx) noexcept nogil:
    """Reduces the inner elements of one output slot (``it``: the reduced dims, one operand)."""
    cdef Py_ssize_t n = it.size, rowlen, st, j, m, k, pos
    cdef char* ptr
    cdef int npass = 2 if op == R_VAR or op == R_STD or op == R_LOGSUMEXP else 1
    cdef int passno, d
    cdef bint done = False, first = True
    cdef acc_t a = 0, v, best = 0, shift = 0
    cdef int64_t bi = 0
    cdef double mean = 0.0, divisor
    if op == R_PROD or op == R_ALL:
        a = 1
    elif acc_t is float or acc_t is double:  # float-only ops (the host never sends them integers)
        if op == R_NORM and param == -INFINITY:
            a = INFINITY
        elif op == R_LOGSUMEXP:
            shift = -INFINITY
    if n > 0:
        rowlen = iter_row_len(it)
        st = iter_row_stride(it, 0)
        for passno in range(npass):
            for d in range(it.ndim):
                it.index[d] = 0
            ptr = base
            pos = 0
            done = False
            while not done:
                j = 0
                while j < rowlen and not done:
                    m = rowlen - j if rowlen - j < BLOCK else BLOCK
                    load_block(ptr + j * st, st, idt, m, buf)
                    if idt != cdt:
                        round_block_to(buf, m, cdt)
                    if op == R_SUM or op == R_MEAN:
                        a = _add(a, _pairwise(buf, m))
                    elif op == R_PROD:
                        for k in range(m):
                            a = _mul(a, buf[k])
                    elif op == R_MAX or op == R_ARGMAX:
                        # CPU: the first maximum wins, and the first NaN ends the search.
                        for k in range(m):
                            v = buf[k]
                            if first or not (v <= best):
                                first = False
                                best = v
                                bi = pos + k
                                if v != v:
                                    done = True
                                    break
                    elif op == R_MIN or op == R_ARGMIN:
                        for k in range(m):
                            v = buf[k]
                            if first or not (v >= best):
                                first = False
                                best = v
                                bi = pos + k
                                if v != v:
                                    done = True
                                    break
                    elif op == R_ALL:
                        for k in range(m):
                            if buf[k] == 0:
                                a = 0
                                done = True
                                break
                    elif op == R_ANY:
                        for k in range(m):
                            if buf[k] != 0:
                                a = 1
                                done = True
                                break
                    elif op == R_VAR or op == R_STD:
                        if passno == 0:
                            a = _add(a, _pairwise(buf, m))
                        else:
                            for k in range(m):
                                best = best + (buf[k] - <acc_t>mean) * (buf[k] - <acc_t>mean)
                    elif op == R_NORM:
                        if param == 0:
                            for k in range(m):
                                a = a + (1 if buf[k] != 0 else 0)
                        elif param == 1:
                            for k in range(m):
                                a = a + _abs(buf[k])
                        elif param == 2:
                            for k in range(m):
                                a = a + buf[k] * buf[k]
                        elif param == INFINITY or param == -INFINITY:
                            # max/min of |x| that propagates NaN (CPU's AbsMaxOps/AbsMinOps)
                            for k in range(m):
                                v = _abs(buf[k])
                                if v != v:
                                    a = v
                                    done = True
                                    break
                                if (param > 0 and v > a) or (param < 0 and v < a):
                                    a = v
                        else:
                            for k in range(m):
                                if acc_t is float:
                                    a = a + powf(_abs(buf[k]), <float>param)
                                elif acc_t is double:
                                    a = a + pow(_abs(buf[k]), param)
                    elif op == R_LOGSUMEXP:
                        if passno == 0:
                            for k in range(m):
                                v = buf[k]
                                if v != v:
                                    shift = v
                                    done = True
                                    break
                                if v > shift:
                                    shift = v
                        else:
                            for k in range(m):
                                if acc_t is float:
                                    a = a + expf(buf[k] - shift)
                                elif acc_t is double:
                                    a = a + exp(buf[k] - shift)
                    pos += m
                    j += m
                if done or not iter_next_row(it, &ptr):
                    break
            if op == R_VAR or op == R_STD:
                if passno == 0:
                    mean = <double>a / <double>n
            elif op == R_LOGSUMEXP and passno == 0:
                if shift != shift:
                    break           # NaN: the result is NaN, no second pass
                if isinf(<double>shift):
                    shift = 0       # CPU: maxes.masked_fill_(maxes.abs() == INFINITY, 0)
    # Results.
    if op == R_MEAN:
        if acc_t is float or acc_t is double:
            a = a / <acc_t>n            # empty: 0 / 0 = NaN, as CPU
    elif op == R_MAX or op == R_MIN or op == R_ARGMAX or op == R_ARGMIN:
        a = best
    elif op == R_VAR or op == R_STD:
        if n == 0:
            mean = NAN
        divisor = <double>n - param
        if divisor < 0:
            divisor = 0
        if acc_t is float or acc_t is double:
            a = <acc_t>(<double>best / divisor)
            if op == R_STD:
                a = sqrt(a)
        res2[0] = <acc_t>mean
    elif op == R_NORM:
        if param == 2:
            if acc_t is float:
                a = sqrt(<float>a)
            elif acc_t is double:
                a = sqrt(a)
        elif not (param == 0 or param == 1 or param == INFINITY or param == -INFINITY):
            if acc_t is float:
                a = powf(a, <float>(1.0 / param))
            elif acc_t is double:
                a = pow(a, 1.0 / param)
    elif op == R_LOGSUMEXP:
        if shift != shift:
            a = shift
        else:
            if acc_t is float:
                a = logf(a) + shift
            elif acc_t is double:
                a = log(a) + shift
    res[0] = a
    res_idx[0] = bi


cdef void _reduce_all(NdIter* outer, NdIter* inner, char** ptrs, int op, int idt, int cdt, int odt,
                      int adt, bint has_aux, double param, acc_t* buf) noexcept nogil:
    # ptrs: [0] output, [1] aux output (indices or the mean; may be NULL), [2] input
    cdef Py_ssize_t n = iter_row_len(outer), j
    cdef Py_ssize_t so = iter_row_stride(outer, 0), sa = iter_row_stride(outer, 1)
    cdef Py_ssize_t si = iter_row_stride(outer, 2)
    cdef acc_t res, res2
    cdef int64_t idx
    while True:
        for j in range(n):
            _reduce_slot(inner, ptrs[2] + j * si, idt, cdt, op, param, buf, &res, &res2, &idx)
            if op == R_ARGMAX or op == R_ARGMIN:
                store_block(&idx, 1, odt, ptrs[0] + j * so, 0)
            else:
                store_block(&res, 1, odt, ptrs[0] + j * so, 0)
            if has_aux:
                if op == R_VAR or op == R_STD:
                    store_block(&res2, 1, adt, ptrs[1] + j * sa, 0)
                else:
                    store_block(&idx, 1, adt, ptrs[1] + j * sa, 0)
        if not iter_next_row(outer, ptrs):
            break


def reduce(op, out_addr, out_dtype, out_strides, aux_addr, aux_dtype, aux_strides, in_addr, in_dtype,
           in_strides, shape, dims, compute_dtype, param):
    """out[, aux] = op over ``dims`` of cast<compute>(input).

    ``op``: a name in REDUCE_OPS. ``out_strides`` / ``aux_strides`` are in keepdim form (one per
    input dimension; values on reduced dims are ignored). ``aux`` (``aux_addr`` 0 = none) takes
    the int64 indices of max/min, or the mean of var/std. argmax/argmin write int64 indices
    (the linear index over the reduced dims in C order) to ``out``. ``param``: the correction of
    var/std, the order p of norm (0, 1, 2, inf, -inf or any other real), else ignored.
    """
    cdef int code, odt, idt, cdt, adt = DT_INT64, nd, d, acc_kind
    cdef double p = param
    cdef Py_ssize_t n_out = 1, n_red = 1
    cdef NdIter outer, inner
    cdef char* ptrs[3]
    cdef bint has_aux
    cdef float fs[BLOCK]
    cdef double ds[BLOCK]
    cdef int64_t is_[BLOCK]
    if op not in REDUCE_OPS:
        raise KernelArgumentError(f"reduce: unknown op {op!r} (expected one of {tuple(REDUCE_OPS)})")
    code = REDUCE_OPS[op]
    odt = check_dtype(out_dtype, f"reduce {op} out_dtype")
    idt = check_dtype(in_dtype, f"reduce {op} in_dtype")
    cdt = check_dtype(compute_dtype, f"reduce {op} compute_dtype")
    has_aux = bool(aux_addr)
    if has_aux:
        adt = check_dtype(aux_dtype, f"reduce {op} aux_dtype")
    shape = tuple(shape)
    nd = len(shape)
    if len(in_strides) != nd or len(out_strides) != nd or (has_aux and len(aux_strides) != nd):
        raise KernelArgumentError(f"reduce {op}: strides do not match shape {shape!r}")
    reduced = set()
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__") or not (0 <= d < nd) or d in reduced:
            raise KernelArgumentError(f"reduce {op}: invalid or repeated dim {d!r} for rank {nd}")
        reduced.add(int(d))
    for d in range(nd):
        if shape[d] < 0:
            raise KernelArgumentError(f"reduce {op}: negative extent in shape {shape!r}")
        if d in reduced:
            n_red *= shape[d]
        else:
            n_out *= shape[d]
    if code in _FLOAT_ONLY and not is_floating(cdt):
        raise KernelArgumentError(f"reduce {op}: needs a floating compute dtype, got {_DTYPE_NAMES[cdt]}")
    if (code == R_ARGMAX or code == R_ARGMIN) and odt != DT_INT64:
        raise KernelArgumentError(f"reduce {op}: the index output must be int64, got {_DTYPE_NAMES[odt]}")
    if has_aux and (code == R_MAX or code == R_MIN) and adt != DT_INT64:
        raise KernelArgumentError(f"reduce {op}: the index output must be int64, got {_DTYPE_NAMES[adt]}")
    if has_aux and code not in (R_MAX, R_MIN, R_VAR, R_STD):
        raise KernelArgumentError(f"reduce {op}: takes no second output")
    if n_out == 0:
        return
    if n_red == 0 and (code in _NO_IDENTITY or (code == R_NORM and p < 0)):
        raise KernelArgumentError(f"reduce {op}: an empty reduction has no identity")
    if code == R_VAR or code == R_STD or cdt == DT_FLOAT64:
        acc_kind = 1
    elif is_floating(cdt):
        acc_kind = 0
    else:
        acc_kind = 2
    keep_shape = tuple(1 if d in reduced else shape[d] for d in range(nd))
    red_shape = tuple(shape[d] if d in reduced else 1 for d in range(nd))
    zeros = [0] * nd
    iter_init(&outer, keep_shape, [list(out_strides), list(aux_strides) if has_aux else zeros, list(in_strides)],
              [itemsize_of(odt), itemsize_of(adt), itemsize_of(idt)], f"reduce {op}")
    iter_init(&inner, red_shape, [list(in_strides)], [itemsize_of(idt)], f"reduce {op}")
    ptrs[0] = as_ptr(out_addr, f"reduce {op} out_addr")
    ptrs[1] = as_ptr(aux_addr, f"reduce {op} aux_addr") if has_aux else NULL
    ptrs[2] = as_ptr(in_addr, f"reduce {op} in_addr") if n_red else ptrs[0]  # never read when empty
    with nogil:
        if acc_kind == 0:
            _reduce_all(&outer, &inner, ptrs, code, idt, cdt, odt, adt, has_aux, p, fs)
        elif acc_kind == 1:
            _reduce_all(&outer, &inner, ptrs, code, idt, cdt, odt, adt, has_aux, p, ds)
        else:
            _reduce_all(&outer, &inner, ptrs, code, idt, cdt, odt, adt, has_aux, p, is_)


# ---------------------------------------------------------------------------
# Cumulative scans (cumsum, cumprod) along one dimension. The running value is kept in
# CPU's acc_type: float32 for float16/bfloat16, float64 for float32 and float64, int64
# (wrapping) for integers; each output element is the running value cast to the output
# dtype. Each line is read a block ahead of its writes, so out may alias the input exactly.

cdef void _scan_all(NdIter* outer, char** ptrs, Py_ssize_t length, Py_ssize_t so, Py_ssize_t si,
                    bint is_prod, int idt, int cdt, int odt, acc_t* buf) noexcept nogil:
    # ptrs: [0] output, [1] input; so/si: byte strides along the scanned dimension
    cdef Py_ssize_t n = iter_row_len(outer), j, k, m, pos
    cdef Py_ssize_t ro = iter_row_stride(outer, 0), ri = iter_row_stride(outer, 1)
    cdef acc_t a
    cdef char* po
    cdef char* pi
    while True:
        for j in range(n):
            po = ptrs[0] + j * ro
            pi = ptrs[1] + j * ri
            a = 1 if is_prod else 0
            pos = 0
            while pos < length:
                m = length - pos if length - pos < BLOCK else BLOCK
                load_block(pi + pos * si, si, idt, m, buf)
                if idt != cdt:
                    round_block_to(buf, m, cdt)
                for k in range(m):
                    a = _mul(a, buf[k]) if is_prod else _add(a, buf[k])
                    buf[k] = a
                store_block(buf, m, odt, po + pos * so, so)
                pos += m
        if not iter_next_row(outer, ptrs):
            break


def scan(op, out_addr, out_dtype, out_strides, in_addr, in_dtype, in_strides, shape, dim, compute_dtype):
    """out = cumulative ``op`` ("sum" or "prod") of cast<compute>(input) along ``dim``; ``out`` and
    the input have ``shape``."""
    cdef int odt, idt, cdt, nd, d, acc_kind
    cdef Py_ssize_t length, so, si
    cdef NdIter outer
    cdef char* ptrs[2]
    cdef float fs[BLOCK]
    cdef double ds[BLOCK]
    cdef int64_t is_[BLOCK]
    cdef bint is_prod = op == "prod"
    if op not in ("sum", "prod"):
        raise KernelArgumentError(f"scan: unknown op {op!r} (expected 'sum' or 'prod')")
    odt = check_dtype(out_dtype, f"scan {op} out_dtype")
    idt = check_dtype(in_dtype, f"scan {op} in_dtype")
    cdt = check_dtype(compute_dtype, f"scan {op} compute_dtype")
    shape = tuple(shape)
    nd = len(shape)
    if len(in_strides) != nd or len(out_strides) != nd:
        raise KernelArgumentError(f"scan {op}: strides do not match shape {shape!r}")
    if isinstance(dim, bool) or not hasattr(dim, "__index__") or not 0 <= dim < nd:
        raise KernelArgumentError(f"scan {op}: invalid dim {dim!r} for rank {nd}")
    for d in range(nd):
        if shape[d] < 0:
            raise KernelArgumentError(f"scan {op}: negative extent in shape {shape!r}")
    if 0 in shape:
        return
    length = shape[dim]
    so = <Py_ssize_t>out_strides[dim] * itemsize_of(odt)
    si = <Py_ssize_t>in_strides[dim] * itemsize_of(idt)
    if cdt == DT_FLOAT32 or cdt == DT_FLOAT64:
        acc_kind = 1
    elif is_floating(cdt):
        acc_kind = 0
    else:
        acc_kind = 2
    line_shape = tuple(1 if d == dim else shape[d] for d in range(nd))
    iter_init(&outer, line_shape, [list(out_strides), list(in_strides)], [itemsize_of(odt), itemsize_of(idt)],
              f"scan {op}")
    ptrs[0] = as_ptr(out_addr, f"scan {op} out_addr")
    ptrs[1] = as_ptr(in_addr, f"scan {op} in_addr")
    with nogil:
        if acc_kind == 0:
            _scan_all(&outer, ptrs, length, so, si, is_prod, idt, cdt, odt, fs)
        elif acc_kind == 1:
            _scan_all(&outer, ptrs, length, so, si, is_prod, idt, cdt, odt, ds)
        else:
            _scan_all(&outer, ptrs, length, so, si, is_prod, idt, cdt, odt, is_)
