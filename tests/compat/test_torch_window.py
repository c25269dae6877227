"""The supported torch window (torch_plugin/_compat.py): outside it, or with a C++ core that cannot
load, `import torch_plugin` raises an ImportError naming the torch found and the window, before
anything registers, and `import torch` (the autoload entry point) warns once and keeps torch usable
without emu. Each case runs in a fresh process that fakes the torch version or breaks the core."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_plugin import _compat

ROOT = Path(__file__).resolve().parents[2]

# Runs before torch is imported: torch.torch_version, once executed, reports another version, so
# `torch.__version__` reads it from the start of `import torch` (the autoload sees it too).
FAKE_VERSION = (
    "import importlib.abc, importlib.machinery, sys\n"
    "class _Fake(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name != 'torch.torch_version':\n"
    "            return None\n"
    "        spec = importlib.machinery.PathFinder.find_spec(name, path)\n"
    "        run = spec.loader.exec_module\n"
    "        def exec_module(module):\n"
    "            run(module)\n"
    "            module.__version__ = module.TorchVersion({version!r})\n"
    "        spec.loader.exec_module = exec_module\n"
    "        return spec\n"
    "sys.meta_path.insert(0, _Fake())\n")
# A core that fails to load the way a core built for another torch does (undefined symbol).
BROKEN_CORE = (
    "import importlib.abc, sys\n"
    "class _Refuse(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name == 'torch_plugin._C':\n"
    "            raise ImportError('torch_plugin/_C.so: undefined symbol: _ZN3c1013GeneratorImpl12philox_state')\n"
    "sys.meta_path.insert(0, _Refuse())\n")


def _run(prelude: str, body: str, autoload: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, EMU_PRESET="tiny", TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0",
               PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-c", prelude + body], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_window_is_data():
    assert _compat.TORCH_WINDOW == tuple(sorted(_compat.TORCH_WINDOW))
    assert _compat.series("2.14.1+cu130") == (2, 14) and _compat.series("nonsense") is None
    assert _compat.window_versions().split() == [f"{a}.{b}.*" for a, b in _compat.TORCH_WINDOW]
    for major, minor in _compat.TORCH_WINDOW:
        assert _compat.unsupported_reason(f"{major}.{minor}.7") is None
    assert _compat.series(_compat.MAIN_TORCH) in _compat.TORCH_WINDOW
    low, high = _compat.TORCH_WINDOW[0], _compat.TORCH_WINDOW[-1]
    for outside in (f"{low[0]}.{low[1] - 1}.0", f"{high[0]}.{high[1] + 1}.0", "3.0.0"):
        reason = _compat.unsupported_reason(outside)
        assert reason and f"torch {outside}" in reason and _compat.window_text() in reason
    assert _compat.build_mismatch_reason("2.14.1", 2, 14) is None
    assert "built against torch 2.13" in _compat.build_mismatch_reason("2.14.1", 2, 13)


# Import torch (autoload on), check torch works and emu is absent, then import torch_plugin explicitly.
AFTER_IMPORT = (
    "import warnings\n"
    "with warnings.catch_warnings(record=True) as caught:\n"
    "    warnings.simplefilter('always')\n"
    "    import torch\n"
    "print('WARNINGS', len([w for w in caught if 'emu' in str(w.message)]))\n"
    "for w in caught: print('WARNING:', w.message)\n"
    "print('SUM', float(torch.ones(3).sum()), torch.__version__)\n"
    "print('BACKEND', torch._C._get_privateuse1_backend_name(), hasattr(torch, 'emu'))\n"
    "try:\n"
    "    import torch_plugin\n"
    "except ImportError as err:\n"
    "    print('IMPORT_ERROR', type(err).__name__, err)\n"
    "else:\n"
    "    print('IMPORTED')\n"
    "print('BACKEND_AFTER', torch._C._get_privateuse1_backend_name())\n")


@pytest.mark.parametrize("version", ["2.11.0", "2.15.0"])
def test_outside_the_window_import_torch_warns_once_and_import_torch_plugin_raises(version):
    result = _run(FAKE_VERSION.format(version=version), AFTER_IMPORT)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "WARNINGS 1" in out, out
    assert f"torch {version}" in out and _compat.window_text() in out
    assert "SUM 3.0" in out                          # torch is usable
    assert "BACKEND privateuseone False" in out      # and nothing of emu registered
    assert "IMPORT_ERROR TorchVersionError" in out and out.count(f"does not support torch {version}") >= 2
    assert "BACKEND_AFTER privateuseone" in out


def test_outside_the_window_explicit_import_raises_before_registering():
    """Autoload off: `import torch_plugin` itself meets the torch outside the window."""
    result = _run(FAKE_VERSION.format(version="2.11.0"), AFTER_IMPORT, autoload=False)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "WARNINGS 0" in out and "IMPORT_ERROR TorchVersionError" in out and "does not support torch 2.11.0" in out
    assert "BACKEND_AFTER privateuseone" in out


def test_import_torch_plugin_first_raises_and_leaves_torch():
    """`import torch_plugin` before torch: the nested autoload stays quiet, the import raises once."""
    body = ("import warnings\nwarnings.simplefilter('always')\n"
            "try:\n    import torch_plugin\nexcept ImportError as err:\n    print('IMPORT_ERROR', err)\n"
            "import torch\nprint('SUM', float(torch.ones(2).sum()), torch._C._get_privateuse1_backend_name())\n")
    result = _run(FAKE_VERSION.format(version="2.15.0"), body)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "IMPORT_ERROR" in result.stdout and "SUM 2.0 privateuseone" in result.stdout
    assert "RuntimeWarning" not in result.stderr


def test_a_core_that_cannot_load_keeps_torch_usable():
    result = _run(BROKEN_CORE, AFTER_IMPORT)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "WARNINGS 1" in out and "undefined symbol" in out and "rebuild it against this torch" in out
    assert "SUM 3.0" in out and "BACKEND privateuseone False" in out
    assert "IMPORT_ERROR TorchVersionError" in out

# A failure after torch.emu is set (a torch whose Python API differs from what a later step expects).
LATE_FAILURE = (
    "import importlib.abc, sys\n"
    "class _Refuse(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name == 'torch_plugin.custom_ops':\n"
    "            raise AttributeError('late registration step failed')\n"
    "sys.meta_path.insert(0, _Refuse())\n")


def test_an_autoload_that_fails_half_way_names_its_cause_at_import_torch_plugin():
    """The autoload fails after torch.emu is registered: torch warns once and stays usable, and
    `import torch_plugin` raises an ImportError with that cause, not the leftover registration."""
    result = _run(LATE_FAILURE, AFTER_IMPORT)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "WARNINGS 1" in out and "late registration step failed" in out, out
    assert "SUM 3.0" in out
    assert "IMPORT_ERROR ImportError" in out and "AttributeError: late registration step failed" in out, out
    assert "already been registered" not in out + result.stderr


def test_inside_the_window_autoload_registers_emu():
    result = _run("", "import torch\nprint('EMU', torch.ones(2, device='emu').sum().item(), torch.emu.is_available())\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "EMU 2.0 True" in result.stdout


def test_removed_aten_ops_match_this_torch():
    """ATEN_OPS_REMOVED is what the running torch defines: an op listed as gone from this series is
    absent here, one listed as gone from a later series is still here (so the list cannot drift)."""
    import torch
    absent = _compat.aten_ops_absent(torch.__version__)
    assert _compat.aten_ops_absent("2.13.0") == frozenset()
    assert {"cholesky", "cholesky.out"} <= _compat.aten_ops_absent("2.14.1")
    for op in _compat.ATEN_OPS_REMOVED:
        name, _, overload = op.partition(".")
        packet = getattr(torch.ops.aten, name, None)
        defined = packet is not None and hasattr(packet, overload or "default")
        assert defined == (op not in absent), f"aten::{op}: defined={defined} on torch {torch.__version__}"
