"""Dense linear algebra (LAPACK class) on emu against CPU: torch_plugin/ops/lapack.py and
emulator/kernels/lapack.pyx.

Tolerances: float32 rtol = atol = 1e-4, float64 1e-9 (LAPACK's blocking and the host LAPACK
differ from CPU's MKL in the last bits). SVD/eigh/eig vectors are compared through quantities
free of the sign/phase choice (reconstructions, |v|): the device's host LAPACK (scipy's
OpenBLAS) may pick another sign than CPU's MKL.
"""
import contextlib
import warnings

import pytest
import torch

from emulator.kernels import dtypes as kdtypes
from emulator.kernels.library import KERNELS, Operand

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-9, atol=1e-9)}
FLOATS = (torch.float32, torch.float64)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@contextlib.contextmanager
def _host_fallback_off():
    """The host fallback off (torch.emu.set_host_fallback(False)) inside, on again after."""
    torch.emu.set_host_fallback(False)
    try:
        yield
    finally:
        torch.emu.set_host_fallback(True)


def _emu(x):
    return x.to("emu") if isinstance(x, torch.Tensor) else x


def _close(actual, expected, dtype):
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device.type == "emu"
        torch.testing.assert_close(a.cpu(), e, **(TOL.get(dtype, {}) if e.is_floating_point() else {}))


def _check(fn, *args, dtype):
    _close(fn(*[_emu(a) for a in args]), fn(*args), dtype)


def _ran_natively(stats, *overloads):
    """Each op ran natively, through its functional or its out= overload."""
    for overload in overloads:
        functional = overload.split(".")[0]
        assert stats.native(f"aten::{overload}") + stats.native(f"aten::{functional}") > 0, overload


def _mat(dtype, *shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _spd(dtype, *shape, seed=0):
    a = _mat(dtype, *shape, seed=seed)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


# -- values -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_lu_family(dtype, stats):
    with _host_fallback_off():
        A, R, B = _mat(dtype, 2, 4, 4), _mat(dtype, 4, 3, seed=1), _mat(dtype, 2, 4, 2, seed=2)
        _check(torch.linalg.lu_factor_ex, A, dtype=dtype)
        _check(torch.linalg.lu_factor_ex, R, dtype=dtype)
        _check(torch.linalg.lu, R.mT, dtype=dtype)
        _check(lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a)), A, dtype=dtype)
        _check(lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a), unpack_data=False), A, dtype=dtype)
        for left in (True, False):
            for adjoint in (True, False):
                _check(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b if left else b.mT,
                                                          left=left, adjoint=adjoint), A, B, dtype=dtype)
        # LU broadcast over B's batch
        _check(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b), A[0], B, dtype=dtype)
        _check(torch.linalg.solve, A, B, dtype=dtype)
        _check(torch.linalg.solve, A.mT, B[0], dtype=dtype)                  # non-contiguous A, broadcast B
        _check(torch.linalg.solve, A, _mat(dtype, 4, seed=3), dtype=dtype)    # vector right-hand side
        _check(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT, dtype=dtype)
        _check(torch.linalg.inv, A, dtype=dtype)
        _check(torch.linalg.inv_ex, A.mT, dtype=dtype)
        _check(torch.linalg.det, A, dtype=dtype)
        _check(torch.linalg.det, A.mT, dtype=dtype)
        _check(torch.linalg.slogdet, -A, dtype=dtype)
        _check(torch.logdet, _spd(dtype, 3, 3), dtype=dtype)
        _check(torch.linalg.matrix_power, A, -2, dtype=dtype)
    _ran_natively(stats, "linalg_lu_factor_ex.out", "linalg_lu.out", "lu_unpack.out", "linalg_lu_solve.out",
               "_linalg_solve_ex.result", "linalg_inv_ex.inverse", "_linalg_det.result", "_linalg_slogdet.sign")
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_cholesky_ldl_family(dtype, stats):
    with _host_fallback_off():
        S, B = _spd(dtype, 2, 4, 4), _mat(dtype, 2, 4, 3, seed=4)
        _check(torch.linalg.cholesky, S, dtype=dtype)
        _check(lambda s: torch.linalg.cholesky(s, upper=True), S.mT, dtype=dtype)
        _check(torch.cholesky, S[0], dtype=dtype)
        _check(lambda s: torch.cholesky_inverse(torch.linalg.cholesky(s)), S, dtype=dtype)
        _check(lambda s: torch.cholesky_inverse(torch.linalg.cholesky(s, upper=True), upper=True), S, dtype=dtype)
        _check(lambda s, b: torch.cholesky_solve(b, torch.linalg.cholesky(s)), S, B, dtype=dtype)
        _check(lambda s, b: torch.cholesky_solve(b, torch.linalg.cholesky(s[0])), S, B, dtype=dtype)
        sym = _mat(dtype, 2, 4, 4, seed=5)
        sym = sym + sym.mT
        _check(torch.linalg.ldl_factor_ex, sym, dtype=dtype)
        _check(lambda s, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(s), b), sym, B, dtype=dtype)
    _ran_natively(stats, "linalg_cholesky_ex.L", "cholesky", "cholesky_inverse", "_cholesky_solve_helper",
               "linalg_ldl_factor_ex.out", "linalg_ldl_solve.out")
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_qr_family(dtype, stats):
    with _host_fallback_off():
        for shape in ((5, 3), (3, 5), (2, 4, 4)):
            A = _mat(dtype, *shape, seed=6)
            for mode in ("reduced", "complete", "r"):
                _check(lambda a: torch.linalg.qr(a, mode=mode), A, dtype=dtype)
            _check(torch.geqrf, A, dtype=dtype)
        A = _mat(dtype, 5, 3, seed=7)
        _check(lambda a: torch.linalg.householder_product(*torch.geqrf(a)), A, dtype=dtype)
        _check(lambda a: torch.linalg.householder_product(a, torch.geqrf(a)[1][:2]), A, dtype=dtype)
        C = _mat(dtype, 5, 2, seed=8)
        for left in (True, False):
            for transpose in (True, False):
                _check(lambda a, c: torch.ormqr(*torch.geqrf(a), c if left else c.mT, left=left, transpose=transpose),
                       A, C, dtype=dtype)
    _ran_natively(stats, "linalg_qr.out", "geqrf.a", "linalg_householder_product.out", "ormqr.out")
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_spectral_family(dtype, stats):
    """Values exactly; vectors through sign-free quantities."""
    with _host_fallback_off():
        for shape in ((5, 3), (3, 5), (2, 4, 4)):
            A = _mat(dtype, *shape, seed=9)
            U, S, Vh = torch.linalg.svd(_emu(A), full_matrices=False)
            torch.testing.assert_close(S.cpu(), torch.linalg.svdvals(A), **TOL[dtype])
            torch.testing.assert_close(((U * S.unsqueeze(-2)) @ Vh).cpu(), A, **TOL[dtype])
            torch.testing.assert_close((U.mT @ U).cpu(), torch.eye(U.shape[-1], dtype=dtype).expand(U.mT.shape[:-2] +
                                                                                                     (U.shape[-1],) * 2),
                                       **TOL[dtype])
            Uf, Sf, Vhf = torch.linalg.svd(_emu(A), full_matrices=True)
            assert Uf.shape[-1] == A.shape[-2] and Vhf.shape[-2] == A.shape[-1]
            _check(torch.linalg.svdvals, A, dtype=dtype)
            _check(torch.linalg.pinv, A, dtype=dtype)
            _check(torch.linalg.matrix_rank, A, dtype=dtype)
        S = _spd(dtype, 2, 4, 4, seed=10)
        for uplo in ("L", "U"):
            w, v = torch.linalg.eigh(_emu(S), UPLO=uplo)
            wc, vc = torch.linalg.eigh(S, UPLO=uplo)
            torch.testing.assert_close(w.cpu(), wc, **TOL[dtype])
            torch.testing.assert_close(v.abs().cpu(), vc.abs(), **TOL[dtype])
            _check(lambda s: torch.linalg.eigvalsh(s, UPLO=uplo), S, dtype=dtype)
        G = _mat(dtype, 2, 4, 4, seed=11)
        w, v = torch.linalg.eig(_emu(G))
        wc, vc = torch.linalg.eig(G)
        assert w.dtype == wc.dtype and v.dtype == vc.dtype
        torch.testing.assert_close(w.cpu(), wc, **TOL[dtype])
        torch.testing.assert_close(v.cpu().abs(), vc.abs(), **TOL[dtype])
        torch.testing.assert_close(torch.linalg.eigvals(_emu(G)).cpu(), wc, **TOL[dtype])
    _ran_natively(stats, "_linalg_svd.U", "_linalg_eigh.eigenvalues", "linalg_eig", "_linalg_eigvals")


@pytest.mark.parametrize("dtype", FLOATS)
def test_lstsq_triangular_cross_trace(dtype, stats):
    with _host_fallback_off():
        A, B = _mat(dtype, 2, 5, 3, seed=12), _mat(dtype, 2, 5, 2, seed=13)
        for driver in (None, "gels", "gelsd", "gelss"):
            _check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), A, B, dtype=dtype)
        _check(lambda a, b: torch.linalg.lstsq(a, b), A.mT, B[..., :3, :], dtype=dtype)   # under-determined
        _check(lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd"), A[0], B[0, :, 0], dtype=dtype)  # vector b
        T, Y = _mat(dtype, 2, 4, 4, seed=14) + 4 * torch.eye(4, dtype=dtype), _mat(dtype, 2, 4, 3, seed=15)
        for upper in (True, False):
            _check(lambda t, y: torch.linalg.solve_triangular(t, y, upper=upper), T, Y, dtype=dtype)
            _check(lambda t, y: torch.linalg.solve_triangular(t, y.mT, upper=upper, left=False,
                                                              unitriangular=True), T, Y, dtype=dtype)
            _check(lambda t, y: torch.triangular_solve(y, t, upper=upper, transpose=True), T, Y, dtype=dtype)
        _check(lambda t, y: torch.linalg.solve_triangular(t, y, upper=True), T[0], Y, dtype=dtype)  # broadcast
        x, y = _mat(dtype, 4, 3, seed=16), _mat(dtype, 1, 3, seed=17)
        _check(torch.linalg.cross, x, y, dtype=dtype)
        _check(lambda a, b: torch.cross(a, b, dim=0), x.mT, y.mT.expand(3, 4), dtype=dtype)
        _check(torch.trace, x, dtype=dtype)
    _ran_natively(stats, "linalg_lstsq.out", "linalg_solve_triangular.out", "triangular_solve.X")
    stats.no_fallback()


@pytest.mark.parametrize("dtype", FLOATS)
def test_matrix_exp_every_degree(dtype, stats):
    """One batch whose matrices fall in each degree interval, past the scaling bound, and NaN."""
    base = _mat(dtype, 4, 4, seed=18)
    base = base / base.abs().sum(-2).amax()
    scales = torch.tensor([0.0, 1e-9, 1e-5, 1e-2, 0.2, 0.9, 2.5, 40.0], dtype=dtype)
    A = base * scales.reshape(-1, 1, 1)
    with torch.emu.host_fallback("forbid"):
        _close(torch.linalg.matrix_exp(_emu(A)), torch.linalg.matrix_exp(A), dtype)
        _close(torch.linalg.matrix_exp(_emu(A[6])), torch.linalg.matrix_exp(A[6]), dtype)
        _close(torch.linalg.matrix_exp(_emu(A[:, :1, :1])), torch.linalg.matrix_exp(A[:, :1, :1]), dtype)
        nan = A[:2].clone()
        nan[0, 0, 0] = float("nan")
        got = torch.linalg.matrix_exp(_emu(nan)).cpu()
        assert got[0].isnan().all()
        torch.testing.assert_close(got[1], torch.linalg.matrix_exp(nan[1]), **TOL[dtype])
    assert stats.fallback("aten::linalg_matrix_exp") == 0


def test_cross_trace_integers():
    with torch.emu.host_fallback("forbid"):
        a = torch.randint(-5, 5, (4, 3))
        b = torch.randint(-5, 5, (4, 3))
        assert torch.equal(torch.linalg.cross(_emu(a), _emu(b)).cpu(), torch.linalg.cross(a, b))
        t = torch.trace(_emu(a[:3]))
        assert t.dtype == torch.int64 and t.item() == torch.trace(a[:3]).item()


@pytest.mark.parametrize("op", [
    lambda a: torch.linalg.lu_factor_ex(a),
    lambda a: torch.linalg.svd(a),
    lambda a: torch.linalg.eigh(a),
    lambda a: torch.linalg.qr(a),
    lambda a: torch.linalg.inv(a),
    lambda a: torch.linalg.det(a),
    lambda a: torch.linalg.slogdet(a),
    lambda a: torch.linalg.cholesky_ex(a),
])
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_empty(op, shape):
    a = torch.empty(shape)
    with torch.emu.host_fallback("forbid"):
        _close(op(_emu(a)), op(a), torch.float32)


def test_svd_empty_full_matrices_are_identities():
    a = torch.empty(3, 0)
    with torch.emu.host_fallback("forbid"):
        _close(torch.linalg.svd(_emu(a), full_matrices=True), torch.linalg.svd(a, full_matrices=True), torch.float32)


# -- errors and info -------------------------------------------------------------------------------

def test_ex_ops_report_info_without_raising():
    singular = torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[1.0, 0.0], [0.0, 1.0]]])
    with torch.emu.host_fallback("forbid"):
        for fn in (torch.linalg.inv_ex, torch.linalg.lu_factor_ex, torch.linalg.cholesky_ex,
                   lambda a: torch.linalg.solve_ex(a, torch.ones(2, 2, 1, device=a.device)),
                   torch.linalg.ldl_factor_ex):
            got = fn(_emu(singular))
            # info, int32: the first matrix is exactly singular (its second pivot is 4 - 2 * 2 = 0),
            # so every factorisation reports 2. Not CPU's info: under MKL's AVX2 code (a host
            # without AVX-512, or EMU_CPU_ISA=avx2) CPU's cholesky_ex scales by an approximate
            # reciprocal square root, leaves a 7e-4 pivot and reports 0.
            torch.testing.assert_close(got[-1].cpu(), torch.tensor([2, 0], dtype=torch.int32))
            assert got[-1].dtype == torch.int32


@pytest.mark.parametrize("fn, arg", [
    (torch.linalg.inv, torch.zeros(3, 3)),
    (torch.linalg.inv, torch.zeros(2, 3, 3)),
    (torch.linalg.cholesky, -torch.eye(3)),
    (torch.cholesky, -torch.eye(3)),
    (lambda a: torch.linalg.solve(a, torch.ones(3, device=a.device)), torch.zeros(3, 3)),
    (lambda a: torch.linalg.inv_ex(a, check_errors=True), torch.zeros(3, 3)),
])
def test_non_ex_ops_raise_as_cpu(fn, arg):
    with pytest.raises(torch._C._LinAlgError) as cpu:
        fn(arg)
    with torch.emu.host_fallback("forbid"), pytest.raises(torch._C._LinAlgError) as emu:
        fn(_emu(arg))
    assert str(emu.value) == str(cpu.value)


@pytest.mark.parametrize("fn, arg, message", [
    (torch.linalg.inv, torch.ones(2, 3), "linalg.inv: A must be batches of square matrices, but they are 2 by 3"),
    (torch.linalg.inv, torch.ones(3), "linalg.inv: The input tensor A must have at least 2 dimensions."),
    (lambda a: torch.linalg.lu_factor(a, pivot=False), torch.ones(3, 3),
     "linalg.lu_factor: LU without pivoting is not implemented on the CPU"),
    (lambda a: torch.linalg.cross(a, a[..., :2]), torch.ones(4, 3), "linalg.cross"),
])
def test_bad_input_errors_like_cpu(fn, arg, message):
    with pytest.raises(RuntimeError, match=message.split(":")[0]):
        fn(arg)
    x = _emu(arg)
    before = x.cpu().clone()
    with torch.emu.host_fallback("forbid"), pytest.raises(RuntimeError, match=message[:40].replace(".", r"\.")):
        fn(x)
    assert torch.equal(x.cpu(), before)


def test_half_is_rejected_naming_the_op():
    a = torch.eye(3, dtype=torch.float16)
    with torch.emu.host_fallback("forbid"), pytest.raises(RuntimeError, match="lu_factor.*float16"):
        torch.linalg.lu_factor(_emu(a))
    with pytest.raises(NotImplementedError, match="Half"):   # allowed: the host says what CPU says
        torch.linalg.lu_factor(_emu(a))


# -- out= ------------------------------------------------------------------------------------------

def test_out_variants():
    A = _mat(torch.float32, 4, 4)
    with torch.emu.host_fallback("forbid"):
        # zero-element outs are resized
        inv, info = torch.empty(0, device="emu"), torch.empty(0, dtype=torch.int32, device="emu")
        torch.linalg.inv_ex(_emu(A), out=(inv, info))
        _close((inv, info), torch.linalg.inv_ex(A), torch.float32)
        # a correctly shaped non-contiguous out keeps its strides
        Q = torch.empty(4, 8, device="emu")[:, ::2]
        R = torch.empty(4, 4, device="emu").mT
        strides = (Q.stride(), R.stride())
        torch.linalg.qr(_emu(A), out=(Q, R))
        assert (Q.stride(), R.stride()) == strides
        _close((Q, R), torch.linalg.qr(A), torch.float32)
        X = torch.empty(4, 4, device="emu")
        torch.linalg.solve_triangular(_emu(A).triu(), _emu(A), upper=True, out=X)
        _close(X, torch.linalg.solve_triangular(A.triu(), A, upper=True), torch.float32)
        # a wrong dtype is rejected before anything is written
        bad = torch.zeros(4, 4, dtype=torch.float64, device="emu")
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got double instead"):
            torch.linalg.cholesky(_emu(_spd(torch.float32, 4, 4)), out=bad)
        assert bad.abs().sum().item() == 0
        with pytest.raises(RuntimeError, match="dtype int, but got long int"):
            torch.linalg.lu_factor(_emu(A), out=(torch.empty(0, device="emu"),
                                                 torch.empty(0, dtype=torch.int64, device="emu")))


# -- autograd --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, fn, make", [
    ("solve", lambda a, b: torch.linalg.solve(a, b), lambda: (_mat(torch.float64, 4, 4), _mat(torch.float64, 4, 2, seed=1))),
    ("inv", lambda a: torch.linalg.inv(a), lambda: (_mat(torch.float64, 2, 3, 3),)),
    ("det", lambda a: torch.linalg.det(a), lambda: (_mat(torch.float64, 2, 3, 3),)),
    ("slogdet", lambda a: torch.linalg.slogdet(a)[1], lambda: (_mat(torch.float64, 3, 3),)),
    ("cholesky", lambda a: torch.linalg.cholesky(a @ a.mT + 3 * torch.eye(3, dtype=a.dtype, device=a.device)),
     lambda: (_mat(torch.float64, 3, 3),)),
    ("eigvalsh", lambda a: torch.linalg.eigvalsh(a + a.mT), lambda: (_mat(torch.float64, 3, 3),)),
    ("svdvals", lambda a: torch.linalg.svdvals(a), lambda: (_mat(torch.float64, 4, 3),)),
    ("lu_solve", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
     lambda: (_mat(torch.float64, 3, 3), _mat(torch.float64, 3, 2, seed=2))),
    ("solve_triangular", lambda a, b: torch.linalg.solve_triangular(a + 3 * torch.eye(3, dtype=a.dtype, device=a.device),
                                                                    b, upper=False),
     lambda: (_mat(torch.float64, 3, 3), _mat(torch.float64, 3, 2, seed=3))),
])
def test_backward_matches_cpu(name, fn, make):
    inputs = make()

    def grads(device):
        leaves = [x.clone().to(device).requires_grad_() for x in inputs]
        out = fn(*leaves)
        cot = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(device)
        return [g.cpu() for g in torch.autograd.grad(out, leaves, cot)]
    with torch.emu.host_fallback("forbid"):
        got = grads("emu")
    for g, w in zip(got, grads("cpu")):
        torch.testing.assert_close(g, w, **TOL[torch.float64])


# -- cost model ------------------------------------------------------------------------------------

def _Device():
    # The cost model alone, without device memory (emulator/device.py).
    from emulator.config import load_preset
    from emulator.device import CostDevice
    return CostDevice(load_preset("tiny").device)


def test_cost_model_counts_lapack_flops():
    f32 = kdtypes.FLOAT32
    a = Operand(1, f32, (3, 64, 64), (4096, 64, 1))
    piv = Operand(1, kdtypes.INT32, (3, 64), (64, 1))
    info = Operand(1, kdtypes.INT32, (3,), (1,))
    ns, nbytes, flops = KERNELS["getrf"].cost(_Device(), 1, a, a, piv, info)[:3]
    assert flops == int(3 * 2 / 3 * 64 ** 3)                  # LU: 2/3 n^3 per matrix
    assert nbytes == 2 * a.nbytes + piv.nbytes + info.nbytes
    assert ns > 0 and KERNELS["getrf"].engine == "matrix"
    s = Operand(1, f32, (3, 64), (64, 1))
    _, _, svd_flops = KERNELS["gesdd"].cost(_Device(), 1, a, a, s, a, False)[:3]
    assert svd_flops == int(3 * 26 * 64 ** 3)                 # SVD with vectors: 6 m k^2 + 20 k^3
