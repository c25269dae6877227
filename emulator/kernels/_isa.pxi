# The instruction-set cap of this module's kernels: isa.level() (EMU_CPU_ISA, or the best the
# host has), read once when the module is imported. Included before _vecmath.pxi and _amx.pxi,
# whose dispatch reads ek_isa_cap.

cdef extern from *:
    """
    enum { EK_ISA_BASELINE = 0, EK_ISA_AVX2 = 1, EK_ISA_AVX512 = 2, EK_ISA_AMX = 3 };
    static int ek_isa_cap = EK_ISA_BASELINE;
    static void ek_isa_set_cap(int level) { ek_isa_cap = level; }
    """
    int EK_ISA_BASELINE, EK_ISA_AVX2, EK_ISA_AVX512, EK_ISA_AMX
    int ek_isa_cap
    void ek_isa_set_cap(int level)

from emulator.kernels import isa as _isa

ek_isa_set_cap(_isa.level())


def cpu_isa():
    """The instruction-set level this module's kernels use (emulator.kernels.isa.LEVELS)."""
    return _isa.LEVELS[ek_isa_cap]
