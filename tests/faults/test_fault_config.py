"""Faults configured without touching a script (EMU_FAULTS, a TOML [faults] section), read at
device initialisation; EMU_LAUNCH_BLOCKING=1 raises at the faulting op; a firmware of another
major version is refused at initialisation with what was found and what was expected. Each case
runs in a subprocess: the settings are read when the process's runtime powers on."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import runtime
from firmware import FirmwareImage, abi

SCRIPT = """
import json, warnings
import torch
warnings.simplefilter("ignore")
RESULT = {}
x = torch.arange(16, dtype=torch.float32, device="emu")
try:
    y = x * 2
    RESULT["op_returned"] = True
    RESULT["value"] = y.cpu().tolist()
except Exception as err:
    RESULT["error"] = str(err)
    RESULT["type"] = type(err).__name__
    RESULT["accelerator"] = isinstance(err, torch.AcceleratorError)
    RESULT["code"] = getattr(err, "error_code", None)
RESULT["events"] = [e["kind"] for e in torch.emu.faults.log(0)["events"]]
RESULT["health"] = {k: v for k, v in torch.emu.get_device_health(0).items() if k != "faults_armed"}
print("@@" + json.dumps(RESULT))
"""


def run(tmp_path, script=SCRIPT, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    env["EMU_PRESET"] = "tiny"
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    if "@@" not in proc.stdout:
        return {"rc": proc.returncode, "stderr": proc.stderr[-3000:]}
    return json.loads(proc.stdout.split("@@", 1)[1])


def test_emu_faults_environment_variable_arms_faults_at_init(tmp_path):
    r = run(tmp_path, EMU_FAULTS="ecc_correctable:persistent=true;page_fault:engine=vector,after_commands=1")
    assert r["accelerator"] and r["code"] == 700, r
    assert "hardware event page_fault on device 0" in r["error"]
    assert "page_fault" in r["events"] and "ecc_correctable" in r["events"]
    assert r["health"]["ecc_corrected"] >= 1


def test_toml_faults_section_and_launch_blocking_in_an_unmodified_script(tmp_path):
    """The EMU_CONFIG file's [faults] section is armed at power-on; under EMU_LAUNCH_BLOCKING=1
    the faulting op itself raises."""
    path = tmp_path / "faulty.toml"
    path.write_text(textwrap.dedent("""
        num_devices = 2
        [device.hbm]
        capacity_bytes = 67108864
        [faults]
        inject = [
          { kind = "thermal_throttle", factor = 0.5 },
          { kind = "dma_error", device = 0, engine = "vector", after_commands = 1 },
        ]
    """))
    r = run(tmp_path, EMU_CONFIG=str(path), EMU_LAUNCH_BLOCKING="1")
    assert r.get("accelerator") and r["code"] == int(runtime.ErrorCode.DMA_ERROR), r
    assert "op_returned" not in r  # raised by `x * 2` itself
    assert "raised at the faulting op under EMU_LAUNCH_BLOCKING=1" in r["error"]
    assert "hardware event dma_error on device 0" in r["error"]
    assert r["health"]["throttled"] and r["health"]["clock_factor"] == 0.5


def _runtime_from(environ):
    return runtime.Runtime(settings=runtime.Settings.from_environment({"EMU_PRESET": "tiny", **environ}))


def test_emu_faults_may_name_a_toml_file(tmp_path):
    path = tmp_path / "faults.toml"
    path.write_text('[[faults.inject]]\nkind = "link_flaky"\npersistent = true\n'
                    '[[faults.inject]]\nkind = "ecc_correctable"\ndevice = 1\naddress_range = [0, 4096]\n')
    rt = _runtime_from({"EMU_FAULTS": str(path)})
    assert [f["kind"] for f in rt.health(0)["faults_armed"]] == ["link_flaky"]
    assert [f["kind"] for f in rt.health(1)["faults_armed"]] == ["ecc_correctable"]


def test_emu_faults_syntax():
    requests = runtime.settings.fault_requests(
        {"EMU_FAULTS": "dma_error:after_commands=3 ; ecc_correctable@1:probability=0.01,seed=7,persistent=true;"
                       "page_fault:address_range=0x1000-0x2000,engine=vector"})
    assert requests == (("dma_error", 0, {"after_commands": 3}),
                        ("ecc_correctable", 1, {"probability": 0.01, "seed": 7, "persistent": True}),
                        ("page_fault", 0, {"address_range": (0x1000, 0x2000), "engine": "vector"}))


@pytest.mark.parametrize("spec,message", [("meteor", "valid kinds"), ("dma_error:sometime=3", "unknown trigger"),
                                          ("dma_error:after_commands", "expected key=value"),
                                          ("dma_error@x", "device after @")])
def test_bad_emu_faults_is_reported_at_init(spec, message):
    with pytest.raises(runtime.InvalidValueError) as info:
        _runtime_from({"EMU_FAULTS": spec})
    assert message in str(info.value) and "EMU_FAULTS" in str(info.value)


def test_firmware_version_mismatch_names_found_and_expected():
    with pytest.raises(runtime.InitializationError) as info:
        runtime.Runtime(settings=runtime.Settings(preset="tiny"), firmware_image=FirmwareImage.build((abi.ABI_MAJOR + 1, 0, 0)))
    message = str(info.value)
    assert f"found firmware {abi.ABI_MAJOR + 1}.0.0, expected major version {abi.ABI_MAJOR}" in message


def test_a_device_that_does_not_come_up_is_reported_at_init(monkeypatch):
    from firmware.platform import DeviceEndpoint

    def broken(self, image):
        raise RuntimeError("boot ROM checksum mismatch")
    monkeypatch.setattr(DeviceEndpoint, "load_firmware", broken)
    with pytest.raises(runtime.InitializationError) as info:
        runtime.Runtime(settings=runtime.Settings(preset="tiny"))
    message = str(info.value)
    assert "device 0 did not come up" in message and "boot ROM checksum mismatch" in message
    assert f"expected it to boot and report a version with major {abi.ABI_MAJOR}" in message
