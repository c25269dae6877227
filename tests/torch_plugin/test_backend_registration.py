"""What PyTorch asks a PrivateUse1 backend beyond tensors: the device capability
(torch.accelerator.get_device_capability, torch.emu.get_device_capability) and backend tensor
metadata (c10::BackendMeta: torch.emu.set_backend_meta / get_backend_meta), which survives
torch.save/torch.load and shallow copies (torch_plugin/csrc/capability.cpp, backend_meta.cpp;
docs/runtime.md)."""
import copy

import pytest
import torch

from torch_plugin import _dtypes
from plugin_testing import saved_and_loaded

STORABLE = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
            torch.bfloat16, torch.float32, torch.float64, torch.uint16, torch.uint32, torch.uint64,
            torch.complex32, torch.complex64, torch.complex128,
            torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz}


# -- capability -------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["emu:0", "emu:1", 0, torch.device("emu", 1), None])
def test_accelerator_capability_lists_the_dtypes_emu_tensors_hold(device):
    capability = torch.accelerator.get_device_capability(device)
    assert set(capability) == {"supported_dtypes"}
    assert capability["supported_dtypes"] == STORABLE == set(_dtypes.STORABLE)


@pytest.mark.parametrize("dtype", sorted(STORABLE, key=str))
def test_every_listed_dtype_allocates_and_converts(dtype):
    x = torch.zeros(4, dtype=dtype, device="emu")
    assert x.dtype == dtype
    if not dtype.is_complex:
        back = x.to(torch.float32).cpu()
        torch.testing.assert_close(back, torch.zeros(4))


def test_accelerator_capability_of_an_invalid_device_is_an_error():
    with pytest.raises(RuntimeError, match="invalid device index 7"):
        torch.accelerator.get_device_capability("emu:7")


def test_device_module_capability_adds_the_hardware_description():
    capability = torch.emu.get_device_capability("emu:1")
    assert capability["supported_dtypes"] == STORABLE
    assert capability["compute_dtypes"] == set(_dtypes.SUPPORTED) < STORABLE
    assert capability["amp_dtypes"] == {torch.float16, torch.bfloat16}
    assert capability["index"] == 1
    props = torch.emu.get_device_properties(1)
    assert capability["name"] == props.name
    assert capability["hbm.capacity_bytes"] > 0 and capability["matrix_engine.rows"] > 0
    with pytest.raises(RuntimeError, match="invalid emu device index 9"):
        torch.emu.get_device_capability(9)


# -- backend metadata -------------------------------------------------------------------------
TAGS = {"nc1hwc0": True, "calibrated": False}


def tagged(values=(1.0, 2.0, 3.0)):
    t = torch.tensor(values, device="emu")
    torch.emu.set_backend_meta(t, TAGS)
    return t


def test_backend_meta_is_in_the_tensor_metadata_torch_serializes():
    t = tagged()
    assert torch.emu.get_backend_meta(t) == TAGS
    assert torch._utils.get_tensor_metadata(t) == {"emu.nc1hwc0": True, "emu.calibrated": False}
    assert torch.emu.get_backend_meta(torch.ones(2, device="emu")) == {}


@pytest.mark.parametrize("zipfile", [True, False])
@pytest.mark.parametrize("location", [None, "emu", "emu:1"])
def test_backend_meta_survives_save_and_load(zipfile, location):
    t = tagged()
    loaded = saved_and_loaded({"t": t, "view": t[1:]}, location, _use_new_zipfile_serialization=zipfile)
    assert loaded["t"].device == (torch.device("emu:1") if location == "emu:1" else torch.device("emu:0"))
    assert torch.emu.get_backend_meta(loaded["t"]) == TAGS
    assert torch.emu.get_backend_meta(loaded["view"]) == {}  # the view had none of its own
    torch.testing.assert_close(loaded["t"].cpu(), t.cpu(), rtol=0, atol=0)


def test_loading_onto_the_cpu_drops_emu_backend_meta():
    loaded = saved_and_loaded(tagged(), "cpu")
    assert loaded.device.type == "cpu"
    assert torch._utils.get_tensor_metadata(loaded) == {}
    torch.testing.assert_close(loaded, torch.tensor([1.0, 2.0, 3.0]), rtol=0, atol=0)


def test_shallow_copies_keep_their_own_copy_of_the_tags():
    t = tagged()
    for shallow in (t.detach(), t.data, torch.nn.Parameter(t)):
        assert torch.emu.get_backend_meta(shallow) == TAGS
    d = t.detach()
    torch.emu.set_backend_meta(d, {"other": True})
    assert torch.emu.get_backend_meta(d) == {"other": True}
    assert torch.emu.get_backend_meta(t) == TAGS  # retagging a copy leaves the original


def test_new_tensors_start_without_tags_as_on_every_backend():
    t = tagged()
    for fresh in (t.clone(), copy.deepcopy(t), t + 0, t.to("emu:1")):
        assert torch.emu.get_backend_meta(fresh) == {}


def test_empty_tags_remove_the_metadata():
    t = tagged()
    torch.emu.set_backend_meta(t, {})
    assert torch.emu.get_backend_meta(t) == {}
    assert torch._utils.get_tensor_metadata(t) == {}


def test_bad_backend_meta_arguments_are_errors_and_change_nothing():
    t = tagged()
    with pytest.raises(RuntimeError, match="expected an emu tensor, got a tensor on cpu"):
        torch.emu.set_backend_meta(torch.ones(2), {"a": True})
    with pytest.raises(RuntimeError, match="expected an emu tensor, got a tensor on cpu"):
        torch.emu.get_backend_meta(torch.ones(2))
    with pytest.raises(TypeError, match="str -> bool"):
        torch.emu.set_backend_meta(t, {"a": 1})
    with pytest.raises(TypeError, match="str -> bool"):
        torch.emu.set_backend_meta(t, {3: True})
    with pytest.raises(TypeError, match="dict of str -> bool"):
        torch.emu.set_backend_meta(t, [("a", True)])
    with pytest.raises(TypeError, match="expected a Tensor"):
        torch.emu.get_backend_meta("t")
    with pytest.raises(RuntimeError, match="must not be empty"):
        torch.emu.set_backend_meta(t, {"": True})
    assert torch.emu.get_backend_meta(t) == TAGS
