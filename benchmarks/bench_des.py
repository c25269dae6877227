"""Speed of the emulator itself (issue #8): DES throughput and the cost of tile fidelity.

1. Commands simulated per wall second, at kernel and tile fidelity, driving the firmware
   directly (platform + firmware, no driver): a burst of small launches that repeat (the
   decoded-launch cache hits, as in a training loop), launches that are all different (every
   one is decoded and costed), and host-to-device copies. Target: >= 50k commands/s at kernel
   fidelity on the repeated launches.
2. Wall time of the zoo's GPT-2-style forward (4 layers, width 384, 6 heads, batch 1, 128
   tokens) at ``EMU_FIDELITY=tile`` vs ``kernel``, first (cold) forward and steady state, each
   fidelity in a fresh child process. Target: tile <= 5x kernel.

Prints ratios measured in this run; asserts nothing about time.

    python benchmarks/bench_des.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DES_TARGET = 50_000
TILE_TARGET = 5.0


def _rig(fidelity: str):
    import numpy as np
    from emulator.config import from_dict, describe, load_preset
    from firmware import FirmwareImage, Platform, abi
    data = describe(load_preset("default"))
    data["fidelity"] = fidelity
    platform = Platform(from_dict(data))
    ep = platform.endpoints[0]
    ep.load_firmware(FirmwareImage())
    ep.connect_interrupts(lambda vector, payload: None)
    ep.create_address_space(1)
    ep.map_pages(1, 1 << 40, 0, 256 << 20)
    return platform, ep, abi, np


def des_throughput(fidelity: str, kind: str, commands: int) -> float:
    platform, ep, abi, np = _rig(fidelity)
    ring = ep.create_ring()
    entries = ep.ring_entries(ring)
    va = 1 << 40
    host = np.ones(1024, np.float32)
    host_desc = abi.TensorDescriptor(abi.MemorySpace.HOST, -1, 0, host.ctypes.data, 8, (1024,), (1,))

    def dev(offset, n):
        return abi.TensorDescriptor(abi.MemorySpace.DEVICE, 0, 1, va + offset, 8, (n,), (1,))

    seq = 0

    def command(i):
        if kind == "repeated launches":
            x = dev(0, 256)
            return abi.LaunchCommand(abi.Opcode.LAUNCH, seq, 1, "binary", ("add", x, x, x, 8, 1.0))
        if kind == "distinct launches":
            x = dev(0, 256 + i % 100_000)   # a new shape each time: decoded and costed each time
            return abi.LaunchCommand(abi.Opcode.LAUNCH, seq, 1, "binary", ("add", x, x, x, 8, 1.0))
        return abi.CopyCommand(abi.Opcode.COPY, seq, 1, dev(0, 1024), host_desc)

    sem, done = 1, 0
    start = time.perf_counter()
    while done < commands:
        burst = min(entries - 2, commands - done)
        for i in range(burst):
            seq += 1
            ep.write_ring(ring, 0.0, command(done + i))
        seq += 1
        ep.write_ring(ring, 0.0, abi.SignalCommand(abi.Opcode.SIGNAL, seq, 1, sem, 1))
        ep.ring_doorbell(ring)
        ep.wait_semaphore(sem, 1)
        sem += 1
        done += burst
    wall = time.perf_counter() - start
    executed = ep.firmware.commands_executed
    assert executed == commands, (executed, commands)
    return commands / wall


def _forward_child(quick: bool) -> None:
    import torch
    import torch_plugin  # noqa: F401
    from torch_plugin.zoo import hf
    layers, width, heads, seq = (1, 64, 4, 32) if quick else (4, 384, 6, 128)
    config = hf.build_config("GPT2Config", dict(n_layer=layers, n_embd=width, n_head=heads, n_positions=256,
                                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    torch.manual_seed(0)
    model = hf.build_model(config, "GPT2LMHeadModel").eval().to("emu")
    tokens = torch.randint(0, config.vocab_size, (1, seq)).to("emu")

    def forward():
        with torch.no_grad():
            model(tokens)
        torch.emu.synchronize()

    t = time.perf_counter()
    forward()
    cold = time.perf_counter() - t
    steady = float("inf")
    for _ in range(2 if quick else 3):
        t = time.perf_counter()
        forward()
        steady = min(steady, time.perf_counter() - t)
    print(json.dumps({"cold": cold, "steady": steady}))


def forward_times(fidelity: str, quick: bool) -> dict:
    env = dict(os.environ, EMU_FIDELITY=fidelity, EMU_HOST_FALLBACK="allow", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--child"] + (["--quick"] if quick else []), env=env,
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer commands, a smaller model")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _forward_child(args.quick)
        return
    n = 20_000 if args.quick else 100_000
    print(f"{'DES throughput':<40}{'kernel cmd/s':>14}{'tile cmd/s':>14}{'tile/kernel':>13}")
    for kind in ("repeated launches", "distinct launches", "host-to-device copies"):
        count = n if kind != "distinct launches" else n // 10
        k = des_throughput("kernel", kind, count)
        t = des_throughput("tile", kind, count)
        note = f"   target >= {DES_TARGET} at kernel: " + ("ok" if k >= DES_TARGET else "UNDER TARGET") \
            if kind == "repeated launches" else ""
        print(f"{kind:<40}{k:>14,.0f}{t:>14,.0f}{t / k:>13.2f}{note}")
    print()
    kernel, tile = forward_times("kernel", args.quick), forward_times("tile", args.quick)
    print(f"{'GPT-2-style forward':<40}{'kernel s':>14}{'tile s':>14}{'tile/kernel':>13}")
    for phase in ("cold", "steady"):
        ratio = tile[phase] / kernel[phase]
        print(f"{phase + ' forward':<40}{kernel[phase]:>14.3f}{tile[phase]:>14.3f}{ratio:>13.2f}"
              f"   target <= {TILE_TARGET:g}x: " + ("ok" if ratio <= TILE_TARGET else "OVER TARGET"))


if __name__ == "__main__":
    main()
