"""The COLLECTIVE command (abi.Opcode.COLLECTIVE, Runtime.collective): a collective's part on one
device holds its network port and links for the time the device's interconnect model gives its op,
size and group (emulator/collectives.py), overlaps compute on other
streams, takes turns with the device's other collectives, and moves its functional data without
modelled time. torch_plugin/distributed builds on it; these tests drive it from the runtime."""
import numpy as np
import pytest

from test_runtime import F32, dev, download, host
from test_runtime import upload as _async_upload


def upload(rt, arr, device=0):
    """test_runtime.upload, waited for (the host array may be a temporary)."""
    address = _async_upload(rt, arr, device)
    rt.stream(device).synchronize()
    return address


def _trace(rt, name, device=0):
    return [e for e in rt.command_trace(device) if e.name == name]


def test_pairs_are_copied_at_the_end_and_the_links_held_from_not_before(rt):
    src = np.arange(64, dtype=np.float32)
    a = upload(rt, src)
    out = np.zeros_like(src)
    s = rt.stream(0)
    rt.collective(s, "all_reduce_inputs", ((host(out), dev(0, a, src.shape)),))
    t_ready = rt.stream_reached_ns(s)
    assert np.array_equal(out, src)          # staged functionally, already on the host
    (stage,) = _trace(rt, "collective.all_reduce_inputs")
    assert stage.end_ns == stage.start_ns and stage.engines == ()   # no modelled time, nothing held
    result = (src * 2).astype(np.float32)
    b = rt.malloc(0, src.nbytes)
    start = t_ready + 50_000.0
    rt.collective(s, "all_reduce", ((dev(0, b, src.shape), host(result)),), start, op="all_reduce",
                  nbytes=1 << 20, ranks=4)
    assert np.array_equal(download(rt, b, src.shape), result)
    (entry,) = _trace(rt, "collective.all_reduce")
    model = rt.collective_cost("all_reduce", 1 << 20, 4)   # the device's own model, same fields
    assert model.time_ns > 0 and model.link_bytes == 2 * 3 * (1 << 20) // 4
    assert entry.start_ns == start and entry.end_ns == pytest.approx(start + model.time_ns)
    assert entry.engine == "interconnect" and entry.bound == "interconnect"
    assert entry.engines == ("dev0.net", "dev0-dev1.link")
    links = rt.driver.transport.endpoints[0].firmware.byte_counters()["links"]
    assert links["dev0-dev1.link"] == model.link_bytes and links["dev1-dev0.link"] == 0


def test_the_functional_copies_charge_no_dma_host_link_or_hbm(rt):
    src = np.ones(1 << 16, dtype=np.float32)
    a = upload(rt, src)
    before = rt.telemetry(0)
    out = np.zeros_like(src)
    s = rt.stream(0)
    rt.collective(s, "all_gather_inputs", ((host(out), dev(0, a, src.shape)),))
    rt.collective(s, "all_gather", ((dev(0, a, src.shape), host(out)),), 0.0, op="all_gather", nbytes=src.nbytes,
                  ranks=2)
    s.synchronize()
    after = rt.telemetry(0)
    assert after["engines_busy_ns"]["dma"] == before["engines_busy_ns"]["dma"]
    counters = rt.driver.transport.endpoints[0].firmware.byte_counters()
    assert counters["host_link_d2h_bytes"] == 0                  # only the upload crossed the host link
    assert counters["host_link_h2d_bytes"] == src.nbytes
    assert counters["hbm_kernel_bytes"] == 0
    stats = after["kernel_stats"]
    assert stats["collective.all_gather"].nbytes == src.nbytes
    assert stats["collective.all_gather_inputs"].nbytes == src.nbytes
    assert "memcpy_d2h" not in stats or stats["memcpy_d2h"].count == before["kernel_stats"]["memcpy_d2h"].count


def test_compute_on_another_stream_overlaps_the_collective(rt):
    n = 256
    x = upload(rt, np.ones((n, n), np.float32))
    y = rt.malloc(0, n * n * 4)
    compute, comm = rt.stream(0), rt.stream_create(0)
    t0 = rt.stream_reached_ns(compute)
    rt.collective(comm, "all_reduce", (), t0, op="all_reduce", nbytes=64 << 20, ranks=2)
    for _ in range(4):
        rt.launch("binary", ("add", dev(0, y, (n, n)), dev(0, x, (n, n)), dev(0, x, (n, n)), F32, 1), compute)
    compute.synchronize()
    comm.synchronize()
    (coll,) = _trace(rt, "collective.all_reduce")
    adds = _trace(rt, "binary.add")
    assert len(adds) == 4
    # The adds ran while the collective held the links: they neither waited for it nor delayed it.
    assert all(coll.start_ns <= e.start_ns < coll.end_ns for e in adds)
    assert coll.start_ns >= t0 >= rt.telemetry(0)["kernel_stats"]["memcpy_h2d"].busy_ns


def test_collectives_of_one_device_take_turns_on_its_links(rt):
    a, b, c = rt.stream_create(0), rt.stream_create(0), rt.stream(1)
    t0 = max(rt.stream_reached_ns(a), rt.stream_reached_ns(c)) + 10_000.0
    rt.collective(a, "all_reduce", (), t0, op="all_reduce", nbytes=1 << 20, ranks=2)
    rt.collective(b, "all_gather", (), t0, op="all_gather", nbytes=1 << 18, ranks=2)
    rt.collective(c, "broadcast", (), t0, op="broadcast", nbytes=1 << 18, ranks=2)   # device 1: its own links
    for s in (a, b, c):
        s.synchronize()
    (first,) = _trace(rt, "collective.all_reduce")
    (second,) = _trace(rt, "collective.all_gather")
    (other,) = _trace(rt, "collective.broadcast", device=1)
    assert first.start_ns == t0
    assert first.end_ns == pytest.approx(t0 + rt.collective_cost("all_reduce", 1 << 20, 2).time_ns)
    assert second.start_ns == first.end_ns          # device 0's links were busy until then
    assert other.start_ns == t0                     # device 1's were not


def test_stream_reached_does_not_move_the_host_clock(rt):
    x = upload(rt, np.ones((512, 512), np.float32))
    s = rt.stream(0)
    for _ in range(8):
        rt.launch("binary", ("add", dev(0, x, (512, 512)), dev(0, x, (512, 512)), dev(0, x, (512, 512)), F32, 1), s)
    host_before = rt.host_time_ns()
    reached = rt.stream_reached_ns(s)
    assert reached > host_before + 1000.0        # the device was behind the host
    assert rt.host_time_ns() == pytest.approx(host_before + rt.clock.api_call_ns)   # one API call, no wait


@pytest.mark.parametrize("pairs, why", [
    ("not a sequence", "sequence"),
    ((("one",),), "(dst, src)"),
])
def test_bad_pairs_are_refused_and_nothing_runs(rt, pairs, why):
    from runtime import EmuError
    s = rt.stream(0)
    with pytest.raises(EmuError, match=why.replace("(", r"\(").replace(")", r"\)")):
        rt.collective(s, "all_reduce", pairs)
    s.synchronize()
    assert not _trace(rt, "collective.all_reduce")


def test_bad_name_times_and_shapes_are_refused(rt):
    from runtime import EmuError
    s = rt.stream(0)
    a = upload(rt, np.zeros(8, np.float32))
    out = np.zeros(4, np.float32)
    with pytest.raises(EmuError, match="name"):
        rt.collective(s, "all reduce!", ())
    with pytest.raises(EmuError, match="not_before_ns"):
        rt.collective(s, "all_reduce", (), float("nan"))
    with pytest.raises(EmuError, match="not_before_ns"):
        rt.collective(s, "all_reduce", (), -1.0)
    with pytest.raises(EmuError, match="unknown collective 'allreduce'"):
        rt.collective(s, "all_reduce", (), 0.0, op="allreduce", nbytes=8, ranks=2)
    with pytest.raises(EmuError, match="nbytes"):
        rt.collective(s, "all_reduce", (), 0.0, op="all_reduce", nbytes=-1, ranks=2)
    with pytest.raises(EmuError, match="nodes"):
        rt.collective(s, "all_reduce", (), 0.0, op="all_reduce", nbytes=8, ranks=2, nodes=3)
    with pytest.raises(EmuError, match="does not apply"):   # tiny's interconnect has no in-switch reduction
        rt.collective(s, "all_reduce", (), 0.0, op="all_reduce", nbytes=8, ranks=2, algorithm="nvls")
    with pytest.raises(EmuError, match="equal shapes"):
        rt.collective(s, "all_reduce", ((host(out), dev(0, a, (8,))),))
    s.synchronize()   # the device is still usable
    assert np.array_equal(download(rt, a, (8,)), np.zeros(8, np.float32))


def test_a_collective_after_a_stream_fault_is_skipped_and_its_output_poisoned(rt):
    from runtime import EmuError, PoisonedDataError
    s = rt.stream(0)
    a = upload(rt, np.zeros(8, np.float32))
    rt.inject_fault(0, "dma_error")   # the next copy faults: the stream's later work is skipped
    staged = np.zeros(8, np.float32)
    rt.memcpy(host(staged), dev(0, a, (8,)), s)
    result = np.ones(8, np.float32)
    rt.collective(s, "all_reduce", ((dev(0, a, (8,)), host(result)),), 0.0, op="all_reduce", nbytes=32, ranks=2)
    with pytest.raises(EmuError):
        s.synchronize()
    assert not _trace(rt, "collective.all_reduce")    # not executed
    with pytest.raises(PoisonedDataError):
        download(rt, a, (8,))


@pytest.mark.parametrize("topology, n, expect", [
    ("fully_connected", 3, {"dev1.net", "dev1-dev0.link", "dev1-dev2.link"}),
    ("ring", 4, {"dev1.net", "dev1-dev0.link", "dev1-dev2.link"}),
    ("switch", 4, {"dev1.net", "dev1-switch.link"}),
    ("fully_connected", 1, set()),
])
def test_a_collective_holds_the_port_and_every_link_leaving_its_device(topology, n, expect):
    from emulator.config import InterconnectConfig
    from emulator.dma import Interconnect
    net = Interconnect(None, InterconnectConfig(topology=topology), num_devices=n)
    device = 1 if n > 1 else 0
    names = [link.name for link in net.collective_links(device)]
    assert names[0] == f"dev{device}.net"
    assert set(names) == (expect or {"dev0.net"})
