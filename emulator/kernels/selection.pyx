# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Selection kernels of the device's vector engine: order statistics and running extrema.

``order_stat``: median / nanmedian / kthvalue / mode over a set of reduced dims, one output slot
at a time. The slot's elements are gathered in C order of the reduced dims into a scratch
(double for floating dtypes, int64 for integers and bool) and selected with CPU's own
algorithms, so the index CPU reports is the one written: median takes the first NaN (torch.median)
or the ((n - 1) / 2)-th element in (value, index) order; kthvalue runs ATen's Sedgewick
quickselect with its NaN-largest comparator; mode sorts (value, index) pairs with libstdc++'s
introsort (what ATen's ``std::sort`` call compiles to) and keeps the last index of the longest run.

``cum_select``: cummax / cummin (CPU's ``>=`` / ``<=`` rule, NaN sticks) and logcumsumexp (in
CPU's acc_type: double for float32/float64, float for float16/bfloat16), one line at a time.

Left out: complex dtypes, and any cost (emulator/kernels/library.py's cost model).
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
