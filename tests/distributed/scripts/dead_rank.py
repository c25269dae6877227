"""A rank that dies (or hangs) while its peer is inside a collective. Launched without torchrun
(env:// rendezvous, RANK/WORLD_SIZE/MASTER_* set by the test) so that no agent tears the
survivor down: rank 0 must get a DistBackendError naming rank 1 within the timeout.

argv: mode ("dead": rank 1 SIGKILLs itself once rank 0 is in the collective; "hung": rank 1 never
calls it), timeout in seconds, output directory.
"""
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_plugin  # noqa: F401

mode, timeout, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
dist.init_process_group("emu", timeout=datetime.timedelta(seconds=timeout))
rank = dist.get_rank()
dev = torch.device(f"emu:{rank}")
t = torch.ones(1024, device=dev)
dist.all_reduce(t)  # collective #1: both ranks are up
marker = os.path.join(out, f"{mode}.entering")
if rank == 0:
    open(marker, "w").close()
    start = time.monotonic()
    try:
        dist.all_reduce(t)  # collective #2: rank 1 is gone
        result = {"type": None, "message": "all_reduce completed"}
    except Exception as err:  # noqa: BLE001
        result = {"type": type(err).__name__, "is_dist_error": isinstance(err, dist.DistError),
                  "is_backend_error": isinstance(err, dist.DistBackendError), "message": str(err)}
    result["elapsed_s"] = time.monotonic() - start
    with open(os.path.join(out, f"{mode}.json"), "w") as f:
        json.dump(result, f)
    os._exit(0)  # the peer is gone: no destroy_process_group handshake
else:
    while not os.path.exists(marker):
        time.sleep(0.05)
    time.sleep(0.5)  # rank 0 is now waiting inside the collective
    if mode == "dead":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)  # hung: never calls the collective (the test kills it)
