# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Sorting kernels of the device's vector engine: ``sort`` (also topk), ``isin`` (a sort of the
test elements, then a binary search per element), ``unique`` and ``unique_dim`` (sorted or
consecutive).

Equal keys come out in CPU's order: a stable merge sort where CPU sorts stably, CPU's own
std::sort / topk selection (_stdsort.pxi) where it does not. NaN is the largest value, as on
CPU; sorted values are bitwise copies of the elements.

Left out: CPU's radix sort itself (the host picks the stable sort where CPU's would run, which
orders the same), complex dtypes, and any cost.
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan

include "_common.pxi"
include "_index_iter.pxi"
include "_stdsort.pxi"


# ---------------------------------------------------------------------------
# Sorting.

cdef inline bint before_d(double a, double b, bint desc) noexcept nogil:
    """a sorts strictly before b (NaN is the largest value, as on CPU)."""
    if desc:
        return (isnan(a) and not isnan(b)) or a > b
    return (isnan(b) and not isnan(a)) or a < b


cdef inline bint before_i(int64_t a, int64_t b, bint desc) noexcept nogil:
    return a > b if desc else a < b


cdef struct SortKeys:
    double* dk          # floating keys, or NULL: the int64 keys ik
    int64_t* ik
    Py_ssize_t m        # slice length (unique_dim's slice order)
    bint desc


ctypedef bint (*sorts_before_fn)(SortKeys* keys, int64_t a, int64_t b) noexcept nogil


cdef bint key_before(SortKeys* keys, int64_t a, int64_t b) noexcept nogil:
    if keys.dk != NULL:
        return before_d(keys.dk[a], keys.dk[b], keys.desc)
    return before_i(keys.ik[a], keys.ik[b], keys.desc)


cdef void stable_merge_sort(int64_t* perm, int64_t* tmp, Py_ssize_t n, SortKeys* keys,
                            sorts_before_fn before) noexcept nogil:
    """Stable bottom-up merge sort of perm[0:n]: an element moves ahead of an earlier one only when
    ``before`` says it sorts strictly before it."""
    cdef Py_ssize_t width = 1, lo, mid, hi, a, b, o
    cdef int64_t* src = perm
    cdef int64_t* dst = tmp
    cdef int64_t* sw
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width if lo + width < n else n
            hi = lo + 2 * width if lo + 2 * width < n else n
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                if before(keys, src[b], src[a]):
                    dst[o] = src[b]
                    b += 1
                else:
                    dst[o] = src[a]
                    a += 1
                o += 1
            while a < mid:
                dst[o] = src[a]
                a += 1
                o += 1
            while b < hi:
                dst[o] = src[b]
                b += 1
                o += 1
            lo = hi
        sw = src
        src = dst
        dst = sw
        width *= 2
    if src != perm:
        memcpy(perm, src, n * sizeof(int64_t))


cdef void sort_buffers(Py_ssize_t n, Py_ssize_t nkeys, bint floating, int64_t** perm, int64_t** tmp,
                       double** dk, int64_t** ik) noexcept:
    """malloc a permutation of n and its merge buffer, and nkeys float (or int64) keys; a failure
    leaves NULL, for the caller to raise inside the try whose finally frees them all."""
    perm[0] = <int64_t*>malloc(n * sizeof(int64_t))
    tmp[0] = <int64_t*>malloc(n * sizeof(int64_t))
    if floating:
        dk[0] = <double*>malloc(nkeys * sizeof(double))
    else:
        ik[0] = <int64_t*>malloc(nkeys * sizeof(int64_t))


cdef void merge_sort(int64_t* perm, int64_t* tmp, Py_ssize_t n, double* dk, int64_t* ik, bint desc) noexcept nogil:
    """Stable sort of perm[0:n] by key (dk when not NULL, else ik)."""
    cdef SortKeys keys
    keys.dk, keys.ik, keys.m, keys.desc = dk, ik, 1, desc
    stable_merge_sort(perm, tmp, n, &keys, key_before)


cdef enum:
    ALG_STABLE = 0
    ALG_CPU_UNSTABLE = 1
    ALG_CPU_TOPK = 2
    ALG_CPU_TOPK_UNSORTED = 3

SORT_STABLE, SORT_CPU_UNSTABLE, SORT_CPU_TOPK, SORT_CPU_TOPK_UNSORTED = (ALG_STABLE, ALG_CPU_UNSTABLE, ALG_CPU_TOPK,
                                                                         ALG_CPU_TOPK_UNSORTED)


cdef int _sort_like_cpu(XIter* it, char** ptrs, Py_ssize_t n, Py_ssize_t kk, int dt, Py_ssize_t isz,
                        bint floating, bint desc, Py_ssize_t sv, Py_ssize_t si, Py_ssize_t ss,
                        int algorithm) except -1:
    """The unstable sort and the topk of CPU's kernels (_stdsort.pxi) on (key, position) pairs."""
    cdef SPair* q = <SPair*>malloc(max(n, 1) * sizeof(SPair))
    cdef Py_ssize_t e, i
    cdef char* base_v
    cdef char* base_i
    cdef char* base_s
    cdef int mode = (SD_DESC_FLOAT if desc else SD_ASC_FLOAT) if floating else (SD_DESC_INT if desc else SD_ASC_INT)
    if q == NULL:
        raise MemoryError("sort: cannot allocate the sort buffer")
    try:
        with nogil:
            while True:
                for e in range(it.shape[it.ndim - 1]):
                    base_v = ptrs[0] + e * it.strides[it.ndim - 1]
                    base_i = ptrs[1] + e * it.strides[MAX_RANK + it.ndim - 1]
                    base_s = ptrs[2] + e * it.strides[2 * MAX_RANK + it.ndim - 1]
                    for i in range(n):
                        q[i].pos = i
                        if floating:
                            q[i].d = ld_d(base_s + i * ss, dt)
                        else:
                            q[i].i = ld_i(base_s + i * ss, dt)
                    if algorithm == ALG_CPU_UNSTABLE:
                        std_sort(q, n, mode)
                    else:
                        cpu_topk(q, n, kk, algorithm == ALG_CPU_TOPK, mode)
                    for i in range(kk):
                        copy_elem(base_v + i * sv, base_s + q[i].pos * ss, isz)
                        ek_st_i64(base_i + i * si, q[i].pos)
                if not xiter_next_row(it, ptrs):
                    break
    finally:
        free(q)
    return 0


def sort(values_addr, values_strides, indices_addr, indices_strides, src_addr, dtype, src_strides, shape, dim,
         descending, k, algorithm=SORT_STABLE):
    """Sorts every slice of src along ``dim`` (ascending, or descending; NaN is the largest value);
    the first ``k`` sorted values and their int64 positions are written along ``dim`` of
    values / indices (k = the slice length for sort, k for topk). ``algorithm``: SORT_STABLE (a
    stable merge sort); SORT_CPU_UNSTABLE (CPU's std::sort, so ties come out in CPU's order);
    SORT_CPU_TOPK / SORT_CPU_TOPK_UNSORTED (CPU's topk selection, sorted or not)."""
    cdef int dt = check_dtype(dtype, "sort dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), n, kk = k, e, i, sv, si, ss
    cdef int d = dim, nd = len(shape)
    cdef bint desc = descending, floating = is_floating(dt)
    cdef XIter it
    cdef char* ptrs[3]
    cdef char* base_v
    cdef char* base_i
    cdef char* base_s
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    shape = tuple(shape)
    if not 0 <= d < nd or len(values_strides) != nd or len(indices_strides) != nd or len(src_strides) != nd:
        raise KernelArgumentError(f"sort: bad dim {dim!r} for shape {shape!r}")
    n = shape[d]
    if not 0 <= kk <= n:
        raise KernelArgumentError(f"sort: k {k!r} outside [0, {n}]")
    outer = shape[:d] + (1,) + shape[d + 1:]
    xiter_init(&it, outer, [list(values_strides), list(indices_strides), list(src_strides)], [isz, 8, isz], "sort")
    if it.size == 0 or kk == 0:
        return
    sv = <Py_ssize_t>values_strides[d] * isz
    si = <Py_ssize_t>indices_strides[d] * 8
    ss = <Py_ssize_t>src_strides[d] * isz
    ptrs[0] = as_ptr(values_addr, "sort values_addr")
    ptrs[1] = as_ptr(indices_addr, "sort indices_addr")
    ptrs[2] = as_ptr(src_addr, "sort src_addr")
    if algorithm != SORT_STABLE:
        if algorithm not in (SORT_CPU_UNSTABLE, SORT_CPU_TOPK, SORT_CPU_TOPK_UNSORTED):
            raise KernelArgumentError(f"sort: unknown algorithm {algorithm!r}")
        _sort_like_cpu(&it, ptrs, n, kk, dt, isz, floating, desc, sv, si, ss, algorithm)
        return
    sort_buffers(n, n, floating, &perm, &tmp, &dk, &ik)
    try:
        if perm == NULL or tmp == NULL or (dk == NULL and ik == NULL):
            raise MemoryError("sort: cannot allocate the sort buffers")
        with nogil:
            while True:
                for e in range(it.shape[it.ndim - 1]):
                    base_v = ptrs[0] + e * it.strides[it.ndim - 1]
                    base_i = ptrs[1] + e * it.strides[MAX_RANK + it.ndim - 1]
                    base_s = ptrs[2] + e * it.strides[2 * MAX_RANK + it.ndim - 1]
                    for i in range(n):
                        perm[i] = i
                        if floating:
                            dk[i] = ld_d(base_s + i * ss, dt)
                        else:
                            ik[i] = ld_i(base_s + i * ss, dt)
                    merge_sort(perm, tmp, n, dk, ik, desc)
                    for i in range(kk):
                        copy_elem(base_v + i * sv, base_s + perm[i] * ss, isz)
                        ek_st_i64(base_i + i * si, perm[i])
                if not xiter_next_row(&it, ptrs):
                    break
    finally:
        free(perm)
        free(tmp)
        free(dk)
        free(ik)


cdef inline bint same_d(double a, double b) noexcept nogil:
    return a == b                                 # NaN never equals; -0.0 equals 0.0


def isin(out_addr, out_strides, elem_addr, elem_dtype, elem_strides, shape, test_addr, test_dtype, test_strides,
         test_shape, compute_dtype, invert):
    """out[p] (bool) = (elem[p] is equal to some test element) xor invert, both cast to
    ``compute_dtype`` first (torch.result_type of the two): the test elements are sorted once,
    each element is a binary search."""
    cdef int edt = check_dtype(elem_dtype, "isin elem_dtype")
    cdef int tdt = check_dtype(test_dtype, "isin test_dtype")
    cdef int cdt = check_dtype(compute_dtype, "isin compute_dtype")
    cdef bint floating = is_floating(cdt), inv = invert, found
    cdef NdIter it, tit
    cdef char* ptrs[2]
    cdef char* tp[1]
    cdef Py_ssize_t m, k = 0, i, n, lo, hi, mid, so, se, ts
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    cdef double dv
    cdef int64_t iv
    iter_init(&it, shape, [list(out_strides), list(elem_strides)], [1, itemsize_of(edt)], "isin")
    iter_init(&tit, test_shape, [list(test_strides)], [itemsize_of(tdt)], "isin test")
    if it.size == 0:
        return
    m = tit.size
    perm = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    tmp = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    dk = <double*>malloc((m + 1) * sizeof(double))
    ik = <int64_t*>malloc((m + 1) * sizeof(int64_t))
    try:
        if perm == NULL or tmp == NULL or dk == NULL or ik == NULL:
            raise MemoryError("isin: cannot allocate the sorted test elements")
        ptrs[0] = as_ptr(out_addr, "isin out_addr")
        ptrs[1] = as_ptr(elem_addr, "isin elem_addr")
        if m:
            tp[0] = as_ptr(test_addr, "isin test_addr")
        with nogil:
            if m:
                ts = iter_row_stride(&tit, 0)
                while True:                       # gather the test elements, cast to compute dtype
                    for i in range(iter_row_len(&tit)):
                        if floating:
                            load_block(tp[0] + i * ts, 0, tdt, 1, &dv)
                            round_block_to(&dv, 1, cdt)
                            dk[k] = dv
                        else:
                            load_block(tp[0] + i * ts, 0, tdt, 1, &iv)
                            round_block_to(&iv, 1, cdt)
                            ik[k] = iv
                        perm[k] = k
                        k += 1
                    if not iter_next_row(&tit, tp):
                        break
                merge_sort(perm, tmp, m, dk if floating else NULL, ik, False)
            n = iter_row_len(&it)
            so = iter_row_stride(&it, 0)
            se = iter_row_stride(&it, 1)
            while True:
                for i in range(n):
                    found = False
                    if m:
                        lo, hi = 0, m             # first sorted test value >= the element
                        if floating:
                            load_block(ptrs[1] + i * se, 0, edt, 1, &dv)
                            round_block_to(&dv, 1, cdt)
                            if not isnan(dv):
                                while lo < hi:
                                    mid = lo + (hi - lo) // 2
                                    if dk[perm[mid]] < dv:
                                        lo = mid + 1
                                    else:
                                        hi = mid
                                found = lo < m and same_d(dk[perm[lo]], dv)
                        else:
                            load_block(ptrs[1] + i * se, 0, edt, 1, &iv)
                            round_block_to(&iv, 1, cdt)
                            while lo < hi:
                                mid = lo + (hi - lo) // 2
                                if ik[perm[mid]] < iv:
                                    lo = mid + 1
                                else:
                                    hi = mid
                            found = lo < m and ik[perm[lo]] == iv
                    (ptrs[0] + i * so)[0] = 1 if found != inv else 0
                if not iter_next_row(&it, ptrs):
                    break
    finally:
        free(perm)
        free(tmp)
        free(dk)
        free(ik)


cdef inline bint same_key(double* dk, int64_t* ik, int64_t a, int64_t b) noexcept nogil:
    if dk != NULL:
        return dk[a] == dk[b]                     # NaNs stay distinct, as CPU's unique
    return ik[a] == ik[b]


def unique(values_addr, inverse_addr, counts_addr, count_addr, src_addr, dtype, src_strides, shape, sort,
           want_inverse, want_counts):
    """Unique elements of src (C order over ``shape``): sorted (a stable sort; NaN last, each NaN
    its own value) when ``sort``, else runs of consecutive equal elements. Writes the values into
    values (contiguous, room for numel), the int64 inverse (contiguous over ``shape``) and counts
    (room for numel) when asked, and their number into count (one int64) for the host to read."""
    cdef int dt = check_dtype(dtype, "unique dtype")
    cdef Py_ssize_t isz = itemsize_of(dt), n, i, k, u = 0, e, ss
    cdef bint floating = is_floating(dt), sorting = sort, inv = want_inverse, cnt = want_counts
    cdef NdIter it
    cdef char* ptrs[1]
    cdef char* values
    cdef char* inverse = NULL
    cdef char* counts = NULL
    cdef char* src_elems
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    cdef int64_t run
    iter_init(&it, shape, [list(src_strides)], [isz], "unique")
    n = it.size
    if n == 0:
        ek_st_i64(as_ptr(count_addr, "unique count_addr"), 0)
        return
    values = as_ptr(values_addr, "unique values_addr")
    if inv:
        inverse = as_ptr(inverse_addr, "unique inverse_addr")
    if cnt:
        counts = as_ptr(counts_addr, "unique counts_addr")
    ptrs[0] = as_ptr(src_addr, "unique src_addr")
    sort_buffers(n, n, floating, &perm, &tmp, &dk, &ik)
    src_elems = <char*>malloc(n * isz)
    try:
        if perm == NULL or tmp == NULL or src_elems == NULL or (dk == NULL and ik == NULL):
            raise MemoryError("unique: cannot allocate the sort buffers")
        with nogil:
            k = 0
            ss = iter_row_stride(&it, 0)
            while True:                           # gather src (C order) and its keys
                for i in range(iter_row_len(&it)):
                    copy_elem(src_elems + k * isz, ptrs[0] + i * ss, isz)
                    if floating:
                        dk[k] = ld_d(ptrs[0] + i * ss, dt)
                    else:
                        ik[k] = ld_i(ptrs[0] + i * ss, dt)
                    perm[k] = k
                    k += 1
                if not iter_next_row(&it, ptrs):
                    break
            if sorting:
                merge_sort(perm, tmp, n, dk, ik, False)
            run = 0
            for e in range(n):
                if e > 0 and not same_key(dk, ik, perm[e], perm[e - 1]):
                    if cnt:
                        ek_st_i64(counts + (u - 1) * 8, run)
                    run = 0
                if e == 0 or run == 0:
                    copy_elem(values + u * isz, src_elems + perm[e] * isz, isz)
                    u += 1
                run += 1
                if inv:
                    ek_st_i64(inverse + perm[e] * 8, u - 1)
            if cnt:
                ek_st_i64(counts + (u - 1) * 8, run)
    finally:
        free(perm)
        free(tmp)
        free(src_elems)
        free(dk)
        free(ik)
    ek_st_i64(as_ptr(count_addr, "unique count_addr"), u)


cdef inline int slice_cmp(double* dk, int64_t* ik, Py_ssize_t m, int64_t a, int64_t b) noexcept nogil:
    """CPU's unique_dim order of slices a and b: lexicographic by < / > (a NaN pair is "equal"
    for the order, as CPU's comparator sees it)."""
    cdef Py_ssize_t i
    for i in range(m):
        if dk != NULL:
            if dk[a * m + i] < dk[b * m + i]:
                return -1
            if dk[a * m + i] > dk[b * m + i]:
                return 1
        else:
            if ik[a * m + i] < ik[b * m + i]:
                return -1
            if ik[a * m + i] > ik[b * m + i]:
                return 1
    return 0


cdef inline bint slice_equal(double* dk, int64_t* ik, Py_ssize_t m, int64_t a, int64_t b) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(m):
        if dk != NULL:
            if not dk[a * m + i] == dk[b * m + i]:   # NaN: never equal (CPU's at::equal)
                return False
        elif ik[a * m + i] != ik[b * m + i]:
            return False
    return True


cdef bint slice_before(SortKeys* keys, int64_t a, int64_t b) noexcept nogil:
    return slice_cmp(keys.dk, keys.ik, keys.m, a, b) < 0


cdef void slice_merge_sort(int64_t* perm, int64_t* tmp, Py_ssize_t n, Py_ssize_t m, double* dk,
                           int64_t* ik) noexcept nogil:
    """Stable sort of the slice numbers perm[0:n] by slice_cmp."""
    cdef SortKeys keys
    keys.dk, keys.ik, keys.m, keys.desc = dk, ik, m, False
    stable_merge_sort(perm, tmp, n, &keys, slice_before)


def unique_dim(firsts_addr, inverse_addr, counts_addr, count_addr, src_addr, dtype, src_strides, shape, sort):
    """Unique slices along dim 0 of src (the host moved the unique dim to the front): sorted
    (stable, CPU's lexicographic order) when ``sort``, else runs of consecutive equal slices.
    Writes for each unique slice the number of its first representative (firsts, int64, room
    for n), the int64 inverse (n) and counts (room for n), and their number into count; the host
    then gathers the output slices with index_select."""
    cdef int dt = check_dtype(dtype, "unique_dim dtype")
    cdef bint floating = is_floating(dt), sorting = sort
    cdef NdIter it
    cdef char* ptrs[1]
    cdef Py_ssize_t n, m, total, i, k = 0, u = 0, e, ss
    cdef int64_t* perm = NULL
    cdef int64_t* tmp = NULL
    cdef double* dk = NULL
    cdef int64_t* ik = NULL
    cdef char* firsts
    cdef char* inverse
    cdef char* counts
    cdef int64_t run = 0
    shape = tuple(shape)
    if len(shape) < 1:
        raise KernelArgumentError("unique_dim: need at least one dim")
    iter_init(&it, shape, [list(src_strides)], [itemsize_of(dt)], "unique_dim")
    n = shape[0]
    total = it.size
    if n == 0 or total == 0:
        raise KernelArgumentError("unique_dim: empty slices are handled by the host")
    m = total // n
    firsts = as_ptr(firsts_addr, "unique_dim firsts_addr")
    inverse = as_ptr(inverse_addr, "unique_dim inverse_addr")
    counts = as_ptr(counts_addr, "unique_dim counts_addr")
    ptrs[0] = as_ptr(src_addr, "unique_dim src_addr")
    sort_buffers(n, total, floating, &perm, &tmp, &dk, &ik)
    try:
        if perm == NULL or tmp == NULL or (dk == NULL and ik == NULL):
            raise MemoryError("unique_dim: cannot allocate the sort buffers")
        with nogil:
            ss = iter_row_stride(&it, 0)
            while True:                               # slice-major C order: element i of slice a at a*m + i
                for i in range(iter_row_len(&it)):
                    if floating:
                        dk[k] = ld_d(ptrs[0] + i * ss, dt)
                    else:
                        ik[k] = ld_i(ptrs[0] + i * ss, dt)
                    k += 1
                if not iter_next_row(&it, ptrs):
                    break
            for i in range(n):
                perm[i] = i
            if sorting:
                slice_merge_sort(perm, tmp, n, m, dk, ik)
            for e in range(n):
                if e == 0 or not slice_equal(dk, ik, m, perm[e], perm[e - 1]):
                    if e > 0:
                        ek_st_i64(counts + (u - 1) * 8, run)
                    ek_st_i64(firsts + u * 8, perm[e])
                    u += 1
                    run = 0
                run += 1
                ek_st_i64(inverse + perm[e] * 8, u - 1)
            ek_st_i64(counts + (u - 1) * 8, run)
    finally:
        free(perm)
        free(tmp)
        free(dk)
        free(ik)
    ek_st_i64(as_ptr(count_addr, "unique_dim count_addr"), u)
