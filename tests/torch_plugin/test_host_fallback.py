"""The host fallback (torch_plugin/ops/fallback.py) never loses a write, and is never free.

- Classification: every mutable argument of every aten schema is a kind the fallback
  writes back (Tensor, Tensor?, Tensor[], Tensor?[]), or the op is in a short explicit
  list of TorchScript builtins that can never reach the PrivateUse1 fallback; every
  ``Tensor(a!)`` return resolves to the argument it aliases.
- Write-back, compared with CPU (torch.testing.assert_close): a list of mutated tensors
  (``_amp_foreach_non_finite_check_and_unscale_``, GradScaler's unscale: the emu gradients
  stayed unscaled before), optional mutable tensors and lists of them (custom ops: no aten
  op has one), an out= op (cumsum.out, resized and not) and in-place ops (exp_, clamp_);
  other tensors keep their values. An op with a mutable argument of another kind is
  rejected, naming it, before anything runs.
- Accounting: the fallback's copies are counted under ``host_fallback_copies``, never as
  native ``aten::_copy_from``; the CPU work advances the modelled host clock by the host
  cost model (HostConfig: fallback_overhead_ns + max(flops / flops_per_s, bytes / bandwidth)).
test_regression_* are the issue's repro (GradScaler); they, the list, aliasing, rejection
and accounting tests all fail on the fallback before it walked the schema's lists.
"""
from __future__ import annotations

import pytest
import torch

import runtime
import torch_plugin  # noqa: F401
from plugin_testing import EXACT, make
from torch_plugin.ops import fallback

pytestmark = pytest.mark.filterwarnings("ignore:.*has no emu kernel:UserWarning")

# aten schemas with a mutable argument the fallback cannot write back. All are TorchScript
# interpreter builtins on Python containers or Generators: they are not dispatcher ops, take
# no tensor that carries a dispatch key, and so can never reach the PrivateUse1 fallback.
NOT_DISPATCHED = {
    name: "TorchScript builtin on a list/dict/Generator; not a dispatcher op"
    for name in ("aten::Delete", "aten::_set_item", "aten::add_", "aten::append", "aten::clear",
                 "aten::extend", "aten::insert", "aten::manual_seed", "aten::mul_", "aten::pop",
                 "aten::popitem", "aten::remove", "aten::reverse", "aten::seed", "aten::setdefault",
                 "aten::sort", "aten::update")
}


def aten_schemas():
    return [s for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")]


def is_mutable(schema):
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def has_emu_kernel(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


def emu(t):
    return t.to("emu")


def on_host(op, *args, **kwargs):
    """Runs an aten op through the host fallback even if it has an emu kernel by now (the way a
    kernel hands its op to the host), so these tests do not depend on the kernel coverage."""
    return fallback.run_on_host(op, *args, **kwargs)


# ----------------------------------------------------------------- classification
def test_every_aten_mutable_argument_is_classified_or_listed():
    dispatcher_ops = set(torch._C._dispatch_get_all_op_names())
    kinds = {fallback.TENSOR: 0, fallback.OPTIONAL_TENSOR: 0, fallback.TENSOR_LIST: 0,
             fallback.OPTIONAL_TENSOR_LIST: 0}
    rejected = set()
    mutable = [s for s in aten_schemas() if is_mutable(s)]
    assert len(mutable) > 1000  # the walk really saw the out= and in-place ops
    for schema in mutable:
        full = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        try:
            classified = fallback.mutable_arguments(schema)
        except fallback.UnsupportedMutableArgument as err:
            assert schema.name in NOT_DISPATCHED, f"{schema}: {err}"
            assert full not in dispatcher_ops, f"{full} is a dispatcher op: the fallback can receive it"
            assert full in str(err)                     # the error names the op...
            assert any(f"'{a.name}'" in str(err) for a in schema.arguments)  # ...and the argument
            rejected.add(schema.name)
            continue
        written = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        assert [i for i, _, _ in classified] == written, schema
        for i, name, kind in classified:
            assert schema.arguments[i].name == name
            kinds[kind] += 1
    assert rejected == set(NOT_DISPATCHED)  # the explicit list holds nothing stale
    assert kinds[fallback.TENSOR] > 1000 and kinds[fallback.TENSOR_LIST] > 100, kinds


def test_every_dispatcher_op_with_a_mutable_argument_classifies():
    """Every op the fallback can receive, in any namespace, has only kinds it writes back."""
    for full in torch._C._dispatch_get_all_op_names():
        name, _, overload = full.partition(".")
        schema = torch._C._get_schema(name, overload)
        if is_mutable(schema):
            fallback.mutable_arguments(schema)  # raises for an unsupported kind


def test_classification_of_each_kind():
    tensor = torch.ops.aten.exp_.default._schema
    assert fallback.mutable_arguments(tensor) == [(0, "self", fallback.TENSOR)]
    amp = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default._schema
    assert fallback.mutable_arguments(amp) == [(0, "self", fallback.TENSOR_LIST),
                                               (1, "found_inf", fallback.TENSOR)]
    assert fallback.mutable_arguments(torch.ops.aten.add.Tensor._schema) == []
    opt = torch._C.parse_schema("seed::f(Tensor(a!)? x, Tensor(b!)?[] ys, Tensor z) -> ()")
    assert fallback.mutable_arguments(opt) == [(0, "x", fallback.OPTIONAL_TENSOR),
                                               (1, "ys", fallback.OPTIONAL_TENSOR_LIST)]
    bad = torch._C.parse_schema("seed::g(Tensor x, Generator(a!) gen) -> ()")
    with pytest.raises(fallback.UnsupportedMutableArgument, match=r"seed::g .*'gen' is a mutable Generator"):
        fallback.mutable_arguments(bad)


def test_every_write_return_aliases_a_mutated_argument():
    """In-place and out= returns resolve to the argument they alias (so the caller's emu
    tensor is returned, not a copy)."""
    for schema in aten_schemas():
        writes = [j for j, r in enumerate(schema.returns) if r.alias_info is not None and r.alias_info.is_write]
        if not writes or schema.name in NOT_DISPATCHED:
            continue
        assert sorted(fallback.aliased_returns(schema)) == writes, schema
    cumsum = torch.ops.aten.cumsum.out._schema
    position = fallback.aliased_returns(cumsum)[0]
    assert cumsum.arguments[position].name == "out"


# ------------------------------------------------------------------ write-back
@pytest.mark.parametrize("maximize", [False, True])
def test_fallback_writes_back_every_mutated_tensor_list(stats, maximize):
    """An op that mutates several Tensor[] arguments (here the fused Adagrad step, which has no emu
    kernel: AMP's unscale, the original regression, now runs natively) gets every list written back
    into the caller's emu tensors, and nothing else changes."""
    op = "aten::_fused_adagrad_"
    assert not has_emu_kernel(op)  # this test is about the fallback
    params = [make(torch.float32, (5, 3), seed=1), make(torch.float32, (7,), seed=2)]
    grads = [make(torch.float32, (5, 3), seed=5), make(torch.float32, (7,), seed=6)]
    sums = [torch.full((5, 3), 0.1), torch.full((7,), 0.2)]
    steps = [torch.tensor(3.0), torch.tensor(3.0)]
    bystander = make(torch.float32, (4,), seed=3)
    e_params, e_grads, e_sums, e_steps = ([emu(t) for t in ts] for ts in (params, grads, sums, steps))
    e_bystander = emu(bystander)
    kwargs = dict(lr=0.1, lr_decay=0.01, weight_decay=0.05, eps=1e-10, maximize=maximize)
    torch._fused_adagrad_(params, grads, sums, steps, **kwargs)
    assert torch._fused_adagrad_(e_params, e_grads, e_sums, e_steps, **kwargs) is None
    assert stats.fallback(op) == 1
    for got, expected in zip(e_params + e_sums + e_grads + e_steps, params + sums + grads + steps):
        torch.testing.assert_close(got.cpu(), expected, **EXACT)
    assert not torch.equal(sums[0], torch.full((5, 3), 0.1))   # the step did write the state
    torch.testing.assert_close(e_bystander.cpu(), bystander, **EXACT)


def test_regression_grad_scaler_step_uses_unscaled_gradients():
    """GradScaler on emu takes the same SGD step as on CPU (the gradients are unscaled)."""
    results = []
    for device in ("cpu", "emu"):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=1024.0)
        x = make(torch.float32, (8, 4), seed=4).to(device)
        loss = (model(x) ** 2).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        results.append([p.detach().cpu() for p in model.parameters()])
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected)


@pytest.fixture(scope="module")
def probe_ops():
    """Custom ops with CPU kernels only (so emu runs them through the fallback): aten has no
    ``Tensor(a!)?`` or ``Tensor(a!)?[]`` argument today."""
    lib = torch.library.Library("seed_fallback_test", "DEF")
    lib.define("scale_opt_(Tensor(a!)? x, Tensor y, float s) -> ()")
    lib.define("fill_opt_list_(Tensor(a!)?[] xs, float v) -> ()")
    lib.define("inc_list_(Tensor(a!)[] xs) -> Tensor(a!)[]")
    lib.define("grow_sizes_(Tensor x, int[](a!) sizes) -> ()")
    calls = []

    def scale_opt_(x, y, s):
        if x is not None:
            x.mul_(s).add_(y)

    def fill_opt_list_(xs, v):
        for x in xs:
            if x is not None:
                x.fill_(v)

    def inc_list_(xs):
        for x in xs:
            x.add_(1)
        return xs

    def grow_sizes_(x, sizes):
        calls.append(sizes)
    for name, fn in [("scale_opt_", scale_opt_), ("fill_opt_list_", fill_opt_list_),
                     ("inc_list_", inc_list_), ("grow_sizes_", grow_sizes_)]:
        lib.impl(name, fn, "CPU")
    yield torch.ops.seed_fallback_test, calls
    lib._destroy()


def test_optional_mutable_tensor_is_written_back(stats, probe_ops):
    ops, _ = probe_ops
    x, y = make(torch.float32, (6,), seed=5), make(torch.float32, (6,), seed=6)
    ex, ey = emu(x), emu(y)
    ops.scale_opt_(x, y, 3.0)
    ops.scale_opt_(ex, ey, 3.0)
    assert stats.fallback("seed_fallback_test::scale_opt_") == 1
    torch.testing.assert_close(ex.cpu(), x, **EXACT)
    torch.testing.assert_close(ey.cpu(), y, **EXACT)  # read only
    ops.scale_opt_(None, ey, 3.0)                      # absent: nothing to write back
    torch.testing.assert_close(ey.cpu(), y, **EXACT)


def test_same_emu_tensor_twice_is_one_host_tensor(probe_ops):
    """x passed as both the mutated and the read argument: the CPU op sees them alias, as on CPU."""
    ops, _ = probe_ops
    x = make(torch.float32, (6,), seed=7)
    ex = emu(x)
    ops.scale_opt_(x, x, 2.0)
    ops.scale_opt_(ex, ex, 2.0)
    torch.testing.assert_close(ex.cpu(), x, **EXACT)


def test_list_of_optional_mutable_tensors_is_written_back(probe_ops):
    ops, _ = probe_ops
    a, b = torch.zeros(3, device="emu"), torch.zeros(2, 2, device="emu")
    ops.fill_opt_list_([a, None, b], 7.0)
    torch.testing.assert_close(a.cpu(), torch.full((3,), 7.0), **EXACT)
    torch.testing.assert_close(b.cpu(), torch.full((2, 2), 7.0), **EXACT)


def test_mutated_list_return_is_the_callers_tensors(probe_ops):
    ops, _ = probe_ops
    a, b = torch.zeros(3, device="emu"), torch.ones(2, device="emu")
    out = ops.inc_list_([a, b])
    assert len(out) == 2 and out[0] is a and out[1] is b
    torch.testing.assert_close(a.cpu(), torch.ones(3), **EXACT)
    torch.testing.assert_close(b.cpu(), torch.full((2,), 2.0), **EXACT)


def test_unsupported_mutable_argument_is_rejected_before_running(stats, probe_ops):
    ops, calls = probe_ops
    x = torch.ones(2, device="emu")
    with pytest.raises(RuntimeError, match=r"seed_fallback_test::grow_sizes_ .*argument 'sizes' is a mutable"):
        ops.grow_sizes_(x, [1, 2])
    assert calls == []                                         # the CPU kernel never ran
    assert stats.fallback("seed_fallback_test::grow_sizes_") == 0
    assert torch.emu.op_stats()["host_fallback_copies"] == {}  # nothing was copied either


@pytest.mark.parametrize("out_shape", [(0,), (5, 4)], ids=["resized", "same-shape"])
def test_out_op_falls_back_and_writes_the_callers_out(stats, out_shape):
    x, bystander = make(torch.float32, (5, 4), seed=8), make(torch.float32, (3,), seed=9)
    ex, e_bystander = emu(x), emu(bystander)
    out, e_out = torch.empty(out_shape), torch.empty(out_shape, device="emu")
    expected = torch.cumsum(x, 0, out=out)
    got = on_host(torch.ops.aten.cumsum.out, ex, 0, out=e_out)
    assert got is e_out                                        # the caller's tensor, not a copy
    assert stats.fallback("aten::cumsum.out") == 1
    assert e_out.shape == expected.shape
    torch.testing.assert_close(e_out.cpu(), expected, **EXACT)
    torch.testing.assert_close(ex.cpu(), x, **EXACT)
    torch.testing.assert_close(e_bystander.cpu(), bystander, **EXACT)


@pytest.mark.parametrize("name, call", [
    ("aten::exp.out", lambda t: on_host(torch.ops.aten.exp.out, t, out=t) if t.device.type == "emu" else t.exp_()),
    ("aten::clamp_", lambda t: on_host(torch.ops.aten.clamp_.default, t, -1.5, 2.0) if t.device.type == "emu"
     else t.clamp_(-1.5, 2.0)),
    ("aten::index_fill_.int_Scalar", lambda t: on_host(torch.ops.aten.index_fill_.int_Scalar, t, 1,
                                                       torch.tensor([0, 3], device=t.device), -2.5)
     if t.device.type == "emu" else t.index_fill_(1, torch.tensor([0, 3]), -2.5)),
], ids=["exp_", "clamp_", "index_fill_"])
def test_in_place_op_falls_back_and_updates_the_tensor_and_its_views(stats, name, call):
    x, bystander = make(torch.float32, (4, 5), seed=10), make(torch.float32, (4, 5), seed=11)
    ex, e_bystander = emu(x), emu(bystander)
    e_view = ex[1:, ::2]                     # an alias taken before the op sees its write
    expected = call(x.clone())
    assert call(ex) is ex
    assert stats.fallback(name) == 1
    torch.testing.assert_close(ex.cpu(), expected)
    torch.testing.assert_close(e_view.cpu(), expected[1:, ::2])
    torch.testing.assert_close(e_bystander.cpu(), bystander, **EXACT)


# ------------------------------------------------------------------ accounting
def test_fallback_copies_are_counted_under_the_fallback_not_native(stats):
    ex, e_out = emu(make(torch.float32, (16,), seed=12)), torch.empty(16, device="emu")
    torch.emu.reset_op_stats()
    on_host(torch.ops.aten.cumsum.out, ex, 0, out=e_out)
    counts = torch.emu.op_stats()
    assert counts["host_fallback"] == {"aten::cumsum.out": 1}
    assert "aten::_copy_from" not in counts["native"], counts
    # Two operands copied to the host, one mutated argument written back.
    assert counts["host_fallback_copies"] == {"aten::_copy_from": 3}


def test_native_kernel_falling_back_counts_its_copies_under_the_fallback(stats):
    """A native kernel that hands its op to the fallback (as mm's did for int64 before it had an
    integer GEMM): neither the op nor the copies are native."""
    from torch_plugin.ops import registry
    lib = torch.library.Library("seed_fallback_delegate", "DEF")
    lib.define("mm_like(Tensor a, Tensor b) -> Tensor")
    lib.impl("mm_like", lambda a, b: a @ b, "CPU")
    lib.impl("mm_like", registry._wrap("mm_like", lambda a, b: fallback.run_on_host(
        torch.ops.seed_fallback_delegate.mm_like.default, a, b), op="seed_fallback_delegate::mm_like"), "PrivateUse1")
    try:
        a, b = make(torch.int64, (3, 4), seed=13), make(torch.int64, (4, 2), seed=14)
        ea, eb = emu(a), emu(b)
        torch.emu.reset_op_stats()
        got = torch.ops.seed_fallback_delegate.mm_like(ea, eb)
        counts = torch.emu.op_stats()
        assert counts["host_fallback"] == {"seed_fallback_delegate::mm_like": 1}
        assert counts["native"] == {}, counts
        assert counts["host_fallback_copies"] == {"aten::_copy_from": 3}  # 2 operands down, the result up
        torch.testing.assert_close(got.cpu(), a @ b, **EXACT)
    finally:
        lib._destroy()


def expected_cost_ns(flops, nbytes):
    host = runtime.get_runtime().config.host
    return host.fallback_overhead_ns + max(flops / host.flops_per_s * 1e9, nbytes / host.memory_bandwidth_gb_per_s)


def test_fallback_charges_the_host_cost_model_elementwise():
    n = 1 << 16
    ex, e_out = torch.ones(n, device="emu"), torch.empty(n, device="emu")
    clock = runtime.get_runtime().clock
    before_now, before_work, before_calls = clock.now_ns, clock.host_work_ns, clock.host_work_calls
    on_host(torch.ops.aten.cumsum.out, ex, 0, out=e_out)
    # Inputs x and out (4n bytes each), output out (4n); one flop per output element.
    cost = expected_cost_ns(n, 3 * 4 * n)
    assert clock.host_work_calls == before_calls + 1
    assert clock.host_work_ns - before_work == pytest.approx(cost)
    assert clock.now_ns - before_now >= cost


def test_fallback_charges_flop_counter_flops_for_matmuls():
    b, m, k, n = 2, 64, 64, 64
    x, y = torch.ones(b, m, k, device="emu"), torch.ones(b, k, n, device="emu")
    clock = runtime.get_runtime().clock
    before_now, before_work = clock.now_ns, clock.host_work_ns
    z = on_host(torch.ops.aten.bmm.default, x, y)
    cost = expected_cost_ns(2 * b * m * n * k, 4 * b * (m * k + k * n + m * n))
    assert clock.host_work_ns - before_work == pytest.approx(cost)
    assert clock.now_ns - before_now >= cost
    assert z.cpu().eq(k).all()


def test_fallback_appears_in_the_performance_report():
    from runtime.report import format_report
    on_host(torch.ops.aten.cumsum.default, torch.ones(8, device="emu"), 0)
    report = format_report(runtime.get_runtime())
    (line,) = [l for l in report.splitlines() if "host fallback:" in l]
    assert "us of modelled host time" in line
