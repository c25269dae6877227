"""The main job: a small MLP trains for a few steps on the emulated chip.

Prints the device, its hardware description, what ran natively and what fell
back to the host, the check against the CPU reference, and the
projected-performance report; writes the modelled timeline to
``out/demo_timeline.json`` (Perfetto / Chrome trace format). Run with ``make demo`` (or
``python -m torch_plugin.demo``).
"""
from __future__ import annotations

import json
import os
import warnings

import torch
from torch import nn

import torch_plugin  # noqa: F401  (registers emu; autoload does the same)


def build_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def main() -> None:
    warnings.simplefilter("ignore")  # fallbacks are reported below, once, with counts
    device = torch.device("emu:0")
    props = torch.emu.get_device_properties(0)
    print(f"device: {device} -- {props.name}, {torch.emu.device_count()} devices in the system")
    print("hardware:", json.dumps(torch.emu.get_hardware_description(), indent=None))

    cpu_model = build_mlp()
    model = build_mlp().to(device)
    x = torch.randn(64, 256)
    target = torch.randint(0, 10, (64,))

    expected = cpu_model(x)
    got = model(x.to(device))
    torch.testing.assert_close(got.cpu(), expected, rtol=1.3e-6 * 10, atol=1e-5)
    print("forward matches the CPU reference (float32, rtol 1.3e-5, atol 1e-5)")

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    cpu_optimizer = torch.optim.SGD(cpu_model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(3):
        optimizer.zero_grad()
        loss = loss_fn(model(x.to(device)), target.to(device))
        loss.backward()
        optimizer.step()
        cpu_optimizer.zero_grad()
        cpu_loss = loss_fn(cpu_model(x), target)
        cpu_loss.backward()
        cpu_optimizer.step()
        print(f"step {step}: loss emu {loss.item():.6f}  cpu {cpu_loss.item():.6f}")
    for p_emu, p_cpu in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p_emu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)
    print("parameters after 3 SGD steps match the CPU reference (rtol 1e-4, atol 1e-5)")
    torch.emu.synchronize()

    stats = torch.emu.op_stats()
    print("ops run natively on the device:", dict(sorted(stats["native"].items())))
    print("ops that fell back to the host:", dict(sorted(stats["host_fallback"].items())))
    print(torch.emu.performance_report())
    os.makedirs("out", exist_ok=True)
    torch.emu.export_timeline("out/demo_timeline.json")
    print("timeline of the device commands: out/demo_timeline.json (open it at ui.perfetto.dev)")


if __name__ == "__main__":
    main()
