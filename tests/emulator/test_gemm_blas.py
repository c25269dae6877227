"""The BLAS providers of the matrix engine's float32/float64 GEMM (gemm.pyx): MKL (torch's
libtorch_cpu.so, the default where found) on a fixed team of threads, and scipy's OpenBLAS
(EMU_BLAS=openblas). What the emulator promises: the bits depend on the shapes and the provider
only, not on the host's thread settings, the helper switch or the operands' alignment; with MKL a
float32 GEMM equals torch's CPU mm on two threads bit for bit; a forked child does not hang."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from emulator.kernels import dtypes as D
from emulator.kernels import gemm

HAS_MKL = gemm._find_mkl() is not None
needs_mkl = pytest.mark.skipif(not HAS_MKL, reason="no MKL in this torch install (lib/libtorch_cpu.so "
                                                   "without MKL's sgemm_/MKL_Set_Num_Threads_Local)")

SHAPES = [(128, 384, 1152), (128, 1536, 384), (77, 3001, 129), (333, 555, 777), (64, 4096, 64),
          (7, 300, 5), (1, 1, 1)]


def _st(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


def _mm(a, b, bias=None):
    code = D.FLOAT32 if a.dtype == np.float32 else D.FLOAT64
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), a.dtype)
    c = np.broadcast_to(bias, (m, n)) if bias is not None else None
    gemm.matmul(out.ctypes.data, code, _st(out), a.ctypes.data, code, _st(a), b.ctypes.data, code, _st(b),
                m, n, k, 1.0 if c is not None else 0.0, c.ctypes.data if c is not None else 0, code,
                _st(c) if c is not None else (0, 0), 1.0)
    return out


@pytest.fixture
def provider():
    old = gemm.blas()
    yield
    gemm.set_blas(old)
    gemm.set_gemm_helpers(1)


def test_the_provider_is_named_and_switchable(provider):
    assert gemm.set_blas("openblas") in ("mkl", "openblas")
    assert gemm.blas() == "openblas" and "OpenBLAS" in gemm.blas_version()
    with pytest.raises(ValueError, match="'mkl' or 'openblas'"):
        gemm.set_blas("atlas")
    assert gemm.blas() == "openblas"   # a refused switch changes nothing
    if HAS_MKL:
        assert gemm.set_blas("mkl") == "openblas"
        assert gemm.blas() == "mkl" and "Math Kernel Library" in gemm.blas_version()


@needs_mkl
def test_mkl_is_the_default_and_emu_blas_chooses():
    code = "from emulator.kernels import gemm; print(gemm.blas())"
    env = {k: v for k, v in os.environ.items() if k != "EMU_BLAS"}
    run = lambda extra: subprocess.run([sys.executable, "-c", code], env={**env, **extra},
                                       capture_output=True, text=True, check=False)
    assert run({}).stdout.strip() == "mkl"
    assert run({"EMU_BLAS": "openblas"}).stdout.strip() == "openblas"
    assert run({"EMU_BLAS": "MKL"}).stdout.strip() == "mkl"
    bad = run({"EMU_BLAS": "atlas"})
    assert bad.returncode != 0 and "EMU_BLAS must be 'mkl', 'openblas' or unset" in bad.stderr


@pytest.mark.parametrize("name", ["mkl", "openblas"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_providers_compute_the_product(name, dtype, provider):
    if name == "mkl" and not HAS_MKL:
        pytest.skip("no MKL in this torch install")
    gemm.set_blas(name)
    rng = np.random.default_rng(5)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for m, k, n in SHAPES:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        bias = rng.standard_normal(n).astype(dtype)
        want = a.astype(np.float64) @ b.astype(np.float64) + bias
        np.testing.assert_allclose(_mm(a, b, bias), want, rtol=tol, atol=tol * np.sqrt(k))


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mkl_bits_do_not_depend_on_host_threads_helpers_or_alignment(dtype, provider):
    gemm.set_blas("mkl")
    rng = np.random.default_rng(9)
    threads = torch.get_num_threads()
    try:
        for m, k, n in SHAPES:
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n)).astype(dtype)
            torch.set_num_threads(2)
            ref = _mm(a, b).tobytes()
            torch.set_num_threads(1)
            assert _mm(a, b).tobytes() == ref, (m, k, n, "torch.set_num_threads(1)")
            torch.set_num_threads(threads)
            gemm.set_gemm_helpers(0)
            assert _mm(a, b).tobytes() == ref, (m, k, n, "helpers off")
            gemm.set_gemm_helpers(1)
            for shift in (1, 3, 8):          # operands off 64-byte alignment
                ba = np.zeros(a.size + 16, dtype)
                bb = np.zeros(b.size + 16, dtype)
                aa = ba[shift:shift + a.size].reshape(a.shape)
                bv = bb[shift:shift + b.size].reshape(b.shape)
                aa[...] = a
                bv[...] = b
                assert _mm(aa, bv).tobytes() == ref, (m, k, n, "shift", shift)
    finally:
        torch.set_num_threads(threads)


@needs_mkl
def test_mkl_float32_gemm_equals_torch_cpu_mm_on_two_threads(provider):
    gemm.set_blas("mkl")
    rng = np.random.default_rng(3)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for m, k, n in SHAPES:
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            want = torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()
            assert _mm(a, b).tobytes() == want.tobytes(), (m, k, n)
    finally:
        torch.set_num_threads(threads)


@needs_mkl
def test_a_forked_child_computes_its_gemms_without_hanging():
    # GNU OpenMP cannot start a team in a child forked after it ran one: the child must not hang
    # (the timeout), and computes the same product (on one thread: the last bits may differ).
    script = textwrap.dedent("""
        import os, sys
        import numpy as np
        sys.path.insert(0, os.getcwd())
        from tests.emulator.test_gemm_blas import _mm
        rng = np.random.default_rng(1)
        a = rng.standard_normal((128, 1536)).astype(np.float32)
        b = rng.standard_normal((1536, 384)).astype(np.float32)
        parent = _mm(a, b)                       # a threaded GEMM: the team exists now
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            child = _mm(a, b)
            os.write(w, child.tobytes())
            os._exit(0)
        os.close(w)
        got = b""
        while True:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            got += chunk
        os.waitpid(pid, 0)
        child = np.frombuffer(got, np.float32).reshape(parent.shape)
        np.testing.assert_allclose(child, parent, rtol=1e-4, atol=1e-3)
        print("ok")
    """)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok"), out.stdout
