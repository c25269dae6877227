"""sort / argsort / topk give CPU's indices even on ties (exact equality).

CPU's kernels call the C++ standard library (std::sort for an unstable sort, std::stable_sort,
a radix sort for large ascending 1-D integer tensors, and std::partial_sort or std::nth_element
for topk); equal keys come out in whatever order those algorithms leave them. The device
reproduces the same algorithms (emulator/kernels/_stdsort.pxi), so a model that routes on tied
scores (a zero-initialised MoE router: every expert scores the same) picks CPU's experts.
"""
from __future__ import annotations

import random

import pytest
import torch

import torch_plugin  # noqa: F401

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8]


def tied(rng: random.Random, shape, dtype):
    x = torch.tensor([rng.randrange(rng.choice([1, 2, 3, 50])) for _ in range(int(torch.Size(shape).numel()))])
    x = x.reshape(shape).to(dtype)
    if dtype.is_floating_point and x.numel() and rng.random() < 0.3:
        flat = x.view(-1)
        for _ in range(rng.randrange(1, 4)):
            flat[rng.randrange(flat.numel())] = float("nan")
    return x


@pytest.mark.parametrize("seed", range(6))
def test_sort_and_topk_indices_match_cpu_on_ties(seed, stats):
    rng = random.Random(seed)
    for _ in range(40):
        shape = [rng.choice([1, 2, 4, 5, 16, 17, 33, 70, 130]) for _ in range(rng.choice([1, 2, 3]))]
        if torch.Size(shape).numel() > 20000:
            shape = shape[:1]
        dtype = rng.choice(DTYPES)
        x = tied(rng, shape, dtype)
        dim = rng.randrange(len(shape))
        desc = rng.random() < 0.5
        for stable in (None, False, True):
            want = torch.sort(x, dim=dim, descending=desc, stable=stable)
            got = torch.sort(x.to("emu"), dim=dim, descending=desc, stable=stable)
            assert torch.equal(got.indices.cpu(), want.indices), (shape, dtype, dim, desc, stable)
            torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True, rtol=0, atol=0)
        k = rng.randrange(shape[dim] + 1)
        sorted_ = rng.random() < 0.7
        want = torch.topk(x, k, dim=dim, largest=desc, sorted=sorted_)
        got = torch.topk(x.to("emu"), k, dim=dim, largest=desc, sorted=sorted_)
        assert torch.equal(got.indices.cpu(), want.indices), (shape, dtype, dim, desc, k, sorted_)
        torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True, rtol=0, atol=0)
    stats.no_fallback()


@pytest.mark.parametrize("n", [32767, 32768])
def test_large_integer_sort_follows_cpu_radix_choice(n):
    # From GRAIN_SIZE (32768) elements CPU radix-sorts an ascending 1-D integer tensor (stable);
    # below it, std::sort (unstable). Descending always takes std::sort.
    x = torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(n))
    for desc in (False, True):
        assert torch.equal(torch.sort(x.to("emu"), descending=desc).indices.cpu(), torch.sort(x, descending=desc).indices)


def test_all_tied_topk_picks_cpus_experts():
    # The MoE case: a zero router gives every expert the same score.
    scores = torch.full((6, 8), 0.5)
    for k in (1, 2, 3, 8):
        assert torch.equal(torch.topk(scores.to("emu"), k, dim=1).indices.cpu(), torch.topk(scores, k, dim=1).indices)
