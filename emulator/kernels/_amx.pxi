# bfloat16 GEMM on the host's AMX tiles (Intel Advanced Matrix Extensions), when it has them.
#
# Speed only, for the matrix engine's functional bf16 x bf16 GEMM: the arithmetic is the
# engine's numerics contract (bfloat16 products accumulated in float32), as TDPBF16PS
# computes it: each instruction adds 32 products per output (pairs of K) to a float32
# accumulator, round to nearest even. TDPBF16PS treats bfloat16 subnormal inputs as zero and
# flushes float32 subnormal results to zero; only sums whose every product is below 2**-126
# are affected. PyTorch's CPU bf16 matmul on the same host (oneDNN) runs on the same
# instruction.
#
# Availability is probed once: CPUID leaf 7 (AMX-TILE, AMX-BF16) and the kernel's permission
# for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+). Without them, or
# with a compiler older than GCC 11 / Clang 12, ek_amx_available() is 0 and the GEMM goes to
# BLAS in float32 as before.

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__x86_64__) && defined(__linux__) && \
        ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
    #define EK_AMX_BUILD 1
    #include <immintrin.h>
    #include <cpuid.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    #endif

    static int ek_amx_state = -1;        /* -1: not probed, 0: unavailable, 1: available */

    static int ek_amx_available(void) {
        if (ek_amx_state < 0) {
            ek_amx_state = 0;
    #ifdef EK_AMX_BUILD
            unsigned a, b, c, d;
            if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1)
                    && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0)
                ek_amx_state = 1;
    #endif
        }
        return ek_amx_state;
    }

    #ifdef EK_AMX_BUILD
    typedef struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } ek_tilecfg;

    /* P[Mp x Np] (float32, row-major) = A @ B with A and B packed in tiles (see
       _gemm_bf16_amx): tile (r, q) of A, rows 16r..16r+15 and columns 32q..32q+31 of A, is
       the 1 KiB at A + (r * Kq + q) * 512; tile (r, q) of B, columns 16r..16r+15 and rows
       32q..32q+31 of B in VNNI pairs, is at B + (r * Kq + q) * 512 (Kq = Kp / 32). Mp, Np and
       Kp are multiples of 32. Tiles 0-3 hold a 32 x 32 block of P, 4-5 two tiles of A and
       6-7 two tiles of B. */
    __attribute__((target("amx-tile,amx-bf16")))
    static void ek_amx_bf16_kernel(const uint16_t *A, const uint16_t *B, float *P,
                                   Py_ssize_t Mp, Py_ssize_t Np, Py_ssize_t Kp) {
        ek_tilecfg cfg;
        Py_ssize_t i, j, q, q0, qend, t, Kq = Kp / 32;
        const uint16_t *a0, *a1, *b0, *b1;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
        _tile_loadconfig(&cfg);
        /* K in chunks of 256 (8 tiles): a block row of A for one chunk (16 KiB) stays in L1
           while it meets every block column of B's chunk (which stays in L2); P accumulates
           across chunks. */
        for (q0 = 0; q0 < Kq; q0 += 8) {
            qend = q0 + 8 < Kq ? q0 + 8 : Kq;
            for (i = 0; i < Mp; i += 32) {
                a0 = A + (i / 16) * Kq * 512;
                a1 = a0 + Kq * 512;
                for (j = 0; j < Np; j += 32) {
                    if (q0 == 0) {
                        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
                    } else {
                        _tile_loadd(0, P + i * Np + j, Np * 4);
                        _tile_loadd(1, P + i * Np + j + 16, Np * 4);
                        _tile_loadd(2, P + (i + 16) * Np + j, Np * 4);
                        _tile_loadd(3, P + (i + 16) * Np + j + 16, Np * 4);
                    }
                    b0 = B + (j / 16) * Kq * 512;
                    b1 = b0 + Kq * 512;
                    for (q = q0; q < qend; q++) {
                        _tile_loadd(4, a0 + q * 512, 64);
                        _tile_loadd(6, b0 + q * 512, 64);
                        _tile_loadd(5, a1 + q * 512, 64);
                        _tile_loadd(7, b1 + q * 512, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                    _tile_stored(0, P + i * Np + j, Np * 4);
                    _tile_stored(1, P + i * Np + j + 16, Np * 4);
                    _tile_stored(2, P + (i + 16) * Np + j, Np * 4);
                    _tile_stored(3, P + (i + 16) * Np + j + 16, Np * 4);
                }
            }
        }
        _tile_release();
    }
    #endif

    /* See ek_amx_bf16_kernel; returns 0 (nothing done) when AMX is unavailable. */
    static int ek_amx_bf16_gemm(const uint16_t *A, const uint16_t *Bv, float *P,
                                Py_ssize_t Mp, Py_ssize_t Np, Py_ssize_t Kp) {
    #ifdef EK_AMX_BUILD
        if (ek_amx_available() != 1) return 0;
        ek_amx_bf16_kernel(A, Bv, P, Mp, Np, Kp);
        return 1;
    #else
        return 0;
    #endif
    }
    """
    int ek_amx_available() noexcept nogil
    int ek_amx_bf16_gemm(const uint16_t* A, const uint16_t* B, float* P,
                         Py_ssize_t Mp, Py_ssize_t Np, Py_ssize_t Kp) noexcept nogil


cdef inline Py_ssize_t _round32(Py_ssize_t n) noexcept nogil:
    return (n + 31) & ~<Py_ssize_t>31


cdef inline void _spread16(uint16_t* dst, const uint16_t* src, Py_ssize_t n) noexcept nogil:
    """dst[2 * c] = src[c] for c < n (one row of K into the VNNI pairs of a B tile)."""
    cdef Py_ssize_t c
    for c in range(n):
        dst[2 * c] = src[c]


cdef int _gemm_bf16_amx(char* out, int odt, Py_ssize_t os0, Py_ssize_t os1,
                        const char* a, Py_ssize_t as0, Py_ssize_t as1,
                        const char* b, Py_ssize_t bs0, Py_ssize_t bs1,
                        const char* c, int cdt, Py_ssize_t cs0, Py_ssize_t cs1,
                        Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, float alpha, float beta) noexcept nogil:
    """out = beta * C + alpha * (A @ B) for bfloat16 A and B (byte strides) on AMX, the sum in
    float32, alpha/beta applied in float32 and one rounding to the output dtype (as the BLAS
    path). Returns 0 when done, 1 when AMX is unavailable (nothing written), -1 if scratch
    allocation failed."""
    cdef Py_ssize_t Mp = _round32(M), Np = _round32(N), Kp = _round32(K), Kq = Kp >> 5, i, j, k
    cdef uint16_t* tile
    cdef uint16_t* A
    cdef uint16_t* Bv
    cdef float* P
    cdef float* C = NULL
    cdef const char* row
    if ek_amx_available() != 1:
        return 1
    A = <uint16_t*>calloc(<size_t>Mp * Kp, sizeof(uint16_t))
    Bv = <uint16_t*>calloc(<size_t>Kp * Np, sizeof(uint16_t))
    P = <float*>malloc(<size_t>Mp * Np * sizeof(float))
    if beta != 0:
        C = <float*>malloc(<size_t>M * N * sizeof(float))
    if A == NULL or Bv == NULL or P == NULL or (beta != 0 and C == NULL):
        free(A)
        free(Bv)
        free(P)
        free(C)
        return -1
    # Pack A and B in 1 KiB tiles (B in VNNI pairs of K), zero-padded to the tile grid (see
    # ek_amx_bf16_kernel); and C, before anything is written: it may be the output itself.
    for i in range(M):
        row = a + i * as0
        tile = A + (i >> 4) * Kq * 512 + (i & 15) * 32
        if as1 == 2:                                   # contiguous rows: 64-byte runs
            for k in range(0, K, 32):
                memcpy(tile + (k >> 5) * 512, row + k * 2, (32 if K - k >= 32 else K - k) * 2)
        else:
            for k in range(K):
                tile[(k >> 5) * 512 + (k & 31)] = ek_ld_u16(row + k * as1)
    for k in range(K):
        row = b + k * bs0
        tile = Bv + (k >> 5) * 512 + ((k & 31) >> 1) * 32 + (k & 1)
        if bs1 == 2:                                   # contiguous rows: runs of 16 columns
            for j in range(0, N, 16):
                _spread16(tile + (j >> 4) * Kq * 512, <const uint16_t*>(row + j * 2), 16 if N - j >= 16 else N - j)
        else:
            for j in range(N):
                tile[(j >> 4) * Kq * 512 + (j & 15) * 2] = ek_ld_u16(row + j * bs1)
    if beta != 0:
        for i in range(M):
            load_block(c + i * cs0, cs1, cdt, N, C + i * N)
    ek_amx_bf16_gemm(A, Bv, P, Mp, Np, Kp)
    for i in range(M):
        if beta != 0:
            for j in range(N):
                P[i * Np + j] = alpha * P[i * Np + j] + beta * C[i * N + j]
        elif alpha != 1:
            for j in range(N):
                P[i * Np + j] = alpha * P[i * Np + j]
        store_block(P + i * Np, N, odt, out + i * os0, os1)
    free(A)
    free(Bv)
    free(P)
    free(C)
    return 0


def amx_available() -> bool:
    """Whether bf16 GEMMs run on the host's AMX tiles (see _amx.pxi)."""
    return ek_amx_available() == 1
