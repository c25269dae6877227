"""The torch releases this plugin supports (the window), and the check made before anything registers.

The window is data: ``TORCH_WINDOW`` lists the supported ``major.minor`` series, oldest first; every
patch release of a listed series is in the window. ``make compat`` builds and runs the compatibility
subset on each of them (Makefile reads the list from here), docs/compatibility.md states the policy.

This module imports neither torch nor the rest of the plugin, so the check can run while torch itself
is still being imported (the autoload entry point) and from tools.
"""
from __future__ import annotations

import re

TORCH_WINDOW: tuple[tuple[int, int], ...] = ((2, 12), (2, 13), (2, 14))
MAIN_TORCH = "2.13.0"     # the release the full suite runs on (Makefile's DEPS, .ci/run)
PACKAGE = "seed-emu"

# Why the autoload entry point failed to register emu in this process (it warned once with it); a
# later `import torch_plugin` raises it. Kept here: a failed autoload unloads the rest of the package.
autoload_error: Exception | None = None


# aten operators a series of the window no longer defines (name or name.overload -> the first series
# without it): the registry leaves them out there instead of failing to register.
ATEN_OPS_REMOVED: dict[str, tuple[int, int]] = {
    "cholesky": (2, 14), "cholesky.out": (2, 14),   # torch.cholesky left aten in 2.14 (linalg_cholesky stays)
}


def aten_ops_absent(torch_version: str) -> frozenset[str]:
    """The aten operators of ATEN_OPS_REMOVED that ``torch_version`` no longer has."""
    found = series(torch_version)
    return frozenset(op for op, gone in ATEN_OPS_REMOVED.items() if found is not None and found >= gone)


class TorchVersionError(ImportError):
    """The torch found is outside the plugin's supported window, or is not the torch the C++ core was
    built against (an ImportError: the plugin cannot be imported here)."""


def series(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.14.1+cu130" -> (2, 14)); None if unreadable."""
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def window_text() -> str:
    """The window in words: "2.12.x, 2.13.x, 2.14.x"."""
    return ", ".join(f"{major}.{minor}.x" for major, minor in TORCH_WINDOW)


def window_versions() -> str:
    """The window as pip specifiers, one per series, for the Makefile ("2.12.* 2.13.* 2.14.*")."""
    return " ".join(f"{major}.{minor}.*" for major, minor in TORCH_WINDOW)


def unsupported_reason(torch_version: str) -> str | None:
    """Why ``torch_version`` is outside the window (None when it is inside)."""
    if series(torch_version) in TORCH_WINDOW:
        return None
    return (f"{PACKAGE} (the emu device, torch_plugin) does not support torch {torch_version}: it supports "
            f"torch {window_text()}. Install a torch of that window (pip install 'torch>={TORCH_WINDOW[0][0]}."
            f"{TORCH_WINDOW[0][1]},<{TORCH_WINDOW[-1][0]}.{TORCH_WINDOW[-1][1] + 1}'), or a {PACKAGE} release "
            f"whose window includes torch {torch_version} (docs/compatibility.md).")


def build_mismatch_reason(torch_version: str, built_major: int, built_minor: int) -> str | None:
    """Why a C++ core built against torch ``built_major.built_minor`` cannot run beside ``torch_version``
    (None when the series agree): torch's C++ ABI changes between minor releases."""
    if series(torch_version) == (built_major, built_minor):
        return None
    return (f"{PACKAGE}'s C++ core (torch_plugin._C) was built against torch {built_major}.{built_minor}, but "
            f"this process runs torch {torch_version}: reinstall {PACKAGE} from source against this torch "
            f"(pip install --no-build-isolation --force-reinstall --no-deps seed-emu, or `make install` in a "
            f"checkout).")


def check_torch_version(torch_version: str) -> None:
    """Raise TorchVersionError when ``torch_version`` is outside the window."""
    reason = unsupported_reason(torch_version)
    if reason:
        raise TorchVersionError(reason)


if __name__ == "__main__":   # `python torch_plugin/_compat.py [--newest]`: the window's pip specifiers
    import sys
    print(window_versions().split()[-1] if sys.argv[1:] == ["--newest"] else window_versions())
