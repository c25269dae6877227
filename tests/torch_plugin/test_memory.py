"""The caching allocator seen from torch: stream-ordered frees with work in flight, small tensors
sharing segments, out-of-memory that poisons nothing (issue #5's repros)."""
import gc

import pytest
import torch

MiB = 1 << 20


@pytest.fixture(autouse=True)
def settled():
    gc.collect()
    torch.emu.synchronize()
    torch.emu.empty_cache()
    yield
    gc.collect()
    torch.emu.synchronize()
    torch.emu.empty_cache()


def test_empty_cache_while_queued_work_reads_a_freed_tensor():
    x = torch.randn(1 << 20, device="emu")
    expected = x.cpu().sum() * 2
    torch.emu.synchronize()
    y = x * 2                              # queued: reads x
    del x
    torch.emu.empty_cache()                # used to unmap x under the queued multiply: PAGE_FAULT
    torch.testing.assert_close(y.sum().cpu(), expected, rtol=1e-5, atol=1e-2)


def test_out_of_memory_retry_while_queued_work_reads_a_freed_tensor():
    y = torch.empty(16, device="emu")      # first, so that x's segment lies next to the free space
    x = torch.full((10 << 20,), 3.0, device="emu")      # 40 MiB of the 64 MiB device
    torch.emu.synchronize()
    torch.mul(x[:16], 2, out=y)            # queued: reads x
    del x
    big = torch.empty(50 * MiB, dtype=torch.uint8, device="emu")  # fits only once x's segment is back
    assert torch.emu.memory_stats()["num_alloc_retries"] >= 1
    assert y.cpu().tolist() == [6.0] * 16
    del big


def test_out_of_memory_is_operation_scoped():
    keep = torch.arange(1000, dtype=torch.float32, device="emu")
    pending = keep * 2                     # queued work in flight while the allocation fails
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(80 * MiB, dtype=torch.uint8, device="emu")
    assert pending.cpu().tolist() == [2.0 * i for i in range(1000)]
    assert keep.cpu().tolist() == [float(i) for i in range(1000)]
    assert (torch.ones(4, device="emu") + 1).cpu().tolist() == [2.0] * 4


def test_a_thousand_one_element_tensors_share_one_small_segment():
    free_before = torch.emu.mem_get_info()[0]
    allocated_before = torch.emu.memory_allocated()
    tensors = [torch.empty(1, device="emu") for _ in range(1000)]
    assert torch.emu.memory_allocated() - allocated_before == 1000 * 512
    used = free_before - torch.emu.mem_get_info()[0]
    assert used <= 2 * MiB                 # was 1000 x 64 KiB pages = 64 MB
    small = [s for s in torch.emu.memory_snapshot() if s["segment_type"] == "small"]
    assert sum(s["allocated_size"] for s in small) >= 1000 * 512
    del tensors


def test_memory_stats_have_torch_keys_and_agree_with_the_snapshot():
    a = torch.empty(1000, device="emu")
    b = torch.empty(3 * MiB // 4, device="emu")        # 3 MiB: the large pool
    stats = torch.emu.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms",
                "allocated_bytes.small_pool.current", "segment.large_pool.current",
                "inactive_split_bytes.all.current", "requested_bytes.all.current"):
        assert key in stats, key
    snapshot = torch.emu.memory_snapshot()
    assert sum(s["total_size"] for s in snapshot if s["device"] == 0) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in snapshot if s["device"] == 0) == stats["allocated_bytes.all.current"]
    assert stats["allocated_bytes.large_pool.current"] >= 3 * MiB
    del a, b
