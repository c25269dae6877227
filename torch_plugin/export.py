"""torch.export for emu: the compatibility record, load-time checks, the missing-package diagnostic.

``save(ep, path)`` is ``torch.export.save`` plus a compatibility record in the archive's extra
files (``emu_compat.json``): the torch version, the plugin's package and version, the emu::
operator-set version and the emu:: operators the program calls. ``load(path)`` checks that record
against this process before ``torch.export.load`` deserializes anything, and names what is wrong:

  * an emu:: operator the program calls is not registered here (the plugin is not imported, or
    autoload is off: ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``): ``MissingOperatorError`` naming the
    package to install/import and the operators; where the plugin is registered but lacks one, the
    message names both operator-set versions;
  * the archive places tensors on the emu device and the device is not registered here;
  * the archive's operator set is newer than this plugin's, or it was produced by another torch
    major.minor: ``CompatibilityError`` with both versions.

The checks read the serialized program itself (call targets, tensor devices, the writer's torch
version), so an archive written by plain ``torch.export.save`` is diagnosed too; the record only
adds the plugin and operator-set versions.

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
from typing import NamedTuple  # noqa: E402

RECORD = "emu_compat.json"
PACKAGE = "seed-emu"           # the distribution that provides the emu:: operators
IMPORT_NAME = "torch_plugin"
RECORD_FORMAT = 1
OPERATOR_SET_VERSION = 1       # bump when an emu:: schema or its semantics change
# how the serializer names a call of an emu:: operator ("torch.ops.emu.fused_add_rms_norm.default")
_TARGET_PATTERN = re.compile(r"(?:torch\.ops\.)?emu[.:]{1,2}([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")


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


class ArchiveInfo(NamedTuple):
    """What a .pt2 says about emu, read from its JSON without deserializing anything. (A NamedTuple,
    not a dataclass: the module also runs loaded from its file path, outside sys.modules.)"""
    record: dict | None          # the compatibility record (None: written by plain torch.export.save)
    operators: tuple[str, ...]   # the emu:: operators its graphs call ("emu::name.overload")
    emu_tensors: int             # tensor descriptions on an emu device (a tensor may appear in several)
    torch_version: str | None    # the torch that wrote it (the record's, else the model's own field)


def _walk(value, operators: set, devices: list) -> None:
    """Collects emu:: call targets and emu device descriptions anywhere in a serialized program (the
    top graph, nested graphs of higher-order operators, weight and constant configs)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            target, device = item.get("target"), item.get("device")
            if isinstance(target, str):
                found = _TARGET_PATTERN.fullmatch(target)
                if found:
                    operators.add(f"emu::{found.group(1)}.{found.group(2)}")
            if isinstance(device, dict) and device.get("type") == "emu":
                devices.append(device)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def inspect_archive(path) -> ArchiveInfo:
    """The emu content of an archive written by ``torch.export.save`` or by :func:`save`."""
    record, operators, devices, model_torch = None, set(), [], None
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(f"/extra/{RECORD}"):
                record = json.loads(archive.read(name).decode() or "null")
            elif name.endswith(".json") and ("/models/" in name or "/data/" in name):
                try:
                    content = json.loads(archive.read(name).decode(errors="replace"))
                except ValueError:
                    continue
                _walk(content, operators, devices)
                if "/models/" in name and isinstance(content, dict) and content.get("torch_version"):
                    model_torch = str(content["torch_version"])
    if record:
        operators.update(record.get("operators", ()))
    torch_version = str(record["torch_version"]) if record and record.get("torch_version") else model_torch
    return ArchiveInfo(record, tuple(sorted(operators)), len(devices), torch_version)


def read_record(path) -> tuple[dict | None, list[str]]:
    """(the compatibility record or None, the emu:: operators the archive calls)."""
    info = inspect_archive(path)
    return info.record, list(info.operators)


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


def _plugin_registered() -> bool:
    """Whether the emu device is registered in this process (the plugin imported or autoloaded)."""
    import torch
    plugin = sys.modules.get(IMPORT_NAME)
    return (getattr(plugin, "_registered", False) and torch._C._get_privateuse1_backend_name() == "emu")


def _install_hint() -> str:
    return (f"These come from the package '{PACKAGE}' (the emu device plugin): install it and "
            f"`import {IMPORT_NAME}` before loading (it is also loaded by `import torch` unless "
            f"TORCH_DEVICE_BACKEND_AUTOLOAD=0).")


def _written_with(record: dict | None) -> str:
    if not record:
        return "an unknown emu operator set (no compatibility record: written by torch.export.save)"
    return f"emu operator set version {record.get('operator_set_version')} (plugin {record.get('plugin_version')})"


def diagnose(path) -> list[str]:
    """What prevents loading ``path`` here (empty: nothing)."""
    import torch
    info = inspect_archive(path)
    record, problems = info.record, []
    missing = [op for op in info.operators if not _registered(op)]
    plugin_here = _plugin_registered()
    if missing and plugin_here:
        problems.append(
            f"{path}: the program calls {', '.join(missing)}, which this plugin ({PACKAGE} {plugin_version()}, "
            f"emu operator set version {OPERATOR_SET_VERSION}) does not provide; the archive was written with "
            f"{_written_with(record)}: upgrade {PACKAGE}.")
    elif missing:
        problems.append(
            f"{path}: the program calls {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f"registered in this process. {_install_hint()}")
    if info.emu_tensors and not plugin_here:
        problems.append(
            f"{path}: the archive places tensors on the emu device ({info.emu_tensors} tensor descriptions in its "
            f"graphs and weights), which is not registered in this process. {_install_hint()}")
    if record:
        theirs = record.get("operator_set_version")
        if isinstance(theirs, int) and theirs > OPERATOR_SET_VERSION:
            problems.append(f"{path}: written with emu operator set version {theirs} (plugin "
                            f"{record.get('plugin_version')}); this plugin ({plugin_version()}) implements "
                            f"version {OPERATOR_SET_VERSION}: upgrade {PACKAGE}.")
    saved_torch = info.torch_version
    if saved_torch and saved_torch.split(".")[:2] != torch.__version__.split(".")[:2]:
        problems.append(f"{path}: written by torch {saved_torch}, this process runs torch "
                        f"{torch.__version__} (export archives are checked for the same major.minor).")
    return problems


def load(path, **kwargs):
    """torch.export.load after the compatibility checks (raises the diagnosis, clearly)."""
    import torch
    problems = diagnose(path)
    if problems:
        missing_ops = any(not _registered(op) for op in inspect_archive(path).operators)
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
        info = inspect_archive(argv[1])
        print(f"{argv[1]}: loadable here (written by torch {info.torch_version or 'unknown'} with "
              f"{_written_with(info.record)}; emu operators: {', '.join(info.operators) or 'none'}; "
              f"emu tensor descriptions: {info.emu_tensors}; record: {info.record})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
