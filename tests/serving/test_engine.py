"""transformers' continuous batching engine on emu: greedy outputs equal CPU's token for token with
the host fallback forbidden, its paged-cache attention runs as device kernels (the KV gather
charged per sector), the engine's background thread beside device work of the main thread, and
a request that cannot fit refused while the others complete."""
import threading

import pytest
import torch
from transformers import GenerationConfig

from torch_plugin.serve import engine
from tests.serving.conftest import prompts

GREEDY = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=6)


def _generate_batch(model, inputs, **config):
    out = model.generate_batch(inputs, generation_config=GREEDY, continuous_batching_config=engine.cb_config(**config),
                               progress_bar=False)
    return {k: list(v.generated_tokens) for k, v in out.items()}


def _generate_one_by_one(model, inputs, n):
    """Plain generate() with the dynamic KV cache, one request at a time (the reference)."""
    out = {}
    for i, p in enumerate(inputs):
        ids = torch.tensor([p], device=model.device)
        g = model.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
        out[f"req_{i}"] = g[0, len(p):].tolist()
    return out


def test_generate_batch_equals_cpu_token_for_token(llama_pair):
    cpu, emu = llama_pair
    inputs = prompts(10, seed=1)
    before = torch.emu.op_stats()
    with torch.emu.host_fallback("forbid"):
        got = _generate_batch(emu, inputs, num_blocks=24, page_size=8, max_batch_tokens=32, max_requests_per_batch=4)
    want = _generate_batch(cpu, inputs, num_blocks=24, page_size=8, max_batch_tokens=32, max_requests_per_batch=4)
    assert got == want
    assert got == _generate_one_by_one(cpu, inputs, GREEDY.max_new_tokens)
    after = torch.emu.op_stats()
    assert after["host_fallback"] == before["host_fallback"]


def _native_delta(before, after):
    return {op: n - before["native"].get(op, 0) for op, n in after["native"].items() if n > before["native"].get(op, 0)}


def test_paged_attention_path_is_native(llama_pair):
    """The paged cache's write (index_copy_ through the write index), its read through the block
    table (index_select through the read index) and the attention over the varlen batch are device
    kernels; nothing takes the host fallback."""
    _, emu = llama_pair
    before = torch.emu.op_stats()
    with torch.emu.host_fallback("forbid"):
        _generate_batch(emu, prompts(6, seed=2), num_blocks=16, page_size=8, max_batch_tokens=24)
    delta = _native_delta(before, torch.emu.op_stats())
    for op in ("aten::index_copy_", "aten::index_select", "aten::_scaled_dot_product_fused_attention_overrideable"):
        assert delta.get(op, 0) > 0, (op, delta)


def test_the_kv_gather_is_charged_per_sector(llama_pair):
    """A decode step's read of the cache is an index_select of whole token rows (kv heads x head
    dim) of the paged cache; its modelled traffic is its gathered rows' sectors plus the output it
    writes, whatever tokens it selects."""
    _, emu = llama_pair
    cfg = emu.config
    kv, d = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    cache = torch.zeros(64 * 8, kv, d, device="emu")       # 64 pages of 8 tokens, as the paged cache lays it out
    sector = torch.emu.get_device_properties(0).cache.sector_bytes
    row = kv * d * 4
    rows_sectors = -(-row // sector)
    for tokens in (torch.arange(0, 40), torch.tensor([3, 17, 200, 201, 202, 505, 8, 9])):
        index = tokens.to("emu")
        with torch.emu.profile() as prof:
            out = torch.index_select(cache, 0, index)
            torch.emu.synchronize()
        rows = [r for r in prof.report().ops if r.op == "aten::index_select"]
        assert len(rows) == 1
        assert rows[0].bytes == len(tokens) * rows_sectors * sector + out.numel() * 4 + index.numel() * 8, rows[0]


def test_engine_thread_beside_main_thread_device_work(llama_pair):
    """The engine's loop runs in its own thread on its own stream while the main thread runs device
    work on another stream: both get CPU's results (the runtime's lock, per-thread current streams
    and the one host clock)."""
    cpu, emu = llama_pair
    inputs = prompts(8, seed=3)
    want = _generate_batch(cpu, inputs, num_blocks=24, page_size=8)
    got, errors = {}, []

    def serve():
        try:
            got.update(_generate_batch(emu, inputs, num_blocks=24, page_size=8))
        except Exception as err:  # surfaced below
            errors.append(err)

    thread = threading.Thread(target=serve)
    side = torch.emu.Stream()
    a, b = torch.randn(48, 40), torch.randn(40, 24)
    with torch.emu.stream(side):
        thread.start()
        results = []
        while thread.is_alive() or not results:
            results.append((a.to("emu") @ b.to("emu")).relu().cpu())
        assert torch.emu.current_stream() == side
    thread.join()
    assert not errors, errors
    assert got == want
    for r in results:
        torch.testing.assert_close(r, (a @ b).relu(), rtol=1e-5, atol=1e-5)


def test_a_request_that_cannot_fit_is_refused_and_the_others_complete(llama_pair):
    cpu, emu = llama_pair
    inputs = prompts(5, seed=4)
    requests = [engine.Request(f"r{i}", p, 4) for i, p in enumerate(inputs)]
    requests.insert(2, engine.Request("huge", list(range(3, 60)), 4))   # 61 tokens; the cache holds 6 x 8 = 48
    with torch.emu.host_fallback("forbid"):
        manager = engine.serve(emu, requests, engine.cb_config(num_blocks=6, page_size=8, max_batch_tokens=32))
    huge = manager.results.pop("huge")
    assert huge.error.startswith("RequestTooLargeError: request huge: 57 prompt + 4 new tokens = 61 tokens"), huge.error
    assert "holds 48 tokens" in huge.error and not huge.tokens
    want = _generate_one_by_one(cpu, inputs, 4)
    assert {k: r.tokens for k, r in manager.results.items()} == {f"r{i}": want[f"req_{i}"] for i in range(5)}
    assert all(r.error is None for r in manager.results.values())


def test_token_times_follow_the_modelled_clock(llama_pair):
    """Arrivals are admitted when the modelled host clock passes them (an idle engine waits for the
    next); a request's tokens come one step apart, after its arrival."""
    _, emu = llama_pair
    gap = 5e6   # 5 ms apart: each request finishes before the next arrives
    requests = [engine.Request(f"r{i}", p, 3, arrival_ns=i * gap) for i, p in enumerate(prompts(3, seed=5))]
    manager = engine.serve(emu, requests, engine.cb_config(num_blocks=8, page_size=8))
    for i, r in enumerate(manager.results[f"r{i}"] for i in range(3)):
        assert r.arrival_ns == i * gap and r.token_ns[0] > r.arrival_ns
        assert r.token_ns == sorted(r.token_ns) and len(set(r.token_ns)) == 3
        assert r.token_ns[-1] < (i + 1) * gap
    steps = [manager.results[f"r{i}"].tpot_ns for i in range(3)]
    assert max(steps) == pytest.approx(min(steps), rel=0.05)   # the same decode step each time


class _Clock:
    """A host clock on its own: ``advance_host_time`` sets it to exactly its argument."""

    def __init__(self, now_ns: float):
        self.now_ns = now_ns

    def host_time_ns(self) -> float:
        return self.now_ns

    def advance_host_time(self, t_ns: float) -> float:
        waited = max(0.0, t_ns - self.now_ns)
        self.now_ns = max(self.now_ns, t_ns)
        return waited


class _IdleProcessor:
    class cache:   # noqa: N801  (what _admit reads of the cache)
        num_blocks = 8

    def has_pending_requests(self) -> bool:
        return False


def test_an_idle_engine_admits_the_arrival_it_advanced_to_whatever_the_start_time(llama_pair):
    """The idle engine sets the host clock to start + arrival; the request then counts as arrived
    even where (start + arrival) - start rounds below arrival (a start of 2**22 + 1 ulp and 5 ms:
    the engine used to compare that difference and waited for the request forever)."""
    _, emu = llama_pair
    start = 2.0 ** 22 + 2.0 ** -30
    gap = 5e6
    assert (start + gap) - start < gap   # the rounding this start brings
    requests = [engine.Request("r0", [3, 4, 5], 2), engine.Request("r1", [6, 7], 2, arrival_ns=gap)]
    manager = engine.ClockedManager(emu, GREEDY, engine.cb_config(num_blocks=8, page_size=8), requests)
    manager.rt = _Clock(start)
    processor = _IdleProcessor()
    manager._admit(processor)   # r0 arrives at the start
    assert manager.input_queue.get_nowait().request_id == "r0" and manager.input_queue.empty()
    manager._admit(processor)   # idle: the clock moves to r1's arrival, which is admitted
    assert manager.rt.now_ns == start + gap
    assert manager.input_queue.get_nowait().request_id == "r1"
