"""One workload, measured, in a process of its own: ``python -m torch_plugin.qualify.worker
WORKLOAD.json ARTIFACT.json`` (the runner starts it with the workload's EMU_* environment, which
the device reads when it powers on, so presets, fidelity and modes never leak between workloads).

The step (inference or an AdamW training step, eager or compiled, under autocast or not) runs
``warmup`` times, then ``iterations`` times inside ``torch.emu.telemetry()`` and
``torch.emu.profile()``: the projected metrics are the profiler's modelled times per step, the
op paths telemetry's counts, the peak memory the allocator's. Wall time is the emulation's and
is kept in ``emulation``, apart from the projected numbers.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

import runtime
import torch_plugin  # noqa: F401  (registers emu)
from torch_plugin.qualify.suite import Workload

FORMAT = "seed-qualification/1"
ROOT = Path(__file__).resolve().parents[2]
# Where the profiler report may carry energy (issue 21's power part): report key -> metric.
ENERGY_KEYS = {"energy_j": "energy_j", "projected_energy_j": "energy_j",
               "average_power_w": "average_power_w", "projected_average_power_w": "average_power_w",
               "peak_power_w": "peak_power_w", "projected_peak_power_w": "peak_power_w"}
ENERGY_METRICS = ("energy_j", "average_power_w", "peak_power_w")


class WorkloadError(RuntimeError):
    """The workload cannot run as declared (a field that does not fit the model, say)."""


def build(workload: Workload):
    """(model on emu, inputs on emu as a dict, kind): kind "zoo" (with its spec) or "causal_lm"."""
    dtype = getattr(torch, workload.precision)
    seed = workload.input["seed"]
    projection = workload.mode == "projection"
    if workload.model_kind == "zoo":
        from torch_plugin import zoo
        from torch_plugin.zoo import harness
        spec = zoo.MODELS[workload.zoo_name]
        if projection:
            with torch.device("meta"):
                model = spec.build(seed)
            model = model.to(dtype).to_empty(device="emu")
        else:
            model = spec.build(seed).to(dtype).to("emu")
        batch = {k: (v.to(dtype) if v.is_floating_point() else v) if isinstance(v, torch.Tensor) else v
                 for k, v in spec.batch(seed).items()}
        samples = next(v for v in batch.values() if isinstance(v, torch.Tensor)).shape[0]
        if workload.batch is not None and workload.batch != samples:
            raise WorkloadError(f"workload {workload.name!r}: field 'batch': zoo model {workload.zoo_name!r} runs "
                                f"its spec's batch of {samples}, not {workload.batch}")
        return model, harness.to_device(batch, "emu"), ("zoo", spec)
    from transformers import AutoModelForCausalLM
    from torch_plugin.project import transformers_config
    config = transformers_config(workload.model.removeprefix("transformers:"), dict(workload.model_config))
    if projection:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model = model.to_empty(device="emu")
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model = model.to("emu")
    low = workload.input.get("low", 0)
    high = workload.input.get("high", config.vocab_size)
    if high > config.vocab_size:
        raise WorkloadError(f"workload {workload.name!r}: field 'input': high {high} is past the vocabulary "
                            f"({config.vocab_size})")
    ids = torch.randint(low, high, (workload.batch, workload.prefill_tokens),
                        generator=torch.Generator().manual_seed(seed))
    return model, {"input_ids": ids.to("emu")}, ("causal_lm", None)


def make_step(workload: Workload, model, inputs: dict, kind):
    """(step function, phase marks): one call is one measured step. Causal-LM inference with
    decode tokens notes the modelled host clock after its prefill and after its decode."""
    import contextlib
    kind, spec = kind
    options = dict(workload.compile_options)
    forward = torch.compile(model, backend="emu", **options) if workload.execution == "compile" else model
    autocast = (contextlib.nullcontext if workload.autocast == "none"
                else lambda: torch.autocast("emu", dtype=getattr(torch, workload.autocast)))
    marks: list[tuple[float, float, float]] = []   # (start, prefill end, decode end) host ns per step
    if workload.task == "train":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr if spec else 1e-4, foreach=True)
        loss_of = ((lambda: spec.loss(forward, inputs)) if kind == "zoo"
                   else (lambda: forward(input_ids=inputs["input_ids"], labels=inputs["input_ids"]).loss))

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_of()
            loss.backward()
            optimizer.step()
        return step, marks
    model.eval()
    if kind == "zoo":
        def step():
            with torch.no_grad(), autocast():
                spec.output(forward, inputs)
        return step, marks
    ids, decode = inputs["input_ids"], workload.decode_tokens

    def step():
        with torch.no_grad(), autocast():
            if not decode:
                forward(input_ids=ids, logits_to_keep=1)
                return
            start = _host_ns()
            out = forward(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache, next_ids = out.past_key_values, out.logits[:, -1:].argmax(-1)   # stays on the device
            del out
            prefilled = _host_ns()
            for _ in range(decode):
                out = forward(input_ids=next_ids, use_cache=True, past_key_values=cache)
                next_ids = out.logits[:, -1:].argmax(-1)
                del out
            marks.append((start, prefilled, _host_ns()))
    return step, marks


def _host_ns() -> float:
    torch.emu.synchronize()
    return runtime.get_runtime().host_time_ns()


def measure(workload: Workload, progress: bool = True) -> dict:
    """Runs the workload in this process (its EMU_* environment already set) and returns its
    artifact without the suite's fields."""
    wall0 = time.perf_counter()
    torch.manual_seed(workload.input["seed"])
    model, inputs, kind = build(workload)
    torch.emu.manual_seed(workload.input["seed"])
    step, marks = make_step(workload, model, inputs, kind)
    built = time.perf_counter()
    for _ in range(workload.warmup):
        step()
    torch.emu.synchronize()
    warm = time.perf_counter()
    marks.clear()
    torch.emu.reset_peak_memory_stats()
    before = _last_traced_seq()
    bar = progress_bar(workload.iterations, f"  {workload.name} window", "step", progress, leave=False)
    with torch.emu.telemetry() as telemetry, torch.emu.profile() as prof:
        for _ in range(workload.iterations):
            step()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    report = prof.report()
    measured = time.perf_counter()
    details = report.as_dict()
    missing = report._details.get("missing_commands")
    if missing:
        raise WorkloadError(f"workload {workload.name!r}: {missing} commands have no "
                            "trace record (raise EMU_TRACE_ENTRIES or shorten the measurement window): its device "
                            "time would be undercounted")
    unseen = _unprofiled_commands(before, prof)
    if unseen:
        # Device work the profiler did not see would publish a device time that is too small.
        kernels = ", ".join(f"{k} x{n}" for k, n in sorted(unseen.items(), key=lambda kv: -kv[1])[:6])
        raise WorkloadError(f"workload {workload.name!r}: {sum(unseen.values())} commands ran on the device in the "
                            f"measurement window that torch.emu.profile() did not attribute ({kernels}): they "
                            "were submitted by a path the profiler does not follow (a compiled program's replay?), "
                            "so the projected times would undercount them")
    n = workload.iterations
    samples, tokens = _per_step(workload, inputs, kind[0])
    e2e = report.projected_total_time_s / n
    metrics = {"device_time_s": report.projected_device_time_s / n, "end_to_end_time_s": e2e,
               "samples_per_s": samples / e2e, "peak_memory_bytes": torch.emu.max_memory_allocated()}
    if tokens:
        metrics["tokens_per_s"] = tokens / e2e
    if marks:
        metrics["prefill_time_s"] = sum(p - s for s, p, _ in marks) / len(marks) / 1e9
        metrics["decode_time_per_token_s"] = (sum(d - p for _, p, d in marks) / len(marks) / 1e9
                                              / workload.decode_tokens)
    omitted = {}
    for key, metric in ENERGY_KEYS.items():
        value = details.get(key, getattr(report, key, None))
        if isinstance(value, (int, float)):
            metrics[metric] = value / n if metric == "energy_j" else value
    for metric in ENERGY_METRICS:
        if metric not in metrics:
            omitted[metric] = ("the profiler report of this tree has no such field (energy and power come with "
                               "issue 21's power part)")
    paths = telemetry.as_dict()
    counts = {path: sum(ops.values()) for path, ops in paths["paths"].items()}
    fallback = max(counts.get("host_fallback", 0), report.host_fallback_count)
    return {
        "derived": {"samples_per_step": samples, "tokens_per_step": tokens,
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "verdict": report.verdict},
        "provenance": provenance(),
        "op_paths": {"counts": counts, "fallback_count": fallback,
                     "fallback_ops": paths["paths"].get("host_fallback", {}),
                     "rejected_ops": paths["paths"].get("rejection", {}),
                     "compiled": paths["compiled"], "host_synchronisations": paths["syncs"]},
        "metrics": metrics,
        "omitted_metrics": omitted,
        "emulation": {"wall_time_s": measured - wall0, "build_wall_s": built - wall0,
                      "warmup_wall_s": warm - built, "window_wall_s": measured - warm,
                      "window_wall_per_step_s": (measured - warm) / n},
    }


def _last_traced_seq() -> int:
    rt = runtime.get_runtime()
    return max((e.seq for d in range(rt.device_count) for e in rt.command_trace(d)[-1:]), default=0)


def _unprofiled_commands(before: int, prof) -> dict:
    """{kernel: commands} the firmware traced after seq ``before`` that the profiler has no record of
    (an independent check of the profiler's coverage: the trace is the device's own account)."""
    rt = runtime.get_runtime()
    profiled = {e.seq for e in prof._entries}
    unseen: dict[str, set] = {}
    for device in range(rt.device_count):
        for entry in rt.command_trace(device, before + 1):
            if entry.seq > before and entry.seq not in profiled:
                unseen.setdefault(entry.name, set()).add(entry.seq)
    return {name: len(seqs) for name, seqs in unseen.items()}


def _per_step(workload: Workload, inputs: dict, kind: str) -> tuple[int, int]:
    """(samples, tokens) one step processes: a token model's tokens are its id tensor's elements
    (plus the generated ones)."""
    first = next(v for v in inputs.values() if isinstance(v, torch.Tensor))
    samples = first.shape[0]
    ids = inputs.get("input_ids", inputs.get("tokens"))
    tokens = 0 if ids is None else ids.numel()
    if kind == "causal_lm" and workload.task == "inference":
        tokens += samples * workload.decode_tokens
    return samples, tokens


def provenance() -> dict:
    """What produced the numbers: software versions, the tree, the firmware, the hardware."""
    from importlib.metadata import PackageNotFoundError, version
    rt = runtime.get_runtime()

    def package(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None
    fw = tuple(rt.driver.firmware_versions[0])
    description = torch.emu.get_hardware_description()
    settings = rt.settings
    hardware = {"name": rt.config.name, "device": rt.config.device.name, "num_devices": rt.config.num_devices,
                "preset": None if settings.config_path else settings.preset, "file": settings.config_path,
                "fidelity": rt.config.fidelity,
                "content_sha256": hashlib.sha256(json.dumps(description, sort_keys=True, default=str)
                                                 .encode()).hexdigest()}
    if settings.config_path:
        hardware["file_sha256"] = hashlib.sha256(Path(settings.config_path).read_bytes()).hexdigest()
    return {"torch": torch.__version__, "python": sys.version.split()[0],
            "plugin": {"package": "seed-emu", "version": package("seed-emu"), **git_state()},
            # The driver ships in the plugin's package; what tells drivers apart is the firmware
            # ABI major version it accepts (driver/firmware_loader.py), which this firmware passed.
            "driver": {"version": package("seed-emu"), "firmware_abi_major": fw[0]},
            "firmware": {"version": ".".join(map(str, fw)), "abi": f"{fw[0]}.{fw[1]}"},
            "transformers": package("transformers"), "numpy": package("numpy"),
            "execution_mode": "projection" if torch.emu.is_projection_mode() else "functional",
            "hardware": hardware}


def git_state() -> dict:
    """The tree's commit and whether tracked files differ from it (None where git is absent)."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30,
                                  check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit.strip() if commit else None,
            "git_dirty": None if status is None else bool(status.strip())}


def progress_bar(total: int, desc: str, unit: str, enabled: bool, leave: bool = True):
    """A tqdm bar on stderr (the runner's over workloads, a worker's over a window's steps); None
    when disabled or without tqdm."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m torch_plugin.qualify.worker WORKLOAD.json ARTIFACT.json", file=sys.stderr)
        return 2
    workload = Workload(**json.loads(Path(argv[0]).read_text()))
    try:
        artifact = measure(workload, progress=sys.stderr.isatty())
    except WorkloadError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    Path(argv[1]).write_text(json.dumps(artifact, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
