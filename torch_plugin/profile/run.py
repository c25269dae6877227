"""One unmodified script under the profiler: ``run_script`` and the summary it prints.

Runs the script as ``python script args`` would (its argv, its folder first on sys.path,
``__name__ == "__main__"``) inside one ``torch.emu.profile()`` block and writes the report, the
Chrome trace and the roofline into one folder. Leaves out the argument parsing (cli.py) and
reruns with other hardware (sweeps.py).
"""
from __future__ import annotations

import os
import runpy
import sys

from torch_plugin.profile.block import Profile
from torch_plugin.profile.progress import Progress
from torch_plugin.profile.report import ProfileReport

DEFAULT_OUT_DIR = "emu_profile"
REPORT_FILE, TRACE_FILE, ROOFLINE_FILE = "report.json", "trace.json", "roofline.png"


def require_script(script: str) -> None:
    """The error of a script that is not there (the command line exits 2 on it)."""
    if not os.path.isfile(script):
        raise FileNotFoundError(f"python -m torch_plugin.profile: no such script: {script}")


def run_script(script: str, args=(), out_dir: str = DEFAULT_OUT_DIR, progress: bool = True,
               top: int = 10, quiet: bool = False) -> ProfileReport:
    """Runs ``script`` (as ``python script args``) under the profiler and writes ``report.json``,
    ``trace.json`` and ``roofline.png`` into ``out_dir``. Returns the report. The script's own
    ``SystemExit`` with a non-zero code, or its exception, is re-raised after the files are written."""
    require_script(script)
    os.makedirs(out_dir, exist_ok=True)
    prof = Profile()
    bar = Progress(progress, prof, desc="run script")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    failure = None
    try:
        bar.watch_ops()
        with prof:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exit_:
                if exit_.code not in (None, 0):
                    failure = exit_
            except BaseException as err:  # the script's error: still report what ran
                failure = err
        bar.step()
        bar.phase("report")
        report = prof.report()
        report.to_json(os.path.join(out_dir, REPORT_FILE))
        bar.step()
        bar.phase("trace")
        prof.export_chrome_trace(os.path.join(out_dir, TRACE_FILE))
        bar.step()
        bar.phase("roofline")
        prof.save_roofline(os.path.join(out_dir, ROOFLINE_FILE))
        bar.step()
    finally:
        bar.close()
        sys.argv, sys.path[:] = saved_argv, saved_path
    if not quiet:
        print(_cli_summary(report, out_dir, top))
    if failure is not None:
        raise failure
    return report


def _cli_summary(report: ProfileReport, out_dir: str, top: int) -> str:
    lines = report.summary_lines()
    kernels = report.top_kernels(top)
    if kernels:
        lines += ["", f"top kernels (of {len(report.ops)} op rows):",
                  f"  {'kernel':<34}{'count':>7}{'time us':>12}{'share':>8}{'% peak':>8}  bound"]
        for k in kernels:
            lines.append(f"  {k['kernel'][:34]:<34}{k['count']:>7}{k['time_s'] * 1e6:>12.1f}"
                         f"{100 * k['share']:>7.1f}%{100 * k['fraction_of_peak']:>7.1f}%  {k['bound']}")
    lines += ["", f"verdict: {report.verdict}",
              f"wrote {os.path.join(out_dir, REPORT_FILE)}, {os.path.join(out_dir, TRACE_FILE)} "
              f"(open in https://ui.perfetto.dev), {os.path.join(out_dir, ROOFLINE_FILE)}"]
    return "\n".join(lines)
