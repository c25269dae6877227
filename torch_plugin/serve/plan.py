"""``python -m torch_plugin.serve plan``: what a causal LM needs to serve on a device.

    python -m torch_plugin.serve plan --model llama-3-8b --preset h200 --dtype bfloat16 --batch 32 --seq-len 4096

It reports, from the model's configuration and its tensors (built on the meta device: nothing is
computed and no weights are allocated):

- **weights**: the parameters and buffers as the caching allocator will hold them (each tensor's
  bytes rounded up to the allocator's 512-byte block; tied weights once);
- **KV cache per token**: 2 (K and V) x layers x KV heads x head dim x itemsize, the bytes a
  token takes in transformers' paged cache; a sequence holds whole pages (``--page-size``
  tokens: transformers' default 256), so a sequence of S tokens takes ceil(S / page) pages;
- **activations of one step at ``--batch``**: the larger of a decode step of ``--batch``
  sequences of ``--seq-len`` tokens and a prefill step of ``--chunk`` tokens (the engine's
  max_batch_tokens), one decoder layer's working set plus the logits (``activation_bytes``);
- **what fits**: the device's memory less the weights and the activations, in KV tokens (whole
  pages) and in sequences of ``--seq-len`` tokens.

The weights and the KV cache are exact against the allocator (tests/serving/test_plan.py); the
activations are an estimate checked as an upper bound of what a step allocates above the weights
and the cache, and within 2x of it. Left out: sliding-window layers (counted as full attention),
the allocator's segment rounding, and a tensor-parallel split.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass

DEFAULT_PAGE = 256  # transformers' ContinuousBatchingConfig.page_size default
DEFAULT_CHUNK = 2048  # query tokens of one prefill step (the engine's max_batch_tokens)


@dataclass(frozen=True)
class ModelShape:
    """The shape facts a capacity plan needs (from the model's text config)."""
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    itemsize: int
    max_positions: int | None


@dataclass(frozen=True)
class Plan:
    model: str
    dtype: str
    parameters: int
    weights_bytes: int
    kv_bytes_per_token: int
    page_size: int
    batch: int
    seq_len: int
    chunk: int
    activation_bytes: int
    engine_bytes_at_fit: int
    device_capacity_bytes: int
    fits_tokens: int
    fits_sequences: int

    def as_dict(self) -> dict:
        return asdict(self)


def build_meta(model: str, config: str | None, dtype):
    """The model ``--model``/``--config`` name (what ``python -m torch_plugin.project`` accepts),
    built on the meta device in ``dtype``."""
    import torch
    from torch_plugin import project, zoo
    name = model.removeprefix("zoo:")
    if model.startswith("zoo:") or (name in zoo.MODELS and not config):
        if name not in zoo.MODELS:
            raise SystemExit(f"--model {model}: the zoo has {', '.join(zoo.MODELS)}")
        with torch.device("meta"):
            return zoo.MODELS[name].build(0).to(dtype)
    from transformers import AutoModelForCausalLM
    cfg = project.transformers_config(model, project.parse_overrides(config))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype)


def default_dtype(model: str) -> str:
    from torch_plugin import project
    return project.SHORTCUTS[model][2] if model in project.SHORTCUTS else "float32"


def model_shape(model) -> ModelShape:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_hidden_layers"):
        raise SystemExit(f"{type(model).__name__}: not a transformers causal LM (the plan reads its config)")
    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    itemsize = next(model.parameters()).element_size()
    return ModelShape(layers=text.num_hidden_layers, hidden=text.hidden_size, heads=heads,
                      kv_heads=getattr(text, "num_key_value_heads", None) or heads, head_dim=head_dim,
                      intermediate=getattr(text, "intermediate_size", None) or 4 * text.hidden_size,
                      vocab=text.vocab_size, itemsize=itemsize,
                      max_positions=getattr(text, "max_position_embeddings", None))


def weights_bytes(model) -> tuple[int, int]:
    """(parameters, bytes the allocator holds for the parameters and buffers): one block per
    distinct storage, rounded up to the allocator's block."""
    from runtime.allocator import rounded_size
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = (id(t.untyped_storage()) if t.device.type != "meta" else id(t))
        if key in seen:
            continue
        seen.add(key)
        total += rounded_size(t.numel() * t.element_size())
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return parameters, total


def kv_bytes_per_token(shape: ModelShape) -> int:
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.itemsize


def pages(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


def _rounded(nbytes: int) -> int:
    from runtime.allocator import rounded_size
    return rounded_size(nbytes)


def cache_bytes(shape: ModelShape, tokens: int, page_size: int) -> int:
    """The paged cache tensor of ``tokens`` (whole pages) as the allocator holds it: the pages, and
    transformers' two trash sectors (a sector: one page of every layer, aligned to 128 bytes)."""
    page = page_size * kv_bytes_per_token(shape)
    sector = page * 128 // math.gcd(page, 128)
    return _rounded(tokens * kv_bytes_per_token(shape) + 2 * sector)


def engine_bytes(shape: ModelShape, tokens: int, batch_tokens: int) -> int:
    """The engine's static tensors beside the cache (transformers' ContinuousBatchingIOs, SDPA path):
    the varlen attention mask [batch tokens, cache tokens + batch tokens] in the model's dtype, the
    int32 bulk inputs (7 rows of batch tokens + 1 rounded to 32) and output ids, the int64 write
    index (batch tokens) and read index (cache + batch tokens), each rounded to the allocator's
    block (the block table is empty without flash attention, and greedy decoding has no logits
    processor tensors; the per-request rows live inside the bulk tensor)."""
    m = batch_tokens
    mask = m * (tokens + m) * shape.itemsize
    bulk = 7 * (-(-(m + 1) // 32) * 32) * 4
    return sum(_rounded(n) for n in (mask, bulk, (m + 1) * 4, m * 8, (tokens + m) * 8))


def activation_bytes(shape: ModelShape, query_tokens: int, kv_tokens: int, sequences: int) -> int:
    """Estimated peak bytes one step allocates above the weights, the cache and the engine's static
    tensors, one decoder layer at a time: per query token the residual, the normed input, q, k, v
    and their rotated copies, the attention output and the SwiGLU MLP's gate, up and product (3 x
    intermediate); per token it attends to, the layer's K and V read back from the cache and their
    copies repeated to the query heads (transformers' SDPA path repeats them when it has a mask,
    which the varlen batch always has); then each sequence's last-position logits in the model's
    dtype and in float32 (the argmax's input)."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per_token = 3 * shape.hidden + 3 * q + 4 * kv + 3 * shape.intermediate
    elements = query_tokens * per_token + kv_tokens * 2 * (kv + q)
    return elements * shape.itemsize + sequences * shape.vocab * (shape.itemsize + 4)


def step_activations(shape: ModelShape, batch: int, seq_len: int, chunk: int) -> int:
    """A step of ``chunk`` query tokens (the engine's max_batch_tokens, or fewer when the batch has
    fewer tokens) over ``batch`` sequences of ``seq_len`` tokens of context."""
    return activation_bytes(shape, min(chunk, batch * seq_len), batch * seq_len, batch)


def fits_tokens(shape: ModelShape, capacity: int, weights: int, page_size: int, chunk: int, batch: int) -> int:
    """The most cache tokens (whole pages) for which the weights, the cache, the engine's tensors
    and the worst step (``chunk`` query tokens attending to the whole cache) fit ``capacity``."""
    def need(tokens):
        return (weights + cache_bytes(shape, tokens, page_size) + engine_bytes(shape, tokens, chunk)
                + activation_bytes(shape, chunk, tokens + chunk, batch))
    lo, hi = 0, max(1, capacity // kv_bytes_per_token(shape) // page_size + 1)
    if need(0) > capacity:
        return 0
    while lo < hi:   # need() grows with the pages: the largest count that fits
        mid = (lo + hi + 1) // 2
        if need(mid * page_size) <= capacity:
            lo = mid
        else:
            hi = mid - 1
    return lo * page_size


def make_plan(model, name: str, dtype_name: str, capacity: int, batch: int, seq_len: int,
              page_size: int = DEFAULT_PAGE, chunk: int = DEFAULT_CHUNK) -> Plan:
    shape = model_shape(model)
    parameters, weights = weights_bytes(model)
    per_token = kv_bytes_per_token(shape)
    activations = step_activations(shape, batch, seq_len, chunk)
    tokens = fits_tokens(shape, capacity, weights, page_size, chunk, batch)
    engine = engine_bytes(shape, tokens, chunk)
    return Plan(model=name, dtype=dtype_name, parameters=parameters, weights_bytes=weights,
                kv_bytes_per_token=per_token, page_size=page_size, batch=batch, seq_len=seq_len, chunk=chunk,
                activation_bytes=activations, engine_bytes_at_fit=engine, device_capacity_bytes=capacity,
                fits_tokens=tokens, fits_sequences=tokens // (pages(seq_len, page_size) * page_size))


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def format_plan(p: Plan, preset: str) -> str:
    seq_pages = pages(p.seq_len, p.page_size)
    lines = [f"Capacity plan of {p.model} ({p.parameters / 1e6:.2f} M parameters, {p.dtype}) on {preset} "
             f"({_size(p.device_capacity_bytes)} of device memory)",
             f"  weights:              {_size(p.weights_bytes):>12}",
             f"  KV cache per token:   {_size(p.kv_bytes_per_token):>12}   "
             f"(a page of {p.page_size} tokens: {_size(p.kv_bytes_per_token * p.page_size)})",
             f"  activations of a step: {_size(p.activation_bytes):>11}   ({min(p.chunk, p.batch * p.seq_len)} query "
             f"tokens over {p.batch} sequences of {p.seq_len} tokens)",
             f"  fits: the weights, the cache, the engine's tensors ({_size(p.engine_bytes_at_fit)}: the varlen "
             f"mask, indices, ids) and a step of {p.chunk} query tokens over the whole cache:",
             f"        {p.fits_tokens} tokens of KV cache ({_size(p.fits_tokens * p.kv_bytes_per_token)}) = "
             f"{p.fits_sequences} sequences of {p.seq_len} tokens ({seq_pages} pages each)"]
    if p.fits_sequences < p.batch:
        lines.append(f"  note: a batch of {p.batch} sequences of {p.seq_len} tokens does not fit "
                     f"({p.fits_sequences} do)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.serve plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="what python -m torch_plugin.project --model accepts")
    parser.add_argument("--config", help="config overrides: name=value,name=value (transformers models)")
    parser.add_argument("--preset", default=None, help="hardware preset (default: EMU_PRESET or 'default')")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                        help="weights and cache dtype (default: the shortcut's, else float32)")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (activations)")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence")
    parser.add_argument("--page-size", type=int, default=DEFAULT_PAGE, help="tokens per KV cache page")
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, help="query tokens of a prefill step")
    parser.add_argument("--json", help="write the plan to this file")
    args = parser.parse_args(argv)
    for name in ("batch", "seq_len", "page_size", "chunk"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.preset:
        os.environ["EMU_PRESET"] = args.preset
    # Only the device's capacity is read: power on without backing memory.
    os.environ.setdefault("EMU_MODE", "projection")
    import torch
    import runtime
    import torch_plugin  # noqa: F401  (registers emu)
    dtype_name = args.dtype or default_dtype(args.model)
    model = build_meta(args.model, args.config, getattr(torch, dtype_name))
    _, capacity = torch.emu.mem_get_info()
    plan = make_plan(model, args.model, dtype_name, capacity, args.batch, args.seq_len, args.page_size, args.chunk)
    print(format_plan(plan, runtime.get_runtime().config.name))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(plan.as_dict(), preset=runtime.get_runtime().config.name), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
