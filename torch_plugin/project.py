"""``python -m torch_plugin.project``: the projected performance of a model on emulated hardware,
in projection mode (docs/projection.md), without its weights or its values.

    python -m torch_plugin.project --model llama-3-8b --preset h200 --dtype bfloat16 \\
        --prefill 2048 --decode 128 [--batch 1] [--train] [--compile] [--json out.json]
    python -m torch_plugin.project --model llama --config hidden_size=1024,num_hidden_layers=4
    python -m torch_plugin.project --model path/to/config.json --prefill 512 --decode 16
    python -m torch_plugin.project --model mlp --train          # a zoo model (zoo:NAME forces it)
    torchrun --nproc-per-node 8 -m torch_plugin.project --model llama-3-70b --preset h200x8 --tp 8 \
        --prefill 2048 --decode 16                               # tensor parallel over 8 ranks
    torchrun --nproc-per-node 8 -m torch_plugin.project --model llama-3-8b --preset h200x8 --fsdp 8 \
        --prefill 2048 --train                                    # FSDP2 over 8 ranks

The model is built on the meta device (no host memory for its weights) and moved with
``to_empty(device="emu")``; every op then runs through the whole stack in projection mode, so
its modelled time is the functional mode's. A causal LM's prefill is one forward of
``--prefill`` tokens (logits of the last position only, as generate() computes them), then
``--decode`` steps each feed the previous step's argmax token ids back as input ids with the KV
cache: a fixed generation length, driven here rather than by ``generate()``, whose stopping
criteria read values on the host (which projection mode refuses). ``--train`` projects one
AdamW step (forward, backward, optimizer; its state counted in device memory). Times are the
modelled host clock's (launches, waits and device work included), never wall time.

Under ``torchrun``, ``--tp N`` splits a transformers model's attention and MLP over N ranks with
``parallelize_module`` (q/k/v and gate/up colwise, o and down rowwise; the embedding rowwise and
the LM head colwise) and ``--fsdp M`` shards its decoder layers and the rest with FSDP2's
``fully_shard``; the job has N x M ranks, one emulated device each (``emu:<local rank>``), on the
c10d backend ``emu``. In projection mode its collectives are timed on the emulated interconnect
and move no data. Rank 0 prints the report (times: the slowest rank's; memory: the largest peak
of any rank).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time

# Published configurations a name expands to (Meta's Llama 3 model card / config.json).
SHORTCUTS = {
    "llama-3-8b": ("llama", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                 num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                                 max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                                 tie_word_embeddings=False), "bfloat16"),
    "llama-3-70b": ("llama", dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
                                  num_key_value_heads=8, intermediate_size=28672, vocab_size=128256,
                                  max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                                  tie_word_embeddings=False), "bfloat16"),
}
DTYPES = ("float32", "bfloat16", "float16")


def parse_overrides(text: str | None) -> dict:
    """"hidden_size=4096,rope_theta=5e5,tie_word_embeddings=false" -> {name: int/float/bool/str}."""
    out = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"--config: expected name=value, got {item!r}")
        out[key.strip()] = _value(value.strip())
    return out


def _value(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() in ("none", "null"):
        return None
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def transformers_config(model: str, overrides: dict):
    """The transformers config ``model`` names: a shortcut, a config.json path, or a model_type."""
    from transformers import AutoConfig
    if model in SHORTCUTS:
        model_type, base, _ = SHORTCUTS[model]
        return AutoConfig.for_model(model_type, **{**base, **overrides})
    if model.endswith(".json") or os.path.isfile(model):
        with open(model) as f:
            data = json.load(f)
        model_type = data.pop("model_type", None)
        if model_type is None:
            raise SystemExit(f"--model {model}: the config file has no model_type")
        for key in ("architectures", "transformers_version", "torch_dtype", "dtype"):
            data.pop(key, None)
        return AutoConfig.for_model(model_type, **{**data, **overrides})
    try:
        return AutoConfig.for_model(model, **overrides)
    except ValueError as err:
        raise SystemExit(f"--model {model!r}: not a zoo model, a shortcut ({', '.join(SHORTCUTS)}), a config.json "
                         f"or a transformers model_type: {err}") from None


def build_model(args, dtype, mesh=None):
    """(model on emu, kind): kind "causal_lm" (transformers) or "zoo" (with its spec). With a
    ``mesh`` (``--tp``/``--fsdp``), the model is parallelized on the meta device, then moved."""
    import torch
    from torch_plugin import zoo
    from torch_plugin.zoo.hf import without_padding_check  # its host read of the ids is refused here
    name = args.model.removeprefix("zoo:")
    if args.model.startswith("zoo:") or (name in zoo.MODELS and not args.config):
        if name not in zoo.MODELS:
            raise SystemExit(f"--model {args.model}: the zoo has {', '.join(zoo.MODELS)}")
        if mesh is not None:
            raise SystemExit(f"--tp/--fsdp: for transformers causal LMs (llama-family module names); {args.model} "
                             f"is a zoo model")
        spec = zoo.MODELS[name]
        with torch.device("meta"):
            model = without_padding_check(spec.build(0))
        return model.to(dtype).to_empty(device="emu"), spec
    from transformers import AutoModelForCausalLM
    config = transformers_config(args.model, parse_overrides(args.config))
    with torch.device("meta"):
        model = without_padding_check(AutoModelForCausalLM.from_config(config, dtype=dtype))
    if mesh is not None:
        parallelize(model, mesh, args)
    return model.to_empty(device="emu"), None


# -- tensor parallelism and FSDP2 under torchrun ----------------------------------------------------
# Megatron-style tensor parallelism of a llama-family decoder layer: the column-parallel
# projections split the heads (and the MLP's hidden units) over the ranks, so attention runs on
# the rank's own heads with no communication; the row-parallel ones end each block with an
# all_reduce of its output.
LAYER_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
              "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
              "mlp.down_proj": "rowwise"}


def init_parallel(args):
    """The device mesh of a ``--tp``/``--fsdp`` job (None without either): dims ("fsdp", "tp") of
    the sizes asked for, over torchrun's ranks, on the c10d backend ``emu`` (CPU tensors on gloo)."""
    if args.tp == 1 and args.fsdp == 1:
        return None
    world, want = int(os.environ.get("WORLD_SIZE", "1")), args.tp * args.fsdp
    if "RANK" not in os.environ or world != want:
        raise SystemExit(f"--tp {args.tp} --fsdp {args.fsdp}: run under torchrun with {want} ranks "
                         f"(torchrun --nproc-per-node {want} -m torch_plugin.project ...); this process has "
                         f"{'no torchrun environment' if 'RANK' not in os.environ else f'WORLD_SIZE={world}'}")
    import torch
    import torch.distributed as dist
    import runtime
    from torch.distributed.device_mesh import init_device_mesh
    local = int(os.environ.get("LOCAL_RANK", "0"))
    devices = runtime.get_runtime().device_count
    if local >= devices:
        raise SystemExit(f"local rank {local} needs emu:{local}, and the preset {runtime.get_runtime().config.name!r} "
                         f"has {devices} devices per process (use one with as many devices as ranks per node, "
                         f"e.g. --preset h200x8)")
    torch.emu.set_device(local)
    dist.init_process_group("cpu:gloo,emu:emu")
    shape, names = zip(*[(n, name) for n, name in ((args.fsdp, "fsdp"), (args.tp, "tp")) if n > 1])
    return init_device_mesh("emu", shape, mesh_dim_names=names)


def _check_divides(config, tp: int) -> None:
    for field in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        value = getattr(config, field, None)
        if value is not None and value % tp:
            raise SystemExit(f"--tp {tp}: the model's {field} ({value}) is not a multiple of {tp}")


def parallelize(model, mesh, args) -> None:
    """Applies ``--tp`` (parallelize_module, LAYER_PLAN on every decoder layer; the embedding
    rowwise, the LM head colwise with its logits gathered) and then ``--fsdp`` (fully_shard on
    every decoder layer and on the model) to a model on the meta device."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise SystemExit(f"--tp/--fsdp: {type(model).__name__} has no model.layers (llama-family decoders have)")
    if args.tp > 1:
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        _check_divides(model.config, args.tp)
        if getattr(model.config, "tie_word_embeddings", False):
            raise SystemExit("--tp: tied input and output embeddings are not split (set tie_word_embeddings=false)")
        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        tp_mesh = mesh["tp"]
        for layer in layers:
            missing = [name for name in LAYER_PLAN if not _has_submodule(layer, name)]
            if missing:
                raise SystemExit(f"--tp: {type(layer).__name__} lacks {', '.join(missing)} (llama-family names)")
            parallelize_module(layer, tp_mesh, {name: styles[style]() for name, style in LAYER_PLAN.items()})
        parallelize_module(model, tp_mesh, {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Replicate())})
    if args.fsdp > 1:
        from torch.distributed.fsdp import fully_shard
        fsdp_mesh = mesh["fsdp"]
        for layer in layers:
            fully_shard(layer, mesh=fsdp_mesh)
        fully_shard(model, mesh=fsdp_mesh)


def local_parameter_bytes(model) -> int:
    """The bytes of this rank's parameters (a DTensor's local shard)."""
    return sum((p.to_local() if hasattr(p, "to_local") else p).nbytes for p in model.parameters())


def _has_submodule(module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


def reduce_over_ranks(result: dict) -> dict:
    """The slowest rank's times and the largest peak memory of any rank (a MAX over the job, on
    the host: these are host numbers), plus every rank's peak."""
    import torch
    import torch.distributed as dist
    keys = [k for k in ("prefill_s", "decode_s_per_token", "forward_s", "train_step_s",
                        "peak_device_memory_bytes", "collective_host_copy_bytes") if k in result]
    values = torch.tensor([float(result[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    per_rank = [torch.zeros(2, dtype=torch.float64) for _ in range(dist.get_world_size())]
    mine = [result["peak_device_memory_bytes"], result["local_parameter_bytes"]]
    dist.all_gather(per_rank, torch.tensor(mine, dtype=torch.float64))
    out = dict(result, **{k: float(v) for k, v in zip(keys, values.tolist())})
    for key in ("peak_device_memory_bytes", "collective_host_copy_bytes"):
        if key in out:
            out[key] = int(out[key])
    out["peak_device_memory_bytes_per_rank"] = [int(t[0]) for t in per_rank]
    out["local_parameter_bytes_per_rank"] = [int(t[1]) for t in per_rank]
    batch = result["batch"] * (result.get("fsdp", 1))
    if "prefill_s" in out:
        out["prefill_tokens_per_s"] = batch * result["prefill_tokens"] / out["prefill_s"]
    if "decode_s_per_token" in out:
        out["decode_tokens_per_s"] = batch / out["decode_s_per_token"]
    return out


def _collectives(phase: str, result: dict) -> None:
    """This rank's collectives of ``phase`` (count, bytes, modelled time per op), then cleared; and
    what they moved through the host (0 in projection mode, where collectives move nothing)."""
    from torch_plugin import distributed as emu_dist
    records = emu_dist.collective_records()
    if not records:
        return
    summary = emu_dist.collective_summary()
    emu_dist.reset_collective_records()
    result[f"collectives_{phase}"] = {op: {k: s[k] for k in ("count", "bytes", "modelled_ns", "wait_ns")}
                                      for op, s in summary.items()}
    result["collective_host_copy_bytes"] = (result.get("collective_host_copy_bytes", 0)
                                            + sum(r["host_copy_bytes"] for r in records))


class Progress:
    """tqdm where it is installed, else a plain line per tenth of the steps (stderr)."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.total, self.label, self.done, self.bar = total, label, 0, None
        self.enabled = enabled and total > 0
        if self.enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc=label, unit="step", file=sys.stderr, leave=False)
            except ImportError:
                pass

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled and (self.done == self.total or self.done % max(1, self.total // 10) == 0):
            print(f"{self.label}: {self.done}/{self.total}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _host_ns() -> float:
    """The modelled host clock after every queued command finished (a synchronisation)."""
    import runtime
    import torch
    torch.emu.synchronize()
    return runtime.get_runtime().host_time_ns()


def _profiled(fn, top: int):
    """(fn's result, modelled seconds, top kernels) of one block under torch.emu.profile()."""
    import torch
    with torch.emu.profile() as prof:
        result = fn()
    report = prof.report()
    return result, report.projected_total_time_s, report.top_kernels(top)


def _cache_kwarg(model) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def project_causal_lm(model, args, result: dict, progress: bool) -> None:
    import torch
    batch, prefill, decode = args.batch, args.prefill, args.decode
    forward = torch.compile(model, backend="emu") if args.compile else model
    cache_name = _cache_kwarg(model)
    model.eval()
    with torch.no_grad():
        ids = torch.zeros((batch, prefill), dtype=torch.long, device="emu")
        out, prefill_s, top = _profiled(lambda: forward(input_ids=ids, use_cache=True, logits_to_keep=1), args.top)
        cache = getattr(out, "cache", None) or out.past_key_values
        next_ids = out.logits[:, -1:].argmax(-1)   # stays on the device
        del out
        result.update(prefill_s=prefill_s, prefill_tokens_per_s=batch * prefill / prefill_s, top_kernels_prefill=top)
        _collectives("prefill", result)
        if decode:
            bar = Progress(decode, "decode", progress)
            start = _host_ns()
            decode_top = []
            for step in range(decode):
                def one_step():
                    out = forward(input_ids=next_ids, use_cache=True, **{cache_name: cache})
                    return out.logits[:, -1:].argmax(-1)
                if step == decode - 1:  # the last step profiled: its kernels (the longest cache)
                    next_ids, _, decode_top = _profiled(one_step, args.top)
                else:
                    next_ids = one_step()
                bar.step()
            per_token = (_host_ns() - start) / 1e9 / decode
            bar.close()
            result.update(decode_s_per_token=per_token, decode_tokens_per_s=batch / per_token,
                          top_kernels_decode=decode_top)
            _collectives("decode", result)
        del cache, next_ids
    if args.train:
        ids = torch.zeros((batch, prefill), dtype=torch.long, device="emu")
        result.update(train_step(model, args, lambda: forward(input_ids=ids, labels=ids).loss))
        _collectives("train", result)


def train_step(model, args, loss_fn) -> dict:
    """One AdamW step (foreach): its modelled time, and device memory with its state allocated."""
    import torch
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        optimizer.step()
    _, seconds, top = _profiled(step, args.top)
    return {"train_step_s": seconds, "top_kernels_train": top}


def project_zoo(model, spec, args, dtype, result: dict) -> None:
    import torch
    from torch_plugin.zoo import harness
    batch = {k: (v.to(dtype) if v.is_floating_point() else v) if isinstance(v, torch.Tensor) else v
             for k, v in spec.batch(0).items()}
    batch = harness.to_device(batch, "emu")  # host data charged to the host link, then dropped
    forward = torch.compile(model, backend="emu") if args.compile else model
    model.eval()
    with torch.no_grad():
        _, seconds, top = _profiled(lambda: spec.output(forward, batch), args.top)
    result.update(forward_s=seconds, top_kernels_forward=top)
    if args.train:
        result.update(train_step(model, args, lambda: spec.loss(forward, batch)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.project", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help=f"a zoo model (zoo:NAME; a bare zoo name without --config), a shortcut "
                             f"({', '.join(SHORTCUTS)}), a transformers model_type (with --config overrides) or "
                             "a config.json path")
    parser.add_argument("--config", help="config overrides: name=value,name=value (transformers models)")
    parser.add_argument("--preset", default=None, help="hardware preset (default: EMU_PRESET or 'default')")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="parameter dtype (default: the shortcut's, else float32)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prefill", type=int, default=128, help="prompt tokens (causal LMs; --train's sequence)")
    parser.add_argument("--decode", type=int, default=0, help="generated tokens, a fixed number (causal LMs)")
    parser.add_argument("--train", action="store_true", help="also one AdamW step (optimizer state counted)")
    parser.add_argument("--compile", action="store_true", help='run the model under torch.compile(backend="emu")')
    parser.add_argument("--tp", type=int, default=1,
                        help="tensor-parallel ranks (under torchrun: its world size is tp x fsdp)")
    parser.add_argument("--fsdp", type=int, default=1,
                        help="FSDP2 ranks (under torchrun); --batch is then per rank")
    parser.add_argument("--top", type=int, default=10, help="kernels listed per phase")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    for name in ("batch", "prefill", "decode", "top", "tp", "fsdp"):
        if getattr(args, name) < (0 if name == "decode" else 1):
            parser.error(f"--{name} must be >= {0 if name == 'decode' else 1}")

    # Read when the device powers on, which has not happened yet in this process.
    os.environ["EMU_MODE"] = "projection"
    if args.preset:
        os.environ["EMU_PRESET"] = args.preset
    wall = time.perf_counter()
    import torch
    import runtime
    import torch_plugin  # noqa: F401  (registers emu)
    dtype_name = args.dtype or (SHORTCUTS[args.model][2] if args.model in SHORTCUTS else "float32")
    dtype = getattr(torch, dtype_name)
    if runtime.is_initialized() and not torch.emu.is_projection_mode():
        raise SystemExit("the emu device was powered on in functional mode before the projection started")
    mesh = init_parallel(args)
    lead = mesh is None or torch.distributed.get_rank() == 0  # the rank that reports
    try:
        model, spec = build_model(args, dtype, mesh)
    except torch.OutOfMemoryError as err:
        where = "one device" if mesh is None else f"its share ({args.tp * args.fsdp} ranks)"
        print(f"{args.model} ({dtype_name}) does not fit {where} of this preset: {err}", file=sys.stderr)
        return 2
    rt = runtime.get_runtime()
    parameters = sum(p.numel() for p in model.parameters())  # a DTensor's numel is the global one
    free, capacity = torch.emu.mem_get_info()
    result = {"model": args.model, "preset": rt.config.name, "device": rt.config.device.name, "dtype": dtype_name,
              "batch": args.batch, "parameters": parameters, "compile": args.compile,
              "device_capacity_bytes": capacity, "tp": args.tp, "fsdp": args.fsdp,
              "local_parameter_bytes": local_parameter_bytes(model)}
    if spec is None:
        result.update(prefill_tokens=args.prefill, decode_tokens=args.decode,
                      config={k: v for k, v in model.config.to_diff_dict().items() if isinstance(v, (int, float, str, bool))})
    torch.emu.reset_peak_memory_stats()
    if spec is None:
        project_causal_lm(model, args, result, progress=lead and not args.no_progress)
    else:
        project_zoo(model, spec, args, dtype, result)
    torch.emu.synchronize()
    result.update(peak_device_memory_bytes=torch.emu.max_memory_allocated(),
                  wall_time_s=time.perf_counter() - wall)
    if mesh is not None:
        result = reduce_over_ranks(result)
        torch.distributed.destroy_process_group()
        if not lead:
            return 0
    print(format_result(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def format_result(r: dict) -> str:
    gib = 2 ** 30
    ranks = r.get("tp", 1) * r.get("fsdp", 1)
    lines = [f"Projection of {r['model']} ({_count(r['parameters'])} parameters, {r['dtype']}, batch {r['batch']}"
             f"{' per rank' if r.get('fsdp', 1) > 1 else ''}) on {r['preset']} ({r['device']}), modelled time"]
    if ranks > 1:
        split = " x ".join(f"{k} {r[k]}" for k in ("fsdp", "tp") if r[k] > 1)
        lines.append(f"  {ranks} ranks ({split}); times: the slowest rank's; collectives: rank 0's")
    if "prefill_s" in r:
        lines.append(f"  prefill {r['prefill_tokens']} tokens: {r['prefill_s'] * 1e3:.2f} ms "
                     f"({r['prefill_tokens_per_s']:.0f} tokens/s)")
    if "decode_s_per_token" in r:
        lines.append(f"  decode {r['decode_tokens']} tokens: {r['decode_s_per_token'] * 1e3:.3f} ms per token "
                     f"({r['decode_tokens_per_s']:.1f} tokens/s)")
    if "forward_s" in r:
        lines.append(f"  forward: {r['forward_s'] * 1e3:.3f} ms")
    if "train_step_s" in r:
        lines.append(f"  train step (forward, backward, AdamW): {r['train_step_s'] * 1e3:.2f} ms")
    lines.append(f"  peak device memory{' (largest rank)' if ranks > 1 else ''}: "
                 f"{r['peak_device_memory_bytes'] / gib:.2f} GiB of "
                 f"{r['device_capacity_bytes'] / gib:.2f} GiB "
                 f"({100 * r['peak_device_memory_bytes'] / r['device_capacity_bytes']:.1f}%)")
    lines.append(f"  emulation wall time: {r['wall_time_s']:.1f} s")
    for phase in ("prefill", "decode", "train"):
        ops = r.get(f"collectives_{phase}")
        if ops:  # rank 0's
            per = r["decode_tokens"] if phase == "decode" else 1
            text = ", ".join(f"{op} x{s['count'] / per:g} ({s['bytes'] / per / 2**20:.1f} MiB, "
                             f"{s['modelled_ns'] / per / 1e3:.1f} us)" for op, s in ops.items())
            lines.append(f"  collectives, {phase}{' (per token)' if phase == 'decode' else ''}: {text}")
    for phase in ("prefill", "decode", "forward", "train"):
        rows = r.get(f"top_kernels_{phase}")
        if not rows:
            continue
        lines.append(f"  top kernels, {phase}{' (last step)' if phase == 'decode' else ''}:")
        for k in rows:
            lines.append(f"    {k['kernel']:<40} x{k['count']:<5} {k['time_s'] * 1e6:11.1f} us  "
                         f"{100 * k['share']:5.1f}%  {k['bound']:<9} {100 * k['fraction_of_peak']:5.1f}% of peak")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
