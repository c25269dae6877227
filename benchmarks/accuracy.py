"""Calibration and validation of the h200, h200x8 and h100 presets on published measurements.

    python benchmarks/accuracy.py                 # fit, project, print the table
    python benchmarks/accuracy.py --write-docs    # ... and write it into docs/hardware.md
    python benchmarks/accuracy.py --json out.json

The rows are tests/emulator/data/published_gpu.json (copied from the reference with their
sources). Calibration is not validation: each free parameter is fitted on the rows named in
``FITS`` and every other row is a check of the model with the fitted values.

- ``device.hbm.efficiency`` (h200): on STREAM copy; checked on STREAM triad and on the decode row.
- ``interconnect.protocol_efficiency`` (h200x8): on the ring plateau of nccl-tests issue 212;
  checked on Azure's 67 MB ring point.
- ``interconnect.in_switch_efficiency`` (h200x8): on the NVLS peak of nccl-tests issue 272; checked
  on Azure's 8 GB point and the NVLS figure of issue 212.
- ``device.matrix_engine.efficiency`` (h200): on the 8192^3 bf16 GEMM. The reference holds no
  other measurement of sustained tensor-core throughput, so this row is calibration, not a check;
  the fused-attention rows (tensor-bound at long sequences) check it once that kernel is native.
- Launch overhead (``command_processor.launch_ns``) is not fitted: an assumption of the preset.

Kernel rows (GEMM, STREAM) use the kernel library's cost models on a ``CostDevice``; collective
rows the interconnect model (emulator/collectives.py); model rows (attention, decode, end to end)
run through torch on emu in projection mode (EMU_MODE=projection) in a child process, on a
hardware description with the fitted values. A row whose feature is missing is reported as
``pending`` with the reason.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "emulator" / "data" / "published_gpu.json"
DOC = ROOT / "docs" / "hardware.md"
BEGIN, END = "<!-- accuracy table: begin (benchmarks/accuracy.py --write-docs) -->", "<!-- accuracy table: end -->"

# parameter -> (preset, dotted field, row it is fitted on, search interval)
FITS = {
    "hbm_efficiency": ("h200", "device.hbm.efficiency", "h200_stream_copy", (0.3, 1.0)),
    "matrix_efficiency": ("h200", "device.matrix_engine.efficiency", "h100_gemm_8192", (0.3, 1.0)),
    "protocol_efficiency": ("h200x8", "interconnect.protocol_efficiency", "h200x8_ring_issue212", (0.1, 1.0)),
    "in_switch_efficiency": ("h200x8", "interconnect.in_switch_efficiency", "h200x8_nvls_peak_issue272", (0.1, 1.0)),
}
STREAM_ELEMENTS = 1 << 27        # float64 per array (1 GiB): a long stream
LLAMA2_7B = dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32,
                 intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096)
ATTENTION = dict(batch_tokens=16384, hidden=2048, head_dim=128)   # the FlashAttention papers' setup


def load_rows() -> dict:
    return {row["id"]: row for row in json.loads(DATA.read_text())["rows"]}


# -- descriptions with fitted values --------------------------------------------------------------
def _replace(obj, dotted: str, value):
    head, _, rest = dotted.partition(".")
    if not rest:
        return dataclasses.replace(obj, **{head: value})
    return dataclasses.replace(obj, **{head: _replace(getattr(obj, head), rest, value)})


def described(preset: str, fitted: dict):
    """The preset with the fitted values of the parameters that belong to it (h100 takes h200's
    device parameters: the same die)."""
    from emulator.config import load_preset
    config = load_preset(preset)
    for name, value in fitted.items():
        owner, dotted, _, _ = FITS[name]
        if owner == preset or (preset in ("h100", "h200x8") and owner == "h200" and dotted.startswith("device.")):
            config = _replace(config, dotted, value)
    return config


def _toml_overrides(preset: str, fitted: dict) -> str:
    lines, tables = [f'preset = "{preset}"'], {}
    for name, value in fitted.items():
        owner, dotted, _, _ = FITS[name]
        if owner == preset or (preset in ("h100", "h200x8") and owner == "h200" and dotted.startswith("device.")):
            table, _, key = dotted.rpartition(".")
            tables.setdefault(table, []).append(f"{key} = {value!r}")
    for table, keys in tables.items():
        lines += [f"[{table}]", *keys]
    return "\n".join(lines) + "\n"


# -- projections on the cost models ---------------------------------------------------------------
def _operand(address, dtype, n):
    from emulator.kernels.library import Operand
    return Operand(address, dtype, (n,), (1,))


def stream_tb_per_s(config, kind: str) -> tuple[float, float]:
    """(projected, bound) STREAM bandwidth in TB/s: copy moves 2 arrays of float64, triad 3."""
    from emulator.device import CostDevice
    from emulator.kernels import dtypes
    from emulator.kernels.library import KERNELS
    dev, n, f64 = CostDevice(config.device), STREAM_ELEMENTS, dtypes.FLOAT64
    a, b, c = (_operand(i << 32, f64, n) for i in (1, 2, 3))   # three distinct arrays
    if kind == "copy":
        cost, arrays = KERNELS["copy"].cost(dev, a, b), 2
    else:
        cost, arrays = KERNELS["binary"].cost(dev, "add", a, b, c, f64, 3.0), 3
    moved = arrays * n * 8
    return moved / cost.ns / 1e3, config.device.hbm.bandwidth_gb_per_s / 1e3


def gemm_tflops(config, size: int = 8192) -> tuple[float, float]:
    """(projected, peak) TFLOP/s of a size^3 bf16 matmul."""
    from emulator.device import CostDevice
    from emulator.kernels import dtypes
    from emulator.kernels.library import KERNELS, Operand
    dev, bf16 = CostDevice(config.device), dtypes.BFLOAT16
    m = lambda address: Operand(address, bf16, (size, size), (size, 1))
    cost = KERNELS["matmul"].cost(dev, m(1 << 40), m(2 << 40), m(3 << 40), None, 0.0, 1.0)
    return cost.flops / cost.ns / 1e3, config.device.peak_flops("matrix", "bfloat16") / 1e12


def all_reduce_busbw(config, nbytes: int, algorithm: str) -> tuple[float, float]:
    """(projected, bound) bus bandwidth in GB/s of an 8-rank all_reduce; the bound is what the
    links could carry with no protocol overhead (for NVLS: through the switch)."""
    from emulator import collectives
    ic = config.interconnect
    cost = collectives.collective_cost("all_reduce", nbytes, 8, ic, algorithm=algorithm)
    link = ic.bandwidth_gb_per_s * ic.links_per_pair
    bound = 2 * 7 / 9 * link if algorithm == "nvls" else link
    return cost.busbw_gb_per_s, bound


def _fit(name: str, rows: dict, fitted: dict) -> float:
    preset, dotted, row_id, (lo, hi) = FITS[name]
    target = rows[row_id]["value"]
    project = _PROJECT[row_id]

    def value(x):
        return project(described(preset, {**fitted, name: x}))[0]

    # Every projection here rises with its efficiency: bisection.
    if not value(lo) <= target <= value(hi):
        raise RuntimeError(f"{name}: {target} {rows[row_id]['unit']} is outside what [{lo}, {hi}] can project")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if value(mid) < target else (lo, mid)
    return round((lo + hi) / 2, 4)


_PROJECT = {
    "h200_stream_copy": lambda c: stream_tb_per_s(c, "copy"),
    "h200_stream_triad": lambda c: stream_tb_per_s(c, "triad"),
    "h100_gemm_8192": gemm_tflops,
}
for _id, _bytes, _algo in (("h200x8_all_reduce_67mb_ring", 67108864, "ring"),
                           ("h200x8_all_reduce_8gb_nvls", 8589934592, "nvls"),
                           ("h200x8_nvls_peak_issue272", 8589934592, "nvls"),
                           ("h200x8_ring_issue212", 8589934592, "ring"),
                           ("h200x8_nvls_issue212", 8589934592, "nvls")):
    _PROJECT[_id] = (lambda b, a: lambda c: all_reduce_busbw(c, b, a))(_bytes, _algo)
_PRESET_OF = {"h200_stream_copy": "h200", "h200_stream_triad": "h200", "h100_gemm_8192": "h200"}


def fit_all(rows: dict) -> dict:
    fitted: dict = {}
    for name in FITS:
        fitted[name] = _fit(name, rows, fitted)
    return fitted


# -- projections through torch (a child process in projection mode) -----------------------------
def _child(kind: str, preset: str, fitted: dict, timeout: int = 900) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(_toml_overrides(preset, fitted))
        path = f.name
    env = dict(os.environ, EMU_MODE="projection", EMU_CONFIG=path, EMU_HOST_FALLBACK="forbid",
               TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=str(ROOT))
    env.pop("EMU_PRESET", None)
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", kind],
                              capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    finally:
        os.unlink(path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"pending": f"the projection failed: {tail[:300]}"}
    return json.loads(lines[-1])


def _child_main(kind: str) -> None:
    import torch
    import torch_plugin  # noqa: F401
    import runtime
    if not torch.emu.is_projection_mode():
        raise SystemExit("the child runs in projection mode (EMU_MODE=projection)")
    rt = runtime.get_runtime()

    def timed(fn):
        torch.emu.synchronize()
        t0 = rt.host_time_ns()
        out = fn()
        torch.emu.synchronize()
        return out, rt.host_time_ns() - t0

    if kind == "attention":
        print(json.dumps(_attention(torch, timed)))
    else:
        print(json.dumps(_llama(torch, timed, kind)))


def _attention(torch, timed) -> dict:
    import torch.nn.functional as F
    from torch_plugin.telemetry import Telemetry
    d = ATTENTION["head_dim"]
    heads = ATTENTION["hidden"] // d
    out = {}
    for seq in (2048, 4096, 8192, 16384):
        batch = ATTENTION["batch_tokens"] // seq
        q, k, v = (torch.empty(batch, heads, seq, d, dtype=torch.bfloat16, device="emu") for _ in range(3))
        with Telemetry() as t:
            _, ns = timed(lambda: F.scaled_dot_product_attention(q, k, v))
        native = t.as_dict()["paths"]["native"]
        if not any("fused_attention_overrideable" in op for op in native):
            ran = ", ".join(sorted(native)) or "nothing native"
            return {"pending": "aten::_scaled_dot_product_fused_attention_overrideable does not run natively on emu "
                               f"(issue 19's fused attention; SDPA ran: {ran[:200]})"}
        _, causal_ns = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        flops = 4 * batch * heads * seq * seq * d
        out[str(seq)] = {"ns": ns, "causal_ns": causal_ns, "flops": flops}
    return out


def _llama(torch, timed, kind: str) -> dict:
    import transformers
    config = transformers.LlamaConfig(**LLAMA2_7B)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model = model.to_empty(device="emu").eval()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.model.embed_tokens.weight
    streamed = params - embedding.numel() * embedding.element_size()   # a decode step reads all but the table
    # Decode steps are served as deployments serve them: compiled (the emu backend fuses the
    # elementwise chains and replays each graph as one command list), so a step is not bound by
    # eager per-op launches. The prefill (128 tokens, compute-bound kernels) runs eager.
    compiled = torch.compile(model, backend="emu")
    steps = 20 if kind == "e2e" else 3
    ids = torch.zeros(1, 128, dtype=torch.long, device="emu")
    token = torch.zeros(1, 1, dtype=torch.long, device="emu")
    with torch.no_grad():
        warm = model(input_ids=ids, use_cache=True)
        for _ in range(2):   # compiles (static, then dynamic KV length); their time is not measured
            warm = compiled(input_ids=token, past_key_values=warm.past_key_values, use_cache=True)
        del warm
        out, prefill_ns = timed(lambda: model(input_ids=ids, use_cache=True))
        cache, decode = out.past_key_values, []
        for _ in range(steps):
            out, ns = timed(lambda: compiled(input_ids=token, past_key_values=cache, use_cache=True))
            cache = out.past_key_values
            decode.append(ns)
    return {"prefill_ns": prefill_ns, "decode_ns": decode, "weight_bytes": params, "streamed_bytes": streamed,
            "compiled": True}


# -- the table --------------------------------------------------------------------------------------
def _row(quantity, published, projected, bound, unit, fitted_on, checked_on, rate=True, note=""):
    error = None if published is None or projected is None else projected / published - 1
    return {"quantity": quantity, "published": published, "projected": projected, "bound": bound, "unit": unit,
            "error": error, "fitted_on": fitted_on, "checked_on": checked_on,
            "rate": rate, "note": note}


def evaluate(with_models: bool = True) -> dict:
    rows = load_rows()
    fitted = fit_all(rows)
    table = []
    fit_rows = {FITS[name][2]: name for name in FITS}
    for row_id, project in _PROJECT.items():
        row = rows[row_id]
        preset = _PRESET_OF.get(row_id, "h200x8")
        projected, bound = project(described(preset, fitted))
        fitted_name = fit_rows.get(row_id)
        table.append(_row(row["quantity"], row["value"], projected, bound, row["unit"],
                          f"{row_id} ({FITS[fitted_name][1]})" if fitted_name else "",
                          "" if fitted_name else row_id))
    if with_models:
        table += _model_rows(rows, fitted)
    return {"fitted": fitted, "rows": table}


def _model_rows(rows: dict, fitted: dict) -> list:
    out = []
    h200 = described("h200", fitted)
    attn = _child("attention", "h200", fitted)   # H100's published row: the same tensor cores, compute-bound
    fa2 = rows["h100_fa2_fwd_hd128_2k"]
    peak = h200.device.peak_flops("matrix", "bfloat16") / 1e12
    if "pending" in attn:
        out.append(_row(fa2["quantity"], fa2["value"], None, peak, "TFLOP/s", "", "pending", note=attn["pending"]))
        out.append(_row("fused attention, causal / non-causal time, seq 2k-16k", None, None, None, "ratio", "",
                        "pending", rate=False, note=attn["pending"]))
    else:
        for seq, r in attn.items():
            published = fa2["value"] if seq == "2048" else None
            out.append(_row(f"fused attention forward, head dim 128, seq {int(seq) // 1024}k, bf16"
                            + (" (FlashAttention-2)" if published else ""), published,
                            r["flops"] / r["ns"] / 1e3, peak, "TFLOP/s", "",
                            "h100_fa2_fwd_hd128_2k" if published else "bound only"))
        worst = max(r["causal_ns"] / r["ns"] for r in attn.values())
        out.append(_row("fused attention, causal / non-causal time, seq 2k-16k (worst)", None, worst, 0.5, "ratio",
                        "", "issue 19 target: at most 0.6", rate=False))
    decode = _child("decode", "h200", fitted)
    if "pending" in decode:
        out.append(_row("Llama-2-7B decode step, batch 1 / weight-bandwidth bound", None, None, 1.0, "x", "",
                        "pending", rate=False, note=decode["pending"]))
    else:
        bound_ns = decode["streamed_bytes"] / h200.device.hbm.bandwidth_gb_per_s
        step = sum(decode["decode_ns"]) / len(decode["decode_ns"])
        out.append(_row("Llama-2-7B decode step, batch 1 (h200) / weight-bandwidth bound", None, step / bound_ns,
                        1.0, "x", "", "issue 19 target: 1.1x-2x", rate=False,
                        note=f"{step / 1e6:.3f} ms per token against {bound_ns / 1e6:.3f} ms"))
    e2e_row = rows["h100_llama2_7b_e2e"]
    e2e = _child("e2e", "h100", fitted)
    if "pending" in e2e:
        out.append(_row(e2e_row["quantity"], e2e_row["value"], None, None, "ms", "", "pending",
                        rate=False, note=e2e["pending"]))
    else:
        h100 = described("h100", fitted)
        total = e2e["prefill_ns"] + sum(e2e["decode_ns"])
        bound = 20 * e2e["streamed_bytes"] / h100.device.hbm.bandwidth_gb_per_s
        out.append(_row(e2e_row["quantity"] + " (h100)", e2e_row["value"], total / 1e6, bound / 1e6, "ms", "",
                        "h100_llama2_7b_e2e", rate=False))
    return out


def _fmt(x, unit):
    if x is None:
        return "-"
    return f"{x:.3f}" if unit in ("TB/s", "x", "ratio") else f"{x:.1f}"


def markdown(result: dict) -> str:
    lines = ["| quantity | published | projected | error | fitted on | checked on |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        err = "-" if r["error"] is None else f"{r['error']:+.1%}"
        checked = r["checked_on"] or "-"
        if r["note"]:
            checked += f" ({r['note']})"
        lines.append(f"| {r['quantity']} [{r['unit']}] | {_fmt(r['published'], r['unit'])} | "
                     f"{_fmt(r['projected'], r['unit'])} | {err} | {r['fitted_on'] or '-'} | {checked} |")
    fits = ", ".join(f"`{FITS[k][0]}` `{FITS[k][1]}` = {v}" for k, v in result["fitted"].items())
    lines += ["", f"Fitted values: {fits}."]
    return "\n".join(lines)


def write_docs(result: dict) -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n{markdown(result)}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the fitted values and every row to this file")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/hardware.md")
    parser.add_argument("--no-models", action="store_true", help="skip the rows that run models through torch")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(args.child)
        return 0
    result = evaluate(with_models=not args.no_models)
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.write_docs:
        write_docs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
