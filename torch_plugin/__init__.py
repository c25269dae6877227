"""PyTorch PrivateUse1 backend ``emu``: the Seed emulated accelerator as a torch device.

``import torch`` alone registers it (the ``torch.backends`` entry point calls
``_autoload``); ``import torch_plugin`` does the same. Registration is cheap:
the emulated system powers on at the first use of the device.
"""
from __future__ import annotations

import os
import threading

_registered = False
_lock = threading.RLock()


def _register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        import torch

        torch.utils.rename_privateuse1_backend("emu")
        from torch_plugin import _C, device_module
        from torch_plugin._bridge import BRIDGE
        from torch_plugin.ops import registry
        _C._set_bridge(BRIDGE)
        torch._register_device_module("emu", device_module)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
        registry.register_all()
        # A child forked after the device was initialised refuses to use it (CUDA's rule).
        os.register_at_fork(after_in_child=device_module._after_fork_in_child)
        import torch_plugin.custom_ops  # noqa: F401  (the emu:: custom operators)
        import torch_plugin.compile  # noqa: F401  (torch.compile backend "emu"; Inductor's refusal)
        if torch.distributed.is_available():
            import torch_plugin.distributed  # noqa: F401  (registers the c10d backend "emu")
        _registered = True


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group (runs at ``import torch``)."""
    _register()


# Defined before importing torch: importing torch first runs the autoload entry point,
# which finds this partially imported module and calls _autoload.
import torch  # noqa: E402

_register()

from torch_plugin.errors import HostFallbackError, ProjectionModeError  # noqa: E402  (torch_plugin.HostFallbackError)

__all__ = ["HostFallbackError", "ProjectionModeError"]
