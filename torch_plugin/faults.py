"""``torch.emu.faults``: inject hardware faults, read the error log, run fault campaigns.

    h = torch.emu.faults.inject("dma_error", device=0, after_commands=3)
    h.cancel()                      # or torch.emu.faults.clear() for all
    torch.emu.faults.log(0)         # every error record; the first one in full
    torch.emu.get_device_health(0)  # ECC counters, resets, retired pages, throttle state

Kinds and triggers are those of emulator/faults.py (docs/faults.md); ``tensor=t`` is the
address range of ``t``'s storage. The same faults can be armed without touching a script,
through ``EMU_FAULTS`` or a TOML ``[faults]`` section (runtime/settings.py).

Campaigns (``campaign()`` or ``python -m torch_plugin.faults campaign ...``) inject one fault
per run into a workload, classify what happened (masked, detected with its scope, silent data
corruption, hang caught by the watchdog), reset the device and re-run clean after each. Left
out: several faults per run, and workloads that span several devices.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import runpy
import sys
import time
from dataclasses import asdict, dataclass, field

import torch

import runtime
from torch_plugin.errors import raises_torch_errors

KINDS = tuple(runtime.FAULT_KINDS)
TRIGGERS = tuple(runtime.FAULT_TRIGGERS) + ("tensor",)


def _index(device) -> int:
    from torch_plugin.device_module import _check_index, _index as index_of
    return _check_index(index_of(device))


@dataclass
class FaultHandle:
    """An armed fault; ``cancel()`` disarms it (True if it was still armed)."""
    kind: str
    device: int
    handle: int

    @raises_torch_errors
    def cancel(self) -> bool:
        return runtime.get_runtime().cancel_fault(self.device, self.handle)


@raises_torch_errors
def inject(kind: str, device=0, **trigger) -> FaultHandle:
    """Arms one fault of ``kind`` on ``device``. Triggers: ``at_time_ns``, ``after_commands``
    (optionally with ``engine``), ``tensor`` (a device tensor: its storage's address range) or
    ``address_range=(lo, hi)``, ``probability`` with ``seed``; one-shot unless
    ``persistent=True``. ``thermal_throttle`` takes ``factor`` (clock multiplier, default 0.5).
    Unknown kinds or triggers raise ValueError listing the valid ones; nothing is armed then."""
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    unknown = sorted(set(trigger) - set(TRIGGERS) - {"factor"})
    if unknown:
        raise ValueError(f"unknown trigger argument(s) {', '.join(unknown)}; valid ones: "
                         f"{', '.join(TRIGGERS + ('factor',))}")
    tensor = trigger.pop("tensor", None)
    if tensor is not None:
        if "address_range" in trigger:
            raise ValueError("give tensor= or address_range=, not both")
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "emu":
            raise ValueError(f"tensor= needs a tensor on an emu device, got {type(tensor).__name__}"
                             + (f" on {tensor.device}" if isinstance(tensor, torch.Tensor) else ""))
        storage = tensor.untyped_storage()
        start = storage.data_ptr()
        trigger["address_range"] = (start, start + max(storage.nbytes(), 1))
        if device == 0 and tensor.device.index not in (None, 0):
            device = tensor.device.index
    index = _index(device)
    try:
        handle = runtime.get_runtime().inject_fault(index, kind, **trigger)
    except runtime.InvalidValueError as err:
        raise ValueError(str(err)) from err
    return FaultHandle(kind, index, handle)


@raises_torch_errors
def clear(device=None) -> None:
    """Disarms every fault (of one device, or of all) and restores the clock and the host link
    they changed; an error they already raised stays until ``reset_device``."""
    runtime.get_runtime().clear_faults(None if device is None else _index(device))


@raises_torch_errors
def log(device=0) -> dict:
    """The device's error log: ``errors`` (every error record as a dict: status, kind, scope,
    device, ring, correlation_id, unit (the engine), address, sim_time_ns, detail),
    ``first_error`` (the first one, in full) and ``events`` (every injected hardware event, an
    error or not: kind, device, engine, address, sim_time_ns, seq, handle)."""
    index = _index(device)
    data = runtime.get_runtime().error_log(index)
    errors = list(data["errors"])
    return {"device": index, "first_error": errors[0] if errors else None, "errors": errors,
            "events": list(data["events"])}


# -- campaigns ------------------------------------------------------------------------------
OUTCOMES = ("masked", "detected", "sdc", "hang")


@dataclass
class RunResult:
    run: int
    kind: str
    trigger: dict
    outcome: str          # masked | detected | sdc | hang
    scope: str | None     # the scope the error reported (detected, hang)
    error: str | None
    fired: bool
    clean_rerun_ok: bool


@dataclass
class CampaignResult:
    workload: str
    kinds: list
    runs: int
    seed: int
    results: list = field(default_factory=list)

    def counts(self) -> dict:
        table = {}
        for r in self.results:
            row = table.setdefault(r.kind, {o: 0 for o in OUTCOMES})
            row[r.outcome] += 1
        return table

    def summary(self) -> dict:
        """Per kind and outcome: count, fraction and its 95% Wilson interval."""
        out = {}
        for kind, row in self.counts().items():
            n = sum(row.values())
            out[kind] = {o: {"count": c, "fraction": c / n, "ci95": wilson(c, n)} for o, c in row.items()}
        return out

    def table(self) -> str:
        lines = [f"fault campaign: {self.workload}, {self.runs} runs, seed {self.seed}",
                 f"{'kind':<18}{'n':>4}  " + "  ".join(f"{o:>22}" for o in OUTCOMES)]
        for kind, row in self.summary().items():
            n = sum(v["count"] for v in row.values())
            cells = []
            for o in OUTCOMES:
                v = row[o]
                lo, hi = v["ci95"]
                cells.append(f"{v['count']:>3} {100 * v['fraction']:5.1f}% [{100 * lo:4.1f},{100 * hi:5.1f}]")
            lines.append(f"{kind:<18}{n:>4}  " + "  ".join(f"{c:>22}" for c in cells))
        scopes = {}
        for r in self.results:
            if r.outcome == "detected":
                scopes[r.scope] = scopes.get(r.scope, 0) + 1
        lines.append("detected by scope: " + (", ".join(f"{k}: {v}" for k, v in sorted(scopes.items())) or "none"))
        lines.append("intervals: 95% Wilson score; sdc = output differs from the golden run")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"workload": self.workload, "kinds": self.kinds, "runs": self.runs, "seed": self.seed,
                "summary": self.summary(), "results": [asdict(r) for r in self.results]}


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    if successes == 0:
        return (0.0, _wilson_upper(n, z))
    if successes == n:
        return (1.0 - _wilson_upper(n, z), 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _wilson_upper(n: int, z: float) -> float:
    """The Wilson upper bound for 0 successes in n trials, z^2 / (n + z^2), in closed form."""
    return z * z / (n + z * z)


def _zoo_workload(name: str):
    from torch_plugin.zoo import MODELS
    from torch_plugin.zoo.harness import to_device
    if name not in MODELS:
        raise ValueError(f"unknown workload {name!r}: a zoo model ({', '.join(MODELS)}) or a .py script "
                         f"defining workload()")
    spec = MODELS[name]
    cpu_model, batch = spec.build(0).eval(), spec.batch(0)

    def workload(device: str) -> torch.Tensor:
        model = cpu_model.to(device) if device == "cpu" else _copy_model(cpu_model, device)
        with torch.no_grad():
            out = spec.output(model, to_device(batch, device))
        return out.detach().float().cpu()
    return workload


def _copy_model(model, device):
    import copy
    return copy.deepcopy(model).to(device)


def _script_workload(path: str):
    namespace = runpy.run_path(path)
    fn = namespace.get("workload")
    if not callable(fn):
        raise ValueError(f"{path}: a campaign script must define workload(device) returning a tensor")
    return lambda device: fn(device).detach().cpu()


def _load_workload(workload):
    if callable(workload):
        return getattr(workload, "__name__", "workload"), workload
    if str(workload).endswith(".py"):
        return str(workload), _script_workload(str(workload))
    return str(workload), _zoo_workload(str(workload))


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
        return tqdm(total=total, desc="fault campaign", unit="run", file=sys.stderr)
    except ImportError:
        class Counter:
            def __init__(self):
                self.n = 0

            def update(self, k=1):
                self.n += k
                print(f"\rfault campaign: {self.n}/{total} runs", end="", file=sys.stderr, flush=True)

            def close(self):
                print(file=sys.stderr)
        return Counter()


# The commands each kind can hit, by the trace's command names (emulator/faults.py ELIGIBLE).
_COPY_NAMES = ("memcpy_h2d", "memcpy_d2h", "memcpy_p2p", "memcpy_d2d")
_HIT_BY = {"link_down": ("memcpy_h2d", "memcpy_d2h"), "link_flaky": ("memcpy_h2d", "memcpy_d2h"),
           "peer_link_error": ("memcpy_p2p",)}


def _eligible_counts(fn, device: str, kinds) -> dict:
    """For each kind, how many commands of one workload run it can hit (the range of the
    after_commands trigger), counted from the firmware trace of a clean run."""
    index = _device_index(device)
    rt = runtime.get_runtime()
    before = max((e.seq for e in rt.telemetry(index)["trace"]), default=0)
    fn(device)
    torch.emu.synchronize(index)
    names = [e.name for e in rt.telemetry(index)["trace"] if e.seq > before]
    if not names:
        raise RuntimeError("the fault campaign counts the workload's commands from the device trace: "
                           "it is empty (EMU_TRACE_ENTRIES=0?)")
    counts = {}
    for kind in kinds:
        if kind in _HIT_BY:
            n = sum(1 for name in names if name.startswith(_HIT_BY[kind]))
        elif kind == "engine_hang":
            n = sum(1 for name in names if not name.startswith(_COPY_NAMES))
        else:
            n = len(names)
        counts[kind] = n
    return counts


def _device_index(device: str) -> int:
    return torch.device(device).index or 0


def campaign(workload, kinds=None, runs: int = 20, seed: int = 0, device: str = "emu:0", progress: bool = True,
             out: str | None = None) -> CampaignResult:
    """Injects one fault per run into ``workload`` (a zoo model name, a ``.py`` script defining
    ``workload(device) -> tensor``, or such a callable) on ``device``, and classifies each outcome
    against a golden run: masked (output bit-identical), detected (an error with its scope), sdc
    (silent data corruption: no error, different output), hang (caught by the watchdog). After
    every run the device is reset and the workload re-run clean (``clean_rerun_ok``). The same
    seed gives the same result. ``out`` saves the JSON."""
    name, fn = _load_workload(workload)
    kinds = list(kinds) if kinds else list(KINDS)
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    index = _device_index(device)
    clear(index)
    golden = fn(device)
    eligible = _eligible_counts(fn, device, kinds)
    rng = random.Random(seed)
    result = CampaignResult(name, kinds, runs, seed)
    bar = _progress(runs, progress)
    try:
        for run in range(runs):
            kind = kinds[rng.randrange(len(kinds))]
            trigger = {"after_commands": rng.randrange(max(1, eligible[kind])), "seed": rng.randrange(1 << 30)}
            result.results.append(_one_run(run, fn, device, index, kind, trigger, golden))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        clear(index)
    if out:
        with open(out, "w") as f:
            json.dump(result.as_dict(), f, indent=1, default=str)
    return result


def _one_run(run, fn, device, index, kind, trigger, golden) -> RunResult:
    handle = inject(kind, device=index, **trigger)
    outcome, scope, error = "masked", None, None
    try:
        output = fn(device)
        torch.emu.synchronize(index)
        if not (output.shape == golden.shape and torch.equal(output, golden)):
            outcome = "sdc"
    except (torch.AcceleratorError, torch.OutOfMemoryError, RuntimeError) as err:
        code = getattr(err, "error_code", None)
        scope = getattr(err, "scope", None)
        hang_codes = (int(runtime.ErrorCode.ENGINE_HANG), int(runtime.ErrorCode.HEARTBEAT_LOST))
        outcome = "hang" if code in hang_codes else "detected"
        error = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    fired = not handle.cancel()
    clear(index)
    torch.emu.reset_device(index, reason=f"fault campaign run {run}")
    try:
        clean = fn(device)
        clean_ok = bool(clean.shape == golden.shape and torch.equal(clean, golden))
    except Exception:
        clean_ok = False
    return RunResult(run, kind, dict(trigger), outcome, scope, error, fired, clean_ok)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.faults", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("campaign", help="inject faults over a workload and classify the outcomes")
    c.add_argument("--workload", required=True, help="zoo model name or a .py script defining workload(device)")
    c.add_argument("--kinds", nargs="*", default=None, help=f"fault kinds (default: all): {' '.join(KINDS)}")
    c.add_argument("--runs", type=int, default=20)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--device", default="emu:0")
    c.add_argument("--out", default=None, help="write the results as JSON here")
    c.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    kinds = [k for item in (args.kinds or []) for k in item.split(",") if k] or None
    started = time.perf_counter()
    result = campaign(args.workload, kinds, args.runs, args.seed, args.device, not args.no_progress, args.out)
    print(result.table())
    print(f"({len(result.results)} runs in {time.perf_counter() - started:.1f} s wall"
          + (f"; JSON in {args.out})" if args.out else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
