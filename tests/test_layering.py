"""Each layer imports only itself and the layer directly below it (DESIGN.md)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["torch_plugin", "runtime", "driver", "firmware", "emulator"]
PROJECT = set(LAYERS)


def imported_layers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in PROJECT)
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_the_layer_below(layer):
    index = LAYERS.index(layer)
    allowed = {layer} | ({LAYERS[index + 1]} if index + 1 < len(LAYERS) else set())
    offenders = {}
    for path in sorted((ROOT / layer).rglob("*.py")):
        extra = imported_layers(path) - allowed
        if extra:
            offenders[str(path.relative_to(ROOT))] = sorted(extra)
    assert not offenders, f"{layer} may import only {sorted(allowed)}; found {offenders}"


def test_only_the_plugin_imports_torch():
    users = [str(p.relative_to(ROOT)) for layer in LAYERS[1:] for p in (ROOT / layer).rglob("*.py")
             if "torch" in {n.split(".")[0] for n in _module_names(p)}]
    assert users == []


def _module_names(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
