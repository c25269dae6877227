"""Zoo models on emu vs CPU eager, wall time and peak host memory, in the same run (issue #7).

Workloads (host fallback forbidden on emu):
  * GPT-2-style decoder (4 layers, width 384, 6 heads, batch 1, sequence 128): forward, and
    one AdamW training step;
  * Llama-style decoder (4 layers, width 384, 6 query heads, 2 key-value heads): forward;
  * ResNet-18 (ImageNet stem, width 64, batch 8, 64x64): forward.
Targets: forward within 3x of CPU eager, the training step within 4x; peak host memory of the
emulation at most 2x the CPU run's.

Each (workload, device) runs in a fresh child process, so that its peak resident set
(``ru_maxrss``) is its own (``--quick`` runs every workload in one child per device); the CPU and emu children of a workload run one after the other,
warm-up first, then the best of N timed calls (the emu call includes ``torch.emu.synchronize()``).
The CPU result is checked against emu's once. ``--quick`` shrinks every model (the smoke test).

    python benchmarks/bench_models.py [--quick] [--only NAME]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

FORWARD_TARGET = 3.0
TRAIN_TARGET = 4.0
MEMORY_TARGET = 2.0


def _decoder(kind: str, quick: bool):
    from torch_plugin.zoo import hf
    layers, width, heads = (1, 64, 4) if quick else (4, 384, 6)
    if kind == "gpt2":
        config = hf.build_config("GPT2Config", dict(n_layer=layers, n_embd=width, n_head=heads,
                                                    n_positions=256, resid_pdrop=0.0, embd_pdrop=0.0,
                                                    attn_pdrop=0.0))
        return hf.build_model(config, "GPT2LMHeadModel"), config
    config = hf.build_config("LlamaConfig", dict(num_hidden_layers=layers, hidden_size=width,
                                                 num_attention_heads=heads, num_key_value_heads=2,
                                                 intermediate_size=4 * width, max_position_embeddings=256))
    return hf.build_model(config, "LlamaForCausalLM"), config


CASES = {
    "gpt2 forward": ("gpt2", "forward", FORWARD_TARGET),
    "gpt2 train step": ("gpt2", "train", TRAIN_TARGET),
    "llama forward": ("llama", "forward", FORWARD_TARGET),
    "resnet18 forward": ("resnet18", "forward", FORWARD_TARGET),
}


def child(case: str, device: str, quick: bool, repeats: int) -> dict:
    import warnings
    warnings.simplefilter("ignore")
    import torch
    import torch_plugin  # noqa: F401
    from torch_plugin.zoo import models

    model_name, mode, _ = CASES[case]
    torch.manual_seed(0)
    if model_name == "resnet18":
        model = models.ResNet18(classes=10, width=16 if quick else 64, small_input=False)
        batch = (torch.randn(2 if quick else 8, 3, 64, 64),)
        run_kwargs = {}
    else:
        model, config = _decoder(model_name, quick)
        ids = torch.randint(3, config.vocab_size, (1, 32 if quick else 128))
        batch = ()
        run_kwargs = {"input_ids": ids}
    model = model.to(device)
    batch = tuple(t.to(device) for t in batch)
    run_kwargs = {k: v.to(device) for k, v in run_kwargs.items()}
    if mode == "train":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def call():
            optimizer.zero_grad(set_to_none=True)
            loss = model(**run_kwargs, labels=run_kwargs["input_ids"]).loss
            loss.backward()
            optimizer.step()
            return loss
    else:
        model.eval()

        def call():
            with torch.no_grad():
                out = model(*batch, **run_kwargs)
            return out if isinstance(out, torch.Tensor) else out.logits

    def synchronised():
        result = call()
        if device == "emu":
            torch.emu.synchronize()
        return result

    policy = torch.emu.host_fallback("forbid") if device == "emu" else _null()
    with policy:
        result = synchronised()                                  # warm-up
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            synchronised()
            best = min(best, time.perf_counter() - start)
    return {"seconds": best, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "result": result.detach().float().cpu().reshape(-1)[:4096].tolist()}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _run_child(cases: list, device: str, quick: bool, repeats: int) -> dict:
    """{case: result} from one child process that runs ``cases`` on ``device``."""
    env = dict(os.environ)
    if device == "emu" and quick:
        env.setdefault("EMU_PRESET", "tiny")
    out = subprocess.run([sys.executable, __file__, "--child", ",".join(cases), "--device", device,
                          "--repeats", str(repeats)] + (["--quick"] if quick else []),
                         capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{cases} on {device} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small models, fewer repeats (the smoke test)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    if args.child:
        print(json.dumps({case: child(case, args.device, args.quick, repeats) for case in args.child.split(",")}))
        return 0
    import torch
    print(f"{'case':<20}{'emu wall':>12}{'cpu wall':>12}{'ratio':>8}{'target':>8}"
          f"{'emu RSS':>11}{'cpu RSS':>11}{'RSS ratio':>10}")
    ok = True
    cases = [case for case in CASES if args.only in case]
    if args.quick:   # one child per device for every case (a smoke test: the RSS is the run's peak)
        both = {device: _run_child(cases, device, True, repeats) for device in ("cpu", "emu")}
    for case in cases:
        target = CASES[case][2]
        if args.quick:
            cpu, emu = both["cpu"][case], both["emu"][case]
        else:
            cpu = _run_child([case], "cpu", False, repeats)[case]
            emu = _run_child([case], "emu", False, repeats)[case]
        torch.testing.assert_close(torch.tensor(emu["result"]), torch.tensor(cpu["result"]), rtol=2e-3, atol=2e-3)
        ratio = emu["seconds"] / cpu["seconds"]
        rss = emu["maxrss_kib"] / cpu["maxrss_kib"]
        met = ratio <= target and rss <= MEMORY_TARGET
        ok &= met
        print(f"{case:<20}{emu['seconds'] * 1e3:>9.1f} ms{cpu['seconds'] * 1e3:>9.1f} ms{ratio:>7.2f}x{target:>7g}x"
              f"{emu['maxrss_kib'] / 1024:>8.0f} MiB{cpu['maxrss_kib'] / 1024:>8.0f} MiB{rss:>9.2f}x"
              + ("" if met else "   OVER TARGET"), flush=True)
    print("all targets met" if ok else "some targets missed (see OVER TARGET)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
