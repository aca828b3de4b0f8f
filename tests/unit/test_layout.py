"""The house rules, checked on the source: imports point down the stages, modules and functions stay readable."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "appliance"
# Lower number = lower layer. A module may import from its own package and from lower layers only; two different
# packages on one layer do not import each other. Top-level modules not listed here (wiring, library, answer,
# cli, ...) sit above every stage; `serve` is above them and only the CLI imports it.
LAYERS = {
    "config": 0, "timings": 0, "paths": 0,
    "text": 1, "store": 1, "parse": 1,
    "encode": 2, "index": 2,
    "cache": 3,
    "retrieve": 4,
    "generate": 5, "models": 5, "grounding": 5,
    "serve": 8, "cli": 9, "cli_eval": 9, "cli_ingest": 9, "cli_cluster": 9, "__main__": 9,
}
ABOVE_STAGES = 7
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _unit(path: Path) -> str:
    """The layer unit a module belongs to: its stage package, or its own name at the top level."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def _layer(unit: str) -> int:
    return LAYERS.get(unit, ABOVE_STAGES)


def _imported_units(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for a top-level module
    units = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                up = node.level - 1
                base = list(path.relative_to(PACKAGE).parts[:depth])
                if up > len(base):
                    continue
                parts = base[:len(base) - up] + (node.module.split(".") if node.module else [])
                names = [parts[0]] if parts else [alias.name for alias in node.names]
            elif node.module and node.module.split(".")[0] == "appliance":
                parts = node.module.split(".")[1:]
                names = [parts[0]] if parts else [alias.name for alias in node.names]
            else:
                continue
            units.update(names)
        elif isinstance(node, ast.Import):
            units.update(a.name.split(".")[1] for a in node.names if a.name.startswith("appliance."))
    return units


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path):
    unit = _unit(path)
    for other in _imported_units(path) - {unit, "__init__"}:
        mine, theirs = _layer(unit), _layer(other)
        assert theirs < mine or theirs == mine >= ABOVE_STAGES, \
            f"{path.relative_to(PACKAGE)} ({unit}, layer {mine}) imports {other} (layer {theirs})"


def test_modules_and_functions_are_short():
    too_long = []
    for path in _modules():
        source = path.read_text(encoding="utf-8")
        rel = path.relative_to(PACKAGE)
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)
