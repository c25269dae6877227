"""The eval-mode attention fast paths (ops/attention.py): nn.MultiheadAttention,
nn.TransformerEncoderLayer and nn.TransformerEncoder reach aten::_native_multi_head_attention and
aten::_transformer_encoder_layer_fwd, which run on the device as composites, with the host fallback
forbidden, and match CPU (float32: rtol 1e-5, atol 1e-5; the only differences are the summation
orders of the GEMMs and softmax).
"""
import copy
import warnings

import pytest
import torch
from torch import nn

F32 = dict(rtol=1e-5, atol=1e-5)
B, T, D, H = 3, 6, 16, 4


@pytest.fixture(autouse=True)
def forbid_host_fallback():
    torch.emu.reset_op_stats()
    with torch.no_grad(), torch.emu.host_fallback("forbid"):
        yield
    assert not torch.emu.op_stats()["host_fallback"], torch.emu.op_stats()["host_fallback"]


def _composites():
    return torch.emu.op_stats()["composite"]


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[0, 4:] = True          # left aligned: tokens first, padding at the end
    padding[2, 1:] = True
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    return x, padding, causal


def _emu(t):
    return None if t is None else t.to("emu")


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "both"])
def test_encoder_layer_matches_cpu(norm_first, activation, masks):
    torch.manual_seed(0)
    x, padding, causal = _inputs()
    layer = nn.TransformerEncoderLayer(D, H, 32, dropout=0.1, activation=activation, batch_first=True,
                                       norm_first=norm_first).eval()
    kwargs = {"none": {}, "padding": {"src_key_padding_mask": padding}, "causal": {"src_mask": causal},
              "both": {"src_mask": causal, "src_key_padding_mask": padding}}[masks]
    expected = layer(x, **kwargs)
    got = copy.deepcopy(layer).to("emu")(x.to("emu"), **{k: _emu(v) for k, v in kwargs.items()})
    torch.testing.assert_close(got.cpu(), expected, **F32)
    assert _composites().get("aten::_transformer_encoder_layer_fwd") == 1
    assert _composites().get("aten::_native_multi_head_attention") == 1
    assert _composites().get("aten::_masked_softmax", 0) == (0 if masks == "none" else 1)


def test_encoder_layer_float_mask_is_made_boolean_as_on_cpu():
    # The fast path turns any floating mask into a boolean one (non-zero: masked), as CPU does.
    torch.manual_seed(1)
    x, _, causal = _inputs(1)
    layer = nn.TransformerEncoderLayer(D, H, 32, batch_first=True).eval()
    mask = torch.zeros(T, T).masked_fill(causal, -1.0)
    expected = layer(x, src_mask=mask)
    got = copy.deepcopy(layer).to("emu")(x.to("emu"), src_mask=mask.to("emu"))
    torch.testing.assert_close(got.cpu(), expected, **F32)


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("masks", ["none", "causal", "padding_not_left_aligned"])
def test_encoder_matches_cpu(nested, masks):
    torch.manual_seed(2)
    x, _, causal = _inputs(2)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1, 0] = True           # a padded token before real ones: not left aligned
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "enable_nested_tensor is True, but ..." where it does not apply
        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 32, batch_first=True), 2,
                                        enable_nested_tensor=nested).eval()
    kwargs = {"none": {}, "causal": {"mask": causal},
              "padding_not_left_aligned": {"src_key_padding_mask": padding}}[masks]
    expected = encoder(x, **kwargs)
    got = copy.deepcopy(encoder).to("emu")(x.to("emu"), **{k: _emu(v) for k, v in kwargs.items()})
    torch.testing.assert_close(got.cpu(), expected, **F32)
    assert _composites().get("aten::_transformer_encoder_layer_fwd") == 2
    if nested and masks == "padding_not_left_aligned":
        assert _composites().get("aten::_nested_tensor_from_mask_left_aligned") == 1


def test_encoder_padding_mask_without_nested_tensors_matches_cpu():
    torch.manual_seed(3)
    x, padding, _ = _inputs(3)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 32, batch_first=True), 2,
                                    enable_nested_tensor=False).eval()
    expected = encoder(x, src_key_padding_mask=padding)
    got = copy.deepcopy(encoder).to("emu")(x.to("emu"), src_key_padding_mask=padding.to("emu"))
    torch.testing.assert_close(got.cpu(), expected, **F32)


def test_encoder_nested_tensor_path_is_a_clear_rejection():
    # A left-aligned padding mask makes the encoder pack its input into a nested tensor: the device
    # has none, and the error names the op and the way round (enable_nested_tensor=False).
    torch.manual_seed(4)
    x, padding, _ = _inputs(4)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 32, batch_first=True), 2,
                                    enable_nested_tensor=True).eval().to("emu")
    xe = x.to("emu")
    with pytest.raises(NotImplementedError, match=r"aten::_nested_tensor_from_mask: nested tensors .*"
                                                   r"enable_nested_tensor=False"):
        encoder(xe, src_key_padding_mask=padding.to("emu"))
    assert torch.emu.op_stats()["rejection"].get("aten::_nested_tensor_from_mask") == 1
    torch.testing.assert_close(xe.cpu(), x, rtol=0, atol=0)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "both", "causal_3d"])
def test_multihead_attention_matches_cpu(need_weights, average, masks):
    torch.manual_seed(5)
    x, padding, causal = _inputs(5)
    mha = nn.MultiheadAttention(D, H, batch_first=True).eval()
    causal_3d = causal.expand(B * H, T, T).clone()
    causal_3d[1, 3, :] = False
    kwargs = {"none": {}, "padding": {"key_padding_mask": padding}, "causal": {"attn_mask": causal},
              "both": {"key_padding_mask": padding, "attn_mask": causal},
              "causal_3d": {"attn_mask": causal_3d}}[masks]
    out, weights = mha(x, x, x, need_weights=need_weights, average_attn_weights=average, **kwargs)
    xe = x.to("emu")
    got, got_weights = copy.deepcopy(mha).to("emu")(xe, xe, xe, need_weights=need_weights,
                                                    average_attn_weights=average,
                                                    **{k: _emu(v) for k, v in kwargs.items()})
    torch.testing.assert_close(got.cpu(), out, **F32)
    if need_weights:
        assert got_weights.shape == weights.shape == ((B, T, T) if average else (B, H, T, T))
        torch.testing.assert_close(got_weights.cpu(), weights, **F32)
    else:
        assert got_weights is None and weights is None
    assert _composites().get("aten::_native_multi_head_attention") == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_multihead_attention_reduced_precision_against_float64(dtype):
    # CPU's own half kernels round differently per instruction set: the reference is the same
    # module and input (already rounded to dtype) in float64; the bound is 4 ulps of dtype at the
    # largest expected value (at least 1.0), for the roundings of the GEMMs' inputs and results.
    torch.manual_seed(13)
    x, padding, _ = _inputs(13)
    mha = nn.MultiheadAttention(D, H, batch_first=True).eval().to(dtype)
    reference = copy.deepcopy(mha).double()
    xd = x.to(dtype).double()
    out64, weights64 = reference(xd, xd, xd, key_padding_mask=padding)
    xe = x.to(dtype).to("emu")
    out, weights = copy.deepcopy(mha).to("emu")(xe, xe, xe, key_padding_mask=padding.to("emu"))
    assert out.dtype == weights.dtype == dtype
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(out.cpu().double(), out64, rtol=0, atol=4 * ulp * max(1.0, out64.abs().max().item()))
    torch.testing.assert_close(weights.cpu().double(), weights64, rtol=0, atol=4 * ulp)  # weights <= 1
    assert _composites().get("aten::_native_multi_head_attention") == 1


def test_multihead_attention_fully_masked_row_is_nan_as_on_cpu():
    torch.manual_seed(6)
    x, _, _ = _inputs(6)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1] = True
    mha = nn.MultiheadAttention(D, H, batch_first=True).eval()
    out, weights = mha(x, x, x, key_padding_mask=padding)
    xe = x.to("emu")
    got, got_weights = copy.deepcopy(mha).to("emu")(xe, xe, xe, key_padding_mask=padding.to("emu"))
    assert torch.isnan(out[1]).all()
    torch.testing.assert_close(got.cpu(), out, equal_nan=True, **F32)
    torch.testing.assert_close(got_weights.cpu(), weights, equal_nan=True, **F32)


def _mha_args(seed=7, tokens=T):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, tokens, D, generator=g)
    return (x, torch.randn(3 * D, D, generator=g) / 4, torch.randn(3 * D, generator=g),
            torch.randn(D, D, generator=g) / 4, torch.randn(D, generator=g))


@pytest.mark.parametrize("operands", ["self", "shared_kv", "distinct"])
def test_native_multi_head_attention_op_matches_cpu(operands):
    x, w, b, pw, pb = _mha_args()
    g = torch.Generator().manual_seed(8)
    other = torch.randn(B, T, D, generator=g)
    third = torch.randn(B, T, D, generator=g)
    q, k, v = {"self": (x, x, x), "shared_kv": (x, other, other), "distinct": (x, other, third)}[operands]
    expected = torch._native_multi_head_attention(q, k, v, D, H, w, b, pw, pb, None, True, False)
    qe = q.to("emu")
    ke = qe if k is q else k.to("emu")
    ve = ke if v is k else v.to("emu")
    got = torch._native_multi_head_attention(qe, ke, ve, D, H, *map(_emu, (w, b, pw, pb)), None, True, False)
    for g_, e in zip(got, expected):
        torch.testing.assert_close(g_.cpu(), e, **F32)


def test_native_multi_head_attention_empty_batch():
    x, w, b, pw, pb = _mha_args()
    x = x[:0]
    xe = x.to("emu")
    for need_weights in (True, False):
        expected = torch._native_multi_head_attention(x, x, x, D, H, w, b, pw, pb, None, need_weights)
        got = torch._native_multi_head_attention(xe, xe, xe, D, H, *map(_emu, (w, b, pw, pb)), None, need_weights)
        assert got[0].shape == expected[0].shape == (0, T, D)
        assert got[1] is None and expected[1] is None  # CPU returns no weights for an empty batch


@pytest.mark.parametrize("case", ["query_2d", "embed_dim", "shapes", "weight_rows", "bias_1d", "heads"])
def test_native_multi_head_attention_bad_arguments_like_cpu(case):
    x, w, b, pw, pb = _mha_args()
    args = {"query_2d": (x[0], x[0], x[0], D, H, w, b, pw, pb),
            "embed_dim": (x, x, x, D + 1, H, w, b, pw, pb),
            "shapes": (x, x[:, :2], x, D, H, w, b, pw, pb),
            "weight_rows": (x, x, x, D, H, w[:-1], b, pw, pb),
            "bias_1d": (x, x, x, D, H, w, b[None], pw, pb),
            "heads": (x, x, x, D, 5, w, b, pw, pb)}[case]
    with pytest.raises(RuntimeError) as cpu:
        torch._native_multi_head_attention(*args)
    moved = tuple(a.to("emu") if isinstance(a, torch.Tensor) else a for a in args)
    with pytest.raises(RuntimeError) as emu:
        torch._native_multi_head_attention(*moved)
    assert str(emu.value).splitlines()[0] == str(cpu.value).splitlines()[0]


def test_transform_bias_rescale_qkv_matches_cpu():
    g = torch.Generator().manual_seed(9)
    qkv, bias = torch.randn(B, T, 3 * D, generator=g), torch.randn(3 * D, generator=g)
    expected = torch._transform_bias_rescale_qkv(qkv, bias, H)
    got = torch._transform_bias_rescale_qkv(qkv.to("emu"), bias.to("emu"), H)
    for g_, e in zip(got, expected):
        assert g_.shape == e.shape == (B, H, T, D // H)
        torch.testing.assert_close(g_.cpu(), e, **F32)
    assert _composites().get("aten::_transform_bias_rescale_qkv") == 1


def _softmax_cases():
    g = torch.Generator().manual_seed(10)
    scores = torch.randn(B, H, T, T, generator=g)
    padding = torch.rand(B, T, generator=g) > 0.6
    padding[1] = True                           # a fully masked batch row: NaN, as on CPU
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    full = torch.rand(B, H, T, T, generator=g) > 0.5
    return scores, {"type0": (causal, 0), "type1": (padding, 1), "type2": (full, 2)}


@pytest.mark.parametrize("case", ["type0", "type1", "type2"])
@pytest.mark.parametrize("dim", [3, -1, 2, None])
def test_masked_softmax_matches_cpu(case, dim):
    scores, cases = _softmax_cases()
    mask, mask_type = cases[case]
    expected = torch._masked_softmax(scores, mask, dim, mask_type)
    got = torch._masked_softmax(scores.to("emu"), mask.to("emu"), dim, mask_type)
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **F32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masked_softmax_reduced_precision_against_float64(dtype):
    # CPU's own half kernels round differently per instruction set: compare with float64 and the
    # bound of one rounding of a value in [0, 1] (2**-11 float16, 2**-8 bfloat16) plus accumulation.
    scores, cases = _softmax_cases()
    mask, mask_type = cases["type2"]
    x = scores.to(dtype)
    reference = torch._masked_softmax(x.double(), mask, 3, mask_type)
    got = torch._masked_softmax(x.to("emu"), mask.to("emu"), 3, mask_type)
    assert got.dtype == dtype
    bound = 2 * (2 ** -11 if dtype == torch.float16 else 2 ** -8)
    torch.testing.assert_close(got.cpu().double(), reference, rtol=0, atol=bound, equal_nan=True)


@pytest.mark.parametrize("case", ["not_bool", "type_none", "type2_shape", "type0_shape", "type1_shape"])
def test_masked_softmax_bad_arguments_like_cpu(case):
    scores, cases = _softmax_cases()
    causal, padding = cases["type0"][0], cases["type1"][0]
    args = {"not_bool": (scores, causal.float(), 3, 0), "type_none": (scores, causal, 3, None),
            "type2_shape": (scores, causal, 3, 2), "type0_shape": (scores, padding[:, :3], 3, 0),
            "type1_shape": (scores, causal[:2], 3, 1)}[case]
    with pytest.raises(RuntimeError) as cpu:
        torch._masked_softmax(*args)
    with pytest.raises(RuntimeError) as emu:
        torch._masked_softmax(args[0].to("emu"), args[1].to("emu"), *args[2:])
    assert str(emu.value).splitlines()[0] == str(cpu.value).splitlines()[0]


def test_masked_softmax_backward_matches_cpu():
    scores, cases = _softmax_cases()
    mask = cases["type2"][0].clone()
    mask[0, 0, 0] = True                         # a fully masked row: NaN output, zero gradient
    grad = torch.randn(scores.shape, generator=torch.Generator().manual_seed(12))
    with torch.enable_grad():
        x = scores.clone().requires_grad_(True)
        torch._masked_softmax(x, mask, 3, 2).backward(grad)
        xe = scores.to("emu").requires_grad_(True)
        torch._masked_softmax(xe, mask.to("emu"), 3, 2).backward(grad.to("emu"))
    torch.testing.assert_close(xe.grad.cpu(), x.grad, **F32)
    assert torch.emu.op_stats()["composite"].get("aten::_masked_softmax_backward") == 1
    with pytest.raises(RuntimeError, match="Mask shape should match grad shape"):
        torch.ops.aten._masked_softmax_backward(grad.to("emu"), grad.to("emu"), mask[0].to("emu"), 3)


def test_nested_tensor_left_aligned_matches_cpu():
    x, padding, _ = _inputs()
    valid = padding.logical_not()
    shuffled = valid.clone()
    shuffled[0, 0] = False
    for mask in (valid, shuffled, torch.ones(B, T, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool)):
        expected = torch._nested_tensor_from_mask_left_aligned(x, mask)
        assert torch._nested_tensor_from_mask_left_aligned(x.to("emu"), mask.to("emu")) is expected


class _VitBlock(nn.Module):
    """torchvision's vit_b_16 encoder block in small (torchvision cannot be installed here): pre-norm
    nn.MultiheadAttention called as self_attention(x, x, x, need_weights=False), then a GELU MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout=0.1, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(2 * dim, dim),
                                 nn.Dropout(0.1))

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class _TinyVit(nn.Module):
    def __init__(self, dim=16, heads=4, patch=4, image=16, classes=5):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, patch, patch)
        self.class_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(_VitBlock(dim, heads), _VitBlock(dim, heads))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.blocks(x))[:, 0])


def test_vit_style_model_in_eval_runs_on_the_device():
    torch.manual_seed(11)
    model = _TinyVit().eval()
    images = torch.randn(2, 3, 16, 16)
    expected = model(images)
    got = copy.deepcopy(model).to("emu")(images.to("emu"))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)  # through a convolution too
    assert _composites().get("aten::_native_multi_head_attention") == 2
