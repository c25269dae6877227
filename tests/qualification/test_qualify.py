"""Qualification (docs/qualification.md): suite validation, the artifacts a run writes, the
regression gate and the reports."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torch_plugin.qualify import FIELDS, SuiteError, gate, load_suite, report

ROOT = Path(__file__).resolve().parents[2]
TINY_SUITE = """
[suite]
name = "tiny-test"
description = "one small workload for the tests"

[thresholds]
device_time_s = 0.02

[[workload]]
name = "mlp-infer"
model = "zoo:mlp"
task = "inference"
input = {distribution = "zoo", seed = 3}
preset = "tiny"
warmup = 1
iterations = 2
thresholds = {end_to_end_time_s = 0.05}
"""


def qualify(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "torch_plugin.qualify", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def write_suite(tmp_path, workload_lines: str, head: str = "") -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(head + "[[workload]]\nname = \"w1\"\nmodel = \"mlp\"\ntask = \"train\"\n" + workload_lines)
    return path


# -- suites ----------------------------------------------------------------------------------

@pytest.mark.parametrize("lines, field, words", [
    ("precision = \"float64\"\n", "precision", "expected one of float32, bfloat16, float16"),
    ("power_mode = \"turbo mode\"\n", "power_mode", "expected a power mode name"),
    ("fallback = \"sometimes\"\n", "fallback", "expected one of forbid, warn, allow"),
    ("warmup = -1\n", "warmup", "integer >= 0"),
    ("iterations = 0\n", "iterations", "integer >= 1"),
    ("concurrency = 4\n", "concurrency", "not modelled"),
    ("batsh = 4\n", "batsh", "unknown field"),
    ("compile_options = {mode = \"max-autotune\"}\n", "compile_options", "need execution = 'compile'"),
    ("execution = \"compile\"\ncompile_options = {fast = true}\n", "compile_options", "unknown option 'fast'"),
    ("prefill_tokens = 16\n", "prefill_tokens", "transformers models only"),
    ("input = {distribution = \"uniform_tokens\"}\n", "input", "does not apply to a zoo model"),
    ("preset = \"tiny\"\nhardware = \"x.toml\"\n", "hardware", "not both"),
    ("hardware = \"missing.toml\"\n", "hardware", "no such file"),
    ("thresholds = {latency = 0.1}\n", "thresholds.latency", "unknown metric"),
])
def test_a_bad_field_names_the_file_the_workload_and_the_field(tmp_path, lines, field, words):
    path = write_suite(tmp_path, lines)
    with pytest.raises(SuiteError) as info:
        load_suite(path, zoo_names={"mlp"})
    message = str(info.value)
    assert str(path) in message and "workload 'w1'" in message and f"field {field!r}" in message, message
    assert words in message, message
    assert info.value.field == field and info.value.workload == "w1"


def test_a_named_power_mode_reaches_the_device_and_default_leaves_the_description_s(tmp_path):
    from torch_plugin.qualify.runner import workload_environment
    default, = load_suite(write_suite(tmp_path, ""), zoo_names={"mlp"}).workloads
    assert "EMU_POWER_MODE" not in workload_environment(default, base={"EMU_POWER_MODE": "max"})
    named, = load_suite(write_suite(tmp_path, "power_mode = \"efficiency\"\n"), zoo_names={"mlp"}).workloads
    assert workload_environment(named, base={})["EMU_POWER_MODE"] == "efficiency"


def test_suite_level_errors_name_the_file(tmp_path):
    path = write_suite(tmp_path, "", head="[thresholds]\ndevice_time_s = \"1%\"\n")
    with pytest.raises(SuiteError, match=r"suite\.toml: field 'thresholds\.device_time_s': expected a relative"):
        load_suite(path)
    for text, message, zoo_names in (
            ("[suite]\nname = \"x\"\n", "at least one", None),
            ("[[workload]]\nname = \"a\"\ntask = \"train\"\n", "workload 'a': field 'model': required", None),
            ("[[workload]]\nname = \"a\"\nmodel = \"mlp\"\ntask = \"train\"\n" * 2,
             "workload 'a': field 'name': two workloads", None),
            ("[[workload]]\nname = \"a\"\nmodel = \"vgg\"\ntask = \"train\"\n",
             "field 'model': 'vgg' is not a zoo model", {"mlp"}),
            ("[[workload]]\nname = \"a\"\nmodel = \"transformers:llama\"\ntask = \"train\"\n",
             "field 'prefill_tokens': required", None),
            ("not toml [", "not valid TOML", None)):
        path.write_text(text)
        with pytest.raises(SuiteError, match=message):
            load_suite(path, zoo_names=zoo_names)


def test_defaults_are_resolved_and_the_repository_suites_validate():
    result = qualify("check", *sorted((ROOT / "qualification" / "suites").glob("*.toml")), timeout=300)
    assert result.returncode == 0, result.stderr
    suite = load_suite(ROOT / "qualification" / "suites" / "quick.toml")
    assert suite.name == "quick"
    kinds = {(w.task, w.execution) for w in suite.workloads}
    assert {("inference", "eager"), ("train", "eager"), ("inference", "compile"), ("train", "compile")} <= kinds
    for w in suite.workloads:
        assert w.fallback == "forbid" and w.qualified and w.preset is not None


def test_the_quick_baseline_holds_every_workload_of_the_quick_suite():
    suite = load_suite(ROOT / "qualification" / "suites" / "quick.toml")
    baseline = gate.load_artifacts(ROOT / "qualification" / "baselines" / "quick")
    assert sorted(baseline) == sorted(w.name for w in suite.workloads)
    for name, artifact in baseline.items():
        assert artifact["qualified"] and artifact["op_paths"]["fallback_count"] == 0, name


# -- a run -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qualify")
    suite = tmp / "tiny-test.toml"
    suite.write_text(TINY_SUITE)
    result = qualify("run", suite, "--out", tmp / "run", "--no-progress")
    assert result.returncode == 0, result.stderr
    return tmp / "run"


def test_run_writes_an_artifact_with_every_field(artifacts):
    files = sorted(artifacts.glob("*.json"))
    assert [f.name for f in files] == ["mlp-infer.json"]
    a = json.loads(files[0].read_text())
    assert set(FIELDS) <= set(a["workload"])
    w = a["workload"]
    assert (w["model"], w["task"], w["precision"], w["autocast"], w["execution"], w["preset"], w["power_mode"],
            w["fidelity"], w["mode"], w["fallback"], w["warmup"], w["iterations"]) == \
        ("zoo:mlp", "inference", "float32", "none", "eager", "tiny", "default", "kernel", "functional", "forbid", 1, 2)
    assert w["input"] == {"distribution": "zoo", "seed": 3}
    assert a["qualified"] is True and a["suite"]["name"] == "tiny-test"
    assert a["environment"] == {"EMU_PRESET": "tiny", "EMU_FIDELITY": "kernel", "EMU_MODE": "functional",
                                "EMU_HOST_FALLBACK": "forbid"}
    p = a["provenance"]
    assert p["torch"].startswith("2.") and p["transformers"]
    assert len(p["plugin"]["git_commit"]) == 40 and isinstance(p["plugin"]["git_dirty"], bool)
    assert p["firmware"]["abi"].count(".") == 1 and p["firmware"]["version"].startswith(p["firmware"]["abi"])
    assert p["driver"]["firmware_abi_major"] == int(p["firmware"]["abi"].split(".")[0])
    assert p["hardware"]["name"] == "tiny" and len(p["hardware"]["content_sha256"]) == 64
    paths = a["op_paths"]
    assert paths["fallback_count"] == 0 and paths["counts"]["native"] > 0
    m = a["metrics"]
    assert a["derived"]["samples_per_step"] == 16      # the mlp spec's batch
    assert 0 < m["device_time_s"] <= m["end_to_end_time_s"]
    assert m["samples_per_s"] == pytest.approx(16 / m["end_to_end_time_s"])
    assert m["peak_memory_bytes"] > 0
    # Energy is read from the profiler report where it has it, else omitted with the reason.
    for metric in ("energy_j", "average_power_w"):
        assert (metric in m) != (metric in a["omitted_metrics"])
    # Wall time is the emulation's, kept apart from the projected metrics.
    assert not any("wall" in key for key in m) and a["emulation"]["wall_time_s"] > 0
    assert a["thresholds"]["device_time_s"] == 0.02 and a["thresholds"]["end_to_end_time_s"] == 0.05
    assert a["thresholds"]["peak_memory_bytes"] == 0.01


def _copy(src: Path, dst: Path, edit=None) -> Path:
    shutil.copytree(src, dst)
    if edit is not None:
        path = dst / "mlp-infer.json"
        artifact = json.loads(path.read_text())
        edit(artifact)
        path.write_text(json.dumps(artifact))
    return dst


def test_compare_passes_on_identical_directories(artifacts, tmp_path):
    _copy(artifacts, tmp_path / "new")
    findings = gate.compare(artifacts, tmp_path / "new")
    assert findings and not [f for f in findings if f.failure]
    result = qualify("compare", artifacts, tmp_path / "new", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout


def test_compare_fails_naming_the_workload_the_metric_and_both_values(artifacts, tmp_path):
    old = json.loads((artifacts / "mlp-infer.json").read_text())["metrics"]["device_time_s"]

    def slower(a):   # 3% slower: beyond the suite's 2% for device_time_s
        a["metrics"]["device_time_s"] *= 1.03
    _copy(artifacts, tmp_path / "new", slower)
    result = qualify("compare", artifacts, tmp_path / "new", timeout=120)
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if line.startswith("FAIL"))
    assert "mlp-infer device_time_s" in line and f"{old:.6g}" in line and f"{old * 1.03:.6g}" in line, line
    assert "threshold 2%" in line
    # Within a threshold passes, and --threshold overrides the suite's.
    assert qualify("compare", artifacts, tmp_path / "new", "--threshold", "device_time_s=0.05",
                   timeout=120).returncode == 0

    def a_bit_slower(a):
        a["metrics"]["device_time_s"] *= 1.015
    _copy(artifacts, tmp_path / "within", a_bit_slower)
    assert not [f for f in gate.compare(artifacts, tmp_path / "within") if f.failure]


def test_compare_fails_on_fallback_and_on_a_missing_workload_or_metric(artifacts, tmp_path):
    def fell_back(a):
        a["op_paths"]["fallback_count"] = 2
        a["op_paths"]["fallback_ops"] = {"aten::cummax": 2}
    _copy(artifacts, tmp_path / "fallback", fell_back)
    failures = [str(f) for f in gate.compare(artifacts, tmp_path / "fallback") if f.failure]
    assert any("fallback_count" in f and "aten::cummax x2" in f for f in failures), failures

    (tmp_path / "empty").mkdir()
    failures = [str(f) for f in gate.compare(artifacts, tmp_path / "empty") if f.failure]
    assert failures == [f"FAIL mlp-infer: in the baseline ({artifacts}), missing from {tmp_path / 'empty'}"]
    failures = [str(f) for f in gate.compare(tmp_path / "empty", artifacts) if f.failure]
    assert len(failures) == 1 and "missing from the baseline" in failures[0]

    def lost_metric(a):
        del a["metrics"]["peak_memory_bytes"]
    _copy(artifacts, tmp_path / "lost", lost_metric)
    failures = [str(f) for f in gate.compare(artifacts, tmp_path / "lost") if f.failure]
    assert len(failures) == 1 and "peak_memory_bytes" in failures[0]


def test_report_renders_a_table_a_chart_and_the_readme_block(artifacts, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{report.BEGIN}\nold table\n{report.END}\nafter\n")
    result = qualify("report", artifacts, "--png", tmp_path / "chart.png", "--readme", readme, timeout=300)
    assert result.returncode == 0, result.stderr
    table = result.stdout
    assert "| `mlp-infer` | zoo:mlp | inference | eager | float32 | 16 | tiny (kernel, default) | 1 + 2 |" in table, table
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = readme.read_text()
    assert "old table" not in text and "| `mlp-infer` |" in text
    assert text.startswith("# title\n\nbefore\n") and text.endswith(f"{report.END}\nafter\n")
    readme.write_text("no markers\n")
    result = qualify("report", artifacts, "--readme", readme, timeout=300)
    assert result.returncode != 0 and "no qualification markers" in result.stderr


def test_the_profiler_attributes_every_command_of_a_compiled_replay():
    """The worker's coverage check (the firmware's trace against the profiler's records) holds for a
    compiled program replayed in segments (telemetry hooks Runtime.replay)."""
    import torch
    from torch_plugin.qualify import worker
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("emu")
    compiled = torch.compile(model, backend="emu")
    x = torch.randn(4, 8, device="emu")
    with torch.no_grad():
        for _ in range(2):   # the first call captures, the later ones replay
            compiled(x)
        torch.emu.synchronize()
        before = worker._last_traced_seq()
        with torch.emu.profile() as prof:
            compiled(x)
    assert worker._unprofiled_commands(before, prof) == {}
    assert len(prof._entries) >= 2 and prof.report().projected_device_time_s > 0
