"""Fixtures of the serving tests: the zoo's llama (transformers LlamaForCausalLM, 2 layers, GQA)
with seeded random weights, its CPU original kept as the reference, and a small request set."""
import copy
import logging

import pytest
import torch

from torch_plugin import zoo

# transformers' continuous batching logs an error and a warning per manager about psutil (host
# memory figures it does not need here).
logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)


def build_llama(dtype=torch.float32):
    return zoo.MODELS["llama"].build(0).to(dtype).eval()


@pytest.fixture(scope="module")
def llama_pair():
    """(CPU model, emu model) with the same weights."""
    cpu = build_llama()
    emu = copy.deepcopy(cpu).to("emu")
    return cpu, emu


def prompts(n: int, seed: int = 0, lo: int = 2, hi: int = 9, vocab: int = 256):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (int(torch.randint(lo, hi + 1, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]
