"""3-d pooling, adaptive max pooling, unpooling, N-d interpolation, grid sampling, fractional max
pooling, unfold/fold, channel_shuffle and pairwise distances on emu against CPU (ops/pooling.py,
resample.py, convolution.py, distance.py)."""
import pytest
import torch
import torch.nn.functional as F

from plugin_testing import make

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.bfloat16: dict(rtol=2e-2, atol=5e-2), torch.float16: dict(rtol=2e-3, atol=5e-3)}
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def emu(t):
    return t.to("emu")


def close(actual, expected, dtype=None):
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(actual, expected):
        tol = TOL.get(e.dtype, dict(rtol=0, atol=0)) if dtype is None else TOL[dtype]
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol)


def layouts(x):
    """Contiguous, transposed (non-contiguous) and sliced views of a (N, C, *spatial) tensor."""
    return {"contiguous": x, "transposed": x.transpose(-1, -2).contiguous().transpose(-1, -2),
            "sliced": torch.cat([x, x], dim=-1)[..., ::2]}


FORWARD = {
    "max_pool3d": ("aten::max_pool3d_with_indices", (2, 3, 5, 6, 7),
                   lambda t: F.max_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), ceil_mode=True, return_indices=True)),
    "max_pool3d_dilated": ("aten::max_pool3d_with_indices", (1, 2, 6, 6, 7),
                           lambda t: F.max_pool3d(t, 2, 2, 0, dilation=2, return_indices=True)),
    "avg_pool3d": ("aten::avg_pool3d", (2, 3, 5, 6, 7),
                   lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    "avg_pool3d_divisor": ("aten::avg_pool3d", (1, 2, 4, 5, 4),
                           lambda t: F.avg_pool3d(t, (2, 2, 3), (2, 2, 1), divisor_override=-2)),
    "adaptive_avg_pool3d": ("aten::_adaptive_avg_pool3d", (2, 3, 5, 6, 7), lambda t: F.adaptive_avg_pool3d(t, (2, 4, 3))),
    "adaptive_max_pool3d": ("aten::adaptive_max_pool3d", (2, 3, 5, 6, 7),
                            lambda t: F.adaptive_max_pool3d(t, (2, 4, 3), return_indices=True)),
    "adaptive_max_pool2d": ("aten::adaptive_max_pool2d", (2, 3, 6, 7),
                            lambda t: F.adaptive_max_pool2d(t, (4, 3), return_indices=True)),
    "adaptive_max_pool1d": ("aten::adaptive_max_pool2d", (2, 3, 7),
                            lambda t: F.adaptive_max_pool1d(t, 4, return_indices=True)),
    "nearest1d": ("aten::upsample_nearest1d", (2, 3, 5), lambda t: F.interpolate(t, scale_factor=1.7)),
    "nearest3d": ("aten::upsample_nearest3d", (1, 2, 3, 4, 5), lambda t: F.interpolate(t, size=(5, 3, 9))),
    "nearest_exact1d": ("aten::_upsample_nearest_exact1d", (2, 3, 5),
                        lambda t: F.interpolate(t, size=8, mode="nearest-exact")),
    "nearest_exact2d": ("aten::_upsample_nearest_exact2d", (2, 3, 5, 4),
                        lambda t: F.interpolate(t, scale_factor=(1.5, 0.6), mode="nearest-exact")),
    "nearest_exact3d": ("aten::_upsample_nearest_exact3d", (1, 2, 3, 4, 5),
                        lambda t: F.interpolate(t, size=(4, 7, 3), mode="nearest-exact")),
    "linear1d": ("aten::upsample_linear1d", (2, 3, 5), lambda t: F.interpolate(t, size=9, mode="linear")),
    "linear1d_align": ("aten::upsample_linear1d", (2, 3, 5),
                       lambda t: F.interpolate(t, size=3, mode="linear", align_corners=True)),
    "trilinear": ("aten::upsample_trilinear3d", (1, 2, 3, 4, 5),
                  lambda t: F.interpolate(t, scale_factor=(1.5, 0.8, 2.0), mode="trilinear")),
    "bicubic": ("aten::upsample_bicubic2d", (2, 3, 5, 6), lambda t: F.interpolate(t, size=(9, 4), mode="bicubic")),
    "bicubic_align": ("aten::upsample_bicubic2d", (2, 3, 5, 6),
                      lambda t: F.interpolate(t, size=(7, 11), mode="bicubic", align_corners=True)),
    "bilinear_aa": ("aten::_upsample_bilinear2d_aa", (2, 3, 10, 12),
                    lambda t: F.interpolate(t, size=(4, 5), mode="bilinear", antialias=True)),
    "bicubic_aa": ("aten::_upsample_bicubic2d_aa", (2, 3, 10, 12),
                   lambda t: F.interpolate(t, size=(4, 17), mode="bicubic", antialias=True, align_corners=True)),
    "unfold": ("aten::im2col", (2, 3, 6, 7), lambda t: F.unfold(t, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))),
    "channel_shuffle": ("aten::channel_shuffle", (2, 6, 3, 4), lambda t: F.channel_shuffle(t, 3)),
}


@pytest.mark.parametrize("case", sorted(FORWARD))
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_forward_matches_cpu(stats, case, layout):
    op, shape, fn = FORWARD[case]
    x = layouts(make(torch.float32, shape))[layout]
    close(fn(emu(x)), fn(x))
    assert stats.native(op) > 0
    stats.no_fallback()


REDUCED_OK = ["max_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d", "adaptive_max_pool2d", "nearest3d",
              "nearest_exact2d", "linear1d", "trilinear", "bicubic", "unfold", "channel_shuffle"]


@pytest.mark.parametrize("case", REDUCED_OK)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_forward_dtypes(stats, case, dtype):
    op, shape, fn = FORWARD[case]
    x = make(dtype, shape)
    close(fn(emu(x)), fn(x), dtype)
    stats.no_fallback()


@pytest.mark.parametrize("case", ["max_pool3d", "avg_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d",
                                  "adaptive_max_pool1d", "nearest3d", "nearest_exact1d", "linear1d_align",
                                  "trilinear", "bicubic", "bilinear_aa", "bicubic_aa", "unfold", "channel_shuffle"])
def test_backward_matches_cpu(stats, case):
    _, shape, fn = FORWARD[case]
    x = make(torch.float64, shape)
    grads = []
    for t in (x, emu(x)):
        t = t.clone().requires_grad_()
        y = fn(t)
        y = y[0] if isinstance(y, tuple) else y
        g = make(torch.float64, y.shape, seed=1).to(y.device)
        (y * g).sum().backward()
        grads.append(t.grad)
    close(grads[1], grads[0])
    stats.no_fallback()


def test_max_pool3d_nan_and_integers(stats):
    x = make(torch.float32, (1, 2, 4, 4, 4))
    x[0, 0, 1, 1, 1] = float("nan")
    close(F.max_pool3d(emu(x), 2, return_indices=True), F.max_pool3d(x, 2, return_indices=True))
    xi = make(torch.int64, (1, 2, 4, 4, 4))
    close(F.max_pool3d(emu(xi), 2), F.max_pool3d(xi, 2))
    stats.no_fallback()


def test_adaptive_max_nan(stats):
    x = make(torch.float32, (1, 2, 5, 5))
    x[0, 1, 2, 3] = float("nan")
    close(F.adaptive_max_pool2d(emu(x), 2, return_indices=True), F.adaptive_max_pool2d(x, 2, return_indices=True))
    stats.no_fallback()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_max_unpool_roundtrip_and_grad(stats, k):
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[k]
    unpool = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}[k]
    x = make(torch.float32, (2, 3) + (6,) * k)
    y, idx = pool(x, 2, return_indices=True)
    ref = unpool(y, idx, 2)
    ey = emu(y).requires_grad_()
    got = unpool(ey, emu(idx), 2)
    close(got, ref)
    got.sum().backward()
    torch.testing.assert_close(ey.grad.cpu(), torch.ones_like(y))
    assert stats.native(f"aten::max_unpool{max(k, 2)}d") > 0


def test_max_unpool_bad_index_is_a_clear_error():
    y = emu(torch.ones(1, 1, 2, 2))
    idx = emu(torch.tensor([[[[0, 1], [2, 99]]]]))
    keep = emu(torch.arange(4.0))
    with pytest.raises(RuntimeError, match="invalid max index"):
        F.max_unpool2d(y, idx, 2)
    torch.testing.assert_close(keep.cpu(), torch.arange(4.0))     # the context stays usable


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_2d(stats, mode, padding_mode, align_corners):
    x = make(torch.float32, (2, 3, 5, 6))
    grid = torch.rand(2, 4, 7, 2, generator=torch.Generator().manual_seed(3)) * 2.4 - 1.2
    ref = F.grid_sample(x, grid, mode, padding_mode, align_corners)
    close(F.grid_sample(emu(x), emu(grid), mode, padding_mode, align_corners), ref)
    assert stats.native("aten::grid_sampler_2d") > 0
    stats.no_fallback()


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_3d(stats, mode, padding_mode):
    x = make(torch.float32, (1, 2, 4, 5, 3))
    grid = torch.rand(1, 2, 3, 4, 3, generator=torch.Generator().manual_seed(4)) * 2.4 - 1.2
    ref = F.grid_sample(x, grid, mode, padding_mode, False)
    close(F.grid_sample(emu(x), emu(grid), mode, padding_mode, False), ref)
    assert stats.native("aten::grid_sampler_3d") > 0
    stats.no_fallback()


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fractional_max_pool(stats, k, dtype):
    fn = F.fractional_max_pool2d if k == 2 else F.fractional_max_pool3d
    x = make(dtype, (2, 3) + (9,) * k)
    samples = torch.rand(2, 3, k, generator=torch.Generator().manual_seed(5)).to(dtype)
    ref = fn(x, 2, output_size=(5,) * k, return_indices=True, _random_samples=samples)
    ex = emu(x).requires_grad_(dtype == torch.float64)
    got = fn(ex, 2, output_size=(5,) * k, return_indices=True, _random_samples=emu(samples))
    close(got, ref)
    if dtype == torch.float64:
        got[0].sum().backward()
        xr = x.clone().requires_grad_()
        fn(xr, 2, output_size=(5,) * k, _random_samples=samples).sum().backward()
        close(ex.grad, xr.grad)
    stats.no_fallback()


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_and_pdist(stats, p):
    a = make(torch.float64, (2, 4, 3))
    b = make(torch.float64, (2, 5, 3), seed=1)
    b[0, 0] = a[0, 0]          # a zero distance: its gradient is 0, not NaN
    grads = []
    for t1, t2 in ((a, b), (emu(a), emu(b))):
        t1, t2 = t1.clone().requires_grad_(), t2.clone().requires_grad_()
        d = torch.cdist(t1, t2, p, compute_mode="donot_use_mm_for_euclid_dist")
        d.sum().backward()
        grads.append((d, t1.grad, t2.grad))
    close(grads[1], grads[0])
    x = make(torch.float64, (5, 3))
    xs = [x.clone().requires_grad_(), emu(x).requires_grad_()]
    ds = [F.pdist(t, p) for t in xs]
    for d in ds:
        d.sum().backward()
    close((ds[1], xs[1].grad), (ds[0], xs[0].grad))
    assert stats.native("aten::_cdist_forward") > 0 and stats.native("aten::_pdist_forward") > 0
    stats.no_fallback()


def test_fold_matches_cpu(stats):
    cols = make(torch.float32, (2, 3 * 2 * 3, 20))
    ref = F.fold(cols, (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    close(F.fold(emu(cols), (6, 7), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), ref)
    assert stats.native("aten::col2im") > 0
    stats.no_fallback()


def test_empty_batch_and_zero_size_outputs(stats):
    x = torch.empty(0, 2, 4, 4, 4)
    close(F.avg_pool3d(emu(x), 2), F.avg_pool3d(x, 2))
    close(F.max_pool3d(emu(x), 2), F.max_pool3d(x, 2))
    close(F.interpolate(emu(x), size=(2, 3, 5), mode="trilinear"), F.interpolate(x, size=(2, 3, 5), mode="trilinear"))
    close(F.adaptive_avg_pool3d(emu(make(torch.float32, (1, 2, 3, 3, 3))), 0),
          F.adaptive_avg_pool3d(make(torch.float32, (1, 2, 3, 3, 3)), 0))
    stats.no_fallback()


def test_out_variants(stats):
    x = make(torch.float32, (2, 3, 5, 6, 7))
    ref = torch.ops.aten.avg_pool3d(x, [2, 2, 2], [2, 2, 2])
    out = emu(torch.empty(0))
    torch.ops.aten.avg_pool3d.out(emu(x), [2, 2, 2], [2, 2, 2], out=out)       # zero-element out: resized
    close(out, ref)
    strided = emu(torch.zeros(ref.shape[::-1])).permute(4, 3, 2, 1, 0)           # non-contiguous, right shape
    torch.ops.aten.avg_pool3d.out(emu(x), [2, 2, 2], [2, 2, 2], out=strided)
    close(strided, ref)
    assert strided.stride() == tuple(reversed(torch.empty(ref.shape[::-1]).stride()))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.aten.avg_pool3d.out(emu(x), [2, 2, 2], [2, 2, 2], out=emu(torch.empty(ref.shape, dtype=torch.float64)))
    up_ref = torch.ops.aten.upsample_trilinear3d(x, [3, 4, 5], False)
    up = emu(torch.empty(0))
    torch.ops.aten.upsample_trilinear3d.out(emu(x), [3, 4, 5], False, out=up)
    close(up, up_ref)
    vals, idx = emu(torch.empty(0)), emu(torch.empty(0, dtype=torch.long))
    torch.ops.aten.adaptive_max_pool3d.out(emu(x), [2, 3, 4], out=vals, indices=idx)
    close((vals, idx), torch.ops.aten.adaptive_max_pool3d(x, [2, 3, 4]))
    with pytest.raises(RuntimeError, match="long"):
        torch.ops.aten.adaptive_max_pool3d.out(emu(x), [2, 3, 4], out=vals, indices=emu(torch.empty(0)))
    stats.no_fallback()


def test_channels_last_3d_layout_kept(stats):
    x = make(torch.float32, (2, 3, 4, 5, 6)).to(memory_format=torch.channels_last_3d)
    ref = F.avg_pool3d(x, 2)
    got = F.avg_pool3d(emu(x), 2)
    close(got, ref)
    assert got.is_contiguous(memory_format=torch.channels_last_3d)
    stats.no_fallback()


def test_bad_inputs_give_cpu_like_errors():
    keep = emu(torch.arange(3.0))
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool3d(emu(torch.ones(1, 1, 4, 4, 4)), 2, padding=2)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool3d(emu(torch.ones(1, 1, 1, 4, 4)), 2)
    with pytest.raises(NotImplementedError, match="avg_pool3d"):
        F.avg_pool3d(emu(torch.ones(1, 1, 4, 4, 4, dtype=torch.float16)), 2)
    with pytest.raises(RuntimeError, match="non-negative p"):
        torch.cdist(emu(torch.ones(1, 2, 3)), emu(torch.ones(1, 2, 3)), -1.0)
    with pytest.raises(RuntimeError, match="too large relative"):
        F.fractional_max_pool2d(emu(torch.ones(1, 1, 4, 4)), 3, output_size=3,
                                _random_samples=emu(torch.rand(1, 1, 2)))
    torch.testing.assert_close(keep.cpu(), torch.arange(3.0))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss(stats, reduction, p, weighted):
    x = make(torch.float64, (4, 5)).t().contiguous().t()     # non-contiguous scores
    target = torch.tensor([0, 4, 2, 2])
    weight = make(torch.float64, (5,), seed=2).abs() if weighted else None
    results = []
    for dev in ("cpu", "emu"):
        xs = x.to(dev).detach().requires_grad_()
        loss = F.multi_margin_loss(xs, target.to(dev), p=p, margin=0.7, reduction=reduction,
                                   weight=None if weight is None else weight.to(dev))
        loss.sum().backward()
        results.append((loss, xs.grad))
    close(results[1], results[0])
    assert stats.native("aten::multi_margin_loss") > 0
    stats.no_fallback()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(stats, reduction):
    x = make(torch.float32, (3, 5))
    target = torch.tensor([[3, 0, -1, 1, 1], [1, 2, 4, 0, -1], [-1, 0, 0, 0, 0]])
    results = []
    for dev in ("cpu", "emu"):
        xs = x.to(dev).detach().requires_grad_()
        loss = F.multilabel_margin_loss(xs, target.to(dev), reduction=reduction)
        loss.sum().backward()
        results.append((loss, xs.grad))
    close(results[1], results[0])
    assert stats.native("aten::multilabel_margin_loss_forward") > 0
    stats.no_fallback()


def test_margin_loss_bad_target_is_a_clear_error():
    x = emu(torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="target out of range"):
        F.multi_margin_loss(x, emu(torch.tensor([0, 3])))
    with pytest.raises(RuntimeError, match="out of range"):
        F.multilabel_margin_loss(x, emu(torch.tensor([[0, 5, -1], [0, 1, 2]])))
    torch.testing.assert_close(x.cpu(), torch.ones(2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("flat_targets", [False, True])
def test_ctc_loss_forward(stats, dtype, flat_targets):
    T, N, C = 12, 3, 5
    log_probs = make(dtype, (T, N, C)).log_softmax(2)
    target_lengths = [4, 0, 6]
    input_lengths = [12, 7, 10]
    padded = torch.tensor([[1, 2, 2, 3, 0, 0], [0, 0, 0, 0, 0, 0], [4, 4, 1, 3, 2, 1]])
    targets = torch.cat([padded[b, :n] for b, n in enumerate(target_lengths)]) if flat_targets else padded
    ref = torch.ops.aten._ctc_loss(log_probs, targets, input_lengths, target_lengths, 0, False)
    got = torch.ops.aten._ctc_loss(emu(log_probs), emu(targets), input_lengths, target_lengths, 0, False)
    close(got[0], ref[0], dtype)
    for b in range(N):        # the reached part of log_alpha (CPU leaves the rest unwritten)
        close(got[1][b, :input_lengths[b], :2 * target_lengths[b] + 1], ref[1][b, :input_lengths[b], :2 * target_lengths[b] + 1],
              dtype)
    for reduction in ("mean", "sum", "none"):
        close(F.ctc_loss(emu(log_probs), emu(targets), input_lengths, target_lengths, reduction=reduction),
              F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction=reduction), dtype)
    assert stats.native("aten::_ctc_loss") > 0
    stats.no_fallback()


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, 4])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_embedding_bag_matches_cpu_with_aux_outputs(stats, mode, padding_idx, include_last_offset, dtype):
    w = make(dtype, (6, 3))
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0, 4, 4])
    off = torch.tensor([0, 2, 2, 5, 8] + ([10] if include_last_offset else []))
    args = (False, mode, False, None, include_last_offset, padding_idx)
    ref = torch.ops.aten._embedding_bag(w, idx, off, *args)
    got = torch.ops.aten._embedding_bag(emu(w), emu(idx), emu(off), *args)
    close(got[0], ref[0], dtype)
    for a, e in zip(got[1:], ref[1:]):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)
    assert stats.native("aten::_embedding_bag") > 0
    stats.no_fallback()


def test_embedding_bag_per_sample_weights_and_grad(stats):
    w = make(torch.float64, (7, 4))
    idx = torch.tensor([[1, 2, 6], [0, 0, 3]])
    psw = make(torch.float64, (2, 3), seed=2)
    grads = []
    for dev in ("cpu", "emu"):
        wt = w.to(dev).detach().requires_grad_()
        out = F.embedding_bag(idx.to(dev), wt, mode="sum", per_sample_weights=psw.to(dev))
        out.sum().backward()
        grads.append((out, wt.grad))
    close(grads[1], grads[0])
    with pytest.raises(IndexError, match="out of range"):
        F.embedding_bag(emu(torch.tensor([[1, 9]])), emu(w))


def test_embedding_bag_short_last_offset_runs_on_the_host(stats):
    # CPU's sum and mean/max paths disagree on indices past offsets[-1] with include_last_offset
    w, idx, off = make(torch.float32, (6, 3)), torch.tensor([1, 2, 4, 5]), torch.tensor([0, 2, 3])
    ref = torch.ops.aten._embedding_bag(w, idx, off, False, 1, False, None, True, -1)
    got = torch.ops.aten._embedding_bag(emu(w), emu(idx), emu(off), False, 1, False, None, True, -1)
    close(got[0], ref[0])
    assert stats.fallback("aten::_embedding_bag") > 0


# -- operands copied inside one launch stay alive until it is queued --------------------------------
# A copy made for a launch (reshape of a channels-last or non-contiguous tensor) that is dropped
# before the launch is queued frees its block, and the next copy of the same launch can take it:
# the kernel then reads the second operand twice. cdist's backward makes two such copies.
def test_cdist_backward_of_channels_last_inputs_matches_cpu():
    a = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last).requires_grad_()
    b = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last).requires_grad_()
    ae, be = (t.detach().to("emu").requires_grad_() for t in (a, b))
    g = torch.randn(2, 3, 4, 4)
    torch.cdist(a, b).backward(g)
    torch.cdist(ae, be).backward(g.to("emu"))
    torch.testing.assert_close(ae.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(be.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)

