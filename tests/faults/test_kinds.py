"""Every fault kind, injected during an eager op, a copy and a synchronisation (on emu:1 of the
process runtime): an error kind raises a torch.AcceleratorError whose cause chain names the
hardware event's kind, the device and the correlation id (the faulting command's seq, which the
error log's event also carries); the other kinds have their documented effect (a counter, a
slower clock, retried transfers, silently corrupted data) and raise nothing.

Phases a kind cannot hit are left out by design, not skipped: a compute engine hang needs a
kernel (no copy phase), and the host-link and inter-device-link kinds hit only transfers over
those links (their "eager op" phase arms the fault during the op and it fires on the transfer
that reads the result, which is what a real link fault does).
"""
import warnings

import pytest
import torch

import torch_plugin  # noqa: F401

from fault_helpers import chain_text

DEV = 1
ERROR_KINDS = ["ecc_uncorrectable", "dma_error", "dma_timeout", "page_fault", "engine_hang", "firmware_crash",
               "ring_corruption", "link_down", "peer_link_error"]
LINK_KINDS = {"link_down", "link_flaky", "peer_link_error"}


@pytest.fixture
def emu1():
    torch.emu.synchronize(DEV)
    torch.emu.faults.clear()
    yield f"emu:{DEV}"
    torch.emu.faults.clear()
    torch.emu.reset_device(DEV, reason="test teardown")


def _arm(kind, phase):
    """The trigger that makes ``kind`` fire in ``phase``."""
    if phase == "op" and kind not in LINK_KINDS:
        return torch.emu.faults.inject(kind, device=DEV, engine="vector", after_commands=0)
    if phase == "copy" and kind not in LINK_KINDS:
        return torch.emu.faults.inject(kind, device=DEV, engine="dma", after_commands=0)
    if phase == "sync":
        now = torch.emu.device_telemetry(DEV)["device_time_ns"]
        return torch.emu.faults.inject(kind, device=DEV, at_time_ns=now)
    return torch.emu.faults.inject(kind, device=DEV)


def _run(kind, phase, device):
    """The work of one phase; returns what the host read back."""
    x = torch.arange(64, dtype=torch.float32, device=device)
    torch.emu.synchronize(DEV)
    if phase == "op":
        _arm(kind, phase)
        y = x * 2 + 1
        return y.to("emu:0").cpu() if kind == "peer_link_error" else y.cpu()
    if phase == "copy":
        _arm(kind, phase)
        if kind == "peer_link_error":
            return x.to("emu:0").cpu()
        return torch.arange(64, dtype=torch.float32).to(device).cpu()
    # sync: queue the work, arm the fault at the device's present, then synchronise
    y = x * 2 + 1
    pinned = torch.empty(64).pin_memory() if kind in LINK_KINDS - {"peer_link_error"} else None
    if pinned is not None:
        pinned.copy_(y, non_blocking=True)
    elif kind == "peer_link_error":
        pinned = y.to("emu:0", non_blocking=True)
    _arm(kind, phase)
    torch.emu.synchronize(DEV)
    return (pinned if pinned is not None else y).cpu()


PHASES = ["op", "copy", "sync"]
CASES = [(k, p) for k in ERROR_KINDS for p in PHASES if not (k == "engine_hang" and p == "copy")]


@pytest.mark.parametrize("kind,phase", CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_error_kind_cause_chain_names_kind_device_and_correlation_id(kind, phase, emu1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(torch.AcceleratorError) as info:
            _run(kind, phase, emu1)
    events = [e for e in torch.emu.faults.log(DEV)["events"] if e["kind"] == kind]
    assert events, f"{kind} never fired"
    seq = events[-1]["seq"]
    text = chain_text(info.value)
    assert f"hardware event {kind} on device {DEV}" in text, text
    assert f"correlation id {seq}" in text, text
    # the fault's own scope, or "operation" where the read of an output the aborted command did
    # not write is what raised (the cause is then that fault, named above)
    assert info.value.error_code is not None
    assert info.value.scope in ("operation", "stream", "context", "device")
    assert len(_chain(info.value)) >= 3  # torch <- runtime <- driver (holding the firmware record)
    record = _chain(info.value)[-1].record
    assert record.seq == seq and record.device == DEV
    torch.emu.reset_device(DEV)  # before the traceback's frames (and their pinned buffers) go


def _chain(err):
    out = []
    while err is not None:
        out.append(err)
        err = err.__cause__
    return out


@pytest.mark.parametrize("phase", PHASES)
def test_ecc_correctable_is_counted_and_data_intact(phase, emu1):
    before = torch.emu.get_device_health(DEV)["ecc_corrected"]
    out = _run("ecc_correctable", phase, emu1)
    expected = torch.arange(64, dtype=torch.float32) * (1 if phase == "copy" else 2) + (0 if phase == "copy" else 1)
    assert torch.equal(out, expected)
    assert torch.emu.get_device_health(DEV)["ecc_corrected"] == before + 1


@pytest.mark.parametrize("phase", PHASES)
def test_bit_flip_is_silent_data_corruption(phase, emu1):
    """No error anywhere; one bit of the hit command's output differs (its byte is chosen by the
    seed), and the event is in the log."""
    handle = torch.emu.faults.inject("bit_flip", device=DEV, engine="dma" if phase == "copy" else "vector",
                                     after_commands=0, seed=3)
    if phase == "copy":
        out = torch.arange(64, dtype=torch.float32).to(emu1).cpu()  # the flip hits the upload

        expected = torch.arange(64, dtype=torch.float32)
    else:
        x = torch.arange(64, dtype=torch.float32, device=emu1)
        y = x * 2 + 1
        if phase == "sync":
            torch.emu.synchronize(DEV)
        out = y.cpu()
        expected = torch.arange(64, dtype=torch.float32) * 2 + 1
    assert not handle.cancel()  # it fired
    diff = (out.view(torch.int32) ^ expected.view(torch.int32))
    assert int((diff != 0).sum()) == 1 and bin(int(diff[diff != 0][0]) & 0xFFFFFFFF).count("1") == 1
    assert torch.emu.get_device_health(DEV)["bits_flipped"] >= 1
    assert any(e["kind"] == "bit_flip" for e in torch.emu.faults.log(DEV)["events"])


@pytest.mark.parametrize("phase", PHASES)
def test_link_flaky_retries_are_counted_and_data_intact(phase, emu1):
    before = torch.emu.get_device_health(DEV)["link_retries"]
    out = _run("link_flaky", phase, emu1)
    assert torch.equal(out, torch.arange(64, dtype=torch.float32) * (1 if phase == "copy" else 2)
                       + (0 if phase == "copy" else 1))
    assert torch.emu.get_device_health(DEV)["link_retries"] > before


def test_thermal_throttle_slows_the_projection_and_raises_nothing(emu1):
    def projected(n=20):
        x = torch.ones(1 << 20, device=emu1)  # large enough that device time, not host calls, dominates
        torch.emu.synchronize(DEV)
        t0 = torch.emu.device_telemetry(DEV)["device_time_ns"]
        for _ in range(n):
            x = x * 1.0001
        torch.emu.synchronize(DEV)
        return torch.emu.device_telemetry(DEV)["device_time_ns"] - t0
    cool = projected()
    torch.emu.faults.inject("thermal_throttle", device=DEV, factor=0.25)
    hot = projected()
    health = torch.emu.get_device_health(DEV)
    assert health["throttled"] and health["clock_factor"] == 0.25
    assert hot > 2 * cool  # device work at a quarter of the clock
    torch.emu.reset_device(DEV)
    assert not torch.emu.get_device_health(DEV)["throttled"]


def test_bad_requests_list_the_valid_ones_and_arm_nothing(emu1):
    with pytest.raises(ValueError, match="valid kinds: ecc_correctable, ecc_uncorrectable"):
        torch.emu.faults.inject("meteor_strike", device=DEV)
    with pytest.raises(ValueError, match="valid ones: at_time_ns, after_commands, engine"):
        torch.emu.faults.inject("dma_error", device=DEV, when="now")
    with pytest.raises(ValueError, match="probability must be in"):
        torch.emu.faults.inject("dma_error", device=DEV, probability=2.0)
    with pytest.raises(ValueError, match="engine must be one of"):
        torch.emu.faults.inject("dma_error", device=DEV, engine="gpu")
    assert torch.emu.get_device_health(DEV)["faults_armed"] == []
    assert (torch.ones(3, device=emu1) * 2).cpu().tolist() == [2.0] * 3


def test_tensor_trigger_hits_only_that_tensor(emu1):
    a = torch.ones(1024, device=emu1)
    b = torch.ones(1024, device=emu1)
    torch.emu.synchronize(DEV)
    torch.emu.faults.inject("page_fault", tensor=b)
    assert (a * 3).cpu()[0].item() == 3.0  # a's work does not fire it
    with pytest.raises(torch.AcceleratorError, match="page_fault"):
        (b * 3).cpu()


def test_probability_trigger_is_deterministic_for_a_seed(emu1):
    def fired(seed):
        handle = torch.emu.faults.inject("ecc_correctable", device=DEV, probability=0.3, seed=seed, persistent=True)
        before = torch.emu.get_device_health(DEV)["ecc_corrected"]
        x = torch.ones(16, device=emu1)
        for _ in range(40):
            x = x + 1
        torch.emu.synchronize(DEV)
        handle.cancel()
        return torch.emu.get_device_health(DEV)["ecc_corrected"] - before
    first, again = fired(11), fired(11)
    assert first == again and 0 < first < 41  # 41 memory commands, drawn with p = 0.3
