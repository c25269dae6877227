"""Process rules: a child forked after its parent initialised emu refuses every device use (the
message names the 'spawn' start method, as CUDA's "Cannot re-initialize CUDA in forked
subprocess"); the parent stays fine, a fork before any device use and a spawned child work
(torch_plugin/device_module.py, runtime.refuse_in_forked_child; docs/runtime.md#processes).

One script runs every case in a fresh interpreter (the test process has long initialised emu),
so the suite pays one interpreter start and one spawned child."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, multiprocessing as mp, torch, torch_plugin

    def child(queue):
        state = {"bad_fork": torch.emu._is_in_bad_fork(), "initialized": torch.emu.is_initialized(),
                 "device_count": torch.emu.device_count()}
        try:
            x = torch.ones(3, device="emu")
            state["result"] = (x + 1).cpu().tolist()
        except Exception as err:
            state["error"] = [type(err).__name__, isinstance(err, RuntimeError), str(err)]
        try:
            torch.emu.init()
            state["init"] = "ok"
        except Exception as err:
            state["init"] = type(err).__name__
        queue.put(state)

    def run(method):
        ctx = mp.get_context(method)
        queue = ctx.Queue()
        proc = ctx.Process(target=child, args=(queue,))
        proc.start()
        state = queue.get(timeout=120)
        proc.join(timeout=120)
        state["exitcode"] = proc.exitcode
        return state

    if __name__ == "__main__":
        out = {"fork_before_use": run("fork")}
        parent = torch.arange(4.0, device="emu")
        out["fork_after_use"] = run("fork")
        out["parent_after_fork"] = (parent * 2).cpu().tolist()
        out["parent_bad_fork"] = torch.emu._is_in_bad_fork()
        out["spawn_after_use"] = run("spawn")
        print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    path = tmp_path_factory.mktemp("fork") / "fork_cases.py"
    path.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "EMU_PRESET": "tiny"})
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_fork_before_any_device_use_works_in_the_child(cases):
    child = cases["fork_before_use"]
    assert child["result"] == [2.0, 2.0, 2.0]
    assert child["bad_fork"] is False and child["init"] == "ok" and child["exitcode"] == 0


def test_fork_after_the_parent_initialised_emu_is_refused_naming_spawn(cases):
    child = cases["fork_after_use"]
    assert "result" not in child
    name, is_runtime_error, message = child["error"]
    assert is_runtime_error, name  # CUDA's type: a RuntimeError (here emu's torch.AcceleratorError)
    assert "Cannot re-initialize emu in forked subprocess" in message
    assert "'spawn' start method" in message
    assert child["init"] == "EmuAcceleratorError"  # torch.emu.init() refuses too
    assert child["bad_fork"] is True and child["initialized"] is False
    assert child["device_count"] == 2  # discovery still answers, as torch.cuda.device_count does
    assert child["exitcode"] == 0


def test_parent_is_unaffected_by_its_forked_child(cases):
    assert cases["parent_after_fork"] == [0.0, 2.0, 4.0, 6.0]
    assert cases["parent_bad_fork"] is False


def test_spawned_child_uses_emu_after_the_parent_did(cases):
    child = cases["spawn_after_use"]
    assert child["result"] == [2.0, 2.0, 2.0]
    assert child["bad_fork"] is False and child["init"] == "ok" and child["exitcode"] == 0
