"""The attention fast paths that eval-mode ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``
and ``nn.TransformerEncoder`` reach (torch/nn/modules/activation.py and transformer.py call them when
the module is in eval mode, batch_first, with grad off or no parameter requiring it), as composites
of device ops: linear (the matrix engine), softmax, layer_norm, masked_fill, gelu/relu.

* ``_transform_bias_rescale_qkv(qkv, qkv_bias, num_heads)``: ``qkv`` (B, T, 3D) plus the bias,
  split into q, k, v of shape (B, num_heads, T, D / num_heads); q is scaled by
  1 / sqrt(D / num_heads). The three are views of one (3, B, H, T, Dh) buffer, as on CPU.
* ``_masked_softmax(self, mask, dim, mask_type)``: softmax over ``dim`` with the elements where the
  boolean ``mask`` is true left out. mask_type 0: an (L, L) attention mask of a (B, H, L, L) input;
  1: a (B, L) key-padding mask; 2 (and every mask that is not 2-d, or an input that is not 4-d):
  a mask of the input's shape. A row with every element masked is NaN, as CPU's.
* ``_masked_softmax_backward(grad_output, output, mask, dim)``: its gradient (mask of the
  output's shape, as CPU requires).
* ``_native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
  proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type)`` -> (out, weights):
  the in-projection, the scaled scores, ``_masked_softmax`` (any floating mask is made boolean:
  non-zero means masked, as CPU does), the context and the out-projection. weights: (B, H, T, T),
  or averaged over the heads (B, T, T), or None when ``need_weights`` is false.
* ``_transformer_encoder_layer_fwd(...)``: one encoder layer (post- or pre-norm) around the above
  and a relu/gelu feed-forward block.

* ``_nested_tensor_from_mask_left_aligned(t, mask)``: whether every row of the (N, L) boolean
  ``mask`` (true: a token) is a run of trues followed by falses (``nn.TransformerEncoder`` asks
  before it builds a nested tensor), on the device.

CPU runs the no-weights, no-mask case through scaled_dot_product_attention; the math is the same
and so are the values within float32 tolerances. Left out: nested tensors. ``nn.TransformerEncoder``
with ``enable_nested_tensor=True`` (its default), in eval mode and with a left-aligned
``src_key_padding_mask``, packs its input into one with ``aten::_nested_tensor_from_mask``: that op
is rejected (NotImplementedError naming it and the way round: ``enable_nested_tensor=False`` gives
the same values on the padded tensor). The ``.out`` overloads are not registered (no module
reaches them).
"""
from __future__ import annotations

import math

import torch

from torch_plugin import _C
from torch_plugin._dtypes import scalar_type_name
from torch_plugin.errors import unsupported_dtype
from torch_plugin.ops._common import broadcast_shape, broadcast_strides, common_device, current_stream, device_ref, rt
from torch_plugin.ops._overloads import Overloads
from torch_plugin.ops.registry import composite

OVERLOADS = Overloads(__name__)

_NESTED_WHY = ("nested tensors are not supported on emu (nn.TransformerEncoder's fast path with "
               "enable_nested_tensor=True and a src_key_padding_mask packs its input into one: build the "
               "encoder with enable_nested_tensor=False, which gives the same values on the padded tensor)")
_NESTED = "aten::{op}: " + _NESTED_WHY


def _reject_nested(op: str, *tensors) -> None:
    if any(t is not None and t.is_nested for t in tensors):
        raise NotImplementedError(_NESTED.format(op=op))


# -- nested tensors: the left-alignment test runs, building one is rejected -----------------------
@OVERLOADS.implements("_nested_tensor_from_mask_left_aligned")
@composite
def nested_tensor_from_mask_left_aligned(t, mask):
    common_device("aten::_nested_tensor_from_mask_left_aligned", t, mask)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"Expected mask to be of ScalarType Bool, but got {scalar_type_name(mask.dtype)} instead.")
    if mask.dim() != 2:
        raise RuntimeError("Padding mask should be 2D")
    if t.dim() != 3:
        raise RuntimeError("Input should be a 3D tensor, N * L * D")
    if tuple(t.shape[:2]) != tuple(mask.shape):
        raise RuntimeError("Mask size should match input size")
    tokens = mask.sum(1, keepdim=True)                         # (N, 1) tokens per row
    positions = torch.arange(mask.shape[1], device=mask.device)
    return torch.equal(positions < tokens, mask)               # left aligned: the first `tokens` only


@OVERLOADS.implements("_nested_tensor_from_mask")
def nested_tensor_from_mask(t, mask, mask_check=True):
    raise NotImplementedError("aten::_nested_tensor_from_mask: " + _NESTED_WHY)


# -- _transform_bias_rescale_qkv -------------------------------------------------------------------
@OVERLOADS.implements("_transform_bias_rescale_qkv")
@composite
def transform_bias_rescale_qkv(qkv, qkv_bias, num_heads):
    op = "aten::_transform_bias_rescale_qkv"
    _reject_nested("_transform_bias_rescale_qkv", qkv, qkv_bias)
    common_device(op, qkv, qkv_bias)
    if qkv.dim() != 3:
        raise RuntimeError(f"expected 3-D `qkv`, got {qkv.dim()}-D tensor")
    if qkv_bias.dim() != 1:
        raise RuntimeError(f"expected 1-D `qkv_bias`, got {qkv_bias.dim()}-D tensor")
    batch, tokens, three_d = qkv.shape
    if three_d % 3 != 0:
        raise RuntimeError("qkv last dimension must be a multiple of 3 (q, k and v)")
    embed = three_d // 3
    if num_heads <= 0 or embed % num_heads != 0:
        raise RuntimeError("transform_bias_rescale_qkv: number of heads must divide the embedding dim")
    if qkv_bias.shape[0] != three_d:
        raise RuntimeError(f"transform_bias_rescale_qkv: qkv_bias has {qkv_bias.shape[0]} elements, "
                           f"expected {three_d} (3 x embed_dim)")
    head = embed // num_heads
    # (B, T, 3, H, Dh) -> (3, B, H, T, Dh): one contiguous buffer whose three slices are q, k, v.
    parts = (qkv + qkv_bias).view(batch, tokens, 3, num_heads, head).permute(2, 0, 3, 1, 4).contiguous()
    parts[0].mul_(1.0 / math.sqrt(head))
    return parts[0], parts[1], parts[2]


# -- _masked_softmax -------------------------------------------------------------------------------
def _broadcast_mask(x, mask, dim: int, mask_type):
    """The boolean mask broadcastable to ``x`` (CPU's shape rules and messages)."""
    if mask.dim() != 2 or x.dim() != 4:
        mask_type = 2  # types 0 and 1 describe 2-d masks of 4-d inputs only
    if mask_type is None:
        raise RuntimeError("Mask Type should be defined")
    if mask_type == 2:
        if tuple(x.shape) != tuple(mask.shape):
            raise RuntimeError("For mask_type == 2 mask shape should match input shape")
        return mask
    batch, _, rows, cols = x.shape
    if mask_type == 1:
        if batch != mask.shape[0] or rows != mask.shape[1]:
            raise RuntimeError("For mask_type == 1 mask shape should be (B, L)")
        shaped = mask.view(batch, 1, 1, mask.shape[1])
    elif mask_type == 0:
        if not (rows == mask.shape[0] == mask.shape[1]):
            raise RuntimeError("For mask_type == 0 mask shape should be (L, L)")
        shaped = mask.view(1, 1, rows, rows)
    else:
        raise RuntimeError(f"Unknown mask_type {mask_type} (0: (L, L), 1: (B, L), 2: the input's shape)")
    if cols != rows:  # CPU reads past a (B, L) or (L, L) mask row here; a clear error instead
        raise RuntimeError(f"_masked_softmax: a mask of mask_type {mask_type} needs a square (B, H, L, L) "
                           f"input, got {list(x.shape)}")
    return shaped


def _masked_softmax(x, mask, dim, mask_type):
    d = x.dim() - 1 if dim is None else dim
    if not -max(x.dim(), 1) <= d < max(x.dim(), 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(x.dim(), 1)}, "
                         f"{max(x.dim(), 1) - 1}], but got {d})")
    shaped = _broadcast_mask(x, mask, d, mask_type)
    # -inf where masked: those elements take no part in the row's max or sum and come out 0; a
    # row masked throughout is NaN (exp(-inf - -inf)), as CPU's masked softmax gives.
    return torch.softmax(x.masked_fill(shaped, float("-inf")), d)


@OVERLOADS.implements("_masked_softmax")
@composite
def masked_softmax(self, mask, dim=None, mask_type=None):
    _reject_nested("_masked_softmax", self, mask)
    common_device("aten::_masked_softmax", self, mask)
    if mask.dtype != torch.bool:
        raise RuntimeError("Mask should be a boolean tensor")
    if not (self.is_floating_point()):
        raise RuntimeError(f"\"masked_softmax\" not implemented for '{scalar_type_name(self.dtype)}'")
    return _masked_softmax(self, mask, dim, mask_type)


@OVERLOADS.implements("_masked_softmax_backward")
@composite
def masked_softmax_backward(grad_output, output, mask, dim=None):
    """The gradient of _masked_softmax (what autograd reaches when its input requires grad):
    ``output * (grad - sum(grad * output))`` over ``dim``, zero where masked (a fully masked row's
    gradient is zero, as CPU's, though its output is NaN)."""
    _reject_nested("_masked_softmax_backward", grad_output, output, mask)
    common_device("aten::_masked_softmax_backward", grad_output, output, mask)
    if mask.dtype != torch.bool:
        raise RuntimeError("Mask should be a boolean tensor")
    if tuple(mask.shape) != tuple(grad_output.shape) or tuple(output.shape) != tuple(grad_output.shape):
        raise RuntimeError("Mask shape should match grad shape")
    d = grad_output.dim() - 1 if dim is None else dim
    product = (grad_output * output).masked_fill_(mask, 0.0)
    return output.mul(grad_output - product.sum(d, keepdim=True)).masked_fill_(mask, 0.0)


# -- _native_multi_head_attention -----------------------------------------------------------------
def _check_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias) -> None:
    """CPU's argument checks (aten's native_multi_head_attention), in its order and words."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 3:
            raise RuntimeError(f"expected 3-D `{name}`, got {t.dim()}-D tensor")
        if name == "query" and t.shape[2] != embed_dim:
            raise RuntimeError(f"passed-in embed_dim {embed_dim} didn't match last dim of query {t.shape[2]}")
    if not (query.shape == key.shape == value.shape):
        raise RuntimeError("expected `query`/`key`/`value` shapes to match")
    if qkv_weight.dim() != 2:
        raise RuntimeError(f"expected 2-D `qkv_weight`, got {qkv_weight.dim()}-D tensor")
    if qkv_weight.shape[0] != 3 * embed_dim:
        raise RuntimeError("expected `qkv_weight` first dim to be 3x embed_dim")
    if qkv_weight.shape[1] != embed_dim:
        raise RuntimeError("expected `qkv_weight` second dim to be embed_Dim")
    if qkv_bias.dim() != 1:
        raise RuntimeError(f"expected 1-D `qkv_bias`, got {qkv_bias.dim()}-D tensor")
    if qkv_bias.shape[0] != 3 * embed_dim:
        raise RuntimeError("expected `qkv_bias` first dim and first dim of query to be equal")
    if num_head <= 0 or embed_dim % num_head != 0:
        raise RuntimeError("`embed_dim` must divide evenly by `num_heads`")


def _qkv_projection(query, key, value, embed_dim: int, qkv_weight):
    """(B, T, 3D) without the bias: one GEMM for self-attention, one per distinct operand otherwise."""
    if query is key and key is value:
        return torch.nn.functional.linear(query, qkv_weight)
    q = torch.nn.functional.linear(query, qkv_weight[:embed_dim])
    if key is value:
        kv = torch.nn.functional.linear(key, qkv_weight[embed_dim:])
        return torch.cat([q, kv], dim=2)
    k = torch.nn.functional.linear(key, qkv_weight[embed_dim:2 * embed_dim])
    v = torch.nn.functional.linear(value, qkv_weight[2 * embed_dim:])
    return torch.cat([q, k, v], dim=2)


@OVERLOADS.implements("_native_multi_head_attention")
@composite
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    op = "aten::_native_multi_head_attention"
    _reject_nested("_native_multi_head_attention", query, key, value, mask)
    common_device(op, *(t for t in (query, key, value, qkv_weight, qkv_bias, proj_weight, proj_bias, mask)
                        if t is not None))
    _check_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias)
    batch, tokens, _ = query.shape
    qkv = _qkv_projection(query, key, value, embed_dim, qkv_weight)
    if qkv.numel() == 0:  # CPU returns no weights here, whatever need_weights says
        return query.new_empty(query.shape), None
    q, k, v = torch._transform_bias_rescale_qkv(qkv, qkv_bias, num_head)
    del qkv
    if mask is None and not need_weights:
        # CPU's fast path runs SDPA here too: the fused kernel, no (B, H, T, T) scores (q is scaled)
        context = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 0.0, False,
                                                                                  False, scale=1.0)[0]
        merged = context.transpose(1, 2).reshape(batch, tokens, embed_dim)
        return torch.nn.functional.linear(merged, proj_weight, proj_bias), None
    scores = torch.matmul(q, k.transpose(-2, -1))           # (B, H, T, T); q is already scaled
    if mask is not None:
        scores = torch._masked_softmax(scores, mask if mask.dtype == torch.bool else mask.to(torch.bool),
                                       scores.dim() - 1, mask_type)
    else:
        scores = torch.softmax(scores, -1)
    context = torch.matmul(scores, v)                      # (B, H, T, Dh)
    merged = context.transpose(1, 2).reshape(batch, tokens, embed_dim)
    out = torch.nn.functional.linear(merged, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_attn_weights:
        scores = scores.sum(1).div_(num_head)
    return out, scores


# -- _transformer_encoder_layer_fwd -----------------------------------------------------------------
def _norm(x, embed_dim: int, eps: float, weight, bias):
    return torch.nn.functional.layer_norm(x, (embed_dim,), weight, bias, eps)


@OVERLOADS.implements("_transformer_encoder_layer_fwd")
@composite
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    _reject_nested("_transformer_encoder_layer_fwd", src, mask)
    common_device("aten::_transformer_encoder_layer_fwd",
                  *(t for t in (src, qkv_weight, qkv_bias, proj_weight, proj_bias, norm_weight_1, norm_bias_1,
                                norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                                mask) if t is not None))
    if src.numel() == 0:
        return src.clone()
    x = _norm(src, embed_dim, eps, norm_weight_1, norm_bias_1) if norm_first else src
    x = torch._native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                           proj_bias, mask, False, True, mask_type)[0]
    x.add_(src)
    if not norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_2, norm_bias_2)
    x = torch.nn.functional.linear(x, ffn_weight_1, ffn_bias_1)
    x = torch.nn.functional.gelu(x) if use_gelu else torch.relu(x)
    x = torch.nn.functional.linear(x, ffn_weight_2, ffn_bias_2)
    x.add_(residual)
    if not norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_2, norm_bias_2)
    return x


# -- scaled_dot_product_attention: the fused path --------------------------------------------------
# ATen asks _fused_sdp_choice_stub which backend runs F.scaled_dot_product_attention; the C++ core
# (csrc/sdp_choice.cpp) hands the question to aten::_fused_sdp_choice on PrivateUse1, answered here:
# SDPBackend.OVERRIDEABLE, so that ATen calls _scaled_dot_product_fused_attention_overrideable (one
# device kernel, emulator/kernels/attention.pyx), or MATH where the fused kernel does not apply.
_MATH, _OVERRIDEABLE, _NO_BACKEND = 0, 4, -1      # torch.nn.attention.SDPBackend's values
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SDPA = "aten::_scaled_dot_product_fused_attention_overrideable"


def _fused_applies(query, key, value, attn_mask, is_causal: bool, enable_gqa: bool) -> bool:
    """Whether the fused kernel computes what the math path would. Everything else goes to the math
    path, which either computes it (batch dims that broadcast, ranks other than 3 and 4) or raises
    CPU's error (heads that differ without enable_gqa, a mask beside is_causal)."""
    tensors = (query, key, value) + (() if attn_mask is None else (attn_mask,))
    if any(t.device.type != "emu" or t.is_nested or t.layout != torch.strided for t in tensors):
        return False
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        return False
    if query.dtype not in _FUSED_DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        return False
    if query.shape[:-3] != key.shape[:-3] or key.shape[:-1] != value.shape[:-1] or key.shape[-1] != query.shape[-1]:
        return False
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if heads != kv_heads and not (enable_gqa and heads % kv_heads == 0):
        return False
    if min(query.numel(), key.numel(), value.numel()) == 0:
        return False
    if attn_mask is not None:
        if is_causal or attn_mask.dim() > 4 or not (attn_mask.dtype == torch.bool or attn_mask.is_floating_point()):
            return False
        try:
            target = (*query.shape[:-1], key.shape[-2])
            if broadcast_shape(tuple(attn_mask.shape), target) != target:
                return False
        except RuntimeError:
            return False
    return True


@OVERLOADS.implements("_fused_sdp_choice")
def fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                     enable_gqa=False):
    """aten::_fused_sdp_choice on emu: the backend F.scaled_dot_product_attention takes. Honours
    torch.nn.attention.sdpa_kernel (its OVERRIDEABLE and MATH switches)."""
    if torch._C._get_overrideable_sdp_enabled() and _fused_applies(query, key, value, attn_mask, is_causal,
                                                                      enable_gqa):
        return _OVERRIDEABLE
    return _MATH if torch._C._get_math_sdp_enabled() else _NO_BACKEND


def _as_4d(t):
    """(shape, strides) of a 3-d (H, L, D) or 4-d (B, H, L, D) operand as 4-d."""
    if t.dim() == 3:
        return (1, *t.shape), (0, *t.stride())
    return tuple(t.shape), t.stride()


def _ref4(t):
    shape, strides = _as_4d(t)
    return device_ref(t, shape, strides)


def _bias_ref(op: str, bias, query, key):
    """The bias read as (B, Hq, Lq, Lk), stride 0 on its broadcast dims."""
    if bias is None:
        return None
    if bias.dim() > 4 or not (bias.dtype == torch.bool or bias.is_floating_point()):
        raise RuntimeError(f"{op}: attn_bias must be a boolean or floating tensor of at most 4 dims, got "
                           f"{bias.dtype} of {bias.dim()} dims")
    shape = _as_4d(query)[0][:3] + (key.shape[-2],)
    try:
        broadcast = broadcast_shape(tuple(bias.shape), shape)
    except RuntimeError:
        broadcast = None
    if broadcast != shape:
        raise RuntimeError(f"{op}: attn_bias of shape {list(bias.shape)} does not broadcast to the scores' "
                           f"shape {list(shape)}")
    return device_ref(bias, shape, broadcast_strides(bias, shape))


def _check_fused(op: str, query, key, value) -> None:
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        raise RuntimeError(f"{op}: query, key and value must all be 3-d (H, L, E) or 4-d (B, H, L, E), got "
                           f"{query.dim()}, {key.dim()} and {value.dim()} dims")
    if query.dtype not in _FUSED_DTYPES:
        raise unsupported_dtype(op, query.dtype, _FUSED_DTYPES)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise RuntimeError(f"{op}: Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} "
                           "instead.")
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if query.shape[:-3] != key.shape[:-3] or key.shape[:-1] != value.shape[:-1] \
            or key.shape[-1] != query.shape[-1] or kv_heads == 0 or heads % kv_heads:
        raise RuntimeError(f"{op}: shapes query {list(query.shape)}, key {list(key.shape)}, value "
                           f"{list(value.shape)} do not form an attention (same batch, key and value of one "
                           "length, query heads a multiple of key/value heads, query and key of one head dim)")


def _scale(query, scale) -> float:
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)


def _check_dropout(dropout_p) -> float:
    p = float(dropout_p)
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    return p


def _like_query(query, shape):
    """The output's layout follows the query's (the meta function's alloc_with_matching_layout)."""
    if tuple(shape) == tuple(query.shape):
        return torch.empty_like(query)
    order = sorted(range(query.dim()), key=lambda d: query.stride()[d], reverse=True)
    strides, stride = [0] * query.dim(), 1
    for d in reversed(order):
        strides[d] = stride
        stride *= shape[d]
    return torch.empty_strided(shape, strides, dtype=query.dtype, device=query.device)


def _philox_tensor(value: int):
    """A Philox seed or offset as the int64 scalar the schema returns (two's complement)."""
    value &= (1 << 64) - 1
    return torch.tensor(value - (1 << 64) if value >= 1 << 63 else value, dtype=torch.int64)


@OVERLOADS.implements("_scaled_dot_product_fused_attention_overrideable")
def scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias=None, dropout_p=0.0,
                                                    is_causal=False, return_debug_mask=False, *, scale=None):
    """softmax(scale * Q K^T + bias) V in one device kernel (see emulator/kernels/attention.pyx).
    Returns CPU flash attention's tuple: output, logsumexp (float32, (B, Hq, Lq)), cum_seq_q/k
    (undefined: no nested tensors), max_q, max_k, philox seed and offset (int64 scalars on the host:
    the dropout mask's stream position; zeros without dropout), debug_attn_mask (undefined)."""
    device = common_device(_SDPA, *(t for t in (query, key, value, attn_bias) if t is not None))
    _reject_nested("_scaled_dot_product_fused_attention_overrideable", query, key, value, attn_bias)
    _check_fused(_SDPA, query, key, value)
    p = _check_dropout(dropout_p)
    bias = _bias_ref(_SDPA, attn_bias, query, key)
    if return_debug_mask:
        raise NotImplementedError(f"{_SDPA}: return_debug_mask=True is not supported on emu (the fused kernel "
                                  "never forms the attention matrix)")
    shape4 = _as_4d(query)[0]
    batch, heads, lq = shape4[:3]
    lk, dv = key.shape[-2], value.shape[-1]
    out = _like_query(query, (*query.shape[:-1], dv))
    lse = torch.empty((batch, heads, lq), dtype=torch.float32, device=query.device)
    seed = offset = 0
    if p > 0.0:
        words = -(-batch * heads * lq * lk // 4) * 4
        seed, offset = _C._philox_reserve(_C._default_generator(device), words)
    rt().launch("attention", (_ref4(out), device_ref(lse), _ref4(query), _ref4(key), _ref4(value), bias,
                              _scale(query, scale), bool(is_causal), p, seed, offset), current_stream(device))
    return out, lse, None, None, lq, lk, _philox_tensor(seed), _philox_tensor(offset), None


@OVERLOADS.implements("_scaled_dot_product_fused_attention_overrideable_backward")
def scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value, attn_bias, grad_input_mask,
                                                             out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                                                             dropout_p, is_causal, philox_seed, philox_offset, *,
                                                             scale=None):
    """FlashAttention-2's backward from the saved logsumexp, in one device kernel; the dropout mask is
    the forward's (the same Philox seed and offset). grad_attn_bias is summed over the bias's
    broadcast dims (float32 accumulation, float64 for float64)."""
    op = _SDPA + "_backward"
    if grad_out is None:                    # an undefined output gradient: undefined input gradients
        return None, None, None, None
    device = common_device(op, *(t for t in (grad_out, query, key, value, attn_bias, out, logsumexp)
                                 if t is not None))
    _check_fused(op, query, key, value)
    p = _check_dropout(dropout_p)
    bias = _bias_ref(op, attn_bias, query, key)
    want_q, want_k, want_v, want_bias = (bool(x) for x in grad_input_mask)
    want_bias = want_bias and attn_bias is not None
    grads = [torch.empty_like(t) if want else None for t, want in ((query, want_q), (key, want_k), (value, want_v))]
    dbias = None
    if want_bias:
        accumulate = torch.float64 if query.dtype == torch.float64 else torch.float32
        dbias = torch.zeros(attn_bias.shape, dtype=accumulate, device=query.device)
    if any(g is not None for g in grads) or dbias is not None:
        seed = int(philox_seed) if p > 0.0 else 0
        offset = int(philox_offset) if p > 0.0 else 0
        dbias_ref = None if dbias is None else device_ref(dbias, bias.shape, broadcast_strides(dbias, bias.shape))
        rt().launch("attention_backward", (*(None if g is None else _ref4(g) for g in grads), dbias_ref,
                                           _ref4(grad_out), _ref4(query), _ref4(key), _ref4(value), _ref4(out),
                                           device_ref(logsumexp), bias, _scale(query, scale), bool(is_causal), p,
                                           seed, offset), current_stream(device))
    grad_bias = None if dbias is None else dbias.to(attn_bias.dtype)
    return (*grads, grad_bias)
