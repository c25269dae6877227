"""torch._decomp decompositions registered as emu kernels: the "decomposition" path.

An op without a device kernel can still run on the device when PyTorch's own
decomposition (``torch._decomp``) expresses it in ops that do have one: ``addcmul`` is
``self + value * tensor1 * tensor2``, ``mv`` is ``(self * vec).sum(1)``. Each row of
``DECOMPOSITIONS`` names the aten overloads to register (functional, out= and in-place
forms) and the ops the decomposition produces. A row is registered only when

- none of its overloads has a kernel in ``registry.native_kernels()`` (a native kernel
  always wins: add a row's op there and the row steps aside), and
- every op it produces has a device path: a native kernel, another active row, a C++
  PrivateUse1 kernel (views), or one of ``DEVICE_COMPOSITES`` (CompositeExplicitAutograd
  ops whose implementation reaches device ops only).

So a row whose ops are missing today (``lerp`` needs ``where`` and ``abs``) turns itself on
when another engineer adds them. ``tests/torch_plugin/test_paths.py`` traces every active
row and checks that ``produces`` is what the decomposition really calls.

Dtypes outside a row's ``dtypes`` are handed to the host fallback (counted there), never
computed by a decomposition that would not match CPU. Each op instance is counted under
"decomposition"; the ops it runs are counted as what they are (native, mostly).

To add a row: find the decomposition's ops (``traced_ops`` below, or the test's helper),
check that its numerics match CPU for the dtypes you list (the reduced floats are computed
in float32 by the decompositions' type-promotion wrappers, as CPU's opmath does), and add a
test case to ``DECOMPOSITION_CASES`` in test_paths.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from torch_plugin._dtypes import SUPPORTED

_ALL = frozenset(SUPPORTED)
_NOT_BOOL = frozenset(SUPPORTED - {torch.bool})
# out= wrappers resize the out (resize_, C++) and copy the result into it (copy_).
_OUT_OPS = ("copy_", "resize_")


@dataclass(frozen=True)
class Decomposition:
    overloads: tuple[str, ...]   # aten overloads registered ("addcmul" is addcmul.default)
    produces: tuple[str, ...]    # the aten overloads the decomposition calls
    dtypes: frozenset = _ALL     # operand dtypes it runs for; others go to the host fallback
    note: str = ""


DECOMPOSITIONS: tuple[Decomposition, ...] = (
    Decomposition(("rsub.Tensor", "rsub.Scalar", "rsub.Tensor_out", "rsub.Scalar_out"), ("sub.Tensor",),
                  note="other - alpha * self"),
    Decomposition(("addcmul", "addcmul.out", "addcmul_"), ("add.Tensor", "mul.Tensor", "_to_copy"),
                  note="self + value * tensor1 * tensor2, float16/bfloat16 computed in float32"),
    Decomposition(("addcdiv", "addcdiv.out", "addcdiv_"), ("add.Tensor", "mul.Tensor", "div.Tensor", "_to_copy"),
                  dtypes=frozenset(d for d in SUPPORTED if d.is_floating_point),
                  note="self + value * tensor1 / tensor2 (integer addcdiv is an error on CPU)"),
    Decomposition(("mv", "mv.out"), ("mul.Tensor", "sum.dim_IntList", "_to_copy"),
                  note="(self * vec).sum(1): a vector-engine product, not the matrix engine"),
    Decomposition(("addmv", "addmv.out"), ("add.Tensor", "mul.Tensor", "mv"),
                  note="beta * self + alpha * mv(mat, vec)"),
    Decomposition(("dot", "dot.out"), ("mul.Tensor", "sum", "_to_copy"), note="(self * other).sum()"),
    Decomposition(("addr", "addr.out"), ("add.Tensor", "mul.Tensor", "expand", "view", "_to_copy"),
                  dtypes=_NOT_BOOL, note="beta * self + alpha * outer(vec1, vec2); bool needs logical_or"),
    Decomposition(("deg2rad", "deg2rad.out"), ("mul.Tensor", "_to_copy")),
    Decomposition(("rad2deg", "rad2deg.out"), ("mul.Tensor", "_to_copy")),
    Decomposition(("mse_loss_backward", "mse_loss_backward.grad_input"), ("sub.Tensor", "mul.Tensor", "_to_copy"),
                  note="norm * (input - target) * grad_output"),
    Decomposition(("native_dropout_backward", "native_dropout_backward.out"),
                  ("mul.Tensor", "_to_copy", "clone", "type_as"),
                  note="grad_output * mask * scale"),
    # Waiting for ops that others are adding (active as soon as they are native):
    Decomposition(("lerp.Scalar", "lerp.Tensor", "lerp.Scalar_out", "lerp.Tensor_out", "lerp_.Scalar", "lerp_.Tensor"),
                  ("abs", "add.Tensor", "ge.Scalar", "mul.Tensor", "new_full", "sub.Tensor", "where.self", "_to_copy")),
    Decomposition(("hardtanh", "hardtanh.out", "hardtanh_"), ("clamp",)),
    Decomposition(("baddbmm", "baddbmm.out"), ("add.Tensor", "bmm", "mul.Tensor", "_to_copy")),
)

# Composite ops (CompositeExplicitAutograd, or CompositeImplicitAutograd: a decomposition runs
# below autograd, where those are still whole ops) whose implementation reaches only device ops
# or metadata: a decomposition may produce them.
DEVICE_COMPOSITES = {
    "sum": "sum.dim_IntList",
    "_to_copy": "empty_strided + copy_",
    "clone": "empty_like + copy_",
    "copy_": "_copy_from",
    "expand": "as_strided (a view)",
    "new_full": "empty + fill_",
    "type_as": "CompositeImplicitAutograd: to(other.dtype), i.e. _to_copy",
}


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _has_device_kernel(name: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1")


def _available(name: str, natives: dict, decomposed: set) -> bool:
    return name in natives or name in decomposed or name in DEVICE_COMPOSITES or _has_device_kernel(name)


def resolve(natives: dict) -> tuple[list[Decomposition], dict[Decomposition, list[str]]]:
    """(active rows, {inactive row: the ops it misses or the natives that replace it})."""
    rows = [row for row in DECOMPOSITIONS]
    active, decomposed = [], set()
    changed = True
    while changed:  # a row may produce another row's op (addmv -> mv)
        changed = False
        for row in rows:
            if row in active or any(name in natives for name in row.overloads):
                continue
            if all(_available(name, natives, decomposed) for name in row.produces):
                active.append(row)
                decomposed.update(row.overloads)
                changed = True
    inactive = {}
    for row in rows:
        if row in active:
            continue
        replaced = [name for name in row.overloads if name in natives]
        inactive[row] = ([f"{name} is native" for name in replaced] if replaced else
                         [name for name in row.produces if not _available(name, natives, decomposed)])
    return active, inactive


def _kernel(name: str, row: Decomposition):
    overload = _overload(name)
    decomposition = torch._decomp.get_decompositions([overload])[overload]
    dtypes = row.dtypes

    def run(*args, **kwargs):
        if dtypes is not _ALL:
            for value in (*args, *kwargs.values()):
                if isinstance(value, torch.Tensor) and value.dtype not in dtypes:
                    from torch_plugin.ops import fallback
                    return fallback.run_on_host(overload, *args, **kwargs)
        return decomposition(*args, **kwargs)
    run.__name__ = f"decomposed_{name.replace('.', '_')}"
    return run


def active(natives: dict) -> dict:
    """{aten overload name: kernel} of every active row, for registry.register_all()."""
    import torch._decomp  # noqa: F401  (loads the decomposition table)
    rows, _ = resolve(natives)
    kernels = {}
    for row in rows:
        try:
            kernels.update({name: _kernel(name, row) for name in row.overloads})
        except (AttributeError, KeyError) as err:  # a misspelt overload, or no decomposition for it:
            BROKEN[row] = f"{type(err).__name__}: {err}"  # import must not fail; the test lists BROKEN
    return kernels


BROKEN: dict[Decomposition, str] = {}  # rows that could not be registered, and why


def table() -> list[dict]:
    """Every row, active or not, with what it waits for (docs and telemetry)."""
    from torch_plugin.ops import registry
    natives = registry.native_kernels()
    rows, inactive = resolve(natives)
    return [{"overloads": list(row.overloads), "produces": list(row.produces), "active": row in rows,
             "missing": inactive.get(row, []), "dtypes": sorted(str(d) for d in row.dtypes), "note": row.note}
            for row in DECOMPOSITIONS]


def traced_ops(name: str, fn, *args, **kwargs) -> set[str]:
    """Runs ``fn(*args, **kwargs)`` and returns the aten overloads (named as in the table) that
    the decomposition of overload ``name`` called at its top level, each time it ran."""
    from torch.utils._python_dispatch import TorchDispatchMode

    target, decomposition, seen = _overload(name), decomposition_of(name), set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet, overload = func._schema.name.split("::")[1], func._overloadname
            seen.add(packet if overload == "default" else f"{packet}.{overload}")
            return func(*args, **(kwargs or {}))

    class Find(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is not target:
                return func(*args, **(kwargs or {}))
            with Record():
                return decomposition(*args, **(kwargs or {}))
    with Find():
        fn(*args, **kwargs)
    return seen


def decomposition_of(name: str):
    """The torch._decomp function registered for aten overload ``name``."""
    overload = _overload(name)
    return torch._decomp.get_decompositions([overload])[overload]


OUT_OPS = _OUT_OPS
