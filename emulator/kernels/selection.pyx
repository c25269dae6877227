# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Selection, scan, search, histogram and segment kernels of the device's vector engine.

``order_stat``: median / nanmedian / kthvalue / mode over a set of reduced dims, one output slot
at a time. The slot's elements are gathered in C order of the reduced dims into a scratch
(double for floating dtypes, int64 for integers and bool) and selected with CPU's own
algorithms, so the index CPU reports is the one written: median takes the first NaN (torch.median)
or the ((n - 1) / 2)-th element in (value, index) order; kthvalue runs ATen's Sedgewick
quickselect with its NaN-largest comparator; mode sorts (value, index) pairs with libstdc++'s
introsort (what ATen's ``std::sort`` call compiles to) and keeps the last index of the longest run.

``cum_select``: cummax / cummin (CPU's ``>=`` / ``<=`` rule, NaN sticks) and logcumsumexp (in
CPU's acc_type: double for float32/float64, float for float16/bfloat16).

``search``: searchsorted / bucketize (CPU's lower/upper bound loops, optional sorter).

``histogram``: histc / histogram / histogramdd counts (linear bins, with or without CPU's local
search, or binary search over explicit edges), weights and density.

``segment_reduce`` / ``segment_reduce_backward``: CPU's loops over contiguous (outer, axis,
inner) data, with lengths or offsets, arithmetic rounded to the dtype after each step as CPU's.
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan, isinf, isfinite, log1p, log1pf, exp, expf, INFINITY, NAN

include "_common.pxi"


cdef enum:
    OS_MEDIAN = 0
    OS_NANMEDIAN = 1
    OS_KTHVALUE = 2
    OS_MODE = 3

ORDER_OPS = {"median": OS_MEDIAN, "nanmedian": OS_NANMEDIAN, "kthvalue": OS_KTHVALUE, "mode": OS_MODE}

ctypedef fused key_t:
    double
    int64_t


cdef inline bint _isnan_k(key_t v) noexcept nogil:
    if key_t is double:
        return v != v
    else:
        return False


# ----------------------------------------------------------------------------- (value, index) order
cdef inline bint _lt_pair(key_t* v, int64_t* ix, Py_ssize_t a, Py_ssize_t b, bint nan_last) noexcept nogil:
    """(v[a], ix[a]) before (v[b], ix[b]): value, then index; NaN last when nan_last."""
    if key_t is double:
        if nan_last:
            if isnan(v[a]) or isnan(v[b]):
                if isnan(v[a]) and isnan(v[b]):
                    return ix[a] < ix[b]
                return isnan(v[b])
    if v[a] < v[b]:
        return True
    if v[a] == v[b]:
        return ix[a] < ix[b]
    return False


cdef void _merge_sort_pairs(key_t* v, int64_t* ix, key_t* tv, int64_t* tix, Py_ssize_t n,
                            bint nan_last) noexcept nogil:
    """Sorts (v, ix) by (value, index) (a total order without NaN, NaN last): bottom-up merge."""
    cdef Py_ssize_t width = 1, lo, mid, hi, a, b, o, i
    cdef key_t* sv = v
    cdef int64_t* si = ix
    cdef key_t* dv = tv
    cdef int64_t* di = tix
    cdef key_t* swv
    cdef int64_t* swi
    cdef bint right
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width if lo + width < n else n
            hi = lo + 2 * width if lo + 2 * width < n else n
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                # compare the right element against the left one through a 2-element view
                dv[o] = sv[b]
                di[o] = si[b]
                right = _lt_pair(sv, si, b, a, nan_last)
                if right:
                    b += 1
                else:
                    dv[o] = sv[a]
                    di[o] = si[a]
                    a += 1
                o += 1
            while a < mid:
                dv[o] = sv[a]
                di[o] = si[a]
                a += 1
                o += 1
            while b < hi:
                dv[o] = sv[b]
                di[o] = si[b]
                b += 1
                o += 1
            lo = hi
        swv, swi = sv, si
        sv, si = dv, di
        dv, di = swv, swi
        width *= 2
    if sv != v:
        for i in range(n):
            v[i] = sv[i]
            ix[i] = si[i]


# ----------------------------------------------------------------------------- ATen's quickselect
cdef inline bint _gt_or_nan(key_t x, key_t y) noexcept nogil:
    if key_t is double:
        return (isnan(x) and not isnan(y)) or x > y
    else:
        return x > y


cdef inline void _swap(key_t* v, int64_t* ix, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    cdef key_t t = v[i]
    cdef int64_t u = ix[i]
    v[i] = v[j]
    ix[i] = ix[j]
    v[j] = t
    ix[j] = u


cdef void _quick_select(key_t* arr, int64_t* ix, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    """ATen's quick_select_template (Sedgewick), with its comparator gt_or_nan."""
    cdef Py_ssize_t P, L = 0, R = n - 1, i, j
    cdef key_t piv
    while True:
        if R <= L:
            return
        if R == L + 1:
            if _gt_or_nan(arr[L], arr[R]):
                _swap(arr, ix, L, R)
            return
        P = (L + R) >> 1
        _swap(arr, ix, P, L + 1)
        if _gt_or_nan(arr[L + 1], arr[R]):
            _swap(arr, ix, L + 1, R)
        if _gt_or_nan(arr[L], arr[R]):
            _swap(arr, ix, L, R)
        if _gt_or_nan(arr[L + 1], arr[L]):
            _swap(arr, ix, L + 1, L)
        i = L + 1
        j = R
        piv = arr[L]
        while True:
            i += 1
            while i < n and _gt_or_nan(piv, arr[i]):
                i += 1
            j -= 1
            while j > 0 and _gt_or_nan(arr[j], piv):
                j -= 1
            if j < i:
                break
            _swap(arr, ix, i, j)
        _swap(arr, ix, L, j)
        if j <= k:
            L = i
        if j >= k:
            R = j - 1


# ----------------------------------------------------------------------------- libstdc++ std::sort
# On pairs (value, index) with the comparator ``a.first < b.first`` (ATen's mode kernel).

cdef inline bint _lt(key_t* v, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return v[a] < v[b]


cdef inline bint _lt_val(key_t x, key_t y) noexcept nogil:
    return x < y


cdef void _insertion_sort(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t last) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef key_t val
    cdef int64_t vi
    if first == last:
        return
    for i in range(first + 1, last):
        val = v[i]
        vi = ix[i]
        if _lt_val(val, v[first]):
            j = i
            while j > first:
                v[j] = v[j - 1]
                ix[j] = ix[j - 1]
                j -= 1
            v[first] = val
            ix[first] = vi
        else:
            j = i
            while j > 0 and _lt_val(val, v[j - 1]):  # unguarded in libstdc++; v[first] stops it
                v[j] = v[j - 1]
                ix[j] = ix[j - 1]
                j -= 1
            v[j] = val
            ix[j] = vi


cdef void _unguarded_insertion_sort(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t last) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef key_t val
    cdef int64_t vi
    for i in range(first, last):
        val = v[i]
        vi = ix[i]
        j = i
        while j > 0 and _lt_val(val, v[j - 1]):
            v[j] = v[j - 1]
            ix[j] = ix[j - 1]
            j -= 1
        v[j] = val
        ix[j] = vi


cdef void _push_heap(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t hole, Py_ssize_t top,
                     key_t val, int64_t vi) noexcept nogil:
    cdef Py_ssize_t parent = (hole - 1) // 2
    while hole > top and _lt_val(v[first + parent], val):
        v[first + hole] = v[first + parent]
        ix[first + hole] = ix[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = val
    ix[first + hole] = vi


cdef void _adjust_heap(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t hole, Py_ssize_t length,
                       key_t val, int64_t vi) noexcept nogil:
    cdef Py_ssize_t top = hole, child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if _lt_val(v[first + child], v[first + child - 1]):
            child -= 1
        v[first + hole] = v[first + child]
        ix[first + hole] = ix[first + child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        v[first + hole] = v[first + child - 1]
        ix[first + hole] = ix[first + child - 1]
        hole = child - 1
    _push_heap(v, ix, first, hole, top, val, vi)


cdef void _heap_sort(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t last) noexcept nogil:
    cdef Py_ssize_t length = last - first, parent
    cdef key_t val
    cdef int64_t vi
    if length >= 2:                      # make_heap
        parent = (length - 2) // 2
        while True:
            _adjust_heap(v, ix, first, parent, length, v[first + parent], ix[first + parent])
            if parent == 0:
                break
            parent -= 1
    while last - first > 1:              # sort_heap
        last -= 1
        val = v[last]
        vi = ix[last]
        v[last] = v[first]
        ix[last] = ix[first]
        _adjust_heap(v, ix, first, 0, last - first, val, vi)


cdef inline void _swap_pos(key_t* v, int64_t* ix, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    _swap(v, ix, a, b)


cdef void _move_median_to_first(key_t* v, int64_t* ix, Py_ssize_t result, Py_ssize_t a, Py_ssize_t b,
                                Py_ssize_t c) noexcept nogil:
    if _lt(v, a, b):
        if _lt(v, b, c):
            _swap_pos(v, ix, result, b)
        elif _lt(v, a, c):
            _swap_pos(v, ix, result, c)
        else:
            _swap_pos(v, ix, result, a)
    elif _lt(v, a, c):
        _swap_pos(v, ix, result, a)
    elif _lt(v, b, c):
        _swap_pos(v, ix, result, c)
    else:
        _swap_pos(v, ix, result, b)


cdef Py_ssize_t _unguarded_partition(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t last,
                                     Py_ssize_t pivot, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    while True:
        while first < hi - 1 and _lt(v, first, pivot):
            first += 1
        last -= 1
        while last > lo and _lt(v, pivot, last):
            last -= 1
        if not (first < last):
            return first
        _swap_pos(v, ix, first, last)
        first += 1


cdef void _introsort_loop(key_t* v, int64_t* ix, Py_ssize_t first, Py_ssize_t last, Py_ssize_t depth) noexcept nogil:
    cdef Py_ssize_t mid, cut
    while last - first > 16:
        if depth == 0:
            _heap_sort(v, ix, first, last)
            return
        depth -= 1
        mid = first + (last - first) // 2
        _move_median_to_first(v, ix, first, first + 1, mid, last - 1)
        cut = _unguarded_partition(v, ix, first + 1, last, first, first, last)
        _introsort_loop(v, ix, cut, last, depth)
        last = cut


cdef void _std_sort(key_t* v, int64_t* ix, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t lg = 0, m = n
    if n <= 1:
        return
    while m > 1:
        m >>= 1
        lg += 1
    _introsort_loop(v, ix, 0, n, 2 * lg)
    if n > 16:
        _insertion_sort(v, ix, 0, 16)
        _unguarded_insertion_sort(v, ix, 16, n)
    else:
        _insertion_sort(v, ix, 0, n)


# ----------------------------------------------------------------------------- order_stat
cdef void _gather(NdIter* it, char* base, int dt, key_t* v) noexcept nogil:
    """The slot's elements in C order of the reduced dims (``it``: one operand)."""
    cdef Py_ssize_t rowlen = iter_row_len(it), st = iter_row_stride(it, 0), pos = 0
    cdef char* ptr = base
    cdef int d
    for d in range(it.ndim):
        it.index[d] = 0
    if it.size == 0:
        return
    while True:
        load_block(ptr, st, dt, rowlen, v + pos)
        pos += rowlen
        if not iter_next_row(it, &ptr):
            break


cdef int64_t _all_equivalent_nth0(int64_t* ix, Py_ssize_t n) noexcept nogil:
    """The index libstdc++'s nth_element(first, first, last) leaves first when no element
    compares below another (CPU's nanmedian of a slice of NaNs): the pivot and partition swaps
    of its introselect, which then keeps the left part until 3 elements remain."""
    cdef Py_ssize_t lo = 0, hi = n, mid, f, l
    cdef int64_t t
    while hi - lo > 3:
        mid = lo + (hi - lo) // 2
        t = ix[lo]
        ix[lo] = ix[mid]
        ix[mid] = t
        f = lo + 1
        l = hi
        while True:
            l -= 1
            if not f < l:
                break
            t = ix[f]
            ix[f] = ix[l]
            ix[l] = t
            f += 1
        hi = f
    return ix[0]


cdef void _select_slot(int op, key_t* v, int64_t* ix, key_t* tv, int64_t* tix, Py_ssize_t n, Py_ssize_t k,
                       bint want_index, key_t* out_v, int64_t* out_i) noexcept nogil:
    cdef Py_ssize_t i, nnan = 0, nth, run = 0, best_run = 0
    cdef key_t mode = 0
    cdef int64_t modei = 0
    for i in range(n):
        ix[i] = i
    if op == OS_MEDIAN or op == OS_NANMEDIAN:
        if n == 0:                     # only the full reduction gets here: NaN (cast on store)
            out_v[0] = <key_t>NAN if key_t is double else 0
            out_i[0] = 0
            return
        for i in range(n):
            if _isnan_k(v[i]):
                if op == OS_MEDIAN:
                    out_v[0] = v[i]    # torch.median: the first NaN and its index
                    out_i[0] = i
                    return
                nnan += 1
        nth = (n - nnan - 1) // 2 if n - nnan > 0 else 0
        if n - nnan == 0:              # nanmedian of NaNs only
            out_v[0] = v[0]
            out_i[0] = _all_equivalent_nth0(ix, n)
            return
        _merge_sort_pairs(v, ix, tv, tix, n, True)
        out_v[0] = v[nth]
        out_i[0] = ix[nth]
    elif op == OS_KTHVALUE:
        _quick_select(v, ix, n, k - 1)
        out_v[0] = v[k - 1]
        out_i[0] = ix[k - 1]
    else:
        _std_sort(v, ix, n)
        for i in range(n):
            run += 1
            if i == n - 1 or v[i] != v[i + 1]:
                if run > best_run:
                    mode = v[i]
                    modei = ix[i]
                    best_run = run
                run = 0
        out_v[0] = mode
        out_i[0] = modei


cdef void _order_all(NdIter* outer, NdIter* inner, char** ptrs, int op, int vdt, int sdt, bint has_idx,
                     Py_ssize_t n, Py_ssize_t k, key_t* v, int64_t* ix, key_t* tv, int64_t* tix) noexcept nogil:
    # ptrs: [0] values, [1] indices (or values again), [2] source
    cdef Py_ssize_t rowlen = iter_row_len(outer), j
    cdef Py_ssize_t sv = iter_row_stride(outer, 0), si = iter_row_stride(outer, 1), ss = iter_row_stride(outer, 2)
    cdef key_t res
    cdef int64_t idx
    while True:
        for j in range(rowlen):
            _gather(inner, ptrs[2] + j * ss, sdt, v)
            _select_slot(op, v, ix, tv, tix, n, k, has_idx, &res, &idx)
            store_block(&res, 1, vdt, ptrs[0] + j * sv, 0)
            if has_idx:
                ek_st_i64(ptrs[1] + j * si, idx)
        if not iter_next_row(outer, ptrs):
            break


def order_stat(op, val_addr, val_dtype, val_strides, idx_addr, idx_strides, src_addr, src_dtype, src_strides,
               shape, dims, k):
    """values[, indices] = op over ``dims`` of src (``op`` in ORDER_OPS). ``val_strides`` /
    ``idx_strides`` are in keepdim form; ``idx_addr`` 0 = no indices (the full median). ``k``:
    kthvalue's 1-based rank (ignored otherwise). values have src's dtype."""
    cdef int code, vdt, sdt, nd, d
    cdef Py_ssize_t n_out = 1, n_red = 1, kk = k
    cdef NdIter outer, inner
    cdef char* ptrs[3]
    cdef bint has_idx = bool(idx_addr), floating
    cdef void* buf = NULL
    cdef void* tbuf = NULL
    cdef int64_t* ix = NULL
    cdef int64_t* tix = NULL
    if op not in ORDER_OPS:
        raise KernelArgumentError(f"order_stat: unknown op {op!r} (expected one of {tuple(ORDER_OPS)})")
    code = ORDER_OPS[op]
    vdt = check_dtype(val_dtype, f"{op} values dtype")
    sdt = check_dtype(src_dtype, f"{op} src dtype")
    if vdt != sdt:
        raise KernelArgumentError(f"{op}: values dtype {_DTYPE_NAMES[vdt]} differs from the input's {_DTYPE_NAMES[sdt]}")
    shape = tuple(shape)
    nd = len(shape)
    if len(src_strides) != nd or len(val_strides) != nd or (has_idx and len(idx_strides) != nd):
        raise KernelArgumentError(f"{op}: strides do not match shape {shape!r}")
    reduced = set()
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__") or not (0 <= d < nd) or d in reduced:
            raise KernelArgumentError(f"{op}: invalid or repeated dim {d!r} for rank {nd}")
        reduced.add(int(d))
    for d in range(nd):
        if shape[d] < 0:
            raise KernelArgumentError(f"{op}: negative extent in shape {shape!r}")
        if d in reduced:
            n_red *= shape[d]
        else:
            n_out *= shape[d]
    if n_out == 0:
        return
    if n_red == 0 and (code != OS_MEDIAN and code != OS_NANMEDIAN or has_idx):
        raise KernelArgumentError(f"{op}: an empty reduction has no result")
    if code == OS_KTHVALUE and not 1 <= kk <= n_red:
        raise KernelArgumentError(f"kthvalue: k {k!r} outside [1, {n_red}]")
    floating = is_floating(sdt)
    keep_shape = tuple(1 if d in reduced else shape[d] for d in range(nd))
    red_shape = tuple(shape[d] if d in reduced else 1 for d in range(nd))
    iter_init(&outer, keep_shape, [list(val_strides), list(idx_strides) if has_idx else list(val_strides),
                                   list(src_strides)], [itemsize_of(vdt), 8, itemsize_of(sdt)], op)
    iter_init(&inner, red_shape, [list(src_strides)], [itemsize_of(sdt)], op)
    ptrs[0] = as_ptr(val_addr, f"{op} val_addr")
    ptrs[1] = as_ptr(idx_addr, f"{op} idx_addr") if has_idx else ptrs[0]
    ptrs[2] = as_ptr(src_addr, f"{op} src_addr") if n_red else ptrs[0]
    m = n_red if n_red > 0 else 1
    buf = malloc(m * 8)
    tbuf = malloc(m * 8)
    ix = <int64_t*>malloc(m * 8)
    tix = <int64_t*>malloc(m * 8)
    try:
        if buf == NULL or tbuf == NULL or ix == NULL or tix == NULL:
            raise MemoryError(f"{op}: cannot allocate the selection buffers")
        with nogil:
            if floating:
                _order_all(&outer, &inner, ptrs, code, vdt, sdt, has_idx, n_red, kk, <double*>buf, ix,
                           <double*>tbuf, tix)
            else:
                _order_all(&outer, &inner, ptrs, code, vdt, sdt, has_idx, n_red, kk, <int64_t*>buf, ix,
                           <int64_t*>tbuf, tix)
    finally:
        free(buf)
        free(tbuf)
        free(ix)
        free(tix)


# ----------------------------------------------------------------------------- cum_select
cdef enum:
    CS_CUMMAX = 0
    CS_CUMMIN = 1
    CS_LOGCUMSUMEXP = 2

CUM_OPS = {"cummax": CS_CUMMAX, "cummin": CS_CUMMIN, "logcumsumexp": CS_LOGCUMSUMEXP}


cdef inline double _log_add_exp(double x, double y, bint single) noexcept nogil:
    # CPU's lambda: y is the running value (NaN propagates through min/max).
    cdef double lo, hi
    if isnan(y):
        lo = y
        hi = y
    else:
        lo = x if x < y else y      # std::min(x, y): x unless y < x ... returns first if equal
        if y < x:
            lo = y
        else:
            lo = x
        if x < y:
            hi = y
        else:
            hi = x
    if lo != hi or isfinite(lo):
        if single:
            return <float>(log1pf(expf(<float>(<float>lo - <float>hi))) + <float>hi)
        return log1p(exp(lo - hi)) + hi
    return x


cdef void _cum_line(int op, char* po, Py_ssize_t so, char* pi_, Py_ssize_t si, Py_ssize_t n, int dt,
                    char* px, Py_ssize_t sx, key_t* buf) noexcept nogil:
    cdef Py_ssize_t pos = 0, m, k
    cdef key_t best = 0
    cdef int64_t idx = 0
    cdef int64_t ibuf[BLOCK]
    cdef double acc = -INFINITY
    cdef bint single = dt == DT_FLOAT16 or dt == DT_BFLOAT16, first = True
    while pos < n:
        m = n - pos if n - pos < BLOCK else BLOCK
        load_block(pi_ + pos * si, si, dt, m, buf)
        for k in range(m):
            if op == CS_LOGCUMSUMEXP:
                if key_t is double:
                    acc = _log_add_exp(buf[k], acc, single)
                    if single:
                        acc = <float>acc
                    buf[k] = acc
            else:
                if first:
                    best = buf[k]
                    idx = pos + k
                    first = False
                elif _isnan_k(buf[k]) or (not _isnan_k(best) and (
                        (op == CS_CUMMAX and buf[k] >= best) or (op == CS_CUMMIN and buf[k] <= best))):
                    best = buf[k]
                    idx = pos + k
                buf[k] = best
                ibuf[k] = idx
        store_block(buf, m, dt, po + pos * so, so)
        if op != CS_LOGCUMSUMEXP:
            store_block(ibuf, m, DT_INT64, px + pos * sx, sx)
        pos += m


def cum_select(op, out_addr, out_strides, idx_addr, idx_strides, src_addr, dtype, src_strides, shape, dim):
    """out (and the int64 idx, cummax/cummin) = cumulative ``op`` of src along ``dim``: cummax /
    cummin with CPU's rule (a new element wins on >= / <=, a NaN wins and sticks), or
    logcumsumexp (floating dtypes). out, idx and src have ``shape``; out has src's dtype."""
    cdef int code, dt, nd, d
    cdef NdIter it
    cdef char* ptrs[3]
    cdef Py_ssize_t n, so, si, sx = 0, j, rowlen, r0, r1, r2
    cdef double dbuf[BLOCK]
    cdef int64_t ibuf[BLOCK]
    cdef bint floating
    if op not in CUM_OPS:
        raise KernelArgumentError(f"cum_select: unknown op {op!r} (expected one of {tuple(CUM_OPS)})")
    code = CUM_OPS[op]
    dt = check_dtype(dtype, f"{op} dtype")
    floating = is_floating(dt)
    if code == CS_LOGCUMSUMEXP and not floating:
        raise KernelArgumentError(f"logcumsumexp: needs a floating dtype, got {_DTYPE_NAMES[dt]}")
    shape = tuple(shape)
    nd = len(shape)
    has_idx = code != CS_LOGCUMSUMEXP
    if len(out_strides) != nd or len(src_strides) != nd or (has_idx and len(idx_strides) != nd):
        raise KernelArgumentError(f"{op}: strides do not match shape {shape!r}")
    if isinstance(dim, bool) or not hasattr(dim, "__index__") or not 0 <= dim < nd:
        raise KernelArgumentError(f"{op}: invalid dim {dim!r} for rank {nd}")
    for d in range(nd):
        if shape[d] < 0:
            raise KernelArgumentError(f"{op}: negative extent in shape {shape!r}")
    if 0 in shape:
        return
    n = shape[dim]
    so = <Py_ssize_t>out_strides[dim] * itemsize_of(dt)
    si = <Py_ssize_t>src_strides[dim] * itemsize_of(dt)
    if has_idx:
        sx = <Py_ssize_t>idx_strides[dim] * 8
    line_shape = tuple(1 if d == dim else shape[d] for d in range(nd))
    iter_init(&it, line_shape, [list(out_strides), list(idx_strides) if has_idx else list(out_strides),
                                list(src_strides)], [itemsize_of(dt), 8, itemsize_of(dt)], op)
    ptrs[0] = as_ptr(out_addr, f"{op} out_addr")
    ptrs[1] = as_ptr(idx_addr, f"{op} idx_addr") if has_idx else ptrs[0]
    ptrs[2] = as_ptr(src_addr, f"{op} src_addr")
    rowlen = iter_row_len(&it)
    r0 = iter_row_stride(&it, 0)
    r1 = iter_row_stride(&it, 1)
    r2 = iter_row_stride(&it, 2)
    with nogil:
        while True:
            for j in range(rowlen):
                if floating:
                    _cum_line(code, ptrs[0] + j * r0, so, ptrs[2] + j * r2, si, n, dt, ptrs[1] + j * r1, sx, dbuf)
                else:
                    _cum_line(code, ptrs[0] + j * r0, so, ptrs[2] + j * r2, si, n, dt, ptrs[1] + j * r1, sx, ibuf)
            if not iter_next_row(&it, ptrs):
                break


# ----------------------------------------------------------------------------- search
cdef inline void _load_key(const char* p, int dt, int cdt, bint as_float, double* d, int64_t* i) noexcept nogil:
    if as_float:
        load_block(p, 0, dt, 1, d)
        d[0] = round_to(d[0], cdt)
    else:
        load_block(p, 0, dt, 1, i)


def search(out_addr, out_dtype, out_strides, val_addr, val_dtype, val_strides, seq_addr, seq_dtype, seq_strides,
           seq_stride, seq_len, sorter_addr, sorter_strides, sorter_stride, shape, common_dtype, right):
    """out[p] = the insertion point of value[p] in its row of the sorted sequence (CPU's lower
    bound, or upper bound when ``right``), over ``shape`` (the values'). ``seq_strides`` /
    ``sorter_strides`` (one per value dim; 0 on the last) find a row's first element;
    ``seq_stride`` / ``sorter_stride`` walk it (``seq_len`` elements). ``sorter_addr`` 0 = none;
    else row positions are read through the int64 sorter (each checked in [0, seq_len)). Both
    sides are compared in ``common_dtype`` (the values and the sequence rounded to it)."""
    cdef int odt = check_dtype(out_dtype, "searchsorted out dtype")
    cdef int vdt = check_dtype(val_dtype, "searchsorted values dtype")
    cdef int sdt = check_dtype(seq_dtype, "searchsorted sequence dtype")
    cdef int cdt = check_dtype(common_dtype, "searchsorted common dtype")
    cdef bint as_float = is_floating(cdt), upper = right, has_sorter = bool(sorter_addr), bad = False
    cdef Py_ssize_t L = seq_len, sst = <Py_ssize_t>seq_stride, sot = <Py_ssize_t>sorter_stride
    cdef Py_ssize_t ssz, rowlen, j, lo, hi, mid, pos
    cdef Py_ssize_t r[4]
    cdef NdIter it
    cdef char* ptrs[4]
    cdef char* base[4]
    cdef char* row
    cdef char* last
    cdef double vd = 0, md = 0
    cdef int64_t vi = 0, mi = 0, srt
    cdef int k
    if odt != DT_INT64 and odt != DT_INT32:
        raise KernelArgumentError(f"searchsorted: the output must be int64 or int32, got {_DTYPE_NAMES[odt]}")
    if L < 0:
        raise KernelArgumentError(f"searchsorted: negative sequence length {seq_len!r}")
    ssz = itemsize_of(sdt)
    iter_init(&it, shape, [list(out_strides), list(val_strides), list(seq_strides),
                           list(sorter_strides) if has_sorter else list(seq_strides)],
              [itemsize_of(odt), itemsize_of(vdt), ssz, 8], "searchsorted")
    if it.size == 0:
        return
    ptrs[0] = as_ptr(out_addr, "searchsorted out_addr")
    ptrs[1] = as_ptr(val_addr, "searchsorted val_addr")
    ptrs[2] = as_ptr(seq_addr, "searchsorted seq_addr") if L else ptrs[1]
    ptrs[3] = as_ptr(sorter_addr, "searchsorted sorter_addr") if has_sorter and L else ptrs[2]
    rowlen = iter_row_len(&it)
    for k in range(4):
        r[k] = iter_row_stride(&it, k)
        base[k] = ptrs[k]
    with nogil:
        # The sorter's positions first: nothing is written when one is out of range.
        if has_sorter and L:
            last = NULL                  # rows shared by many values are checked once
            while True:
                for j in range(rowlen):
                    row = ptrs[3] + j * r[3]
                    if row == last:
                        continue
                    last = row
                    for pos in range(L):
                        srt = ek_ld_i64(row + pos * sot * 8)
                        if srt < 0 or srt >= L:
                            bad = True
                if not iter_next_row(&it, ptrs):
                    break
            for k in range(it.ndim):     # rewind the iteration for the search
                it.index[k] = 0
            ptrs[0] = base[0]
            ptrs[1] = base[1]
            ptrs[2] = base[2]
            ptrs[3] = base[3]
        if not bad:
            while True:
                for j in range(rowlen):
                    _load_key(ptrs[1] + j * r[1], vdt, cdt, as_float, &vd, &vi)
                    lo = 0
                    hi = L
                    while lo < hi:
                        mid = lo + ((hi - lo) >> 1)
                        pos = mid
                        if has_sorter:
                            pos = ek_ld_i64(ptrs[3] + j * r[3] + mid * sot * 8)
                        _load_key(ptrs[2] + j * r[2] + pos * sst * ssz, sdt, cdt, as_float, &md, &mi)
                        if as_float:
                            if (upper and not (md > vd)) or (not upper and not (md >= vd)):
                                lo = mid + 1
                            else:
                                hi = mid
                        else:
                            if (upper and not (mi > vi)) or (not upper and not (mi >= vi)):
                                lo = mid + 1
                            else:
                                hi = mid
                    if odt == DT_INT64:
                        ek_st_i64(ptrs[0] + j * r[0], lo)
                    else:
                        ek_st_i32(ptrs[0] + j * r[0], <int32_t>lo)
                if not iter_next_row(&it, ptrs):
                    break
    if bad:
        raise KernelArgumentError("torch.searchsorted(): sorter index out of range")


# ----------------------------------------------------------------------------- histogram
cdef enum:
    H_LINEAR = 0          # histc: linear interpolation
    H_LINEAR_LOCAL = 1    # histogram/histogramdd with bin counts: linear + local search
    H_BINARY = 2          # explicit bin edges: binary search

cdef inline double _rd(double v, int dt) noexcept nogil:
    return round_to(v, dt)


cdef inline Py_ssize_t _upper_bound(double* e, Py_ssize_t lo, Py_ssize_t hi, double x) noexcept nogil:
    cdef Py_ssize_t mid
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if not (x < e[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo


def histogram(hist_addr, hist_strides, in_addr, dtype, in_strides, n, w_addr, w_strides, algorithm, density,
              edges):
    """hist (D-dimensional, ``dtype``) = counts (or weight sums) of the n x D input's rows, as CPU's
    histogramdd kernel: a row outside the outer edges (or with a NaN) is skipped; a value on the
    last edge falls in the last bin. ``edges``: one (addr, stride, count) per dim (``dtype``).
    ``algorithm``: 0 linear interpolation (histc), 1 linear with local search, 2 binary search.
    The bin arithmetic runs in ``dtype`` (rounded after each step, as CPU's scalar_t); sums in
    double, rounded once. ``density``: divided by the total, then by each bin's widths."""
    cdef int dt = check_dtype(dtype, "histogram dtype")
    cdef int alg = algorithm
    cdef Py_ssize_t N = n, D = len(edges), isz = itemsize_of(dt), i, d, pos, nb, lo, hi, total_bins = 1
    cdef Py_ssize_t off
    cdef bint has_w = bool(w_addr), dens = density, skip
    cdef double elt, left, right, wt, tot = 0
    cdef double** e = NULL
    cdef Py_ssize_t* ne = NULL
    cdef Py_ssize_t* hs = NULL
    cdef Py_ssize_t* idx = NULL
    cdef double* acc = NULL
    cdef char* hp
    cdef char* ip = NULL
    cdef char* wp = NULL
    cdef Py_ssize_t s0, s1, ws = 0, k, cnt, est
    if not is_floating(dt):
        raise KernelArgumentError(f"histogram: needs a floating dtype, got {_DTYPE_NAMES[dt]}")
    if D == 0 or len(hist_strides) != D or len(in_strides) != 2:
        raise KernelArgumentError("histogram: bad edge list or strides")
    s0 = <Py_ssize_t>in_strides[0] * isz
    s1 = <Py_ssize_t>in_strides[1] * isz
    if has_w:
        ws = <Py_ssize_t>w_strides[0] * isz
    e = <double**>calloc(D, sizeof(double*))
    ne = <Py_ssize_t*>calloc(D, sizeof(Py_ssize_t))
    hs = <Py_ssize_t*>calloc(D, sizeof(Py_ssize_t))
    idx = <Py_ssize_t*>calloc(D, sizeof(Py_ssize_t))
    try:
        if e == NULL or ne == NULL or hs == NULL or idx == NULL:
            raise MemoryError("histogram: cannot allocate")
        for d in range(D):
            addr, stride, count = edges[d]
            if count < 2:
                raise KernelArgumentError(f"histogram: dim {d} needs at least 2 edges, got {count}")
            ne[d] = count
            total_bins *= count - 1
            e[d] = <double*>malloc(count * sizeof(double))
            if e[d] == NULL:
                raise MemoryError("histogram: cannot allocate")
            cnt = count
            est = <Py_ssize_t>stride * isz
            load_block(as_ptr(addr, "histogram edges"), est, dt, cnt, e[d])
        for d in range(D):
            hs[d] = <Py_ssize_t>hist_strides[d] * isz
        acc = <double*>calloc(total_bins, sizeof(double))
        if acc == NULL:
            raise MemoryError("histogram: cannot allocate")
        hp = as_ptr(hist_addr, "histogram hist_addr")
        if N:
            ip = as_ptr(in_addr, "histogram in_addr")
            if has_w:
                wp = as_ptr(w_addr, "histogram w_addr")
        with nogil:
            for i in range(N):
                skip = False
                off = 0
                for d in range(D):
                    load_block(ip + i * s0 + d * s1, 0, dt, 1, &elt)
                    nb = ne[d]
                    left = e[d][0]
                    right = e[d][nb - 1]
                    if not (elt >= left and elt <= right):
                        skip = True
                        break
                    if alg == H_BINARY:
                        pos = _upper_bound(e[d], 0, nb, elt) - 1
                    else:
                        pos = <Py_ssize_t>_rd(_rd(_rd(elt - left, dt) * _rd(<double>(nb - 1), dt), dt)
                                              / _rd(right - left, dt), dt)
                        if alg == H_LINEAR_LOCAL:
                            lo = pos - 1 if pos - 1 > 0 else 0
                            hi = pos + 2 if pos + 2 < nb else nb
                            pos = _upper_bound(e[d], lo, hi, elt) - 1
                    if pos == nb - 1:
                        pos -= 1
                    off = off * (nb - 1) + pos
                if not skip:
                    wt = 1.0
                    if has_w:
                        load_block(wp + i * ws, 0, dt, 1, &wt)
                    acc[off] += wt
            if dens:
                for k in range(total_bins):
                    tot += acc[k]
                tot = _rd(tot, dt)
                for k in range(total_bins):
                    acc[k] = _rd(_rd(acc[k], dt) / tot, dt)
                    off = k
                    for d in range(D - 1, -1, -1):
                        pos = off % (ne[d] - 1)
                        off = off // (ne[d] - 1)
                        acc[k] = _rd(acc[k] / _rd(e[d][pos + 1] - e[d][pos], dt), dt)
            # store through the hist strides (C order over the bins)
            for k in range(total_bins):
                off = k
                pos = 0
                for d in range(D - 1, -1, -1):
                    idx[d] = off % (ne[d] - 1)
                    off = off // (ne[d] - 1)
                for d in range(D):
                    pos += idx[d] * hs[d]
                store_block(acc + k, 1, dt, hp + pos, 0)
    finally:
        if e != NULL:
            for d in range(D):
                free(e[d])
        free(e)
        free(ne)
        free(hs)
        free(idx)
        free(acc)


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
