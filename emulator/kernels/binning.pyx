# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Binning kernels of the device's vector engine: where values fall among sorted boundaries.

``search``: searchsorted / bucketize (CPU's lower/upper bound loops, optional sorter).

``histogram``: histc / histogram / histogramdd counts (linear bins, with or without CPU's local
search, or binary search over explicit edges), weights and density.

Numerics as CPU's: searchsorted compares both sides in the common dtype; the histogram's bin
arithmetic runs in its dtype (rounded after each step, as CPU's scalar_t), its sums in double,
rounded once.

Left out: complex dtypes, and any cost (emulator/kernels/library.py's cost model).
"""

from libc.stdlib cimport malloc, calloc, free
from libc.math cimport isnan, isinf, isfinite, log1p, log1pf, exp, expf, INFINITY, NAN

include "_common.pxi"


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
