"""Rebuilds one Cython module of the kernel library in place (a development shortcut).

    python tools/build_kernel.py elementwise [reduction ...]

`pip install -e .` (or `make install`) builds every module; this compiles only the ones
named, with the same flags as setup.py, so that work on one kernel file does not wait
for (or break on) the others. Run it under `flock /tmp/seed-build.lock` when several
people build at once.
"""
import sys
import tempfile

import numpy
from Cython.Build import cythonize
from setuptools import Extension
from setuptools.dist import Distribution


def build(names):
    extensions = [Extension(f"emulator.kernels.{name}", [f"emulator/kernels/{name}.pyx"],
                            include_dirs=[numpy.get_include()], extra_compile_args=["-O3", "-fno-strict-aliasing"])
                  for name in names]
    dist = Distribution({"ext_modules": cythonize(extensions, language_level=3, quiet=True)})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.build_temp = tempfile.mkdtemp(prefix="seed-build-")
    cmd.ensure_finalized()
    cmd.run()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build(sys.argv[1:])
