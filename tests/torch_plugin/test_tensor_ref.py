"""Operand descriptors built in C++ (csrc/tensor_ref.cpp), the eager hot path of every op (issue 22).

- ``device_ref`` (the C++ core's ``_tensor_ref``) builds the same TensorRef as the Python
  definition it replaces (``_device_ref_py``), for every layout a kernel meets: contiguous,
  strided, offset, expanded, 0-dim, empty, each storable dtype, explicit shape and strides,
  and a CPU tensor (device -1); an unknown dtype raises the same KeyError, a tensor without
  storage the same RuntimeError, and a failed call keeps no reference to its arguments.
- ``binary_refs`` answers the binary ops' common case only: both descriptors for two emu tensors
  of one floating dtype, shape and device with elements (in place: a contiguous and sharing no
  storage with b), None for everything else, so the Python paths still decide those; the ops
  that reach both paths stay equal to CPU.
- A launch decoded once runs the kernel bound to its operands (``Kernel.bind``) and gives the
  same values as the unbound kernel.
"""
from __future__ import annotations

import pytest
import torch

import torch_plugin  # noqa: F401
from torch_plugin._dtypes import STORABLE
from torch_plugin.ops._common import _device_ref_py, binary_refs, device_ref

IN_PLACE, NO_REDUCED_0DIM = 1, 2


def layouts():
    base = torch.arange(48, dtype=torch.float32).reshape(4, 12).to("emu")
    yield "contiguous", base
    yield "transposed", base.t()
    yield "strided", base[:, ::3]
    yield "offset", base[1:, 2:]
    yield "expanded", torch.ones(3, 1, device="emu").expand(3, 5)
    yield "0-dim", base[1, 1]
    yield "empty", base[:0]


@pytest.mark.parametrize("name,t", list(layouts()), ids=[n for n, _ in layouts()])
def test_device_ref_matches_the_python_definition(name, t):
    ref = device_ref(t)
    assert ref == _device_ref_py(t)
    assert type(ref) is type(_device_ref_py(t))
    assert ref.host is False and ref.device == t.get_device() and ref.address == t.data_ptr()
    assert ref.shape == tuple(t.shape) and ref.strides == t.stride()
    assert device_ref(t, (2, 2), (1, 0)) == _device_ref_py(t, (2, 2), (1, 0))
    assert device_ref(t, None, (7,)).strides == (7,) and device_ref(t, None, (7,)).shape == tuple(t.shape)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", sorted(STORABLE, key=str), ids=str)
def test_device_ref_of_each_storable_dtype(dtype):
    t = torch.zeros(3, dtype=dtype, device="emu")
    assert device_ref(t) == _device_ref_py(t)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_device_ref_of_a_cpu_tensor_and_of_an_unknown_dtype():
    cpu = torch.ones(2, 3)
    assert device_ref(cpu) == _device_ref_py(cpu) and device_ref(cpu).device == -1
    quantized = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)
    with pytest.raises(KeyError) as python_error:
        _device_ref_py(quantized)
    with pytest.raises(KeyError) as core_error:
        device_ref(quantized)
    assert core_error.value.args == python_error.value.args
    with pytest.raises(TypeError, match="device_ref"):
        device_ref("not a tensor")


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_device_ref_of_a_tensor_without_storage_raises_as_python_does_and_leaks_nothing():
    import sys
    sparse = torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,))
    shape, strides = (7, 8), (8, 1)
    before = sys.getrefcount(shape), sys.getrefcount(strides)
    for build in (device_ref, _device_ref_py):
        with pytest.raises(RuntimeError, match="doesn't have storage"):
            build(sparse, shape, strides)
    assert (sys.getrefcount(shape), sys.getrefcount(strides)) == before


def test_binary_refs_answers_the_common_case():
    a, b = torch.rand(4, 5, device="emu"), torch.rand(4, 5, device="emu")
    for flags in (0, IN_PLACE, NO_REDUCED_0DIM, IN_PLACE | NO_REDUCED_0DIM):
        assert binary_refs(a, b, flags) == (_device_ref_py(a), _device_ref_py(b))
    # functional: any layout of a; in place a must be contiguous
    assert binary_refs(a.t(), b.t(), 0) == (_device_ref_py(a.t()), _device_ref_py(b.t()))
    assert binary_refs(a.t(), b.t(), IN_PLACE) is None
    h, h0 = torch.rand(3, device="emu", dtype=torch.float16), torch.tensor(2.0, device="emu", dtype=torch.float16)
    assert binary_refs(h0, h0.clone(), 0) is not None
    assert binary_refs(h0, h0.clone(), NO_REDUCED_0DIM) is None  # mul/div's reduced-precision scalar rule
    assert binary_refs(h, h.clone(), NO_REDUCED_0DIM) is not None


@pytest.mark.parametrize("case", ["dtypes", "integer", "shapes", "empty", "cpu", "scalar", "alias", "overlap"])
def test_binary_refs_leaves_every_other_case_to_python(case):
    a = torch.rand(4, 5, device="emu")
    b = {"dtypes": lambda: torch.rand(4, 5, device="emu", dtype=torch.float64),
         "shapes": lambda: torch.rand(1, 5, device="emu"),
         "cpu": lambda: torch.rand(4, 5),
         "scalar": lambda: 2.0,
         "alias": lambda: a.view(4, 5),
         "overlap": lambda: a.view(20)[:20].view(4, 5)}.get(case, lambda: torch.rand(4, 5, device="emu"))()
    if case == "integer":
        a, b = a.to(torch.int32), b.to(torch.int32)
    if case == "empty":
        a, b = a[:0], b[:0]
    flags = IN_PLACE if case in ("alias", "overlap") else 0
    assert binary_refs(a, b, flags) is None
    if case in ("alias", "overlap"):
        assert binary_refs(a, b, 0) is not None  # functional: no overlap possible with a new output


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_binary_ops_on_both_paths_match_cpu(op, dtype):
    g = torch.Generator().manual_seed(0)
    a_cpu = torch.rand(6, 7, generator=g).add(0.5).to(dtype)
    b_cpu = torch.rand(6, 7, generator=g).add(0.5).to(dtype)
    a, b = a_cpu.to("emu"), b_cpu.to("emu")
    fn = getattr(torch, op)
    torch.testing.assert_close(fn(a, b).cpu(), fn(a_cpu, b_cpu), rtol=0, atol=0)   # the C++-decided case
    torch.testing.assert_close(fn(a.t(), b.t()).cpu(), fn(a_cpu.t(), b_cpu.t()), rtol=0, atol=0)
    x, x_cpu = a.clone(), a_cpu.clone()
    getattr(x, op + "_")(b)
    getattr(x_cpu, op + "_")(b_cpu)
    torch.testing.assert_close(x.cpu(), x_cpu, rtol=0, atol=0)
    y, y_cpu = a.clone(), a_cpu.clone()   # in place with b a view of the same storage (Python decides)
    getattr(y, op + "_")(y.flip(0))
    getattr(y_cpu, op + "_")(y_cpu.flip(0).clone())
    torch.testing.assert_close(y.cpu(), y_cpu, rtol=0, atol=0)


def test_repeated_launch_runs_the_bound_kernel_with_equal_values(monkeypatch):
    from emulator.kernels.library import KERNELS
    run = KERNELS["binary"].run
    bound = []

    def spy(*operands):
        bound.append(operands)
        return original(*operands)
    original = run.bind
    monkeypatch.setattr(run, "bind", spy)
    a_cpu, b_cpu = torch.rand(37), torch.rand(37)   # a size no other test launches: decoded here
    a, b = a_cpu.to("emu"), b_cpu.to("emu")
    for _ in range(3):   # decoded on the first launch, then the bound kernel runs
        a.add_(b, alpha=0.5)
        a_cpu.add_(b_cpu, alpha=0.5)
        a.relu_()
        a_cpu.relu_()
        a.mul_(-1.5)
        a_cpu.mul_(-1.5)
    torch.testing.assert_close(a.cpu(), a_cpu, rtol=0, atol=0)
    # add_ and mul_ (its immediate binds the unbound kernel), each decoded at most once (an earlier
    # test may have left one decoded): bound, not decoded again on every launch
    assert 1 <= len(bound) <= 2
