"""Selection, scans, searching, histograms and segment reductions on emu against the CPU.

Tolerances: integers, bool, indices and counts exact; order statistics, cummax/cummin,
searchsorted and unweighted histograms are exact in every dtype (they move or count values);
logcumsumexp and weighted/density histograms and segment mean/sum/prod: float32 1.3e-6 relative,
float64 1e-7 (the default assert_close ones), float16/bfloat16 4 ulps of the magnitude.
"""
import pytest
import torch

from tests.torch_plugin.plugin_testing import EXACT, make

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
REAL = FLOATS + [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def emu(t):
    return t.to("emu")


def same(got, want, **tol):
    if isinstance(want, (tuple, list)):
        for g, w in zip(got, want):
            same(g, w, **tol)
        return
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **(tol or EXACT))


def approx(dtype, magnitude=1.0):
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=0, atol=4 * torch.finfo(dtype).eps * magnitude)
    return {}


@pytest.fixture
def native_only(stats):
    torch.emu.set_host_fallback(False)
    yield stats
    torch.emu.set_host_fallback(True)
    try:
        torch.emu.synchronize()
    except torch.AcceleratorError as err:
        torch.emu.recover(reason="test teardown")
        pytest.fail(f"unexpected device fault: {err}")
    stats.no_fallback()


def with_ties(dtype, shape, seed=0):
    """Values with many repeats (so indices of ties matter) and, for floats, a few NaNs."""
    x = (make(torch.int64, shape, seed) % 5).to(dtype)
    if dtype.is_floating_point:
        flat = x.view(-1)
        flat[::7] = float("nan")
    return x


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.transpose(0, 1),
    "sliced": lambda t: t[:, ::2],
    "expanded": lambda t: t[:1].expand(t.shape[0], -1),
}


# ----------------------------------------------------------------------------- order statistics
@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_median_mode_kthvalue_match_cpu_values_and_indices(dtype, layout, native_only):
    # The CPU reference runs on a contiguous copy: CPU's median reads past an expanded input's
    # memory (torch 2.13: median(t[:1].expand(4, -1), 0) returns garbage), the device does not.
    x = LAYOUTS[layout](with_ties(dtype, (6, 40), seed=1)).contiguous()
    e = LAYOUTS[layout](emu(with_ties(dtype, (6, 40), seed=1)))
    for dim in (0, 1, -1):
        same(torch.median(e, dim), tuple(torch.median(x, dim)))
        same(torch.mode(e, dim), tuple(torch.mode(x, dim)))
        same(torch.kthvalue(e, 2, dim, keepdim=True), tuple(torch.kthvalue(x, 2, dim, keepdim=True)))
        if dtype.is_floating_point:
            same(torch.nanmedian(e, dim), tuple(torch.nanmedian(x, dim)))
    same(torch.median(e), torch.median(x))
    same(torch.nanmedian(e), torch.nanmedian(x))
    assert native_only.native("aten::median") and native_only.native("aten::mode")
    assert native_only.native("aten::kthvalue")


def test_median_rules_nan_lower_median_empty(native_only):
    x = torch.tensor([[3.0, float("nan"), 1.0, float("nan")], [4.0, 1.0, 2.0, 3.0]])
    v, i = torch.median(emu(x), 1)
    same(v, torch.tensor([float("nan"), 2.0]))            # NaN propagates, lower median
    same(i, torch.tensor([1, 2]))                           # the first NaN's index
    v, i = torch.nanmedian(emu(x), 1)
    same((v, i), (torch.tensor([1.0, 2.0]), torch.tensor([2, 2])))
    same(torch.median(emu(torch.empty(0))), torch.tensor(float("nan")))
    for n in (1, 2, 5, 6, 17, 40):  # a slice of NaNs only: the index CPU's nth_element leaves
        nans = torch.full((2, n), float("nan"))
        same(torch.nanmedian(emu(nans), 1), tuple(torch.nanmedian(nans, 1)))
    same(torch.median(emu(torch.tensor(5.0)), 0), tuple(torch.median(torch.tensor(5.0), 0)))
    same(torch.mode(emu(torch.tensor([2, 1, 2, 1, 3]))), (torch.tensor(1), torch.tensor(3)))  # smallest mode


def test_mode_long_rows_follow_cpu_introsort(native_only):
    x = torch.randint(0, 7, (5, 300), generator=torch.Generator().manual_seed(3))
    same(torch.mode(emu(x), 1), tuple(torch.mode(x, 1)))
    same(torch.kthvalue(emu(x), 150, 1), tuple(torch.kthvalue(x, 150, 1)))


def test_order_stat_out_and_errors(native_only):
    x = make(torch.float32, (4, 5))
    e = emu(x)
    values = torch.empty(0, device="emu")
    indices = torch.empty(0, dtype=torch.int64, device="emu")
    torch.median(e, 1, out=(values, indices))               # zero-element outs are resized
    same((values, indices), tuple(torch.median(x, 1)))
    v_nc = torch.empty(4, 2, device="emu")[:, 0]              # correctly shaped, non-contiguous: kept
    i_nc = torch.empty(4, 2, dtype=torch.int64, device="emu")[:, 0]
    torch.kthvalue(e, 3, 1, out=(v_nc, i_nc))
    assert v_nc.stride() == (2,)
    same((v_nc, i_nc), tuple(torch.kthvalue(x, 3, 1)))
    values, indices = torch.empty(0, device="emu"), torch.empty(0, dtype=torch.int64, device="emu")
    torch.mode(e, 0, out=(values, indices))
    same((values, indices), tuple(torch.mode(x, 0)))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.median(e, 1, out=(torch.empty(4, dtype=torch.float64, device="emu"), indices))
    with pytest.raises(RuntimeError, match="selected number k out of range"):
        torch.kthvalue(e, 6, 1)
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        torch.median(emu(torch.empty(0, 3)), 0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.mode(e, 2)
    same(e, x)


def test_median_backward(native_only):
    x = make(torch.float32, (4, 6))
    for fn in (lambda t: torch.median(t, 1)[0], lambda t: torch.kthvalue(t, 2, 0)[0], lambda t: torch.median(t),
               lambda t: torch.mode(t, 1)[0]):
        a = x.clone().requires_grad_()
        b = emu(x).requires_grad_()
        fn(a).sum().backward()
        fn(b).sum().backward()
        same(b.grad, a.grad)


# -------------------------------------------------------------------------------------- scans
@pytest.mark.parametrize("dtype", REAL + [torch.bool])
def test_cummax_cummin(dtype, native_only):
    x = with_ties(dtype, (5, 9), seed=2) if dtype != torch.bool else make(torch.bool, (5, 9))
    for layout in LAYOUTS.values():
        for dim in (0, 1):
            same(torch.cummax(layout(emu(x)), dim), tuple(torch.cummax(layout(x), dim)))
            same(torch.cummin(layout(emu(x)), dim), tuple(torch.cummin(layout(x), dim)))
    same(torch.cummax(emu(torch.tensor(2.0)), 0), tuple(torch.cummax(torch.tensor(2.0), 0)))
    same(torch.cummax(emu(x[:0]), 0), tuple(torch.cummax(x[:0], 0)))
    assert native_only.native("aten::_cummax_helper") and native_only.native("aten::_cummin_helper")


@pytest.mark.parametrize("dtype", FLOATS)
def test_logcumsumexp(dtype, native_only):
    x = make(dtype, (5, 30), seed=4)
    x[0, 3] = float("inf")
    x[1, 0] = float("-inf")
    x[2, 5] = float("nan")
    for dim in (0, 1):
        want = torch.logcumsumexp(x, dim)
        same(torch.logcumsumexp(emu(x), dim), want, **approx(dtype, want.nan_to_num(0, 0, 0).abs().max().item()))
        same(torch.logcumsumexp(emu(x).t(), 1 - dim), torch.logcumsumexp(x.t(), 1 - dim),
             **approx(dtype, want.nan_to_num(0, 0, 0).abs().max().item()))
    out = torch.empty(0, dtype=dtype, device="emu")
    torch.logcumsumexp(emu(x), 1, out=out)
    same(out, torch.logcumsumexp(x, 1), **approx(dtype, 30))
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.logcumsumexp(emu(torch.arange(3)), 0)


def test_scan_backward(native_only):
    x = make(torch.float64, (4, 5))
    for fn in (lambda t: torch.cummax(t, 1)[0], lambda t: torch.cummin(t, 0)[0], lambda t: torch.logcumsumexp(t, 1)):
        a = x.clone().requires_grad_()
        b = emu(x).requires_grad_()
        fn(a).sum().backward()
        fn(b).sum().backward()
        same(b.grad, a.grad, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------- aminmax, nansum & co.
@pytest.mark.parametrize("dtype", REAL + [torch.bool])
def test_aminmax(dtype, native_only):
    x = with_ties(dtype, (4, 7)) if dtype != torch.bool else make(torch.bool, (4, 7))
    same(torch.aminmax(emu(x)), tuple(torch.aminmax(x)))
    same(torch.aminmax(emu(x).t(), dim=0, keepdim=True), tuple(torch.aminmax(x.t(), dim=0, keepdim=True)))
    mn, mx = torch.empty(0, dtype=dtype, device="emu"), torch.empty(0, dtype=dtype, device="emu")
    torch.aminmax(emu(x), dim=1, out=(mn, mx))
    same((mn, mx), tuple(torch.aminmax(x, dim=1)))
    with pytest.raises(RuntimeError, match="no identity"):
        torch.aminmax(emu(x[:0]))
    assert native_only.native("aten::aminmax")


@pytest.mark.parametrize("dtype", REAL + [torch.bool])
def test_nansum_nanmean_count_nonzero(dtype, native_only):
    x = with_ties(dtype, (6, 5)) if dtype != torch.bool else make(torch.bool, (6, 5))
    e = emu(x)
    tol = approx(dtype, 30) if dtype.is_floating_point else EXACT
    same(torch.nansum(e), torch.nansum(x), **tol)
    same(torch.nansum(e.t(), 1, keepdim=True), torch.nansum(x.t(), 1, keepdim=True), **tol)
    same(torch.count_nonzero(e, 0), torch.count_nonzero(x, 0))
    same(torch.count_nonzero(e[:, ::2]), torch.count_nonzero(x[:, ::2]))
    if dtype.is_floating_point:
        same(torch.nanmean(e, 1), torch.nanmean(x, 1), **tol)
    out = torch.empty(0, dtype=torch.float64 if dtype.is_floating_point else torch.int64, device="emu")
    torch.nansum(e, 0, dtype=out.dtype, out=out)
    same(out, torch.nansum(x, 0, dtype=out.dtype), **tol)
    assert torch.emu.op_stats()["composite"].get("aten::nansum", 0) > 0


def test_equal(native_only):
    x = make(torch.float32, (3, 4))
    e = emu(x)
    assert torch.equal(e, e.clone()) and torch.equal(e.t(), emu(x.t().contiguous()))
    assert not torch.equal(e, e + 1) and not torch.equal(e, e[:2])
    n = emu(torch.tensor([1.0, float("nan")]))
    assert not torch.equal(n, n)
    assert torch.equal(emu(torch.arange(3)), emu(torch.arange(3.0)))  # CPU compares in the common dtype
    assert torch.equal(emu(torch.empty(0)), emu(torch.empty(0)))


# -------------------------------------------------------------------------- searchsorted / bucketize
@pytest.mark.parametrize("dtype", REAL)
def test_searchsorted_and_bucketize(dtype, native_only):
    seq = torch.sort(with_ties(dtype, (12,), seed=5)).values
    vals = with_ties(dtype, (3, 8), seed=6)
    for right in (False, True):
        for out_int32 in (False, True):
            same(torch.searchsorted(emu(seq), emu(vals), right=right, out_int32=out_int32),
                 torch.searchsorted(seq, vals, right=right, out_int32=out_int32))
            same(torch.bucketize(emu(vals).t(), emu(seq), right=right),
                 torch.bucketize(vals.t(), seq, right=right))
    rows = torch.sort(with_ties(dtype, (3, 10), seed=7), 1).values
    same(torch.searchsorted(emu(rows), emu(vals), side="right"), torch.searchsorted(rows, vals, side="right"))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    shuffled = seq[perm]
    sorter = torch.argsort(shuffled, stable=True)
    same(torch.searchsorted(emu(shuffled), emu(vals), sorter=emu(sorter)),
         torch.searchsorted(shuffled, vals, sorter=sorter))
    same(torch.searchsorted(emu(seq), 2), torch.searchsorted(seq, 2))
    same(torch.bucketize(2.5, emu(seq)), torch.bucketize(2.5, seq))
    same(torch.searchsorted(emu(seq[:0]), emu(vals)), torch.searchsorted(seq[:0], vals))
    assert native_only.native("aten::searchsorted.Tensor") and native_only.native("aten::bucketize.Tensor")


def test_searchsorted_mixed_dtypes_out_and_errors(native_only):
    seq = torch.arange(10)
    vals = make(torch.float32, (4,)).abs()
    same(torch.searchsorted(emu(seq), emu(vals)), torch.searchsorted(seq, vals))
    out = torch.empty(0, dtype=torch.int64, device="emu")
    torch.searchsorted(emu(seq), emu(vals), out=out)
    same(out, torch.searchsorted(seq, vals))
    with pytest.raises(RuntimeError, match="output tensor's dtype is wrong"):
        torch.searchsorted(emu(seq), emu(vals), out=torch.empty(4, dtype=torch.int32, device="emu"))
    with pytest.raises(RuntimeError, match="side can only be"):
        torch.searchsorted(emu(seq), emu(vals), side="up")
    with pytest.raises(RuntimeError, match="boundaries tensor must be 1 dimension"):
        torch.bucketize(emu(vals), emu(seq.view(2, 5)))
    with pytest.raises(RuntimeError, match="first N-1 dimensions"):
        torch.searchsorted(emu(seq.view(2, 5)), emu(vals))
    with pytest.raises(NotImplementedError, match="'Bool'"):
        torch.searchsorted(emu(torch.tensor([False, True])), emu(torch.tensor([True])))


def test_searchsorted_bad_sorter_is_a_sticky_kernel_fault(native_only):
    seq, vals = emu(torch.arange(5.0)), emu(torch.tensor([1.5]))
    out = torch.searchsorted(seq, vals, sorter=emu(torch.tensor([0, 1, 2, 3, 7])))
    with pytest.raises(torch.AcceleratorError, match="sorter index out of range"):
        torch.emu.synchronize()
    torch.emu.recover(reason="test")
    assert out.shape == (1,)


# ----------------------------------------------------------------------------------- histograms
@pytest.mark.parametrize("dtype", FLOATS)
def test_histc(dtype, native_only):
    x = make(dtype, (7, 9), seed=8)
    same(torch.histc(emu(x), 10), torch.histc(x, 10))
    same(torch.histc(emu(x).t(), 6, -2, 3), torch.histc(x.t(), 6, -2, 3))
    same(torch.histc(emu(torch.full((4,), 3.0, dtype=dtype)), 4), torch.histc(torch.full((4,), 3.0, dtype=dtype), 4))
    same(torch.histc(emu(x[:0]), 5), torch.histc(x[:0], 5))
    out = torch.empty(0, dtype=dtype, device="emu")
    torch.histc(emu(x), 5, out=out)
    same(out, torch.histc(x, 5))
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(emu(x), 4, 2, 1)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(emu(torch.arange(4)), 4, 3, 1)


def _cuda_histc(x, bins, lo, hi):
    """CUDA's integer histc, element by element (CPU has none)."""
    values, lo, hi = x.reshape(-1).tolist(), int(lo), int(hi)
    if lo == hi and values:
        lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts = [0] * bins
    for v in values:
        if lo <= v <= hi:
            counts[min((v - lo) * bins // (hi - lo), bins - 1)] += 1
    return torch.tensor(counts, dtype=x.dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.int64], ids=str)
def test_histc_of_integers_follows_cuda(dtype, native_only):
    """CPU rejects integer histc; CUDA counts in integer arithmetic, and transformers' MoE routers
    rely on it on every accelerator."""
    x = torch.randint(0, 8, (6, 7), dtype=dtype, generator=torch.Generator().manual_seed(3))
    for bins, lo, hi in ((8, 0, 7), (3, 0, 0), (5, 2, 6), (4, 1, 9), (2, 0, 7)):
        got = torch.histc(emu(x).t(), bins=bins, min=lo, max=hi)
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), _cuda_histc(x, bins, lo, hi), rtol=0, atol=0)
    out = torch.empty(0, dtype=dtype, device="emu")
    torch.histc(emu(x), 8, 0, 7, out=out)
    torch.testing.assert_close(out.cpu(), _cuda_histc(x, 8, 0, 7), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_and_histogramdd(dtype, native_only):
    x = make(dtype, (20, 3), seed=9)
    w = make(dtype, (20,), seed=10).abs()
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-6, atol=1e-6)
    # Bin edges come from the device's linspace, which interpolates in float64 and rounds once;
    # CPU's interpolates in the dtype: the edges may differ by an ulp (counts here do not).
    edge_tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-7, atol=5e-7)
    got, want = torch.histogram(emu(x), 6), torch.histogram(x, 6)
    same(got.hist, want.hist)
    same(got.bin_edges, want.bin_edges, **edge_tol)
    same(torch.histogram(emu(x[:, 0]), 5, range=(-3.0, 3.0), weight=emu(w), density=True),
         tuple(torch.histogram(x[:, 0], 5, range=(-3.0, 3.0), weight=w, density=True)), **tol)
    edges = torch.tensor([-5.0, -1.0, 0.0, 0.5, 4.0], dtype=dtype)
    same(torch.histogram(emu(x), emu(edges)), tuple(torch.histogram(x, edges)))
    want = torch.histogramdd(x, [3, 4, 2], weight=w, density=True)
    got = torch.histogramdd(emu(x), [3, 4, 2], weight=emu(w), density=True)
    same(got.hist, want.hist, **tol)
    same(list(got.bin_edges), list(want.bin_edges), **edge_tol)
    bins = [edges, edges[1:], edges[:3]]
    got = torch.histogramdd(emu(x), [emu(b) for b in bins])
    same(got.hist, torch.histogramdd(x, bins).hist)
    hist, bin_edges = torch.empty(0, dtype=dtype, device="emu"), torch.empty(0, dtype=dtype, device="emu")
    torch.histogram(emu(x), 4, out=(hist, bin_edges))
    same(hist, torch.histogram(x, 4).hist)
    same(bin_edges, torch.histogram(x, 4).bin_edges, **edge_tol)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histogram(emu(x), -1)
    with pytest.raises(NotImplementedError, match="histogramdd"):
        torch.histogram(emu(x.half()), 4)
    assert native_only.native("aten::histogram.bin_ct") and native_only.native("aten::_histogramdd_from_bin_cts")


# ------------------------------------------------------------------------------ segment_reduce
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce(dtype, reduce, native_only):
    data = make(dtype, (7, 3), seed=11) / 4
    data[2, 1] = float("nan")
    lengths = torch.tensor([2, 0, 4, 1])
    offsets = torch.tensor([0, 2, 2, 6, 7])
    tol = approx(dtype, 4)
    for kw in (dict(lengths=lengths), dict(offsets=offsets), dict(lengths=lengths, initial=1.5)):
        want = torch.segment_reduce(data, reduce, **kw)
        got = torch.segment_reduce(emu(data), reduce, **{k: emu(v) if isinstance(v, torch.Tensor) else v
                                                        for k, v in kw.items()})
        same(got, want, **tol)
    data3 = make(dtype, (2, 5, 2), seed=12)
    lengths2 = torch.tensor([[2, 3], [5, 0]])
    same(torch.segment_reduce(emu(data3.transpose(0, 0)), reduce, lengths=emu(lengths2), axis=1),
         torch.segment_reduce(data3, reduce, lengths=lengths2, axis=1), **approx(dtype, 16))
    assert native_only.native("aten::segment_reduce")


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_backward(reduce, native_only):
    data = torch.tensor([[1.0, 2.0], [2.0, 0.0], [2.0, 3.0], [0.5, 0.0], [4.0, 0.0]], dtype=torch.float64)
    lengths = torch.tensor([3, 0, 2])
    a = data.clone().requires_grad_()
    b = emu(data).requires_grad_()
    torch.segment_reduce(a, reduce, lengths=lengths, initial=2.0).sum().backward()
    torch.segment_reduce(b, reduce, lengths=emu(lengths), initial=2.0).sum().backward()
    same(b.grad, a.grad, rtol=1e-12, atol=1e-12)
    assert native_only.native("aten::_segment_reduce_backward")


def test_segment_reduce_errors(native_only):
    data = emu(torch.randn(4))
    with pytest.raises(RuntimeError, match="sum to data.size"):
        torch.segment_reduce(data, "sum", lengths=emu(torch.tensor([3])))
    with pytest.raises(RuntimeError, match="negative value"):
        torch.segment_reduce(data, "sum", lengths=emu(torch.tensor([5, -1])))
    with pytest.raises(RuntimeError, match="reduce argument must be"):
        torch.segment_reduce(data, "foo", lengths=emu(torch.tensor([4])))
    with pytest.raises(NotImplementedError, match="'Long'"):
        torch.segment_reduce(emu(torch.arange(4)), "sum", lengths=emu(torch.tensor([4])))
    torch.segment_reduce(data, "sum", lengths=emu(torch.tensor([9])), unsafe=True)  # past the data: the kernel refuses
    with pytest.raises(torch.AcceleratorError, match="outside the data"):
        torch.emu.synchronize()
    torch.emu.recover(reason="test")


# ------------------------------------------------------------------------------- cost models
def test_every_kernel_has_a_cost_in_the_trace(native_only):
    x = emu(make(torch.float32, (32, 16)))
    torch.emu.synchronize()
    # the trace is a bounded ring (EMU_TRACE_ENTRIES): select this test's commands by time, not index
    before = torch.emu.device_telemetry()["trace"]
    t0 = max((e.end_ns for e in before), default=0)
    torch.median(x, 1)
    torch.kthvalue(x, 3, 1)
    torch.cummax(x, 1)
    torch.searchsorted(emu(torch.arange(10.0)), x)
    torch.histc(x, 8, -1, 1)
    data = x.clone().requires_grad_()
    torch.segment_reduce(data, "sum", lengths=emu(torch.tensor([16, 16]))).sum().backward()
    torch.emu.synchronize()
    trace = [e for e in torch.emu.device_telemetry()["trace"] if e.start_ns >= t0]
    seen = {e.name.split(".")[0]: e for e in trace}
    for kernel in ("order_stat", "cum_select", "search", "histogram", "segment_reduce", "segment_reduce_backward"):
        entry = seen[kernel]
        assert entry.engine == "vector_engine" and entry.nbytes > 0 and entry.flops > 0 and entry.end_ns > entry.start_ns
    # a sort per slot costs more than a quickselect per slot on the same input
    median = next(e for e in trace if e.name == "order_stat.median")
    kth = next(e for e in trace if e.name == "order_stat.kthvalue")
    assert median.flops > kth.flops
