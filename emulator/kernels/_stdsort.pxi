# The selection and sorting algorithms of the C++ standard library that CPU PyTorch's sort and
# topk kernels call (GNU libstdc++'s std::sort, std::nth_element and std::partial_sort: introsort,
# introselect and heap select), reproduced step for step over (key, position) pairs. Equal keys
# come out in the same order as on CPU, so argsort/topk indices agree with CPU's even on ties
# (a model at initialisation routes on tied scores, e.g. a zero-initialised MoE router).
#
# Keys are float64 for floating tensors (NaN ordered as CPU's comparators order it) or int64.
# The comparator ``less(a, b)`` is CPU's: ascending (!isnan(a) && isnan(b)) || a < b, descending
# (isnan(a) && !isnan(b)) || a > b.

from libc.math cimport isnan

cdef struct SPair:
    double d
    int64_t i
    int64_t pos

cdef enum:
    SD_ASC_FLOAT = 0
    SD_DESC_FLOAT = 1
    SD_ASC_INT = 2
    SD_DESC_INT = 3

cdef enum:
    S_THRESHOLD = 16


cdef inline bint sp_less(SPair* a, SPair* b, int mode) noexcept nogil:
    if mode == SD_ASC_FLOAT:
        return (not isnan(a.d) and isnan(b.d)) or a.d < b.d
    if mode == SD_DESC_FLOAT:
        return (isnan(a.d) and not isnan(b.d)) or a.d > b.d
    if mode == SD_ASC_INT:
        return a.i < b.i
    return a.i > b.i


cdef inline void sp_swap(SPair* a, SPair* b) noexcept nogil:
    cdef SPair t = a[0]
    a[0] = b[0]
    b[0] = t


cdef inline Py_ssize_t sp_lg(Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t r = -1
    while n > 0:
        n >>= 1
        r += 1
    return r


# -- heaps (stl_heap.h) -------------------------------------------------------------------------
cdef void sp_push_heap(SPair* first, Py_ssize_t hole, Py_ssize_t top, SPair value, int mode) noexcept nogil:
    cdef Py_ssize_t parent = (hole - 1) // 2
    while hole > top and sp_less(first + parent, &value, mode):
        first[hole] = first[parent]
        hole = parent
        parent = (hole - 1) // 2
    first[hole] = value


cdef void sp_adjust_heap(SPair* first, Py_ssize_t hole, Py_ssize_t length, SPair value, int mode) noexcept nogil:
    cdef Py_ssize_t top = hole, child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if sp_less(first + child, first + (child - 1), mode):
            child -= 1
        first[hole] = first[child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        first[hole] = first[child - 1]
        hole = child - 1
    sp_push_heap(first, hole, top, value, mode)


cdef void sp_make_heap(SPair* first, Py_ssize_t length, int mode) noexcept nogil:
    cdef Py_ssize_t parent
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        sp_adjust_heap(first, parent, length, first[parent], mode)
        if parent == 0:
            return
        parent -= 1


cdef inline void sp_pop_heap(SPair* first, Py_ssize_t length, SPair* result, int mode) noexcept nogil:
    cdef SPair value = result[0]
    result[0] = first[0]
    sp_adjust_heap(first, 0, length, value, mode)


cdef void sp_heap_select(SPair* first, Py_ssize_t middle, Py_ssize_t last, int mode) noexcept nogil:
    cdef Py_ssize_t i
    sp_make_heap(first, middle, mode)
    for i in range(middle, last):
        if sp_less(first + i, first, mode):
            sp_pop_heap(first, middle, first + i, mode)


cdef void sp_sort_heap(SPair* first, Py_ssize_t last, int mode) noexcept nogil:
    while last > 1:
        last -= 1
        sp_pop_heap(first, last, first + last, mode)


# -- insertion sorts and partitions (stl_algo.h) --------------------------------------------------
cdef inline void sp_unguarded_linear_insert(SPair* last, int mode) noexcept nogil:
    cdef SPair value = last[0]
    cdef SPair* nxt = last - 1
    while sp_less(&value, nxt, mode):
        last[0] = nxt[0]
        last = nxt
        nxt -= 1
    last[0] = value


cdef void sp_insertion_sort(SPair* first, SPair* last, int mode) noexcept nogil:
    cdef SPair* i
    cdef SPair value
    cdef SPair* j
    if first == last:
        return
    i = first + 1
    while i != last:
        if sp_less(i, first, mode):
            value = i[0]
            j = i
            while j != first:            # move_backward(first, i, i + 1)
                j[0] = (j - 1)[0]
                j -= 1
            first[0] = value
        else:
            sp_unguarded_linear_insert(i, mode)
        i += 1


cdef void sp_final_insertion_sort(SPair* first, SPair* last, int mode) noexcept nogil:
    cdef SPair* i
    if last - first > S_THRESHOLD:
        sp_insertion_sort(first, first + S_THRESHOLD, mode)
        i = first + S_THRESHOLD
        while i != last:
            sp_unguarded_linear_insert(i, mode)
            i += 1
    else:
        sp_insertion_sort(first, last, mode)


cdef void sp_move_median_to_first(SPair* result, SPair* a, SPair* b, SPair* c, int mode) noexcept nogil:
    if sp_less(a, b, mode):
        if sp_less(b, c, mode):
            sp_swap(result, b)
        elif sp_less(a, c, mode):
            sp_swap(result, c)
        else:
            sp_swap(result, a)
    elif sp_less(a, c, mode):
        sp_swap(result, a)
    elif sp_less(b, c, mode):
        sp_swap(result, c)
    else:
        sp_swap(result, b)


cdef SPair* sp_unguarded_partition(SPair* first, SPair* last, SPair* pivot, int mode) noexcept nogil:
    while True:
        while sp_less(first, pivot, mode):
            first += 1
        last -= 1
        while sp_less(pivot, last, mode):
            last -= 1
        if not first < last:
            return first
        sp_swap(first, last)
        first += 1


cdef inline SPair* sp_unguarded_partition_pivot(SPair* first, SPair* last, int mode) noexcept nogil:
    cdef SPair* mid = first + (last - first) // 2
    sp_move_median_to_first(first, first + 1, mid, last - 1, mode)
    return sp_unguarded_partition(first + 1, last, first, mode)


cdef void sp_introsort_loop(SPair* first, SPair* last, Py_ssize_t depth, int mode) noexcept nogil:
    cdef SPair* cut
    while last - first > S_THRESHOLD:
        if depth == 0:
            sp_heap_select(first, last - first, last - first, mode)   # partial_sort(first, last, last)
            sp_sort_heap(first, last - first, mode)
            return
        depth -= 1
        cut = sp_unguarded_partition_pivot(first, last, mode)
        sp_introsort_loop(cut, last, depth, mode)
        last = cut


# -- the three entry points ------------------------------------------------------------------------
cdef void std_sort(SPair* first, Py_ssize_t n, int mode) noexcept nogil:
    """std::sort(first, first + n, less)."""
    if n < 2:
        return
    sp_introsort_loop(first, first + n, sp_lg(n) * 2, mode)
    sp_final_insertion_sort(first, first + n, mode)


cdef void std_nth_element(SPair* first, Py_ssize_t nth, Py_ssize_t n, int mode) noexcept nogil:
    """std::nth_element(first, first + nth, first + n, less)."""
    cdef SPair* lo = first
    cdef SPair* hi = first + n
    cdef SPair* pos = first + nth
    cdef SPair* cut
    cdef Py_ssize_t depth
    if n == 0 or nth == n:
        return
    depth = sp_lg(n) * 2
    while hi - lo > 3:
        if depth == 0:
            sp_heap_select(lo, pos - lo + 1, hi - lo, mode)
            sp_swap(lo, pos)
            return
        depth -= 1
        cut = sp_unguarded_partition_pivot(lo, hi, mode)
        if cut <= pos:
            lo = cut
        else:
            hi = cut
    sp_insertion_sort(lo, hi, mode)


cdef void std_partial_sort(SPair* first, Py_ssize_t middle, Py_ssize_t n, int mode) noexcept nogil:
    """std::partial_sort(first, first + middle, first + n, less)."""
    sp_heap_select(first, middle, n, mode)
    sp_sort_heap(first, middle, mode)


cdef void cpu_topk(SPair* q, Py_ssize_t n, Py_ssize_t k, bint sorted_, int mode) noexcept nogil:
    """CPU's topk_impl_loop: partial_sort when k * 64 <= n, else nth_element at k - 1 and (when
    sorted) std::sort of the first k - 1."""
    if k == 0:
        return
    if k * 64 <= n:
        std_partial_sort(q, k, n, mode)
    else:
        std_nth_element(q, k - 1, n, mode)
        if sorted_:
            std_sort(q, k - 1, mode)
