"""The op modules' OVERLOADS tables (torch_plugin/ops/_overloads.py): every native overload has one
home beside its kernel, names a real aten overload, and reaches the dispatcher (issue 23)."""
from __future__ import annotations

import importlib
import types
from collections import defaultdict

import pytest
import torch

import torch_plugin  # noqa: F401
from torch_plugin import _compat
from torch_plugin.ops import _overloads, elementwise, fft, pointwise, registry


def _homes() -> dict:
    """{(table kind, overload): [modules declaring it]} over every op module."""
    homes = defaultdict(list)
    for module in registry.op_modules():
        for attr in ("GENERATED_OVERLOADS", "OVERLOADS"):
            table = getattr(module, attr, None)
            if table is not None:
                for name in table.table():
                    homes[(attr, name)].append(module.__name__)
    return homes


def test_every_overload_has_one_home():
    twice = {key: modules for key, modules in _homes().items() if len(modules) > 1}
    assert not twice
    natives = registry.native_kernels()
    declared = {name for (attr, name) in _homes() if attr == "OVERLOADS"}
    generated = {name for (attr, name) in _homes() if attr == "GENERATED_OVERLOADS"}
    # Every native kernel comes from a module's table; a hand-written one wins over a generated row.
    assert set(natives) == declared | generated
    for (attr, name), (module,) in _homes().items():
        if attr == "OVERLOADS" or name not in declared:
            assert natives[name] is getattr(importlib.import_module(module), attr).table()[name], name


def test_table_names_are_aten_overloads_of_this_torch():
    absent = _compat.aten_ops_absent(torch.__version__)
    unknown = []
    for name in registry.native_kernels():
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if name not in absent and (packet is None or (overload or "default") not in packet.overloads()):
            unknown.append(name)
    assert not unknown


def test_every_native_overload_is_registered_for_the_device():
    absent = _compat.aten_ops_absent(torch.__version__)
    missing = [name for name in registry.native_kernels() if name not in absent
               and not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1")]
    assert not missing


def test_the_kernels_that_won_before_the_move_still_win():
    natives = registry.native_kernels()
    # fft.py's mul (complex results; every other case goes to elementwise.mul) won over elementwise's
    # entries in the old hand-written list, and fft.py's complex abs over the pointwise table's row.
    assert natives["mul.Tensor"] is fft.mul and natives["mul_.Tensor"] is fft.mul_ and natives["mul.out"] is fft.mul_out
    assert natives["abs"] is fft.abs and natives["abs.out"] is fft.abs_out
    assert "abs" in pointwise.GENERATED_OVERLOADS.table()
    assert elementwise.mul not in natives.values()
    # A generated row nobody overrides stays the row's kernel.
    assert natives["neg"] is pointwise.GENERATED_OVERLOADS.table()["neg"]


def _kernel_a(x):
    return x


def _kernel_b(x):
    return x


def test_a_duplicate_declaration_in_one_module_names_both_kernels():
    table = _overloads.Overloads("fake_ops")
    table.implements("add.Tensor")(_kernel_a)
    with pytest.raises(ValueError, match=r"aten::add.Tensor is declared twice.*_kernel_a.*_kernel_b"):
        table.implements("add.Tensor")(_kernel_b)
    with pytest.raises(ValueError, match="declared twice"):
        table.update({"add.Tensor": _kernel_b})


def _module(name: str, **tables):
    return types.SimpleNamespace(__name__=name, **tables)


def test_an_overload_two_modules_declare_names_both_modules():
    first, second = _overloads.Overloads("ops_one"), _overloads.Overloads("ops_two")
    first.implements("add.Tensor", "add.out")(_kernel_a)
    second.implements("add.out")(_kernel_b)
    with pytest.raises(ValueError, match=r"aten::add.out is declared by both ops_one .*_kernel_a.* and ops_two .*_kernel_b"):
        _overloads.collect([_module("ops_one", OVERLOADS=first), _module("ops_two", OVERLOADS=second)])


def test_a_hand_written_kernel_wins_over_a_generated_row():
    rows = _overloads.Overloads("rows", generated=True)
    rows.update({"neg": _kernel_a, "abs": _kernel_a})
    hand = _overloads.Overloads("hand")
    hand.implements("abs")(_kernel_b)
    merged = _overloads.collect([_module("hand", OVERLOADS=hand), _module("rows", GENERATED_OVERLOADS=rows)])
    assert merged == {"neg": _kernel_a, "abs": _kernel_b}
    other_rows = _overloads.Overloads("more_rows", generated=True)
    other_rows.update({"neg": _kernel_b})
    with pytest.raises(ValueError, match="aten::neg is declared by both rows"):
        _overloads.collect([_module("rows", GENERATED_OVERLOADS=rows), _module("more_rows", GENERATED_OVERLOADS=other_rows)])


def test_a_table_under_the_wrong_name_is_refused():
    rows = _overloads.Overloads("rows", generated=True)
    with pytest.raises(TypeError, match="OVERLOADS is an Overloads.generated=True. table"):
        _overloads.collect([_module("rows", OVERLOADS=rows)])


@pytest.mark.parametrize("bad", ["aten::add.Tensor", "", None])
def test_overload_names_are_bare_aten_names(bad):
    with pytest.raises(ValueError, match="bare aten names"):
        _overloads.Overloads("fake_ops").update({bad: _kernel_a})


def test_implements_needs_a_name():
    with pytest.raises(TypeError, match="at least one overload name"):
        _overloads.Overloads("fake_ops").implements()
