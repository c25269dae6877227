"""EMU_CPU_ISA (emulator/kernels/isa.pyx): one switch caps the instruction set of every kernel.

Levels the host lacks and names that are not levels are refused with ConfigError naming what the
host has; every kernel module reports the level chosen; the AMX GEMM runs only at amx; MKL's code
branch follows the cap (or the cap is refused when MKL already chose a higher one). Each case
runs in a child process, since the level is read once per process."""
import os
import subprocess
import sys

import pytest

from emulator.errors import ConfigError
from emulator.kernels import isa

LEVELS = list(isa.LEVELS)
HOST = isa.host_isa()
RUNNABLE = LEVELS[:LEVELS.index(HOST) + 1]
MODULES = ("gemm", "norm", "pointwise", "softmax", "elementwise")


def _child(code, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("EMU_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    environ.update(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=300)


def test_parse_defaults_to_the_host_and_refuses_what_it_lacks():
    assert isa.parse(None, "avx512") == "avx512" and isa.parse(" ", "avx2") == "avx2"
    assert isa.parse("AVX2", "amx") == "avx2"
    with pytest.raises(ConfigError, match=r"EMU_CPU_ISA: 'amx': this host's CPU does not have it; it has avx2"):
        isa.parse("amx", "avx2")
    with pytest.raises(ConfigError, match=r"'sse9' is not a level: expected one of amx, avx512, avx2, baseline"):
        isa.parse("sse9", "amx")


def test_power_on_refuses_a_bad_level():
    run = _child("from emulator.system import EmulatedSystem\n"
                 "from emulator.config import SystemConfig\n"
                 "EmulatedSystem(SystemConfig())", EMU_CPU_ISA="avx1024")
    assert run.returncode != 0 and "ConfigError: EMU_CPU_ISA: 'avx1024' is not a level" in run.stderr, run.stderr


@pytest.mark.parametrize("level", RUNNABLE)
def test_every_kernel_module_uses_the_level_asked_for(level):
    code = ("from emulator.kernels import isa, " + ", ".join(MODULES) + "\n"
            "print(isa.power_on(), " + ", ".join(f"{m}.cpu_isa()" for m in MODULES) + ", gemm.amx_available(),"
            " pointwise.vector_math_available())")
    mkl = {"avx2": dict(MKL_ENABLE_INSTRUCTIONS="AVX2"), "baseline": dict(MKL_ENABLE_INSTRUCTIONS="SSE4_2")}
    run = _child(code, EMU_CPU_ISA=level, **mkl.get(level, {}))
    assert run.returncode == 0, run.stderr
    words = run.stdout.split()
    assert words[:1 + len(MODULES)] == [level] * (1 + len(MODULES))
    assert words[-2] == str(level == "amx")
    if level == "baseline":
        assert words[-1] == "False"          # glibc's vector libm needs AVX2 at least


def test_the_default_is_the_best_the_host_has():
    run = _child("from emulator.kernels import isa, gemm; print(isa.cpu_isa(), gemm.cpu_isa())")
    assert run.returncode == 0 and run.stdout.split() == [HOST, HOST], run.stderr


@pytest.mark.skipif(HOST not in ("avx512", "amx"), reason="needs a host with AVX-512 (MKL's own branch above AVX2)")
def test_mkl_follows_the_cap_or_the_cap_is_refused():
    probe = ("import ctypes, os, torch\n"
             "lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cpu.so'))\n")
    # MKL picks its branch from the CPU's vendor as well as its instruction set: on an AMD host with
    # AVX-512 (Zen 4) it runs its generic code (mkl_serv_cpu_detect() 0), which no cap holds back.
    own = _child(probe + "a = torch.ones(64, 64); a @ a\nprint(lib.mkl_serv_cpu_detect())")
    assert own.returncode == 0, own.stderr
    if int(own.stdout) <= 5:
        pytest.skip(f"MKL runs no branch above AVX2 on this host (mkl_serv_cpu_detect() = {own.stdout.strip()} "
                    "uncapped, as on a non-Intel CPU): there is no AVX-512 MKL code for the cap to hold back")
    # Capped before MKL's first call: MKL runs its AVX2 branch (5), for torch's CPU ops too.
    run = _child(probe + "from emulator.kernels import isa, gemm\nprint(gemm.blas(), lib.mkl_serv_cpu_detect())",
                 EMU_CPU_ISA="avx2")
    assert run.returncode == 0 and run.stdout.split() == ["mkl", "5"], run.stderr
    # MKL already ran its AVX-512 code: the cap cannot hold, so power-on says so.
    run = _child(probe + "a = torch.ones(64, 64); a @ a\nfrom emulator.kernels import isa\nisa.power_on()",
                 EMU_CPU_ISA="avx2")
    assert run.returncode != 0 and "set MKL_ENABLE_INSTRUCTIONS=AVX2 before the process starts" in run.stderr, run.stderr
    # ... unless MKL was capped by its own variable.
    run = _child(probe + "a = torch.ones(64, 64); a @ a\nfrom emulator.kernels import isa\nprint(isa.power_on())",
                 EMU_CPU_ISA="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2")
    assert run.returncode == 0 and run.stdout.split() == ["avx2"], run.stderr
