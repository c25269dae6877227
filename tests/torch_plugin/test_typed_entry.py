"""Typed dispatcher entry points (csrc/trampoline.cpp) into the binary arithmetic ops' Python
kernels, the eager hot path of issue 22.

- add, sub, mul and div (functional and in place, the .Tensor overloads) are registered through
  the C++ entry point, every other op through torch.library as before.
- The kernel sees what torch's boxed path gives it (compared with a torch.library kernel of the
  same schema): (self, other), a wrapped number as the Python number, plus alpha as a keyword only
  where it is not its default, with its Python type (int, float, bool).
- Values equal CPU's for every dtype class and alpha, broadcasting and type promotion included;
  in place returns self, and autograd, a dispatch mode and torch.compile still see the ops.
- A kernel's exception reaches the caller as the same object; a kernel returning something that is
  not a tensor is a RuntimeError naming the type (as torch's path refuses it, and not a TypeError,
  which Tensor's operators turn into NotImplemented); the device keeps working after both.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_plugin import _C
from torch_plugin.ops import registry

TYPED = ("add.Tensor", "add_.Tensor", "sub.Tensor", "sub_.Tensor",
         "mul.Tensor", "mul_.Tensor", "div.Tensor", "div_.Tensor")


@contextlib.contextmanager
def kernel_replaced(name, kernel):
    original = registry.TYPED[name]
    assert _C._impl_typed(name, kernel)
    try:
        yield
    finally:
        assert _C._impl_typed(name, original)


def test_the_binary_ops_enter_through_the_typed_entry_point_and_no_other_op_does():
    assert sorted(registry.TYPED) == sorted(TYPED)
    for name in TYPED:
        table = torch._C._dispatch_dump(f"aten::{name}")
        row = next(line for line in table.splitlines() if line.startswith("PrivateUse1"))
        assert "trampoline.cpp" in row, row
    row = next(line for line in torch._C._dispatch_dump("aten::add.out").splitlines()
               if line.startswith("PrivateUse1"))
    assert "trampoline.cpp" not in row, row  # out= keeps torch.library's entry


def test_impl_typed_refuses_what_it_has_no_entry_for():
    assert _C._impl_typed("maximum", lambda a, b: a) is False
    assert "trampoline.cpp" not in torch._C._dispatch_dump("aten::maximum")
    with pytest.raises(TypeError, match="_impl_typed"):
        _C._impl_typed("add.Tensor")
    with pytest.raises(TypeError, match="_impl_typed"):
        _C._impl_typed("add.Tensor", 3)


@pytest.mark.parametrize("alpha, passed", [(None, {}), (1, {}), (2, {"alpha": 2}), (0.5, {"alpha": 0.5}),
                                           (-1, {"alpha": -1}), (1.0, {"alpha": 1.0})])
@pytest.mark.parametrize("name", ["add.Tensor", "sub_.Tensor"])
def test_the_kernel_gets_alpha_only_where_it_is_not_its_default(name, alpha, passed):
    seen = []
    original = registry.TYPED[name]

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return original(*args, **kwargs)
    a, b = torch.rand(5), torch.rand(5)
    ea, eb = a.to("emu"), b.to("emu")
    op = getattr(torch.ops.aten, name.split(".")[0]).Tensor
    kwargs = {} if alpha is None else {"alpha": alpha}
    with kernel_replaced(name, spy):
        got = op(ea, eb, **kwargs)
    (args, kw), = seen
    assert args[0] is ea and args[1] is eb and kw == passed
    assert [type(v) for v in kw.values()] == [type(v) for v in passed.values()]
    torch.testing.assert_close(got.cpu(), op(a, b, **kwargs), rtol=0, atol=0)


_PROBE = torch.library.Library("emu_typed_probe", "DEF")
_PROBE.define("add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
_PROBE_SEEN = []


def _probe_kernel(*args, **kwargs):
    _PROBE_SEEN.append((tuple(type(a) for a in args), kwargs))
    return args[0].clone()


_PROBE.impl("add", _probe_kernel, "PrivateUse1")


@pytest.mark.parametrize("alpha", [None, 1, 2, 0.5, 1.0, True, -3])
def test_the_kernel_gets_the_arguments_torchs_boxed_path_gives(alpha):
    """The same call through a torch.library kernel of the same schema (torch's boxed path) and
    through the typed entry point: the same argument types and the same keywords."""
    a, b = torch.rand(3).to("emu"), torch.rand(3).to("emu")
    kwargs = {} if alpha is None else {"alpha": alpha}
    _PROBE_SEEN.clear()
    torch.ops.emu_typed_probe.add(a, b, **kwargs)
    (boxed_types, boxed_kwargs), = _PROBE_SEEN
    seen = []
    original = registry.TYPED["add.Tensor"]

    def spy(*args, **kw):
        seen.append((tuple(type(x) for x in args), kw))
        return original(*args, **kw)
    with kernel_replaced("add.Tensor", spy):
        torch.ops.aten.add.Tensor(a, b, **kwargs)
    (typed_types, typed_kwargs), = seen
    assert typed_types == boxed_types and typed_kwargs == boxed_kwargs
    assert [type(v) for v in typed_kwargs.values()] == [type(v) for v in boxed_kwargs.values()]


@pytest.mark.parametrize("number", [2, 2.5, True, 1 + 2j])
def test_a_wrapped_number_reaches_the_kernel_as_the_python_number(number):
    seen = []
    original = registry.TYPED["mul.Tensor"]

    def spy(*args, **kw):
        seen.append(args[1])
        return original(*args, **kw)
    x = torch.rand(4, dtype=torch.complex64 if isinstance(number, complex) else torch.float32)
    with kernel_replaced("mul.Tensor", spy):
        got = x.to("emu") * number
    assert len(seen) == 1 and type(seen[0]) is type(number) and seen[0] == number
    torch.testing.assert_close(got.cpu(), x * number, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_values_equal_cpu(op, dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(3, 4, generator=g) * 10 + 1).to(dtype)
    b = (torch.rand(4, generator=g) * 10 + 1).to(dtype)   # broadcast
    alphas = [{}] if op in ("mul", "div") else [{}, {"alpha": 3}] + ([{"alpha": 0.25}] if dtype.is_floating_point else [])
    for kwargs in alphas:
        want = getattr(torch, op)(a, b, **kwargs)
        got = getattr(torch, op)(a.to("emu"), b.to("emu"), **kwargs)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        if want.dtype == dtype:   # in place (div of integers promotes: CPU refuses it in place too)
            x, ex = a.clone(), a.to("emu")
            out = getattr(ex, op + "_")(b.to("emu"), **kwargs)
            assert out is ex
            torch.testing.assert_close(ex.cpu(), getattr(x, op + "_")(b, **kwargs), rtol=0, atol=0)


def test_type_promotion_and_bool_alpha_equal_cpu():
    a, b = torch.tensor([True, False, True]), torch.tensor([True, True, False])
    torch.testing.assert_close(torch.add(a.to("emu"), b.to("emu"), alpha=True).cpu(), torch.add(a, b, alpha=True))
    i, f = torch.arange(4), torch.rand(4, dtype=torch.float64)
    torch.testing.assert_close((i.to("emu") / f.to("emu")).cpu(), i / f, rtol=0, atol=0)
    torch.testing.assert_close((i.to("emu") * 2).cpu(), i * 2, rtol=0, atol=0)


def test_cpu_errors_come_through_unchanged_and_nothing_changes():
    a, b = torch.rand(3).to("emu"), torch.rand(4).to("emu")
    before = a.cpu()
    with pytest.raises(RuntimeError) as emu_error:
        a.add_(b)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.rand(3).add_(torch.rand(4))
    assert str(emu_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError, match="alpha"):
        torch.add(torch.arange(3).to("emu"), torch.arange(3).to("emu"), alpha=0.5)
    torch.testing.assert_close(a.cpu(), before, rtol=0, atol=0)
    torch.testing.assert_close((a + a).cpu(), before * 2, rtol=0, atol=0)


def test_a_kernels_exception_reaches_the_caller_as_the_same_object():
    class Marker(Exception):
        pass
    raised = Marker("from the kernel")

    def failing(*args, **kwargs):
        raise raised
    a = torch.rand(4).to("emu")
    with kernel_replaced("mul.Tensor", failing):
        with pytest.raises(Marker) as caught:
            a * a
    assert caught.value is raised
    torch.testing.assert_close((a * a).cpu(), a.cpu() * a.cpu(), rtol=0, atol=0)


def test_a_kernel_returning_no_tensor_is_an_error_naming_what_it_returned():
    a = torch.rand(4).to("emu")
    with kernel_replaced("div.Tensor", lambda *args, **kwargs: 3):
        with pytest.raises(RuntimeError, match="returned int where its schema returns a Tensor"):
            a / a
    with kernel_replaced("div_.Tensor", lambda *args, **kwargs: None):
        with pytest.raises(RuntimeError, match="returned NoneType"):
            a.div_(a)
    torch.testing.assert_close((a / a).cpu(), torch.ones(4), rtol=0, atol=0)


def test_autograd_a_dispatch_mode_and_compile_see_the_ops():
    x = torch.rand(5, dtype=torch.float64, requires_grad=True)
    y = torch.rand(5, dtype=torch.float64, requires_grad=True)
    ex, ey = (t.detach().to("emu").requires_grad_() for t in (x, y))
    ((x * y - x / y + 2 * x).sum()).backward()
    ((ex * ey - ex / ey + 2 * ex).sum()).backward()
    torch.testing.assert_close(ex.grad.cpu(), x.grad)
    torch.testing.assert_close(ey.grad.cpu(), y.grad)

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))
    a = torch.rand(3).to("emu")
    with Log() as log:
        b = a.sub(a, alpha=2)
        b.mul_(a)
    assert log.ops == ["aten.sub.Tensor", "aten.mul_.Tensor"]
    torch.testing.assert_close(b.cpu(), (a.cpu() - 2 * a.cpu()) * a.cpu())

    f = torch.compile(lambda p, q: (p + q) * q - p / q, backend="emu")
    p, q = torch.rand(8) + 1, torch.rand(8) + 1
    torch.testing.assert_close(f(p.to("emu"), q.to("emu")).cpu(), (p + q) * q - p / q)
