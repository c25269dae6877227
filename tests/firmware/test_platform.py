"""The driver's transport (firmware/platform.py): endpoints, boot, rings, telemetry."""
import numpy as np
import pytest

from emulator.config import load_preset
from firmware import FirmwareImage, Platform


def test_platform_lists_one_endpoint_per_device():
    platform = Platform(load_preset("tiny"))
    assert [ep.index for ep in platform.endpoints] == [0, 1]
    ep = platform.endpoints[1]
    assert ep.memory_bytes == 64 << 20
    assert ep.page_size == 64 << 10
    assert ep.config.name == "Seed-tiny"
    assert platform.now_ns() == 0


def test_load_firmware_reports_the_image_version():
    ep = Platform(load_preset("tiny")).endpoints[0]
    assert ep.load_firmware(FirmwareImage.build(version=(1, 4, 2))) == (1, 4, 2)
    assert ep.firmware.image.version == (1, 4, 2)


def test_ring_slots_and_space_event(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    entries = rig.platform.config.device.command_processor.ring_entries
    assert ep.ring_free_slots(ring) == entries
    for i in range(entries):
        ep.write_ring(ring, 0.0, rig.fill(rig.dev(0, 4), float(i)))
    assert ep.ring_free_slots(ring) == 0
    ep.ring_doorbell(ring)
    assert ep.wait_ring_space(ring) == rig.platform.now_ns()
    assert ep.ring_free_slots(ring) >= 1


def test_telemetry_counts_kernels_and_engine_time(rig):
    ep = rig.ep(0)
    ring = ep.create_ring()
    src = np.ones(1024, np.float32)
    rig.submit(ring, rig.copy(rig.dev(0, 1024), rig.host(src)), rig.fill(rig.dev(8192, 1024), 0.0),
               rig.fill(rig.dev(8192, 1024), 1.0), rig.fill(rig.dev(rig.MAPPED, 4), 1.0), rig.signal(1, 1))
    rig.run_until_sem(1, 1)
    t = ep.telemetry()
    assert t["kernel_stats"]["fill"].count == 2
    assert t["kernel_stats"]["memcpy_h2d"].nbytes == 4096
    assert t["engines_busy_ns"]["dma"] > 0 and t["engines_busy_ns"]["vector_engine"] > 0
    assert t["engines_busy_ns"]["matrix_engine"] == 0
    assert t["page_faults"] == 1
    assert len(t["trace"]) == 3


def test_telemetry_resident_bytes_is_a_number(rig):
    rig.hbm(0, 0, 1 << 20)[:] = 1
    resident = rig.ep(0).telemetry()["resident_bytes"]
    assert isinstance(resident, int)
    assert resident >= 1 << 20
