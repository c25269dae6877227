"""Convolution blocks of the CNN families that ran 20-220x CPU eager (issue 18): emu vs CPU eager
wall time per block, forward and forward + backward, measured in the same run.

The blocks stand in for timm/torchvision models (not installable here): depthwise 3x3/5x5/7x7
convolutions with stride 1/2 (MobileNet/EfficientNet/ConvNeXt), a grouped 3x3 (ResNeXt), GhostNet's
ghost module (1x1 conv, then its cheap operation: a depthwise 3x3 on that half of the channels),
a squeeze-excite block (adaptive average pool + two 1x1 convolutions), an EfficientNet MBConv,
a ConvNeXt block (depthwise 7x7 + LayerNorm over channels-last + MLP) and a MobileViT-style
unfold / attention / fold. Batch 2, float32, host fallback forbidden on emu. Target: every
block within 5x CPU eager. Each timing is the best of N calls after a warm-up (the emu call
includes ``torch.emu.synchronize()``); emu's result is checked against CPU's once.

    python benchmarks/bench_cnn_blocks.py [--quick] [--only NAME]
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from timing import best_of  # noqa: E402

TARGET = 5.0


class Depthwise(nn.Module):
    def __init__(self, c, k, stride):
        super().__init__()
        self.conv = nn.Conv2d(c, c, k, stride, k // 2, groups=c)

    def forward(self, x):
        return self.conv(x)


class Ghost(nn.Module):
    """GhostNet's module: a 1x1 conv to half the channels, the cheap operation (depthwise 3x3 on
    that half), concatenated."""
    def __init__(self, c_in, c_out):
        super().__init__()
        half = c_out // 2
        self.primary = nn.Sequential(nn.Conv2d(c_in, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU())
        self.cheap = nn.Sequential(nn.Conv2d(half, half, 3, 1, 1, groups=half, bias=False), nn.BatchNorm2d(half),
                                   nn.ReLU())

    def forward(self, x):
        y = self.primary(x)
        return torch.cat([y, self.cheap(y)], 1)


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // r, 1)
        self.expand = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.relu(self.reduce(s))))


class MBConv(nn.Module):
    """EfficientNet's inverted residual: 1x1 expand, depthwise 3x3, squeeze-excite, 1x1 project."""
    def __init__(self, c, expand=4):
        super().__init__()
        e = c * expand
        self.body = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.SiLU(),
                                  nn.Conv2d(e, e, 3, 1, 1, groups=e, bias=False), nn.BatchNorm2d(e), nn.SiLU(),
                                  SqueezeExcite(e), nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class ConvNeXt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, 1, 3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class MobileViT(nn.Module):
    """MobileViT's local-global block: depthwise 3x3 + 1x1, unfold into 2x2 patches, attention
    over the patches, fold back, 1x1 fuse."""
    def __init__(self, c, d=64):
        super().__init__()
        self.local = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, groups=c), nn.Conv2d(c, d, 1))
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.fuse = nn.Conv2d(d, c, 1)

    def forward(self, x):
        n, _, h, w = x.shape
        y = self.local(x)
        d = y.shape[1]
        p = F.unfold(y, 2, stride=2)                        # (n, d * 4, L)
        t = p.view(n, d, 4, -1).permute(0, 2, 3, 1).reshape(n * 4, -1, d)
        t = t + self.attn(self.norm(t), self.norm(t), self.norm(t), need_weights=False)[0]
        p = t.reshape(n, 4, -1, d).permute(0, 3, 1, 2).reshape(n, d * 4, -1)
        return x + self.fuse(F.fold(p, (h, w), 2, stride=2))


def blocks(quick: bool):
    s = 4 if quick else 1     # --quick: smaller images and fewer channels
    return {
        "depthwise 3x3 s1 56x56 c64": (Depthwise(64 // s, 3, 1), (64 // s, 56 // s)),
        "depthwise 3x3 s2 56x56 c128": (Depthwise(128 // s, 3, 2), (128 // s, 56 // s)),
        "depthwise 5x5 s1 28x28 c240": (Depthwise(240 // s, 5, 1), (240 // s, 28 // s)),
        "depthwise 5x5 s2 28x28 c240": (Depthwise(240 // s, 5, 2), (240 // s, 28 // s)),
        "depthwise 7x7 s1 14x14 c512": (Depthwise(512 // s, 7, 1), (512 // s, 14)),
        "grouped 3x3 g32 28x28 c256": (nn.Conv2d(256 // s, 256 // s, 3, 1, 1, groups=32 // s), (256 // s, 28 // s)),
        "ghost module 28x28 c80": (Ghost(80 // s, 160 // s), (80 // s, 28 // s)),
        "squeeze-excite 14x14 c480": (SqueezeExcite(480 // s), (480 // s, 14)),
        "mbconv 28x28 c40": (MBConv(40 // s), (40 // s, 28 // s)),
        "convnext block 14x14 c384": (ConvNeXt(384 // s), (384 // s, 14)),
        "mobilevit block 16x16 c96": (MobileViT(96 // s, 64 // s), (96 // s, 16)),
    }


def _step(model, x, backward):
    if not backward:
        with torch.no_grad():
            return model(x)
    model.zero_grad(set_to_none=True)
    y = model(x)
    y.sum().backward()
    return y


def measure(model, channels, size, backward, repeats, inner):
    torch.manual_seed(0)
    x = torch.randn(2, channels, size, size)
    cpu = copy.deepcopy(model).train(backward)
    dev = copy.deepcopy(model).to("emu").train(backward)
    xd = x.to("emu")
    want = _step(cpu, x, backward)
    got = _step(dev, xd, backward)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    if backward:
        for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-3, msg=f"grad of {name}")

    def run_dev():
        _step(dev, xd, backward)
        torch.emu.synchronize()

    t_cpu = best_of(lambda: _step(cpu, x, backward), repeats, inner)
    t_dev = best_of(run_dev, repeats, inner)
    return t_cpu, t_dev


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small blocks, one timed round (smoke test)")
    parser.add_argument("--only", help="run the blocks whose name contains this")
    args = parser.parse_args()
    import torch_plugin  # noqa: F401
    repeats, inner = (1, 1) if args.quick else (5, 3)
    print(f"{'block':32s} {'pass':8s} {'cpu ms':>9s} {'emu ms':>9s} {'emu/cpu':>8s}")
    worst = 0.0
    with torch.emu.host_fallback("forbid"):
        for name, (model, (channels, size)) in blocks(args.quick).items():
            if args.only and args.only not in name:
                continue
            for backward in (False, True):
                t_cpu, t_dev = measure(model, channels, size, backward, repeats, inner)
                ratio = t_dev / t_cpu
                worst = max(worst, ratio)
                flag = "" if ratio <= TARGET else f"  (over the {TARGET:g}x target)"
                print(f"{name:32s} {'fwd+bwd' if backward else 'fwd':8s} {t_cpu * 1e3:9.3f} {t_dev * 1e3:9.3f} "
                      f"{ratio:8.2f}{flag}", flush=True)
    print(f"worst emu/cpu ratio: {worst:.2f} (target {TARGET:g}x)")


if __name__ == "__main__":
    main()
