"""The PEP 517 build backend: setuptools' own, except that the build environment gets the torch the
package will run beside.

The C++ core (torch_plugin/_C) is compiled against torch's headers and refuses to load beside another
torch series, so a build-isolated ``pip install .`` must not build against whatever torch is newest on
the index. ``get_requires_for_build_*`` asks for, in order:

1. ``EMU_BUILD_TORCH`` (a version, ``2.14.1``), when set;
2. the torch installed in the environment that pip installs into (pip runs this hook with that
   environment's interpreter and hides its site-packages from the build, not from ``sys.prefix``);
3. the window's main release (``MAIN_TORCH`` in torch_plugin/_compat.py), when neither says (a fresh
   environment, or ``python -m build``, whose isolated environment is a new venv).

Everything else (metadata, the sdist, the wheel) is setuptools.build_meta unchanged.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import sysconfig
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the hooks this module does not change)

_ROOT = Path(__file__).resolve().parents[1]


def _main_torch() -> str:
    # torch_plugin/_compat.py is data-only, but importing the package would import torch: read the line
    text = (_ROOT / "torch_plugin" / "_compat.py").read_text()
    return re.search(r'^MAIN_TORCH = "([^"]+)"', text, re.MULTILINE).group(1)


def _target_torch() -> str | None:
    paths = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
    for dist in importlib.metadata.distributions(path=paths):
        if (dist.metadata["Name"] or "").lower() == "torch":
            return dist.version
    return None


def torch_requirement() -> str:
    """The torch the build environment installs (see the module docstring)."""
    version = os.environ.get("EMU_BUILD_TORCH") or _target_torch() or _main_torch()
    return f"torch=={version}"


def get_requires_for_build_wheel(config_settings=None):
    return [*_setuptools.get_requires_for_build_wheel(config_settings), torch_requirement()]


def get_requires_for_build_editable(config_settings=None):
    return [*_setuptools.get_requires_for_build_editable(config_settings), torch_requirement()]
