"""The emu:: custom operators: reference, schema, device path and eligibility, fake, autograd,
autocast, opcheck, mutation under torch.compile (docs/compile.md#custom-operators)."""
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

import torch_plugin.custom_ops as co
from compile_testing import kernels_launched

EMU = torch.device("emu")
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}
add_rms_norm = torch.ops.emu.fused_add_rms_norm
row_normalize = torch.ops.emu.row_normalize


def _rms_inputs(shape, dtype, wdtype=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    r = torch.randn(shape, generator=g).to(dtype)
    w = torch.randn(shape[-1], generator=g).to(wdtype or dtype)
    return x, r, w


def _emu(*ts):
    return tuple(t.to(EMU) for t in ts)


def _paths(op):
    stats = torch.emu.op_stats()
    return {p: stats[p].get(op, 0) for p in ("native", "composite")}


# -- reference semantics ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_add_rms_norm_kernel_matches_reference(dtype):
    x, r, w = _rms_inputs((3, 5, 33), dtype)
    ref_out, ref_res = co.add_rms_norm_reference(x, r, w, 1e-5)
    torch.emu.reset_op_stats()
    (out, res), launched = kernels_launched(lambda: add_rms_norm(*_emu(x, r, w), 1e-5))
    assert launched.get("fused_add_rms_norm") == 1
    assert _paths("emu::fused_add_rms_norm") == {"native": 1, "composite": 0}
    assert out.dtype == res.dtype == dtype and out.is_contiguous()
    torch.testing.assert_close(res.cpu(), x + r, rtol=0, atol=0)   # x's dtype, as eager gives it
    torch.testing.assert_close(out.cpu(), ref_out, **TOL[dtype])
    # the reference's definition: eps inside the square root, float32 accumulation
    h = (x + r).float()
    expected = (h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-5) * w.float()).to(dtype)
    torch.testing.assert_close(ref_out, expected, **TOL[dtype])
    assert ref_res.dtype == dtype


def test_add_rms_norm_runs_on_cpu_and_float32_weight():
    x, r, w = _rms_inputs((4, 9), torch.bfloat16, torch.float32)
    cpu = add_rms_norm(x, r, w, 1e-6)
    torch.emu.reset_op_stats()
    emu = add_rms_norm(*_emu(x, r, w), 1e-6)
    assert _paths("emu::fused_add_rms_norm")["native"] == 1   # bf16 x with float32 weight: eligible
    for a, b in zip(emu, cpu):
        torch.testing.assert_close(a.cpu(), b, **TOL[torch.bfloat16])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_row_normalize_equals_functional_normalize(dtype):
    x = torch.randn(6, 37).to(dtype)
    torch.emu.reset_op_stats()
    (y, scale), launched = kernels_launched(lambda: row_normalize(x.to(EMU)))
    assert launched.get("row_normalize") == 1
    assert scale.dtype == torch.float32 and scale.shape == (6,) and y.dtype == dtype
    torch.testing.assert_close(y.cpu(), F.normalize(x, dim=1), **TOL[dtype])
    torch.testing.assert_close(scale.cpu(), x.float().norm(dim=1), rtol=1e-5, atol=1e-6)


def test_row_normalize_empty_rows_and_zero_rows():
    y, scale = row_normalize(torch.empty(3, 0, device=EMU))
    assert y.shape == (3, 0) and scale.cpu().tolist() == [0.0, 0.0, 0.0]
    y, scale = row_normalize(torch.empty(0, 4, device=EMU))
    assert y.shape == (0, 4) and scale.shape == (0,)
    y, scale = row_normalize(torch.zeros(2, 5, device=EMU))   # zero rows: y 0 (x / 1e-12)
    assert y.cpu().abs().sum() == 0 and scale.cpu().tolist() == [0.0, 0.0]


def test_non_finite_inputs_follow_the_reference():
    x = torch.randn(3, 8)
    x[0, 2] = float("nan")
    x[1, 5] = float("inf")
    r, w = torch.randn(3, 8), torch.randn(8)
    for got, ref in zip(add_rms_norm(*_emu(x, r, w), 1e-6), co.add_rms_norm_reference(x, r, w, 1e-6)):
        torch.testing.assert_close(got.cpu(), ref, equal_nan=True)
    for got, ref in zip(row_normalize(x.to(EMU)), co.row_normalize_reference(x)):
        torch.testing.assert_close(got.cpu(), ref, equal_nan=True)
    assert torch.isnan(ref[0]) and torch.isinf(ref[1])


def test_bad_arguments_raise_clear_errors():
    x = torch.randn(2, 4, device=EMU)
    with pytest.raises(RuntimeError, match="weight must have shape \\[4\\]"):
        add_rms_norm(x, x, torch.ones(3, device=EMU), 1e-6)
    with pytest.raises(RuntimeError, match="residual has shape"):
        add_rms_norm(x, torch.randn(1, 4, device=EMU), torch.ones(4, device=EMU), 1e-6)
    with pytest.raises(RuntimeError, match="must be 2-D"):
        row_normalize(torch.randn(2, 3, 4, device=EMU))


# -- schema ------------------------------------------------------------------------------------------

# The mutating custom ops need torch.Tag.inplace and torch.Tag.out (torch 2.13 on; 2.12 has neither).
needs_mutating_ops = pytest.mark.skipif(
    not co.MUTATING_OPS, reason=f"torch {torch.__version__} has no torch.Tag.inplace/torch.Tag.out: "
    "emu::scaled_add_ and emu::square_sum_rows are not defined")


def test_schemas_declare_mutation_and_aliasing_exactly():
    for op in (add_rms_norm.default, row_normalize.default):
        schema = op._schema
        assert not schema.is_mutable
        assert all(a.alias_info is None for a in (*schema.arguments, *schema.returns))
        assert len(schema.returns) == 2


@needs_mutating_ops
def test_mutating_schemas_declare_their_aliasing():
    inplace = torch.ops.emu.scaled_add_.default
    assert str(inplace._schema) == "emu::scaled_add_(Tensor(a0!) x, Tensor other, float alpha) -> Tensor(a0!)"
    assert torch.Tag.inplace in inplace.tags
    out = torch.ops.emu.square_sum_rows.default
    assert str(out._schema) == "emu::square_sum_rows(Tensor x, *, Tensor(a1!) out) -> Tensor(a1!)"
    assert torch.Tag.out in out.tags


def test_outputs_are_fresh_tensors():
    x, r, w = _emu(*_rms_inputs((2, 8), torch.float32))
    out, res = add_rms_norm(x, r, w, 1e-6)
    y, _ = row_normalize(x)
    for t in (out, res, y):
        assert all(t.untyped_storage().data_ptr() != s.untyped_storage().data_ptr() for s in (x, r, w))


# -- eligibility ----------------------------------------------------------------------------------

def _rms_path(x, r, w):
    torch.emu.reset_op_stats()
    (out, res), launched = kernels_launched(lambda: add_rms_norm(x, r, w, 1e-6))
    ref = co.add_rms_norm_reference(x.cpu(), r.cpu(), w.cpu(), 1e-6)
    torch.testing.assert_close(out.cpu(), ref[0], **TOL[x.dtype] if x.dtype in TOL else {})
    torch.testing.assert_close(res.cpu(), ref[1])
    assert out.is_contiguous() and res.is_contiguous()
    paths = _paths("emu::fused_add_rms_norm")
    native = launched.get("fused_add_rms_norm", 0)
    assert (paths["native"], paths["composite"]) == ((1, 0) if native else (0, 1))
    return "kernel" if native else "reference"


def test_add_rms_norm_hidden_bound():
    n = co.MAX_HIDDEN
    assert _rms_path(*_emu(*_rms_inputs((1, n), torch.float32))) == "kernel"
    assert _rms_path(*_emu(*_rms_inputs((1, n + 1), torch.float32))) == "reference"
    assert _rms_path(*_emu(*_rms_inputs((2, 1), torch.float32))) == "kernel"
    assert _rms_path(*_emu(*_rms_inputs((2, 0), torch.float32))) == "reference"


def test_add_rms_norm_dtype_bounds():
    assert _rms_path(*_emu(*_rms_inputs((2, 8), torch.float16))) == "kernel"
    assert _rms_path(*_emu(*_rms_inputs((2, 8), torch.float64))) == "reference"
    x, r, w = _rms_inputs((2, 8), torch.float16)
    assert _rms_path(*_emu(x, r.float(), w)) == "reference"            # residual dtype differs
    assert _rms_path(*_emu(x, r, w.to(torch.bfloat16))) == "reference"  # weight neither x's nor fp32


def test_transposed_input_never_reaches_the_kernel():
    x, r, w = _emu(*_rms_inputs((8, 6), torch.float32))
    w8 = torch.randn(8, device=EMU)
    assert _rms_path(x.t().contiguous(), r.t().contiguous(), w8) == "kernel"
    assert _rms_path(x.t(), r.t().contiguous(), w8) == "reference"
    assert _rms_path(x.t().contiguous(), r.t(), w8) == "reference"
    assert _rms_path(x, r, torch.randn(12, device=EMU)[::2]) == "reference"   # strided weight
    xt = torch.randn(6, 5, device=EMU).t()
    torch.emu.reset_op_stats()
    (y, s), launched = kernels_launched(lambda: row_normalize(xt))
    assert "row_normalize" not in launched and _paths("emu::row_normalize")["composite"] == 1
    torch.testing.assert_close(y.cpu(), F.normalize(xt.cpu(), dim=1))
    assert y.is_contiguous()


def test_row_normalize_bounds():
    for n, path in ((co.MAX_HIDDEN, 1), (co.MAX_HIDDEN + 1, 0)):
        torch.emu.reset_op_stats()
        x = torch.randn(1, n, device=EMU)
        (y, _), launched = kernels_launched(lambda: row_normalize(x))
        assert launched.get("row_normalize", 0) == path
        torch.testing.assert_close(y.cpu(), F.normalize(x.cpu(), dim=1))
    torch.emu.reset_op_stats()
    row_normalize(torch.randn(2, 3, dtype=torch.float64, device=EMU))
    assert _paths("emu::row_normalize") == {"native": 0, "composite": 1}


# -- fake implementations ---------------------------------------------------------------------------

def test_fake_metadata_matches_real():
    x, r, w = _emu(*_rms_inputs((3, 4, 10), torch.bfloat16))
    real = add_rms_norm(x, r, w, 1e-6) + row_normalize(x[0])
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fx, fr, fw = (mode.from_tensor(t) for t in (x, r, w))
        fake = add_rms_norm(fx, fr, fw, 1e-6) + row_normalize(fx[0])
    for a, b in zip(real, fake):
        assert (a.shape, a.dtype, a.stride(), a.storage_offset(), a.device) == \
               (b.shape, b.dtype, b.stride(), b.storage_offset(), b.device)


def test_a_fake_impl_that_reads_data_fails():
    # The invalid implementation lives only in this test, on a test-only operator name.
    @torch.library.custom_op("emu_test::reads_data_in_fake", mutates_args=())
    def reads_data(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @reads_data.register_fake
    def _(x):
        int(x.abs().max().item())   # reads the data: no fake implementation may do this
        return x.new_empty(x.shape)

    with pytest.raises(DataDependentOutputException):
        with FakeTensorMode():
            reads_data(torch.empty(3))

    class Model(torch.nn.Module):
        def forward(self, x):
            return reads_data(x)

    with pytest.raises(RuntimeError, match="data-dependent"):
        torch.export.export(Model(), (torch.randn(3),))
    # the real operators' fakes export fine
    class Real(torch.nn.Module):
        def forward(self, x):
            return row_normalize(x)
    torch.export.export(Real(), (torch.randn(2, 3),))


# -- autograd ------------------------------------------------------------------------------------------

def test_gradcheck_float64():
    g = torch.Generator().manual_seed(1)
    x, r, w = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in ((3, 5), (3, 5), (5,)))
    assert torch.autograd.gradcheck(lambda *a: add_rms_norm(*a, 1e-6), (x, r, w))
    xn = torch.randn(3, 6, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: row_normalize(t)[0], (xn,))
    # scale is float32 by contract (a finite-difference Jacobian of it is noise at float64's
    # step): its gradient is checked against d||x||/dx = x / ||x||
    (grad,) = torch.autograd.grad(row_normalize(xn)[1].sum(), xn)
    torch.testing.assert_close(grad, (xn / xn.norm(dim=1, keepdim=True)).detach(), rtol=1e-6, atol=1e-7)
    # on the device too (float64 takes the reference path there; the backward is the op's)
    xe, re, we = (t.detach().to(EMU).requires_grad_() for t in (x, r, w))
    assert torch.autograd.gradcheck(lambda *a: add_rms_norm(*a, 1e-6), (xe, re, we))


def _reference_grads(fn, inputs, grads):
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    outs = fn(*leaves)
    torch.autograd.backward([o for o in outs], [g.double() for g in grads])
    return [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [7, 33, 129])
def test_reduced_precision_gradients(dtype, hidden):
    x, r, w = _rms_inputs((3, hidden), dtype, seed=hidden)
    gout, gres = torch.randn(3, hidden).to(dtype), torch.randn(3, hidden).to(dtype)
    leaves = [t.to(EMU).requires_grad_() for t in (x, r, w)]
    outs = add_rms_norm(*leaves, 1e-6)
    torch.autograd.backward(outs, [gout.to(EMU), gres.to(EMU)])
    expected = _reference_grads(lambda a, b, c: co.add_rms_norm_reference(a, b, c, 1e-6), (x, r, w), (gout, gres))
    tol = dict(rtol=2e-2, atol=2e-2 * (hidden ** 0.5)) if dtype == torch.bfloat16 else \
        dict(rtol=4e-3, atol=4e-3 * (hidden ** 0.5))
    for leaf, e in zip(leaves, expected):
        assert leaf.grad.dtype == dtype
        torch.testing.assert_close(leaf.grad.cpu().double(), e, **tol)
    xn = x.to(EMU).requires_grad_()
    y, scale = row_normalize(xn)
    gy, gs = torch.randn(3, hidden).to(dtype), torch.randn(3)
    torch.autograd.backward((y, scale), (gy.to(EMU), gs.to(EMU)))
    (e,) = _reference_grads(co.row_normalize_reference, (x,), (gy, gs))
    torch.testing.assert_close(xn.grad.cpu().double(), e, **tol)


# -- autocast ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["emu", "cpu"])
def test_autocast_policy(device):
    x, r, w = (t.to(device) for t in _rms_inputs((2, 16), torch.float32))
    with torch.autocast(device, dtype=torch.bfloat16):
        out, res = add_rms_norm(x, r, w, 1e-6)
        y, scale = row_normalize(x)
    # fused_add_rms_norm: every input cast to the region's dtype, outputs in it
    assert out.dtype == res.dtype == torch.bfloat16
    expected = co.add_rms_norm_reference(x.bfloat16().cpu(), r.bfloat16().cpu(), w.bfloat16().cpu(), 1e-6)
    torch.testing.assert_close(out.cpu(), expected[0], **TOL[torch.bfloat16])
    # row_normalize: nothing cast
    assert y.dtype == torch.float32 and scale.dtype == torch.float32


# -- opcheck ---------------------------------------------------------------------------------------------

def _opcheck_cases():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x, r, w = _emu(*_rms_inputs((3, 8), dtype))
        yield add_rms_norm, (x, r, w, 1e-6)
        yield row_normalize, (x,)
    x, r, w = _emu(*_rms_inputs((6, 4), torch.float32))
    yield add_rms_norm, (x.t(), r.t(), torch.randn(6, device=EMU).requires_grad_(), 1e-6)  # transposed
    yield row_normalize, (x.t().requires_grad_(),)
    yield row_normalize, (torch.empty(3, 0, device=EMU),)                            # empty rows
    yield add_rms_norm, (x.requires_grad_(), r, w.requires_grad_(), 1e-5)             # requires_grad on
    yield add_rms_norm, (torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 5, dtype=torch.float64),
                         torch.randn(5, dtype=torch.float64), 1e-6)                       # CPU


# torch's autograd_registration_check knows CPU/CUDA/XPU only ("NYI devices other than ..."): on
# emu inputs opcheck runs its other checks, and the autograd registration (device-independent:
# one Autograd-key kernel) is checked on the same cases moved to the CPU.
_ON_EMU = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def _on_cpu(args):
    return tuple(a.detach().cpu().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                 for a in args)


def test_opcheck():
    for op, args in _opcheck_cases():
        torch.library.opcheck(op, args, test_utils=_ON_EMU if any(
            isinstance(a, torch.Tensor) and a.device.type == "emu" for a in args) else
            ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
        torch.library.opcheck(op, _on_cpu(args), test_utils="test_autograd_registration")


@needs_mutating_ops
def test_opcheck_mutating_ops():
    x, y = torch.randn(4, 3, device=EMU), torch.randn(3, device=EMU)
    torch.library.opcheck(torch.ops.emu.scaled_add_, (x, y, 0.5), test_utils=_ON_EMU)
    torch.library.opcheck(torch.ops.emu.square_sum_rows, (x,), {"out": torch.empty(4, device=EMU)},
                          test_utils=_ON_EMU)
    torch.library.opcheck(torch.ops.emu.scaled_add_, (x.cpu(), y.cpu(), 0.5))
    torch.library.opcheck(torch.ops.emu.square_sum_rows, (x.cpu(),), {"out": torch.empty(4)})


# -- mutation under torch.compile -----------------------------------------------------------------------

def _mutating(x, other, out):
    h = x * 2
    torch.ops.emu.scaled_add_(h, other, 0.5)        # in place on an intermediate
    torch.ops.emu.scaled_add_(x, other, -1.0)       # in place on a graph input: visible afterwards
    torch.ops.emu.square_sum_rows(h, out=out)       # out= into a graph input
    return h + 1, out.sum()


@needs_mutating_ops
def test_mutating_ops_functionalize_under_compile(fresh_dynamo):
    x0, other = torch.randn(5, 4, device=EMU), torch.randn(4, device=EMU)
    x_eager, out_eager = x0.clone(), torch.empty(5, device=EMU)
    expected = _mutating(x_eager, other, out_eager)
    x_comp, out_comp = x0.clone(), torch.empty(5, device=EMU)
    compiled = torch.compile(_mutating, backend="emu", fullgraph=True)
    got = compiled(x_comp, other, out_comp)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a.cpu(), b.cpu())
    torch.testing.assert_close(x_comp.cpu(), x_eager.cpu())        # the in-place mutation is visible
    torch.testing.assert_close(out_comp.cpu(), out_eager.cpu())    # so is the out= write
    torch.testing.assert_close(x_comp.cpu(), (x0 - other).cpu())
