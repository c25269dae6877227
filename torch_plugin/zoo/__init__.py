"""The model zoo: representative models, built from a seed with random weights (nothing is
downloaded), each with an input batch, a loss and, for decoders, greedy generation.

``MODELS`` maps a name to a :class:`ModelSpec`. The in-project models are defined in
``torch_plugin/zoo/models.py``; the ``transformers`` ones come from one table,
``torch_plugin/zoo/hf.py:TRANSFORMERS`` (adding an architecture is one line there), and
``torch_plugin/zoo/sweep.py`` builds any causal-LM family the installed ``transformers``
knows from a shrunken config. ``torch_plugin/zoo/harness.py`` runs a spec on a device and
on the CPU reference. ``transformers`` is imported only when a model of it is built.

The models and specs are plain PyTorch and never touch the emulator, so any device could run
them; only ``harness.host_fallbacks`` reads emu's op-path counters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

Batch = dict  # keyword arguments of the model's forward (and of the loss), CPU tensors


@dataclass(frozen=True)
class ModelSpec:
    """How to build, feed, train and decode one zoo model.

    ``build(seed)`` returns the model on the CPU with weights drawn from ``seed``; ``batch(seed)``
    a :data:`Batch`; ``loss(model, batch)`` a scalar; ``output(model, batch)`` the tensor the
    forward comparison checks. Decoders have ``prompt(seed)`` (token ids) and
    ``generate(model, prompt, n)`` (greedy, with a KV cache or recurrent state). Tolerances are
    float32 and stated per model, because depth and normalisation change how far the device's
    summation order can move a result."""

    name: str
    source: str  # "in-project" or "transformers"
    description: str
    build: Callable[[int], nn.Module]
    batch: Callable[[int], Batch]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    output: Callable[[nn.Module, Batch], torch.Tensor]
    prompt: Callable[[int], torch.Tensor] | None = None
    generate: Callable[[nn.Module, torch.Tensor, int], torch.Tensor] | None = None
    forward_tol: dict = field(default_factory=lambda: dict(rtol=1e-4, atol=1e-5))
    loss_tol: dict = field(default_factory=lambda: dict(rtol=1e-4, atol=1e-5))
    lr: float = 1e-3

    @property
    def is_decoder(self) -> bool:
        return self.generate is not None


def seeded(build: Callable[[], nn.Module]) -> Callable[[int], nn.Module]:
    """``build`` run under ``torch.manual_seed(seed)`` without disturbing the caller's CPU RNG."""
    def build_from(seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return build()
    return build_from


def _in_project_models() -> dict[str, ModelSpec]:
    from torch_plugin.zoo import models
    from torch.nn import functional as F

    def gen(seed):
        return torch.Generator().manual_seed(1000 + seed)

    def mlp_batch(seed):
        g = gen(seed)
        return {"x": torch.randn(16, 64, generator=g), "target": torch.randint(0, 10, (16,), generator=g)}

    def image_batch(seed):
        g = gen(seed)
        return {"x": torch.randn(4, 3, 32, 32, generator=g), "target": torch.randint(0, 10, (4,), generator=g)}

    def classify_loss(model, b):
        return F.cross_entropy(model(b["x"]), b["target"])

    def classify_output(model, b):
        return model(b["x"])

    def tokens(seed, shape, vocab=256):
        return torch.randint(0, vocab, shape, generator=gen(seed))

    def lstm_loss(model, b):
        logits, _ = model(b["tokens"][:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["tokens"][:, 1:].reshape(-1))

    def unet_batch(seed):
        g = gen(seed)
        x0 = torch.randn(2, 3, 16, 16, generator=g)
        noise = torch.randn(2, 3, 16, 16, generator=g)
        t = torch.randint(0, 1000, (2,), generator=g)
        alpha = (1 - t.float() / 1000)[:, None, None, None]  # a linear schedule, precomputed on the host
        return {"x": alpha.sqrt() * x0 + (1 - alpha).sqrt() * noise, "t": t, "noise": noise}

    def unet_loss(model, b):
        return F.mse_loss(model(b["x"], b["t"]), b["noise"])

    return {
        "mlp": ModelSpec(
            "mlp", "in-project", "Linear 64 -> 128 -> 128 -> 10, ReLU, LayerNorm before the head, batch 16",
            seeded(models.MLP), mlp_batch, classify_loss, classify_output),
        "resnet18": ModelSpec(
            "resnet18", "in-project", "ResNet-18 layout (width 16, CIFAR stem, BatchNorm), 4x3x32x32",
            seeded(models.ResNet18), image_batch, classify_loss, classify_output,
            forward_tol=dict(rtol=1e-4, atol=1e-4), loss_tol=dict(rtol=1e-4, atol=1e-4)),
        "lstm_lm": ModelSpec(
            "lstm_lm", "in-project", "Embedding 32 -> 2-layer nn.LSTM 64 -> linear, vocab 256, 2x16 tokens",
            seeded(models.LSTMLanguageModel), lambda s: {"tokens": tokens(s, (2, 17))}, lstm_loss,
            lambda m, b: m(b["tokens"])[0],
            prompt=lambda s: tokens(s, (1, 6)), generate=lambda m, p, n: m.generate(p, n)),
        "unet": ModelSpec(
            "unet", "in-project",
            "diffusion UNet: 2 levels, GroupNorm, skips, sinusoidal timestep MLP, 2x3x16x16, noise MSE",
            seeded(models.UNet), unet_batch, unet_loss, lambda m, b: m(b["x"], b["t"]),
            forward_tol=dict(rtol=1e-4, atol=1e-4)),
    }


def _build_registry() -> dict[str, ModelSpec]:
    from torch_plugin.zoo import hf
    specs = _in_project_models()
    specs.update(hf.transformers_specs())
    return specs


MODELS: dict[str, ModelSpec] = _build_registry()

__all__ = ["MODELS", "ModelSpec", "Batch", "seeded"]
