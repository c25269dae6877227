"""The main job (python -m torch_plugin.demo): a zoo transformer trains and generates on emu,
checked against CPU, with the op paths, peak memory and the projected-performance report."""
import pytest

from torch_plugin import demo


@pytest.mark.parametrize("model,dtype", [("gpt2", "fp32"), ("llama", "bf16")])
def test_main_job_runs_and_checks_against_cpu(model, dtype, tmp_path, capsys):
    timeline = tmp_path / "timeline.json"
    rc = demo.main(["--model", model, "--dtype", dtype, "--layers", "1", "--width", "32", "--steps", "2",
                    "--seq-len", "8", "--new-tokens", "3", "--timeline", str(timeline)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "losses and parameters match the CPU reference" in out
    assert "step 2/2" in out and "host_fallback 0 (0 ops)" in out
    assert "peak device memory" in out and "Projected performance" in out
    if dtype == "fp32":
        assert "identical to CPU" in out
    assert timeline.stat().st_size > 0


def test_unknown_model_is_a_usage_error(capsys):
    assert demo.main(["--model", "no-such-model"]) == 2
    assert "gpt2" in capsys.readouterr().err
