"""Capture and replay of compiled graphs (torch_plugin/compile/replay.py, docs/compile.md).

The first call of a lowered graph captures it; later calls with the same input layout replay it:
each segment in one ring write and one doorbell, intermediates in a pool reserved once, outputs
fresh per call, boundaries (random numbers, host synchronisation) run op by op in between.
"""
import gc

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import runtime
from firmware.platform import DeviceEndpoint
from torch_plugin.compile import compile_stats
from torch_plugin.compile.lowering import DeviceProgram


def block(x, w, b, r):
    h = torch.relu(x @ w + b) * 0.5
    p = torch.softmax(h, -1) + r
    return p.sum(0), h


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in ((16, 32), (32, 24), (24,), (16, 24))]


class RingCounter:
    """Counts the transport's ring writes and doorbells (on every device endpoint)."""

    def __init__(self, monkeypatch):
        self.writes = self.many = self.doorbells = 0
        write, many, bell = DeviceEndpoint.write_ring, DeviceEndpoint.write_ring_many, DeviceEndpoint.ring_doorbell

        def count_write(ep, *a):
            self.writes += 1
            return write(ep, *a)

        def count_many(ep, ring, t, commands):
            self.many += 1
            self.writes -= len(commands)     # the single-slot writes it makes are one ring write
            return many(ep, ring, t, commands)

        def count_bell(ep, *a):
            self.doorbells += 1
            return bell(ep, *a)
        monkeypatch.setattr(DeviceEndpoint, "write_ring", count_write)
        monkeypatch.setattr(DeviceEndpoint, "write_ring_many", count_many)
        monkeypatch.setattr(DeviceEndpoint, "ring_doorbell", count_bell)


def test_replay_is_one_ring_write_per_segment_and_equals_eager(fresh_dynamo, monkeypatch):
    compiled = torch.compile(block, backend="emu")
    emu = [t.to("emu") for t in inputs(0)]
    first = compiled(*emu)                                   # captures
    stats = compile_stats()
    assert stats["captures"] == 1 and stats["refused_captures"] == 0 and stats["boundaries"] == 0, \
        (stats, "replay allowed (no poisoned allocation):", runtime.get_runtime().replay_allowed())
    assert stats["segments"] == 1 and stats["captured_commands"] >= 3
    for seed in (1, 2, 3):
        emu = [t.to("emu") for t in inputs(seed)]
        torch.emu.synchronize()
        counter = RingCounter(monkeypatch)
        got = compiled(*emu)
        assert (counter.many, counter.writes, counter.doorbells) == (1, 0, 1)   # one segment, one write
        monkeypatch.undo()
        expected = block(*emu)                                 # eager on emu: the same kernels' values
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.cpu(), e.cpu(), rtol=0, atol=0)
        cpu = block(*inputs(seed))
        for g, e in zip(got, cpu):
            torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5)
    assert compile_stats()["replays"] == 3
    # a caller may keep an output: each call's outputs are fresh allocations
    again = compiled(*emu)
    assert again[0].data_ptr() != got[0].data_ptr() and first[1].data_ptr() != got[1].data_ptr()


def test_replay_charges_one_submission_and_the_encode_cost(fresh_dynamo):
    compiled = torch.compile(block, backend="emu")
    emu = [t.to("emu") for t in inputs(0)]
    compiled(*emu)
    torch.emu.synchronize()
    clock = runtime.get_runtime().clock
    host = runtime.get_runtime().config.host
    before = clock.snapshot()
    compiled(*emu)
    after = clock.snapshot()
    commands = compile_stats()["captured_commands"]
    assert after["encoded_commands"] - before["encoded_commands"] == commands
    assert after["encode_ns"] - before["encode_ns"] == pytest.approx(commands * host.command_encode_ns)
    assert after["api_calls"] - before["api_calls"] == 1                  # the one submission
    assert after["cached_allocs"] - before["cached_allocs"] == 2          # the two outputs' allocations
    assert after["now_ns"] - before["now_ns"] == pytest.approx(after["api_ns"] - before["api_ns"])


def noisy(x, w):
    h = x @ w
    n = torch.rand_like(h)                                     # a boundary: the generator is host state
    return torch.relu(h + n) * 2.0, n


def test_random_ops_are_boundaries_run_at_every_replay(fresh_dynamo, monkeypatch):
    compiled = torch.compile(noisy, backend="emu")
    x, w = (t.to("emu") for t in inputs(0)[:2])
    compiled(x, w)
    stats = compile_stats()
    assert stats["boundaries"] == 1 and stats["segments"] == 2, stats
    counter = RingCounter(monkeypatch)
    out1, n1 = compiled(x, w)
    out2, n2 = compiled(x, w)
    assert counter.many == 2 * 2                               # one ring write per segment per call
    monkeypatch.undo()
    assert not torch.equal(n1.cpu(), n2.cpu())                 # fresh random numbers at each call
    for out, n in ((out1, n1), (out2, n2)):
        torch.testing.assert_close(out.cpu(), torch.relu(x.cpu() @ w.cpu() + n.cpu()) * 2.0, rtol=1e-5, atol=1e-5)


def test_pool_is_reserved_once_reused_and_released():
    x, w, b, r = (t.to("emu") for t in inputs(0))
    gm = make_fx(block)(x, w, b, r)
    program = DeviceProgram(gm)
    expected = [t.cpu() for t in block(x, w, b, r)]
    program([x, w, b, r])
    pool = program._capture.pool_bytes
    assert pool > 0 and program._capture.pool is not None
    torch.emu.synchronize()
    steady = torch.emu.memory_allocated()
    for _ in range(3):
        got = program([x, w, b, r])
        del got
    torch.emu.synchronize()
    assert torch.emu.memory_allocated() == steady              # replays allocate nothing that stays
    got = program([x, w, b, r])
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)
    del got
    # another input layout captures again: the old pool goes
    x2 = torch.randn(8, 32, device="emu")
    r2 = torch.randn(8, 24, device="emu")
    torch.emu.synchronize()
    before = torch.emu.memory_allocated()
    program([x2, w, b, r2])
    assert program._capture.signature[1][0][1] == (8, 32)
    torch.emu.synchronize()
    assert torch.emu.memory_allocated() == before - pool + program._capture.pool_bytes
    # freeing the program frees its pool
    held = torch.emu.memory_allocated()
    pool2 = program._capture.pool_bytes
    del program
    gc.collect()
    torch.emu.synchronize()
    assert torch.emu.memory_allocated() <= held - pool2
