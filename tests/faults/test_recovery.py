"""Recovery: after reset_device a fresh run reproduces the golden output bit for bit, and 1000
injected faults with recovery leak no device memory, handles, fences or threads."""
import itertools
import threading
import warnings

import numpy as np
import pytest
import torch

import runtime
import torch_plugin  # noqa: F401
from torch_plugin.zoo import MODELS
from torch_plugin.zoo.harness import to_device

from fault_helpers import dev, host

DEV = 1


def _forward(model, batch, device):
    with torch.no_grad():
        return MODELS["mlp"].output(model, to_device(batch, device)).cpu()


@pytest.mark.parametrize("kind", ["engine_hang", "ecc_uncorrectable", "dma_error", "page_fault", "firmware_crash"])
def test_fresh_run_after_reset_reproduces_the_golden_output_bit_for_bit(kind):
    spec = MODELS["mlp"]
    batch = spec.batch(0)
    device = f"emu:{DEV}"
    golden = _forward(spec.build(0).to(device), batch, device)
    model = spec.build(0).to(device)
    torch.emu.synchronize(DEV)
    torch.emu.faults.inject(kind, device=DEV, engine="matrix" if kind != "dma_error" else None, after_commands=1)
    with warnings.catch_warnings(), pytest.raises(torch.AcceleratorError):
        warnings.simplefilter("ignore")
        _forward(model, batch, device)
    torch.emu.reset_device(DEV, reason=f"test {kind}")
    again = _forward(spec.build(0).to(device), batch, device)
    assert torch.equal(again, golden)
    torch.emu.faults.clear()
    torch.emu.reset_device(DEV, reason="test teardown")


def _state(rt):
    """Everything that would grow if recovery leaked."""
    drv = rt.driver
    free, _ = rt.mem_get_info(0)
    stats = rt.device(0).allocator.stats()
    return {"free": free, "active": stats.get("active.all.current", 0),
            "allocated": stats.get("allocated_bytes.all.current", 0),
            "semaphores_issued": next(drv._semaphores), "queues": len(drv._queues), "contexts": len(drv._contexts),
            "poisoned": len(rt._poisoned), "threads": threading.active_count(),
            "armed": len(rt.health(0)["faults_armed"]), "retired": rt.health(0)["retired_pages"]}


KINDS = ["ecc_uncorrectable", "dma_error", "dma_timeout", "page_fault", "engine_hang", "firmware_crash",
         "ring_corruption", "link_down", "ecc_correctable", "bit_flip", "link_flaky", "thermal_throttle"]
INJECTIONS = 1000


def test_a_thousand_faults_with_recovery_leak_nothing(rt):
    n = 64
    values = np.arange(n, dtype=np.float32)
    stream = rt.stream(0)

    def one_round(kind):
        a = rt.malloc(0, 4 * n)
        b = rt.malloc(0, 4 * n)
        event = rt.event_create(0)
        rt.inject_fault(0, kind, after_commands=0)
        try:
            rt.memcpy(dev(0, a, n), host(values), stream)
            rt.launch("binary", ("add", dev(0, b, n), dev(0, a, n), dev(0, a, n), 8, 1.0), stream)
            rt.event_record(event, stream)
            out = np.zeros(n, np.float32)
            rt.memcpy(host(out), dev(0, b, n), stream, blocking=True)
            rt.event_synchronize(event)
        except runtime.EmuError:
            pass
        rt.clear_faults()
        rt.reset_device(0, "leak test")
        rt.event_destroy(event)
        rt.free(0, a)
        rt.free(0, b)

    for kind in KINDS:  # warm up: every path once, then measure
        one_round(kind)
    rt.empty_cache(0)
    before = _state(rt)
    errors_before = rt.health(0)["errors_logged"]
    for _, kind in zip(range(INJECTIONS), itertools.cycle(KINDS)):
        one_round(kind)
    rt.empty_cache(0)
    after = _state(rt)
    page = rt.config.device.mmu.page_size_bytes
    newly_retired = after.pop("retired") - before.pop("retired")
    assert newly_retired == sum(1 for i in range(INJECTIONS) if KINDS[i % len(KINDS)] == "ecc_uncorrectable")
    assert after.pop("free") == before.pop("free") - newly_retired * page  # retired pages, nothing else
    assert after.pop("semaphores_issued") - before.pop("semaphores_issued") <= 64  # recycled, not leaked
    assert after == before
    health = rt.health(0)
    assert health["resets"] >= INJECTIONS and not health["needs_reset"]
    # every error kind fired and was recorded (the first 8 kinds raise errors)
    assert health["errors_logged"] - errors_before == sum(1 for i in range(INJECTIONS) if i % len(KINDS) < 8)
