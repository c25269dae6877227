"""Fixtures of the zoo tests: the per-model report (peak device memory, host fallbacks) that is
printed at the end of the run, and freeing what a failed test's traceback holds."""
import gc
import traceback

import pytest

import torch_plugin  # noqa: F401  (registers emu)


@pytest.fixture
def zoo_report(request):
    """``zoo_report(model, key, value)`` adds a line to the zoo summary at the end of the run
    (tests/conftest.py collects and prints it)."""
    def record(model: str, key: str, value) -> None:
        request.node.user_properties.append(("zoo_report", (model, key, str(value))))
    return record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Once a failure is reported, drop the locals of its traceback's frames and collect the
    cycles through them: pytest keeps the traceback until the session ends, and its frames hold
    the failed test's device models, so a run with many failures would fill the tiny preset's
    64 MiB (the caching allocator's pressure does not trigger Python's garbage collector)."""
    outcome = yield
    if call.excinfo is not None:
        outcome.get_result()  # the report (with its formatted traceback) exists from here on
        traceback.clear_frames(call.excinfo.tb)
        gc.collect()

