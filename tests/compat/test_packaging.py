"""Installing like a package: the wheel built from this tree installs into a scratch venv (which sees
this venv's torch and dependencies: --system-site-packages is not enough for a venv's own packages,
so a .pth file points at them), and imports and runs from outside the checkout. It builds the whole
kernel library and C++ core (several minutes on 2 cores), so it runs when EMU_PACKAGING_TEST=1."""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.environ.get("EMU_PACKAGING_TEST") != "1",
                                reason="builds the wheel from source (several minutes): set EMU_PACKAGING_TEST=1")


def _run(*cmd, cwd, env=None):
    result = subprocess.run(list(map(str, cmd)), cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


def test_wheel_builds_installs_and_imports_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", dist, ROOT, cwd=tmp_path,
         env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    (wheel,) = dist.glob("seed_emu-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
                .stdout.strip())
    # torch and the other dependencies come from this venv (read-only), not the package index
    (site / "host_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    code = ("import torch, torch_plugin, emulator\n"
            "assert 'site-packages' in torch_plugin.__file__ and 'site-packages' in emulator.__file__, torch_plugin.__file__\n"
            "import torch_plugin.compile, torch_plugin.distributed, torch_plugin.zoo\n"
            "x = torch.arange(6., device='emu').reshape(2, 3)\n"
            "print('OK', (x @ x.T).cpu().tolist(), torch_plugin._C._built_with_torch)\n")
    out = _run(python, "-c", code, cwd=tmp_path, env=dict(os.environ, EMU_PRESET="tiny")).stdout
    assert "OK [[5.0, 14.0], [14.0, 50.0]]" in out
