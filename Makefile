# Two entry points: `make demo` (the main job) and `make test`. Both create .venv and
# install the project (compiling the Cython kernels and the C++ core) when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.seed-installed
SOURCES := pyproject.toml setup.py $(wildcard emulator/kernels/*.pyx emulator/kernels/*.pxi torch_plugin/csrc/*.cpp torch_plugin/csrc/*.h)
DEPS := torch==2.13.0 numpy simpy scipy ml_dtypes cython setuptools wheel pytest hypothesis expecttest transformers==5.24.0 matplotlib tqdm

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check $(DEPS)
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m torch_plugin.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_copy_and_launch.py
	$(BIN)/python benchmarks/bench_memory.py
	$(BIN)/python benchmarks/bench_kernels.py
	$(BIN)/python benchmarks/bench_models.py
	$(BIN)/python benchmarks/bench_profile.py
	$(BIN)/python benchmarks/bench_des.py
	$(BIN)/python benchmarks/bench_collectives.py
	$(BIN)/python benchmarks/bench_compile.py

clean:
	rm -rf build *.egg-info emulator/kernels/*.c emulator/kernels/*.so torch_plugin/*.so
