"""Test-wide setup shared by every test package.

The emulated system (runtime + driver + emulator) is process-global and is
created on first use with the preset named by ``EMU_PRESET``. This module is
imported by pytest before any test module, so the small ``tiny`` preset
(fast power-on, 64 MiB per device) is the default for test runs; set
``EMU_PRESET`` explicitly to run the suite against another preset.
"""
import gc
import os
import sys

import pytest

os.environ.setdefault("EMU_PRESET", "tiny")

# `make test` runs the suite in pytest-xdist workers, one per core (up to 4): each worker gets one
# intra-op thread, so the workers do not oversubscribe the cores (torch would start a thread per
# core in each). Set before any test module imports torch; OMP_NUM_THREADS set explicitly wins.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# EMU_CPU_ISA caps the instruction set of the device's kernels (emulator/kernels/isa.pyx); the CPU
# reference the tests compare with is capped the same way, through the variables torch, oneDNN
# and MKL read when torch loads (set here, before any test module imports torch, unless already
# set). With it, `EMU_CPU_ISA=avx2 make test` runs the suite as on a host without AVX-512 or AMX.
CPU_CAPS = {   # EMU_CPU_ISA -> (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS)
    "amx": ("avx512", "AVX512_CORE_AMX", "AVX512"),
    "avx512": ("avx512", "AVX512_CORE", "AVX512"),
    "avx2": ("avx2", "AVX2", "AVX2"),
    "baseline": ("default", "SSE41", "SSE4_2"),
}
CAP_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
_isa = os.environ.get("EMU_CPU_ISA", "").strip().lower()
if _isa in CPU_CAPS:
    for _name, _value in zip(CAP_VARIABLES, CPU_CAPS[_isa]):
        os.environ.setdefault(_name, _value)


def pytest_report_header(config):
    caps = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in CAP_VARIABLES)
    return f"EMU_CPU_ISA={os.environ.get('EMU_CPU_ISA') or '(unset: the best the host has)'}; CPU reference: {caps}"


@pytest.hookimpl(trylast=True)   # after the test's fixtures are torn down
def pytest_runtest_teardown(item, nextitem):
    # A test that injected a fault can leave poisoned allocations alive in garbage (a traceback's
    # frames hold the tensors) until the cycle collector runs, which may be many tests later; a
    # poisoned allocation refuses every compiled-graph capture meanwhile (Runtime.replay_allowed).
    # Collected here, so a later test does not depend on which tests its worker ran before it.
    runtime = sys.modules.get("runtime")
    if runtime is not None and runtime.is_initialized() and not runtime.get_runtime().replay_allowed():
        gc.collect()


# The zoo's per-model summary (tests/zoo/conftest.py's ``zoo_report``): its lines travel as the test
# reports' ``user_properties`` ("zoo_report", (model, key, value)), so this process prints them
# whether the tests ran in it or in pytest-xdist workers (whose hooks the controller does not see).
_ZOO_REPORT: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    for name, value in report.user_properties if report.when == "call" else ():
        if name == "zoo_report":
            model, key, text = value
            _ZOO_REPORT.setdefault(model, {})[key] = text


def pytest_terminal_summary(terminalreporter):
    if not _ZOO_REPORT:
        return
    terminalreporter.section("model zoo on emu")
    for model in sorted(_ZOO_REPORT):
        fields = "  ".join(f"{k}={v}" for k, v in sorted(_ZOO_REPORT[model].items()))
        terminalreporter.write_line(f"{model:<24} {fields}")
