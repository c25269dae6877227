"""The main job: a zoo transformer trains and generates on the emulated chip, checked against CPU.

    python -m torch_plugin.demo [--model gpt2] [--steps 3] [--batch 2] [--seq-len 32]
                                [--new-tokens 8] [--preset default] [--dtype fp32|bf16]

Builds the model from a small ``transformers`` config with random weights (nothing is
downloaded; ``torch_plugin/zoo/hf.py`` lists the architectures), copies it to ``emu:0`` and keeps
the CPU original as the reference. It then:

1. runs a few AdamW training steps on both (next-token loss on random token ids), printing the
   two losses per step and checking them, and the parameters at the end, against CPU;
2. generates a few tokens greedily with the KV cache on both and checks they are identical;
3. prints what ran natively, as a composite or decomposition, or fell back to the host;
4. prints the peak device memory and the projected-performance report, and writes the
   modelled timeline to ``out/demo_timeline.json`` (Perfetto / Chrome trace format).

``--dtype bf16`` runs forward and loss under ``torch.autocast(..., dtype=torch.bfloat16)`` on
both devices (the CPU reference under CPU autocast) and compares at bfloat16 tolerances.
Run with ``make demo``.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings

import torch


def _causal_lms() -> dict:
    from torch_plugin.zoo import hf
    return {name: (config_cls, model_cls, kwargs) for name, config_cls, model_cls, kwargs in hf.TRANSFORMERS
            if hf._kind(model_cls) == "causal_lm"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", help=f"a causal LM of the zoo: {', '.join(_causal_lms())}")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--width", type=int, default=128, help="hidden size (default 128)")
    parser.add_argument("--steps", type=int, default=3, help="AdamW training steps (default 3)")
    parser.add_argument("--batch", type=int, default=2, help="sequences per batch (default 2)")
    parser.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    parser.add_argument("--new-tokens", type=int, default=8, help="greedily generated tokens (default 8)")
    parser.add_argument("--preset", default=None, help="hardware preset (default: EMU_PRESET or 'default')")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                        help="fp32, or bf16 autocast for forward and loss (default fp32)")
    parser.add_argument("--timeline", default="out/demo_timeline.json", help="where to write the Perfetto trace")
    return parser.parse_args(argv)


def _config_kwargs(name: str, kwargs: dict, layers: int, width: int, seq_len: int, new_tokens: int) -> dict:
    """The zoo row's config, resized: layers, width (heads keep a head size of 16 or more), and
    positions for the prompt plus the generated tokens."""
    kwargs = dict(kwargs)
    positions = max(64, seq_len + new_tokens)
    if "n_layer" in kwargs:                                  # GPT-2 names
        kwargs.update(n_layer=layers, n_embd=width, n_positions=positions)
    else:
        heads = kwargs.get("num_attention_heads", 4)
        kv_heads = kwargs.get("num_key_value_heads", heads)
        kwargs.update(num_hidden_layers=layers, hidden_size=width, intermediate_size=2 * width,
                      max_position_embeddings=positions, num_attention_heads=heads, num_key_value_heads=kv_heads)
    return kwargs


def _paths(stats: dict) -> str:
    parts = []
    for path in ("native", "composite", "decomposition", "host_fallback", "rejection"):
        ops = stats.get(path, {})
        parts.append(f"{path} {sum(ops.values())} ({len(ops)} ops)")
    return ", ".join(parts)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.preset:
        os.environ["EMU_PRESET"] = args.preset            # read when the device starts, below
    warnings.simplefilter("ignore")                         # fallbacks are reported below, with counts
    import torch_plugin  # noqa: F401  (registers emu; torch's autoload does the same)
    from torch_plugin.zoo import hf, seeded
    import transformers
    transformers.logging.set_verbosity_error()             # its config notices are not the job's output

    models = _causal_lms()
    if args.model not in models:
        print(f"unknown --model {args.model!r}; the zoo's causal LMs are {', '.join(models)}", file=sys.stderr)
        return 2
    config_cls, model_cls, kwargs = models[args.model]
    config = hf.build_config(config_cls, _config_kwargs(args.model, kwargs, args.layers, args.width, args.seq_len,
                                                        args.new_tokens))
    cpu_model = seeded(lambda: hf.build_model(config, model_cls))(0)
    device = torch.device("emu:0")
    props = torch.emu.get_device_properties(0)
    print(f"device: {device} -- {props.name}, {torch.emu.device_count()} devices, preset "
          f"{os.environ.get('EMU_PRESET', 'default')}")
    print("hardware:", json.dumps(torch.emu.get_hardware_description(), indent=None))
    params = sum(p.numel() for p in cpu_model.parameters())
    print(f"model: {args.model} ({model_cls}), {args.layers} layers, width {args.width}, "
          f"{params / 1e6:.2f} M parameters, {args.dtype}")
    model = copy.deepcopy(cpu_model).to(device)
    torch.emu.reset_op_stats()
    torch.emu.reset_peak_memory_stats()

    bf16 = args.dtype == "bf16"
    # AdamW normalises each gradient element, so an element whose gradient is near zero moves by
    # up to lr whatever its sign: float32 summation-order differences (the device's are not
    # CPU's) reach the parameters at that scale and the losses at about 1e-4 relative.
    loss_tol = dict(rtol=2e-2, atol=2e-2) if bf16 else dict(rtol=1e-3, atol=1e-4)
    param_tol = dict(rtol=5e-2, atol=5e-3) if bf16 else dict(rtol=1e-3, atol=2e-3)
    generator = torch.Generator().manual_seed(1)

    def autocast(kind):
        return torch.autocast(kind, dtype=torch.bfloat16, enabled=bf16)

    # 1. training
    cpu_model.train()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cpu_optimizer = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    print(f"training: {args.steps} AdamW steps, batch {args.batch} x {args.seq_len} tokens")
    start = time.perf_counter()
    for step in range(args.steps):
        ids = torch.randint(3, config.vocab_size, (args.batch, args.seq_len), generator=generator)
        losses = []
        for m, opt, kind, x in ((model, optimizer, "emu", ids.to(device)), (cpu_model, cpu_optimizer, "cpu", ids)):
            opt.zero_grad(set_to_none=True)
            with autocast(kind):
                loss = m(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        emu_loss, cpu_loss = losses[0].cpu(), losses[1]
        torch.testing.assert_close(emu_loss, cpu_loss, **loss_tol)
        print(f"  step {step + 1}/{args.steps}: loss emu {emu_loss.item():.6f}  cpu {cpu_loss.item():.6f}  "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
    for (name, p_emu), p_cpu in zip(model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p_emu.detach().cpu(), p_cpu.detach(), **param_tol, msg=lambda m: f"{name}: {m}")
    print(f"losses and parameters match the CPU reference (loss {loss_tol}, parameters {param_tol})")

    # 2. greedy generation with the KV cache
    model.eval()
    cpu_model.eval()
    prompt = torch.randint(3, config.vocab_size, (1, 8), generator=generator)
    with torch.no_grad(), autocast("emu"):
        tokens = model.generate(prompt.to(device), do_sample=False, max_new_tokens=args.new_tokens,
                                min_new_tokens=args.new_tokens, use_cache=True).cpu()
    with torch.no_grad(), autocast("cpu"):
        cpu_tokens = cpu_model.generate(prompt, do_sample=False, max_new_tokens=args.new_tokens,
                                        min_new_tokens=args.new_tokens, use_cache=True)
    same = torch.equal(tokens, cpu_tokens)
    print(f"generation: {args.new_tokens} greedy tokens {tokens[0, prompt.shape[1]:].tolist()}: "
          + ("identical to CPU" if same else f"CPU gave {cpu_tokens[0, prompt.shape[1]:].tolist()}"))
    if not same and not bf16:
        print("error: greedy generation differs from the CPU reference", file=sys.stderr)
        return 1

    # 3-4. paths, memory, projection
    torch.emu.synchronize()
    stats = torch.emu.op_stats()
    print("op paths:", _paths(stats))
    print("ops that fell back to the host:", dict(sorted(stats["host_fallback"].items())) or "none")
    print(f"peak device memory: {torch.emu.max_memory_allocated(0) / 2**20:.1f} MiB allocated, "
          f"{torch.emu.max_memory_reserved(0) / 2**20:.1f} MiB reserved")
    print(torch.emu.performance_report())
    os.makedirs(os.path.dirname(args.timeline) or ".", exist_ok=True)
    torch.emu.export_timeline(args.timeline)
    print(f"timeline of the device commands: {args.timeline} (open it at ui.perfetto.dev)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
