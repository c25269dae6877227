"""Every causal-LM family the installed ``transformers`` knows, built from a shrunken config.

``decoder_families()`` lists the model types of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``;
``small_config(model_type)`` takes the family's default config and overrides every size field
it has (by the field names transformers uses across families: ``hidden_size``/``n_embd``/
``d_model``, ``num_hidden_layers``/``n_layer``, ...) with tiny values, switches dropout off and
puts the special token ids inside the tiny vocabulary. ``sweep_spec(model_type)`` is the
family's zoo spec (a causal LM: next-token loss and greedy generation).

Left out: composite configs (a text config inside a multimodal one), families whose config
or model does not build from these values (a size relation the override breaks, a dependency
that is not installed), and those still above ``MAX_PARAMETER_BYTES``; ``buildable()`` says
which and why.
"""
from __future__ import annotations

import dataclasses
import functools

from torch_plugin.zoo import ModelSpec
from torch_plugin.zoo import hf

# field name -> tiny value; a family gets the ones among its config's fields
SMALL = {
    **dict.fromkeys(["hidden_size", "n_embd", "d_model", "dim", "embed_dim", "emb_dim", "word_embed_proj_dim",
                     "dim_model"], 64),
    **dict.fromkeys(["num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers"], 2),
    **dict.fromkeys(["num_attention_heads", "n_head", "num_heads", "n_heads", "decoder_attention_heads"], 4),
    **dict.fromkeys(["num_key_value_heads", "num_kv_heads", "multi_query_group_num", "n_kv_heads"], 2),
    **dict.fromkeys(["head_dim", "d_kv", "kv_channels", "attention_head_size", "dim_head"], 16),
    **dict.fromkeys(["intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size", "decoder_ffn_dim",
                     "inner_hidden_size", "dff", "dim_ff"], 128),
    **dict.fromkeys(["moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"], 32),
    **dict.fromkeys(["max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length"], 128),
    **dict.fromkeys(["num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"], 4),
    **dict.fromkeys(["num_experts_per_tok", "moe_topk", "top_k", "moe_k"], 2),
    **dict.fromkeys(["n_shared_experts", "num_shared_experts", "first_k_dense_replace", "n_group", "topk_group"], 1),
    **dict.fromkeys(["kv_lora_rank", "q_lora_rank", "v_head_dim"], 16),
    **dict.fromkeys(["qk_rope_head_dim", "qk_nope_head_dim", "rotary_dim"], 8),
    **dict.fromkeys(["state_size", "time_step_rank", "conv_kernel"], 4),
    **dict.fromkeys(["mamba_d_state", "ssm_state_size", "mamba_n_heads", "mamba_num_heads"], 4),
    **dict.fromkeys(["mamba_d_ssm", "mamba_chunk_size", "chunk_size"], 32),
    **dict.fromkeys(["mamba_d_head", "mamba_head_dim", "linear_key_head_dim", "linear_value_head_dim"], 16),
    **dict.fromkeys(["linear_num_key_heads", "linear_num_value_heads"], 2),
    **dict.fromkeys(["vocab_size_per_layer_input", "shape_vocab_size", "pronunciation_vocab_size"], hf.VOCAB),
    **dict.fromkeys(["hidden_size_per_layer_input", "shape_embed_dim", "pronunciation_embed_dim"], 16),
    "vocab_size": hf.VOCAB,
    "layer_types": None,  # recomputed from num_hidden_layers by the families that have it
    "bos_token_id": 1, "eos_token_id": None, "pad_token_id": 0, "decoder_start_token_id": 0,
}


def decoder_families() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def model_class(model_type: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]


# what the generic override cannot know: a family's own size relations
FAMILY_OVERRIDES = {
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]]),
    "reformer": dict(is_decoder=True, axial_pos_shape=[4, 4], axial_pos_embds_dim=[32, 32]),
}
# Hybrid families put a full-attention layer every few layers; with 2 layers some have none,
# so a family that fails with 2 layers is tried again with 4.
LAYER_COUNTS = (2, 4)
# A family whose small config is still larger than this is left out: with AdamW's state and the
# activations it would not fit the tiny preset's 64 MiB device.
MAX_PARAMETER_BYTES = 8 * 2**20


def small_config(model_type: str, layers: int = 2):
    from transformers import CONFIG_MAPPING
    cls = CONFIG_MAPPING[model_type]
    if getattr(cls, "sub_configs", None):
        raise ValueError(f"{model_type}: a composite config ({sorted(cls.sub_configs)}), not a text decoder")
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    kwargs = {k: v for k, v in SMALL.items() if k in names}
    kwargs.update({k: layers for k, v in kwargs.items() if v == SMALL["num_hidden_layers"] and "layer" in k})
    kwargs.update({n: 0.0 for n in names if "dropout" in n or "pdrop" in n})
    kwargs.update(FAMILY_OVERRIDES.get(model_type, {}))
    return cls(**kwargs)


@functools.lru_cache(maxsize=None)
def _working_layers(model_type: str) -> tuple[int | None, str | None]:
    import torch
    why = None
    for layers in LAYER_COUNTS:
        try:
            spec = _spec(model_type, layers)
            model = spec.build(0)
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            if size > MAX_PARAMETER_BYTES:
                # a size field the override does not know (e.g. a vocabulary under another name)
                return None, f"the small config still has {size / 2**20:.0f} MiB of parameters"
            with torch.no_grad():
                spec.output(model, spec.batch(0))
            return layers, None
        except Exception as err:  # noqa: BLE001  (any failure means "not buildable here", with the reason)
            why = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return None, why


def buildable(model_type: str) -> str | None:
    """None if the family builds from ``small_config`` and runs a CPU forward; else why not."""
    return _working_layers(model_type)[1]


def _spec(model_type: str, layers: int) -> ModelSpec:
    config = small_config(model_type, layers)
    return hf.spec_from_config(f"sweep:{model_type}", config, model_class(model_type))


def sweep_spec(model_type: str) -> ModelSpec:
    """The family's spec, with the smallest layer count that builds (see ``buildable``)."""
    layers, why = _working_layers(model_type)
    if layers is None:
        raise ValueError(f"{model_type} does not build from a small config: {why}")
    return _spec(model_type, layers)
