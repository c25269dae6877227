"""The hardware description (emulator/config.py, docs/hardware.md): every field documented, config
files that start from a preset, the h200 preset, and the EMU_FIDELITY setting."""
import re
from pathlib import Path

import pytest

from emulator import config as C
from emulator.errors import ConfigError
from test_config import leaf_fields, load_file_error

DOC = Path(__file__).resolve().parents[2] / "docs" / "hardware.md"


def test_every_field_is_documented_with_its_unit_in_hardware_md():
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([a-z0-9_.]+)` \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    fields = dict(leaf_fields(C.SystemConfig))
    missing = sorted(set(fields) - set(rows))
    assert not missing, f"docs/hardware.md lacks {missing}"
    for name, f in fields.items():
        assert rows[name] == (f.metadata["unit"] or "—"), name
    assert "device.matrix_engine.macs_per_cycle.float64" in rows and "device.cores" in rows


def test_presets_include_h200():
    assert {"default", "tiny", "h200"} <= set(C.presets())
    cfg = C.load_preset("h200")
    assert cfg.name == "h200" and cfg.num_devices == 1


def test_a_config_file_starts_from_the_preset_it_names(tmp_path):
    path = tmp_path / "wide.toml"
    path.write_text('preset = "tiny"\n[device]\ncores = 3\n[device.hbm]\nbandwidth_gb_per_s = 400.0\n')
    cfg = C.load_file(path)
    tiny = C.load_preset("tiny")
    assert cfg.name == "wide"
    assert cfg.device.cores == 3 and cfg.device.hbm.bandwidth_gb_per_s == 400.0
    # Everything else is the preset's, not the dataclass defaults.
    assert cfg.device.hbm.capacity_bytes == tiny.device.hbm.capacity_bytes == 64 << 20
    assert cfg.device.matrix_engine.rows == 32 and cfg.device.command_processor.ring_entries == 64


def test_a_config_file_bad_field_names_it(tmp_path):
    path = tmp_path / "bad.toml"
    error = load_file_error(path, 'preset = "default"\n[device.matrix_engine.macs_per_cycle]\ncomplex32 = 4.0\n')
    assert error.field == "device.matrix_engine.macs_per_cycle.complex32"
    error = load_file_error(path, 'preset = "default"\n[interconnect]\ntopology = "torus"\n')
    assert error.field == "interconnect.topology"


def test_a_config_file_naming_an_unknown_preset_is_an_error(tmp_path):
    error = load_file_error(tmp_path / "x.toml", 'preset = "no-such"\n')
    assert error.field == "preset" and "no-such" in str(error)


def test_peak_figures_follow_the_description():
    d = C.load_preset("default").device
    assert d.peak_flops("matrix", "bfloat16") == 2 * 128 * 128 * 1.4e9 * 4
    assert d.peak_flops("matrix", "float64") == d.peak_flops("matrix", "bfloat16") / 16
    assert d.peak_flops("vector", "float32") == 256 * 1.4e9 * 4
    assert d.hbm_bytes_per_s == 1600e9 * 0.9
    assert d.sram_bytes == 4 * (8 << 20)
    with pytest.raises(ValueError):
        d.peak_flops("tensor", "bfloat16")


def test_fidelity_is_a_validated_field():
    assert C.SystemConfig().fidelity == "kernel"
    assert C.from_dict({"fidelity": "tile"}).fidelity == "tile"
    with pytest.raises(ConfigError) as info:
        C.from_dict({"fidelity": "cycle"})
    assert info.value.field == "fidelity"


def test_emu_fidelity_reaches_the_devices():
    import runtime
    from runtime.errors import InvalidValueError
    assert runtime.Settings.from_environment({"EMU_FIDELITY": "tile"}).fidelity == "tile"
    assert runtime.Settings.from_environment({}).fidelity is None
    with pytest.raises(InvalidValueError, match="EMU_FIDELITY"):
        runtime.Settings.from_environment({"EMU_FIDELITY": "cycle"})
    rt = runtime.Runtime(settings=runtime.Settings(preset="tiny", fidelity="tile"))
    assert rt.config.fidelity == "tile"
    assert rt.settings.load_config().name == "tiny"


def test_emu_preset_h200_starts_a_device():
    import runtime
    rt = runtime.Runtime(settings=runtime.Settings(preset="h200"))
    assert rt.device_count == 1 and rt.config.device.cores == 132


def test_a_config_file_may_carry_tables_for_other_readers(tmp_path):
    path = tmp_path / "chip.toml"
    path.write_text('preset = "tiny"\n[faults]\nx = 1\n[device]\ncores = 3\n')
    cfg = C.load_file(path, ignore=("faults",))
    assert cfg.device.cores == 3 and cfg.device.hbm.capacity_bytes == 64 << 20
    assert load_file_error(path).field == "faults"
