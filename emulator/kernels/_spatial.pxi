# Operand helpers shared by the windowed kernels (convolution.pyx, pooling.pyx, resample.pyx,
# distance.pyx, embedding.pyx): argument parsing (extents, byte strides, dtype checks), the
# overlap test of the two-thread split, and the (N, C, H, W) ``Planes`` / (N, C, D, H, W) ``Vol``
# operand descriptors with their element addressing. Include after _common.pxi; needs
# malloc from libc.stdlib. No kernel lives here.


cdef inline bint _apart(const char* a, Py_ssize_t* sa, Py_ssize_t* ext_a, int na, int dta,
                        const char* b, Py_ssize_t* sb, Py_ssize_t* ext_b, int nb, int dtb) noexcept nogil:
    """The byte ranges of two strided operands (extents ext, byte strides s, dtypes dt) do not
    overlap; each range ends with its own last element (adjacent buffers are apart)."""
    cdef const char* lo_a = a
    cdef const char* hi_a = a + itemsize_of(dta)
    cdef const char* lo_b = b
    cdef const char* hi_b = b + itemsize_of(dtb)
    cdef int d
    for d in range(na):
        if sa[d] > 0:
            hi_a += sa[d] * (ext_a[d] - 1)
        else:
            lo_a += sa[d] * (ext_a[d] - 1)
    for d in range(nb):
        if sb[d] > 0:
            hi_b += sb[d] * (ext_b[d] - 1)
        else:
            lo_b += sb[d] * (ext_b[d] - 1)
    return hi_a <= lo_b or hi_b <= lo_a


cdef list _ints(object values, int n, str what):
    values = tuple(values)
    if len(values) != n:
        raise KernelArgumentError(f"{what}: expected {n} entries, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise KernelArgumentError(f"{what}: expected integers, got {values!r}")
        out.append(v.__index__())
    return out


cdef int _byte_strides(object strides, int n, int dt, Py_ssize_t* out, str what) except -1:
    cdef int i
    cdef list s = _ints(strides, n, what)
    for i in range(n):
        out[i] = <Py_ssize_t>s[i] * itemsize_of(dt)
    return 0


cdef int _shape(object shape, int n, Py_ssize_t* out, str what) except -1:
    cdef int i
    cdef list s = _ints(shape, n, what)
    for i in range(n):
        if s[i] < 0:
            raise KernelArgumentError(f"{what}: negative extent in {tuple(s)!r}")
        out[i] = s[i]
    return 0


cdef int _floating(int dt, str what) except -1:
    if not is_floating(dt):
        raise KernelArgumentError(f"{what}: {_DTYPE_NAMES[dt]} is not supported (floating dtypes only)")
    return 0


cdef struct Planes:
    Py_ssize_t N, C, H, W, OH, OW
    Py_ssize_t xs[4]       # the (N, C, H, W) operand, bytes
    Py_ssize_t ys[4]       # the (N, C, OH, OW) operand, bytes


cdef int _planes(Planes* p, object x_shape, object x_strides, int xdt, object y_shape, object y_strides,
                 int ydt, str what) except -1:
    cdef Py_ssize_t xsh[4]
    cdef Py_ssize_t ysh[4]
    _shape(x_shape, 4, xsh, what)
    _shape(y_shape, 4, ysh, what)
    if xsh[0] != ysh[0] or xsh[1] != ysh[1]:
        raise KernelArgumentError(f"{what}: batch/channel extents differ: {tuple(x_shape)!r} {tuple(y_shape)!r}")
    p.N, p.C, p.H, p.W, p.OH, p.OW = xsh[0], xsh[1], xsh[2], xsh[3], ysh[2], ysh[3]
    _byte_strides(x_strides, 4, xdt, p.xs, what)
    _byte_strides(y_strides, 4, ydt, p.ys, what)
    return 0


ctypedef fused cmp_t:
    double
    int64_t


cdef struct Vol:
    Py_ssize_t N, C, D, H, W, OD, OH, OW
    Py_ssize_t xs[5]       # the input operand (N, C, D, H, W), bytes
    Py_ssize_t ys[5]       # the output operand (N, C, OD, OH, OW), bytes


cdef int _vol(Vol* v, object x_shape, object x_strides, int xdt, object y_shape, object y_strides,
              int ydt, str what) except -1:
    cdef Py_ssize_t xsh[5]
    cdef Py_ssize_t ysh[5]
    _shape(x_shape, 5, xsh, what)
    _shape(y_shape, 5, ysh, what)
    if xsh[0] != ysh[0] or xsh[1] != ysh[1]:
        raise KernelArgumentError(f"{what}: batch/channel extents differ: {tuple(x_shape)!r} {tuple(y_shape)!r}")
    v.N, v.C, v.D, v.H, v.W = xsh[0], xsh[1], xsh[2], xsh[3], xsh[4]
    v.OD, v.OH, v.OW = ysh[2], ysh[3], ysh[4]
    _byte_strides(x_strides, 5, xdt, v.xs, what)
    _byte_strides(y_strides, 5, ydt, v.ys, what)
    return 0


cdef inline const char* _xat(Vol* v, const char* x, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t h,
                             Py_ssize_t w) noexcept nogil:
    return x + n * v.xs[0] + c * v.xs[1] + d * v.xs[2] + h * v.xs[3] + w * v.xs[4]


cdef inline char* _yat(Vol* v, char* y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t h,
                       Py_ssize_t w) noexcept nogil:
    return y + n * v.ys[0] + c * v.ys[1] + d * v.ys[2] + h * v.ys[3] + w * v.ys[4]


cdef void _store_plane(Vol* v, acc_t* acc, char* gi, int gdt, Py_ssize_t n, Py_ssize_t c) noexcept nogil:
    """Round the (D, H, W) accumulator into plane (n, c) of the input-shaped operand gi."""
    cdef Py_ssize_t d, h
    for d in range(v.D):
        for h in range(v.H):
            store_block(acc + (d * v.H + h) * v.W, v.W, gdt, <char*>_xat(v, gi, n, c, d, h, 0), v.xs[4])


cdef void* _plane_acc(Vol* v, int dt, str what) except NULL:
    cdef void* acc = malloc((v.D * v.H * v.W if v.D * v.H * v.W else 1) * (8 if dt == DT_FLOAT64 else 4))
    if acc == NULL:
        raise MemoryError(f"{what}: cannot allocate the accumulator")
    return acc


cdef inline const char* _ind_at(const char* ind, Py_ssize_t* is_, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d,
                                Py_ssize_t h, Py_ssize_t w) noexcept nogil:
    return ind + n * is_[0] + c * is_[1] + d * is_[2] + h * is_[3] + w * is_[4]


ctypedef fused real_t:
    float
    double
