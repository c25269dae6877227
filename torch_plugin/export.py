"""torch.export for emu: the compatibility record, load-time checks, the missing-package diagnostic.

``save(ep, path)`` is ``torch.export.save`` plus a compatibility record in the archive's extra
files (``emu_compat.json``): the torch version, the plugin's package and version, the emu::
operator-set version and the emu:: operators the program calls. ``load(path)`` checks that record
against this process before ``torch.export.load`` deserializes anything, and names what is wrong:

  * an emu:: operator the program calls is not registered here (the plugin is not imported, or
    autoload is off: ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``): ``MissingOperatorError`` naming the
    package to install/import and the operators;
  * the archive's operator set is newer than this plugin's, or it was produced by another torch
    major.minor: ``CompatibilityError`` with both versions.

This module imports nothing of the plugin at import time, so it also runs where the plugin is not
registered: ``python torch_plugin/export.py check model.pt2`` prints the diagnosis of an archive
(exit status 1 if it cannot be loaded here).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run as a script: its folder (torch_plugin/) must not shadow modules
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import json  # noqa: E402
import re  # noqa: E402
import zipfile  # noqa: E402

RECORD = "emu_compat.json"
PACKAGE = "seed-emu"           # the distribution that provides the emu:: operators
IMPORT_NAME = "torch_plugin"
RECORD_FORMAT = 1
OPERATOR_SET_VERSION = 1       # bump when an emu:: schema or its semantics change
_OP_PATTERN = re.compile(r'"emu\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)"')


class ExportCompatibilityError(RuntimeError):
    """A .pt2 cannot be loaded in this process (see the message)."""


class MissingOperatorError(ExportCompatibilityError):
    """The program calls emu:: operators that are not registered in this process."""


CompatibilityError = ExportCompatibilityError


def plugin_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def operators_of(ep) -> list[str]:
    """The emu:: operators an ExportedProgram calls ("emu::name.overload")."""
    found = set()
    for node in ep.graph.nodes:
        name = getattr(node.target, "_schema", None)
        if name is not None and name.name.startswith("emu::"):
            overload = name.overload_name or "default"
            found.add(f"{name.name}.{overload}")
    return sorted(found)


def compatibility_record(ep) -> dict:
    import torch
    return {"format": RECORD_FORMAT, "torch_version": torch.__version__, "plugin": PACKAGE,
            "plugin_version": plugin_version(), "operator_set_version": OPERATOR_SET_VERSION,
            "operators": operators_of(ep)}


def save(ep, path, extra_files: dict | None = None, **kwargs) -> None:
    """torch.export.save with the compatibility record added to the archive."""
    import torch
    files = dict(extra_files or {})
    files[RECORD] = json.dumps(compatibility_record(ep), sort_keys=True)
    torch.export.save(ep, path, extra_files=files, **kwargs)


def read_record(path) -> tuple[dict | None, list[str]]:
    """(the compatibility record or None, the emu:: operators the serialized graph names), read from
    the archive without deserializing it."""
    record, operators = None, set()
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(f"/extra/{RECORD}"):
                record = json.loads(archive.read(name).decode() or "null")
            elif name.endswith(".json") and "/models/" in name:
                for op, overload in _OP_PATTERN.findall(archive.read(name).decode(errors="replace")):
                    operators.add(f"emu::{op}.{overload}")
    if record:
        operators.update(record.get("operators", ()))
    return record, sorted(operators)


def _registered(op: str) -> bool:
    import torch
    name, _, overload = op.partition(".")
    namespace, _, opname = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), opname)
        getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return False
    return True


def diagnose(path) -> list[str]:
    """What prevents loading ``path`` here (empty: nothing)."""
    import torch
    record, operators = read_record(path)
    problems = []
    missing = [op for op in operators if not _registered(op)]
    if missing:
        problems.append(
            f"{path}: the program calls {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f"registered in this process. These operators come from the package '{PACKAGE}' (the emu "
            f"device plugin): install it and `import {IMPORT_NAME}` before loading (it is also loaded by "
            f"`import torch` unless TORCH_DEVICE_BACKEND_AUTOLOAD=0).")
    if record:
        theirs = record.get("operator_set_version")
        if isinstance(theirs, int) and theirs > OPERATOR_SET_VERSION:
            problems.append(f"{path}: written with emu operator set version {theirs} (plugin "
                            f"{record.get('plugin_version')}); this plugin ({plugin_version()}) implements "
                            f"version {OPERATOR_SET_VERSION}: upgrade {PACKAGE}.")
        saved_torch = str(record.get("torch_version", ""))
        if saved_torch.split(".")[:2] != torch.__version__.split(".")[:2]:
            problems.append(f"{path}: written by torch {saved_torch}, this process runs torch "
                            f"{torch.__version__} (export archives are checked for the same major.minor).")
    return problems


def load(path, **kwargs):
    """torch.export.load after the compatibility checks (raises the diagnosis, clearly)."""
    import torch
    problems = diagnose(path)
    if problems:
        missing_ops = any("not registered" in p for p in problems)
        raise (MissingOperatorError if missing_ops else ExportCompatibilityError)("\n".join(problems))
    return torch.export.load(path, **kwargs)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "check":
        print("usage: python torch_plugin/export.py check MODEL.pt2", file=sys.stderr)
        return 2
    problems = diagnose(argv[1])
    for line in problems:
        print(line)
    if not problems:
        record, operators = read_record(argv[1])
        print(f"{argv[1]}: loadable here (record: {record}, emu operators: {operators or 'none'})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
