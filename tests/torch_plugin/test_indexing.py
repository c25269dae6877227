"""Indexing and data movement on emu against CPU (torch_plugin/ops/indexing.py, emulator/kernels/indexing.pyx).

Stated tolerances (torch.testing.assert_close):
- moves (cat, index_select, gather, x[idx], scatter/index_copy/index_fill/masked_fill/index_put
  without accumulation, masked_scatter, nonzero, masked_select, flip, roll, tril/triu, padding,
  sort/topk values and indices, where): exact (rtol=atol=0) for every dtype;
- integer and bool accumulation (scatter_add, scatter_reduce, index_add, index_put accumulate):
  exact (wrapping like CPU);
- floating accumulation: the device adds one contribution at a time and rounds to the dtype after
  each (CPU's serial kernels); CPU sometimes takes another order or accumulates float16/bfloat16
  in float32 and rounds once (its expanded-index paths). Tolerance: float64 rtol=atol=1e-12,
  float32 rtol=atol=1e-5, float16 / bfloat16 atol = 3 * eps(dtype) * (sum of |contributions|),
  rtol=0 (a rounding per step, at most three steps here);
- autograd backward of gather/index_select/embedding/cat/x[idx]/where/padding, float32:
  rtol=atol=1e-5.
Every test checks the op ran natively (torch.emu.op_stats, no host fallback).
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401
from plugin_testing import DTYPES, EXACT, check_operation_scope_fault, make, same

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INDEX_DTYPES = [torch.int64, torch.int32]


def emu(t):
    return t.to("emu") if isinstance(t, torch.Tensor) else t


def cpu(t):
    if isinstance(t, (tuple, list)):
        return type(t)(cpu(x) for x in t)
    return t.cpu() if isinstance(t, torch.Tensor) else t


def acc_tol(dtype, magnitude: float):
    """Tolerance of a floating accumulation (see the module docstring)."""
    if dtype == torch.float64:
        return dict(rtol=1e-12, atol=1e-12)
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5)
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=0, atol=3 * torch.finfo(dtype).eps * magnitude)
    return EXACT


@pytest.fixture
def native_only():
    torch.emu.reset_op_stats()
    torch.emu.set_host_fallback(False)
    yield
    torch.emu.set_host_fallback(True)
    try:
        torch.emu.synchronize()
    except torch.AcceleratorError as err:  # keep one test's fault out of the next ones
        torch.emu.recover(reason="test teardown")
        pytest.fail(f"unexpected device fault: {err}")
    fell = torch.emu.op_stats()["host_fallback"]
    assert not fell, f"fell back to the host: {fell}"


IDX = torch.tensor([[0, 2, 1], [1, 0, 2]])
MASK = torch.tensor([True, False, True])

# name -> (fn(x, D) with D moving an auxiliary tensor to the tested device, accumulates?, native ops)
OPS = {
    "index_select": (lambda x, D: x.index_select(1, D(torch.tensor([2, 0, 2]))), False, ["aten::index_select"]),
    "index_select_neg_dim": (lambda x, D: x.index_select(-2, D(torch.tensor([1]))), False, ["aten::index_select"]),
    "gather": (lambda x, D: x.gather(1, D(IDX)), False, ["aten::gather"]),
    "gather_int32": (lambda x, D: x.gather(1, D(IDX.int())), False, ["aten::gather"]),
    "scatter_add_int32": (lambda x, D: x.scatter_add(1, D(IDX.int()), x), True, ["aten::scatter_add"]),
    "index_select_int32": (lambda x, D: x.index_select(1, D(torch.tensor([2, 0], dtype=torch.int32))), False,
                           ["aten::index_select"]),
    "gather_smaller": (lambda x, D: x.gather(0, D(IDX[:1, :2] // 2)), False, ["aten::gather"]),
    "scatter": (lambda x, D: x.scatter(1, D(IDX[:, :1]), x[:, 2:3]), False, ["aten::scatter.src"]),
    "scatter_value": (lambda x, D: x.scatter(1, D(IDX[:, :2]), 1), False, ["aten::scatter.value"]),
    "scatter_add": (lambda x, D: x.scatter_add(1, D(IDX.repeat(1, 2)), x.repeat(1, 2)), True,
                    ["aten::scatter_add"]),
    "scatter_multiply": (lambda x, D: x.scatter(0, D(IDX[:, ::2] // 2), x, reduce="multiply"), True,
                         ["aten::scatter.reduce"]),
    "scatter_value_add": (lambda x, D: x.scatter(1, D(IDX), 2, reduce="add"), True, ["aten::scatter.value_reduce"]),
    **{f"scatter_reduce_{r}_{inc}": ((lambda r, inc: lambda x, D: x.scatter_reduce(
        1, D(torch.tensor([[0, 0, 1], [2, 2, 2]])), x, r, include_self=inc))(r, inc), True,
        ["aten::scatter_reduce.two"])
       for r in ["sum", "prod", "mean", "amax", "amin", "max"] for inc in [True, False]},
    "index_add": (lambda x, D: x.index_add(0, D(torch.tensor([1, 1])), x), True, ["aten::index_add"]),
    "index_add_alpha": (lambda x, D: x.index_add(1, D(torch.tensor([2, 0, 2])), x, alpha=2), True,
                        ["aten::index_add"]),
    "index_copy": (lambda x, D: x.index_copy(1, D(torch.tensor([2, 0])), x[:, :2]), False, ["aten::index_copy"]),
    "index_fill": (lambda x, D: x.index_fill(1, D(torch.tensor([2, -3])), 1), False,
                   ["aten::index_fill_.int_Scalar"]),
    "masked_fill": (lambda x, D: x.masked_fill(D(MASK), 1), False, ["aten::masked_fill_.Scalar"]),
    "masked_fill_tensor": (lambda x, D: x.masked_fill(D(MASK), torch.tensor(0)), False,
                           ["aten::masked_fill_.Tensor"]),
    "index": (lambda x, D: x[D(torch.tensor([1, 0, -1]))], False, ["aten::index.Tensor"]),
    "index_cols": (lambda x, D: x[:, D(torch.tensor([[2], [0]]))], False, ["aten::index.Tensor"]),
    "index_pairs": (lambda x, D: x[D(torch.tensor([1, 0])), D(torch.tensor([[2], [1]]))], False,
                    ["aten::index.Tensor"]),
    "index_mask": (lambda x, D: x[D(x != 0)], False, ["aten::index.Tensor"]),
    "index_put": (lambda x, D: x.index_put((D(torch.tensor([1, 0])),), x[:1]), False, ["aten::_index_put_impl_"]),
    "index_put_acc": (lambda x, D: x.index_put((D(torch.tensor([1, 1, 0])), D(torch.tensor([2, 2, 0]))),
                                               x[0], accumulate=True), True, ["aten::_index_put_impl_"]),
    "masked_scatter": (lambda x, D: x.masked_scatter(D(MASK), x.flip(1)), False, ["aten::masked_scatter_"]),
    "nonzero": (lambda x, D: x.nonzero(), False, ["aten::nonzero"]),
    "masked_select": (lambda x, D: x.masked_select(D(MASK)), False, ["aten::masked_select"]),
    "cat": (lambda x, D: torch.cat([x, x[:1]], 0), False, ["aten::cat"]),
    "cat_dim1": (lambda x, D: torch.cat([x, x[:, 1:], x], -1), False, ["aten::cat"]),
    "flip": (lambda x, D: x.flip(1), False, ["aten::flip"]),
    "flip_both": (lambda x, D: x.flip(0, -1), False, ["aten::flip"]),
    "roll": (lambda x, D: x.roll(1, 1), False, ["aten::roll"]),
    "roll_two": (lambda x, D: x.roll((-1, 5), (0, 1)), False, ["aten::roll"]),
    "roll_flat": (lambda x, D: x.roll(4), False, ["aten::roll"]),
    "tril": (lambda x, D: x.tril(), False, ["aten::tril"]),
    "triu": (lambda x, D: x.triu(1), False, ["aten::triu"]),
    "reflection_pad1d": (lambda x, D: F.pad(x, (2, 1), mode="reflect"), False, ["aten::reflection_pad1d"]),
    "reflection_pad2d": (lambda x, D: F.pad(x.unsqueeze(0), (1, 1, 1, 0), mode="reflect"), False,
                         ["aten::reflection_pad2d"]),
    "replication_pad1d": (lambda x, D: F.pad(x.unsqueeze(0), (1, 3), mode="replicate"), False,
                          ["aten::replication_pad1d"]),
    "replication_pad2d": (lambda x, D: F.pad(x.unsqueeze(0), (0, 2, 2, 1), mode="replicate"), False,
                          ["aten::replication_pad2d"]),
    "constant_pad": (lambda x, D: F.pad(x, (1, 2, -1, 1), value=1), False, []),
    "sort": (lambda x, D: x.sort(dim=1, stable=True), False, ["aten::sort.stable"]),
    "sort_desc": (lambda x, D: x.sort(dim=0, descending=True, stable=True), False, ["aten::sort.stable"]),
    "argsort": (lambda x, D: torch.argsort(x, dim=1, stable=True), False, ["aten::sort.stable"]),
    "topk": (lambda x, D: x.topk(2, 1), False, ["aten::topk"]),
    "topk_smallest": (lambda x, D: x.topk(1, 0, largest=False), False, ["aten::topk"]),
    "where": (lambda x, D: torch.where(D(MASK), x, x.flip(0)), False, ["aten::where.self"]),
    "where_scalar": (lambda x, D: torch.where(D(MASK), x, 0), False, ["aten::where.self"]),
}


def _run(fn, x, D):
    try:
        return fn(x, D), None
    except Exception as err:  # noqa: BLE001 - the test compares the exception with CPU's
        return None, err


def _layouts(dtype):
    base = make(dtype, (2, 3), seed=3)
    transposed = make(dtype, (3, 2), seed=3).t()
    sliced = make(dtype, (4, 7), seed=3)[::2, 1:6:2]
    return {"contiguous": base, "transposed": transposed, "sliced": sliced}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_cpu_for_every_dtype_and_layout(name, native_only):
    fn, accumulates, ops = OPS[name]
    ran = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scatter(reduce=) deprecation, raised by both
        for dtype in DTYPES:
            for layout, x in _layouts(dtype).items():
                expected, cpu_err = _run(fn, x, lambda t: t)
                got, emu_err = _run(fn, emu(x), emu)
                if cpu_err is not None:
                    # CPU rejects it: emu must reject it with the same exception type
                    assert emu_err is not None, (name, dtype, layout, cpu_err)
                    assert type(emu_err) is type(cpu_err), (name, dtype, layout, cpu_err, emu_err)
                    continue
                assert emu_err is None, (name, dtype, layout, emu_err)
                ran += 1
                tol = acc_tol(dtype, 3 * float(x.double().abs().max()) ** (2 if "prod" in name or "multiply" in name
                                                                            else 1)) if accumulates else EXACT
                same(got, expected, **tol)
    assert ran >= 3 * 4  # the case is valid on CPU for most dtypes: it tests something
    for op in ops:
        assert torch.emu.op_stats()["native"].get(op, 0) > 0, (op, torch.emu.op_stats()["native"])


@pytest.mark.parametrize("name", ["index_select", "gather", "scatter", "scatter_add", "index_add", "index_copy",
                                  "index", "index_put", "masked_select", "masked_scatter", "nonzero", "cat",
                                  "flip", "roll", "tril", "sort", "topk", "where", "reflection_pad2d"])
def test_op_on_empty_tensors(name, native_only):
    fn = OPS[name][0]
    for shape in [(0, 3), (2, 0)]:
        x = make(torch.float32, shape)
        expected, cpu_err = _run(fn, x, lambda t: t)
        got, emu_err = _run(fn, emu(x), emu)
        if cpu_err is not None:
            assert emu_err is not None and type(emu_err) is type(cpu_err), (shape, cpu_err, emu_err)
        else:
            assert emu_err is None, (shape, emu_err)
            same(got, expected)


# ---------------------------------------------------------------------------------------------
# cat

def test_cat_promotes_skips_legacy_empty_and_expanded(native_only):
    a = make(torch.int32, (2, 3))
    b = make(torch.float16, (1, 3), seed=1)
    c = torch.tensor([1.5]).expand(4, 3)  # stride 0
    legacy = torch.empty(0)
    expected = torch.cat([a, legacy, b, c])
    same(torch.cat([emu(a), emu(legacy), emu(b), emu(c)]), expected)
    assert expected.dtype == torch.float32
    same(torch.cat([emu(legacy), emu(legacy)]), torch.cat([legacy, legacy]))
    same(torch.cat([emu(torch.ones(2, 0)), emu(torch.ones(2, 3))], 1), torch.cat([torch.ones(2, 0), torch.ones(2, 3)], 1))
    # channels_last inputs keep their format, as on CPU
    x = make(torch.float32, (2, 3, 4, 5)).to(memory_format=torch.channels_last)
    got = torch.cat([emu(x), emu(x)], 1)
    assert got.stride() == torch.cat([x, x], 1).stride()
    same(got, torch.cat([x, x], 1))


def test_cat_errors_like_cpu(native_only):
    a, b = torch.ones(2, 3), torch.ones(2, 4)
    for args, exc in [(([a, b], 0), RuntimeError), (([a, torch.ones(2, 3, 1)], 0), RuntimeError),
                      (([torch.tensor(1.0)], 0), RuntimeError), (([a], 2), IndexError), (([], 0), ValueError)]:
        with pytest.raises(exc):
            torch.cat(*args)
        with pytest.raises(exc):
            torch.cat([emu(t) for t in args[0]], args[1])


def test_cat_out_contract(native_only):
    a, b = make(torch.float32, (2, 3)), make(torch.float32, (1, 3), seed=1)
    expected = torch.cat([a, b])
    empty = emu(torch.empty(0))
    torch.cat([emu(a), emu(b)], out=empty)  # zero-element out: resized
    same(empty, expected)
    strided = emu(torch.zeros(3, 3).t()).t()  # correctly shaped, non-contiguous: keeps its strides
    before = strided.stride()
    torch.cat([emu(a), emu(b)], out=strided)
    assert strided.stride() == before
    same(strided, expected)
    widened = emu(torch.zeros(3, 3, dtype=torch.float64))  # a safe cast is accepted
    torch.cat([emu(a), emu(b)], out=widened)
    same(widened, expected.double())
    narrow = emu(torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="can't be cast"):  # CPU's error type for cat's unsafe cast
        torch.cat([a, b], out=torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="can't be cast"):
        torch.cat([emu(a), emu(b)], out=narrow)
    assert (narrow.cpu() == 0).all()
    x = emu(a)
    with pytest.raises(RuntimeError, match="overlap"):
        torch.cat([x, x], out=x)
    storage = emu(torch.zeros(4, 3))  # disjoint parts of one storage are fine, as on CPU
    torch.cat([storage[:1], storage[1:2] + 1], out=storage[2:])
    same(storage, torch.tensor([[0.0] * 3, [0.0] * 3, [0.0] * 3, [1.0] * 3]))


# ---------------------------------------------------------------------------------------------
# out= variants of the gather / scatter family

OUT_CASES = {
    "index_select": (lambda x, out=None: torch.index_select(x, 1, emu_or(x, torch.tensor([2, 0])), out=out)),
    "gather": (lambda x, out=None: torch.gather(x, 1, emu_or(x, IDX), out=out)),
    "scatter": (lambda x, out=None: torch.scatter(x, 1, emu_or(x, IDX[:, :1]), x[:, :1], out=out)),
    "scatter_add": (lambda x, out=None: torch.scatter_add(x, 1, emu_or(x, IDX), x, out=out)),
    "scatter_reduce": (lambda x, out=None: torch.scatter_reduce(x, 1, emu_or(x, IDX), x, "amax", out=out)),
    "index_add": (lambda x, out=None: torch.index_add(x, 0, emu_or(x, torch.tensor([1, 1])), x, out=out)),
    "index_copy": (lambda x, out=None: torch.index_copy(x, 0, emu_or(x, torch.tensor([1, 0])), x, out=out)),
    "where": (lambda x, out=None: torch.where(emu_or(x, MASK), x, x, out=out)),
    "tril": (lambda x, out=None: torch.tril(x, out=out)),
    "triu": (lambda x, out=None: torch.triu(x, -1, out=out)),
    "masked_select": (lambda x, out=None: torch.masked_select(x, emu_or(x, torch.ones(2, 3, dtype=torch.bool)),
                                                              out=out)),
}


def emu_or(x, t):
    return t.to(x.device)


@pytest.mark.parametrize("name", sorted(OUT_CASES))
def test_out_variants(name, native_only):
    fn = OUT_CASES[name]
    x = make(torch.float32, (2, 3))
    expected = fn(x)
    # zero-element out: resized
    out = emu(torch.empty(0))
    assert fn(emu(x), out=out) is out
    same(out, expected)
    # correctly shaped non-contiguous out keeps its strides
    out = emu(torch.zeros(tuple(reversed(expected.shape)))).t() if expected.dim() == 2 else emu(
        torch.zeros(expected.shape[0] * 2))[::2]
    strides = out.stride()
    fn(emu(x), out=out)
    assert out.stride() == strides
    same(out, expected)
    # wrong dtype rejected, out untouched
    bad = emu(torch.zeros(expected.shape, dtype=torch.int32 if name != "where" else torch.bool))
    with pytest.raises(RuntimeError):
        fn(emu(x), out=bad)
    assert not bad.cpu().any()


def test_sort_topk_nonzero_index_out(native_only):
    x = make(torch.float32, (3, 4))
    v, i = emu(torch.empty(0)), emu(torch.empty(0, dtype=torch.int64))
    torch.sort(emu(x), dim=1, stable=True, out=(v, i))
    same((v, i), torch.sort(x, dim=1, stable=True))
    v, i = emu(torch.empty(0)), emu(torch.empty(0, dtype=torch.int64))
    torch.topk(emu(x), 2, 0, out=(v, i))
    same((v, i), torch.topk(x, 2, 0))
    with pytest.raises(RuntimeError):
        torch.sort(emu(x), dim=1, stable=True, out=(emu(torch.empty(0)), emu(torch.empty(0))))
    n = emu(torch.empty(0, dtype=torch.int64))
    torch.nonzero(emu(x > 0), out=n)
    same(n, torch.nonzero(x > 0))
    with pytest.raises(RuntimeError):
        torch.nonzero(emu(x), out=emu(torch.empty(0)))
    out = emu(torch.empty(0))
    torch.ops.aten.index.Tensor_out(emu(x), [emu(torch.tensor([2, 0]))], out=out)
    same(out, x[torch.tensor([2, 0])])


# ---------------------------------------------------------------------------------------------
# in-place variants: visible through every alias

INPLACE = {
    "scatter_": lambda x, D: x.scatter_(0, D(torch.tensor([[1, 0, 2]])), 7),
    "scatter_add_": lambda x, D: x.scatter_add_(1, D(torch.tensor([[0, 0], [1, 1], [2, 0]])), x[:, :2].clone()),
    "scatter_reduce_": lambda x, D: x.scatter_reduce_(0, D(torch.tensor([[2, 2, 0]])), x[:1].clone(), "prod"),
    "index_add_": lambda x, D: x.index_add_(1, D(torch.tensor([0, 0])), x[:, 1:].clone()),
    "index_copy_": lambda x, D: x.index_copy_(0, D(torch.tensor([2])), x[:1].clone()),
    "index_fill_": lambda x, D: x.index_fill_(0, D(torch.tensor([-1, 0])), -3),
    "masked_fill_": lambda x, D: x.masked_fill_(D(torch.tensor([[True], [False], [True]])), 5),
    "index_put_": lambda x, D: x.index_put_((D(torch.tensor([0, 2])), D(torch.tensor([1]))), D(torch.tensor(9.0))),
    "index_put_acc_": lambda x, D: x.index_put_((D(torch.tensor([0, 0])),), x[1].clone(), accumulate=True),
    "setitem_mask": lambda x, D: x.__setitem__(D(x > 0), 0.0),
    "masked_scatter_": lambda x, D: x.masked_scatter_(D(torch.tensor([False, True, True])), x.t().clone()),
    "tril_": lambda x, D: x.tril_(-1),
    "triu_": lambda x, D: x.triu_(),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_on_a_transposed_view_is_visible_in_the_base(name, native_only):
    fn = INPLACE[name]
    base_cpu = make(torch.float32, (3, 3), seed=5)
    base_emu = emu(base_cpu)
    view_cpu, view_emu = base_cpu.t(), base_emu.t()
    keep = emu(torch.arange(4.0))
    fn(view_cpu, lambda t: t)
    result = fn(view_emu, emu)
    if result is not None:
        assert result.data_ptr() == view_emu.data_ptr()
    same(base_emu, base_cpu, **acc_tol(torch.float32, 1))
    same(view_emu, view_cpu, **acc_tol(torch.float32, 1))
    same(keep, torch.arange(4.0))


# ---------------------------------------------------------------------------------------------
# advanced indexing

def test_advanced_indexing_layouts(native_only):
    x = make(torch.float32, (4, 5, 6))
    i, j = torch.tensor([[0, 3], [2, 1]]), torch.tensor([4, 0])
    for index_dtype in INDEX_DTYPES:
        ii, jj = i.to(index_dtype), j.to(index_dtype)
        cases = [
            lambda X, D: X[D(ii)],
            lambda X, D: X[:, D(jj)],
            lambda X, D: X[D(ii), D(jj)],             # broadcast indices, adjacent: in place
            lambda X, D: X[D(ii), :, D(jj)],          # not adjacent: the indexed dims go first
            lambda X, D: X[:, D(jj), D(jj)],
            lambda X, D: X[..., D(jj)],
            lambda X, D: X[1:, D(jj)][:, :, ::2],
            lambda X, D: X.transpose(0, 2)[D(jj), 1],
            lambda X, D: X[D(torch.tensor([True, False, True, True]))],
            lambda X, D: X[D(x[:, :, 0] > 0)],
            lambda X, D: X[D(torch.tensor([], dtype=torch.int64))],
        ]
        for k, case in enumerate(cases):
            same(case(emu(x), emu), case(x, lambda t: t))
    same(emu(x)[torch.tensor([1, 2])], x[torch.tensor([1, 2])])  # CPU indices for an emu tensor: allowed


def test_index_put_accumulate_with_duplicates(native_only):
    g = torch.Generator().manual_seed(0)
    for dtype in [torch.float32, torch.float64, torch.int64, torch.int8, torch.float16]:
        x = make(dtype, (5, 4))
        rows = torch.randint(-5, 5, (30,), generator=g)
        cols = torch.randint(0, 4, (30,), generator=g)
        values = make(dtype, (30,), seed=2)
        expected = x.clone().index_put_((rows, cols), values, accumulate=True)
        got = emu(x).index_put_((emu(rows), emu(cols)), emu(values), accumulate=True)
        mag = float(x.double().abs().max() + values.double().abs().sum()) if dtype.is_floating_point else 0
        same(got, expected, **acc_tol(dtype, mag))


def test_scatter_reduce_grid_with_duplicates(native_only):
    g = torch.Generator().manual_seed(1)
    for dtype in [torch.float32, torch.float64, torch.int32, torch.uint8, torch.bfloat16]:
        for reduce in ["sum", "prod", "mean", "amax", "amin"]:
            for include_self in [True, False]:
                x = make(dtype, (4, 6))
                src = make(dtype, (5, 6), seed=7)
                if reduce == "prod" and dtype.is_floating_point:
                    src = src / 8 + 1  # keep products in range
                index = torch.randint(0, 4, (5, 6), generator=g)
                expected = x.scatter_reduce(0, index, src, reduce, include_self=include_self)
                got = emu(x).scatter_reduce(0, emu(index), emu(src), reduce, include_self=include_self)
                mag = float(x.double().abs().max() + src.double().abs().sum(0).max())
                if reduce == "prod":
                    mag = float(expected.double().abs().max()) * 6
                same(got, expected, **acc_tol(dtype, mag))


def test_nan_propagation_in_amax_amin_and_sort(native_only):
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 3.0], [nan, 0.0, -1.0]])
    index = torch.tensor([[0, 0, 0], [1, 1, 1]])
    for reduce in ["amax", "amin"]:
        same(emu(torch.zeros(2, 3)).scatter_reduce(1, emu(index), emu(x), reduce),
             torch.zeros(2, 3).scatter_reduce(1, index, x, reduce))
    v = torch.tensor([3.0, nan, -0.0, 0.0, 1.0, nan, -float("inf")])
    for descending in [False, True]:
        same(emu(v).sort(descending=descending, stable=True), v.sort(descending=descending, stable=True))
    same(emu(v).topk(3), v.topk(3))


def test_sort_and_topk_grid(native_only):
    g = torch.Generator().manual_seed(3)
    for dtype in DTYPES:
        x = make(dtype, (3, 40, 5))
        x = x[:, :, 1:] if dtype != torch.bool else x
        ties = torch.randint(0, 4, (6, 33), generator=g).to(dtype)  # many ties: stability matters
        for t, dim in [(x, 1), (x, -1), (x, 0), (ties, 1), (ties.t(), 0)]:
            for descending in [False, True]:
                same(emu(t).sort(dim=dim, descending=descending, stable=True),
                     t.sort(dim=dim, descending=descending, stable=True))
            if dtype != torch.bool:
                values, indices = emu(t).topk(3, dim)
                ref_values, _ = t.topk(3, dim)
                same(values, ref_values)  # CPU's tie order for topk is unspecified: values, and
                same(cpu(t).gather(dim % t.dim(), cpu(indices)), ref_values)  # indices that find them
    same(emu(torch.tensor(2.5)).sort(), torch.tensor(2.5).sort())


# ---------------------------------------------------------------------------------------------
# nonzero, masked_select (one synchronisation), where

def test_nonzero_masked_select_where_grid(native_only):
    for dtype in DTYPES:
        x = make(dtype, (3, 1, 4))
        if not dtype.is_floating_point and dtype != torch.bool:
            x = x % 3
        same(emu(x).nonzero(), x.nonzero())
        same(torch.nonzero(emu(x), as_tuple=True), torch.nonzero(x, as_tuple=True))
        same(emu(x[:, :, ::2]).nonzero(), x[:, :, ::2].nonzero())
        same(emu(torch.tensor(3, dtype=dtype)).nonzero(), torch.tensor(3, dtype=dtype).nonzero())
        mask = make(torch.bool, (5, 4), seed=1)
        same(emu(x).masked_select(emu(mask)), x.masked_select(mask))  # broadcast to (3, 5, 4)
        for other_dtype in [torch.float32, torch.int64, torch.bool, torch.float16]:
            y = make(other_dtype, (5, 1), seed=2)
            same(torch.where(emu(mask), emu(x), emu(y)), torch.where(mask, x, y))
            same(torch.where(emu(mask), emu(x), 2.5), torch.where(mask, x, 2.5))
            same(torch.where(emu(mask), 7, emu(y)), torch.where(mask, 7, y))


def test_where_errors_and_out(native_only):
    x = make(torch.float32, (2, 3))
    with pytest.raises(RuntimeError, match="boolean"):
        torch.where(emu(x), emu(x), emu(x))
    # CPU's where builds its iterator without a cast into out: even a wider out is refused, and
    # the out keeps its values
    with pytest.raises(RuntimeError):
        torch.where(MASK, x, x.flip(0), out=torch.zeros(2, 3, dtype=torch.float64))
    out = emu(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        torch.where(emu(MASK), emu(x), emu(x.flip(0)), out=out)
    assert (out.cpu() == 0).all()
    out = emu(torch.zeros(2, 3))
    torch.where(emu(MASK), emu(x), emu(x.flip(0)), out=out)
    same(out, torch.where(MASK, x, x.flip(0)))
    with pytest.raises(RuntimeError):
        torch.where(emu(MASK), emu(x), emu(x), out=emu(torch.zeros(2, 3, dtype=torch.int32)))


def test_masked_fill_errors_and_value_checks(native_only):
    x = make(torch.int8, (2, 3))
    e = emu(x)
    with pytest.raises(RuntimeError):
        x.masked_fill(MASK.to(torch.uint8), 1)
    with pytest.raises(RuntimeError):
        e.masked_fill(emu(MASK.to(torch.uint8)), 1)
    with pytest.raises(RuntimeError):
        x.masked_fill(MASK, 300)
    with pytest.raises(RuntimeError):
        e.masked_fill(emu(MASK), 300)
    with pytest.raises(RuntimeError, match="0-dimensional"):
        e.masked_fill(emu(MASK), emu(torch.tensor([1])))
    same(e, x)
    # a 0-dim emu value is read by the kernel (no synchronisation), cast to self's dtype
    same(e.masked_fill(emu(MASK), emu(torch.tensor(-4.7))), x.masked_fill(MASK, torch.tensor(-4.7)))


def test_masked_scatter_short_source_is_a_kernel_fault_that_writes_nothing(native_only):
    x = make(torch.float32, (2, 3))
    e = emu(x)
    with pytest.raises(RuntimeError):
        x.clone().masked_scatter_(MASK, torch.ones(3))
    e.masked_scatter_(emu(MASK), emu(torch.ones(3)))
    with pytest.raises(torch.AcceleratorError, match="masked_scatter"):
        torch.emu.synchronize()
    # e is the rejected command's output: it says so instead of handing back data the program
    # never got (issue #9); it names the error. No recovery is needed (operation scope, issue 18).
    with pytest.raises(torch.AcceleratorError, match="holds no valid data.*INVALID_ARGUMENT.*masked_scatter"):
        e.cpu()


# ---------------------------------------------------------------------------------------------
# out-of-range indices: checked by the kernel before it writes (an operation-scope INVALID_ARGUMENT;
# it was a sticky KERNEL_FAULT that failed every later op until a reset, issue 18)

FAULTS = [
    ("index_select", lambda x: x.index_select(0, emu(torch.tensor([0, 4]))), "index out of range in self"),
    ("index_select_negative", lambda x: x.index_select(0, emu(torch.tensor([-1]))), "index out of range in self"),
    ("gather", lambda x: x.gather(1, emu(torch.tensor([[5]]))), "index 5 is out of bounds for dimension 1 with size 5"),
    ("index", lambda x: x[emu(torch.tensor([-5]))], "index -5 is out of bounds for dimension 0 with size 4"),
    ("index_put_", lambda x: x.index_put_((emu(torch.tensor([1])), emu(torch.tensor([9]))), emu(torch.tensor(1.0))),
     "index 9 is out of bounds for dimension 1 with size 5"),
    ("scatter_", lambda x: x.scatter_(0, emu(torch.tensor([[1, 7]])), 1.0),
     "index 7 is out of bounds for dimension 0 with size 4"),
    ("scatter_add_", lambda x: x.scatter_add_(1, emu(torch.tensor([[-1]])), x),
     "index -1 is out of bounds for dimension 1 with size 5"),
    ("index_add_", lambda x: x.index_add_(0, emu(torch.tensor([4])), x[:1].clone()), "index out of range in self"),
    ("index_copy_", lambda x: x.index_copy_(0, emu(torch.tensor([4])), x[:1].clone()),
     "index_copy_(): index 4 is out of bounds for dimension 0 with size 4"),
    ("index_fill_", lambda x: x.index_fill_(1, emu(torch.tensor([-6])), 0.0),
     "index -6 is out of bounds for dimension 1 with size 5"),
    ("embedding", lambda x: F.embedding(emu(torch.tensor([4])), x), "index out of range in self"),
]


@pytest.mark.parametrize("name,fn,message", FAULTS, ids=[f[0] for f in FAULTS])
def test_out_of_range_index_is_an_operation_scope_error(name, fn, message, native_only):
    check_operation_scope_fault(name, fn, message)


def test_host_checks_match_cpu_error_types(native_only):
    x = make(torch.float32, (4, 5))
    cases = [
        lambda X, D: X.gather(1, D(torch.tensor([[0]], dtype=torch.int16))),
        lambda X, D: X.gather(1, D(torch.tensor([0]))),
        lambda X, D: X.gather(1, D(torch.zeros(5, 1, dtype=torch.int64))),
        lambda X, D: X.index_select(0, D(torch.tensor([[0]]))),
        lambda X, D: X.index_select(0, D(torch.tensor([0.0]))),
        lambda X, D: X.scatter(0, D(torch.tensor([[0]])), D(torch.ones(1, 1, dtype=torch.float64))),
        lambda X, D: X.scatter(0, D(torch.tensor([[0.0]])), 1.0),
        lambda X, D: X.scatter_reduce(0, D(torch.tensor([[0]])), X, "add"),
        lambda X, D: X.index_add(0, D(torch.tensor([0])), X),
        lambda X, D: X.index_add(0, D(torch.tensor([0])), X[:1].double()),
        lambda X, D: X.index_copy(0, D(torch.tensor([0], dtype=torch.int32)), X[:1]),
        lambda X, D: X.index_fill(0, D(torch.tensor([0], dtype=torch.int32)), 1.0),
        lambda X, D: X[D(torch.tensor([0], dtype=torch.int16))],
        lambda X, D: X[D(torch.tensor([0])), D(torch.tensor([0])), D(torch.tensor([0]))],
        lambda X, D: X[D(torch.tensor([True, False]))],
        lambda X, D: X.index_put_((D(torch.tensor([0])),), D(torch.ones(5, dtype=torch.float64))),
        lambda X, D: X.index_put_((D(torch.tensor([0, 1])),), D(torch.ones(3))),
        lambda X, D: X.masked_scatter(D(torch.ones(4, 5, dtype=torch.uint8)), X),
        lambda X, D: X.masked_select(D(torch.ones(4, 5))),
        lambda X, D: X.flip(0, 0),
        lambda X, D: X.roll((1, 2), (0,)),
        lambda X, D: X[0].tril(),
        lambda X, D: X.topk(6),
        lambda X, D: F.pad(X.unsqueeze(0), (5, 0), mode="reflect"),
    ]
    for k, case in enumerate(cases):
        _, cpu_err = _run(case, x, lambda t: t)
        _, emu_err = _run(case, emu(x), emu)
        assert cpu_err is not None, k
        assert emu_err is not None and isinstance(emu_err, type(cpu_err)), (k, cpu_err, emu_err)
    torch.emu.synchronize()  # nothing was launched that could fault


# ---------------------------------------------------------------------------------------------
# embedding and autograd

@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_forward_and_backward(dtype, native_only):
    weight = make(dtype, (10, 6))
    for index_dtype in INDEX_DTYPES:
        indices = torch.tensor([[1, 2, 1], [9, 0, 1]], dtype=index_dtype)
        for padding_idx in [None, 1]:
            for scale in [False, True]:
                wc = weight.clone().requires_grad_(True)
                we = emu(weight).requires_grad_(True)
                yc = F.embedding(indices, wc, padding_idx=padding_idx, scale_grad_by_freq=scale)
                ye = F.embedding(emu(indices), we, padding_idx=padding_idx, scale_grad_by_freq=scale)
                same(ye, yc)
                g = make(dtype, yc.shape, seed=4)
                yc.backward(g)
                ye.backward(emu(g))
                same(we.grad, wc.grad, **acc_tol(dtype, 3 * float(g.double().abs().max())))
    assert torch.emu.op_stats()["native"].get("aten::embedding_dense_backward", 0) > 0
    assert torch.emu.op_stats()["native"].get("aten::index_select", 0) > 0


def test_autograd_matches_cpu(native_only):
    tol = dict(rtol=1e-5, atol=1e-5)
    x = make(torch.float32, (4, 5))
    index = torch.tensor([[0, 1, 4], [3, 3, 2]])
    cases = {
        "gather": lambda X, D: X.gather(1, D(index)),
        "index_select": lambda X, D: X.index_select(0, D(torch.tensor([3, 0, 3]))),
        "cat": lambda X, D: torch.cat([X, X * 2, X[:1]], 0),
        "index": lambda X, D: X[D(torch.tensor([1, 1, 2])), D(torch.tensor([0, 0, 4]))],
        "mask": lambda X, D: X[D(x > 0)],
        "where": lambda X, D: torch.where(D(x > 0), X, X * 3),
        "flip_roll": lambda X, D: X.flip(1).roll(2, 0),
        "tril": lambda X, D: X.tril(1),
        "sort": lambda X, D: X.sort(dim=1, stable=True)[0],
        "topk": lambda X, D: X.topk(2, 0)[0],
        "scatter": lambda X, D: X.scatter(1, D(torch.tensor([[0], [4], [2], [2]])), X[:, 1:2] * 2),
        "scatter_add": lambda X, D: torch.zeros_like(X).scatter_add(1, D(index.repeat(2, 1)), X[:, :3]),
        "index_add": lambda X, D: X.index_add(0, D(torch.tensor([1, 1])), X[2:]),
        "masked_fill": lambda X, D: X.masked_fill(D(x > 1), 0.0),
        "reflection_pad1d": lambda X, D: F.pad(X.unsqueeze(0), (2, 3), mode="reflect"),
        "reflection_pad2d": lambda X, D: F.pad(X.unsqueeze(0), (2, 3, 1, 2), mode="reflect"),
        "replication_pad1d": lambda X, D: F.pad(X, (2, 3), mode="replicate"),
        "replication_pad2d": lambda X, D: F.pad(X.unsqueeze(0).unsqueeze(0), (4, 3, 1, 6), mode="replicate"),
        "constant_pad": lambda X, D: F.pad(X, (1, 1, -1, 2), value=3.0),
    }
    for name, fn in cases.items():
        xc = x.clone().requires_grad_(True)
        xe = emu(x).requires_grad_(True)
        yc, ye = fn(xc, lambda t: t), fn(xe, emu)
        same(ye.detach(), yc.detach())
        g = make(torch.float32, yc.shape, seed=9)
        yc.backward(g)
        ye.backward(emu(g))
        same(xe.grad, xc.grad, **tol)
    for op in ["aten::reflection_pad1d_backward", "aten::reflection_pad2d_backward",
               "aten::replication_pad1d_backward", "aten::replication_pad2d_backward"]:
        assert torch.emu.op_stats()["native"].get(op, 0) > 0, op


@pytest.mark.parametrize("dtype", FLOATS)
def test_padding_backward_dtypes(dtype, native_only):
    x = make(dtype, (2, 3, 5, 4))
    for mode, pads in [("reflect", (3, 2, 1, 4)), ("replicate", (3, 5, 2, 0))]:
        xc, xe = x.clone().requires_grad_(True), emu(x).requires_grad_(True)
        yc, ye = F.pad(xc, pads, mode=mode), F.pad(xe, pads, mode=mode)
        same(ye.detach(), yc.detach())
        g = make(dtype, yc.shape, seed=1)
        yc.backward(g)
        ye.backward(emu(g))
        same(xe.grad, xc.grad, **acc_tol(dtype, 9 * float(g.double().abs().max())))


def test_composites_reach_native_ops(native_only):
    # one_hot (CompositeImplicitAutograd: zeros + scatter_), repeat, argsort, constant_pad_nd
    labels = torch.tensor([[0, 3], [2, 1]])
    same(F.one_hot(emu(labels), 5), F.one_hot(labels, 5))
    x = make(torch.float32, (2, 3))
    same(emu(x).repeat(2, 1, 3), x.repeat(2, 1, 3))
    same(torch.argsort(emu(x), dim=0, descending=True, stable=True), torch.argsort(x, dim=0, descending=True, stable=True))
    assert torch.emu.op_stats()["native"].get("aten::scatter_.value", 0) > 0
