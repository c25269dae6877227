"""Native reductions and scans against CPU: mean, prod, amax/amin, max/min (full and .dim),
argmax/argmin, var/std (+ var_mean/std_mean) with correction, linalg_vector_norm and the norm
overloads, all/any, logsumexp, cumsum/cumprod, with their .out and in-place forms.

Every case runs on CPU and on emu; when CPU raises, emu must raise the same exception type with
the same message (first line). Stated tolerances (torch.testing.assert_close):
- max, min, amax, amin, argmax, argmin, all, any and every integer or bool result: exact
  (NaN compared equal: NaN propagates in max/min/amax/amin, argmax picks the first NaN).
- mean, var, std, norm, logsumexp, cumsum, cumprod: float32 rtol=atol=1e-5; float64 1e-10;
  float16 rtol=atol=2e-3 (4e-3 for logsumexp, whose CPU kernel rounds its intermediates to
  float16); bfloat16 rtol=atol=1.6e-2 (3.2e-2 for logsumexp). The device accumulates in float32
  for float16/bfloat16 (var/std in float64, like CPU's Welford), so it differs from CPU by the
  summation order and one rounding at most.
- prod: CPU multiplies float16/bfloat16 in the reduced dtype, step by step; the device in
  float32, rounding once: float16 rtol=1e-2, bfloat16 rtol=8e-2 (inputs in [0.5, 1.5] with random
  signs and <= 24 factors, so neither side under- or overflows); float32 1e-5, float64 1e-10.
Each op must be counted native (stats.native) with no host fallback in the forward tests.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import torch_plugin  # noqa: F401
from plugin_testing import DTYPES, EXACT, make

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
PROD_TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 1e-2, torch.bfloat16: 8e-2}
EXACT_OPS = {"amax", "amin", "max", "min", "max_dim", "min_dim", "argmax", "argmin", "all", "any"}


def tol_for(kind: str, dtype) -> dict:
    if kind in EXACT_OPS or not dtype.is_floating_point:
        return EXACT
    if kind == "prod":
        return dict(rtol=PROD_TOL[dtype], atol=1e-30)
    t = TOL[dtype] * (2 if kind == "logsumexp" and dtype in (torch.float16, torch.bfloat16) else 1)
    return dict(rtol=t, atol=t)


def compare(got, expected, kind, tol=None):
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            compare(g, e, kind, tol)
        return
    assert got.device.type == "emu"
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **(tol or tol_for(kind, expected.dtype)))


def check(kind, fn, x, view=None, tol=None):
    """fn(view(x)) on CPU and fn(view(x on emu)) must agree (values, or the error CPU raises)."""
    view = view or (lambda t: t)
    xc, xe = view(x), view(x.to("emu"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = fn(xc)
    except Exception as err:
        first = str(err).splitlines()[0]
        with pytest.raises(type(err), match=re.escape(first[:80])):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(xe)
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(xe)
    compare(got, expected, kind, tol)
    return got


# Each op with the dims forms it takes: (kind, function of (x, dim, keepdim)); dim None = full.
OPS = {
    "mean": lambda x, d, k: torch.mean(x) if d is None else torch.mean(x, d, k),
    "prod": lambda x, d, k: torch.prod(x) if d is None else torch.prod(x, d if isinstance(d, int) else d[0], k),
    "amax": lambda x, d, k: torch.amax(x) if d is None else torch.amax(x, d, k),
    "amin": lambda x, d, k: torch.amin(x) if d is None else torch.amin(x, d, k),
    "max_dim": lambda x, d, k: torch.max(x) if d is None else tuple(torch.max(x, d if isinstance(d, int) else d[0], k)),
    "min_dim": lambda x, d, k: torch.min(x) if d is None else tuple(torch.min(x, d if isinstance(d, int) else d[0], k)),
    "argmax": lambda x, d, k: torch.argmax(x, None if d is None else (d if isinstance(d, int) else d[0]), k),
    "argmin": lambda x, d, k: torch.argmin(x, None if d is None else (d if isinstance(d, int) else d[0]), k),
    "var": lambda x, d, k: torch.var(x, d, keepdim=k),
    "std": lambda x, d, k: torch.std(x, d, keepdim=k, correction=0),
    "var_mean": lambda x, d, k: torch.var_mean(x, d, keepdim=k, correction=2),
    "std_mean": lambda x, d, k: torch.std_mean(x, d, keepdim=k),
    "norm": lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k),
    "all": lambda x, d, k: torch.all(x) if d is None else torch.all(x, d, k),
    "any": lambda x, d, k: torch.any(x) if d is None else torch.any(x, d, k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, (0, 1, 2) if d is None else d, k),
}
NATIVE_NAME = {"mean": "aten::mean.dim", "prod": "aten::prod", "amax": "aten::amax", "amin": "aten::amin",
               "max_dim": "aten::max.dim", "min_dim": "aten::min.dim", "argmax": "aten::argmax",
               "argmin": "aten::argmin", "var": "aten::var.correction", "std": "aten::std.correction",
               "var_mean": "aten::var_mean.correction", "std_mean": "aten::std_mean.correction",
               "norm": "aten::linalg_vector_norm", "all": "aten::all", "any": "aten::any",
               "logsumexp": "aten::logsumexp"}
DIMS = [(None, False), (1, False), (-1, True), ((0, 2), False), ((-1, 0), True), ((2,), False)]


def make_input(kind, dtype, shape, seed):
    x = make(dtype, shape, seed)
    if kind == "prod" and dtype.is_floating_point:
        g = torch.Generator().manual_seed(seed)
        sign = torch.where(torch.rand(shape, generator=g) < 0.3, -1.0, 1.0)
        x = ((torch.rand(shape, generator=g) + 0.5) * sign).to(dtype)
    return x


def native_count(stats, kind):
    name = NATIVE_NAME[kind]
    got = torch.emu.op_stats()["native"]
    return sum(v for k, v in got.items() if k == name or k.startswith(name + "."))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", list(OPS))
def test_reduction_dims_dtypes(kind, dtype, stats):
    x = make_input(kind, dtype, (3, 4, 2), 1)
    ran = 0
    for dim, keepdim in DIMS:
        ran += check(kind, lambda t: OPS[kind](t, dim, keepdim), x) is not None
    if ran:
        assert native_count(stats, kind) > 0
    stats.no_fallback()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("kind", list(OPS))
def test_reduction_non_contiguous(kind, dtype, stats):
    x = make_input(kind, dtype, (6, 4, 5), 2)
    views = (lambda t: t.transpose(0, 2), lambda t: t[1::2, :, ::2], lambda t: t.permute(1, 2, 0)[1:],
             lambda t: t[:, :1].expand(6, 3, 5))
    for view in views:
        for dim, keepdim in ((None, False), (0, False), ((1, -1), True)):
            check(kind, lambda t: OPS[kind](t, dim, keepdim), x, view)
    stats.no_fallback()


@pytest.mark.parametrize("kind", list(OPS))
def test_reduction_empty_and_zero_dim(kind, stats):
    for dtype in (torch.float32, torch.int64):
        for shape in ((0, 3, 2), (2, 0, 3)):
            x = make_input(kind, dtype, shape, 3)
            for dim, keepdim in ((None, False), (0, False), (1, True), ((0, 2), False), ((2,), False)):
                check(kind, lambda t: OPS[kind](t, dim, keepdim), x)
        z = make_input(kind, dtype, (), 4)
        for dim, keepdim in ((None, False), (0, False), (-1, True)):
            check(kind, lambda t: OPS[kind](t, dim, keepdim), z)
    stats.no_fallback()


def test_large_rows_and_columns(stats):
    x = make(torch.float32, (3, 5000), 5)
    for kind in ("mean", "norm", "var", "logsumexp", "amax", "argmax"):
        for dim in (1, 0):
            check(kind, lambda t: OPS[kind](t, dim, False), x)
    check("cumsum", lambda t: torch.cumsum(t, 1), x)
    stats.no_fallback()


# ------------------------------------------------------------------------------ NaN and ties
def test_nan_propagation_and_first_index(stats):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, nan], [2.0, 5.0, 5.0, -1.0], [-inf, -inf, 0.0, inf],
                      [nan, 0.0, 0.0, 0.0]])
    for dtype in FLOATS:
        xd = x.to(dtype)
        for dim in (None, 0, 1):
            for kind in ("amax", "amin", "max_dim", "min_dim", "argmax", "argmin", "all", "any"):
                check(kind, lambda t: OPS[kind](t, dim, False), xd)
        check("norm", lambda t: torch.linalg.vector_norm(t, float("inf"), 1), xd)
        check("norm", lambda t: torch.linalg.vector_norm(t, -float("inf"), 1), xd)
        check("norm", lambda t: torch.linalg.vector_norm(t, 0, 1), xd)
        check("logsumexp", lambda t: torch.logsumexp(t, 1), xd)
        check("mean", lambda t: torch.mean(t, 1), xd)
        check("var", lambda t: torch.var(t, 1), xd)
    ties = torch.tensor([3, 1, 3, 1, 3], dtype=torch.int32)
    check("argmax", lambda t: torch.argmax(t), ties)
    check("argmin", lambda t: torch.argmin(t), ties)
    check("max_dim", lambda t: tuple(torch.max(t, 0)), ties)
    check("min_dim", lambda t: tuple(torch.min(t, 0)), ties)
    stats.no_fallback()


def test_logsumexp_infinities_and_integers(stats):
    inf = float("inf")
    x = torch.tensor([[-inf, -inf], [inf, 1.0], [inf, -inf], [1e4, 1e4], [-1e4, 0.0]])
    for dtype in FLOATS:
        check("logsumexp", lambda t: torch.logsumexp(t, 1), x.to(dtype))
    for dtype in (torch.int64, torch.uint8, torch.bool):
        check("logsumexp", lambda t: torch.logsumexp(t, 1), make(dtype, (4, 6), 1))
    check("logsumexp", lambda t: torch.logsumexp(t, ()), make(torch.float32, (4, 6), 1))  # CPU's error
    check("logsumexp", lambda t: torch.logsumexp(t, ()), torch.empty(0, 3))
    assert stats.native("aten::logsumexp") > 0
    stats.no_fallback()


# ---------------------------------------------------------------------------------- dtype rules
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_arguments(dtype, stats):
    x = make_input("prod", dtype, (3, 4), 6)
    for to in (torch.float64, torch.float32, torch.float16, torch.int64, torch.int8):
        check("mean", lambda t: torch.mean(t, 1, dtype=to), x)
        check("prod", lambda t: torch.prod(t, dtype=to), x)
        check("prod", lambda t: torch.prod(t, 0, dtype=to), x)
        check("cumsum", lambda t: torch.cumsum(t, 1, dtype=to), x)
        check("norm", lambda t: torch.linalg.vector_norm(t, 2, 1, dtype=to), x)
    stats.no_fallback()


def test_integer_prod_and_cumprod_wrap_like_cpu(stats):
    x = torch.full((70,), 3, dtype=torch.int64)
    check("prod", lambda t: torch.prod(t), x)
    check("cumprod", lambda t: torch.cumprod(t, 0), x)
    u = torch.full((20,), 7, dtype=torch.uint8)
    check("prod", lambda t: torch.prod(t, dtype=torch.uint8), u)
    check("prod", lambda t: torch.prod(t, 0, dtype=torch.int8), u)
    check("cumsum", lambda t: torch.cumsum(t, 0, dtype=torch.int8), u)
    stats.no_fallback()


# ------------------------------------------------------------------------- var/std corrections
def test_var_std_corrections(stats):
    x = make(torch.float32, (5, 6), 7)
    for correction in (0, 1, 2.5, 5, 6, 9):
        for fn in (torch.var, torch.std):
            check("var", lambda t: fn(t, 0, correction=correction), x)
            check("var", lambda t: fn(t, (0, 1), correction=correction, keepdim=True), x)
        check("var", lambda t: torch.var_mean(t, 1, correction=correction), x)
        check("var", lambda t: torch.std_mean(t, None, correction=correction), x)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        torch.var(x.to("emu"), 0, correction=5)
    # the composite overloads (unbiased=) reach var.correction
    check("var", lambda t: torch.var(t, 1, unbiased=False), x)
    check("var", lambda t: torch.std(t, unbiased=True), x)
    check("var", lambda t: t.var(), torch.ones(1))
    assert stats.native("aten::var.correction") > 0 and stats.native("aten::std_mean.correction") > 0
    stats.no_fallback()


# ----------------------------------------------------------------------------------- norms
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_vector_norm_orders(dtype, stats):
    x = make(dtype, (4, 5, 3), 8)
    for ord in (0, 1, 2, 3, 0.5, -1, -2.5, float("inf"), -float("inf")):
        for dim, keepdim in ((None, False), (1, False), ((0, 2), True), ((), False)):
            check("norm", lambda t: torch.linalg.vector_norm(t, ord, dim, keepdim), x)
        check("norm", lambda t: torch.linalg.vector_norm(t, ord, 0), torch.zeros(3, 2, dtype=dtype))
    for ord in (0, 2, -1, float("inf")):
        check("norm", lambda t: torch.linalg.vector_norm(t, ord), torch.empty(0, 3, dtype=dtype))
        check("norm", lambda t: torch.linalg.vector_norm(t, ord, 0), torch.empty(0, 3, dtype=dtype))
        check("norm", lambda t: torch.linalg.vector_norm(t, ord, 1), torch.empty(0, 3, dtype=dtype))
    assert stats.native("aten::linalg_vector_norm") > 0
    stats.no_fallback()


def test_norm_overloads(stats):
    x = make(torch.float32, (4, 5), 9)
    check("norm", lambda t: torch.norm(t), x)
    check("norm", lambda t: t.norm(p=1, dim=1, keepdim=True), x)
    check("norm", lambda t: torch.norm(t, "fro", (0, 1)), x)
    check("norm", lambda t: torch.norm(t, 3, dtype=torch.float64), x)
    check("norm", lambda t: torch.linalg.norm(t.flatten()), x)
    check("norm", lambda t: torch.linalg.norm(t, dim=1), x)
    check("norm", lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, None, [1]), x)
    check("norm", lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, 2, [0], True), x)
    check("norm", lambda t: torch.ops.aten.norm.ScalarOpt_dim_dtype(t, 2, [0], False, dtype=torch.float64), x)
    check("norm", lambda t: torch.ops.aten.norm.Scalar(t.half(), 2), x)
    check("norm", lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, 2, [0]), make(torch.int64, (3, 2), 1))
    check("norm", lambda t: torch.ops.aten.norm.ScalarOpt_dim_dtype(t, 2, [0], False, dtype=torch.int64), x)
    check("norm", lambda t: torch.linalg.vector_norm(t, dtype=torch.float16), x)
    check("norm", lambda t: torch.linalg.vector_norm(t), torch.ones(3, dtype=torch.bool))
    for name in ("aten::norm.ScalarOpt_dim", "aten::norm.ScalarOpt_dim_dtype", "aten::linalg_vector_norm"):
        assert stats.native(name) > 0, name
    stats.no_fallback()


# ------------------------------------------------------------------------------ all / any dims
def test_all_any_dims_forms(stats):
    x = make(torch.int16, (3, 4, 2), 10) % 3
    u = x.to(torch.uint8)
    for t in (x, u, x.float(), x > 0):
        for fn in (torch.all, torch.any):
            check("all", lambda v: fn(v, (0, 2)), t)
            check("all", lambda v: fn(v, (), keepdim=True), t)
            check("all", lambda v: fn(v, None, keepdim=True), t)
            check("all", lambda v: fn(v, -1, True), t)
            check("all", lambda v: fn(v), t)
    assert stats.native("aten::all.dims") > 0 and stats.native("aten::any.dim") > 0
    stats.no_fallback()


# -------------------------------------------------------------------------------- cumsum/cumprod
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cumsum_cumprod(dtype, stats):
    x = make_input("prod", dtype, (3, 5, 4), 11)
    for dim in (0, 1, -1):
        check("cumsum", lambda t: torch.cumsum(t, dim), x)
        check("cumprod", lambda t: torch.cumprod(t, dim), x)
        check("cumsum", lambda t: torch.cumsum(t, dim), x, lambda t: t.transpose(0, 2)[:, 1::2])
        check("cumprod", lambda t: torch.cumprod(t, dim), x, lambda t: t[:, :1].expand(3, 4, 4))
    check("cumsum", lambda t: torch.cumsum(t, 0), make(dtype, (), 1))
    check("cumsum", lambda t: torch.cumsum(t, 1), make(dtype, (0, 3), 1))
    check("cumsum", lambda t: torch.cumsum(t, 3), x)
    assert stats.native("aten::cumsum") > 0 and stats.native("aten::cumprod") > 0
    stats.no_fallback()


def test_cumsum_long_rows_accumulate_like_cpu(stats):
    x = make(torch.float32, (2, 3000), 12)
    check("cumsum", lambda t: torch.cumsum(t, 1), x)
    h = make(torch.float16, (1000,), 13) / 8
    check("cumsum", lambda t: torch.cumsum(t, 0), h)
    stats.no_fallback()


def test_cumsum_inplace(stats):
    for dtype in (torch.float32, torch.int32, torch.float16):
        x = make_input("prod", dtype, (4, 5), 14)
        check("cumsum", lambda t: t.clone().cumsum_(1), x)
        check("cumprod", lambda t: t.clone().cumprod_(0), x)
        check("cumsum", lambda t: t.clone().t().cumsum_(1), x)
        xe = x.to("emu")
        view = xe[1:3]
        assert view.cumsum_(0) is view
        expected = x.clone()
        expected[1:3].cumsum_(0)
        compare(xe, expected, "cumsum")  # the rows outside the view are untouched
    check("cumsum", lambda t: t.clone().cumsum_(0, dtype=torch.int32), make(torch.int64, (3,), 1))
    check("cumsum", lambda t: t.clone().cumsum_(0), torch.ones(3, dtype=torch.bool))
    assert stats.native("aten::cumsum_") > 0 and stats.native("aten::cumprod_") > 0
    stats.no_fallback()


# ------------------------------------------------------------------------------------ out=
OUT_CASES = [
    # (kind, fn(x, out), result dtype for a fresh out, result shape)
    ("mean", lambda x, out: torch.mean(x, 1, out=out), torch.float32, (4,)),
    ("prod", lambda x, out: torch.prod(x, 1, out=out), torch.float32, (4,)),
    ("amax", lambda x, out: torch.amax(x, 1, out=out), torch.float32, (4,)),
    ("amin", lambda x, out: torch.amin(x, (0, 1), out=out), torch.float32, ()),
    ("max", lambda x, out: torch.max(x, out=out), torch.float32, ()),
    ("min", lambda x, out: torch.min(x, out=out), torch.float32, ()),
    ("argmax", lambda x, out: torch.argmax(x, 1, out=out), torch.int64, (4,)),
    ("argmin", lambda x, out: torch.argmin(x, 0, out=out), torch.int64, (6,)),
    ("var", lambda x, out: torch.var(x, 1, out=out), torch.float32, (4,)),
    ("std", lambda x, out: torch.std(x, 1, out=out), torch.float32, (4,)),
    ("norm", lambda x, out: torch.linalg.vector_norm(x, 2, 1, out=out), torch.float32, (4,)),
    ("norm", lambda x, out: torch.norm(x, 1, 1, out=out), torch.float32, (4,)),
    ("all", lambda x, out: torch.all(x, 1, out=out), torch.bool, (4,)),
    ("any", lambda x, out: torch.any(x, (1,), out=out), torch.bool, (4,)),
    ("all", lambda x, out: torch.ops.aten.all.all_out(x, out=out), torch.bool, ()),
    ("logsumexp", lambda x, out: torch.logsumexp(x, 1, out=out), torch.float32, (4,)),
    ("cumsum", lambda x, out: torch.cumsum(x, 1, out=out), torch.float32, (4, 6)),
    ("cumprod", lambda x, out: torch.cumprod(x, 1, out=out), torch.float32, (4, 6)),
]


@pytest.mark.parametrize("case", range(len(OUT_CASES)), ids=[f"{c[0]}{i}" for i, c in enumerate(OUT_CASES)])
def test_out_variants(case, stats):
    kind, fn, dtype, shape = OUT_CASES[case]
    x = make_input("prod", torch.float32, (4, 6), 15)
    xe = x.to("emu")
    expected = fn(x, torch.empty(0, dtype=dtype))
    # a zero-element out is resized
    out = torch.empty(0, dtype=dtype, device="emu")
    assert fn(xe, out) is out
    compare(out, expected, kind)
    if shape:
        # a correctly shaped non-contiguous out keeps its strides; the rest of its base is untouched
        base = torch.full((*shape, 2), 7, dtype=dtype, device="emu")
        out = base[..., 1]
        strides = out.stride()
        fn(xe, out)
        assert out.stride() == strides
        compare(out, expected, kind)
        compare(base[..., 0], torch.full(shape, 7, dtype=dtype), kind)
    # a non-empty out of the wrong shape is resized with ATen's warning
    out = torch.zeros(3, 3, dtype=dtype, device="emu")
    with pytest.warns(UserWarning, match="was resized"):
        fn(xe, out)
    compare(out, expected, kind)
    # a wrong dtype is rejected as on CPU, and the out tensor keeps its value
    bad = torch.int8 if dtype != torch.int8 else torch.float32
    try:
        fn(x, torch.empty(shape, dtype=bad))
        cpu_rejects = False
    except RuntimeError:
        cpu_rejects = True
    if cpu_rejects:
        out = torch.full(shape, 3, dtype=bad, device="emu")
        with pytest.raises(RuntimeError):
            fn(xe, out)
        assert (out.cpu() == 3).all()
    stats.no_fallback()


def test_out_dtype_rules(stats):
    x = make(torch.float32, (4, 6), 16)
    cases = [
        lambda t, o: torch.mean(t, 0, out=o), lambda t, o: torch.mean(t, 0, dtype=torch.float32, out=o),
        lambda t, o: torch.prod(t, 0, out=o), lambda t, o: torch.var(t, 0, out=o),
        lambda t, o: torch.linalg.vector_norm(t, 2, 0, out=o), lambda t, o: torch.amax(t, 0, out=o),
        lambda t, o: torch.max(t, out=o), lambda t, o: torch.logsumexp(t, 0, out=o),
        lambda t, o: torch.cumsum(t, 0, out=o), lambda t, o: torch.cumsum(t, 0, dtype=torch.float32, out=o),
        lambda t, o: torch.any(t, 0, out=o),
    ]
    for fn in cases:
        for dtype in (torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8):
            # a float64 out of a float32 input: CPU rounds some intermediates (logsumexp's exp
            # terms) to float32, so float32's tolerance applies
            tol = tol_for("mean", torch.float32 if dtype == torch.float64 else dtype)
            check("mean", lambda t: fn(t, torch.empty(0, dtype=dtype, device=t.device)), x, tol=tol)
    # max.dim: values of the input's dtype, int64 indices
    for vd, idd in ((torch.float32, torch.int64), (torch.float64, torch.int64), (torch.float32, torch.int32)):
        check("max_dim", lambda t: tuple(torch.max(t, 0, out=(torch.empty(0, dtype=vd, device=t.device),
                                                             torch.empty(0, dtype=idd, device=t.device)))), x)
        check("min_dim", lambda t: tuple(torch.min(t, 1, True, out=(torch.empty(0, dtype=vd, device=t.device),
                                                                   torch.empty(0, dtype=idd, device=t.device)))), x)
    check("var", lambda t: torch.var_mean(t, 1, out=(torch.empty(0, device=t.device),
                                                      torch.empty(0, device=t.device))), x)
    assert stats.native("aten::max.dim_max") > 0 and stats.native("aten::mean.out") > 0
    stats.no_fallback()


def test_overlapping_out_rejected(stats):
    base = torch.ones(5, 4, device="emu")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        torch.cumsum(base[:4], 0, out=base[1:])  # partial overlap of input and out
    x = base[:4]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.cumsum(torch.ones(4, 4, device="emu"), 0, out=torch.empty(4, 1, device="emu").expand(4, 4))
    assert (x.cpu() == 1).all()
    stats.no_fallback()


def test_bad_input_leaves_state(stats):
    x = make(torch.float32, (3, 4), 17)
    xe = x.to("emu")
    other = torch.arange(5.0, device="emu")
    for fn in (lambda: torch.amax(xe, 2), lambda: torch.max(xe, -3), lambda: torch.var(xe.long()),
               lambda: torch.amax(xe[:0], 0), lambda: torch.argmax(xe.bool()),
               lambda: torch.linalg.vector_norm(xe[:0], float("inf")), lambda: torch.mean(xe, (0, -2))):
        with pytest.raises((RuntimeError, IndexError)):
            fn()
    compare(xe, x, "max")
    compare(other, torch.arange(5.0), "max")
    # an unsupported dtype is refused by name, before anything is launched, when the host fallback
    # (which would run it) is forbidden
    c = torch.empty(2, 3, dtype=torch.complex64, device="emu")
    for fn in (lambda: torch.amax(c, 0), lambda: torch.mean(c), lambda: torch.cumsum(c, 0),
               lambda: torch.linalg.vector_norm(c)):
        with torch.emu.host_fallback("forbid"), pytest.raises(RuntimeError, match="not supported on emu"):
            fn()


# ----------------------------------------------------------------------------------- autograd
AUTOGRAD = {
    "mean": lambda t: t.mean(1).sum(),
    "prod": lambda t: t.prod(1).sum(),
    "amax": lambda t: t.amax(0).sum(),
    "max_dim": lambda t: t.max(1).values.sum(),
    "var": lambda t: t.var(1).sum(),
    "std": lambda t: t.std(0).sum(),
    "norm": lambda t: torch.linalg.vector_norm(t, 2, 1).sum(),
    "logsumexp": lambda t: t.logsumexp(1).sum(),
    "cumsum": lambda t: t.cumsum(1).sum(),
    "cumprod": lambda t: t.cumprod(1).sum(),
}


@pytest.mark.parametrize("kind", list(AUTOGRAD))
def test_autograd_matches_cpu(kind, stats):
    x = make_input("prod", torch.float32, (3, 5), 18)
    xc = x.clone().requires_grad_()
    xe = x.to("emu").requires_grad_()
    AUTOGRAD[kind](xc).backward()
    AUTOGRAD[kind](xe).backward()
    assert xe.grad.device.type == "emu"
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    # the forward op ran natively; backward formulas may use ops that are not native yet
    assert sum(v for k, v in torch.emu.op_stats()["native"].items()
               if k.split(".")[0] in ("aten::mean", "aten::prod", "aten::amax", "aten::max", "aten::var",
                                      "aten::std", "aten::linalg_vector_norm", "aten::logsumexp",
                                      "aten::cumsum", "aten::cumprod")) > 0


# ------------------------------------------------------------------------ the kernels themselves
def test_kernels_reject_bad_arguments():
    from emulator.errors import KernelArgumentError
    from emulator.kernels import dtypes as D
    from emulator.kernels import reduction
    a = torch.arange(6.0).reshape(2, 3)
    out = torch.empty(2)
    idx = torch.empty(2, dtype=torch.int64)

    def run(op, out_dtype=D.FLOAT32, dims=(1,), compute=D.FLOAT32, shape=(2, 3), aux=0, out_t=out):
        reduction.reduce(op, out_t.data_ptr(), out_dtype, (1, 0), aux, D.INT64, (1, 0), a.data_ptr(), D.FLOAT32,
                         (3, 1), shape, dims, compute, 0.0)

    run("mean")
    torch.testing.assert_close(out, a.mean(1), **EXACT)
    run("max", aux=idx.data_ptr())
    assert idx.tolist() == [2, 2] and out.tolist() == [2.0, 5.0]
    for args, match in (((("median",)), "unknown op"), (("mean", D.FLOAT32, (1, 1)), "repeated dim"),
                        (("mean", D.FLOAT32, (1,), D.INT32), "floating compute dtype"),
                        (("argmax", D.FLOAT32), "index output must be int64"),
                        (("max", D.FLOAT32, (1,), D.FLOAT32, (2, 0)), "no identity"),
                        (("sum", 42), "unknown dtype code")):
        with pytest.raises(KernelArgumentError, match=match):
            run(*args)
    with pytest.raises(KernelArgumentError, match="invalid dim"):
        reduction.scan("sum", out.data_ptr(), D.FLOAT32, (1,), a.data_ptr(), D.FLOAT32, (1,), (2,), 1, D.FLOAT32)
    with pytest.raises(KernelArgumentError, match="unknown op"):
        reduction.scan("max", out.data_ptr(), D.FLOAT32, (1,), a.data_ptr(), D.FLOAT32, (1,), (2,), 0, D.FLOAT32)
