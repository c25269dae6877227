"""Device memory (emulator/hbm.py): lazily committed store, bus errors, bandwidth model."""
import ctypes

import numpy as np
import pytest
import simpy

from emulator.config import HbmConfig, load_preset
from emulator.errors import HardwareFault
from emulator.hbm import HBM

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture
def tiny_hbm():
    return HBM(simpy.Environment(), load_preset("tiny").device.hbm, device_index=1)


def test_default_hbm_is_committed_lazily():
    cfg = load_preset("default").device.hbm
    hbm = HBM(simpy.Environment(), cfg, 0)
    assert hbm.capacity == 16 * GiB
    assert hbm.resident_bytes() == 0
    view = hbm.view(3 * GiB, MiB)
    view[:] = 0xA5
    resident = hbm.resident_bytes()
    # About the touched amount: at least the 1 MiB written, far less than the 16 GiB mapped
    # (a transparent huge page may round it up to a few MiB).
    assert MiB <= resident <= 4 * MiB
    assert int(hbm.view(3 * GiB, MiB).sum()) == 0xA5 * MiB


def test_view_aliases_the_store(tiny_hbm):
    tiny_hbm.view(4096, 8)[:] = np.arange(8, dtype=np.uint8)
    assert tiny_hbm.view(4096 + 2, 3).tolist() == [2, 3, 4]
    # host_address points at the same bytes.
    addr = tiny_hbm.host_address(4096, 8)
    assert addr == tiny_hbm.base_address + 4096
    assert bytes((ctypes.c_uint8 * 8).from_address(addr)) == bytes(range(8))


def test_last_byte_is_accessible(tiny_hbm):
    cap = tiny_hbm.capacity
    tiny_hbm.view(cap - 1, 1)[:] = 9
    assert tiny_hbm.view(cap - 1, 1)[0] == 9


@pytest.mark.parametrize("physical, nbytes", [
    (64 * MiB, 1),          # starts at the end
    (64 * MiB - 4, 8),      # straddles the end
    (-8, 4),                # negative address
    (0, 64 * MiB + 1),      # longer than the memory
])
def test_bus_error_outside_capacity(tiny_hbm, physical, nbytes):
    with pytest.raises(HardwareFault) as info:
        tiny_hbm.view(physical, nbytes)
    rec = info.value.record
    assert rec.kind == "bus_error"
    assert rec.unit == "hbm"
    assert rec.device == 1
    assert rec.address == physical
    with pytest.raises(HardwareFault):
        tiny_hbm.host_address(physical, nbytes)


def test_bus_error_carries_simulated_time():
    env = simpy.Environment()
    hbm = HBM(env, HbmConfig(capacity_bytes=MiB), 0)
    env.run(until=250)
    with pytest.raises(HardwareFault) as info:
        hbm.view(MiB, 1)
    assert info.value.record.sim_time_ns == 250
    assert "t=250 ns" in str(info.value)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    hbm = HBM(simpy.Environment(), HbmConfig(capacity_bytes=MiB, bandwidth_gb_per_s=100.0, latency_ns=50.0), 0)
    assert hbm.transfer_ns(0) == pytest.approx(50.0)
    assert hbm.transfer_ns(1000) == pytest.approx(60.0)  # GB/s == bytes/ns
    assert hbm.transfer_ns(2 * MiB) > hbm.transfer_ns(MiB)
