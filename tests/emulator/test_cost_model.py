"""The cost model as the firmware books it (emulator/ + firmware/scheduler.py): trace records,
launch overhead on the command processor, dtype rates, broadcast operands, per-device host links,
per-pair interconnect links, HBM contention and byte counters."""
import numpy as np
import pytest

from cost_helpers import BF16, F32, F64, add, device, matmul, op, system
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS
from firmware import FirmwareImage, Platform, abi

VA = 1 << 40
MAPPED = 64 << 20


class Rig:
    def __init__(self, config):
        self.config = config
        self.platform = Platform(config)
        self.seq = 0
        for ep in self.platform.endpoints:
            ep.load_firmware(FirmwareImage())
            ep.connect_interrupts(lambda vector, payload: None)
            ep.create_address_space(1)
            ep.map_pages(1, VA, 0, MAPPED)

    def next(self):
        self.seq += 1
        return self.seq

    def dev(self, offset, shape, dtype=F32, device=0, strides=None):
        if strides is None:
            strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return abi.TensorDescriptor(abi.MemorySpace.DEVICE, device, 1, VA + offset, dtype, tuple(shape), strides)

    @staticmethod
    def host(arr, dtype=F32):
        return abi.TensorDescriptor(abi.MemorySpace.HOST, -1, 0, arr.ctypes.data, dtype, arr.shape,
                                    tuple(s // arr.itemsize for s in arr.strides))

    def run(self, device, *commands, sem=1):
        ep = self.platform.endpoints[device]
        ring = ep.create_ring()
        for command in commands:
            ep.write_ring(ring, 0.0, command)
        ep.write_ring(ring, 0.0, abi.SignalCommand(abi.Opcode.SIGNAL, self.next(), 1, sem, 1))
        ep.ring_doorbell(ring)
        return ring

    def wait(self, device, sem=1):
        return self.platform.endpoints[device].wait_semaphore(sem, 1)

    def launch(self, kernel, *args):
        return abi.LaunchCommand(abi.Opcode.LAUNCH, self.next(), 1, kernel, tuple(args))

    def copy(self, dst, src):
        return abi.CopyCommand(abi.Opcode.COPY, self.next(), 1, dst, src)

    def trace(self, device=0):
        return list(self.platform.endpoints[device].firmware.trace)


@pytest.fixture
def tiny():
    return Rig(system("tiny"))


def test_trace_records_carry_the_cost_model_terms(tiny):
    r = tiny
    a = np.ones((64, 48), np.float32)
    r.run(0, r.copy(r.dev(0, a.shape), r.host(a)),
          r.launch("matmul", r.dev(1 << 20, (64, 64)), r.dev(0, (64, 48)), r.dev(0, (48, 64), strides=(1, 48)),
                   None, 0.0, 1.0))
    r.wait(0)
    copy, mm = r.trace()
    assert len(abi.TraceEntry._fields) == 20
    cfg = r.config.device
    assert mm.name == "matmul" and mm.engine == "matrix_engine" and mm.dtype == "float32"
    assert mm.bound in ("compute", "memory", "latency")
    assert mm.cycles == round((mm.end_ns - mm.start_ns) * cfg.clock_ghz)
    assert mm.cores == 2 and mm.tiling.startswith("gemm ") and "cores" in mm.tiling
    assert mm.engines[0] == "dev0.cp" and "dev0.core0.matrix" in mm.engines and "dev0.core1.matrix" in mm.engines
    assert "dev0.hbm" in mm.engines
    # The launch is the command processor's, before the engines start.
    assert mm.launch_end_ns - mm.launch_start_ns == pytest.approx(cfg.command_processor.launch_ns)
    assert mm.launch_end_ns <= mm.start_ns
    assert copy.name == "memcpy_h2d" and copy.cores == 0 and copy.engines[0] == "dev0.dma0"
    assert "dev0.host_link.h2d" in copy.engines and copy.launch_start_ns == copy.start_ns
    assert copy.bound in ("memory", "latency") and copy.dtype == "float32"


def test_launch_overhead_is_held_by_the_command_processor_not_the_engine(tiny):
    r = tiny
    n = 5
    r.run(0, *[r.launch("binary", "add", r.dev(0, (256,)), r.dev(0, (256,)), r.dev(0, (256,)), F32, 1.0)
               for _ in range(n)])
    r.wait(0)
    dev = r.platform.system.devices[0]
    adds = [e for e in r.trace() if e.name == "binary.add"]
    assert dev.launch_timeline.busy_ns == pytest.approx(n * r.config.device.command_processor.launch_ns)
    assert dev.vector_engine.busy_ns == pytest.approx(sum(e.end_ns - e.start_ns for e in adds))
    assert dev.vector_engine.busy_ns < dev.launch_timeline.busy_ns   # tiny kernels: launch-bound


def test_each_device_has_its_own_host_link(tiny):
    r = tiny
    a = np.ones(1 << 20, np.float32)
    r.run(0, r.copy(r.dev(0, a.shape), r.host(a)))
    r.run(1, r.copy(r.dev(0, a.shape, device=1), r.host(a)))
    r.wait(0), r.wait(1)
    (c0,), (c1,) = r.trace(0), r.trace(1)
    assert c0.start_ns == c1.start_ns and c0.end_ns == c1.end_ns       # no shared link between them
    links = [d.host_link for d in r.platform.system.devices]
    assert links[0] is not links[1]
    assert links[0].bytes_to_device == links[1].bytes_to_device == a.nbytes
    assert c0.engines[1] == "dev0.host_link.h2d" and c1.engines[1] == "dev1.host_link.h2d"


def _peer_rig(n, topology):
    return Rig(system("tiny", num_devices=n, interconnect={"topology": topology}))


def test_device_pairs_have_their_own_links_when_fully_connected():
    r = _peer_rig(4, "fully_connected")
    size = 1 << 20
    r.run(0, r.copy(r.dev(0, (size,), device=1), r.dev(0, (size,))))
    r.run(2, r.copy(r.dev(0, (size,), device=3), r.dev(0, (size,), device=2)))
    r.wait(0), r.wait(2)
    (a,), (b,) = r.trace(0), r.trace(2)
    assert a.start_ns == b.start_ns and a.end_ns == b.end_ns           # they do not share a link
    assert "dev0-dev1.link" in a.engines and "dev2-dev3.link" in b.engines
    counters = r.platform.endpoints[0].firmware.byte_counters()
    assert counters["links"]["dev0-dev1.link"] == 4 * size and counters["interconnect_bytes"] == 8 * size


def test_copies_sharing_a_link_are_serialised():
    r = _peer_rig(2, "fully_connected")
    size = 1 << 20
    r.run(0, r.copy(r.dev(0, (size,), device=1), r.dev(0, (size,))), sem=1)
    r.run(0, r.copy(r.dev(8 << 20, (size,), device=1), r.dev(8 << 20, (size,))), sem=2)
    r.wait(0, 1), r.wait(0, 2)
    a, b = sorted(r.trace(0), key=lambda e: e.start_ns)
    assert b.start_ns >= a.end_ns


def test_ring_topology_routes_through_every_hop():
    r = _peer_rig(4, "ring")
    size = 1 << 16
    r.run(0, r.copy(r.dev(0, (size,), device=2), r.dev(0, (size,))))
    r.wait(0)
    (c,) = r.trace(0)
    assert [e for e in c.engines if e.endswith(".link")] == ["dev0-dev1.link", "dev1-dev2.link"]
    one_hop = _peer_rig(4, "ring")
    one_hop.run(0, one_hop.copy(one_hop.dev(0, (size,), device=1), one_hop.dev(0, (size,))))
    one_hop.wait(0)
    (d,) = one_hop.trace(0)
    assert c.end_ns - c.start_ns > d.end_ns - d.start_ns               # one more hop's latency


def test_switch_topology_holds_the_source_and_destination_ports():
    r = _peer_rig(3, "switch")
    r.run(0, r.copy(r.dev(0, (1024,), device=2), r.dev(0, (1024,))))
    r.wait(0)
    (c,) = r.trace(0)
    assert "dev0-switch.link" in c.engines and "switch-dev2.link" in c.engines


def test_hbm_is_shared_by_streams_and_copies():
    # A device-local copy and a memory-bound kernel on two rings: alone each takes its own HBM
    # time; together, their HBM bytes queue, so the later one ends after both streams' bytes.
    n = 4 << 20
    def run(both):
        r = Rig(system("tiny"))
        r.run(0, r.copy(r.dev(16 << 20, (n,)), r.dev(0, (n,))), sem=1)
        if both:
            r.run(0, r.launch("binary", "add", r.dev(32 << 20, (n // 2,)), r.dev(48 << 20, (n // 2,)),
                              r.dev(48 << 20, (n // 2,)), F32, 1.0), sem=2)
            r.wait(0, 2)
        r.wait(0, 1)
        return r
    both = run(True)
    hbm = both.platform.system.devices[0].hbm
    end = max(e.end_ns for e in both.trace())
    assert end >= hbm.timeline.busy_ns * 0.99                         # no overlap beyond the bandwidth
    stats = both.platform.endpoints[0].firmware.byte_counters()
    assert stats["hbm_copy_read_bytes"] == stats["hbm_copy_written_bytes"] == 4 * n
    assert stats["hbm_kernel_bytes"] == 2 * 4 * (n // 2)              # out, and a once (b is a)


def test_tile_fidelity_runs_through_the_firmware():
    kernel, tile = Rig(system("tiny")), Rig(system("tiny", fidelity="tile"))
    for r in (kernel, tile):
        r.run(0, r.launch("matmul", r.dev(1 << 20, (256, 256)), r.dev(0, (256, 256)), r.dev(0, (256, 256)),
                          None, 0.0, 1.0))
        r.wait(0)
    (k,), (t,) = kernel.trace(), tile.trace()
    assert r.platform.system.devices[0].fidelity == "tile"
    assert t.end_ns - t.start_ns == pytest.approx(k.end_ns - k.start_ns, rel=0.1)


# -- cost level -------------------------------------------------------------------------------------
def test_fp64_gemm_is_slower_than_bf16():
    dev = device("default")
    bf16, f32, f64 = (matmul(dev, 2048, 2048, 2048, t) for t in (BF16, F32, F64))
    assert f64.ns > f32.ns > bf16.ns
    # Default rates: 1 vs 1/16 MACs per PE; the array's fill and skew are not sped up by the rate.
    assert 12 < f64.ns / bf16.ns <= 16


def test_fp64_vector_ops_run_at_half_rate():
    dev = device("default", device={"hbm": {"bandwidth_gb_per_s": 1e6}})  # take memory out of it
    assert add(dev, 1 << 22, F64).ns == pytest.approx(2 * add(dev, 1 << 22, F32).ns, rel=0.05)


def test_broadcast_operands_count_at_their_real_size():
    dev = device("default")
    full = op(F32, 1024, 1024)
    row = op(F32, 1024, 1024, strides=(0, 1))        # one row broadcast over 1024 rows
    assert row.nbytes == 1024 * 4
    dense = KERNELS["binary"].cost(dev, "add", full, op(F32, 1024, 1024), op(F32, 1024, 1024), F32, 1.0)
    bcast = KERNELS["binary"].cost(dev, "add", full, op(F32, 1024, 1024), row, F32, 1.0)
    assert bcast.nbytes == 2 * full.nbytes + 1024 * 4 < dense.nbytes
    assert bcast.ns < dense.ns


def test_gemm_work_is_split_over_the_cores_and_reported():
    dev = device("default")
    big = matmul(dev, 4096, 4096, 4096)
    assert big.cores == 4 and "gemm" in big.tiling and "128x128 arrays" in big.tiling and "waves" in big.tiling
    small = matmul(dev, 8, 8, 8)
    assert small.cores == 1 and small.bound == "latency"


def test_no_double_buffering_serialises_compute_and_memory():
    on = matmul(device("default"), 2048, 2048, 512)
    off = matmul(device("default", device={"scratchpad": {"double_buffering": False}}), 2048, 2048, 512)
    hbm = device("default").hbm
    assert off.ns == pytest.approx(on.ns + off.nbytes / hbm.bytes_per_ns, rel=0.1)


def test_scratchpad_bandwidth_bounds_the_engines():
    # Operands resident (no HBM), scratchpad of 64 B/cycle per core: a wide add is limited by it.
    dev = device("default", device={"scratchpad": {"operands_resident": True, "bandwidth_bytes_per_cycle": 64}})
    cost = add(dev, 1 << 20)
    cfg = dev.config
    assert cost.bound == "memory"
    assert cost.ns == pytest.approx(cost.nbytes / (cfg.cores * 64 * cfg.clock_ghz))
    wide = device("default", device={"scratchpad": {"operands_resident": True}})
    assert add(wide, 1 << 20).bound == "compute" and add(wide, 1 << 20).ns < cost.ns
