"""Builds the device kernel library (Cython) and the torch_plugin C++ core at install time.

Install with ``pip install --no-build-isolation -e .`` so the C++ core compiles
against the torch already installed (a build-isolated env would fetch another one).
"""
import glob

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

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
    extra_compile_args=["-O2"],
)

setup(
    ext_modules=cythonize(kernel_extensions, language_level=3, quiet=True) + [plugin_core],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)
