"""PyTorch PrivateUse1 backend ``emu``: the Seed emulated accelerator as a torch device.

``import torch`` alone registers it (the ``torch.backends`` entry point calls
``_autoload``); ``import torch_plugin`` does the same. Registration is cheap:
the emulated system powers on at the first use of the device.

Outside the supported torch window (torch_plugin/_compat.py), or when the C++ core cannot load,
``import torch_plugin`` raises ImportError naming the torch found and the window, before anything
registers; the autoload entry point instead warns once with that message and leaves torch usable
without emu (a user who upgrades torch keeps torch).
"""
from __future__ import annotations

import os
import sys
import threading
import warnings

from torch_plugin import _compat

_registered = False
_warned = False
_lock = threading.RLock()


def _load_core(torch):
    """The C++ core, checked against this torch. Nothing registers before the window check; a core that
    does not load (undefined symbol: built for another torch) has registered nothing either."""
    _compat.check_torch_version(torch.__version__)
    try:
        from torch_plugin import _C
    except ImportError as err:
        raise _compat.TorchVersionError(
            f"{_compat.PACKAGE}: the C++ core (torch_plugin._C) does not load beside torch {torch.__version__} "
            f"({err}); rebuild it against this torch (`make install` in a checkout, or pip install "
            f"--no-build-isolation --force-reinstall --no-deps {_compat.PACKAGE}). Supported torch: "
            f"{_compat.window_text()}.") from err
    built = getattr(_C, "_built_with_torch", None)   # absent from a core older than this check
    reason = built and _compat.build_mismatch_reason(torch.__version__, *built)
    if reason:
        raise _compat.TorchVersionError(reason)
    return _C


def _register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        failed = _compat.autoload_error
        if failed is not None:
            # The autoload already tried and failed, perhaps half way (after torch.emu was set): trying
            # again would fail on that leftover and hide the cause, so the cause is raised.
            if isinstance(failed, ImportError):
                raise failed
            raise ImportError(f"{_compat.PACKAGE} could not register the emu device when torch loaded it: "
                              f"{type(failed).__name__}: {failed}") from failed
        import torch

        _C = _load_core(torch)
        torch.utils.rename_privateuse1_backend("emu")
        from torch_plugin import device_module
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
    """Entry point of the ``torch.backends`` group (runs at ``import torch``). It never raises: torch's
    loader would turn any error into a failed ``import torch``. A torch outside the window, or a core
    that cannot load, gives one warning and torch without emu."""
    global _warned
    try:
        _register()
    except Exception as err:  # noqa: BLE001  (whatever fails, `import torch` must not)
        if _explicit_import:   # `import torch_plugin` is running: it raises the error itself
            return
        _compat.autoload_error = err
        if not _warned:
            _warned = True
            warnings.warn(f"{err} The emu device is not available in this process.", RuntimeWarning,
                          stacklevel=2)
        # A plugin that did not register must not look imported: a later `import torch_plugin`
        # runs again and raises the error (kept in _compat, which stays imported).
        for name in [n for n in sys.modules if n == __name__ or n.startswith(__name__ + ".")]:
            if name != _compat.__name__:
                del sys.modules[name]


def _torch_is_initializing() -> bool:
    """True while ``import torch`` is still running (this module is being imported by its autoload)."""
    torch_module = sys.modules.get("torch")
    return torch_module is not None and bool(getattr(getattr(torch_module, "__spec__", None), "_initializing", False))


# Read before importing torch. When torch's autoload imports this module, torch calls _autoload
# right after, which registers or warns; when the user imports it, registering here raises.
_explicit_import = not _torch_is_initializing()

# Defined before importing torch: importing torch first runs the autoload entry point,
# which finds this partially imported module and calls _autoload.
import torch  # noqa: E402

if _explicit_import:
    _register()

from torch_plugin.errors import HostFallbackError, ProjectionModeError  # noqa: E402  (torch_plugin.HostFallbackError)

__all__ = ["HostFallbackError", "ProjectionModeError"]
