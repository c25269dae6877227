"""Zoo models from ``transformers`` configs: random weights, tiny sizes, nothing downloaded.

Adding an architecture is one row of ``TRANSFORMERS``: (zoo name, config class, model class,
config keyword arguments), the classes named as in ``transformers``' top-level namespace. The
task follows from the model class: a ``...ForConditionalGeneration`` (T5, BART, ...) trains as
seq2seq and generates; a ``...ForMaskedLM`` trains on masked tokens; anything else is a causal
LM that trains on next tokens and generates. Dropout is switched off (the device's RNG stream is
not the CPU's).
"""
from __future__ import annotations

import torch
from torch import nn

from torch_plugin.zoo import ModelSpec, seeded

VOCAB = 256
_NO_DROPOUT = dict(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)

# (name, config class, model class, config kwargs)
TRANSFORMERS: list[tuple[str, str, str, dict]] = [
    ("gpt2", "GPT2Config", "GPT2LMHeadModel",
     dict(n_layer=2, n_embd=64, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    ("gpt2-eager", "GPT2Config", "GPT2LMHeadModel",  # the models' own attention matmuls instead of SDPA
     dict(n_layer=2, n_embd=64, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
          attn_implementation="eager")),
    ("bert", "BertConfig", "BertForMaskedLM",
     dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
          max_position_embeddings=64, **_NO_DROPOUT)),
    ("llama", "LlamaConfig", "LlamaForCausalLM",  # RMSNorm, rotary, SwiGLU, GQA (4 query heads, 2 kv)
     dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
          intermediate_size=128, max_position_embeddings=64)),
    ("t5", "T5Config", "T5ForConditionalGeneration",
     dict(num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, dropout_rate=0.0,
          decoder_start_token_id=0, pad_token_id=0)),
]

# Every row gets these unless it says otherwise: the tiny vocabulary, token ids inside it, and
# the attention implementation. "sdpa" reaches aten::scaled_dot_product_attention, whose ATen
# math path (CompositeImplicitAutograd: no fused kernel is registered for emu) runs as the
# device's bmm/softmax; "eager" is the models' own matmuls. Both run natively on emu.
DEFAULTS = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=None, pad_token_id=0, attn_implementation="sdpa")

PROMPT_LEN, SEQ_LEN, BATCH = 6, 16, 2


def _tokens(seed: int, shape) -> torch.Tensor:
    # ids >= 3 keep clear of the pad/bos ids
    return torch.randint(3, VOCAB, shape, generator=torch.Generator().manual_seed(2000 + seed))


def build_config(config_cls: str, kwargs: dict):
    import transformers
    cls = getattr(transformers, config_cls)
    merged = {**DEFAULTS, **kwargs}
    return cls(**merged)


def build_model(config, model_cls: str) -> nn.Module:
    import transformers
    model = getattr(transformers, model_cls)(config)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = getattr(config, "pad_token_id", None)
    return model


def without_padding_check(model: nn.Module) -> nn.Module:
    """Switches off transformers' ``warn_if_padding_and_no_attention_mask`` on every submodel (GPT-2,
    BERT, T5, ... call it on each forward without an attention mask). The check only decides
    whether to print a warning, but it reads input ids on the host: a device-to-host copy and a
    synchronisation per forward in functional mode, and a refusal in projection mode. Zoo batches
    hold no padding (token ids >= 3). Returns ``model``."""
    for module in model.modules():
        if hasattr(module, "warn_if_padding_and_no_attention_mask"):
            module.warn_if_padding_and_no_attention_mask = _no_padding_check
    return model


def _no_padding_check(input_ids, attention_mask) -> None:
    return None


def _causal_lm(name: str, description: str, build, **extra) -> ModelSpec:
    def loss(m, b):
        return m(input_ids=b["input_ids"], labels=b["input_ids"]).loss

    return ModelSpec(
        name, "transformers", description, build,
        batch=lambda s: {"input_ids": _tokens(s, (BATCH, SEQ_LEN))}, loss=loss,
        output=lambda m, b: m(input_ids=b["input_ids"]).logits,
        prompt=lambda s: _tokens(s, (1, PROMPT_LEN)),
        generate=lambda m, p, n: m.generate(p, do_sample=False, max_new_tokens=n, min_new_tokens=n, use_cache=True),
        **extra)


def _masked_lm(name: str, description: str, build, **extra) -> ModelSpec:
    def batch(seed):
        ids = _tokens(seed, (BATCH, SEQ_LEN))
        mask = torch.rand(ids.shape, generator=torch.Generator().manual_seed(3000 + seed)) < 0.25
        mask[:, 0] = True  # at least one masked position per row
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        return {"input_ids": torch.where(mask, torch.full_like(ids, 2), ids), "labels": labels,
                "attention_mask": torch.ones_like(ids)}

    return ModelSpec(
        name, "transformers", description, build, batch=batch, loss=lambda m, b: m(**b).loss,
        output=lambda m, b: m(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, **extra)


def _seq2seq(name: str, description: str, build, **extra) -> ModelSpec:
    def batch(seed):
        return {"input_ids": _tokens(seed, (BATCH, SEQ_LEN)), "labels": _tokens(seed + 1, (BATCH, SEQ_LEN // 2))}

    return ModelSpec(
        name, "transformers", description, build, batch=batch, loss=lambda m, b: m(**b).loss,
        output=lambda m, b: m(**b).logits,
        prompt=lambda s: _tokens(s, (1, PROMPT_LEN)),
        generate=lambda m, p, n: m.generate(p, do_sample=False, max_new_tokens=n, min_new_tokens=n, use_cache=True),
        **extra)


def spec_from_config(name: str, config, model_cls: str, **extra) -> ModelSpec:
    """A zoo spec for ``model_cls`` built from ``config`` (the task chosen from the model)."""
    description = (f"transformers {model_cls} ({config.model_type}), {config.num_hidden_layers} layers, "
                   f"width {config.hidden_size}, vocab {config.vocab_size}, "
                   f"attention {config._attn_implementation}")
    build = seeded(lambda: build_model(config, model_cls).eval())
    return _TASKS[_kind(model_cls)](name, description, build, **extra)


def transformers_specs() -> dict[str, ModelSpec]:
    """The ``TRANSFORMERS`` rows as specs. Building a config imports ``transformers`` (seconds),
    so each row's config is made when its model is first built, not at import of the zoo."""
    return {name: _row_spec(name, config_cls, model_cls, kwargs)
            for name, config_cls, model_cls, kwargs in TRANSFORMERS}


def _row_spec(name: str, config_cls: str, model_cls: str, kwargs: dict) -> ModelSpec:
    kind = _kind(model_cls)
    description = f"transformers {model_cls}, {kwargs}"

    def build():
        return build_model(build_config(config_cls, kwargs), model_cls).eval()

    return _TASKS[kind](name, description, seeded(build))


def _kind(model_cls: str) -> str:
    # Decided from the names, so that the registry needs no transformers import: the text
    # encoder-decoders of transformers are "...ForConditionalGeneration" (T5, BART, Marian, ...).
    if "MaskedLM" in model_cls:
        return "masked_lm"
    if model_cls.endswith("ForConditionalGeneration"):
        return "seq2seq"
    return "causal_lm"


_TASKS = {"seq2seq": _seq2seq, "masked_lm": _masked_lm, "causal_lm": _causal_lm}
