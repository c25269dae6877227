"""Builds the device kernel library (Cython) and the torch_plugin C++ core at install time.

Install with ``pip install --no-build-isolation -e .`` so the C++ core compiles
against the torch already installed (a build-isolated env would fetch another one).
"""
import glob
import os

# The build imports torch, whose autoload would import this project's own (possibly stale or
# half-built) C++ core: a core that does not load must not stop its own rebuild.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import numpy  # noqa: E402
import torch  # noqa: E402
from Cython.Build import cythonize  # noqa: E402
from setuptools import Extension, setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

kernel_extensions = [
    Extension(
        "emulator.kernels." + path.split("/")[-1][:-4],
        [path],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3", "-fno-strict-aliasing"],
    )
    for path in sorted(glob.glob("emulator/kernels/*.pyx"))
]

plugin_core = CppExtension(
    "torch_plugin._C",
    sorted(glob.glob("torch_plugin/csrc/*.cpp")),
    # kineto's headers (the profiler's child activity profiler, profiler.cpp) include each other by bare name
    include_dirs=[os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
    extra_compile_args=["-O2"],
)

setup(
    ext_modules=cythonize(kernel_extensions, language_level=3, quiet=True) + [plugin_core],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)
