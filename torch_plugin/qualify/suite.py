"""Qualification suites as data: ``qualification/suites/*.toml`` parsed into frozen ``Workload``s.

A suite file has an optional ``[suite]`` table (``name``: default the file's stem, which also
names its baseline folder ``qualification/baselines/<name>/``; ``description``), an optional
``[thresholds]`` table (metric name -> the relative change the regression gate tolerates,
default ``DEFAULT_THRESHOLD``) and one ``[[workload]]`` table per workload. Every field a
workload can carry is in ``FIELDS``: its default (``REQUIRED`` where it has none) and what it
means. Validation happens here, before anything runs; an error names the file, the workload and
the field (``SuiteError``). Nothing here imports torch.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_THRESHOLD = 0.01   # 1%: projected numbers are deterministic for a given tree
REQUIRED = object()
PRECISIONS = ("float32", "bfloat16", "float16")
AUTOCASTS = ("none", "bfloat16", "float16")
TASKS = ("inference", "train")
EXECUTIONS = ("eager", "compile")
FIDELITIES = ("kernel", "tile")
MODES = ("functional", "projection")
FALLBACKS = ("forbid", "warn", "allow")
DISTRIBUTIONS = {"zoo": "the zoo spec's own batch drawn from the seed (floats standard normal, "
                        "integers uniform over the spec's range), at the spec's shapes",
                 "uniform_tokens": "token ids uniform over [low, high) (default [0, vocab_size)) from the seed"}
COMPILE_OPTIONS = ("mode", "fullgraph", "dynamic", "options")
# "default" is the hardware description's own default_mode; any other name must be one of its
# named modes ([device.power.modes.NAME]): the device checks it when it powers on (EMU_POWER_MODE).
DEFAULT_POWER_MODE = "default"
METRICS = ("device_time_s", "end_to_end_time_s", "samples_per_s", "tokens_per_s", "prefill_time_s",
           "decode_time_per_token_s", "peak_memory_bytes", "energy_j", "average_power_w", "peak_power_w")

# name -> (default, meaning). The artifact records every one, resolved.
FIELDS: dict[str, tuple] = {
    "name": (REQUIRED, "the workload's name: letters, digits, '-', '_', '.'; names its artifact file"),
    "model": (REQUIRED, "a zoo model ('zoo:NAME' or a bare zoo name) or a transformers causal LM "
                        "('transformers:MODEL_TYPE' with model_config, or the shortcut 'llama-3-8b')"),
    "model_config": ({}, "transformers config overrides (transformers models only)"),
    "task": (REQUIRED, "'inference' (forward; causal LMs: prefill then decode) or 'train' (forward, "
                       "backward and one AdamW step)"),
    "input": ({}, "{distribution, seed, low, high}: the input distribution (see DISTRIBUTIONS; default "
                  "'zoo' for zoo models, 'uniform_tokens' for transformers ones) and its seed (default 0; "
                  "it also seeds the weights)"),
    "precision": ("float32", "the parameters' dtype: " + ", ".join(PRECISIONS)),
    "autocast": ("none", "torch.autocast('emu', dtype) around the step: " + ", ".join(AUTOCASTS)),
    "batch": (None, "samples per step (transformers models; a zoo model's batch is its spec's, and a "
                    "value here must equal it)"),
    "concurrency": (1, "concurrent request streams; 1 (one stream of batched steps) is what the runner models"),
    "prefill_tokens": (None, "sequence length: prompt tokens, or the training sequence (transformers models)"),
    "decode_tokens": (0, "generated tokens per inference step, fed back greedily with the KV cache "
                         "(transformers causal LMs)"),
    "execution": ("eager", "'eager' or 'compile' (torch.compile(backend='emu'))"),
    "compile_options": ({}, "torch.compile keyword arguments: " + ", ".join(COMPILE_OPTIONS) + " (compile only)"),
    "warmup": (1, "steps run before the measurement window (compilation happens here)"),
    "iterations": (3, "steps in the measurement window; metrics are per step"),
    "preset": (None, "hardware preset (EMU_PRESET); default 'default' unless hardware is given"),
    "hardware": (None, "path of a TOML hardware description (EMU_CONFIG), relative to the suite file"),
    "power_mode": (DEFAULT_POWER_MODE, "the hardware's power mode (EMU_POWER_MODE): 'default' (the "
                                         "description's default_mode) or one of its [device.power.modes] names"),
    "fidelity": ("kernel", "timing fidelity (EMU_FIDELITY): " + ", ".join(FIDELITIES)),
    "mode": ("functional", "EMU_MODE: 'functional' computes values, 'projection' only times them"),
    "fallback": ("forbid", "EMU_HOST_FALLBACK: 'forbid' (a qualified result), 'warn' or 'allow' (unqualified)"),
    "thresholds": ({}, "metric -> relative change the gate tolerates for this workload (over the suite's)"),
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SuiteError(ValueError):
    """A suite file that cannot run: names the file, the workload and the field."""

    def __init__(self, path, workload, field_name, message):
        self.path, self.workload, self.field = str(path), workload, field_name
        where = f"{path}"
        if workload is not None:
            where += f": workload {workload!r}"
        if field_name is not None:
            where += f": field {field_name!r}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    task: str
    model_config: dict = field(default_factory=dict)
    input: dict = field(default_factory=dict)
    precision: str = "float32"
    autocast: str = "none"
    batch: int | None = None
    concurrency: int = 1
    prefill_tokens: int | None = None
    decode_tokens: int = 0
    execution: str = "eager"
    compile_options: dict = field(default_factory=dict)
    warmup: int = 1
    iterations: int = 3
    preset: str | None = None
    hardware: str | None = None
    power_mode: str = "default"
    fidelity: str = "kernel"
    mode: str = "functional"
    fallback: str = "forbid"
    thresholds: dict = field(default_factory=dict)

    @property
    def model_kind(self) -> str:
        """"zoo" or "transformers"."""
        return "transformers" if self.model.startswith("transformers:") or self.model in SHORTCUT_MODELS else "zoo"

    @property
    def zoo_name(self) -> str:
        return self.model.removeprefix("zoo:")

    @property
    def qualified(self) -> bool:
        return self.fallback == "forbid"

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in FIELDS}


@dataclass(frozen=True)
class Suite:
    name: str
    path: str
    description: str
    thresholds: dict
    workloads: tuple

    def threshold(self, workload: Workload, metric: str) -> float:
        return workload.thresholds.get(metric, self.thresholds.get(metric, DEFAULT_THRESHOLD))


SHORTCUT_MODELS = ("llama-3-8b", "llama-3-70b")   # torch_plugin/project.py's SHORTCUTS


def load_suite(path, zoo_names=None) -> Suite:
    """Parses and validates a suite file. ``zoo_names``: the zoo's models (checked when given)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SuiteError(path, None, None, "no such suite file") from None
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(path, None, None, f"not valid TOML: {err}") from None
    unknown = set(data) - {"suite", "thresholds", "workload"}
    if unknown:
        raise SuiteError(path, None, sorted(unknown)[0], "unknown top-level key (expected [suite], [thresholds], "
                                                         "[[workload]])")
    head = data.get("suite", {})
    if not isinstance(head, dict) or set(head) - {"name", "description"}:
        raise SuiteError(path, None, "suite", "[suite] takes name and description only")
    name = head.get("name", path.stem)
    if not isinstance(name, str) or not _NAME.match(name):
        raise SuiteError(path, None, "suite.name", f"expected a name of letters, digits, '-', '_', '.'; got {name!r}")
    thresholds = _thresholds(path, None, "thresholds", data.get("thresholds", {}))
    rows = data.get("workload")
    if not isinstance(rows, list) or not rows:
        raise SuiteError(path, None, "workload", "a suite needs at least one [[workload]] table")
    workloads, seen = [], set()
    for index, row in enumerate(rows):
        workload = _workload(path, index, row, zoo_names)
        if workload.name in seen:
            raise SuiteError(path, workload.name, "name", "two workloads have this name")
        seen.add(workload.name)
        workloads.append(workload)
    return Suite(name, str(path), str(head.get("description", "")), thresholds, tuple(workloads))


def _workload(path: Path, index: int, row, zoo_names) -> Workload:
    if not isinstance(row, dict):
        raise SuiteError(path, f"#{index + 1}", None, "a [[workload]] entry must be a table")
    label = row.get("name") if isinstance(row.get("name"), str) else f"#{index + 1}"
    fail = lambda field_name, message: SuiteError(path, label, field_name, message)  # noqa: E731
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise fail(unknown[0], f"unknown field (fields: {', '.join(FIELDS)})")
    values = {}
    for name, (default, _) in FIELDS.items():
        if name in row:
            values[name] = row[name]
        elif default is REQUIRED:
            raise fail(name, "required")
        else:
            values[name] = dict(default) if isinstance(default, dict) else default
    if not _NAME.match(str(values["name"])):
        raise fail("name", f"expected letters, digits, '-', '_', '.'; got {values['name']!r}")
    _typed(fail, values, "model", str)
    for name, choices in (("task", TASKS), ("precision", PRECISIONS), ("autocast", AUTOCASTS),
                          ("execution", EXECUTIONS), ("fidelity", FIDELITIES), ("mode", MODES),
                          ("fallback", FALLBACKS)):
        if values[name] not in choices:
            raise fail(name, f"expected one of {', '.join(choices)}; got {values[name]!r}")
    _typed(fail, values, "power_mode", str)
    if not _NAME.match(values["power_mode"]):
        raise fail("power_mode", f"expected a power mode name (letters, digits, '-', '_', '.'); "
                                 f"got {values['power_mode']!r}")
    for name, low in (("warmup", 0), ("iterations", 1), ("concurrency", 1), ("decode_tokens", 0)):
        _int(fail, values, name, low)
    for name in ("batch", "prefill_tokens"):
        if values[name] is not None:
            _int(fail, values, name, 1)
    if values["concurrency"] != 1:
        raise fail("concurrency", f"{values['concurrency']}: the runner models one stream of batched steps; "
                                  "concurrent request streams are not modelled (raise batch instead)")
    for name in ("model_config", "input", "compile_options", "thresholds"):
        _typed(fail, values, name, dict)
    values["thresholds"] = _thresholds(path, label, "thresholds", values["thresholds"])
    model = values["model"]
    kind = "transformers" if model.startswith("transformers:") or model in SHORTCUT_MODELS else "zoo"
    if kind == "zoo":
        zoo = model.removeprefix("zoo:")
        if zoo_names is not None and zoo not in zoo_names:
            raise fail("model", f"{model!r} is not a zoo model ({', '.join(sorted(zoo_names))}), 'transformers:TYPE' "
                                f"or a shortcut ({', '.join(SHORTCUT_MODELS)})")
        for name in ("model_config", "prefill_tokens"):
            if values[name]:
                raise fail(name, "transformers models only (a zoo model's shapes are its spec's)")
        if values["decode_tokens"]:
            raise fail("decode_tokens", "transformers causal LMs only (a zoo model's inference is its forward)")
    else:
        if values["prefill_tokens"] is None:
            raise fail("prefill_tokens", "required for a transformers model (the sequence length)")
        if values["batch"] is None:
            values["batch"] = 1
        if values["task"] == "train" and values["decode_tokens"]:
            raise fail("decode_tokens", "a train step decodes nothing")
    values["input"] = _input(fail, kind, values["input"])
    if values["execution"] == "eager" and values["compile_options"]:
        raise fail("compile_options", "compile options need execution = 'compile'")
    bad = sorted(set(values["compile_options"]) - set(COMPILE_OPTIONS))
    if bad:
        raise fail("compile_options", f"unknown option {bad[0]!r} (torch.compile takes {', '.join(COMPILE_OPTIONS)})")
    if values["preset"] is not None and values["hardware"] is not None:
        raise fail("hardware", "give a preset or a hardware description file, not both")
    if values["hardware"] is not None:
        _typed(fail, values, "hardware", str)
        hardware = (path.parent / values["hardware"]).resolve()
        if not hardware.is_file():
            raise fail("hardware", f"no such file: {hardware}")
        values["hardware"] = str(hardware)
    elif values["preset"] is None:
        values["preset"] = "default"
    else:
        _typed(fail, values, "preset", str)
    return Workload(**values)


def _input(fail, kind: str, spec: dict) -> dict:
    unknown = sorted(set(spec) - {"distribution", "seed", "low", "high"})
    if unknown:
        raise fail("input", f"unknown key {unknown[0]!r} (distribution, seed, low, high)")
    out = {"distribution": spec.get("distribution", "zoo" if kind == "zoo" else "uniform_tokens"),
           "seed": spec.get("seed", 0)}
    if out["distribution"] not in DISTRIBUTIONS:
        raise fail("input", f"distribution {out['distribution']!r}: expected one of {', '.join(DISTRIBUTIONS)}")
    want = "zoo" if kind == "zoo" else "uniform_tokens"
    if out["distribution"] != want:
        raise fail("input", f"distribution {out['distribution']!r} does not apply to a {kind} model (use {want!r})")
    if not isinstance(out["seed"], int) or isinstance(out["seed"], bool) or out["seed"] < 0:
        raise fail("input", f"seed: expected an integer >= 0; got {out['seed']!r}")
    if out["distribution"] == "uniform_tokens":
        for key in ("low", "high"):
            if key in spec:
                if not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 0:
                    raise fail("input", f"{key}: expected an integer >= 0; got {spec[key]!r}")
                out[key] = spec[key]
        if "low" in out and "high" in out and out["low"] >= out["high"]:
            raise fail("input", f"low ({out['low']}) must be below high ({out['high']})")
    elif "low" in spec or "high" in spec:
        raise fail("input", "low/high belong to the 'uniform_tokens' distribution")
    return out


def _thresholds(path, label, field_name, table) -> dict:
    if not isinstance(table, dict):
        raise SuiteError(path, label, field_name, f"expected a table of metric = fraction; got {table!r}")
    for metric, value in table.items():
        if metric not in METRICS:
            raise SuiteError(path, label, f"{field_name}.{metric}", f"unknown metric (metrics: {', '.join(METRICS)})")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 10:
            raise SuiteError(path, label, f"{field_name}.{metric}",
                             f"expected a relative change such as 0.01 (1%); got {value!r}")
    return {metric: float(value) for metric, value in table.items()}


def _typed(fail, values, name, kind) -> None:
    if not isinstance(values[name], kind):
        raise fail(name, f"expected a {'table' if kind is dict else kind.__name__}; got {values[name]!r}")


def _int(fail, values, name, low) -> None:
    value = values[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise fail(name, f"expected an integer >= {low}; got {value!r}")
