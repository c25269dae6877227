"""``python -m torch_plugin.profile``: an unmodified script under the profiler, and --sweep."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_plugin import profile

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
import torch
x = torch.ones(int(sys.argv[1]), device="emu")
y = (x + x) * 3.0
print("result", y.sum().item(), "argv", sys.argv[1:])
"""


def run(args, env=None, tmp=None):
    environ = dict(os.environ, EMU_PRESET="tiny", **(env or {}))
    environ.pop("EMU_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "torch_plugin.profile", *args], capture_output=True, text=True,
                          env=environ, cwd=tmp or ROOT, timeout=300)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "work.py"
    path.write_text(SCRIPT)
    return path


def test_cli_runs_a_script_and_writes_report_trace_and_roofline(script, tmp_path):
    out = tmp_path / "out"
    done = run(["--out-dir", str(out), str(script), "4096", "--flag"])
    assert done.returncode == 0, done.stderr
    assert "result 24576.0 argv ['4096', '--flag']" in done.stdout   # the script saw its own argv
    assert "top kernels" in done.stdout and "binary.add" in done.stdout
    assert "verdict: " in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] in ("device-bound", "host-bound", "launch-bound")
    assert any(row["op"] == "aten::add.Tensor" for row in report["ops"])
    trace = json.loads((out / "trace.json").read_text())
    assert any(e.get("cat") == "engine" for e in trace["traceEvents"])
    assert (out / "roofline.png").read_bytes()[:4] == b"\x89PNG"


# In-process (profile.main is the command line's entry point): no interpreter start-up per test.
def test_cli_reports_a_missing_script(tmp_path, capsys):
    assert profile.main(["--no-progress", str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err


def test_cli_passes_on_the_scripts_exit_code(tmp_path, capsys):
    path = tmp_path / "fails.py"
    path.write_text("import sys, torch\ntorch.ones(4, device='emu').sum().item()\nraise SystemExit(3)\n")
    argv = list(sys.argv)
    assert profile.main(["--no-progress", "--out-dir", str(tmp_path / "o"), str(path)]) == 3
    assert sys.argv == argv                                   # restored after the script
    assert (tmp_path / "o" / "report.json").exists()          # what ran is still reported
    assert "verdict:" in capsys.readouterr().out


def test_sweep_reruns_with_one_field_changed(script, tmp_path, capsys):
    out = tmp_path / "sweep"
    field = "device.hbm.bandwidth_gb_per_s"
    # the parent in-process; each value runs in a fresh child process (its own emulated system)
    assert profile.main(["--no-progress", "--out-dir", str(out), "--sweep", f"{field}=50,400", str(script),
                         "262144"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[0] == field
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"50", "400"}
    slow, fast = float(rows["50"][2]), float(rows["400"][2])   # projected device time (us)
    assert fast < slow                                         # more bandwidth: a memory-bound add runs faster
    for value in ("50", "400"):
        config = (out / "sweep" / f"{field}={value}" / "hardware.toml").read_text()
        assert f"bandwidth_gb_per_s = {float(value)!r}" in config or f"bandwidth_gb_per_s = {value}" in config
        assert (out / "sweep" / f"{field}={value}" / "report.json").exists()


def test_sweep_names_a_bad_field_before_running(script, tmp_path, capsys):
    assert profile.main(["--no-progress", "--out-dir", str(tmp_path / "s"), "--sweep", "device.hbm.bandwith=1,2",
                         str(script), "8"]) == 2
    err = capsys.readouterr().err
    assert "device.hbm" in err and "bandwith" in err
    assert not (tmp_path / "s" / "sweep" / "device.hbm.bandwith=1" / "report.json").exists()
    assert profile.main(["--no-progress", "--out-dir", str(tmp_path / "t"), "--sweep",
                         "device.hbm.bandwidth_gb_per_s=-1", str(script), "8"]) == 2
    assert "bandwidth_gb_per_s" in capsys.readouterr().err
    assert profile.main(["--no-progress", "--sweep", "device.hbm.bandwidth_gb_per_s", str(script)]) == 2
    assert "FIELD=V1,V2" in capsys.readouterr().err


def test_parse_sweep_reads_toml_literals():
    assert profile.parse_sweep("device.cores=1,2,4") == ("device.cores", [1, 2, 4])
    assert profile.parse_sweep("x.y=1.5, true, ws") == ("x.y", [1.5, True, "ws"])
