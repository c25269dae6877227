# cython: language_level=3
"""The host instruction set the kernel library may use, and the switch that caps it.

The functional kernels are host code, and a few of their paths depend on the host's vector
instructions: the bfloat16 GEMM on AMX tiles (_amx.pxi), the vector-math rows compiled for
AVX-512, AVX2+FMA and baseline x86-64 (_vecmath.pxi), glibc's vector libm (pointwise.pyx), the
float32 fused multiply-add loop (elementwise.pyx) and MKL's code branch for the float32/float64
GEMMs (gemm.pyx). ``EMU_CPU_ISA`` caps all of them at one level, so one host can run the
kernels as a host without AMX or without AVX-512 would:

    EMU_CPU_ISA=amx | avx512 | avx2 | baseline   (unset: the best the host has)

Levels, each including the ones below it: ``baseline`` (x86-64 with SSE2), ``avx2`` (x86-64-v3:
AVX2, FMA, BMI2, ...), ``avx512`` (x86-64-v4: AVX-512 F, BW, CD, DQ, VL), ``amx`` (AVX-512 plus
AMX-TILE, AMX-BF16 and the kernel's permission for the tile state). Asking for a level the host
lacks raises ConfigError naming what the host has. The variable is read here only, once per
process; every kernel module reads ``level()`` when it is imported.
"""
from emulator.errors import ConfigError

cdef extern from *:
    """
    #if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
    #define EK_ISA_X86 1
    #include <cpuid.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    #endif

    /* 0 baseline, 1 avx2 (x86-64-v3), 2 avx512 (x86-64-v4), 3 amx: what this host runs. */
    static int ek_probe_host_isa(void) {
        int level = 0;
    #ifdef EK_ISA_X86
        unsigned a, b, c, d, lo, hi;
        __builtin_cpu_init();
        /* The same checks as the resolvers of target_clones("arch=x86-64-v3/-v4"). */
        if (!__builtin_cpu_supports("x86-64-v3")) return 0;
        level = 1;
        if (!__builtin_cpu_supports("x86-64-v4")) return level;
        level = 2;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1)) return level;
        __asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
        if ((lo & 0xE6) != 0xE6) return level;     /* SSE, AVX, opmask, ZMM state enabled by the OS */
        if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) return level;
        level = 3;
    #endif
        return level;
    }
    """
    int ek_probe_host_isa() noexcept nogil

LEVELS = ("baseline", "avx2", "avx512", "amx")
VARIABLE = "EMU_CPU_ISA"

_host = None
_chosen = None


def host_isa() -> str:
    """The best level this host runs (one of LEVELS)."""
    global _host
    if _host is None:
        _host = int(ek_probe_host_isa())
    return LEVELS[_host]


def parse(text, host: str) -> str:
    """The level that ``EMU_CPU_ISA=text`` selects on a host that runs ``host``; ConfigError for a
    name not in LEVELS or a level above the host's."""
    name = (text or "").strip().lower()
    if not name:
        return host
    if name not in LEVELS:
        raise ConfigError(VARIABLE, f"{text!r} is not a level: expected one of {', '.join(reversed(LEVELS))} "
                          f"(or unset: the best the host has, here {host})")
    if LEVELS.index(name) > LEVELS.index(host):
        raise ConfigError(VARIABLE, f"{text!r}: this host's CPU does not have it; it has {host} "
                          f"(the levels it can run: {', '.join(reversed(LEVELS[:LEVELS.index(host) + 1]))})")
    return name


def cpu_isa() -> str:
    """The level the kernels use in this process: ``EMU_CPU_ISA`` (read on the first call) or the
    best the host has. Raises ConfigError if the variable names a level the host lacks."""
    global _chosen
    if _chosen is None:
        import os
        _chosen = parse(os.environ.get(VARIABLE), host_isa())
    return _chosen


def level() -> int:
    """cpu_isa() as an index of LEVELS (0 baseline .. 3 amx)."""
    return LEVELS.index(cpu_isa())


def power_on() -> str:
    """cpu_isa(), checked when a system powers on: below avx512 the GEMM module is loaded too, so
    that MKL's cap (gemm.pyx) is applied, or refused with ConfigError, now rather than at the
    first GEMM launch."""
    chosen = cpu_isa()
    if LEVELS.index(chosen) < LEVELS.index("avx512"):
        from emulator.kernels import gemm  # noqa: F401  (its import caps MKL)
    return chosen
