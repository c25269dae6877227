"""``python -m torch_plugin.profile``: the command line (``main``).

``script.py [args...]`` runs the script under the profiler (run.py); ``--sweep FIELD=V1,V2,...``
reruns it per value (sweeps.py) and prints the table. Errors a user can fix (no such script, a
bad sweep) are one line on stderr and exit status 2; a script's own non-zero exit is passed on.
Leaves out the profiling itself (block.py).
"""
from __future__ import annotations

import argparse
import sys

import runtime
from torch_plugin.profile.run import DEFAULT_OUT_DIR, run_script
from torch_plugin.profile.sweeps import parse_sweep, sweep, sweep_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_plugin.profile",
        description="Run a Python script under torch.emu.profile(): writes report.json, trace.json (Perfetto) "
                    "and roofline.png, and prints the top kernels and the verdict (docs/profiling.md).")
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR, help=f"where to write (default ./{DEFAULT_OUT_DIR})")
    parser.add_argument("--sweep", metavar="FIELD=V1,V2,...", default=None,
                        help="rerun once per value with one hardware field changed (dotted path, e.g. "
                             "device.hbm.bandwidth_gb_per_s=800,1600,3200) and tabulate the projected time")
    parser.add_argument("--top", type=int, default=10, help="kernels to list (default 10)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quiet", action="store_true", help="print nothing (the files are still written)")
    parser.add_argument("script", help="the Python script to run, unmodified")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    ns = parser.parse_args(argv)
    if ns.sweep is not None:
        try:
            field, values = parse_sweep(ns.sweep)
            results = sweep(ns.script, field, values, ns.args, ns.out_dir, progress=not ns.no_progress)
        except (ValueError, FileNotFoundError, runtime.EmuError, RuntimeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if not ns.quiet:
            print(sweep_table(field, results))
        return 0
    try:
        run_script(ns.script, ns.args, ns.out_dir, progress=not ns.no_progress, top=ns.top, quiet=ns.quiet)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0
