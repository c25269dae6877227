# The device's Philox4x32-10 counter-based stream (Random123; the curand/PyTorch variant), shared by
# every kernel that draws random words (random.pyx, attention.pyx's dropout): one function, one
# word order. Included after _common.pxi (uint32_t/uint64_t).

cdef enum:
    PHILOX_M0 = 0xD2511F53
    PHILOX_M1 = 0xCD9E8D57
    PHILOX_W0 = 0x9E3779B9
    PHILOX_W1 = 0xBB67AE85


cdef void philox4x32_10(uint32_t* ctr, uint32_t k0, uint32_t k1, uint32_t* out) noexcept nogil:
    """Random123 Philox4x32 with 10 rounds (the curand/PyTorch variant)."""
    cdef uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], t0, t2
    cdef uint64_t p0, p1
    cdef int r
    for r in range(10):
        if r > 0:                        # key schedule: bump between rounds
            k0 = k0 + <uint32_t>PHILOX_W0
            k1 = k1 + <uint32_t>PHILOX_W1
        p0 = <uint64_t><uint32_t>PHILOX_M0 * c0
        p1 = <uint64_t><uint32_t>PHILOX_M1 * c2
        t0 = <uint32_t>(p1 >> 32) ^ c1 ^ k0
        t2 = <uint32_t>(p0 >> 32) ^ c3 ^ k1
        c1 = <uint32_t>p1
        c3 = <uint32_t>p0
        c0 = t0
        c2 = t2
    out[0] = c0
    out[1] = c1
    out[2] = c2
    out[3] = c3


cdef struct Stream:
    uint32_t k0, k1
    uint64_t block                       # block held in `words`
    bint valid
    uint32_t words[4]


cdef inline uint32_t stream_word(Stream* s, uint64_t j) noexcept nogil:
    """Word j of the stream (cached per 4-word block: sequential use costs one
    Philox evaluation per 4 words)."""
    cdef uint64_t b = j >> 2
    cdef uint32_t ctr[4]
    if not s.valid or b != s.block:
        ctr[0] = <uint32_t>b
        ctr[1] = <uint32_t>(b >> 32)
        ctr[2] = 0
        ctr[3] = 0
        philox4x32_10(ctr, s.k0, s.k1, s.words)
        s.block = b
        s.valid = True
    return s.words[j & 3]
