# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Matrix-engine GEMM of the device: out = beta * C + alpha * (A @ B), batched GEMM
(bmm/baddbmm, and addbmm's sum over the batch) and the outer-product update addr.

Models the matrix engine's numerics contract: float16/bfloat16 operands are
widened to float32, products accumulate in float32, alpha/beta are applied in
float32 and the result is rounded once to the output dtype; float32 runs in
float32 and float64 in float64.  The arithmetic itself is delegated to the
host BLAS (MKL's sgemm/dgemm from torch's libtorch_cpu.so where found, else
scipy.linalg.cython_blas's OpenBLAS; see below), so the summation order -- and
hence the last bits -- is BLAS's, not a systolic array's. bfloat16 x
bfloat16 products run on the host's AMX tiles instead where it has them
(_amx.pxi: the same contract, bf16 products summed in float32; subnormals
flushed as TDPBF16PS does).

Operands already in the BLAS type and in a row- or column-major layout are
handed to BLAS in place; anything else (other dtypes, broadcast or odd
strides) is packed into malloc'd contiguous scratch first.  Row-major
buffers are passed to column-major BLAS as their transposes:
C^T (N x M) = B^T (N x K) @ A^T (K x M).

Integer GEMM (uint8, int8, int16, int32, int64) accumulates in 64-bit two's
complement and wraps to the output dtype on the store, which equals CPU's
result exactly (sums and products modulo 2**bits do not depend on the order or
on the width of the accumulator); alpha and beta are integers there.  Bool
GEMM is rejected (CPU has no bool mm either).

Batched GEMM runs one GEMM per batch entry; addbmm accumulates the whole batch
in one float32 (float64, int64) scratch and rounds once, where CPU rounds a
float16/bfloat16 result after every batch entry.

addr (out = beta * C + alpha * outer(v1, v2)) is an elementwise update with
CPU's type promotion: computed in float64 for floating compute dtypes (rounded
to the compute dtype, then stored), int64 (wrapping) for integers, logic for
bool; beta == 0 does not read C, alpha == 0 still multiplies (0 * NaN = NaN, as
on CPU).

Left out: tiling and timing (the cost model lives in library.py /
matrix_engine.py).
"""

from libc.stdlib cimport malloc, calloc, free
from libc.limits cimport INT_MAX
from scipy.linalg.cython_blas cimport sgemm, dgemm

include "_common.pxi"
include "_isa.pxi"
include "_amx.pxi"
include "_pool.pxi"

# Two BLAS providers run the matrix engine's float32/float64 GEMM (the summation order, and hence
# the last bits, are the provider's; the contract above holds for both):
#
# * MKL (the default where it is found): the MKL that the torch wheel links into libtorch_cpu.so,
#   loaded by path at import (torch itself need not be imported), with its own OpenMP threads. Each
#   call sets MKL's thread-local count to a fixed team (_MKL_TEAM for a GEMM, one thread per
#   matrix of a batch of two or more, which then splits over the pool), so the bits depend on the
#   shapes only, not on torch.set_num_threads, OMP_NUM_THREADS or the helper switch. With two
#   threads this is the call torch's CPU mm makes, and the results match it bit for bit. GNU
#   OpenMP cannot start a thread team in a child forked after it ran one (the child hangs; torch's
#   CPU ops do too), so a forked child runs its GEMMs on one MKL thread: there a sum over K that
#   the team would split can round differently.
# * OpenBLAS (scipy.linalg.cython_blas, EMU_BLAS=openblas, or where MKL is absent): called
#   single-threaded (on a shared 2-core host a threaded OpenBLAS GEMM was up to 10x slower than a
#   single-threaded one: its workers spin-wait for descheduled siblings). A large GEMM is split
#   here in two blocks of the output, one BLAS call each, that this thread and one helper take in
#   turn (_blas_gemm, _pool.pxi): a helper that is not scheduled costs at most the block it holds.
#   Neither changes the results (each element is computed by the same kernel over the same K
#   order; OpenBLAS's own threads also split only M and N). The count is set around each call and
#   put back, through OpenBLAS's openblas_set_num_threads_local found next to sgemm (dladdr).
cdef extern from *:
    """
    #ifndef _GNU_SOURCE
    #define _GNU_SOURCE
    #endif
    #include <dlfcn.h>
    #include <pthread.h>
    typedef int (*ek_set_threads_fn)(int);
    static ek_set_threads_fn ek_blas_set_threads;
    static int ek_blas_probed;

    static void ek_blas_probe(void *sgemm_ptr) {
        Dl_info info;
        void *lib;
        ek_blas_probed = 1;
        if (!dladdr(sgemm_ptr, &info) || !info.dli_fname) return;
        lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (lib) ek_blas_set_threads = (ek_set_threads_fn)dlsym(lib, "openblas_set_num_threads_local");
    }
    /* Sets one BLAS thread; returns the count to restore (0: nothing to restore). */
    static int ek_blas_single_thread(void) {
        return ek_blas_set_threads ? ek_blas_set_threads(1) : 0;
    }
    static void ek_blas_restore_threads(int threads) {
        if (ek_blas_set_threads && threads > 1) ek_blas_set_threads(threads);
    }

    /* MKL's Fortran-interface GEMMs (LP64) and its thread-local thread count. */
    typedef void (*ek_sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                                const float *, const float *, const int *, const float *, const int *,
                                const float *, float *, const int *);
    typedef void (*ek_dgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                                const double *, const double *, const int *, const double *,
                                const int *, const double *, double *, const int *);
    typedef void (*ek_mkl_version_fn)(char *, int);
    static ek_sgemm_fn ek_mkl_sgemm;
    static ek_dgemm_fn ek_mkl_dgemm;
    static ek_set_threads_fn ek_mkl_set_threads_local;
    static int ek_use_mkl;        /* 1: the GEMMs below call MKL */
    static int ek_mkl_forked;     /* 1: this process is a forked child: one MKL thread */
    static void *ek_mkl_lib;      /* the library MKL was loaded from */
    static void ek_mkl_after_fork(void) { ek_mkl_forked = 1; }

    /* Loads MKL's entry points from the library at path; 1 on success (version filled in). */
    static int ek_mkl_load(const char *path, char *version, int len) {
        static int fork_handled;
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        ek_mkl_version_fn ver;
        if (!lib) return 0;
        ver = (ek_mkl_version_fn)dlsym(lib, "MKL_Get_Version_String");
        ek_mkl_sgemm = (ek_sgemm_fn)dlsym(lib, "sgemm_");
        ek_mkl_dgemm = (ek_dgemm_fn)dlsym(lib, "dgemm_");
        ek_mkl_set_threads_local = (ek_set_threads_fn)dlsym(lib, "MKL_Set_Num_Threads_Local");
        if (!ver || !ek_mkl_sgemm || !ek_mkl_dgemm || !ek_mkl_set_threads_local) {
            ek_mkl_sgemm = NULL;
            ek_mkl_dgemm = NULL;
            ek_mkl_set_threads_local = NULL;
            return 0;
        }
        if (!fork_handled) fork_handled = pthread_atfork(NULL, NULL, ek_mkl_after_fork) == 0;
        if (!fork_handled) return 0;
        ek_mkl_lib = lib;
        ver(version, len);
        return 1;
    }
    /* Caps MKL's code branch (mkl_serv_enable_instructions: 2 is MKL_ENABLE_AVX2, 0 SSE4.2) and
       returns the branch MKL then runs (mkl_serv_cpu_detect: 3 SSE4.2, 5 AVX2, 7 AVX-512 on the
       hosts seen); -1 where the library has neither entry point. MKL chooses its branch once per
       process, at its first call or here, so a cap asked for later has no effect: the caller
       checks the branch returned. */
    typedef int (*ek_mkl_int_fn)(int);
    typedef int (*ek_mkl_detect_fn)(void);
    static int ek_mkl_cap_branch(int enable) {
        ek_mkl_int_fn cap = ek_mkl_lib ? (ek_mkl_int_fn)dlsym(ek_mkl_lib, "mkl_serv_enable_instructions") : NULL;
        ek_mkl_detect_fn detect = ek_mkl_lib ? (ek_mkl_detect_fn)dlsym(ek_mkl_lib, "mkl_serv_cpu_detect") : NULL;
        if (!cap || !detect) return -1;
        cap(enable);
        return detect();
    }
    static int ek_mkl_select(int on) {
        int old = ek_use_mkl;
        ek_use_mkl = on && ek_mkl_sgemm != NULL;
        return old;
    }
    /* ek_mkl_gemm_s / ek_mkl_gemm_d: one MKL call on a team of `threads` (one in a forked child),
       the caller's thread-local count put back after it. */
    #define EK_MKL_GEMM(name, T, fn)                                                               \
        static void name(int threads, const char *ta, const char *tb, const int *m, const int *n,   \
                         const int *k, const T *alpha, const T *a, const int *lda, const T *b,       \
                         const int *ldb, const T *beta, T *c, const int *ldc) {                      \
            int old = ek_mkl_set_threads_local(ek_mkl_forked ? 1 : threads);                          \
            fn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                                 \
            ek_mkl_set_threads_local(old);                                                            \
        }
    EK_MKL_GEMM(ek_mkl_gemm_s, float, ek_mkl_sgemm)
    EK_MKL_GEMM(ek_mkl_gemm_d, double, ek_mkl_dgemm)
    """
    void ek_blas_probe(void* sgemm_ptr)
    int ek_blas_single_thread() noexcept nogil
    void ek_blas_restore_threads(int threads) noexcept nogil
    int ek_mkl_load(const char* path, char* version, int len)
    int ek_mkl_select(int on)
    int ek_mkl_cap_branch(int enable)
    int ek_use_mkl
    void ek_mkl_gemm_s(int threads, const char* ta, const char* tb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc) noexcept nogil
    void ek_mkl_gemm_d(int threads, const char* ta, const char* tb, const int* m, const int* n,
                       const int* k, const double* alpha, const double* a, const int* lda,
                       const double* b, const int* ldb, const double* beta, double* c,
                       const int* ldc) noexcept nogil

ek_blas_probe(<void*>sgemm)

# MKL's thread team for one GEMM (a fixed count: the bits depend on it).
cdef enum:
    _MKL_TEAM = 2

_mkl_version = None


def _find_mkl():
    """(path, version) of the MKL in torch's lib/libtorch_cpu.so, loaded (not torch itself); None
    where torch is not installed or its library has no MKL entry points."""
    import importlib.util
    import os
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "lib", "libtorch_cpu.so")
        if os.path.exists(path):
            buf = bytearray(256)
            if ek_mkl_load(path.encode(), <char*>buf, len(buf) - 1):
                return path, bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()
    return None


def set_blas(name):
    """Chooses the BLAS of the float32/float64 GEMMs: "mkl" or "openblas"; returns the previous
    choice. "mkl" raises RuntimeError where no MKL was found."""
    global _mkl_version
    if name not in ("mkl", "openblas"):
        raise ValueError(f"set_blas: expected 'mkl' or 'openblas', got {name!r}")
    old = blas()
    if name == "mkl":
        if _mkl_version is None:
            found = _find_mkl()
            if found is None:
                raise RuntimeError("set_blas('mkl'): no MKL found (it is looked for in torch's "
                                   "lib/libtorch_cpu.so); use 'openblas'")
            _cap_mkl()
            _mkl_version = found[1]
        ek_mkl_select(1)
    else:
        ek_mkl_select(0)
    return old


# MKL's branch for each instruction-set cap below AVX-512: (mkl_serv_enable_instructions' code,
# the highest mkl_serv_cpu_detect branch allowed, MKL_ENABLE_INSTRUCTIONS' name). At avx512 and
# amx MKL keeps its own choice: its float32/float64 GEMMs have no AMX code.
_MKL_CAPS = {EK_ISA_AVX2: (2, 5, "AVX2"), EK_ISA_BASELINE: (0, 3, "SSE4_2")}


def _cap_mkl():
    """Holds MKL (torch's, shared with torch's CPU ops in this process) to the module's
    instruction-set cap; ConfigError if MKL already chose a higher branch."""
    if ek_isa_cap not in _MKL_CAPS:
        return
    enable, highest, name = _MKL_CAPS[ek_isa_cap]
    branch = ek_mkl_cap_branch(enable)
    if branch < 0 or branch > highest:
        from emulator.errors import ConfigError
        raise ConfigError(
            "EMU_CPU_ISA", f"{cpu_isa()!r}: the float32/float64 GEMMs call MKL (torch's libtorch_cpu.so), "
            + ("which has no entry point to cap its instruction set" if branch < 0 else
               "which already chose its code for a higher instruction set in this process")
            + f"; set MKL_ENABLE_INSTRUCTIONS={name} before the process starts, or EMU_BLAS=openblas")


def blas():
    """The BLAS the float32/float64 GEMMs call now: "mkl" or "openblas"."""
    return "mkl" if ek_use_mkl else "openblas"


def blas_version():
    """A line naming the BLAS in use (MKL's own version string, or OpenBLAS from scipy)."""
    return _mkl_version if ek_use_mkl else "OpenBLAS (scipy.linalg.cython_blas)"


def _select_blas_at_import():
    import os
    choice = os.environ.get("EMU_BLAS", "").strip().lower() or "auto"
    if choice not in ("auto", "mkl", "openblas"):
        raise ValueError(f"EMU_BLAS must be 'mkl', 'openblas' or unset (auto), got {choice!r}")
    if choice == "openblas":
        return
    try:
        set_blas("mkl")
    except RuntimeError:
        if choice == "mkl":
            raise


_select_blas_at_import()

ctypedef fused real_t:
    float
    double

_MIXED_ERROR = ("matmul: operands must be all floating or all integer (bool is not supported by the "
                "matrix engine)")


cdef inline void _extent(const char* p, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t n0, Py_ssize_t n1,
                         Py_ssize_t isz, const char** lo, const char** hi) noexcept nogil:
    """Byte range [lo, hi) touched by a strided n0 x n1 operand."""
    cdef const char* a = p
    cdef const char* b = p
    if s0 >= 0:
        b += s0 * (n0 - 1)
    else:
        a += s0 * (n0 - 1)
    if s1 >= 0:
        b += s1 * (n1 - 1)
    else:
        a += s1 * (n1 - 1)
    lo[0] = a
    hi[0] = b + isz


cdef inline bint _overlaps(const char* lo1, const char* hi1, const char* lo2, const char* hi2) noexcept nogil:
    return lo1 < hi2 and lo2 < hi1


cdef bint _blas_view(const char* p, int dt, int want, Py_ssize_t s0, Py_ssize_t s1,
                     Py_ssize_t rows, Py_ssize_t cols, char* trans, int* ld) noexcept nogil:
    """Can a rows x cols operand be given to BLAS as is?  Sets trans/ld for
    the row-major-as-transpose convention: 'N' if row-major, 'T' if
    column-major.  Only for the BLAS element type and aligned pointers."""
    cdef Py_ssize_t isz = itemsize_of(want)
    if dt != want or (<uintptr_t>p) % isz != 0 or s0 % isz != 0 or s1 % isz != 0:
        return False
    if s1 == isz and s0 // isz >= (cols if cols > 1 else 1) and s0 // isz <= INT_MAX:
        trans[0] = b'N'
        ld[0] = <int>(s0 // isz)
        return True
    if s0 == isz and s1 // isz >= (rows if rows > 1 else 1) and s1 // isz <= INT_MAX:
        trans[0] = b'T'
        ld[0] = <int>(s1 // isz)
        return True
    return False


cdef void _pack(const char* p, int dt, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t rows,
                Py_ssize_t cols, real_t* dst) noexcept nogil:
    """dst[r*cols + c] = cast<real_t>(p[r, c]) (row-major scratch)."""
    cdef Py_ssize_t r
    for r in range(rows):
        load_block(p + r * s0, s1, dt, cols, dst + r * cols)


# One BLAS call of a GEMM split in blocks (see ek_pool_run): column-major C (m x n) =
# beta * C + alpha * op(A) (m x k) @ op(B) (k x n), the BLAS view of the row-major product.
ctypedef struct _BlasChunk:
    char ta
    char tb
    int m, n, k, lda, ldb, ldc
    bint dbl
    double alpha, beta
    void* A
    void* B
    void* C

# A GEMM is split at most _MAX_CHUNKS ways, in blocks of at least _CHUNK_MNK multiply-adds
# (m * n * k) and a multiple of _CHUNK_ALIGN rows or columns: small GEMMs stay one call (waking
# the helper costs some microseconds). Two blocks, one per thread: each block packs the operand
# the blocks share again, so more blocks measured slower on the 2-core host.
cdef enum:
    _MAX_CHUNKS = 2
    _CHUNK_MNK = 4000000
    _CHUNK_ALIGN = 64


cdef void _run_chunk(void* arg) noexcept nogil:
    cdef _BlasChunk* c = <_BlasChunk*>arg
    cdef float salpha, sbeta
    ek_blas_single_thread()   # the helper's own BLAS thread count (thread-local): one
    if c.dbl:
        dgemm(&c.ta, &c.tb, &c.m, &c.n, &c.k, &c.alpha, <double*>c.A, &c.lda, <double*>c.B, &c.ldb,
              &c.beta, <double*>c.C, &c.ldc)
    else:
        salpha, sbeta = <float>c.alpha, <float>c.beta
        sgemm(&c.ta, &c.tb, &c.m, &c.n, &c.k, &salpha, <float*>c.A, &c.lda, <float*>c.B, &c.ldb,
              &sbeta, <float*>c.C, &c.ldc)


cdef void _blas_gemm(char ta, char tb, int m, int n, int k, real_t alpha, real_t* A, int lda,
                     real_t* B, int ldb, real_t beta, real_t* C, int ldc, int threads) noexcept nogil:
    """BLAS gemm (column-major). MKL: one call on a team of ``threads`` MKL threads. OpenBLAS: one
    call, or up to _MAX_CHUNKS calls on disjoint blocks of C split along its longer side (m: rows
    of op(A); n: columns of op(B)), run on this thread and the helper; every element of C is
    computed by the same kernel over the same K order either way (``threads`` is not used)."""
    cdef _BlasChunk chunks[_MAX_CHUNKS]
    cdef double mnk = <double>m * n * k
    cdef int pieces = <int>(mnk / _CHUNK_MNK), along_m = m >= n, extent = m if m >= n else n
    cdef int step, lo, hi, count = 0
    cdef _BlasChunk* c
    if ek_use_mkl:
        if real_t is float:
            ek_mkl_gemm_s(threads, &ta, &tb, &m, &n, &k, &alpha, A, &lda, B, &ldb, &beta, C, &ldc)
        else:
            ek_mkl_gemm_d(threads, &ta, &tb, &m, &n, &k, &alpha, A, &lda, B, &ldb, &beta, C, &ldc)
        return
    if pieces > _MAX_CHUNKS:
        pieces = _MAX_CHUNKS
    if pieces > extent // _CHUNK_ALIGN:
        pieces = extent // _CHUNK_ALIGN
    if pieces < 2:
        if real_t is float:
            sgemm(&ta, &tb, &m, &n, &k, &alpha, A, &lda, B, &ldb, &beta, C, &ldc)
        else:
            dgemm(&ta, &tb, &m, &n, &k, &alpha, A, &lda, B, &ldb, &beta, C, &ldc)
        return
    step = (extent + pieces - 1) // pieces
    step = (step + _CHUNK_ALIGN - 1) // _CHUNK_ALIGN * _CHUNK_ALIGN
    lo = 0
    while lo < extent:
        hi = lo + step if lo + step < extent else extent
        c = &chunks[count]
        c.ta, c.tb, c.k, c.lda, c.ldb, c.ldc = ta, tb, k, lda, ldb, ldc
        c.dbl = real_t is double
        c.alpha, c.beta = alpha, beta
        if along_m:   # rows lo..hi of op(A) and of C
            c.m, c.n = hi - lo, n
            c.A = <void*>(A + (<Py_ssize_t>lo if ta == b'N' else <Py_ssize_t>lo * lda))
            c.B = <void*>B
            c.C = <void*>(C + lo)
        else:         # columns lo..hi of op(B) and of C
            c.m, c.n = m, hi - lo
            c.A = <void*>A
            c.B = <void*>(B + (<Py_ssize_t>lo * ldb if tb == b'N' else <Py_ssize_t>lo))
            c.C = <void*>(C + <Py_ssize_t>lo * ldc)
        count += 1
        lo = hi
    ek_pool_run(_run_chunk, <void*>chunks, sizeof(_BlasChunk), count)


# bmm/baddbmm of float32/float64 operands: the batch in two halves on this thread and the helper,
# when the outputs overlap no operand (each entry is the same _gemm call either way).
ctypedef struct _BatchJob:
    char* po
    char* pa
    char* pb
    char* pc
    int odt, adt, bdt, cdt
    Py_ssize_t osb, os0, os1, asb, as0, as1, bsb, bs0, bs1, csb, cs0, cs1
    Py_ssize_t lo, hi
    int m, n, k
    bint f64
    double alpha, beta
    int rc


cdef void _batch_job(void* arg) noexcept nogil:
    cdef _BatchJob* j = <_BatchJob*>arg
    cdef Py_ssize_t i
    j.rc = 0
    for i in range(j.lo, j.hi):
        if j.f64:
            j.rc = _gemm(j.po + i * j.osb, j.odt, j.os0, j.os1, j.pa + i * j.asb, j.adt, j.as0, j.as1,
                         j.pb + i * j.bsb, j.bdt, j.bs0, j.bs1, j.pc + i * j.csb, j.cdt, j.cs0, j.cs1,
                         j.m, j.n, j.k, j.alpha, j.beta, 1)
        else:
            j.rc = _gemm(j.po + i * j.osb, j.odt, j.os0, j.os1, j.pa + i * j.asb, j.adt, j.as0, j.as1,
                         j.pb + i * j.bsb, j.bdt, j.bs0, j.bs1, j.pc + i * j.csb, j.cdt, j.cs0, j.cs1,
                         j.m, j.n, j.k, <float>j.alpha, <float>j.beta, 1)
        if j.rc != 0:
            break


cdef inline void _extent3(const char* p, Py_ssize_t sb, Py_ssize_t s0, Py_ssize_t s1, Py_ssize_t nb,
                          Py_ssize_t n0, Py_ssize_t n1, Py_ssize_t isz, const char** lo,
                          const char** hi) noexcept nogil:
    cdef const char* a
    cdef const char* b
    _extent(p, s0, s1, n0, n1, isz, &a, &b)
    if sb >= 0:
        b += sb * (nb - 1)
    else:
        a += sb * (nb - 1)
    lo[0], hi[0] = a, b


def set_gemm_helpers(n):
    """Sets how many helper threads large GEMMs may use (0 or 1); returns the previous count.
    The results do not depend on it (tests compare both)."""
    return ek_pool_set_helpers(1 if n else 0)


cdef int _gemm(char* out, int odt, Py_ssize_t os0, Py_ssize_t os1,
               char* a, int adt, Py_ssize_t as0, Py_ssize_t as1,
               char* b, int bdt, Py_ssize_t bs0, Py_ssize_t bs1,
               char* c, int cdt, Py_ssize_t cs0, Py_ssize_t cs1,
               int M, int N, int K, real_t alpha, real_t beta, int threads) noexcept nogil:
    """Returns 0, or -1 if scratch allocation failed. ``threads``: MKL's team (see _blas_gemm)."""
    cdef int want = DT_FLOAT32 if real_t is float else DT_FLOAT64
    cdef Py_ssize_t isz = itemsize_of(want), i, j
    cdef real_t* abuf = NULL
    cdef real_t* bbuf = NULL
    cdef real_t* cbuf = NULL
    cdef real_t* A
    cdef real_t* B
    cdef real_t* C
    cdef char ta, tb, tc
    cdef int lda, ldb, ldc
    cdef const char* lo_o
    cdef const char* hi_o
    cdef const char* lo_x
    cdef const char* hi_x
    cdef bint direct_out, pack_a = False, pack_b = False, c_in_out = False
    cdef int blas_threads, rc

    # bfloat16 x bfloat16 runs on the host's AMX tiles where it has them (_amx.pxi).
    if real_t is float:
        if adt == DT_BFLOAT16 and bdt == DT_BFLOAT16 and K > 0 and M > 0 and N > 0:
            rc = _gemm_bf16_amx(out, odt, os0, os1, a, as0, as1, b, bs0, bs1, c, cdt, cs0, cs1,
                                M, N, K, alpha, beta)
            if rc != 1:
                return rc

    # 1. Decide layouts: operands in BLAS type and layout are used in place.
    if K > 0:
        pack_a = not _blas_view(a, adt, want, as0, as1, M, K, &ta, &lda)
        pack_b = not _blas_view(b, bdt, want, bs0, bs1, K, N, &tb, &ldb)
    # The output is written by BLAS in place when it is a row-major buffer of
    # the BLAS type that aliases neither A nor B and needs no C but itself.
    direct_out = _blas_view(out, odt, want, os0, os1, M, N, &tc, &ldc) and tc == b'N'
    if direct_out:
        _extent(out, os0, os1, M, N, isz, &lo_o, &hi_o)
        if K > 0:
            _extent(a, as0, as1, M, K, itemsize_of(adt), &lo_x, &hi_x)
            direct_out = not _overlaps(lo_o, hi_o, lo_x, hi_x)
            _extent(b, bs0, bs1, K, N, itemsize_of(bdt), &lo_x, &hi_x)
            direct_out = direct_out and not _overlaps(lo_o, hi_o, lo_x, hi_x)
        if beta != 0 and not (c == out and cdt == odt and cs0 == os0 and cs1 == os1):
            direct_out = False
            # C elsewhere (a bias): it is widened into the output itself, which BLAS then updates
            # in place, when the output is a dense row-major buffer that C does not overlap (the
            # same values, and the same ldc, as the scratch it would take otherwise).
            if K > 0 and ldc == N and not (pack_a or pack_b):
                _extent(a, as0, as1, M, K, itemsize_of(adt), &lo_x, &hi_x)
                c_in_out = not _overlaps(lo_o, hi_o, lo_x, hi_x)
                _extent(b, bs0, bs1, K, N, itemsize_of(bdt), &lo_x, &hi_x)
                c_in_out = c_in_out and not _overlaps(lo_o, hi_o, lo_x, hi_x)
                _extent(c, cs0, cs1, M, N, itemsize_of(cdt), &lo_x, &hi_x)
                c_in_out = c_in_out and not _overlaps(lo_o, hi_o, lo_x, hi_x)
                direct_out = c_in_out

    # 2. Scratch.
    if pack_a:
        abuf = <real_t*>malloc(<size_t>M * K * sizeof(real_t))
    if pack_b:
        bbuf = <real_t*>malloc(<size_t>K * N * sizeof(real_t))
    if not direct_out:
        cbuf = <real_t*>calloc(<size_t>M * N, sizeof(real_t))
    if (pack_a and abuf == NULL) or (pack_b and bbuf == NULL) or (not direct_out and cbuf == NULL):
        free(abuf)
        free(bbuf)
        free(cbuf)
        return -1

    # 3. Pack (this is where float16/bfloat16/strided operands are widened).
    A = <real_t*>a
    B = <real_t*>b
    C = <real_t*>out
    if pack_a:
        _pack(a, adt, as0, as1, M, K, abuf)
        A = abuf
        ta = b'N'
        lda = K
    if pack_b:
        _pack(b, bdt, bs0, bs1, K, N, bbuf)
        B = bbuf
        tb = b'N'
        ldb = N
    if not direct_out:
        if beta != 0:
            _pack(c, cdt, cs0, cs1, M, N, cbuf)      # C widened exactly to fp32/fp64
        C = cbuf
        ldc = N
    elif c_in_out:
        _pack(c, cdt, cs0, cs1, M, N, C)             # likewise, into the output

    if K == 0:
        # Empty sum: out = beta * C.  Done here because BLAS implementations
        # disagree on degenerate k.
        for i in range(M):
            for j in range(N):
                C[i * ldc + j] = 0 if beta == 0 else beta * C[i * ldc + j]
    else:
        if ek_use_mkl:
            _blas_gemm(tb, ta, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc, threads)
        else:
            blas_threads = ek_blas_single_thread()
            _blas_gemm(tb, ta, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc, 1)
            ek_blas_restore_threads(blas_threads)

    if not direct_out:
        for i in range(M):                          # the single rounding to the output dtype
            store_block(cbuf + i * N, N, odt, out + i * os0, os1)
    free(abuf)
    free(bbuf)
    free(cbuf)
    return 0


cdef bint _check_kinds(int odt, int adt, int bdt, int cdt, bint reads_c) except -1:
    """True for an integer GEMM, False for a floating one; mixed kinds or bool are rejected."""
    cdef bint fl = is_floating(adt)
    if is_floating(bdt) != fl or is_floating(odt) != fl or (reads_c and is_floating(cdt) != fl) or \
            adt == DT_BOOL or bdt == DT_BOOL or odt == DT_BOOL or (reads_c and cdt == DT_BOOL):
        raise KernelArgumentError(_MIXED_ERROR)
    return not fl


cdef int64_t _int_scalar(object v, str what) except? -1:
    if isinstance(v, float) and v.is_integer():
        v = int(v)  # the signature's defaults (beta=0.0, alpha=1.0)
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v < (1 << 63):
        raise KernelArgumentError(f"matmul: integer GEMM needs an int64 {what}, got {v!r}")
    return v


cdef void _iacc_init(int64_t* acc, const char* c, int cdt, Py_ssize_t cs0, Py_ssize_t cs1,
                     Py_ssize_t M, Py_ssize_t N, int64_t beta) noexcept nogil:
    """acc[M x N] = beta * C (0 when beta == 0: C is not read), wrapping."""
    cdef Py_ssize_t i, j
    if beta == 0:
        memset(acc, 0, <size_t>M * N * sizeof(int64_t))
        return
    for i in range(M):
        load_block(c + i * cs0, cs1, cdt, N, acc + i * N)
        for j in range(N):
            acc[i * N + j] = <int64_t>(<uint64_t>acc[i * N + j] * <uint64_t>beta)


cdef int _igemm_acc(int64_t* acc, const char* a, int adt, Py_ssize_t as0, Py_ssize_t as1,
                    const char* b, int bdt, Py_ssize_t bs0, Py_ssize_t bs1,
                    Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, int64_t alpha) noexcept nogil:
    """acc[M x N] += alpha * A @ B in 64-bit two's complement; -1 if scratch allocation failed."""
    cdef int64_t* arow
    cdef int64_t* bbuf
    cdef uint64_t aik
    cdef uint64_t* row
    cdef const uint64_t* brow
    cdef Py_ssize_t i, j, k
    if K == 0 or alpha == 0:
        return 0
    arow = <int64_t*>malloc(<size_t>K * sizeof(int64_t))
    bbuf = <int64_t*>malloc(<size_t>K * N * sizeof(int64_t))
    if arow == NULL or bbuf == NULL:
        free(arow)
        free(bbuf)
        return -1
    for k in range(K):
        load_block(b + k * bs0, bs1, bdt, N, bbuf + k * N)
    for i in range(M):
        load_block(a + i * as0, as1, adt, K, arow)
        row = <uint64_t*>(acc + i * N)
        for k in range(K):
            aik = <uint64_t>arow[k] * <uint64_t>alpha
            brow = <const uint64_t*>(bbuf + k * N)
            for j in range(N):
                row[j] += aik * brow[j]
    free(arow)
    free(bbuf)
    return 0


cdef void _iacc_store(const int64_t* acc, char* out, int odt, Py_ssize_t os0, Py_ssize_t os1,
                      Py_ssize_t M, Py_ssize_t N) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(M):
        store_block(acc + i * N, N, odt, out + i * os0, os1)   # wraps to the output width


cdef int _igemm_store(char* out, int odt, Py_ssize_t os0, Py_ssize_t os1,
                      char* a, int adt, Py_ssize_t as0, Py_ssize_t as1,
                      char* b, int bdt, Py_ssize_t bs0, Py_ssize_t bs1,
                      char* c, int cdt, Py_ssize_t cs0, Py_ssize_t cs1,
                      Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, int64_t alpha, int64_t beta) noexcept nogil:
    cdef int64_t* acc = <int64_t*>malloc(<size_t>M * N * sizeof(int64_t))
    cdef int rc
    if acc == NULL:
        return -1
    _iacc_init(acc, c, cdt, cs0, cs1, M, N, beta)
    rc = _igemm_acc(acc, a, adt, as0, as1, b, bdt, bs0, bs1, M, N, K, alpha)
    if rc == 0:
        _iacc_store(acc, out, odt, os0, os1, M, N)
    free(acc)
    return rc


cdef tuple _strides2(object s, Py_ssize_t isz, str what):
    s = tuple(s)
    if len(s) != 2:
        raise KernelArgumentError(f"matmul: {what} must have 2 entries, got {s!r}")
    return (<Py_ssize_t>s[0] * isz, <Py_ssize_t>s[1] * isz)


def matmul(out_addr, out_dtype, out_strides2, a_addr, a_dtype, a_strides2,
           b_addr, b_dtype, b_strides2, M, N, K, beta=0.0, c_addr=0, c_dtype=DT_FLOAT32,
           c_strides2=(0, 0), alpha=1.0):
    """out[M,N] = beta * C[M,N] + alpha * (A[M,K] @ B[K,N]); strides in elements.

    C is not read when beta == 0 (c_addr may be 0); its strides may be 0 to
    broadcast a bias.  float64 compute if A or B is float64, else float32.
    """
    cdef int odt = check_dtype(out_dtype, "matmul out_dtype")
    cdef int adt = check_dtype(a_dtype, "matmul a_dtype")
    cdef int bdt = check_dtype(b_dtype, "matmul b_dtype")
    cdef int cdt = check_dtype(c_dtype, "matmul c_dtype")
    cdef int m, n, k, rc
    cdef char* po
    cdef char* pa = NULL
    cdef char* pb = NULL
    cdef char* pc = NULL
    cdef Py_ssize_t os0, os1, as0, as1, bs0, bs1, cs0 = 0, cs1 = 0
    cdef double dbeta = float(beta), dalpha = float(alpha)
    cdef int64_t ibeta = 0, ialpha = 0
    cdef bint integer = _check_kinds(odt, adt, bdt, cdt, beta != 0)
    for v, name in ((M, "M"), (N, "N"), (K, "K")):
        if not hasattr(v, "__index__") or not (0 <= v < 2**31):
            raise KernelArgumentError(f"matmul: {name} must be an int in [0, 2**31), got {v!r}")
    m, n, k = M, N, K
    os0, os1 = _strides2(out_strides2, itemsize_of(odt), "out_strides2")
    as0, as1 = _strides2(a_strides2, itemsize_of(adt), "a_strides2")
    bs0, bs1 = _strides2(b_strides2, itemsize_of(bdt), "b_strides2")
    if dbeta != 0:
        cs0, cs1 = _strides2(c_strides2, itemsize_of(cdt), "c_strides2")
    if m == 0 or n == 0:
        return
    po = as_ptr(out_addr, "matmul out_addr")
    if k > 0:
        pa = as_ptr(a_addr, "matmul a_addr")
        pb = as_ptr(b_addr, "matmul b_addr")
    if dbeta != 0:
        pc = as_ptr(c_addr, "matmul c_addr")
    if integer:
        ibeta, ialpha = _int_scalar(beta, "beta"), _int_scalar(alpha, "alpha")
    with nogil:
        if integer:
            rc = _igemm_store(po, odt, os0, os1, pa, adt, as0, as1, pb, bdt, bs0, bs1, pc, cdt, cs0, cs1,
                              m, n, k, ialpha, ibeta)
        elif adt == DT_FLOAT64 or bdt == DT_FLOAT64:
            rc = _gemm(po, odt, os0, os1, pa, adt, as0, as1, pb, bdt, bs0, bs1, pc, cdt, cs0, cs1,
                       m, n, k, dalpha, dbeta, _MKL_TEAM)
        else:
            rc = _gemm(po, odt, os0, os1, pa, adt, as0, as1, pb, bdt, bs0, bs1, pc, cdt, cs0, cs1,
                       m, n, k, <float>dalpha, <float>dbeta, _MKL_TEAM)
    if rc != 0:
        raise MemoryError("matmul: could not allocate scratch buffers")


cdef tuple _strides_n(object s, int n, Py_ssize_t isz, str what):
    s = tuple(s)
    if len(s) != n:
        raise KernelArgumentError(f"bmatmul: {what} must have {n} entries, got {s!r}")
    return tuple(<Py_ssize_t>v * isz for v in s)


def bmatmul(out_addr, out_dtype, out_strides, a_addr, a_dtype, a_strides3,
            b_addr, b_dtype, b_strides3, batch, M, N, K, beta=0.0, c_addr=0, c_dtype=DT_FLOAT32,
            c_strides=(0, 0, 0), alpha=1.0, reduce_batch=False):
    """Batched GEMM, strides in elements.

    reduce_batch False (bmm, baddbmm): out[b] = beta * C[b] + alpha * (A[b] @ B[b]); out and C are
    (batch, M, N) with 3 strides.  reduce_batch True (addbmm): out = beta * C + alpha * sum_b A[b] @ B[b];
    out and C are (M, N) with 2 strides, accumulated in one scratch and rounded once.  C is not read
    when beta == 0; its strides may be 0 (broadcast bias).
    """
    cdef int odt = check_dtype(out_dtype, "bmatmul out_dtype")
    cdef int adt = check_dtype(a_dtype, "bmatmul a_dtype")
    cdef int bdt = check_dtype(b_dtype, "bmatmul b_dtype")
    cdef int cdt = check_dtype(c_dtype, "bmatmul c_dtype")
    cdef bint integer = _check_kinds(odt, adt, bdt, cdt, beta != 0)
    cdef bint reduce = bool(reduce_batch), f64 = adt == DT_FLOAT64 or bdt == DT_FLOAT64
    cdef int nout = 2 if reduce else 3
    cdef Py_ssize_t nb, m, n, k, i, osb = 0, os0, os1, asb, as0, as1, bsb, bs0, bs1, csb = 0, cs0 = 0, cs1 = 0
    cdef Py_ssize_t want_isz
    cdef int rc = 0, want
    cdef char* po
    cdef char* pa = NULL
    cdef char* pb = NULL
    cdef char* pc = NULL
    cdef char* scratch = NULL
    cdef double dbeta = float(beta), dalpha = float(alpha)
    cdef int64_t ibeta = 0, ialpha = 0
    cdef bint split
    cdef int h, team
    cdef _BatchJob jobs[2]
    cdef const char* lo_o
    cdef const char* hi_o
    cdef const char* lo_x
    cdef const char* hi_x
    for v, name in ((batch, "batch"), (M, "M"), (N, "N"), (K, "K")):
        if not hasattr(v, "__index__") or not (0 <= v < 2**31):
            raise KernelArgumentError(f"bmatmul: {name} must be an int in [0, 2**31), got {v!r}")
    nb, m, n, k = batch, M, N, K
    so = _strides_n(out_strides, nout, itemsize_of(odt), "out_strides")
    sa = _strides_n(a_strides3, 3, itemsize_of(adt), "a_strides3")
    sb = _strides_n(b_strides3, 3, itemsize_of(bdt), "b_strides3")
    if reduce:
        os0, os1 = so
    else:
        osb, os0, os1 = so
    asb, as0, as1 = sa
    bsb, bs0, bs1 = sb
    if dbeta != 0:
        sc = _strides_n(c_strides, nout, itemsize_of(cdt), "c_strides")
        if reduce:
            cs0, cs1 = sc
        else:
            csb, cs0, cs1 = sc
    if m == 0 or n == 0 or (nb == 0 and not reduce):
        return
    po = as_ptr(out_addr, "bmatmul out_addr")
    if k > 0 and nb > 0:
        pa = as_ptr(a_addr, "bmatmul a_addr")
        pb = as_ptr(b_addr, "bmatmul b_addr")
    if dbeta != 0:
        pc = as_ptr(c_addr, "bmatmul c_addr")
    if integer:
        ibeta, ialpha = _int_scalar(beta, "beta"), _int_scalar(alpha, "alpha")
    # MKL's team for each matrix of the batch: one thread as soon as there are two matrices (they
    # may split over the pool), whether or not they do split: the bits depend on the shape only.
    team = 1 if nb >= 2 else _MKL_TEAM
    split = (not integer and not reduce and nb >= 2 and (adt == DT_FLOAT32 or adt == DT_FLOAT64)
             and (bdt == DT_FLOAT32 or bdt == DT_FLOAT64) and <double>nb * m * n * k >= _CHUNK_MNK)
    if split:
        _extent3(po, osb, os0, os1, nb, m, n, itemsize_of(odt), &lo_o, &hi_o)
        if k > 0:
            _extent3(pa, asb, as0, as1, nb, m, k, itemsize_of(adt), &lo_x, &hi_x)
            split = not _overlaps(lo_o, hi_o, lo_x, hi_x)
            _extent3(pb, bsb, bs0, bs1, nb, k, n, itemsize_of(bdt), &lo_x, &hi_x)
            split = split and not _overlaps(lo_o, hi_o, lo_x, hi_x)
        if dbeta != 0:
            _extent3(pc, csb, cs0, cs1, nb, m, n, itemsize_of(cdt), &lo_x, &hi_x)
            split = split and not _overlaps(lo_o, hi_o, lo_x, hi_x)
    if split:
        for h in range(2):
            jobs[h].po, jobs[h].pa, jobs[h].pb, jobs[h].pc = po, pa, pb, pc
            jobs[h].odt, jobs[h].adt, jobs[h].bdt, jobs[h].cdt = odt, adt, bdt, cdt
            jobs[h].osb, jobs[h].os0, jobs[h].os1 = osb, os0, os1
            jobs[h].asb, jobs[h].as0, jobs[h].as1 = asb, as0, as1
            jobs[h].bsb, jobs[h].bs0, jobs[h].bs1 = bsb, bs0, bs1
            jobs[h].csb, jobs[h].cs0, jobs[h].cs1 = csb, cs0, cs1
            jobs[h].lo = 0 if h == 0 else nb // 2
            jobs[h].hi = nb // 2 if h == 0 else nb
            jobs[h].m, jobs[h].n, jobs[h].k = <int>m, <int>n, <int>k
            jobs[h].f64 = f64
            jobs[h].alpha, jobs[h].beta = dalpha, dbeta
        with nogil:
            ek_pool_run(_batch_job, <void*>jobs, sizeof(_BatchJob), 2)
        rc = jobs[0].rc if jobs[0].rc != 0 else jobs[1].rc
        if rc != 0:
            raise MemoryError("bmatmul: could not allocate scratch buffers")
        return
    with nogil:
        if not reduce:
            for i in range(nb):
                if integer:
                    rc = _igemm_store(po + i * osb, odt, os0, os1, pa + i * asb, adt, as0, as1,
                                      pb + i * bsb, bdt, bs0, bs1, pc + i * csb, cdt, cs0, cs1,
                                      m, n, k, ialpha, ibeta)
                elif f64:
                    rc = _gemm(po + i * osb, odt, os0, os1, pa + i * asb, adt, as0, as1,
                               pb + i * bsb, bdt, bs0, bs1, pc + i * csb, cdt, cs0, cs1,
                               <int>m, <int>n, <int>k, dalpha, dbeta, team)
                else:
                    rc = _gemm(po + i * osb, odt, os0, os1, pa + i * asb, adt, as0, as1,
                               pb + i * bsb, bdt, bs0, bs1, pc + i * csb, cdt, cs0, cs1,
                               <int>m, <int>n, <int>k, <float>dalpha, <float>dbeta, team)
                if rc != 0:
                    break
        elif integer:
            scratch = <char*>malloc(<size_t>m * n * sizeof(int64_t))
            if scratch == NULL:
                rc = -1
            else:
                _iacc_init(<int64_t*>scratch, pc, cdt, cs0, cs1, m, n, ibeta)
                for i in range(nb):
                    rc = _igemm_acc(<int64_t*>scratch, pa + i * asb, adt, as0, as1, pb + i * bsb, bdt,
                                    bs0, bs1, m, n, k, ialpha)
                    if rc != 0:
                        break
                if rc == 0:
                    _iacc_store(<int64_t*>scratch, po, odt, os0, os1, m, n)
        else:
            # One float32 (float64) scratch accumulates the whole batch: each entry is a GEMM with
            # beta = 1 onto it (the first one applies the caller's beta and C); one rounding at the end.
            want = DT_FLOAT64 if f64 else DT_FLOAT32
            want_isz = itemsize_of(want)
            scratch = <char*>calloc(<size_t>m * n, want_isz)
            if scratch == NULL:
                rc = -1
            elif nb == 0:
                if dbeta != 0:
                    if f64:
                        rc = _gemm(scratch, want, n * want_isz, want_isz, NULL, adt, 0, 0, NULL, bdt, 0, 0,
                                   pc, cdt, cs0, cs1, <int>m, <int>n, 0, dalpha, dbeta, _MKL_TEAM)
                    else:
                        rc = _gemm(scratch, want, n * want_isz, want_isz, NULL, adt, 0, 0, NULL, bdt, 0, 0,
                                   pc, cdt, cs0, cs1, <int>m, <int>n, 0, <float>dalpha, <float>dbeta, _MKL_TEAM)
            else:
                for i in range(nb):
                    if f64:
                        rc = _gemm(scratch, want, n * want_isz, want_isz, pa + i * asb, adt, as0, as1,
                                   pb + i * bsb, bdt, bs0, bs1,
                                   pc if i == 0 else scratch, cdt if i == 0 else want,
                                   cs0 if i == 0 else n * want_isz, cs1 if i == 0 else want_isz,
                                   <int>m, <int>n, <int>k, dalpha, dbeta if i == 0 else 1.0, _MKL_TEAM)
                    else:
                        rc = _gemm(scratch, want, n * want_isz, want_isz, pa + i * asb, adt, as0, as1,
                                   pb + i * bsb, bdt, bs0, bs1,
                                   pc if i == 0 else scratch, cdt if i == 0 else want,
                                   cs0 if i == 0 else n * want_isz, cs1 if i == 0 else want_isz,
                                   <int>m, <int>n, <int>k, <float>dalpha, <float>(dbeta if i == 0 else 1.0),
                                   _MKL_TEAM)
                    if rc != 0:
                        break
            if rc == 0:
                for i in range(m):                  # the single rounding to the output dtype
                    if f64:
                        store_block(<double*>scratch + i * n, n, odt, po + i * os0, os1)
                    else:
                        store_block(<float*>scratch + i * n, n, odt, po + i * os0, os1)
        free(scratch)
    if rc != 0:
        raise MemoryError("bmatmul: could not allocate scratch buffers")


def addr(out_addr, out_dtype, out_strides2, c_addr, c_dtype, c_strides2, v1_addr, v1_dtype, v1_stride,
         v2_addr, v2_dtype, v2_stride, M, N, beta, alpha, compute_dtype):
    """out[i, j] = beta * C[i, j] + alpha * v1[i] * v2[j] in ``compute_dtype`` (strides in elements).

    Operands are cast to the compute dtype first; C is not read when beta is 0 (False for bool).
    bool: (beta and C) or (alpha and v1 and v2).
    """
    cdef int odt = check_dtype(out_dtype, "addr out_dtype")
    cdef int cdt = check_dtype(c_dtype, "addr c_dtype")
    cdef int d1 = check_dtype(v1_dtype, "addr v1_dtype")
    cdef int d2 = check_dtype(v2_dtype, "addr v2_dtype")
    cdef int kdt = check_dtype(compute_dtype, "addr compute_dtype")
    cdef Py_ssize_t m, n, i, j0, cnt, os0, os1, cs0 = 0, cs1 = 0, s1, s2, j
    cdef bint reads_c = beta != 0, fl = is_floating(kdt)
    cdef double fbeta = 0, falpha = 0, x1
    cdef int64_t ibeta = 0, ialpha = 0, i1
    cdef double fv2[BLOCK]
    cdef double fc[BLOCK]
    cdef int64_t iv2[BLOCK]
    cdef int64_t ic[BLOCK]
    cdef char* po
    cdef char* pc = NULL
    cdef char* p1
    cdef char* p2
    for v, name in ((M, "M"), (N, "N")):
        if not hasattr(v, "__index__") or v < 0:
            raise KernelArgumentError(f"addr: {name} must be a non-negative int, got {v!r}")
    m, n = M, N
    os0, os1 = _strides2(out_strides2, itemsize_of(odt), "out_strides2")
    if reads_c:
        cs0, cs1 = _strides2(c_strides2, itemsize_of(cdt), "c_strides2")
    s1 = <Py_ssize_t>v1_stride * itemsize_of(d1)
    s2 = <Py_ssize_t>v2_stride * itemsize_of(d2)
    if fl:
        fbeta, falpha = float(beta), float(alpha)
    elif kdt == DT_BOOL:
        ibeta, ialpha = bool(beta), bool(alpha)
    else:
        ibeta, ialpha = _int_scalar(beta, "beta"), _int_scalar(alpha, "alpha")
    if m == 0 or n == 0:
        return
    po = as_ptr(out_addr, "addr out_addr")
    p1 = as_ptr(v1_addr, "addr v1_addr")
    p2 = as_ptr(v2_addr, "addr v2_addr")
    if reads_c:
        pc = as_ptr(c_addr, "addr c_addr")
    with nogil:
        for i in range(m):
            j0 = 0
            if fl:
                load_block(p1 + i * s1, 0, d1, 1, &x1)
                round_block_to(&x1, 1, kdt)
            else:
                load_block(p1 + i * s1, 0, d1, 1, &i1)
                round_block_to(&i1, 1, kdt)
            while j0 < n:
                cnt = n - j0 if n - j0 < BLOCK else BLOCK
                if fl:
                    load_block(p2 + j0 * s2, s2, d2, cnt, fv2)
                    round_block_to(fv2, cnt, kdt)
                    if reads_c:
                        load_block(pc + i * cs0 + j0 * cs1, cs1, cdt, cnt, fc)
                        round_block_to(fc, cnt, kdt)
                        for j in range(cnt):
                            fv2[j] = fbeta * fc[j] + falpha * x1 * fv2[j]
                    else:
                        for j in range(cnt):
                            fv2[j] = falpha * x1 * fv2[j]
                    round_block_to(fv2, cnt, kdt)       # the result in the compute dtype
                    store_block(fv2, cnt, odt, po + i * os0 + j0 * os1, os1)
                else:
                    load_block(p2 + j0 * s2, s2, d2, cnt, iv2)
                    round_block_to(iv2, cnt, kdt)
                    if reads_c:
                        load_block(pc + i * cs0 + j0 * cs1, cs1, cdt, cnt, ic)
                        round_block_to(ic, cnt, kdt)
                    for j in range(cnt):
                        if kdt == DT_BOOL:
                            iv2[j] = (reads_c and ic[j] != 0) or (ialpha != 0 and i1 != 0 and iv2[j] != 0)
                        elif reads_c:
                            iv2[j] = <int64_t>(<uint64_t>ibeta * <uint64_t>ic[j]
                                               + <uint64_t>ialpha * <uint64_t>i1 * <uint64_t>iv2[j])
                        else:
                            iv2[j] = <int64_t>(<uint64_t>ialpha * <uint64_t>i1 * <uint64_t>iv2[j])
                    round_block_to(iv2, cnt, kdt)
                    store_block(iv2, cnt, odt, po + i * os0 + j0 * os1, os1)
                j0 += cnt
