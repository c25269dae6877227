"""destroy_process_group releases the emu backend's inner gloo groups at once: their worker threads
are joined while the interpreter is alive (left to interpreter finalization, a worker that takes
the GIL is ended there and the process aborts: "terminate called without an active exception",
seen once at the exit of a 2-rank projection job). One process, world size 1, in a child process
so the test's own interpreter keeps no process group."""
import subprocess
import textwrap

from dist_testing import PYTHON, ROOT, job_env

SCRIPT = textwrap.dedent("""
    import gc, os
    import torch, torch_plugin, torch.distributed as dist
    from torch_plugin.distributed import EmuProcessGroup

    def threads():
        return len(os.listdir("/proc/self/task"))

    t = torch.ones(4, device="emu")   # the device's own threads start before the baseline
    torch.emu.synchronize()
    before = threads()
    dist.init_process_group("cpu:gloo,emu:emu", store=dist.HashStore(), rank=0, world_size=1)
    dist.all_reduce(t)   # c10d creates the emu backend at its first collective
    (emu_pg,) = [o for o in gc.get_objects() if isinstance(o, EmuProcessGroup)]
    assert t.cpu().tolist() == [1.0] * 4
    during = threads()
    dist.destroy_process_group()
    after = threads()
    print("threads", before, during, after)
    try:
        emu_pg.allreduce([t], dist.AllreduceOptions())
    except RuntimeError as err:
        print("after destroy:", type(err).__name__, err)
    """)


def test_destroy_process_group_joins_the_inner_gloo_threads_and_later_use_says_why():
    proc = subprocess.run([PYTHON, "-c", SCRIPT], cwd=ROOT, env=job_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("threads "))
    before, during, after = map(int, line.split()[1:])
    # The emu backend's two gloo groups start worker threads; once destroyed, none are left (the
    # cpu:gloo group's threads go with its own destructor, as c10d drops its last reference).
    assert during > before and after == before, line
    said = next(x for x in proc.stdout.splitlines() if x.startswith("after destroy:"))
    assert said.startswith("after destroy: DistBackendError "), said
    assert "emu backend: process group '0' was shut down (destroy_process_group); it runs no collectives" in said, said
