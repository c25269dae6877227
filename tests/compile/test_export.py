"""torch.export on emu: capture (static and dynamic shapes), the clean-process round trip, the
missing-package diagnostic and the compatibility record (torch_plugin/export.py)."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import torch_plugin.export as emu_export
from torch_plugin.zoo import MODELS

EMU = torch.device("emu")
ROOT = Path(__file__).resolve().parents[2]
aten = torch.ops.aten


class NormModel(torch.nn.Module):
    """Uses both custom operators."""

    def __init__(self, d=8):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(d) + 0.5)
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x, residual):
        h, residual = torch.ops.emu.fused_add_rms_norm(self.proj(x), residual, self.w, 1e-6)
        y, scale = torch.ops.emu.row_normalize(h)
        return y * scale.unsqueeze(1) + residual


def _mlp():
    spec = MODELS["mlp"]
    return spec.build(0).to(EMU).eval(), spec.batch(0)["x"].to(EMU)


def _run(code: str, *args, autoload=True):
    env = dict(os.environ, EMU_PRESET="tiny")
    if not autoload:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_export_static_and_dynamic_shapes():
    model, x = _mlp()
    static = torch.export.export(model, (x,))
    ops = {n.target for n in static.graph.nodes if n.op == "call_function"}
    assert aten.linear.default in ops or aten.addmm.default in ops
    assert not static.range_constraints
    torch.testing.assert_close(static.module()(x).cpu(), model(x).cpu())

    batch = Dim("batch", min=2, max=64)
    dynamic = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    (symbol, bounds), = dynamic.range_constraints.items()
    assert (bounds.lower, bounds.upper) == (2, 64)
    placeholder = next(n for n in dynamic.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert str(placeholder.meta["val"].shape[0]) == str(symbol)
    for rows in (3, 16, 40):
        xr = torch.randn(rows, 64, device=EMU)
        torch.testing.assert_close(dynamic.module()(xr).cpu(), model(xr).cpu())
    with pytest.raises(Exception):   # outside the declared range
        dynamic.module()(torch.randn(65, 64, device=EMU))


def test_round_trip_in_a_clean_process(tmp_path):
    torch.manual_seed(0)
    model, x = _mlp()
    norm = NormModel().to(EMU)
    xn, rn = torch.randn(5, 8, device=EMU), torch.randn(5, 8, device=EMU)
    for name, m, args, dims in (("mlp", model, (x,), ({0: Dim("b", min=2, max=32)},)),
                                ("norm", norm, (xn, rn), ({0: Dim("r", max=64)}, {0: Dim("r", max=64)}))):
        ep = torch.export.export(m, args, dynamic_shapes=dims)
        emu_export.save(ep, tmp_path / f"{name}.pt2")
        torch.save({"args": [a.cpu() for a in args], "expected": m(*args).detach().cpu()}, tmp_path / f"{name}.io")
    ops = sorted(emu_export.read_record(tmp_path / "norm.pt2")[1])
    assert ops == ["emu::fused_add_rms_norm.default", "emu::row_normalize.default"]
    code = (
        "import sys, torch, torch_plugin, torch_plugin.export as e\n"
        "for name in ('mlp', 'norm'):\n"
        "    ep = e.load(f'{sys.argv[1]}/{name}.pt2')\n"
        "    io = torch.load(f'{sys.argv[1]}/{name}.io')\n"
        "    args = [a.to('emu') for a in io['args']]\n"
        "    assert all(p.device.type == 'emu' for p in ep.state_dict.values())\n"
        "    torch.testing.assert_close(ep.module()(*args).cpu(), io['expected'], rtol=1e-5, atol=1e-6)\n"
        "print('round trip ok')\n")
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "round trip ok" in result.stdout


def test_missing_package_diagnostic_without_the_plugin(tmp_path):
    ep = torch.export.export(NormModel().to(EMU).cpu(), (torch.randn(3, 8), torch.randn(3, 8)))
    emu_export.save(ep, tmp_path / "norm.pt2")
    # plain torch.export.load: the plugin is neither autoloaded nor imported
    plain = _run("import sys, torch\ntry:\n    torch.export.load(sys.argv[1])\nexcept Exception as err:\n"
                 "    print('failed:', type(err).__name__)\n", tmp_path / "norm.pt2", autoload=False)
    assert "failed:" in plain.stdout, plain.stderr[-2000:]
    # the diagnostic (torch_plugin/export.py runs without registering the plugin)
    script = ROOT / "torch_plugin" / "export.py"
    check = subprocess.run([sys.executable, str(script), "check", str(tmp_path / "norm.pt2")], cwd=tmp_path,
                           env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"), capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 1, check.stderr[-2000:]
    assert "'seed-emu'" in check.stdout and "import torch_plugin" in check.stdout
    assert "emu::fused_add_rms_norm.default" in check.stdout and "emu::row_normalize.default" in check.stdout
    # the same check inside a process: load() raises it before deserializing
    code = ("import sys, importlib.util, torch\n"
            "spec = importlib.util.spec_from_file_location('emu_export', sys.argv[2])\n"
            "e = importlib.util.module_from_spec(spec); spec.loader.exec_module(e)\n"
            "try:\n    e.load(sys.argv[1])\nexcept e.MissingOperatorError as err:\n    print('MISSING', err)\n"
            "assert 'torch_plugin' not in sys.modules\n")
    inside = _run(code, tmp_path / "norm.pt2", script, autoload=False)
    assert "MISSING" in inside.stdout and "seed-emu" in inside.stdout, inside.stderr[-2000:]
    # and with the plugin, it loads on the CPU
    assert emu_export.diagnose(tmp_path / "norm.pt2") == []


def _rewrite_record(src, dst, **changes):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith("/extra/" + emu_export.RECORD):
                record = json.loads(data)
                record.update(changes)
                data = json.dumps(record).encode()
            zout.writestr(item, data)


def test_compatibility_record_is_stored_and_checked(tmp_path):
    model, x = _mlp()
    emu_export.save(torch.export.export(model, (x,)), tmp_path / "m.pt2")
    record, _ = emu_export.read_record(tmp_path / "m.pt2")
    assert record["torch_version"] == torch.__version__
    assert record["plugin"] == "seed-emu" and record["plugin_version"] == emu_export.plugin_version()
    assert record["operator_set_version"] == emu_export.OPERATOR_SET_VERSION
    emu_export.load(tmp_path / "m.pt2")   # loads cleanly here
    _rewrite_record(tmp_path / "m.pt2", tmp_path / "newer.pt2", operator_set_version=emu_export.OPERATOR_SET_VERSION + 1,
                    plugin_version="9.0")
    with pytest.raises(emu_export.ExportCompatibilityError, match="operator set version 2.*upgrade seed-emu"):
        emu_export.load(tmp_path / "newer.pt2")
    _rewrite_record(tmp_path / "m.pt2", tmp_path / "old_torch.pt2", torch_version="2.9.1")
    with pytest.raises(emu_export.ExportCompatibilityError, match="written by torch 2.9.1"):
        emu_export.load(tmp_path / "old_torch.pt2")


@pytest.mark.parametrize("name", ["mlp", "resnet18", "lstm_lm", "unet", "llama"])
def test_symbolic_shapes_fake_execution_for_zoo_models(name):
    """Fake execution with a symbolic batch (a symbolic sequence length for the decoder) traces
    each zoo model, and the exported program runs on emu at another size, equal to eager."""
    if name == "llama":
        pytest.importorskip("transformers", reason="the zoo's llama is a transformers model")
    spec = MODELS[name]
    model = spec.build(0).to(EMU).eval()
    batch = {k: v.to(EMU) for k, v in spec.batch(0).items()}
    keys = list(batch)

    class Forward(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *values):
            if name == "llama":
                return self.model(input_ids=values[0]).logits
            return spec.output(self.model, dict(zip(keys, values)))

    if name == "llama":
        args, dims, dim = (batch["input_ids"],), (({1: Dim("seq", min=2, max=32)},),), 1
    else:
        args, dims, dim = tuple(batch.values()), (tuple({0: Dim("batch", min=2, max=16)} for _ in keys),), 0
    ep = torch.export.export(Forward(), args, dynamic_shapes=dims)
    (bounds,) = ep.range_constraints.values()
    assert (bounds.lower, bounds.upper) == ((2, 32) if name == "llama" else (2, 16))
    smaller = tuple(a.narrow(dim, 0, 3 if a.shape[dim] > 3 else 2) for a in args)
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(*smaller).cpu(), Forward()(*smaller).cpu(), **spec.forward_tol)


def _check(path, autoload):
    """`python torch_plugin/export.py check PATH` in a fresh process, the plugin autoloaded or not."""
    env = dict(os.environ, EMU_PRESET="tiny", TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    return subprocess.run([sys.executable, str(ROOT / "torch_plugin" / "export.py"), "check", str(path)],
                          cwd=path.parent, env=env, capture_output=True, text=True, timeout=120)


def _rewrite_model(src, dst, edit):
    """Copies an archive with ``edit(program_dict)`` applied to its serialized program(s)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if "/models/" in item.filename and item.filename.endswith(".json"):
                program = json.loads(data)
                edit(program)
                data = json.dumps(program).encode()
            zout.writestr(item, data)


def test_plain_torch_export_save_archive_is_diagnosed(tmp_path):
    """An archive written by torch.export.save (no compatibility record) that calls an emu:: operator:
    where the plugin is not loaded, the check names the operator and the package (it used to say
    "loadable here"); where it is loaded, it is loadable and loads."""
    ep = torch.export.export(NormModel().to(EMU).cpu(), (torch.randn(3, 8), torch.randn(3, 8)))
    torch.export.save(ep, tmp_path / "plain.pt2")
    info = emu_export.inspect_archive(tmp_path / "plain.pt2")
    assert info.record is None and info.emu_tensors == 0 and info.torch_version == torch.__version__
    assert info.operators == ("emu::fused_add_rms_norm.default", "emu::row_normalize.default")
    without = _check(tmp_path / "plain.pt2", autoload=False)
    assert without.returncode == 1, without.stdout + without.stderr[-2000:]
    assert "loadable" not in without.stdout
    assert "emu::fused_add_rms_norm.default" in without.stdout and "'seed-emu'" in without.stdout
    with_plugin = _check(tmp_path / "plain.pt2", autoload=True)
    assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr[-2000:]
    assert "loadable here" in with_plugin.stdout and "no compatibility record" in with_plugin.stdout
    assert emu_export.diagnose(tmp_path / "plain.pt2") == []
    args = (torch.randn(3, 8), torch.randn(3, 8))   # exported with static shapes
    torch.testing.assert_close(emu_export.load(tmp_path / "plain.pt2").module()(*args), ep.module()(*args))


def test_emu_device_tensors_in_a_plain_archive_are_named(tmp_path):
    """Weights saved on the emu device (plain torch.export.save, no emu:: operator) need the device:
    the check says so where the plugin is absent."""
    model = torch.nn.Linear(4, 3).to(EMU)
    torch.export.save(torch.export.export(model, (torch.randn(2, 4, device=EMU),)), tmp_path / "lin.pt2")
    info = emu_export.inspect_archive(tmp_path / "lin.pt2")
    assert info.operators == () and info.emu_tensors > 0
    without = _check(tmp_path / "lin.pt2", autoload=False)
    assert without.returncode == 1 and "on the emu device" in without.stdout, without.stdout + without.stderr[-2000:]
    assert "'seed-emu'" in without.stdout
    assert emu_export.diagnose(tmp_path / "lin.pt2") == []   # here the device is registered


def test_other_torch_and_operator_set_versions_name_both(tmp_path):
    ep = torch.export.export(NormModel().to(EMU).cpu(), (torch.randn(3, 8), torch.randn(3, 8)))
    torch.export.save(ep, tmp_path / "plain.pt2")
    # a record-less archive from another torch: the program's own torch_version field is read
    _rewrite_model(tmp_path / "plain.pt2", tmp_path / "old.pt2", lambda p: p.update(torch_version="2.9.1"))
    (problem,) = emu_export.diagnose(tmp_path / "old.pt2")
    assert "written by torch 2.9.1" in problem and f"runs torch {torch.__version__}" in problem
    with pytest.raises(emu_export.ExportCompatibilityError, match="written by torch 2.9.1"):
        emu_export.load(tmp_path / "old.pt2")

    # an operator of a newer operator set, with the plugin registered: both operator-set versions named
    def newer_op(program):
        for node in program["graph_module"]["graph"]["nodes"]:
            if node["target"] == "torch.ops.emu.row_normalize.default":
                node["target"] = "torch.ops.emu.row_normalize_v9.default"
    emu_export.save(ep, tmp_path / "rec.pt2")
    _rewrite_model(tmp_path / "rec.pt2", tmp_path / "newer_op.pt2", newer_op)
    _rewrite_record(tmp_path / "newer_op.pt2", tmp_path / "newer.pt2", plugin_version="9.0",
                    operator_set_version=emu_export.OPERATOR_SET_VERSION + 1,
                    operators=["emu::row_normalize_v9.default"])
    problems = emu_export.diagnose(tmp_path / "newer.pt2")
    assert any("emu::row_normalize_v9.default" in p and f"operator set version {emu_export.OPERATOR_SET_VERSION}"
               in p and f"operator set version {emu_export.OPERATOR_SET_VERSION + 1} (plugin 9.0)" in p
               for p in problems), problems
    with pytest.raises(emu_export.MissingOperatorError, match="upgrade seed-emu"):
        emu_export.load(tmp_path / "newer.pt2")
