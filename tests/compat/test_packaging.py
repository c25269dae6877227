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


def _venv_with_host_deps(tmp_path, name):
    """A scratch venv that sees this venv's torch and dependencies through a .pth file."""
    venv = tmp_path / name
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
                .stdout.strip())
    (site / "host_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


_SMOKE = ("import torch, torch_plugin, emulator\n"
          "assert 'site-packages' in torch_plugin.__file__ and 'site-packages' in emulator.__file__, torch_plugin.__file__\n"
          "x = torch.arange(6., device='emu').reshape(2, 3)\n"
          "print('OK', (x @ x.T).cpu().tolist(), torch_plugin._C._built_with_torch)\n")


def _checkout_copy(tmp_path):
    """The tracked and untracked-but-not-ignored files of this checkout, without its build outputs."""
    files = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).stdout.split("\0")
    copy = tmp_path / "src"
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes(source.read_bytes())
    return copy


def test_python_m_build_makes_an_sdist_and_a_wheel_in_an_isolated_environment(tmp_path):
    pytest.importorskip("build", reason="python -m build needs the 'build' package (pip install build)")
    import tarfile
    dist = tmp_path / "dist"
    # build's isolated venv installs setuptools, cython, numpy and the torch the backend asks for from the
    # package index; it builds the sdist, then the wheel from the unpacked sdist (so the sdist is complete)
    _run(sys.executable, "-m", "build", "--outdir", dist, _checkout_copy(tmp_path), cwd=tmp_path,
         env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    (sdist,) = dist.glob("seed_emu-*.tar.gz")
    (wheel,) = dist.glob("seed_emu-*.whl")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"setup.py", "pyproject.toml", "tools/seed_build_backend.py", "emulator/presets/h200.toml",
            "torch_plugin/_compat.py"} <= names, sorted(names)[:40]
    assert any(name.endswith(".pyx") for name in names) and any(name.endswith(".cpp") for name in names)
    assert not any(name.endswith((".so", ".o")) for name in names)
    python = _venv_with_host_deps(tmp_path, "venv")
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    out = _run(python, "-c", _SMOKE, cwd=tmp_path, env=dict(os.environ, EMU_PRESET="tiny")).stdout
    assert "OK [[5.0, 14.0], [14.0, 50.0]]" in out


def test_pip_install_dot_with_build_isolation(tmp_path):
    python = _venv_with_host_deps(tmp_path, "venv")
    # build isolation on (pip's default): the build environment comes from the package index
    _run(python, "-m", "pip", "install", "--no-deps", _checkout_copy(tmp_path), cwd=tmp_path,
         env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    out = _run(python, "-c", _SMOKE, cwd=tmp_path, env=dict(os.environ, EMU_PRESET="tiny")).stdout
    assert "OK [[5.0, 14.0], [14.0, 50.0]]" in out
