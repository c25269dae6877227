"""Builds the device kernel library (Cython) and the torch_plugin C++ core at install time.

The development install is ``pip install --no-build-isolation -e .`` (the C++ core compiles against the
torch already installed); a build-isolated ``pip install .`` or ``python -m build`` gets its torch from
tools/seed_build_backend.py.
"""
import glob
import os
import sys
import sysconfig

# The build imports torch, whose autoload would import this project's own (possibly stale or
# half-built) C++ core: a core that does not load must not stop its own rebuild.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import numpy  # noqa: E402
from Cython.Build import cythonize  # noqa: E402
from setuptools import Extension, setup  # noqa: E402

# Asking for the build's requirements (egg_info), writing metadata (dist_info) and the sdist need no
# compiler and no torch: a build-isolated environment installs torch (tools/seed_build_backend.py
# names which) only after its backend has run setup.py for egg_info.
_COMPILING = ("build", "build_ext", "bdist_wheel", "bdist_egg", "editable_wheel", "develop", "install")
METADATA_ONLY = not any(arg in _COMPILING for arg in sys.argv[1:])
try:
    import torch  # noqa: E402
    from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402
except ImportError as missing:
    if not METADATA_ONLY:
        raise SystemExit(f"seed: building the kernels and the C++ core needs torch installed where the build "
                         f"runs ({missing}); see docs/compatibility.md for the supported torch window") from None
    torch = None

# The editable install (PEP 660's editable_wheel, or develop) and build_ext --inplace put the modules
# beside their sources; a wheel or sdist build does not.
IN_PLACE = any(arg in sys.argv for arg in ("editable_wheel", "develop", "--inplace", "-i"))
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
# What every kernel may include: a change to one rebuilds them all.
KERNEL_INCLUDES = sorted(glob.glob("emulator/kernels/*.pxi") + glob.glob("emulator/kernels/*.pxd"))


def _built_in_place(pyx: str) -> bool:
    """Whether the kernel module of ``pyx`` is already built in place and newer than its sources.

    The kernel library does not depend on torch (only numpy and Python), so a build for another torch
    of the window (.ci/compat) and an edit of one kernel recompile only what changed; the C++ core is
    built against the torch of this environment and is always rebuilt. EMU_REBUILD_KERNELS=1 rebuilds
    every kernel. Only for in-place builds (the editable install, ``build_ext --inplace``): a wheel
    always compiles every kernel into itself."""
    if not IN_PLACE or os.environ.get("EMU_REBUILD_KERNELS") == "1":
        return False
    target = pyx[:-4] + EXT_SUFFIX
    if not os.path.exists(target):
        return False
    return os.path.getmtime(target) >= max(os.path.getmtime(p) for p in [pyx, *KERNEL_INCLUDES])


JOBS = int(os.environ.get("EMU_BUILD_JOBS") or os.cpu_count() or 1)
kernel_sources = sorted(glob.glob("emulator/kernels/*.pyx"))
kernel_extensions = [
    Extension(
        "emulator.kernels." + path.split("/")[-1][:-4],
        [path],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3", "-fno-strict-aliasing"],
    )
    for path in kernel_sources
    if not _built_in_place(path)
]
if len(kernel_extensions) < len(kernel_sources):
    print(f"seed: {len(kernel_sources) - len(kernel_extensions)} of {len(kernel_sources)} kernel modules are built "
          f"in place and up to date; compiling {len(kernel_extensions)}")

plugin_core = None if torch is None else CppExtension(
    "torch_plugin._C",
    sorted(glob.glob("torch_plugin/csrc/*.cpp")),
    # kineto's headers (the profiler's child activity profiler, profiler.cpp) include each other by bare name
    include_dirs=[os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
    extra_compile_args=["-O2"],
)

if METADATA_ONLY:  # the sdist carries the sources (MANIFEST.in); nothing is translated or compiled
    ext_modules, cmdclass = [], {}
else:
    ext_modules = (cythonize(kernel_extensions, language_level=3, quiet=True, nthreads=JOBS)
                   if kernel_extensions else []) + [plugin_core]
    cmdclass = {"build_ext": BuildExtension.with_options(use_ninja=False)}

setup(
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    # the extensions compile side by side, one per core (EMU_BUILD_JOBS overrides)
    options={"build_ext": {"parallel": JOBS}},
)
