"""Hardware description (emulator/config.py): presets, metadata, validation, TOML loading."""
import dataclasses
import math

import pytest

from emulator import config as C
from emulator.errors import ConfigError

GiB, MiB = 1 << 30, 1 << 20


def leaf_fields(cls, prefix=""):
    """(dotted name, field) of every scalar parameter, recursing into nested sections."""
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            yield from leaf_fields(f.default_factory, name + ".")
        else:
            yield name, f


def load_file_error(path, text=None) -> ConfigError:
    """The ConfigError that C.load_file raises for path (first written with text, where given)."""
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        C.load_file(path)
    return info.value


# -- presets ---------------------------------------------------------------

def test_presets_lists_default_and_tiny():
    assert {"default", "tiny"} <= set(C.presets())


def test_default_preset_has_two_devices_with_16_gib_hbm():
    cfg = C.load_preset("default")
    assert cfg.name == "default"
    assert cfg.num_devices == 2
    assert cfg.device.hbm.capacity_bytes == 16 * GiB


def test_tiny_preset_is_small():
    cfg = C.load_preset("tiny")
    assert cfg.name == "tiny"
    assert cfg.num_devices == 2
    assert cfg.device.hbm.capacity_bytes == 64 * MiB
    assert cfg.device.command_processor.ring_entries == 64
    assert (cfg.device.matrix_engine.rows, cfg.device.matrix_engine.cols) == (32, 32)
    # Values the preset does not set keep the dataclass defaults.
    assert cfg.device.mmu.page_size_bytes == C.MmuConfig().page_size_bytes


def test_unknown_preset_names_the_available_ones():
    with pytest.raises(ConfigError) as info:
        C.load_preset("no-such-chip")
    assert info.value.field == "EMU_PRESET"
    assert "no-such-chip" in str(info.value)
    assert "default" in str(info.value) and "tiny" in str(info.value)


def test_preset_values_round_trip_through_describe():
    cfg = C.load_preset("tiny")
    described = C.describe(cfg)
    assert described["device"]["hbm"]["capacity_bytes"] == 64 * MiB
    assert C.from_dict(described) == cfg


# -- metadata ----------------------------------------------------------------

def test_every_parameter_has_a_unit_and_a_description():
    names = []
    for name, f in leaf_fields(C.SystemConfig):
        names.append(name)
        assert "unit" in f.metadata, name
        assert isinstance(f.metadata["unit"], str), name
        assert f.metadata.get("doc"), f"{name} has no description"
    # The walk really reached the nested sections.
    assert "device.hbm.capacity_bytes" in names
    assert "device.command_processor.ring_entries" in names
    assert "host.api_call_ns" in names


def test_param_without_description_is_refused():
    with pytest.raises(ValueError):
        C.param(1, "B", "")


# -- validation --------------------------------------------------------------

@pytest.mark.parametrize("data, field", [
    ({"device": {"hbm": {"capacity_bytes": 5}}}, "device.hbm.capacity_bytes"),          # below minimum
    ({"device": {"hbm": {"capacity_bytes": 1.5e9}}}, "device.hbm.capacity_bytes"),       # wrong type
    ({"device": {"hbm": {"bandwidth_gb_per_s": 0.0}}}, "device.hbm.bandwidth_gb_per_s"),
    ({"device": {"clock_ghz": "fast"}}, "device.clock_ghz"),
    ({"device": {"matrix_engine": {"dataflow": "rs"}}}, "device.matrix_engine.dataflow"),  # not a choice
    ({"device": {"command_processor": {"ring_entries": 1}}}, "device.command_processor.ring_entries"),
    ({"num_devices": 0}, "num_devices"),
    ({"num_devices": True}, "num_devices"),                                                # bool is not an int
    ({"device": 3}, "device"),                                                             # scalar for a table
])
def test_bad_value_raises_config_error_naming_the_field(data, field):
    with pytest.raises(ConfigError) as info:
        C.from_dict(data)
    assert info.value.field == field
    assert str(info.value).startswith(field + ": ")


@pytest.mark.parametrize("data, field", [
    ({"device": {"hbm": {"capacity": 1}}}, "device.hbm.capacity"),
    ({"device": {"tensor_cores": 4}}, "device.tensor_cores"),
    ({"bogus": 1}, "bogus"),
])
def test_unknown_key_raises_config_error_naming_the_field(data, field):
    with pytest.raises(ConfigError) as info:
        C.from_dict(data)
    assert info.value.field == field
    assert "unknown field" in str(info.value)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_int_is_accepted_for_a_float_field_and_converted():
    cfg = C.from_dict({"device": {"clock_ghz": 2}})
    assert cfg.device.clock_ghz == 2.0
    assert isinstance(cfg.device.clock_ghz, float)


def test_nan_is_rejected():
    with pytest.raises(ConfigError) as info:
        C.from_dict({"device": {"hbm": {"bandwidth_gb_per_s": math.nan}}})
    assert info.value.field == "device.hbm.bandwidth_gb_per_s"


def test_descriptions_are_frozen():
    cfg = C.load_preset("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_devices = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.device.hbm.capacity_bytes = 1 << 30
    assert cfg.num_devices == 2


# -- TOML files ------------------------------------------------------------

def test_load_file_reads_toml(tmp_path):
    path = tmp_path / "mychip.toml"
    path.write_text('num_devices = 3\n[device.hbm]\ncapacity_bytes = 8388608\n'
                    '[device.matrix_engine]\ndataflow = "os"\n')
    cfg = C.load_file(path)
    assert cfg.name == "mychip"  # defaults to the file's stem
    assert cfg.num_devices == 3
    assert cfg.device.hbm.capacity_bytes == 8 * MiB
    assert cfg.device.matrix_engine.dataflow == "os"
    assert cfg.device.matrix_engine.rows == C.MatrixEngineConfig().rows


def test_load_file_keeps_an_explicit_name(tmp_path):
    path = tmp_path / "file.toml"
    path.write_text('name = "lab-board"\n')
    assert C.load_file(str(path)).name == "lab-board"


def test_load_file_bad_value_names_the_dotted_field(tmp_path):
    error = load_file_error(tmp_path / "bad.toml", "[device.hbm]\ncapacity_bytes = -1\n")
    assert error.field == "device.hbm.capacity_bytes"


def test_load_file_rejects_invalid_toml(tmp_path):
    path = tmp_path / "broken.toml"
    error = load_file_error(path, "[device\nname = \n")
    assert "not valid TOML" in str(error)
    assert str(path) in str(error)


def test_load_file_missing_file(tmp_path):
    path = tmp_path / "absent.toml"
    error = load_file_error(path)
    assert error.field == "EMU_CONFIG"
    assert str(path) in str(error)


def test_device_total_memory_is_the_hbm_capacity():
    from emulator.config import load_preset
    device = load_preset("tiny").device
    assert device.total_memory == device.hbm.capacity_bytes == 64 * 2 ** 20
