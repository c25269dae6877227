"""Performance qualification (support level 6): suites as data, artifacts with their provenance,
the regression gate and reports (docs/qualification.md).

    python -m torch_plugin.qualify run qualification/suites/quick.toml --out DIR
    python -m torch_plugin.qualify compare qualification/baselines/quick DIR
    python -m torch_plugin.qualify report DIR [--png chart.png] [--readme README.md]

``suite`` parses and validates suite files, ``runner`` runs each workload in a process of its
own (``worker`` measures it there), ``gate`` compares two directories of artifacts and
``report`` renders them.
"""
from torch_plugin.qualify.suite import DEFAULT_THRESHOLD, FIELDS, METRICS, Suite, SuiteError, Workload, load_suite

__all__ = ["DEFAULT_THRESHOLD", "FIELDS", "METRICS", "Suite", "SuiteError", "Workload", "load_suite"]
