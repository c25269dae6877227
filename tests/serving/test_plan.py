"""The capacity plan against what the allocator holds: the weights, the paged cache and the engine's
static tensors byte for byte on the zoo's llama; the step activations an upper bound of what a
step allocates above them; and "what fits" at the edge of the tiny preset's 64 MiB (the plan's
cache serves, a cache whose static tensors exceed the device runs out of memory)."""
import gc

import pytest
import torch

from torch_plugin.serve import engine, plan
from tests.serving.conftest import build_llama

PAGE = 16


@pytest.fixture(scope="module")
def shape_and_weights():
    meta = plan.build_meta("llama", None, torch.float32)
    return meta, plan.model_shape(meta), plan.weights_bytes(meta)[1]


def test_plan_reads_the_model(shape_and_weights):
    meta, shape, weights = shape_and_weights
    cfg = meta.config
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (2, 2, 16)
    assert plan.kv_bytes_per_token(shape) == 2 * 2 * 2 * 16 * 4
    assert weights >= sum(p.numel() * 4 for p in meta.parameters())
    assert shape.vocab == cfg.vocab_size


def test_weights_are_what_the_allocator_holds(shape_and_weights):
    _, _, weights = shape_and_weights
    gc.collect()
    torch.emu.synchronize()
    base = torch.emu.memory_allocated()
    model = build_llama().to("emu")
    assert torch.emu.memory_allocated() - base == weights
    del model


@pytest.mark.parametrize("batch,seq_len,chunk,num_blocks", [(4, 32, 64, 40), (8, 48, 128, 40), (2, 60, 32, 24)])
def test_cache_and_engine_tensors_are_what_the_allocator_holds(llama_pair, shape_and_weights, batch, seq_len, chunk,
                                                               num_blocks):
    _, emu = llama_pair
    _, shape, _ = shape_and_weights
    requests = [engine.Request(f"r{i}", list(range(3, 3 + seq_len - 4)), 4) for i in range(batch)]
    gc.collect()                 # earlier modules' models may still wait for the cycle collector
    torch.emu.synchronize()
    base = torch.emu.memory_allocated()
    torch.emu.reset_peak_memory_stats()
    first = []
    config = engine.cb_config(num_blocks=num_blocks, page_size=PAGE, max_batch_tokens=chunk,
                              max_requests_per_batch=batch)
    manager = engine.serve(emu, requests, config,
                           on_step=lambda m: first or first.append(torch.emu.memory_allocated() - base))
    assert all(r.error is None and len(r.tokens) == 4 for r in manager.results.values())
    tokens = num_blocks * PAGE
    static = plan.cache_bytes(shape, tokens, PAGE) + plan.engine_bytes(shape, tokens, chunk)
    assert first[0] == static                      # after the first step: the cache and the engine's tensors
    above = torch.emu.max_memory_allocated() - base - static
    estimate = plan.step_activations(shape, batch, seq_len, chunk)
    assert 0.4 * estimate <= above <= estimate, (above, estimate)
    torch.emu.synchronize()
    assert torch.emu.memory_allocated() == base    # everything the engine held is freed


def test_what_fits_the_device(llama_pair, shape_and_weights):
    """The plan's cache on the tiny preset serves a batch; the smallest cache whose static tensors
    (with the weights) exceed the device's memory fails with the allocator's out-of-memory error."""
    _, emu = llama_pair
    meta, shape, weights = shape_and_weights
    _, capacity = torch.emu.mem_get_info()
    chunk, batch = 64, 4
    p = plan.make_plan(meta, "llama", "float32", capacity, batch, 32, page_size=PAGE, chunk=chunk)
    assert p.fits_tokens % PAGE == 0 and p.fits_tokens > 0
    assert p.fits_sequences == p.fits_tokens // 32
    gc.collect()
    resident = torch.emu.memory_allocated()
    assert resident >= weights                     # the module's llama (and whatever else lives) is on the device
    requests = [engine.Request(f"r{i}", list(range(3, 31)), 4) for i in range(batch)]
    config = engine.cb_config(num_blocks=p.fits_tokens // PAGE, page_size=PAGE, max_batch_tokens=chunk,
                              max_requests_per_batch=batch)
    torch.emu.empty_cache()
    other = torch.emu.memory_allocated() - weights   # tensors beside the model: the plan does not know them
    if other > 0:
        config.num_blocks -= -(-other // (PAGE * (plan.kv_bytes_per_token(shape) + chunk * 4 + 8)))
    manager = engine.serve(emu, requests, config)
    assert all(r.error is None for r in manager.results.values())
    blocks = p.fits_tokens // PAGE
    def static(blocks):
        return weights + plan.cache_bytes(shape, blocks * PAGE, PAGE) + plan.engine_bytes(shape, blocks * PAGE, chunk)
    while static(blocks) <= capacity:
        blocks += 1
    config = engine.cb_config(num_blocks=blocks, page_size=PAGE, max_batch_tokens=chunk, max_requests_per_batch=batch)
    with pytest.raises(RuntimeError, match="the continuous batching loop stopped") as info:
        engine.serve(emu, requests, config)
    cause = info.value.__cause__
    assert isinstance(cause, torch.OutOfMemoryError), repr(cause)
    del info, cause              # their tracebacks hold the frames that held the partial cache
    gc.collect()
    torch.emu.synchronize()
    torch.emu.empty_cache()
    assert torch.emu.memory_allocated() == resident
