"""``torch.emu``: the device module (the ``torch.cuda`` analogue)."""
from __future__ import annotations

import contextlib
import warnings

import torch

import runtime
from torch_plugin import _C
from torch_plugin._bridge import BRIDGE
from torch_plugin import errors as _errors
from torch_plugin.errors import EmuAcceleratorError, ProjectionModeError, raises_torch_errors, translate

_PRIVATEUSE1_TYPE = 20  # c10::DeviceType::PrivateUse1, what torch.Stream(device_type=...) takes


# -- discovery -------------------------------------------------------------
def is_available() -> bool:
    """True when the configured emulated system has at least one device."""
    try:
        return runtime.configured_device_count() > 0
    except runtime.EmuError as err:  # a broken configuration: say why
        warnings.warn(f"emu is not available: {err}", stacklevel=2)
        return False


def device_count() -> int:
    return BRIDGE.device_count()


def is_initialized() -> bool:
    return runtime.is_initialized()


@raises_torch_errors
def init() -> None:
    """Powers on the emulated system now (it otherwise starts on first use)."""
    if _in_bad_fork:
        raise runtime.InitializationError(_FORK_MESSAGE)
    runtime.get_runtime()


_lazy_init = init


def __getattr__(name: str):
    # torch.utils.checkpoint saves and restores a device's RNG state only when its module says
    # ``_initialized`` (torch.cuda's flag); without it, recomputed dropout drew new masks.
    if name == "_initialized":
        return runtime.is_initialized()
    if name == "faults":  # torch.emu.faults, imported on first use (python -m torch_plugin.faults runs it too)
        import torch_plugin.faults
        return torch_plugin.faults
    raise AttributeError(f"module 'torch.emu' has no attribute {name!r}")


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "emu":
            raise ValueError(f"expected an emu device, got {device}")
        return current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"invalid device {device!r}")


def _check_index(index: int) -> int:
    count = device_count()
    if not isinstance(index, int) or not 0 <= index < count:
        # An EmuAcceleratorError (a RuntimeError, like CUDA's invalid device ordinal) with code
        # INVALID_DEVICE, as errors.py documents; this used to be a bare RuntimeError.
        raise EmuAcceleratorError(f"invalid emu device index {index!r}: {count} emu devices exist "
                                  f"(emu:0..emu:{count - 1})", int(runtime.ErrorCode.INVALID_DEVICE),
                                  runtime.Scope.OPERATION.value)
    return index


def current_device() -> int:
    return _C._get_device()


def set_device(device) -> None:
    index = _index(device)
    if index >= 0:
        _C._set_device(_check_index(index))


class device:
    """Context manager that switches the current emu device."""

    def __init__(self, device):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        if self.index >= 0:
            _C._set_device(_check_index(self.index))
        return self

    def __exit__(self, *exc):
        _C._set_device(self.previous)
        return False


@raises_torch_errors
def get_device_properties(device=None):
    """The hardware description of an emu device (``emulator.config.DeviceConfig``)."""
    index = _check_index(_index(device))
    return runtime.get_runtime().properties(index)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


@raises_torch_errors
def get_device_capability(device=None) -> dict:
    """What the device can do, as a dict: ``supported_dtypes`` (the set
    ``torch.accelerator.get_device_capability`` reports: every dtype an emu tensor can hold, copy,
    convert and fill), ``compute_dtypes`` (those its arithmetic kernels take), ``amp_dtypes``
    (autocast's), and the fields of the device's hardware description, a unit's as
    "unit.field" (``"name"``, ``"clock_ghz"``, ``"cores"``, ``"hbm.capacity_bytes"``,
    ``"matrix_engine.rows"``, ...; units in the names)."""
    from torch_plugin import _dtypes
    index = _check_index(_index(device))
    capability = {}
    for key, value in runtime.hardware_description(runtime.get_runtime().config)["device"].items():
        if isinstance(value, dict):
            capability.update((f"{key}.{field}", v) for field, v in value.items())
        else:
            capability[key] = value
    capability.update(index=index, supported_dtypes=set(_dtypes.STORABLE), compute_dtypes=set(_dtypes.SUPPORTED),
                      amp_dtypes=set(get_amp_supported_dtype()))
    return capability


def get_hardware_description() -> dict:
    """The whole system description as nested dicts (units in the field names)."""
    return runtime.hardware_description(runtime.get_runtime().config)


@raises_torch_errors
def synchronize(device=None) -> None:
    runtime.get_runtime().device_synchronize(_check_index(_index(device)))


# -- streams and events ------------------------------------------------------
class Stream(torch.Stream):
    """An emu stream (a submission ring on the device)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if kwargs:  # torch.Stream(stream_id=..., device_index=..., device_type=...)
            return super().__new__(cls, **kwargs)
        index = _check_index(_index(device))
        with globals()["device"](index):
            return super().__new__(cls, device=torch.device("emu", index), priority=priority)


Event = torch.Event


def current_stream(device=None) -> Stream:
    index = _check_index(_index(device))
    return Stream(stream_id=_C._current_stream_id(index), device_index=index, device_type=_PRIVATEUSE1_TYPE)


def default_stream(device=None) -> Stream:
    index = _check_index(_index(device))
    return Stream(stream_id=0, device_index=index, device_type=_PRIVATEUSE1_TYPE)


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current on its device and, like torch.cuda.set_stream and
    torch.accelerator.set_stream, makes its device the current device."""
    if stream is None:
        return
    if current_device() != stream.device_index:
        _C._set_device(_check_index(stream.device_index))
    _C._set_current_stream(stream.device_index, stream.stream_id)


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    """Runs the block on stream ``s`` (and on its device, as torch.cuda.stream does); restores the
    previous device and the previous current streams of both devices on exit."""
    if s is None:
        yield
        return
    src_previous = current_stream()
    dst_previous = current_stream(s.device_index)
    set_stream(s)
    try:
        yield s
    finally:
        if src_previous.device_index != s.device_index:
            set_stream(dst_previous)
        set_stream(src_previous)


# -- memory ------------------------------------------------------------------
def _allocator(device):
    """The device's allocator, or None while it has no context: memory queries never power the
    system on (as torch.cuda.memory_allocated does not initialise CUDA)."""
    index = _check_index(_index(device))
    if not runtime.is_initialized() or not runtime.get_runtime().has_context(index):
        return None
    return runtime.get_runtime().device(index).allocator


def memory_stats(device=None) -> dict:
    allocator = _allocator(device)
    return {} if allocator is None else allocator.stats()


def _allocator_bytes(device, counter: str) -> int:
    """The allocator's ``counter`` (bytes) on the device; 0 while it has no context."""
    allocator = _allocator(device)
    return 0 if allocator is None else getattr(allocator, counter)


def memory_allocated(device=None) -> int:
    return _allocator_bytes(device, "allocated")


def max_memory_allocated(device=None) -> int:
    return _allocator_bytes(device, "peak_allocated")


def memory_reserved(device=None) -> int:
    return _allocator_bytes(device, "reserved")


def max_memory_reserved(device=None) -> int:
    return _allocator_bytes(device, "peak_reserved")


def reset_peak_memory_stats(device=None) -> None:
    allocator = _allocator(device)
    if allocator is not None:
        allocator.reset_peak()


def reset_accumulated_memory_stats(device=None) -> None:
    allocator = _allocator(device)
    if allocator is not None:
        allocator.reset_accumulated()


def memory_snapshot() -> list[dict]:
    """The caching allocator's segments and their blocks on every device that has a context, in
    torch.cuda.memory_snapshot()'s layout (address, total_size, stream, segment_type,
    allocated_size, active_size, requested_size, blocks with size, requested_size and state)."""
    if not runtime.is_initialized():
        return []
    rt = runtime.get_runtime()
    return [segment for index in range(rt.device_count) if rt.has_context(index)
            for segment in rt.memory_snapshot(index)]


@raises_torch_errors
def empty_cache() -> None:
    if runtime.is_initialized():
        rt = runtime.get_runtime()
        for index in range(rt.device_count):
            if rt.has_context(index):
                rt.empty_cache(index)


@raises_torch_errors
def mem_get_info(device=None) -> tuple[int, int]:
    return runtime.get_runtime().mem_get_info(_check_index(_index(device)))


# -- random numbers ------------------------------------------------------------
def default_generator(device=None) -> torch.Generator:
    return _C._default_generator(_check_index(_index(device)))


class _DefaultGenerators:
    def __getitem__(self, index: int) -> torch.Generator:
        return _C._default_generator(_check_index(index))

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


# -- processes: a forked child cannot use a device its parent initialised ----------------------
_FORK_MESSAGE = ("Cannot re-initialize emu in forked subprocess: the parent process had already initialised "
                 "the emu device, whose emulated system (its memory, simulation and threads) lives in the "
                 "parent. To use emu with multiprocessing, you must use the 'spawn' start method "
                 "(multiprocessing.get_context('spawn'), or torch.multiprocessing.set_start_method('spawn')), "
                 "or fork before the first device use")
_in_bad_fork = False


def _after_fork_in_child() -> None:
    """os.register_at_fork(after_in_child=...) (torch_plugin/__init__.py): a child forked after the
    parent powered the system on refuses every device use with _FORK_MESSAGE, as CUDA does."""
    global _in_bad_fork
    _in_bad_fork = runtime.refuse_in_forked_child(_FORK_MESSAGE)


def _is_in_bad_fork() -> bool:
    """True in a process forked after its parent initialised emu (torch.cuda's name)."""
    return _in_bad_fork


def manual_seed(seed: int) -> None:
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for gen in default_generators:
        gen.manual_seed(int(seed))


def seed() -> int:
    return default_generator().seed()


def seed_all() -> None:
    base = seed()
    for gen in default_generators:
        gen.manual_seed(base)


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device="emu") -> torch.Tensor:
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="emu") -> None:
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(states) -> None:
    for gen, state in zip(default_generators, states):
        gen.set_state(state)


# -- backend metadata (c10::BackendMeta; torch_plugin/csrc/backend_meta.cpp) ----------------------
def set_backend_meta(tensor: torch.Tensor, tags: dict) -> None:
    """Replaces the backend metadata of an emu tensor: named boolean tags ({} removes them).
    torch.save/torch.load (onto emu) and shallow copies (detach(), .data, nn.Parameter) keep
    them, each copy its own; new tensors (clone(), copy.deepcopy, .to(), op outputs) start
    without, as BackendMeta does on every PyTorch backend. Loading onto the CPU drops them."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"torch.emu.set_backend_meta: expected a Tensor, got {type(tensor).__name__}")
    if not isinstance(tags, dict):
        raise TypeError(f"torch.emu.set_backend_meta: tags must be a dict of str -> bool, got {type(tags).__name__}")
    for name, value in tags.items():
        if not isinstance(name, str) or not isinstance(value, bool):
            raise TypeError(f"torch.emu.set_backend_meta: tags must be a dict of str -> bool, got "
                            f"{name!r}: {value!r}")
    _C._set_backend_meta(tensor, tags)


def get_backend_meta(tensor: torch.Tensor) -> dict:
    """The backend metadata tags of an emu tensor ({name: bool}; {} when it has none)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"torch.emu.get_backend_meta: expected a Tensor, got {type(tensor).__name__}")
    return dict(_C._get_backend_meta(tensor))


# -- autocast, telemetry, recovery ---------------------------------------------
class _AmpDtypes(list):
    """The autocast dtypes of emu. torch.autocast only warns and disables itself for a dtype
    outside this list (torch/amp/autocast_mode.py asks ``dtype in get_amp_supported_dtype()``);
    emu makes that question raise, so ``torch.autocast("emu", dtype=torch.float64)`` is an error
    rather than a block that silently runs in float32 (docs/autocast.md)."""

    def __contains__(self, dtype) -> bool:
        if not list.__contains__(self, dtype):
            raise RuntimeError(f"torch.autocast(\"emu\"): dtype {dtype} is not supported; emu autocast "
                               f"supports {', '.join(map(str, self))}")
        return True


def get_amp_supported_dtype() -> list:
    return _AmpDtypes([torch.float16, torch.bfloat16])


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def op_stats() -> dict:
    """Counts of op instances by execution path since start or reset_op_stats(): {path: {op: n}} for
    "native", "composite", "decomposition", "host_fallback", "rejection", and "host_fallback_copies"
    (the device copies the host fallback made, not a path of their own)."""
    from torch_plugin.ops import registry
    return registry.op_stats()


def reset_op_stats() -> None:
    from torch_plugin.ops import registry
    registry.reset_op_stats()


def compile_stats() -> dict:
    """Counters of compiled execution (``torch.compile(backend="emu")``) since start or
    reset_compile_stats(): graphs compiled, recompiles, graph breaks, fused kernels and ops, ops
    run outside the device program, ... (see docs/compile.md)."""
    from torch_plugin.compile import stats
    return stats.compile_stats()


def reset_compile_stats() -> None:
    from torch_plugin.compile import stats
    stats.reset_compile_stats()


def host_fallback(policy: str):
    """``with torch.emu.host_fallback("forbid"):`` (or "allow", "warn") sets the host fallback policy
    for the block; blocks nest. Under "forbid" an op without a device path raises
    ``torch_plugin.HostFallbackError`` before anything runs. The policy is process-wide, so it
    covers backward on autograd's worker thread."""
    from torch_plugin.ops import registry
    return registry.host_fallback(policy)


def set_host_fallback(allowed: bool) -> None:
    """False forbids the host fallback (as ``host_fallback("forbid")``); True allows it again (with
    EMU_HOST_FALLBACK's "allow" or "warn", "warn" if that said "forbid")."""
    from torch_plugin.ops import registry
    registry.set_host_fallback(allowed)


def host_fallback_policy() -> str:
    """The host fallback policy in force now: "allow", "warn" or "forbid"."""
    from torch_plugin.ops import registry
    return registry.host_fallback_policy()


def telemetry():
    """``with torch.emu.telemetry() as t:`` records every op instance of the block (path, dtypes,
    shapes, device kernels), host synchronisations and host<->device copies; ``t.summary()`` is a
    table, ``t.as_dict()`` the data. See torch_plugin/telemetry.py."""
    from torch_plugin.telemetry import Telemetry
    return Telemetry()


def profile():
    """``with torch.emu.profile() as prof:`` profiles the block in projected (modelled) time:
    ``prof.report()`` (per-op rows, engine utilisation, verdict), ``prof.export_chrome_trace(path)``
    (Perfetto), ``prof.save_roofline(path)`` (PNG). See docs/profiling.md."""
    from torch_plugin.profile import Profile
    return Profile()


@raises_torch_errors
def device_telemetry(device=None) -> dict:
    """The device's own counters: kernel statistics, trace, engine busy time, modelled clocks."""
    return runtime.get_runtime().telemetry(_check_index(_index(device)))


@raises_torch_errors
def reset_device(device=None, reason: str = "user request") -> dict:
    """The one recovery entry point (safe to call twice): dumps the device's state to the log,
    aborts its in-flight work (every pending fence completes), resets firmware and engines, retires
    a page that had an uncorrectable ECC error, and clears every fault. Afterwards a tensor that a
    skipped or faulted command should have written raises when used, and after a device-scope
    fault so does every tensor that lived on the device (see docs/faults.md). Returns the dump."""
    return runtime.get_runtime().reset_device(_check_index(_index(device)), reason)


recover = reset_device  # the former name, kept as an alias


@raises_torch_errors
def is_projection_mode() -> bool:
    """True when the device runs in projection mode (``EMU_MODE=projection``, read at power-on):
    every op is timed as in functional mode but computes nothing, device memory is address space
    only, and what needs values raises ``ProjectionModeError`` (docs/projection.md). Before
    power-on: what the environment selects."""
    return _errors.is_projection_mode()


def get_device_health(device=None) -> dict:
    """The device's health counters: ECC corrected/uncorrected, resets, retired pages, throttle
    state (``throttled``, ``clock_factor``, ``clock_ghz``), link state, heartbeat."""
    return runtime.get_runtime().health(_check_index(_index(device)))


__all__ = [n for n in dir() if not n.startswith("_")]


@raises_torch_errors
def export_timeline(path) -> None:
    """Writes the modelled timeline of the device commands as a Perfetto/Chrome trace (JSON)."""
    from runtime.report import write_chrome_trace
    write_chrome_trace(runtime.get_runtime(), path)


@raises_torch_errors
def performance_report() -> str:
    """The projected-performance report of everything run so far (modelled time)."""
    from runtime.report import format_report
    return format_report(runtime.get_runtime())
