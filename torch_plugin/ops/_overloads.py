"""The table an op module keeps of the aten overloads it implements, beside the kernels.

Each op module declares ``OVERLOADS = Overloads(__name__)`` and marks its kernels::

    @OVERLOADS.implements("add.Tensor")
    def add(self, other, alpha=1): ...

or adds generated kernels with ``OVERLOADS.update({...})``. ``ops/registry.py`` finds every module
of the package that has an ``OVERLOADS`` table and registers what they declare; no list elsewhere
has to be kept in step. An overload claimed twice (in one module or in two) is an error at
registration, naming both claimants. Nothing here touches the dispatcher.

A module may also keep a ``GENERATED_OVERLOADS = Overloads(__name__, generated=True)`` table: rows
made from a description (the pointwise op table, ops/pointwise.py) rather than written one by one.
A hand-written kernel in any module's ``OVERLOADS`` wins over a generated row naming the same
overload (fft.py's complex ``abs`` over the table's ``abs`` row); two generated rows, or two
hand-written kernels, naming one overload are an error.
"""
from __future__ import annotations

from typing import Callable, Iterable


class Overloads:
    """{aten overload name: kernel} for one op module (see the module docstring)."""

    def __init__(self, module: str, *, generated: bool = False):
        self.module = module
        self.generated = generated
        self._table: dict[str, Callable] = {}

    def implements(self, *names: str) -> Callable[[Callable], Callable]:
        """Decorator: the kernel implements each of ``names`` (``"add.Tensor"``, ``"add.out"``...)."""
        if not names:
            raise TypeError(f"{self.module}: implements() needs at least one overload name")

        def mark(fn: Callable) -> Callable:
            for name in names:
                self._add(name, fn)
            return fn
        return mark

    def update(self, kernels: dict[str, Callable] | Iterable[tuple[str, Callable]]) -> None:
        """Adds generated kernels (a dict or (name, kernel) pairs)."""
        for name, fn in (kernels.items() if isinstance(kernels, dict) else kernels):
            self._add(name, fn)

    def _add(self, name: str, fn: Callable) -> None:
        if not isinstance(name, str) or not name or name.startswith("aten::"):
            raise ValueError(f"{self.module}: overload names are bare aten names like 'add.Tensor', got {name!r}")
        if name in self._table:
            raise ValueError(f"{self.module}: aten::{name} is declared twice "
                             f"({_qualname(self._table[name])} and {_qualname(fn)})")
        self._table[name] = fn

    def table(self) -> dict[str, Callable]:
        return dict(self._table)

    def __len__(self) -> int:
        return len(self._table)


def _qualname(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _claim(kernels: dict, owner: dict, module: str, table: Overloads) -> None:
    for name, fn in table.table().items():
        if name in kernels:
            raise ValueError(f"aten::{name} is declared by both {owner[name]} ({_qualname(kernels[name])}) "
                             f"and {module} ({_qualname(fn)})")
        kernels[name] = fn
        owner[name] = module


def tables(modules) -> tuple[dict[str, Callable], dict[str, Callable]]:
    """(generated rows, hand-written kernels) of ``modules`` (imported module objects): the merged
    ``GENERATED_OVERLOADS`` and ``OVERLOADS`` tables. An overload two tables of one kind claim is an
    error that names both."""
    generated: dict[str, Callable] = {}
    declared: dict[str, Callable] = {}
    generated_by: dict[str, str] = {}
    declared_by: dict[str, str] = {}
    for module in modules:
        for attr, kernels, owner in (("GENERATED_OVERLOADS", generated, generated_by),
                                     ("OVERLOADS", declared, declared_by)):
            table = getattr(module, attr, None)
            if table is None:
                continue
            if table.generated != (attr == "GENERATED_OVERLOADS"):
                raise TypeError(f"{module.__name__}.{attr} is an Overloads(generated={table.generated}) table")
            _claim(kernels, owner, module.__name__, table)
    return generated, declared


def collect(modules) -> dict[str, Callable]:
    """{aten overload: kernel} of ``modules``: their generated rows, then their hand-written kernels,
    which win where both name an overload (see the module docstring)."""
    generated, declared = tables(modules)
    return {**generated, **declared}
