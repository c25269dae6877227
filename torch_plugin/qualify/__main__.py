"""The ``python -m torch_plugin.qualify`` command line: run, compare, report, check."""
from __future__ import annotations

import argparse
import sys

from torch_plugin.qualify import gate, report, runner
from torch_plugin.qualify.suite import SuiteError, load_suite


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_plugin.qualify",
                                     description="Performance qualification: suites, artifacts, the regression gate.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a suite, one JSON artifact per workload")
    run.add_argument("suite", help="a suite file (qualification/suites/*.toml)")
    run.add_argument("--out", required=True, help="directory for the artifacts (<workload>.json)")
    run.add_argument("--only", action="append", metavar="WORKLOAD", help="run only this workload (repeatable)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    compare = sub.add_parser("compare", help="the regression gate: fail on any projected metric that moved")
    compare.add_argument("baseline", help="the baseline's artifacts (qualification/baselines/<suite>)")
    compare.add_argument("new", help="the new run's artifacts")
    compare.add_argument("--threshold", action="append", metavar="METRIC=FRACTION",
                         help="override a metric's threshold (relative, e.g. device_time_s=0.02)")
    compare.add_argument("-v", "--verbose", action="store_true", help="print the passing checks too")
    rep = sub.add_parser("report", help="a Markdown table (and a PNG chart) of a directory of artifacts")
    rep.add_argument("dir")
    rep.add_argument("--png", help="write a chart of the modelled times here")
    rep.add_argument("--readme", help="rewrite the generated table between this file's qualification markers")
    check = sub.add_parser("check", help="validate suite files without running them")
    check.add_argument("suites", nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            failed = runner.run_suite(args.suite, args.out, only=args.only, progress=not args.no_progress)
            return 1 if failed else 0
        if args.command == "compare":
            return gate.main(args.baseline, args.new, args.threshold, verbose=args.verbose)
        if args.command == "check":
            from torch_plugin import zoo
            for path in args.suites:
                suite = load_suite(path, zoo_names=set(zoo.MODELS))
                print(f"{path}: suite {suite.name!r}, {len(suite.workloads)} workloads: "
                      f"{', '.join(w.name for w in suite.workloads)}")
            return 0
        table = report.markdown(args.dir)
        print(table)
        if args.png:
            report.chart(args.dir, args.png)
            print(f"\nchart: {args.png}", file=sys.stderr)
        if args.readme:
            report.rewrite_readme(args.readme, table)
            print(f"rewrote the generated table in {args.readme}", file=sys.stderr)
        return 0
    except SuiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
