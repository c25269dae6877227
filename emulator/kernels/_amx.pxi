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
# Availability is probed once per process by isa.pyx: CPUID leaf 7 (AMX-TILE, AMX-BF16) and the
# kernel's permission for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+).
# Without them, with EMU_CPU_ISA below amx (isa.pyx, _isa.pxi), or with a compiler older than
# GCC 11 / Clang 12, ek_amx_available() is 0 and the GEMM goes to BLAS in float32 as before.
# Every CPU with AMX has AVX-512 (F, BW, VL), which the packers and
# the bfloat16 store below use; they only run once ek_amx_available() said yes.
#
# How it is laid out (a 1024^3 GEMM on this project's 2-core Sapphire Rapids class host: about
# 0.35 ms packing and 1.6-1.9 ms of tile arithmetic, against a TDPBF16PS peak of about 0.9 ms;
# it was 1.1 + 1.3 ms packing, 2.7-6.5 ms arithmetic and 0.7 ms for the rounding pass before):
#   * A and B are packed once per GEMM into 1 KiB tiles, B in VNNI pairs of K, with AVX-512 for
#     row-major and column-major operands (a column-major B is a transposed weight, as in
#     linear; a column-major A is a transposed activation, as in a weight gradient), into a
#     per-thread scratch kept between calls (no page faults on every GEMM). Tile loads straight
#     from a row-major A (stride K * 2 bytes) measured slower than packing it: with K = 1024 its
#     16 rows fall into 2 L1 sets;
#   * each 32 x 32 block of the product keeps its 4 float32 accumulator tiles in registers
#     across the whole K loop (2 x 2 blocking: 4 accumulators + 2 A + 2 B tiles; splitting K
#     to keep A's block in L1, at the price of reloading the accumulators, gained 2%);
#   * a bfloat16 output without alpha/beta gets each block rounded straight into it, while
#     the tiles compute the next block (fused epilogue: no float32 copy of the product, no
#     idle tile unit); other outputs get alpha/beta/C applied and are stored per block, or,
#     when C overlaps the output or output elements share memory, after the whole product;
#   * the columns are walked in chunks whose packed B (at most 1 MiB) stays in L2 while every
#     block row of A meets it (1 MiB measured best; 512 KiB and 2 MiB are 5-50% slower).
# Interleaving the packing with the tile arithmetic, software prefetch and other orders of
# the tile instructions were measured too and gained nothing (the host's memory bandwidth
# is shared by both).

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #if defined(__x86_64__) && defined(__linux__) && \
        ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
    #define EK_AMX_BUILD 1
    #include <immintrin.h>
    #endif

    /* 1 where this build has the tile code and the module's instruction-set cap (_isa.pxi) is
       amx: isa.pyx probed CPUID leaf 7 (AMX-TILE, AMX-BF16, AVX-512 F/BW/VL), the OS's
       XSAVE state and the kernel's permission for the tile data (requested there, per process). */
    static int ek_amx_available(void) {
    #ifdef EK_AMX_BUILD
        return ek_isa_cap >= EK_ISA_AMX;
    #else
        return 0;
    #endif
    }

    /* Per-thread packing scratch, kept between GEMMs up to EK_AMX_KEEP bytes (the packed
       operands of a 4096^3 GEMM, or of a 4096 x 4096 weight times a few rows: a fresh mapping
       of that size costs about as much in page faults as packing it); a larger one is freed
       after its GEMM. */
    #define EK_AMX_KEEP ((size_t)64 << 20)
    static __thread void *ek_amx_scratch_ptr;
    static __thread size_t ek_amx_scratch_size;

    static uint16_t *ek_amx_scratch(size_t bytes) {
        void *p = NULL;
        if (bytes <= ek_amx_scratch_size) return (uint16_t *)ek_amx_scratch_ptr;
        free(ek_amx_scratch_ptr);
        ek_amx_scratch_ptr = NULL;
        ek_amx_scratch_size = 0;
        if (posix_memalign(&p, 64, bytes) != 0) return NULL;
        ek_amx_scratch_ptr = p;
        ek_amx_scratch_size = bytes;
        return (uint16_t *)p;
    }

    static void ek_amx_scratch_done(void) {
        if (ek_amx_scratch_size > EK_AMX_KEEP) {
            free(ek_amx_scratch_ptr);
            ek_amx_scratch_ptr = NULL;
            ek_amx_scratch_size = 0;
        }
    }

    #ifdef EK_AMX_BUILD
    #define EK_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))

    typedef struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } ek_tilecfg;

    /* Tiles 0-3: a 32 x 32 float32 block of the product; 4-5: two tiles of A (16 rows x 32 of
       K); 6-7: two tiles of B (16 pairs of K x 16 columns). The configuration is loaded with
       the whole struct as the memory operand: GCC 12's _tile_loadconfig names only its first
       8 bytes, so the compiler may drop the stores that fill the rest. */
    EK_AMX_TARGET static void ek_amx_begin(void) {
        ek_tilecfg cfg;
        int t;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
        __asm__ volatile ("ldtilecfg %0" :: "m" (cfg));
    }

    EK_AMX_TARGET static void ek_amx_end(void) { _tile_release(); }

    static inline __mmask32 ek_mask32(Py_ssize_t n) {
        return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
    }

    /* One row of up to 32 float32 at src rounded to bfloat16 at dst as c10::BFloat16 rounds:
       to nearest even, NaN -> 0x7FC0 (m: the columns written). */
    EK_AMX_TARGET static inline void ek_amx_row_bf16(const float *src, char *dst, __mmask32 m) {
        const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF), qnan = _mm512_set1_epi32(0x7FC0);
        __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
        __m512i u0 = _mm512_castps_si512(v0), u1 = _mm512_castps_si512(v1);
        u0 = _mm512_srli_epi32(_mm512_add_epi32(u0, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u0, 16), one))), 16);
        u1 = _mm512_srli_epi32(_mm512_add_epi32(u1, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u1, 16), one))), 16);
        u0 = _mm512_mask_mov_epi32(u0, _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q), qnan);
        u1 = _mm512_mask_mov_epi32(u1, _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q), qnan);
        _mm512_mask_storeu_epi16(dst, m, _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(u0)),
                                                            _mm512_cvtepi32_epi16(u1), 1));
    }

    /* rows x cols bfloat16 at out (contiguous rows, os0 bytes apart) = buf (row stride 32),
       rounded by ek_amx_row_bf16. */
    EK_AMX_TARGET static void ek_amx_store_bf16(const float *buf, Py_ssize_t rows, Py_ssize_t cols,
                                                char *out, Py_ssize_t os0) {
        const __mmask32 m = ek_mask32(cols);
        Py_ssize_t r;
        for (r = 0; r < rows; r++) ek_amx_row_bf16(buf + r * 32, out + r * os0, m);
    }

    /* buf[32 x 32] (row-major float32) = the product of A's block row at a (tiles of rows
       0-15 at a + q * 512, rows 16-31 at a + (Kq + q) * 512) and B's block column at b (the
       same for columns 0-15 and 16-31), summed over q < Kq. The accumulators stay in tiles
       across the whole K loop. Meanwhile, the previous block (prev, prows x pcols; prows may
       be 0) is stored to pout as bfloat16 (ek_amx_store_bf16), a row per step of K: those
       vector instructions run while the tile unit is busy, instead of leaving it idle
       between blocks. */
    EK_AMX_TARGET static void ek_amx_block(const uint16_t *a, const uint16_t *b, Py_ssize_t Kq, float *buf,
                                           const float *prev, Py_ssize_t prows, Py_ssize_t pcols,
                                           char *pout, Py_ssize_t os0) {
        const uint16_t *a1 = a + Kq * 512, *b1 = b + Kq * 512;
        const __mmask32 m = ek_mask32(pcols);
        Py_ssize_t q, r = 0;
        __asm__ volatile ("" ::: "memory");   /* _tile_loadd names no memory: packing stores first */
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (q = 0; q < Kq; q++) {
            _tile_loadd(4, a + q * 512, 64);
            _tile_loadd(6, b + q * 512, 64);
            _tile_loadd(5, a1 + q * 512, 64);
            _tile_loadd(7, b1 + q * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
            if (r < prows) {
                ek_amx_row_bf16(prev + r * 32, pout + r * os0, m);
                r++;
            }
        }
        for (; r < prows; r++) ek_amx_row_bf16(prev + r * 32, pout + r * os0, m);
        _tile_stored(0, buf, 128);
        _tile_stored(1, buf + 16, 128);
        _tile_stored(2, buf + 512, 128);
        _tile_stored(3, buf + 528, 128);
    }

    /* A (M x K bfloat16, row i contiguous at a + i * as0 bytes) into tiles: tile (r, q), rows
       16r..16r+15 and columns 32q..32q+31, is the 512 uint16 at A + (r * Kq + q) * 512,
       row-major; zero-padded to Mp x Kp. */
    EK_AMX_TARGET static void ek_amx_pack_a_rows(const char *a, Py_ssize_t as0, Py_ssize_t M, Py_ssize_t K,
                                                 uint16_t *A, Py_ssize_t Mp, Py_ssize_t Kp) {
        Py_ssize_t i, q, Kq = Kp >> 5;
        for (i = 0; i < Mp; i++) {
            uint16_t *tile = A + (i >> 4) * Kq * 512 + (i & 15) * 32;
            const char *row = a + i * as0;
            for (q = 0; q < Kq; q++)
                _mm512_storeu_si512(tile + q * 512, i < M ? _mm512_maskz_loadu_epi16(ek_mask32(K - q * 32), row + q * 64)
                                                          : _mm512_setzero_si512());
        }
    }

    /* A with contiguous columns (column k at a + k * as1 bytes: A = X^T for a row-major X)
       into the tiles of ek_amx_pack_a_rows: 32 rows (two tile rows, a 64-byte line of each
       column) at a time, each tile a 32 x 16 transpose of 16-bit elements. */
    EK_AMX_TARGET static void ek_amx_pack_a_cols(const char *a, Py_ssize_t as1, Py_ssize_t M, Py_ssize_t K,
                                                 uint16_t *A, Py_ssize_t Mp, Py_ssize_t Kp) {
        Py_ssize_t Kq = Kp >> 5, ib, q, k, i;
        uint16_t w[32][32];
        for (ib = 0; ib < Mp; ib += 32) {
            const __mmask32 m = ek_mask32(M - ib);
            for (q = 0; q < Kq; q++) {
                uint16_t *t0 = A + ((ib >> 4) * Kq + q) * 512, *t1 = t0 + Kq * 512;
                for (k = 0; k < 32; k++)
                    _mm512_storeu_si512(w[k], q * 32 + k < K ? _mm512_maskz_loadu_epi16(m, a + (q * 32 + k) * as1 + ib * 2)
                                                             : _mm512_setzero_si512());
                for (i = 0; i < 16; i++)
                    for (k = 0; k < 32; k++) {
                        t0[i * 32 + k] = w[k][i];
                        t1[i * 32 + k] = w[k][i + 16];
                    }
            }
        }
    }

    /* B (K x N bfloat16, row k contiguous at b + k * bs0 bytes) into VNNI tiles: tile (r, q),
       columns 16r..16r+15 and rows 32q..32q+31, is the 512 uint16 at Bv + (r * Kq + q) * 512,
       B[32q + 2p + e, 16r + c] at [p * 32 + c * 2 + e]; zero-padded to Kp x Np. Two rows of K
       are interleaved 32 columns at a time. */
    EK_AMX_TARGET static void ek_amx_pack_b_rows(const char *b, Py_ssize_t bs0, Py_ssize_t K, Py_ssize_t N,
                                                 uint16_t *Bv, Py_ssize_t Kp, Py_ssize_t Np) {
        Py_ssize_t k, g, Kq = Kp >> 5;
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24,
                                            55, 23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
        for (k = 0; k < Kp; k += 2) {
            uint16_t *tile = Bv + (k >> 5) * 512 + ((k & 31) >> 1) * 32;
            const char *r0 = b + k * bs0, *r1 = r0 + bs0;
            for (g = 0; g < Np; g += 32) {
                __mmask32 m = ek_mask32(N - g);
                __m512i x0 = k < K ? _mm512_maskz_loadu_epi16(m, r0 + g * 2) : _mm512_setzero_si512();
                __m512i x1 = k + 1 < K ? _mm512_maskz_loadu_epi16(m, r1 + g * 2) : _mm512_setzero_si512();
                _mm512_storeu_si512(tile + (g >> 4) * Kq * 512, _mm512_permutex2var_epi16(x0, lo, x1));
                _mm512_storeu_si512(tile + ((g >> 4) + 1) * Kq * 512, _mm512_permutex2var_epi16(x0, hi, x1));
            }
        }
    }

    /* B with contiguous columns (column j at b + j * bs1 bytes: B = W^T for a row-major W) into
       the tiles of ek_amx_pack_b_rows. A pair of K is adjacent within a column, so each tile
       is a 16 x 16 transpose of 32-bit words. */
    EK_AMX_TARGET static void ek_amx_pack_b_cols(const char *b, Py_ssize_t bs1, Py_ssize_t K, Py_ssize_t N,
                                                 uint16_t *Bv, Py_ssize_t Kp, Py_ssize_t Np) {
        Py_ssize_t Kq = Kp >> 5, jb, q, c, p;
        uint32_t w[16][16];
        for (jb = 0; jb < Np; jb += 16) {
            for (q = 0; q < Kq; q++) {
                __mmask32 m = ek_mask32(K - q * 32);
                uint32_t *tile = (uint32_t *)(Bv + ((jb >> 4) * Kq + q) * 512);
                for (c = 0; c < 16; c++) {
                    __m512i x = jb + c < N ? _mm512_maskz_loadu_epi16(m, b + (jb + c) * bs1 + q * 64)
                                           : _mm512_setzero_si512();
                    _mm512_storeu_si512(w[c], x);
                }
                for (p = 0; p < 16; p++)
                    for (c = 0; c < 16; c++)
                        tile[p * 16 + c] = w[c][p];
            }
        }
    }

    #else
    /* Never called: ek_amx_available() is 0 in such a build. */
    static void ek_amx_begin(void) {}
    static void ek_amx_end(void) {}
    static void ek_amx_block(const uint16_t *a, const uint16_t *b, Py_ssize_t Kq, float *buf,
                             const float *prev, Py_ssize_t prows, Py_ssize_t pcols,
                             char *pout, Py_ssize_t os0) { abort(); }
    static void ek_amx_pack_a_rows(const char *a, Py_ssize_t as0, Py_ssize_t M, Py_ssize_t K,
                                   uint16_t *A, Py_ssize_t Mp, Py_ssize_t Kp) { abort(); }
    static void ek_amx_pack_a_cols(const char *a, Py_ssize_t as1, Py_ssize_t M, Py_ssize_t K,
                                   uint16_t *A, Py_ssize_t Mp, Py_ssize_t Kp) { abort(); }
    static void ek_amx_pack_b_rows(const char *b, Py_ssize_t bs0, Py_ssize_t K, Py_ssize_t N,
                                   uint16_t *Bv, Py_ssize_t Kp, Py_ssize_t Np) { abort(); }
    static void ek_amx_pack_b_cols(const char *b, Py_ssize_t bs1, Py_ssize_t K, Py_ssize_t N,
                                   uint16_t *Bv, Py_ssize_t Kp, Py_ssize_t Np) { abort(); }
    static void ek_amx_store_bf16(const float *buf, Py_ssize_t rows, Py_ssize_t cols,
                                  char *out, Py_ssize_t os0) { abort(); }
    #endif
    """
    int ek_amx_available() noexcept nogil
    uint16_t* ek_amx_scratch(size_t nbytes) noexcept nogil
    void ek_amx_scratch_done() noexcept nogil
    void ek_amx_begin() noexcept nogil
    void ek_amx_end() noexcept nogil
    void ek_amx_block(const uint16_t* a, const uint16_t* b, Py_ssize_t Kq, float* buf,
                      const float* prev, Py_ssize_t prows, Py_ssize_t pcols,
                      char* pout, Py_ssize_t os0) noexcept nogil
    void ek_amx_pack_a_rows(const char* a, Py_ssize_t as0, Py_ssize_t M, Py_ssize_t K,
                            uint16_t* A, Py_ssize_t Mp, Py_ssize_t Kp) noexcept nogil
    void ek_amx_pack_a_cols(const char* a, Py_ssize_t as1, Py_ssize_t M, Py_ssize_t K,
                            uint16_t* A, Py_ssize_t Mp, Py_ssize_t Kp) noexcept nogil
    void ek_amx_pack_b_rows(const char* b, Py_ssize_t bs0, Py_ssize_t K, Py_ssize_t N,
                            uint16_t* Bv, Py_ssize_t Kp, Py_ssize_t Np) noexcept nogil
    void ek_amx_pack_b_cols(const char* b, Py_ssize_t bs1, Py_ssize_t K, Py_ssize_t N,
                            uint16_t* Bv, Py_ssize_t Kp, Py_ssize_t Np) noexcept nogil
    void ek_amx_store_bf16(const float* buf, Py_ssize_t rows, Py_ssize_t cols,
                           char* out, Py_ssize_t os0) noexcept nogil


cdef inline Py_ssize_t _round32(Py_ssize_t n) noexcept nogil:
    return (n + 31) & ~<Py_ssize_t>31


cdef enum:
    _AMX_B_CHUNK_BYTES = 1 << 20     # the packed B of one column chunk, kept in L2 (at most)


cdef void _amx_pack_a(const char* a, Py_ssize_t as0, Py_ssize_t as1, Py_ssize_t M, Py_ssize_t K,
                      uint16_t* A, Py_ssize_t Mp, Py_ssize_t Kp) noexcept nogil:
    """A into the tiles of ek_amx_pack_a_rows, any strides."""
    cdef Py_ssize_t Kq = Kp >> 5, i, k
    cdef uint16_t* tile
    cdef const char* row
    if as1 == 2:
        ek_amx_pack_a_rows(a, as0, M, K, A, Mp, Kp)
        return
    if as0 == 2:
        ek_amx_pack_a_cols(a, as1, M, K, A, Mp, Kp)
        return
    memset(A, 0, <size_t>Mp * Kp * sizeof(uint16_t))
    for i in range(M):
        row = a + i * as0
        tile = A + (i >> 4) * Kq * 512 + (i & 15) * 32
        for k in range(K):
            tile[(k >> 5) * 512 + (k & 31)] = ek_ld_u16(row + k * as1)


cdef void _amx_pack_b(const char* b, Py_ssize_t bs0, Py_ssize_t bs1, Py_ssize_t K, Py_ssize_t N,
                      uint16_t* Bv, Py_ssize_t Kp, Py_ssize_t Np) noexcept nogil:
    """B into the VNNI tiles of ek_amx_pack_b_rows, any strides."""
    cdef Py_ssize_t Kq = Kp >> 5, j, k
    cdef uint16_t* tile
    cdef const char* row
    if bs1 == 2:
        ek_amx_pack_b_rows(b, bs0, K, N, Bv, Kp, Np)
        return
    if bs0 == 2:
        ek_amx_pack_b_cols(b, bs1, K, N, Bv, Kp, Np)
        return
    memset(Bv, 0, <size_t>Kp * Np * sizeof(uint16_t))
    for k in range(K):
        row = b + k * bs0
        tile = Bv + (k >> 5) * 512 + ((k & 31) >> 1) * 32 + (k & 1)
        for j in range(N):
            tile[(j >> 4) * Kq * 512 + (j & 15) * 2] = ek_ld_u16(row + j * bs1)


cdef inline bint _amx_out_is_plain(Py_ssize_t os0, Py_ssize_t os1, Py_ssize_t M, Py_ssize_t N,
                                   Py_ssize_t isz) noexcept nogil:
    """No two of the M x N output elements share memory (row- or column-major, gaps allowed)."""
    if os1 < 0:
        os1 = -os1
    if os0 < 0:
        os0 = -os0
    if M == 1:
        return N == 1 or os1 >= isz
    if N == 1:
        return os0 >= isz
    return (os1 >= isz and os0 >= N * os1) or (os0 >= isz and os1 >= M * os0)


cdef int _gemm_bf16_amx(char* out, int odt, Py_ssize_t os0, Py_ssize_t os1,
                        const char* a, Py_ssize_t as0, Py_ssize_t as1,
                        const char* b, Py_ssize_t bs0, Py_ssize_t bs1,
                        const char* c, int cdt, Py_ssize_t cs0, Py_ssize_t cs1,
                        Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, float alpha, float beta) noexcept nogil:
    """out = beta * C + alpha * (A @ B) for bfloat16 A and B (byte strides) on AMX, the sum in
    float32, alpha/beta applied in float32 and one rounding to the output dtype (as the BLAS
    path). Returns 0 when done, 1 when AMX is unavailable (nothing written), -1 if scratch
    allocation failed.

    A and B are packed whole before anything is written, so the output may alias them. Each
    32 x 32 block is written to the output as soon as it is computed (reading its part of C
    just before), unless that could read C after the output overwrote it or the output's
    elements share memory: then the product goes to a float32 scratch first and the output is
    written row by row at the end, as before."""
    cdef Py_ssize_t Mp = _round32(M), Np = _round32(N), Kp = _round32(K), Kq = Kp >> 5
    cdef Py_ssize_t i, j, r, t, jc, jend, chunk, rows, cols, osz = itemsize_of(odt)
    cdef uint16_t* A
    cdef uint16_t* Bv
    cdef float* P = NULL
    cdef float* v
    cdef float buf[2048]
    cdef float crow[32]
    cdef Py_ssize_t half = 0, prows = 0, pcols = 0
    cdef char* pout = NULL
    cdef const char* lo_o
    cdef const char* hi_o
    cdef const char* lo_c
    cdef const char* hi_c
    cdef bint direct, plain_bf16
    if ek_amx_available() != 1:
        return 1
    direct = _amx_out_is_plain(os0, os1, M, N, osz)
    if direct and beta != 0 and not (c == out and cdt == odt and cs0 == os0 and cs1 == os1):
        _extent(out, os0, os1, M, N, osz, &lo_o, &hi_o)
        _extent(c, cs0, cs1, M, N, itemsize_of(cdt), &lo_c, &hi_c)
        direct = not _overlaps(lo_o, hi_o, lo_c, hi_c)
    if not direct:
        P = <float*>malloc(<size_t>M * N * sizeof(float))
        if P == NULL:
            return -1
    A = ek_amx_scratch((<size_t>Mp * Kp + <size_t>Kp * Np) * sizeof(uint16_t))
    if A == NULL:
        free(P)
        return -1
    Bv = A + Mp * Kp
    _amx_pack_a(a, as0, as1, M, K, A, Mp, Kp)
    _amx_pack_b(b, bs0, bs1, K, N, Bv, Kp, Np)
    plain_bf16 = direct and odt == DT_BFLOAT16 and os1 == 2 and beta == 0 and alpha == 1
    chunk = (_AMX_B_CHUNK_BYTES // 2 // Kp) & ~<Py_ssize_t>31
    if chunk < 32:
        chunk = 32
    ek_amx_begin()
    jc = 0
    while jc < Np:
        jend = jc + chunk if jc + chunk < Np else Np
        for i in range(0, Mp, 32):
            rows = M - i if M - i < 32 else 32
            for j in range(jc, jend, 32):
                cols = N - j if N - j < 32 else 32
                if plain_bf16:
                    # This block goes to one half of buf while the previous one, in the
                    # other half, is rounded into the output (see ek_amx_block).
                    ek_amx_block(A + (i >> 4) * Kq * 512, Bv + (j >> 4) * Kq * 512, Kq, buf + half * 1024,
                                 buf + (half ^ 1) * 1024, prows, pcols, pout, os0)
                    prows, pcols, pout = rows, cols, out + i * os0 + j * 2
                    half ^= 1
                    continue
                ek_amx_block(A + (i >> 4) * Kq * 512, Bv + (j >> 4) * Kq * 512, Kq, buf, NULL, 0, 0, NULL, 0)
                for r in range(rows):
                    v = buf + r * 32
                    if beta != 0:
                        load_block(c + (i + r) * cs0 + j * cs1, cs1, cdt, cols, crow)
                        for t in range(cols):
                            v[t] = alpha * v[t] + beta * crow[t]
                    elif alpha != 1:
                        for t in range(cols):
                            v[t] = alpha * v[t]
                    if direct:
                        store_block(v, cols, odt, out + (i + r) * os0 + j * os1, os1)
                    else:
                        memcpy(P + (i + r) * N + j, v, <size_t>cols * sizeof(float))
        jc = jend
    if plain_bf16:
        ek_amx_store_bf16(buf + (half ^ 1) * 1024, prows, pcols, pout, os0)
    ek_amx_end()
    ek_amx_scratch_done()
    if not direct:
        for i in range(M):                  # the single rounding to the output dtype
            store_block(P + i * N, N, odt, out + i * os0, os1)
        free(P)
    return 0


def amx_available() -> bool:
    """Whether bf16 GEMMs run on the host's AMX tiles (see _amx.pxi)."""
    return ek_amx_available() == 1
