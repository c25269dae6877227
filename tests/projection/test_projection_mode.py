"""EMU_MODE=projection: the switch, the emulator without a byte store, what is refused (each class
with the op named, before anything ran) and that the device stays usable afterwards."""
import pytest

from runtime import InvalidValueError, Settings


def test_mode_setting_defaults_to_functional_and_is_checked():
    assert Settings.from_environment({}).mode == "functional"
    assert not Settings.from_environment({}).projection
    assert Settings.from_environment({"EMU_MODE": " Projection "}).projection
    with pytest.raises(InvalidValueError, match="EMU_MODE='fast'"):
        Settings.from_environment({"EMU_MODE": "fast"})


def test_this_session_runs_in_functional_mode():
    import torch
    import torch_plugin
    assert torch.emu.is_projection_mode() is False
    assert torch.emu.ProjectionModeError is torch_plugin.ProjectionModeError
    assert issubclass(torch_plugin.ProjectionModeError, RuntimeError)


def test_projection_hbm_has_no_store_and_the_mmu_still_translates():
    from emulator import SystemConfig
    from emulator.errors import HardwareFault
    from emulator.system import EmulatedSystem
    from firmware.platform import load_description
    config = load_description("tiny")
    system = EmulatedSystem(config, mode="projection")
    device = system.devices[0]
    assert device.projection and not device.hbm.backed
    assert device.hbm.resident_bytes() == 0
    device.mmu.create_address_space(1)
    with pytest.raises(HardwareFault, match="page_fault|not mapped|unmapped"):
        device.mmu.translate(1, 0x10_0000, 64)  # nothing mapped there: a page fault, as in functional mode
    functional = EmulatedSystem(config)
    assert functional.devices[0].hbm.backed and not functional.devices[0].projection
    with pytest.raises(ValueError, match="mode"):
        EmulatedSystem(SystemConfig(), mode="fast")


REFUSALS = r"""
import json, torch, torch_plugin
from torch_plugin import ProjectionModeError
from torch_plugin.ops import fallback

assert torch.emu.is_projection_mode()
x = torch.ones(8, 8, device="emu")
m = torch.ones(8, 8, dtype=torch.bool, device="emu")
total, positive, repeats = (x @ x).sum(), (x > 0).all(), torch.ones(3, dtype=torch.long, device="emu")
cases = {   # each refused op's operands exist already: nothing may run for the refused op itself
    "item": lambda: total.item(),
    "bool": lambda: bool(positive),
    "cpu": lambda: x.cpu(),
    "to_cpu_cast": lambda: x.to("cpu", torch.float64),
    "print": lambda: repr(x),
    "nonzero": lambda: torch.nonzero(x),
    "bool_index": lambda: x[m],
    "masked_select": lambda: torch.masked_select(x, m),
    "unique": lambda: torch.unique(x),
    "repeat_interleave": lambda: torch.repeat_interleave(repeats),
    "equal": lambda: torch.equal(x, x),
    "normal_std_check": lambda: torch.normal(x, x),
    "host_fallback": lambda: fallback.boxed_fallback(torch.ops.aten.exp.default, x),
}
out = {}
rt = __import__("runtime").get_runtime()
for name, fn in cases.items():
    torch.emu.synchronize()
    before = len(rt.command_trace(0))
    try:
        fn()
        out[name] = {"raised": False}
    except ProjectionModeError as err:
        torch.emu.synchronize()
        out[name] = {"raised": True, "op": err.op, "message": str(err),
                     "new_commands": len(rt.command_trace(0)) - before}
# still usable: more work runs and its shapes and memory are right
y = torch.nn.functional.linear(x, x).relu()
torch.emu.synchronize()
out["after"] = {"shape": list(y.shape), "allocated": torch.emu.memory_allocated()}
print(json.dumps(out))
"""

EXPECTED_OPS = {   # case -> the op the error names
    "item": "aten::_local_scalar_dense", "bool": "aten::_local_scalar_dense", "cpu": "aten::_copy_from",
    "to_cpu_cast": "aten::_copy_from", "print": None, "nonzero": "aten::nonzero",
    "bool_index": "aten::nonzero", "masked_select": "aten::masked_select", "unique": "aten::_unique2", "repeat_interleave": "aten::repeat_interleave",
    "equal": "aten::equal", "normal_std_check": "aten::normal", "host_fallback": "aten::exp",
}


def test_each_refused_class_names_its_op_and_runs_nothing(program):
    out = program(REFUSALS)
    for case, op in EXPECTED_OPS.items():
        got = out[case]
        assert got["raised"], f"{case}: no ProjectionModeError in projection mode"
        if op is not None:
            assert got["op"].startswith(op), (case, got["op"])
            assert op in got["message"]
        assert "EMU_MODE=projection" in got["message"] and "Way around:" in got["message"], got["message"]
        if case != "print":  # repr() runs device ops of its own (torch's formatting) before it reads
            assert got["new_commands"] == 0, f"{case}: {got['new_commands']} commands ran before the refusal"
    assert "declare the size" in out["nonzero"]["message"]
    assert "emu kernel" in out["host_fallback"]["message"]
    assert out["after"]["shape"] == [8, 8] and out["after"]["allocated"] > 0


LARGE = r"""
import json, resource, torch, torch_plugin
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
before = rss()
t = torch.zeros(5 * 2**30, dtype=torch.float32, device="emu")   # 20 GiB, written by a fill kernel
u = t + 1                                                      # and 20 GiB more, read and written
torch.emu.synchronize()
print(json.dumps({"rss_growth": rss() - before, "resident": torch.emu.device_telemetry()["resident_bytes"],
                  "allocated": torch.emu.memory_allocated(), "busy_ns": sum(
                      e.end_ns - e.start_ns for e in __import__("runtime").get_runtime().command_trace(0))}))
"""


def test_large_allocations_are_address_space_only(program):
    out = program(LARGE, preset="h200")
    assert out["allocated"] >= 40 * 2**30
    assert out["resident"] == 0
    assert out["rss_growth"] < 256 * 2**20, out   # 40 GiB on the device, well under 256 MiB here
    assert out["busy_ns"] > 0                      # the fill and the add were timed


def test_host_to_device_copies_are_charged_and_dropped(program):
    out = program(r"""
        import json, torch, torch_plugin, runtime
        x = torch.randn(1024, 1024).to("emu")
        torch.emu.synchronize()
        names = [e.name for e in runtime.get_runtime().command_trace(0)]
        print(json.dumps({"names": names, "h2d": torch.emu.device_telemetry().get("byte_counters", {}),
                          "resident": torch.emu.device_telemetry()["resident_bytes"]}))
    """)
    assert "memcpy_h2d" in out["names"]
    assert out["resident"] == 0
