"""What every profiler of the plugin listens to while its block runs.

``BlockObserver``: the observer protocol of torch_plugin/telemetry.py (op records, command seqs,
host waits, synchronisations, copies), every hook a no-op, so that a profiler writes only the
hooks it reads, and the hooking of the runtime and the op wrappers for the block.
``FirmwareTraceWindow``: the firmware's command trace for one block, switched on while the block
runs when it is off (EMU_TRACE_ENTRIES=0), and the trace records of the block's commands.

Leaves out what is made of them (block.py: torch.emu.profile(); kineto.py: torch.profiler).
"""
from __future__ import annotations

from torch_plugin import telemetry
from torch_plugin.ops import registry

# How many records the firmware keeps for a block while the trace is otherwise off.
_TRACE_ENTRIES_WHEN_OFF = 200_000


class BlockObserver:
    """The hooks a block's profiler may implement; each does nothing here."""

    def add_op(self, record) -> None:
        pass

    def add_command(self, seq: int, name: str, t0_ns: float, t1_ns: float) -> None:
        pass

    def add_wait(self, name: str, t0_ns: float, t1_ns: float) -> None:
        pass

    def add_sync(self) -> None:
        pass

    def add_copy(self, direction: str, nbytes: int) -> None:
        pass

    def _listen(self, rt) -> None:
        """Hooks the runtime ``rt`` and the op wrappers: the hooks above are called from now on."""
        telemetry._runtime_hooks.acquire(rt)
        registry.add_observer(self)

    def _stop_listening(self) -> None:
        registry.remove_observer(self)
        telemetry._runtime_hooks.release()


class FirmwareTraceWindow:
    """The firmware's command trace of the runtime ``rt`` from now on (switched on if it is off)."""

    def __init__(self, rt):
        self._rt = rt
        self._restore = rt.settings.trace_entries == 0
        if self._restore:
            rt.set_trace_entries(_TRACE_ENTRIES_WHEN_OFF)

    def records(self, seqs: set) -> list:
        """The trace records of the commands ``seqs``, device by device, in the trace's order."""
        entries = []
        if seqs:
            lo = min(seqs)
            for device in range(self._rt.device_count):
                entries.extend(e for e in self._rt.command_trace(device, lo) if e.seq in seqs)
        return entries

    def close(self) -> None:
        """Switches the trace off again if the window switched it on."""
        if self._restore:
            self._rt.set_trace_entries(0)
