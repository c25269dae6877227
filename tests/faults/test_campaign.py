"""The fault campaign tool: injects one fault per run over a workload, classifies each outcome
against the golden run, re-runs clean after each, prints a table with Wilson intervals, saves
JSON, and gives the same classification for the same seed."""
import json

import pytest
import torch

import torch_plugin  # noqa: F401
from torch_plugin import faults

DEVICE = "emu:1"


def _classification(result):
    return [(r.kind, r.trigger, r.outcome, r.scope, r.fired) for r in result.results]


def test_campaign_is_deterministic_classifies_and_recovers(tmp_path):
    out = tmp_path / "campaign.json"
    kinds = ["bit_flip", "page_fault", "engine_hang", "dma_error", "ecc_correctable", "thermal_throttle"]
    first = faults.campaign("mlp", kinds, runs=12, seed=5, device=DEVICE, progress=False, out=str(out))
    again = faults.campaign("mlp", kinds, runs=12, seed=5, device=DEVICE, progress=False)
    assert _classification(first) == _classification(again)
    other = faults.campaign("mlp", kinds, runs=12, seed=6, device=DEVICE, progress=False)
    assert [r.trigger for r in other.results] != [r.trigger for r in first.results]
    outcomes = {r.kind: r.outcome for r in first.results}
    expected = {"page_fault": "detected", "engine_hang": "hang", "dma_error": "detected",
                "ecc_correctable": "masked", "thermal_throttle": "masked", "bit_flip": "sdc"}
    for kind, outcome in outcomes.items():
        if kind != "bit_flip":  # a flipped bit can land where the output never looks
            assert outcome == expected[kind], (kind, outcome)
    assert all(r.fired and r.clean_rerun_ok for r in first.results)
    data = json.loads(out.read_text())
    assert data["seed"] == 5 and len(data["results"]) == 12
    for kind, row in data["summary"].items():
        assert sum(v["count"] for v in row.values()) == sum(1 for r in first.results if r.kind == kind)
        for v in row.values():
            lo, hi = v["ci95"]
            assert 0 <= lo <= v["fraction"] <= hi <= 1
    table = first.table()
    assert "masked" in table and "sdc" in table and "Wilson" in table


def test_wilson_interval():
    assert faults.wilson(0, 0) == (0.0, 1.0)
    lo, hi = faults.wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = faults.wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)


def test_campaign_command_line_with_a_script_workload(tmp_path, capsys):
    script = tmp_path / "workload.py"
    script.write_text("import torch\n\ndef workload(device):\n"
                      "    x = torch.arange(256, dtype=torch.float32).to(device)\n"
                      "    return (x * 3 + 1).sum(0, keepdim=True)\n")
    out = tmp_path / "cli.json"
    assert faults.main(["campaign", "--workload", str(script), "--kinds", "dma_error,link_down", "--runs", "4",
                        "--seed", "1", "--device", DEVICE, "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "fault campaign:" in printed and "dma_error" in printed
    data = json.loads(out.read_text())
    assert {r["outcome"] for r in data["results"]} == {"detected"}
    assert {r["scope"] for r in data["results"]} <= {"stream", "device", "operation"}


def test_campaign_rejects_unknown_kinds_and_workloads():
    with pytest.raises(ValueError, match="valid kinds"):
        faults.campaign("mlp", ["gamma_ray"], runs=1, device=DEVICE, progress=False)
    with pytest.raises(ValueError, match="zoo model"):
        faults.campaign("no_such_model", runs=1, device=DEVICE, progress=False)
    assert torch.emu.get_device_health(1)["faults_armed"] == []
