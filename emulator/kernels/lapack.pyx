# cython: language_level=3, boundscheck=False, wraparound=True, cdivision=True
# (wraparound stays on: shapes arrive as Python tuples indexed from the end; no C array is.)
"""Dense linear algebra of the device (LAPACK class): LU, Cholesky, LDL^T, QR, Householder
products, symmetric and general eigendecomposition, SVD, least squares and triangular solves.

Each batch matrix is copied from device memory (any dtype the converters read, any strides,
0 strides for broadcast batch dimensions) into a column-major float32/float64 scratch buffer,
handed to the host LAPACK (scipy.linalg.cython_lapack / cython_blas), and written back with the
output's strides.  The routines are the ones ATen's CPU backend calls for each op (getrf, getrs,
potrf, potrs, potri, sytrf, sytrs, geqrf, orgqr, ormqr, syevd, gesdd, geev, gelsy/gels/gelsd/
gelss, trsm), with the same job and uplo arguments, so results -- including the signs and
phases that SVD, eigh, QR and eig leave free -- come out as on CPU.

float32 operands run the single-precision routines and float64 the double ones, as CPU does.
Integer results (pivots, info, rank) are stored with the output's dtype (int32 or int64).
Complex outputs (eig) are written as (re, im) pairs to complex64/complex128 storage.

Errors: LAPACK's info codes are written to info outputs, never raised here; the op layer
decides whether to raise (after a host sync).  Bad arguments raise KernelArgumentError.

Left out: complex inputs, tiling and timing (the cost model lives in library.py).
"""

from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset
from libc.math cimport fabs, log, copysign
from scipy.linalg.cython_lapack cimport (sgetrf, dgetrf, sgetrs, dgetrs, spotrf, dpotrf, spotrs, dpotrs,
                                         spotri, dpotri, ssytrf, dsytrf, ssytrs, dsytrs, sgeqrf, dgeqrf,
                                         sorgqr, dorgqr, sormqr, dormqr, ssyevd, dsyevd, sgesdd, dgesdd,
                                         sgeev, dgeev, sgelsy, dgelsy, sgels, dgels, sgelsd, dgelsd,
                                         sgelss, dgelss)
from scipy.linalg.cython_blas cimport strsm, dtrsm

include "_common.pxi"

ctypedef fused real_t:
    float
    double


cdef struct Mat:
    char* p          # element [0, ..., 0]
    int dt
    Py_ssize_t s0    # byte stride of the row index (second-to-last core dim, or the vector dim)
    Py_ssize_t s1    # byte stride of the column index (last core dim)
    Py_ssize_t* off  # byte offset of each batch entry


cdef int _mat(Mat* m, object op, tuple batch, int core, str what) except -1:
    """Describe operand ``op`` = (addr, dtype, shape, strides) whose shape is batch + ``core``
    trailing dims.  None: an absent operand (m.p = NULL)."""
    cdef Py_ssize_t count = 1, i, k, isz
    cdef int nb = len(batch)
    m.p = NULL
    m.off = NULL
    m.s0 = m.s1 = 0
    if op is None:
        return 0
    addr, dtype, shape, strides = op
    shape, strides = tuple(shape), tuple(strides)
    m.dt = check_storage_dtype(dtype, what)
    if len(shape) != nb + core or len(strides) != nb + core or tuple(shape[:nb]) != batch:
        raise KernelArgumentError(f"lapack: {what} has shape {shape}, expected batch {batch} + {core} dims")
    isz = itemsize_of(m.dt)
    if core >= 1:
        m.s0 = <Py_ssize_t>strides[nb] * isz
    if core == 2:
        m.s1 = <Py_ssize_t>strides[nb + 1] * isz
    for n in batch:
        count *= n
    if count == 0 or any(n == 0 for n in shape):
        return 0
    m.p = as_ptr(addr, what)
    m.off = <Py_ssize_t*>malloc(max(count, 1) * sizeof(Py_ssize_t))
    if m.off == NULL:
        raise MemoryError("lapack: could not allocate batch offsets")
    idx = [0] * nb
    for i in range(count):
        off = 0
        for k in range(nb):
            off += idx[k] * strides[k]
        m.off[i] = off * isz
        for k in range(nb - 1, -1, -1):
            idx[k] += 1
            if idx[k] < batch[k]:
                break
            idx[k] = 0
    return 0


cdef void _free(Mat* m) noexcept:
    free(m.off)
    m.off = NULL


cdef inline char* _at(Mat* m, Py_ssize_t b) noexcept nogil:
    return m.p + m.off[b]


cdef void _load(Mat* m, Py_ssize_t b, Py_ssize_t rows, Py_ssize_t cols, real_t* dst, Py_ssize_t ld) noexcept nogil:
    """dst (column-major, leading dimension ld) = m[b][:rows, :cols]."""
    cdef Py_ssize_t j
    cdef char* p
    if m.p == NULL or rows == 0:
        return
    p = _at(m, b)
    for j in range(cols):
        load_block(p + j * m.s1, m.s0, m.dt, rows, dst + j * ld)


cdef void _store(const real_t* src, Py_ssize_t ld, Mat* m, Py_ssize_t b, Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t j
    cdef char* p
    if m.p == NULL or rows == 0:
        return
    p = _at(m, b)
    for j in range(cols):
        store_block(src + j * ld, rows, m.dt, p + j * m.s1, m.s0)


cdef void _store_vec(const real_t* src, Mat* m, Py_ssize_t b, Py_ssize_t n) noexcept nogil:
    if m.p == NULL or n == 0:
        return
    store_block(src, n, m.dt, _at(m, b), m.s0)


cdef void _store_ints(const int* src, Mat* m, Py_ssize_t b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t v
    cdef char* p
    if m.p == NULL or n == 0:
        return
    p = _at(m, b)
    for i in range(n):
        v = src[i]
        store_block(&v, 1, m.dt, p + i * m.s0, 0)


cdef void _store_int(int value, Mat* m, Py_ssize_t b) noexcept nogil:
    cdef int64_t v = value
    if m.p != NULL:
        store_block(&v, 1, m.dt, _at(m, b), 0)


cdef void _load_ints(Mat* m, Py_ssize_t b, Py_ssize_t n, int* dst) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t v
    cdef char* p
    if m.p == NULL or n == 0:
        return
    p = _at(m, b)
    for i in range(n):
        load_block(p + i * m.s0, 0, m.dt, 1, &v)
        dst[i] = <int>v


cdef void _zero_triangle(real_t* a, Py_ssize_t ld, Py_ssize_t rows, Py_ssize_t cols, bint keep_upper) noexcept nogil:
    """Zero the strict lower (keep_upper) or strict upper triangle of a column-major matrix."""
    cdef Py_ssize_t i, j
    for j in range(cols):
        for i in range(rows):
            if (keep_upper and i > j) or (not keep_upper and i < j):
                a[i + j * ld] = 0


cdef Py_ssize_t _count(tuple batch):
    cdef Py_ssize_t c = 1
    for n in batch:
        c *= n
    return c


cdef int _int(object v, str what) except? -1:
    if not hasattr(v, "__index__") or not 0 <= v < 2**31:
        raise KernelArgumentError(f"lapack: {what} must be an int in [0, 2**31), got {v!r}")
    return v


cdef int _real_kind(int dt, str op) except -1:
    if dt != DT_FLOAT32 and dt != DT_FLOAT64:
        raise KernelArgumentError(f"{op}: the LAPACK kernels take float32 or float64, got {_DTYPE_NAMES[dt]}")
    return dt


def _shape(op):
    return tuple(op[2])


# ---------------------------------------------------------------------------------------------
# Launching: every def below only parses its scalars into a Job and names its operands; one
# launcher validates the operands, picks the float or double instance of the kernel and frees
# the batch offsets, so that every routine checks and reports in one way.

cdef enum Routine:
    R_GETRF, R_GETRS, R_LU_UNPACK, R_LU_DET, R_POTRF, R_POTRS, R_POTRI, R_SYTRF, R_SYTRS,
    R_QR, R_ORGQR, R_ORMQR, R_SYEVD, R_GESDD, R_GEEV, R_TRSM, R_GELS

cdef enum:
    MAX_OPERANDS = 5          # the most operands a routine takes (lu_unpack, gels)


cdef struct Job:
    Routine routine
    int m, n, k, nrhs        # problem sizes, each routine reads the ones its kernel takes
    int qcols, rrows         # qr: the columns of Q and the rows of R asked for
    int a_rows               # ormqr: rows of the reflector matrix
    int na                   # trsm: order of the triangular matrix
    int driver               # gels: 0 gelsy, 1 gels, 2 gelsd, 3 gelss
    double rcond             # gels
    char side, uplo, trans, diag
    bint flag                # upper (potrf/potri/syevd), full (gesdd), logabs (lu_det)


cdef Mat _NO_PIVOTS         # an absent operand (p = NULL, as C zeroes globals): potrs and trsm have none


cdef int _run(real_t kind, Job* j, Mat* o, Py_ssize_t count) noexcept nogil:
    """The table of kernels: routine -> its kernel on the operands in the def's order."""
    if j.routine == R_GETRF:
        return _getrf(kind, &o[0], &o[1], &o[2], &o[3], count, j.m, j.n)
    if j.routine == R_GETRS:
        return _solve(kind, j, &o[0], &o[1], &o[2], &o[3], count, j.n, j.n, j.nrhs)
    if j.routine == R_LU_UNPACK:
        return _lu_unpack(kind, &o[0], &o[1], &o[2], &o[3], &o[4], count, j.m, j.n)
    if j.routine == R_LU_DET:
        return _lu_det(kind, &o[0], &o[1], &o[2], &o[3], count, j.n, j.flag)
    if j.routine == R_POTRF:
        return _potrf(kind, &o[0], &o[1], &o[2], count, j.n, j.flag)
    if j.routine == R_POTRS:
        return _solve(kind, j, &o[0], &_NO_PIVOTS, &o[1], &o[2], count, j.n, j.n, j.nrhs)
    if j.routine == R_POTRI:
        return _potri(kind, &o[0], &o[1], count, j.n, j.flag)
    if j.routine == R_SYTRF:
        return _sytrf(kind, &o[0], &o[1], &o[2], &o[3], count, j.n)
    if j.routine == R_SYTRS:
        return _solve(kind, j, &o[0], &o[1], &o[2], &o[3], count, j.n, j.n, j.nrhs)
    if j.routine == R_QR:
        return _qr(kind, &o[0], &o[1], &o[2], &o[3], count, j.m, j.n, j.qcols, j.rrows)
    if j.routine == R_ORGQR:
        return _orgqr(kind, &o[0], &o[1], &o[2], count, j.m, j.n, j.k)
    if j.routine == R_ORMQR:
        return _ormqr(kind, &o[0], &o[1], &o[2], &o[3], count, j.a_rows, j.k, j.m, j.n, j.side, j.trans)
    if j.routine == R_SYEVD:
        return _syevd(kind, &o[0], &o[1], &o[2], count, j.n, j.flag)
    if j.routine == R_GESDD:
        return _gesdd(kind, &o[0], &o[1], &o[2], &o[3], count, j.m, j.n, j.flag)
    if j.routine == R_GEEV:
        return _geev(kind, &o[0], &o[1], &o[2], count, j.n)
    if j.routine == R_TRSM:
        return _solve(kind, j, &o[0], &_NO_PIVOTS, &o[1], &o[2], count, j.na, j.m, j.n)
    return _gels(kind, &o[0], &o[1], &o[2], &o[3], &o[4], count, j.m, j.n, j.nrhs, j.driver, j.rcond)


cdef Job _job(Routine routine):
    cdef Job j
    memset(&j, 0, sizeof(Job))
    j.routine = routine
    return j


cdef int _open(Mat* mats, tuple operands, tuple batch, str name) except -1:
    """Describe each (what, operand, core dims) of ``operands`` into mats[i]; every slot starts
    empty so that _close may run whichever of them failed."""
    cdef int i
    for i in range(MAX_OPERANDS):
        memset(&mats[i], 0, sizeof(Mat))
    for i, (what, op, core) in enumerate(operands):
        _mat(&mats[i], op, batch, core, f"{name} {what}")
    return 0


cdef void _close(Mat* mats) noexcept:
    cdef int i
    for i in range(MAX_OPERANDS):
        _free(&mats[i])


cdef int _dispatch(Job* job, Mat* mats, Py_ssize_t count, int dt, str name) except -1:
    """Run the job's kernel in dt's precision (float32 or float64) without the GIL."""
    cdef int rc
    if _real_kind(dt, name) == DT_FLOAT32:
        with nogil:
            rc = _run(<float>0, job, mats, count)
    else:
        with nogil:
            rc = _run(<double>0, job, mats, count)
    if rc != 0:
        raise MemoryError(f"{name}: could not allocate scratch")
    return 0


cdef int _launch(Job* job, str name, tuple batch, tuple operands, int kind_of, bint nothing_to_do) except -1:
    """Validate ``operands`` (see _open), then, unless the batch is empty or ``nothing_to_do``,
    run the job in the precision of operand ``kind_of``."""
    cdef Mat mats[MAX_OPERANDS]
    cdef Py_ssize_t count = _count(batch)
    try:
        _open(mats, operands, batch, name)
        if count == 0 or nothing_to_do:
            return 0
        _dispatch(job, mats, count, mats[kind_of].dt, name)
    finally:
        _close(mats)
    return 0


# ---------------------------------------------------------------------------------------------
# Solves with a factored or triangular A: getrs, sytrs, potrs, trsm (one batch loop)

cdef int _solve(real_t kind, Job* j, Mat* fac, Mat* piv, Mat* rhs, Mat* x, Py_ssize_t count, int na, int m,
                int n) noexcept nogil:
    """x = op(A)^-1 rhs per batch entry, A (na x na) a factor or a triangle, rhs (m x n): getrs of
    getrf's LU or sytrs of sytrf's LDL^T (with piv), potrs of a Cholesky factor, or trsm (side
    left: m = na, right: n = na), as j.routine says, with the job's trans/uplo/side/diag."""
    cdef int lda = na if na > 1 else 1, ldb = m if m > 1 else 1, inf = 0
    cdef real_t one = 1
    cdef real_t* a = <real_t*>malloc(<size_t>(na * na if na > 0 else 1) * sizeof(real_t))
    cdef real_t* bb = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef int* ipiv = <int*>malloc(<size_t>(na if na > 0 else 1) * sizeof(int))
    cdef Py_ssize_t b
    if a == NULL or bb == NULL or ipiv == NULL:
        free(a); free(bb); free(ipiv)
        return -1
    for b in range(count):
        _load(fac, b, na, na, a, lda)
        _load_ints(piv, b, na, ipiv)          # nothing for potrs and trsm (no pivots)
        _load(rhs, b, m, n, bb, ldb)
        if j.routine == R_GETRS:
            if real_t is float:
                sgetrs(&j.trans, &na, &n, a, &lda, ipiv, bb, &ldb, &inf)
            else:
                dgetrs(&j.trans, &na, &n, a, &lda, ipiv, bb, &ldb, &inf)
        elif j.routine == R_SYTRS:
            if real_t is float:
                ssytrs(&j.uplo, &na, &n, a, &lda, ipiv, bb, &ldb, &inf)
            else:
                dsytrs(&j.uplo, &na, &n, a, &lda, ipiv, bb, &ldb, &inf)
        elif j.routine == R_POTRS:
            if real_t is float:
                spotrs(&j.uplo, &na, &n, a, &lda, bb, &ldb, &inf)
            else:
                dpotrs(&j.uplo, &na, &n, a, &lda, bb, &ldb, &inf)
        elif real_t is float:
            strsm(&j.side, &j.uplo, &j.trans, &j.diag, &m, &n, &one, a, &lda, bb, &ldb)
        else:
            dtrsm(&j.side, &j.uplo, &j.trans, &j.diag, &m, &n, &one, a, &lda, bb, &ldb)
        _store(bb, ldb, x, b, m, n)
    free(a); free(bb); free(ipiv)
    return 0


# ---------------------------------------------------------------------------------------------
# LU: getrf / getrs

cdef int _getrf(real_t kind, Mat* a, Mat* lu, Mat* piv, Mat* info, Py_ssize_t count, int m, int n) noexcept nogil:
    cdef int lda = m if m > 1 else 1, k = m if m < n else n, inf = 0
    cdef real_t* buf = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef int* ipiv = <int*>malloc(<size_t>(k if k > 0 else 1) * sizeof(int))
    cdef Py_ssize_t b
    if buf == NULL or ipiv == NULL:
        free(buf)
        free(ipiv)
        return -1
    for b in range(count):
        inf = 0
        if k > 0:
            _load(a, b, m, n, buf, lda)
            if real_t is float:
                sgetrf(&m, &n, buf, &lda, ipiv, &inf)
            else:
                dgetrf(&m, &n, buf, &lda, ipiv, &inf)
            _store(buf, lda, lu, b, m, n)
            _store_ints(ipiv, piv, b, k)
        _store_int(inf, info, b)
    free(buf)
    free(ipiv)
    return 0


def getrf(batch, a, lu, piv, info):
    """LU with partial pivoting of a (batch + (m, n)); writes lu (same shape, may alias a),
    piv (batch + (min(m, n),), 1-based as LAPACK) and info (batch)."""
    cdef Job job = _job(R_GETRF)
    batch = tuple(batch)
    job.m, job.n = [_int(v, "m/n") for v in _shape(a)[-2:]]
    _launch(&job, "getrf", batch, (("a", a, 2), ("lu", lu, 2), ("piv", piv, 1), ("info", info, 0)),
            1, False)


def getrs(batch, lu, piv, rhs, x, adjoint):
    """x = A^-1 rhs (A^-T rhs when adjoint) from getrf's lu/piv; rhs and x are batch + (n, k)."""
    cdef Job job = _job(R_GETRS)
    job.trans = b'T' if adjoint else b'N'
    batch = tuple(batch)
    job.n = _int(_shape(lu)[-1], "n")
    job.nrhs = _int(_shape(rhs)[-1], "nrhs")
    _launch(&job, "getrs", batch, (("lu", lu, 2), ("piv", piv, 1), ("rhs", rhs, 2), ("x", x, 2)),
            3, job.n == 0 or job.nrhs == 0)


cdef int _lu_unpack(real_t kind, Mat* lu, Mat* piv, Mat* P, Mat* L, Mat* U, Py_ssize_t count,
                    int m, int n) noexcept nogil:
    cdef int k = m if m < n else n
    cdef Py_ssize_t b, i, j, t
    cdef real_t* a = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef real_t* w = <real_t*>malloc(<size_t>(m * (m if m > n else n) + 1) * sizeof(real_t))
    cdef int* ipiv = <int*>malloc(<size_t>(k + 1) * sizeof(int))
    cdef int* perm = <int*>malloc(<size_t>(m + 1) * sizeof(int))
    cdef int tmp
    if a == NULL or w == NULL or ipiv == NULL or perm == NULL:
        free(a); free(w); free(ipiv); free(perm)
        return -1
    for b in range(count):
        if L.p != NULL or U.p != NULL:
            _load(lu, b, m, n, a, m)
        if L.p != NULL:      # L: m x k, unit lower
            for j in range(k):
                for i in range(m):
                    w[i + j * m] = 1 if i == j else (a[i + j * m] if i > j else 0)
            _store(w, m, L, b, m, k)
        if U.p != NULL:      # U: k x n, upper
            for j in range(n):
                for i in range(k):
                    w[i + j * k] = a[i + j * m] if i <= j else 0
            _store(w, k if k > 0 else 1, U, b, k, n)
        if P.p != NULL:      # P such that A = P L U: P[perm[i], i] = 1
            _load_ints(piv, b, k, ipiv)
            for i in range(m):
                perm[i] = <int>i
            for i in range(k):
                t = ipiv[i] - 1
                if 0 <= t < m:
                    tmp = perm[i]; perm[i] = perm[t]; perm[t] = tmp
            for i in range(m * m):
                w[i] = 0
            for i in range(m):
                w[perm[i] + i * m] = 1
            _store(w, m, P, b, m, m)
    free(a); free(w); free(ipiv); free(perm)
    return 0


def lu_unpack(batch, lu, piv, P, L, U):
    """P (batch + (m, m)), L (m, k), U (k, n) from getrf's lu/piv; absent outputs are None."""
    cdef Job job = _job(R_LU_UNPACK)
    batch = tuple(batch)
    job.m, job.n = [_int(v, "m/n") for v in _shape(lu)[-2:]]
    _launch(&job, "lu_unpack", batch,
            (("lu", lu, 2), ("piv", piv, 1), ("P", P, 2), ("L", L, 2), ("U", U, 2)),
            0 if lu is not None else 2, job.m == 0)


cdef int _lu_det(real_t kind, Mat* lu, Mat* piv, Mat* sign, Mat* value, Py_ssize_t count, int n,
                 bint logabs) noexcept nogil:
    """det = prod(diag(LU)) * (-1)^swaps, or sign and log|det| (slogdet)."""
    cdef Py_ssize_t b, i
    cdef int* ipiv = <int*>malloc(<size_t>(n + 1) * sizeof(int))
    cdef real_t d, acc, s, x
    cdef real_t* diag = <real_t*>malloc(<size_t>(n + 1) * sizeof(real_t))
    if ipiv == NULL or diag == NULL:
        free(ipiv); free(diag)
        return -1
    for b in range(count):
        _load_ints(piv, b, n, ipiv)
        load_block(_at(lu, b), lu.s0 + lu.s1, lu.dt, n, diag)
        s = 1
        for i in range(n):
            if ipiv[i] != i + 1:
                s = -s
        if logabs:
            acc = 0
            for i in range(n):
                x = diag[i]
                if x < 0:
                    s = -s
                elif x == 0:
                    s = 0
                elif x != x:
                    s = x
                acc += log(fabs(x))
            store_block(&s, 1, sign.dt, _at(sign, b), 0)
            store_block(&acc, 1, value.dt, _at(value, b), 0)
        else:
            acc = s
            for i in range(n):
                acc = acc * diag[i]
            store_block(&acc, 1, value.dt, _at(value, b), 0)
    free(ipiv); free(diag)
    return 0


def lu_det(batch, lu, piv, sign, value):
    """det (sign None) or slogdet (sign and log|det|) from getrf's square lu/piv."""
    cdef Job job = _job(R_LU_DET)
    cdef Mat mats[MAX_OPERANDS]
    cdef Py_ssize_t count
    batch = tuple(batch)
    job.n = _int(_shape(lu)[-1], "n")
    job.flag = sign is not None
    count = _count(batch)
    try:
        _open(mats, (("lu", lu, 2), ("piv", piv, 1), ("sign", sign, 0), ("value", value, 0)), batch, "lu_det")
        if count == 0:
            return
        if job.n == 0:
            raise KernelArgumentError("lu_det: empty matrices are handled by the op layer")
        _dispatch(&job, mats, count, mats[0].dt, "lu_det")
    finally:
        _close(mats)


# ---------------------------------------------------------------------------------------------
# Cholesky: potrf / potrs / potri

cdef int _potrf(real_t kind, Mat* a, Mat* out, Mat* info, Py_ssize_t count, int n, bint upper) noexcept nogil:
    cdef int ld = n if n > 1 else 1, inf = 0
    cdef char uplo = b'U' if upper else b'L'
    cdef real_t* buf = <real_t*>malloc(<size_t>(n * n if n > 0 else 1) * sizeof(real_t))
    cdef Py_ssize_t b
    if buf == NULL:
        return -1
    for b in range(count):
        inf = 0
        if n > 0:
            _load(a, b, n, n, buf, ld)
            if real_t is float:
                spotrf(&uplo, &n, buf, &ld, &inf)
            else:
                dpotrf(&uplo, &n, buf, &ld, &inf)
            _zero_triangle(buf, ld, n, n, upper)
            _store(buf, ld, out, b, n, n)
        _store_int(inf, info, b)
    free(buf)
    return 0


def potrf(batch, a, out, info, upper):
    """Cholesky factor (lower L, or upper U when upper) of batch + (n, n); the other triangle is
    zeroed; info (batch, may be None) gets LAPACK's info."""
    cdef Job job = _job(R_POTRF)
    job.flag = bool(upper)
    batch = tuple(batch)
    job.n = _int(_shape(a)[-1], "n")
    _launch(&job, "potrf", batch, (("a", a, 2), ("out", out, 2), ("info", info, 0)), 1, False)


def potrs(batch, L, rhs, x, upper):
    """x = (L L^T)^-1 rhs (U^T U when upper)."""
    cdef Job job = _job(R_POTRS)
    job.uplo = b'U' if upper else b'L'
    batch = tuple(batch)
    job.n = _int(_shape(L)[-1], "n")
    job.nrhs = _int(_shape(rhs)[-1], "nrhs")
    _launch(&job, "potrs", batch, (("L", L, 2), ("rhs", rhs, 2), ("x", x, 2)),
            2, job.n == 0 or job.nrhs == 0)


cdef int _potri(real_t kind, Mat* L, Mat* out, Py_ssize_t count, int n, bint upper) noexcept nogil:
    cdef int ld = n if n > 1 else 1, inf = 0
    cdef char uplo = b'U' if upper else b'L'
    cdef real_t* a = <real_t*>malloc(<size_t>(n * n if n > 0 else 1) * sizeof(real_t))
    cdef Py_ssize_t b, i, j
    if a == NULL:
        return -1
    for b in range(count):
        _load(L, b, n, n, a, ld)
        if real_t is float:
            spotri(&uplo, &n, a, &ld, &inf)
        else:
            dpotri(&uplo, &n, a, &ld, &inf)
        for j in range(n):           # the computed triangle mirrored onto the other
            for i in range(j + 1, n):
                if upper:
                    a[i + j * ld] = a[j + i * ld]
                else:
                    a[j + i * ld] = a[i + j * ld]
        _store(a, ld, out, b, n, n)
    free(a)
    return 0


def potri(batch, L, out, upper):
    """out = (L L^T)^-1 (U^T U when upper), the full symmetric matrix."""
    cdef Job job = _job(R_POTRI)
    job.flag = bool(upper)
    batch = tuple(batch)
    job.n = _int(_shape(L)[-1], "n")
    _launch(&job, "potri", batch, (("L", L, 2), ("out", out, 2)), 1, job.n == 0)


# ---------------------------------------------------------------------------------------------
# LDL^T: sytrf / sytrs (lower)

cdef int _sytrf(real_t kind, Mat* a, Mat* out, Mat* piv, Mat* info, Py_ssize_t count, int n) noexcept nogil:
    cdef int ld = n if n > 1 else 1, inf = 0, lwork = -1
    cdef char uplo = b'L'
    cdef real_t q = 0
    cdef real_t* buf = <real_t*>malloc(<size_t>(n * n if n > 0 else 1) * sizeof(real_t))
    cdef int* ipiv = <int*>malloc(<size_t>(n if n > 0 else 1) * sizeof(int))
    cdef real_t* work
    cdef Py_ssize_t b
    if buf == NULL or ipiv == NULL:
        free(buf); free(ipiv)
        return -1
    if real_t is float:
        ssytrf(&uplo, &n, buf, &ld, ipiv, &q, &lwork, &inf)
    else:
        dsytrf(&uplo, &n, buf, &ld, ipiv, &q, &lwork, &inf)
    lwork = <int>q if <int>q > 1 else 1
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL:
        free(buf); free(ipiv)
        return -1
    for b in range(count):
        inf = 0
        if n > 0:
            _load(a, b, n, n, buf, ld)
            _zero_triangle(buf, ld, n, n, False)     # LD = tril(A), as ATen
            if real_t is float:
                ssytrf(&uplo, &n, buf, &ld, ipiv, work, &lwork, &inf)
            else:
                dsytrf(&uplo, &n, buf, &ld, ipiv, work, &lwork, &inf)
            _store(buf, ld, out, b, n, n)
            _store_ints(ipiv, piv, b, n)
        _store_int(inf, info, b)
    free(buf); free(ipiv); free(work)
    return 0


def sytrf(batch, a, out, piv, info):
    """Bunch-Kaufman LDL^T (lower) of symmetric batch + (n, n)."""
    cdef Job job = _job(R_SYTRF)
    batch = tuple(batch)
    job.n = _int(_shape(a)[-1], "n")
    _launch(&job, "sytrf", batch, (("a", a, 2), ("out", out, 2), ("piv", piv, 1), ("info", info, 0)),
            1, False)


def sytrs(batch, ld, piv, rhs, x):
    cdef Job job = _job(R_SYTRS)
    job.uplo = b'L'          # sytrf's factor is the lower one
    batch = tuple(batch)
    job.n = _int(_shape(ld)[-1], "n")
    job.nrhs = _int(_shape(rhs)[-1], "nrhs")
    _launch(&job, "sytrs", batch, (("ld", ld, 2), ("piv", piv, 1), ("rhs", rhs, 2), ("x", x, 2)),
            3, job.n == 0 or job.nrhs == 0)


# ---------------------------------------------------------------------------------------------
# QR: geqrf / orgqr / ormqr

cdef int _geqrf_ws(real_t kind, int m, int n) noexcept nogil:
    cdef int ld = m if m > 1 else 1, lwork = -1, inf = 0
    cdef real_t q = 0, dummy = 0
    if real_t is float:
        sgeqrf(&m, &n, &dummy, &ld, &dummy, &q, &lwork, &inf)
    else:
        dgeqrf(&m, &n, &dummy, &ld, &dummy, &q, &lwork, &inf)
    return <int>q if <int>q > 1 else 1


cdef int _orgqr_ws(real_t kind, int m, int n, int k) noexcept nogil:
    cdef int ld = m if m > 1 else 1, lwork = -1, inf = 0
    cdef real_t q = 0, dummy = 0
    if real_t is float:
        sorgqr(&m, &n, &k, &dummy, &ld, &dummy, &q, &lwork, &inf)
    else:
        dorgqr(&m, &n, &k, &dummy, &ld, &dummy, &q, &lwork, &inf)
    return <int>q if <int>q > 1 else 1


cdef int _qr(real_t kind, Mat* a, Mat* Q, Mat* R, Mat* tau_out, Py_ssize_t count, int m, int n,
             int qcols, int rrows) noexcept nogil:
    """geqrf of A (m x n) in an m x max(n, qcols) scratch; R = rows [:rrows] of triu; tau; Q = the
    first qcols columns of the orthogonal factor (orgqr)."""
    cdef int k = m if m < n else n, ld = m if m > 1 else 1, w = n if n > qcols else qcols
    cdef int inf = 0, lw1, lw2, lwork, kq
    cdef real_t* buf = <real_t*>calloc(<size_t>(m * w if m * w > 0 else 1), sizeof(real_t))
    cdef real_t* r = <real_t*>malloc(<size_t>(rrows * n if rrows * n > 0 else 1) * sizeof(real_t))
    cdef real_t* tau = <real_t*>malloc(<size_t>(k if k > 0 else 1) * sizeof(real_t))
    cdef real_t* work
    cdef Py_ssize_t b, i, j
    if buf == NULL or r == NULL or tau == NULL:
        free(buf); free(r); free(tau)
        return -1
    lw1 = _geqrf_ws(kind, m, n)
    lw2 = _orgqr_ws(kind, m, qcols, k if k < qcols else qcols) if qcols > 0 else 1
    lwork = lw1 if lw1 > lw2 else lw2
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL:
        free(buf); free(r); free(tau)
        return -1
    for b in range(count):
        _load(a, b, m, n, buf, ld)
        if k > 0:
            if real_t is float:
                sgeqrf(&m, &n, buf, &ld, tau, work, &lwork, &inf)
            else:
                dgeqrf(&m, &n, buf, &ld, tau, work, &lwork, &inf)
        if R.p != NULL:
            for j in range(n):
                for i in range(rrows):
                    r[i + j * rrows] = buf[i + j * ld] if i <= j else 0
            _store(r, rrows if rrows > 0 else 1, R, b, rrows, n)
        if tau_out.p != NULL and k > 0:
            _store_vec(tau, tau_out, b, k)
        if Q.p != NULL:
            if tau_out.p != NULL and R.p == NULL:     # geqrf: Q is the packed reflectors
                _store(buf, ld, Q, b, m, n)
                continue
            for j in range(qcols):                     # columns past n start as zero
                if j >= n:
                    for i in range(m):
                        buf[i + j * ld] = 0
            kq = k if k < qcols else qcols
            if real_t is float:
                sorgqr(&m, &qcols, &kq, buf, &ld, tau, work, &lwork, &inf)
            else:
                dorgqr(&m, &qcols, &kq, buf, &ld, tau, work, &lwork, &inf)
            _store(buf, ld, Q, b, m, qcols)
    free(buf); free(r); free(tau); free(work)
    return 0


def qr(batch, a, Q, R, tau, qcols, rrows):
    """QR of a (batch + (m, n)): R (rrows x n, upper) and Q (m x qcols) as linalg_qr's modes;
    with Q and tau and no R: geqrf's packed output (Q gets the reflectors)."""
    cdef Job job = _job(R_QR)
    job.qcols = _int(qcols, "qcols")
    job.rrows = _int(rrows, "rrows")
    batch = tuple(batch)
    job.m, job.n = [_int(v, "m/n") for v in _shape(a)[-2:]]
    # The precision is a's unless a is empty (n == 0; the batch and m are not, or nothing runs).
    _launch(&job, "qr", batch, (("a", a, 2), ("Q", Q, 2), ("R", R, 2), ("tau", tau, 1)),
            0 if job.n != 0 else (1 if Q is not None else 2), job.m == 0)


cdef int _orgqr(real_t kind, Mat* a, Mat* tau, Mat* out, Py_ssize_t count, int m, int n, int k) noexcept nogil:
    cdef int ld = m if m > 1 else 1, inf = 0, lwork
    cdef real_t* buf = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef real_t* t = <real_t*>malloc(<size_t>(k if k > 0 else 1) * sizeof(real_t))
    cdef real_t* work
    cdef Py_ssize_t b
    if buf == NULL or t == NULL:
        free(buf); free(t)
        return -1
    lwork = _orgqr_ws(kind, m, n, k)
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL:
        free(buf); free(t)
        return -1
    for b in range(count):
        _load(a, b, m, n, buf, ld)
        if k > 0:
            load_block(_at(tau, b), tau.s0, tau.dt, k, t)
        if real_t is float:
            sorgqr(&m, &n, &k, buf, &ld, t, work, &lwork, &inf)
        else:
            dorgqr(&m, &n, &k, buf, &ld, t, work, &lwork, &inf)
        _store(buf, ld, out, b, m, n)
    free(buf); free(t); free(work)
    return 0


def orgqr(batch, a, tau, out):
    """Householder product: out (m x n) = H_1 ... H_k applied to the identity's first n columns."""
    cdef Job job = _job(R_ORGQR)
    batch = tuple(batch)
    job.m, job.n = [_int(v, "m/n") for v in _shape(a)[-2:]]
    job.k = _int(_shape(tau)[-1], "k")
    _launch(&job, "orgqr", batch, (("a", a, 2), ("tau", tau, 1), ("out", out, 2)),
            2, job.m == 0 or job.n == 0)


cdef int _ormqr(real_t kind, Mat* a, Mat* tau, Mat* c, Mat* out, Py_ssize_t count, int ar, int k,
                int m, int n, char side, char trans) noexcept nogil:
    cdef int lda = ar if ar > 1 else 1, ldc = m if m > 1 else 1, inf = 0, lwork = -1
    cdef real_t q = 0
    cdef real_t* abuf = <real_t*>malloc(<size_t>(ar * k if ar * k > 0 else 1) * sizeof(real_t))
    cdef real_t* t = <real_t*>malloc(<size_t>(k if k > 0 else 1) * sizeof(real_t))
    cdef real_t* cbuf = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef real_t* work
    cdef Py_ssize_t b
    if abuf == NULL or t == NULL or cbuf == NULL:
        free(abuf); free(t); free(cbuf)
        return -1
    if real_t is float:
        sormqr(&side, &trans, &m, &n, &k, abuf, &lda, t, cbuf, &ldc, &q, &lwork, &inf)
    else:
        dormqr(&side, &trans, &m, &n, &k, abuf, &lda, t, cbuf, &ldc, &q, &lwork, &inf)
    lwork = <int>q if <int>q > 1 else 1
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL:
        free(abuf); free(t); free(cbuf)
        return -1
    for b in range(count):
        _load(a, b, ar, k, abuf, lda)
        if k > 0:
            load_block(_at(tau, b), tau.s0, tau.dt, k, t)
        _load(c, b, m, n, cbuf, ldc)
        if k > 0:
            if real_t is float:
                sormqr(&side, &trans, &m, &n, &k, abuf, &lda, t, cbuf, &ldc, work, &lwork, &inf)
            else:
                dormqr(&side, &trans, &m, &n, &k, abuf, &lda, t, cbuf, &ldc, work, &lwork, &inf)
        _store(cbuf, ldc, out, b, m, n)
    free(abuf); free(t); free(cbuf); free(work)
    return 0


def ormqr(batch, a, tau, c, out, left, transpose):
    """out = op(Q) C (left) or C op(Q), Q from geqrf's reflectors a (the first k = len(tau) columns)."""
    cdef Job job = _job(R_ORMQR)
    job.side = b'L' if left else b'R'
    job.trans = b'T' if transpose else b'N'
    batch = tuple(batch)
    job.a_rows = _int(_shape(a)[-2], "rows")
    job.k = _int(_shape(tau)[-1], "k")
    job.m, job.n = [_int(v, "m/n") for v in _shape(c)[-2:]]
    a = (a[0], a[1], tuple(a[2])[:-1] + (job.k,), a[3])    # only the first k reflector columns are read
    _launch(&job, "ormqr", batch, (("a", a, 2), ("tau", tau, 1), ("c", c, 2), ("out", out, 2)),
            3, job.m == 0 or job.n == 0)


# ---------------------------------------------------------------------------------------------
# Symmetric eigendecomposition: syevd

cdef int _syevd(real_t kind, Mat* a, Mat* w, Mat* v, Py_ssize_t count, int n, bint upper) noexcept nogil:
    cdef int ld = n if n > 1 else 1, inf = 0, lwork = -1, liwork = -1, iq = 0
    cdef char jobz = b'V' if v.p != NULL else b'N'
    cdef char uplo = b'U' if upper else b'L'
    cdef real_t q = 0
    cdef real_t* buf = <real_t*>malloc(<size_t>(n * n if n > 0 else 1) * sizeof(real_t))
    cdef real_t* ev = <real_t*>malloc(<size_t>(n if n > 0 else 1) * sizeof(real_t))
    cdef real_t* work
    cdef int* iwork
    cdef Py_ssize_t b
    if buf == NULL or ev == NULL:
        free(buf); free(ev)
        return -1
    if real_t is float:
        ssyevd(&jobz, &uplo, &n, buf, &ld, ev, &q, &lwork, &iq, &liwork, &inf)
    else:
        dsyevd(&jobz, &uplo, &n, buf, &ld, ev, &q, &lwork, &iq, &liwork, &inf)
    lwork = <int>q if <int>q > 1 else 1
    liwork = iq if iq > 1 else 1
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    iwork = <int*>malloc(<size_t>liwork * sizeof(int))
    if work == NULL or iwork == NULL:
        free(buf); free(ev); free(work); free(iwork)
        return -1
    for b in range(count):
        _load(a, b, n, n, buf, ld)
        if real_t is float:
            ssyevd(&jobz, &uplo, &n, buf, &ld, ev, work, &lwork, iwork, &liwork, &inf)
        else:
            dsyevd(&jobz, &uplo, &n, buf, &ld, ev, work, &lwork, iwork, &liwork, &inf)
        _store_vec(ev, w, b, n)
        if v.p != NULL:
            _store(buf, ld, v, b, n, n)
    free(buf); free(ev); free(work); free(iwork)
    return 0


def syevd(batch, a, w, v, upper):
    """Eigenvalues w (ascending) and, when v is given, eigenvectors (columns) of symmetric a,
    read from its lower (upper) triangle."""
    cdef Job job = _job(R_SYEVD)
    job.flag = bool(upper)
    batch = tuple(batch)
    job.n = _int(_shape(a)[-1], "n")
    _launch(&job, "syevd", batch, (("a", a, 2), ("w", w, 1), ("v", v, 2)), 1, job.n == 0)


# ---------------------------------------------------------------------------------------------
# SVD: gesdd

cdef int _gesdd(real_t kind, Mat* a, Mat* U, Mat* S, Mat* Vh, Py_ssize_t count, int m, int n,
                bint full) noexcept nogil:
    cdef int k = m if m < n else n, lda = m if m > 1 else 1, inf = 0, lwork = -1
    cdef char jobz = (b'A' if full else b'S') if U.p != NULL else b'N'
    cdef int ucols = m if full else k, vrows = n if full else k
    cdef int ldu = m if m > 1 else 1, ldvt = vrows if vrows > 1 else 1
    cdef real_t q = 0
    cdef real_t* buf = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef real_t* s = <real_t*>malloc(<size_t>(k if k > 0 else 1) * sizeof(real_t))
    cdef real_t* u = <real_t*>malloc(<size_t>(m * ucols if m * ucols > 0 else 1) * sizeof(real_t))
    cdef real_t* vt = <real_t*>malloc(<size_t>(vrows * n if vrows * n > 0 else 1) * sizeof(real_t))
    cdef int* iwork = <int*>malloc(<size_t>(8 * k if k > 0 else 1) * sizeof(int))
    cdef real_t* work
    cdef Py_ssize_t b
    if buf == NULL or s == NULL or u == NULL or vt == NULL or iwork == NULL:
        free(buf); free(s); free(u); free(vt); free(iwork)
        return -1
    if real_t is float:
        sgesdd(&jobz, &m, &n, buf, &lda, s, u, &ldu, vt, &ldvt, &q, &lwork, iwork, &inf)
    else:
        dgesdd(&jobz, &m, &n, buf, &lda, s, u, &ldu, vt, &ldvt, &q, &lwork, iwork, &inf)
    lwork = <int>q if <int>q > 1 else 1
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL:
        free(buf); free(s); free(u); free(vt); free(iwork)
        return -1
    for b in range(count):
        _load(a, b, m, n, buf, lda)
        if real_t is float:
            sgesdd(&jobz, &m, &n, buf, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &inf)
        else:
            dgesdd(&jobz, &m, &n, buf, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, &inf)
        _store_vec(s, S, b, k)
        if U.p != NULL:
            _store(u, ldu, U, b, m, ucols)
        if Vh.p != NULL:
            _store(vt, ldvt, Vh, b, vrows, n)
    free(buf); free(s); free(u); free(vt); free(iwork); free(work)
    return 0


def gesdd(batch, a, U, S, Vh, full_matrices):
    """Singular values S (descending) and, when U/Vh are given, the singular vectors of a
    (batch + (m, n)): U (m x k, or m x m when full_matrices), Vh (k x n, or n x n)."""
    cdef Job job = _job(R_GESDD)
    job.flag = bool(full_matrices)
    batch = tuple(batch)
    job.m, job.n = [_int(v, "m/n") for v in _shape(a)[-2:]]
    if (U is None) != (Vh is None):
        raise KernelArgumentError("gesdd: U and Vh are computed together")
    _launch(&job, "gesdd", batch, (("a", a, 2), ("U", U, 2), ("S", S, 1), ("Vh", Vh, 2)),
            2, job.m == 0 or job.n == 0)


# ---------------------------------------------------------------------------------------------
# General eigendecomposition: geev (right eigenvectors), complex results

cdef inline void _st_complex(char* p, int dt, double re, double im) noexcept nogil:
    if dt == DT_COMPLEX64:
        ek_st_f32(p, <float>re)
        ek_st_f32(p + 4, <float>im)
    else:
        ek_st_f64(p, re)
        ek_st_f64(p + 8, im)


cdef int _geev(real_t kind, Mat* a, Mat* w, Mat* v, Py_ssize_t count, int n) noexcept nogil:
    cdef int ld = n if n > 1 else 1, inf = 0, lwork = -1, one = 1
    cdef char jobvl = b'N', jobvr = b'V' if v.p != NULL else b'N'
    cdef real_t q = 0
    cdef real_t* buf = <real_t*>malloc(<size_t>(n * n if n > 0 else 1) * sizeof(real_t))
    cdef real_t* wr = <real_t*>malloc(<size_t>(n if n > 0 else 1) * sizeof(real_t))
    cdef real_t* wi = <real_t*>malloc(<size_t>(n if n > 0 else 1) * sizeof(real_t))
    cdef real_t* vr = <real_t*>malloc(<size_t>(n * n if n > 0 else 1) * sizeof(real_t))
    cdef real_t dummy = 0
    cdef real_t* work
    cdef Py_ssize_t b, i, j
    cdef char* pv
    if buf == NULL or wr == NULL or wi == NULL or vr == NULL:
        free(buf); free(wr); free(wi); free(vr)
        return -1
    if real_t is float:
        sgeev(&jobvl, &jobvr, &n, buf, &ld, wr, wi, &dummy, &one, vr, &ld, &q, &lwork, &inf)
    else:
        dgeev(&jobvl, &jobvr, &n, buf, &ld, wr, wi, &dummy, &one, vr, &ld, &q, &lwork, &inf)
    lwork = <int>q if <int>q > 1 else 1
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL:
        free(buf); free(wr); free(wi); free(vr)
        return -1
    for b in range(count):
        _load(a, b, n, n, buf, ld)
        if real_t is float:
            sgeev(&jobvl, &jobvr, &n, buf, &ld, wr, wi, &dummy, &one, vr, &ld, work, &lwork, &inf)
        else:
            dgeev(&jobvl, &jobvr, &n, buf, &ld, wr, wi, &dummy, &one, vr, &ld, work, &lwork, &inf)
        for i in range(n):
            _st_complex(_at(w, b) + i * w.s0, w.dt, wr[i], wi[i])
        if v.p != NULL:
            pv = _at(v, b)
            j = 0
            while j < n:       # a conjugate pair: v_j = vr_j + i vr_j+1, v_j+1 = conj(v_j)
                if wi[j] != 0 and j + 1 < n:
                    for i in range(n):
                        _st_complex(pv + i * v.s0 + j * v.s1, v.dt, vr[i + j * ld], vr[i + (j + 1) * ld])
                        _st_complex(pv + i * v.s0 + (j + 1) * v.s1, v.dt, vr[i + j * ld], -vr[i + (j + 1) * ld])
                    j += 2
                else:
                    for i in range(n):
                        _st_complex(pv + i * v.s0 + j * v.s1, v.dt, vr[i + j * ld], 0)
                    j += 1
    free(buf); free(wr); free(wi); free(vr); free(work)
    return 0


def geev(batch, a, w, v):
    """Eigenvalues w (complex64/complex128, LAPACK's order) and right eigenvectors v (columns,
    complex; None: not computed) of a real batch + (n, n)."""
    cdef Job job = _job(R_GEEV)
    cdef Mat mats[MAX_OPERANDS]
    cdef Py_ssize_t count
    batch = tuple(batch)
    job.n = _int(_shape(a)[-1], "n")
    count = _count(batch)
    try:
        _open(mats, (("a", a, 2), ("w", w, 1), ("v", v, 2)), batch, "geev")
        if mats[1].dt != DT_COMPLEX64 and mats[1].dt != DT_COMPLEX128:
            raise KernelArgumentError("geev: w must be complex64 or complex128")
        if v is not None and mats[2].dt != mats[1].dt:
            raise KernelArgumentError("geev: v must have w's dtype")
        if count == 0 or job.n == 0:
            return
        _dispatch(&job, mats, count, mats[0].dt, "geev")
    finally:
        _close(mats)


# ---------------------------------------------------------------------------------------------
# Triangular solve: trsm

def trsm(batch, a, rhs, x, upper, left, transpose, unitriangular):
    """x = op(A)^-1 rhs (left) or rhs op(A)^-1, A triangular (batch + (na, na)), rhs (m, n)."""
    cdef Job job = _job(R_TRSM)
    job.side = b'L' if left else b'R'
    job.uplo = b'U' if upper else b'L'
    job.trans = b'T' if transpose else b'N'
    job.diag = b'U' if unitriangular else b'N'
    batch = tuple(batch)
    job.na = _int(_shape(a)[-1], "n")
    job.m, job.n = [_int(v, "m/n") for v in _shape(rhs)[-2:]]
    _launch(&job, "trsm", batch, (("a", a, 2), ("rhs", rhs, 2), ("x", x, 2)),
            2, job.m == 0 or job.n == 0)


# ---------------------------------------------------------------------------------------------
# Least squares: gelsy (default on CPU), gels, gelsd, gelss

cdef int _gels(real_t kind, Mat* a, Mat* rhs, Mat* x, Mat* rank, Mat* sv, Py_ssize_t count, int m, int n,
               int nrhs, int driver, double rcond) noexcept nogil:
    cdef int lda = m if m > 1 else 1, mx = m if m > n else n, k = m if m < n else n
    cdef int ldb = mx if mx > 1 else 1, inf = 0, lwork = -1, rk = 0, iq = 0
    cdef char trans = b'N'
    cdef real_t q = 0, rc_ = <real_t>rcond
    cdef real_t* abuf = <real_t*>malloc(<size_t>(m * n if m * n > 0 else 1) * sizeof(real_t))
    cdef real_t* bb = <real_t*>calloc(<size_t>(ldb * nrhs if ldb * nrhs > 0 else 1), sizeof(real_t))
    cdef real_t* s = <real_t*>malloc(<size_t>(k if k > 0 else 1) * sizeof(real_t))
    cdef int* jpvt = <int*>malloc(<size_t>(n if n > 0 else 1) * sizeof(int))
    cdef int* iwork = NULL
    cdef real_t* work
    cdef Py_ssize_t b, i
    if abuf == NULL or bb == NULL or s == NULL or jpvt == NULL:
        free(abuf); free(bb); free(s); free(jpvt)
        return -1
    if driver == 0:
        if real_t is float:
            sgelsy(&m, &n, &nrhs, abuf, &lda, bb, &ldb, jpvt, &rc_, &rk, &q, &lwork, &inf)
        else:
            dgelsy(&m, &n, &nrhs, abuf, &lda, bb, &ldb, jpvt, &rc_, &rk, &q, &lwork, &inf)
    elif driver == 1:
        if real_t is float:
            sgels(&trans, &m, &n, &nrhs, abuf, &lda, bb, &ldb, &q, &lwork, &inf)
        else:
            dgels(&trans, &m, &n, &nrhs, abuf, &lda, bb, &ldb, &q, &lwork, &inf)
    elif driver == 2:
        if real_t is float:
            sgelsd(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, &q, &lwork, &iq, &inf)
        else:
            dgelsd(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, &q, &lwork, &iq, &inf)
        iwork = <int*>malloc(<size_t>(iq if iq > 1 else 1) * sizeof(int))
    else:
        if real_t is float:
            sgelss(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, &q, &lwork, &inf)
        else:
            dgelss(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, &q, &lwork, &inf)
    lwork = <int>q if <int>q > 1 else 1
    work = <real_t*>malloc(<size_t>lwork * sizeof(real_t))
    if work == NULL or (driver == 2 and iwork == NULL):
        free(abuf); free(bb); free(s); free(jpvt); free(work); free(iwork)
        return -1
    for b in range(count):
        _load(a, b, m, n, abuf, lda)
        for i in range(ldb * nrhs):
            bb[i] = 0
        _load(rhs, b, m, nrhs, bb, ldb)
        if driver == 0:
            for i in range(n):
                jpvt[i] = 0
            if real_t is float:
                sgelsy(&m, &n, &nrhs, abuf, &lda, bb, &ldb, jpvt, &rc_, &rk, work, &lwork, &inf)
            else:
                dgelsy(&m, &n, &nrhs, abuf, &lda, bb, &ldb, jpvt, &rc_, &rk, work, &lwork, &inf)
        elif driver == 1:
            if real_t is float:
                sgels(&trans, &m, &n, &nrhs, abuf, &lda, bb, &ldb, work, &lwork, &inf)
            else:
                dgels(&trans, &m, &n, &nrhs, abuf, &lda, bb, &ldb, work, &lwork, &inf)
        elif driver == 2:
            if real_t is float:
                sgelsd(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, work, &lwork, iwork, &inf)
            else:
                dgelsd(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, work, &lwork, iwork, &inf)
        else:
            if real_t is float:
                sgelss(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, work, &lwork, &inf)
            else:
                dgelss(&m, &n, &nrhs, abuf, &lda, bb, &ldb, s, &rc_, &rk, work, &lwork, &inf)
        _store(bb, ldb, x, b, mx, nrhs)       # x is the whole max(m, n) x nrhs B as LAPACK leaves it
        _store_int(rk, rank, b)
        if sv.p != NULL:
            _store_vec(s, sv, b, k)
    free(abuf); free(bb); free(s); free(jpvt); free(work); free(iwork)
    return 0


def gels(batch, a, rhs, x, rank, sv, driver, rcond):
    """Least squares min ||A X - B|| with LAPACK driver 0 gelsy, 1 gels, 2 gelsd, 3 gelss.
    x: batch + (max(m, n), nrhs), LAPACK's whole B on exit; rank / sv optional."""
    cdef Job job = _job(R_GELS)
    job.driver = _int(driver, "driver")
    job.rcond = float(rcond)
    batch = tuple(batch)
    if job.driver > 3:
        raise KernelArgumentError(f"gels: unknown driver {driver!r}")
    job.m, job.n = [_int(v, "m/n") for v in _shape(a)[-2:]]
    job.nrhs = _int(_shape(rhs)[-1], "nrhs")
    _launch(&job, "gels", batch,
            (("a", a, 2), ("rhs", rhs, 2), ("x", x, 2), ("rank", rank, 0), ("sv", sv, 1)),
            2, job.m == 0 or job.n == 0)