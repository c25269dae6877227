# Two entry points: `make demo` (the main job) and `make test`. Both create .venv and
# install the project (compiling the Cython kernels and the C++ core) when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.seed-installed
SOURCES := pyproject.toml setup.py $(wildcard emulator/kernels/*.pyx emulator/kernels/*.pxi torch_plugin/csrc/*.cpp torch_plugin/csrc/*.h)
DEPS := torch==2.13.0 numpy simpy scipy ml_dtypes cython setuptools wheel build pytest pytest-xdist hypothesis expecttest transformers==5.24.0 matplotlib tqdm

.PHONY: install demo test bench clean compat compat-subset

install: $(STAMP)

$(STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check $(DEPS)
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps torchao==0.18.0
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m torch_plugin.demo

# The suite runs in pytest-xdist workers, one per core up to 4 (TEST_WORKERS=0 runs it in this
# process), each test file in one worker (--dist loadfile: a file's module fixtures are built once).
TEST_WORKERS ?= auto

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses=4 --dist loadfile tests

# The compatibility subset (docs/compatibility.md): the demo, the zoo's strict training, one compile,
# one export round trip, one torchrun job and the torch-window checks. `make compat-subset` runs it on
# this venv (COMPAT_PYTHON=... on another); `make compat` runs it on every torch of the window
# (torch_plugin/_compat.py), each in a fresh clone of HEAD with its own venv (.ci/compat).
COMPAT_SUBSET := tests/compat \
	"tests/torch_plugin/test_demo.py::test_main_job_runs_and_checks_against_cpu[gpt2-fp32]" \
	"tests/zoo/test_zoo.py::test_strict_mode_needs_no_host_fallback[gpt2]" \
	tests/compile/test_compile.py::test_zoo_mlp_training_step_matches_eager \
	tests/compile/test_export.py::test_round_trip_in_a_clean_process \
	tests/distributed/test_ddp.py::test_ddp_matches_cpu_and_resumes_after_a_rank_failure
COMPAT_PYTHON ?= $(BIN)/python
COMPAT_VERSIONS ?= $(shell $(PYTHON) torch_plugin/_compat.py)

compat-subset: $(if $(filter $(BIN)/python,$(COMPAT_PYTHON)),$(STAMP))
	$(COMPAT_PYTHON) -m pytest -q $(COMPAT_SUBSET)

compat:
	for version in $(COMPAT_VERSIONS); do \
		COMPAT_DEPS="$(filter-out torch==%,$(DEPS))" .ci/compat "$$version" || exit 1; done

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
