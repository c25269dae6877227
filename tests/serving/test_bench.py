"""``python -m torch_plugin.serve bench`` and ``plan`` as a user runs them: the JSON artifact's
fields, the latency plot, the plan's numbers; and the same stream in projection mode, whose
modelled token times equal the functional run's."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STREAM = ["--model", "llama", "--requests", "12", "--rate", "4000", "--prompt", "3:10", "--output", "2:5",
          "--seed", "3", "--page-size", "8", "--max-batch-tokens", "32", "--max-requests-per-batch", "4",
          "--no-progress"]


def _run(args, mode="functional", preset="tiny"):
    env = {**os.environ, "EMU_MODE": mode, "EMU_PRESET": preset, "EMU_HOST_FALLBACK": "forbid",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-m", "torch_plugin.serve", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc.stdout


@pytest.fixture(scope="module")
def functional_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    stdout = _run(["bench", *STREAM, "--profile", "--json", str(out / "b.json"), "--plot", str(out / "b.png")])
    with open(out / "b.json") as f:
        return stdout, json.load(f), out / "b.png"


def test_bench_writes_its_json_and_plot(functional_run):
    stdout, r, png = functional_run
    assert "TTFT ms" in stdout and "12/12 requests completed" in stdout
    assert r["mode"] == "functional" and r["completed"] == r["requests"] == 12 and not r["failed"]
    for key in ("ttft_s", "tpot_s"):
        assert set(r[key]) == {"p50", "p90", "p99", "mean"}
        assert 0 < r[key]["p50"] <= r[key]["p90"] <= r[key]["p99"]
    assert r["requests_per_s"] == pytest.approx(12 / r["span_s"])
    rows = r["per_request"]
    assert r["output_tokens"] == sum(row["output_tokens"] for row in rows)
    assert all(2 <= row["output_tokens"] <= 5 and 3 <= row["prompt_tokens"] <= 10 for row in rows)
    assert r["output_tokens_per_s"] == pytest.approx(r["output_tokens"] / r["span_s"])
    arrivals = [row["arrival_s"] for row in rows]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0 and arrivals[-1] > 0
    mem = r["memory"]
    assert len(mem) >= 5 and all(m["allocated_bytes"] <= m["reserved_bytes"] for m in mem)
    assert max(m["kv_used_bytes"] for m in mem) > 0 and mem[-1]["kv_used_bytes"] == 0
    assert r["peak_device_memory_bytes"] <= r["device_capacity_bytes"]
    kernels = {k["kernel"] for k in r["top_kernels"]}
    assert r["verdict"] in ("device-bound", "host-bound", "launch-bound") and "matmul" in kernels, r["top_kernels"]
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert 5_000 < os.path.getsize(png) < 400_000


def test_projection_mode_projects_the_same_times(functional_run, tmp_path):
    """The same stream in projection mode: every request its full output length, token times equal
    to the functional run's (the generated values differ: none are computed)."""
    _, functional, _ = functional_run
    _run(["bench", *STREAM, "--json", str(tmp_path / "p.json")], mode="projection")
    with open(tmp_path / "p.json") as f:
        projected = json.load(f)
    assert projected["mode"] == "projection" and projected["completed"] == 12
    for a, b in zip(functional["per_request"], projected["per_request"]):
        assert a["output_tokens"] == b["output_tokens"]
        assert a["ttft_s"] == pytest.approx(b["ttft_s"], rel=1e-9), (a, b)
        assert (a["tpot_s"] is None) == (b["tpot_s"] is None)
        if a["tpot_s"] is not None:
            assert a["tpot_s"] == pytest.approx(b["tpot_s"], rel=1e-9)
    assert projected["span_s"] == pytest.approx(functional["span_s"], rel=1e-9)


def test_plan_cli(tmp_path):
    stdout = _run(["plan", "--model", "llama-3-8b", "--preset", "h200", "--batch", "32", "--seq-len", "4096",
                   "--json", str(tmp_path / "plan.json")], mode="projection", preset="h200")
    with open(tmp_path / "plan.json") as f:
        p = json.load(f)
    assert "KV cache per token:     128.00 KiB" in stdout
    assert p["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2          # K and V, 32 layers, 8 KV heads of 128, bf16
    assert p["parameters"] == 8_030_261_248                         # Llama-3-8B
    assert 16e9 < p["weights_bytes"] < 16.1e9
    assert p["fits_sequences"] == p["fits_tokens"] // 4096
    total = p["weights_bytes"] + p["fits_tokens"] * p["kv_bytes_per_token"] + p["engine_bytes_at_fit"]
    assert total + p["activation_bytes"] <= p["device_capacity_bytes"]
