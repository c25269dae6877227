"""The zoo's in-project model definitions: small, but shaped like the models people run.

Each class is plain ``torch.nn`` with no device-specific code: the zoo builds it on the
CPU from a seed and moves a deep copy to ``emu``, so the CPU run is the reference. Sizes
are constructor arguments; the defaults keep a forward and a training step to a fraction
of a second on the emulated chip. Dropout is left out on purpose: the device's RNG stream
is not the CPU's, so a model with dropout could not be compared number for number.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    """Linear/ReLU stack with a LayerNorm: a classifier over flat features."""

    def __init__(self, in_features: int = 64, hidden: int = 128, classes: int = 10, depth: int = 3):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth - 1):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers += [nn.LayerNorm(width), nn.Linear(width, classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv + BatchNorm, a 1x1 projection when the shape changes."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """ResNet-18's layout (stem, four stages of two basic blocks, global average pool, fc) with a
    width knob. ``small_input=True`` uses the CIFAR stem (3x3 conv, no max-pool) for 32x32 images;
    otherwise the ImageNet stem (7x7 stride-2 conv + 3x3 max-pool)."""

    def __init__(self, classes: int = 10, width: int = 16, small_input: bool = True):
        super().__init__()
        if small_input:
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
        stages = []
        inplanes = width
        for i, planes in enumerate([width, width * 2, width * 4, width * 8]):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)))
            inplanes = planes
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LSTMLanguageModel(nn.Module):
    """Embedding -> multi-layer ``nn.LSTM`` -> linear head over the vocabulary."""

    def __init__(self, vocab: int = 256, embed: int = 32, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, state=None):
        out, state = self.lstm(self.embed(tokens), state)
        return self.head(out), state

    @torch.no_grad()
    def generate(self, tokens: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy decoding that carries the recurrent state (an LSTM's KV cache): the prompt runs
        once, then each step feeds only the newest token."""
        logits, state = self(tokens)
        out = [tokens]
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            logits, state = self(nxt, state)
        return torch.cat(out, 1)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """DDPM's sinusoidal embedding of the (float) diffusion timestep, computed where ``t`` lives."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    """GroupNorm/SiLU/conv twice, the timestep embedding added in between, a 1x1 skip if needed."""

    def __init__(self, cin: int, cout: int, temb: int, groups: int = 8):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class UNet(nn.Module):
    """A small diffusion-style UNet: predicts the noise in ``x`` at timestep ``t``. Two resolution
    levels down (strided conv) and up (nearest upsample + conv), skip connections concatenated
    on the way up, a self-contained mid block, GroupNorm everywhere, and a timestep MLP."""

    def __init__(self, channels: int = 3, base: int = 16, temb: int = 32):
        super().__init__()
        c1, c2 = base, base * 2
        self.temb_dim = temb
        self.temb_mlp = nn.Sequential(nn.Linear(temb, temb * 2), nn.SiLU(), nn.Linear(temb * 2, temb * 2))
        t = temb * 2
        self.conv_in = nn.Conv2d(channels, c1, 3, padding=1)
        self.down1 = ResBlock(c1, c1, t)
        self.pool1 = nn.Conv2d(c1, c1, 3, stride=2, padding=1)
        self.down2 = ResBlock(c1, c2, t)
        self.pool2 = nn.Conv2d(c2, c2, 3, stride=2, padding=1)
        self.mid = ResBlock(c2, c2, t)
        self.up2 = nn.Conv2d(c2, c2, 3, padding=1)
        self.dec2 = ResBlock(c2 + c2, c2, t)
        self.up1 = nn.Conv2d(c2, c2, 3, padding=1)
        self.dec1 = ResBlock(c2 + c1, c1, t)
        self.norm_out = nn.GroupNorm(8, c1)
        self.conv_out = nn.Conv2d(c1, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.temb_mlp(timestep_embedding(t, self.temb_dim))
        h0 = self.conv_in(x)
        h1 = self.down1(h0, temb)
        h2 = self.down2(self.pool1(h1), temb)
        h = self.mid(self.pool2(h2), temb)
        h = self.up2(F.interpolate(h, scale_factor=2, mode="nearest"))
        h = self.dec2(torch.cat([h, h2], 1), temb)
        h = self.up1(F.interpolate(h, scale_factor=2, mode="nearest"))
        h = self.dec1(torch.cat([h, h1], 1), temb)
        return self.conv_out(F.silu(self.norm_out(h)))
