"""The out= and in-place contract (seed 000, "Rules for out= variants"), checked before launch.

The repros of issue 18 first, then the pointwise table's same-dtype rules against CPU for every
row, then PyTorch's TestCommon out= and variant rules over all of op_db
(torch_plugin/conformance_contracts.py) against the remaining failures listed as data.
"""
import json
import pathlib
import warnings

import pytest
import torch

from torch_plugin import conformance_contracts as contracts
from torch_plugin.ops import pointwise

DATA = pathlib.Path(__file__).parent / "data" / "contracts_expected.json"


def _raises_like_cpu(fn_cpu, fn_emu):
    """CPU raises, so emu raises an exception of a type CPU's error is (or that CPU's is)."""
    with pytest.raises(Exception) as cpu:
        fn_cpu()
    with pytest.raises(Exception) as emu:
        fn_emu()
    assert isinstance(emu.value, type(cpu.value)) or isinstance(cpu.value, type(emu.value)) or \
        isinstance(emu.value, RuntimeError), (cpu.value, emu.value)


# -- device --------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["gcd", "lcm", "mvlgamma", "eigvals", "neg", "add"])
def test_cpu_out_for_emu_inputs_is_refused_before_any_work(case):
    a = torch.tensor([4.0, 6.0, 9.0], device="emu")
    ints = torch.tensor([4, 6, 9], device="emu")
    out = torch.full((3,), 7.0)
    calls = {
        "gcd": lambda o: torch.gcd(ints, ints, out=o.long()),
        "lcm": lambda o: torch.lcm(ints, ints, out=o.long()),
        "mvlgamma": lambda o: torch.mvlgamma(a, 2, out=o),
        "eigvals": lambda o: torch.linalg.eigvals(torch.eye(3, device="emu"), out=o.to(torch.complex64)),
        "neg": lambda o: torch.neg(a, out=o),
        "add": lambda o: torch.add(a, a, out=o),
    }
    target = out.long() if case in ("gcd", "lcm") else out.to(torch.complex64) if case == "eigvals" else out
    before = target.clone()
    with pytest.raises(RuntimeError, match="same device"):
        calls[case](target)
    assert torch.equal(target, before)


def test_native_batch_norm_cpu_out_is_refused():
    x = torch.randn(2, 3, 4, device="emu")
    w, b = torch.ones(3, device="emu"), torch.zeros(3, device="emu")
    outs = (torch.empty(2, 3, 4), torch.empty(3), torch.empty(3))
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.aten.native_batch_norm.out(x, w, b, None, None, True, 0.1, 1e-5,
                                              out=outs[0], save_mean=outs[1], save_invstd=outs[2])


# -- dtype ---------------------------------------------------------------------------------------
def test_nansum_into_integer_out_raises_and_keeps_out():
    t = torch.tensor([[2.5, 3.5], [1.25, 0.5]])
    out = torch.zeros(2, dtype=torch.long, device="emu")
    _raises_like_cpu(lambda: torch.nansum(t, dim=1, out=torch.zeros(2, dtype=torch.long)),
                     lambda: torch.nansum(t.to("emu"), dim=1, out=out))
    assert out.cpu().tolist() == [0, 0]


def test_op_without_promotion_needs_out_dtype_to_match():
    x = torch.randn(3)
    _raises_like_cpu(lambda: torch.neg(x, out=torch.empty(3, dtype=torch.float64)),
                     lambda: torch.neg(x.to("emu"), out=torch.empty(3, dtype=torch.float64, device="emu")))


def test_promoting_op_accepts_a_safe_cast_only():
    x = torch.randn(3, device="emu")
    out = torch.empty(3, dtype=torch.float64, device="emu")
    torch.exp(x, out=out)
    torch.testing.assert_close(out.cpu(), torch.exp(x.cpu()).double())
    with pytest.raises(RuntimeError):
        torch.exp(x, out=torch.empty(3, dtype=torch.long, device="emu"))


@pytest.mark.parametrize("weight", ["scalar", "tensor"])
def test_lerp_checks_its_operands_dtypes(weight):
    def call(dev):
        start = torch.randn(3, device=dev)
        end = torch.randn(3, device=dev, dtype=torch.float64)
        w = 0.5 if weight == "scalar" else torch.full((3,), 0.5, device=dev)
        return torch.lerp(start, end, w)
    _raises_like_cpu(lambda: call("cpu"), lambda: call("emu"))


def _schema_out(op):
    outs = [a.name for a in op._schema.arguments if a.kwarg_only and a.alias_info is not None
            and a.alias_info.is_write]
    return outs[0] if len(outs) == 1 else None


def _pointwise_out_cases():
    for row in pointwise.TABLE:
        for overload in row.overloads:
            op = pointwise._overload_packet(overload)
            if op is not None and _schema_out(op) is not None:
                yield pytest.param(row, op, id=overload)


def _call_pointwise(row, op, device, dtypes, out_dtype):
    schema = op._schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    args = []
    tensors = iter(dtypes)
    for a in positional:
        if isinstance(a.type, torch.TensorType) or "Tensor" in str(a.type) and "?" not in str(a.type):
            args.append(torch.full((2,), 0.75, dtype=next(tensors, dtypes[0]), device=device))
        elif a.has_default_value():
            break
        else:
            args.append(1 if "int" in str(a.type).lower() else 0.5)
    return op(*args, **{_schema_out(op): torch.empty(2, dtype=out_dtype, device=device)})


def _accepts(fn):
    """True, False, or None when CPU's refusal is an implementation limit of one of its libraries
    (oneDNN's "itensor" views take no float64), not a contract the device must copy."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
        return True
    except Exception as err:  # noqa: BLE001 (accepted or not is the question)
        return None if "itensor" in str(err) else False


@pytest.mark.parametrize("row,op", list(_pointwise_out_cases()))
def test_pointwise_out_dtype_rules_match_cpu(row, op):
    """Every row of the pointwise table accepts exactly the out= and operand dtypes CPU accepts:
    an out of a wider dtype than the result, and (binary/ternary rows) mixed input dtypes."""
    integral = row.dtypes.startswith("integral")
    low, wide = (torch.int32, torch.int64) if integral else (torch.float32, torch.float64)
    cases = [((low,) * 3, wide), ((low,) * 3, torch.float32 if integral else torch.int64)]
    if row.arity >= 2:
        cases.append(((low, wide, low), wide))
    for dtypes, out_dtype in cases:
        cpu = _accepts(lambda: _call_pointwise(row, op, "cpu", dtypes, out_dtype))
        if cpu is None:
            continue
        emu = _accepts(lambda: _call_pointwise(row, op, "emu", dtypes, out_dtype))
        assert cpu == emu, f"{op}: inputs {dtypes}, out {out_dtype}: CPU {'accepts' if cpu else 'raises'}, " \
                           f"emu {'accepts' if emu else 'raises'}"


# -- shape ---------------------------------------------------------------------------------------
def test_inplace_op_never_resizes_self_even_when_empty():
    self_ = torch.zeros(0, 1, 3, device="emu")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        self_.add_(torch.zeros(0, 3, 3, device="emu"))
    assert self_.shape == (0, 1, 3)


def test_a_kernel_that_resizes_self_in_place_is_reported_as_an_internal_error():
    """The registry wrapper of an in-place overload checks the rule itself (a kernel bug: the
    error says so and names the overload); a kernel that keeps the shape passes through."""
    from torch_plugin.errors import EmuInternalError
    from torch_plugin.ops import registry

    def resizing(a, b, *, alpha=1):
        return a.resize_(a.numel() + 1)

    bad = registry._wrap("add_.Tensor", resizing, inplace="add_.Tensor")
    a = torch.zeros(3, device="emu")
    with pytest.raises(EmuInternalError, match=r"add_.Tensor changed the shape of self from \[3\] to \[4\]"):
        bad(a, a)
    fine = registry._wrap("add_.Tensor", lambda a, b, *, alpha=1: a.add_(b), inplace="add_.Tensor")
    b = torch.ones(3, device="emu")
    assert fine(b, b) is b and b.cpu().tolist() == [2.0] * 3
    # The registered add_ is such a wrapper (through the typed entry point, registry.TYPED).
    assert registry.TYPED["add_.Tensor"].__closure__ is not None
    assert "inplace" in registry.TYPED["add_.Tensor"].__code__.co_freevars


def test_where_resizes_a_wrong_shaped_out_with_cpu_warning():
    cond = torch.tensor([True, False, True], device="emu")
    out = torch.empty(5, device="emu")
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.where(cond, torch.ones(3, device="emu"), torch.zeros(3, device="emu"), out=out)
    assert out.cpu().tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("index_shape", [(0, 4), (3, 0), (0,), (0, 0)])
def test_gather_with_an_empty_index(index_shape):
    x = torch.randn(3, 4)
    index = torch.empty(index_shape, dtype=torch.long)
    try:
        expected = torch.gather(x, 1 if len(index_shape) > 1 else 0, index)
    except Exception as err:  # noqa: BLE001
        with pytest.raises(type(err)):
            torch.gather(x.to("emu"), 1 if len(index_shape) > 1 else 0, index.to("emu"))
        return
    got = torch.gather(x.to("emu"), 1 if len(index_shape) > 1 else 0, index.to("emu"))
    assert got.shape == expected.shape and got.dtype == expected.dtype


# -- TestCommon's rules over op_db ------------------------------------------------------------------
def _expected_failures():
    return json.loads(DATA.read_text())["failures"]


@pytest.fixture(scope="module")
def outcomes():
    return contracts.run_suite()


def test_every_op_db_entry_follows_the_out_and_variant_contracts(outcomes):
    expected = _expected_failures()
    failed = contracts.failures(outcomes)
    new = {k: v for k, v in failed.items() if k not in expected}
    assert not new, "new contract failures (fix them, or list them with a reason in " \
                    f"{DATA.name}):\n" + "\n".join(f"{k}: {v}" for k, v in sorted(new.items()))


def test_expected_contract_failures_still_fail(outcomes):
    """A listed failure that now passes is taken off the list (the list only shrinks)."""
    failed = contracts.failures(outcomes)
    ran = {f"{o.op}:{o.check}" for o in outcomes}
    fixed = [k for k in _expected_failures() if k in ran and k not in failed]
    assert not fixed, f"these now pass; remove them from {DATA.name}: {fixed}"


def test_expected_contract_failures_have_reasons():
    for key, reason in _expected_failures().items():
        assert isinstance(reason, str) and len(reason) > 20, key
