"""Runs a zoo spec on a device beside the CPU reference: forward, training steps, greedy
generation, the host fallbacks a run needed, and device memory per step.

The device copy is ``copy.deepcopy(cpu_model).to(device)``, so both start from the same
weights. Everything here is ordinary PyTorch plus ``torch.<device>`` memory statistics, except
``host_fallbacks``, which reads emu's op-path counters (``torch.emu.op_stats()``).
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from torch_plugin.zoo import Batch, ModelSpec


def pair(spec: ModelSpec, device: str = "emu", seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(CPU model, device model) with identical weights."""
    cpu_model = spec.build(seed)
    return cpu_model, copy.deepcopy(cpu_model).to(device)


def untied_parameters(cpu_model: nn.Module, device_model: nn.Module) -> list[str]:
    """Names of parameters that are one shared Parameter in ``cpu_model`` but separate ones in
    ``device_model`` (a tied LM head that the move to the device untied)."""
    def groups(model):
        names: dict[int, list[str]] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(name)
        return {tuple(v) for v in names.values() if len(v) > 1}
    on_device = groups(device_model)
    return [", ".join(g) for g in sorted(groups(cpu_model)) if g not in on_device]


def to_device(batch: Batch, device) -> Batch:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _autocast(device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


@torch.no_grad()
def forward(spec: ModelSpec, model: nn.Module, batch: Batch, autocast: torch.dtype | None = None) -> torch.Tensor:
    """The spec's output in eval mode, as a float32 CPU tensor."""
    model.eval()
    device = next(model.parameters()).device
    with _autocast(device, autocast):
        out = spec.output(model, to_device(batch, device))
    return out.float().cpu()


@dataclass
class Step:
    loss: float
    peak_bytes: int | None       # peak device memory allocated during the step (None on the CPU)
    allocated_bytes: int | None  # device memory allocated after the step


def optimizer_for(spec: ModelSpec, model: nn.Module, impl: str = "for-loop") -> torch.optim.Optimizer:
    """AdamW with torch's ``impl``: "for-loop" (foreach=False, per-parameter ops), "foreach"
    (the ``_foreach_*`` ops) or "fused" (``_fused_adamw_``)."""
    flags = {"for-loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}[impl]
    return torch.optim.AdamW(model.parameters(), lr=spec.lr, **flags)


def train(spec: ModelSpec, model: nn.Module, batch: Batch, steps: int, optimizer=None,
          autocast: torch.dtype | None = None) -> list[Step]:
    """``steps`` AdamW steps on one batch in train mode; per step the loss and, on an accelerator,
    its peak and resident device memory (``torch.<device>.max_memory_allocated`` reset each step)."""
    model.train()
    device = next(model.parameters()).device
    mem = getattr(torch, device.type) if device.type != "cpu" else None
    optimizer = optimizer or optimizer_for(spec, model)
    batch = to_device(batch, device)
    records = []
    for _ in range(steps):
        if mem is not None:
            mem.synchronize()
            mem.reset_peak_memory_stats()
        optimizer.zero_grad(set_to_none=True)
        with _autocast(device, autocast):
            loss = spec.loss(model, batch)
        loss.backward()
        optimizer.step()
        value = loss.item()
        del loss
        if mem is not None:
            mem.synchronize()
            records.append(Step(value, mem.max_memory_allocated(), mem.memory_allocated()))
        else:
            records.append(Step(value, None, None))
    return records


@torch.no_grad()
def generate(spec: ModelSpec, model: nn.Module, prompt: torch.Tensor, new_tokens: int = 8) -> torch.Tensor:
    """Greedy decoding of ``new_tokens`` tokens (a KV cache or the recurrent state), on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    return spec.generate(model, prompt.to(device), new_tokens).cpu()


def host_fallbacks(fn, *args, **kwargs) -> tuple[object, dict[str, int]]:
    """Runs ``fn`` with the host fallback allowed and returns (its result, {aten op: count} of the
    ops that fell back), so a failure can name every missing op, not only the first. If ``fn``
    raises, the ops rejected or run on the host so far are added to the exception as a note."""
    torch.emu.reset_op_stats()
    try:
        with torch.emu.host_fallback("allow"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(*args, **kwargs)
        torch.emu.synchronize()
    except Exception as err:
        stats = torch.emu.op_stats()
        for path in ("rejection", "host_fallback"):
            if stats[path]:
                err.add_note(f"{path} during the run: {dict(sorted(stats[path].items()))}")
        raise
    return result, dict(torch.emu.op_stats()["host_fallback"])


def full_run(spec: ModelSpec, model: nn.Module, seed: int = 0, steps: int = 1):
    """Forward, ``steps`` training steps and (decoders) a short generation: what strict mode checks."""
    batch = spec.batch(seed)
    forward(spec, model, batch)
    train(spec, model, batch, steps)
    if spec.is_decoder:
        generate(spec, model, spec.prompt(seed), 4)
