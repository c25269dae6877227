"""``torch.emu.profile()``: projected performance of one block of code, per op, per engine.

    with torch.emu.profile() as prof:
        model(x)
    report = prof.report()            # fields: see ProfileReport
    print(report)                     # report.table(): for people
    report.to_json("report.json")
    prof.export_chrome_trace("trace.json")    # open in https://ui.perfetto.dev
    prof.save_roofline("roofline.png")

    python -m torch_plugin.profile [--out-dir DIR] script.py [args...]
    python -m torch_plugin.profile --sweep device.hbm.bandwidth_gb_per_s=800,1600,3200 script.py

Times are modelled (the host clock and the devices' DES clock, runtime/host_clock.py), never
wall time, except ``wall_time_s``. How it works, so that profiling stays cheap: while the
block runs, the plugin's op wrappers keep a record per aten op instance (name, operands, path,
the modelled host time it began and ended) and the runtime hooks note each launch, copy and
fill's command seq on the op records open on its thread. Everything about the device (which
engines, when, cycles, bound, tiling) is read after the block from the firmware's trace
records, matched by seq (the correlation id). A command belongs to the innermost op that was
open when it was submitted.

The block starts and ends with a synchronisation of every device in use, so its projected
times are its own work, complete. Not modelled: the Python time of the plugin between runtime
calls (the host clock only moves by the costs of runtime/host_clock.py).

One subject per module:

- ``block``: the ``with`` block (``Profile``) and the host clock the op records read;
- ``observer``: what every profiler listens to (the hook protocol, the firmware trace window);
- ``kineto``: the feed of PyTorch's profiler (``torch.profiler``, csrc/profiler.cpp);
- ``analysis``: the block read back after it ended, shared by the report and the trace;
- ``commands``: a command's trace records merged into one; ``attribution``: commands to ops;
- ``summary``: the block's totals and the ``ProfileReport``; ``report``: its rows and text;
- ``lanes``: the order of the trace's lanes; ``chrome_trace``: the Perfetto trace;
- ``roofline``: the roofline plot; ``progress``: the command line's progress bar;
- ``run``: a script under the profiler; ``sweeps``: what-if reruns; ``cli``: ``python -m``.
"""
from torch_plugin.profile.block import Profile
from torch_plugin.profile.cli import main
# csrc/profiler.cpp's kineto session calls these two on this package; tests read the open feeds here.
from torch_plugin.profile.kineto import _torch_feeds, _torch_profiler_start, _torch_profiler_stop  # noqa: F401
from torch_plugin.profile.report import HOST_PATH, OUTSIDE_OPS, RUNTIME_PATH, OpRow, ProfileReport
from torch_plugin.profile.run import DEFAULT_OUT_DIR, REPORT_FILE, ROOFLINE_FILE, TRACE_FILE, run_script
from torch_plugin.profile.sweeps import parse_sweep, sweep, sweep_table

__all__ = ["Profile", "ProfileReport", "OpRow", "OUTSIDE_OPS", "RUNTIME_PATH", "HOST_PATH", "DEFAULT_OUT_DIR",
           "REPORT_FILE", "TRACE_FILE", "ROOFLINE_FILE", "run_script", "parse_sweep", "sweep", "sweep_table",
           "main"]
