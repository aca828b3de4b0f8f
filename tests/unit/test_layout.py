"""The house rules, checked on the source: imports point down the stages, modules and functions stay readable."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "appliance"
# Lower number = lower layer. A module may import from its own package and from lower layers only; two different
# packages (or top-level modules) on one layer never import each other. Every package and top-level module of
# `appliance/` has a layer here (`test_every_unit_has_a_layer`).
LAYERS = {
    # plumbing that imports nothing of ours but settings: the settings, the stage vocabulary, where models live,
    # the CLI's HTTP client, and the package's own `__init__` (`__version__`)
    "__init__": 0, "config": 0, "timings": 0, "paths": 0, "client": 0,
    # the stages
    "text": 1, "store": 1, "parse": 1,
    # the router (features, weights file, decision, training) needs only `text`: the model build (`models`), the
    # answer path and the evaluation import it from below
    "encode": 2, "index": 2, "router": 2,
    "cache": 3,
    "retrieve": 4,
    "generate": 5, "models": 5, "grounding": 5,
    # above the stages: the write path and the answer path, side by side (neither imports the other)
    "library": 6, "answers": 6,
    "cluster": 7,  # a tenant's second copy is written through the library
    "wiring": 8,  # the one module that builds the services
    # the box's upkeep (backup locks the data folder as wiring does) and the evaluations (they open the services)
    "box": 9, "evaluate": 9,
    "serve": 10,  # HTTP over the services; reads the API keys with box's keys file
    "cli": 11,  # the `appliance` command on top: only it imports `serve`
    "__main__": 12,  # `python -m appliance` runs the CLI
}
STAGES_TOP = LAYERS["grounding"]
# Above the stages, only the library imports the store: the other services reach documents through the `Library`,
# and its records (a listed document, the journal's changes the cluster carries between boxes) through
# `appliance.library`'s surface. Besides it: `wiring` builds the store it hands to the library; `box`'s backup copies
# and checks the database as a whole (`store.copy_database`, `copied_contents`), which no library call does. The
# stages below the library (index, retrieve) use the store's records as what they are built from, as any lower
# layer may.
STORE_OWNERS = {"store", "library", "wiring", "box"}
# Nor does a module reach past a `Library` to its store (`<a library>.store`), inside `library` too: file ingest
# asks the Library (`stored_versions`, `file_documents`, `find_file`, ...), the cluster's replicator its
# `journal` (peer cursors, the journal paged for a peer).
REACH_PAST_LIBRARY: set[str] = set()
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _unit(path: Path) -> str:
    """The layer unit a module belongs to: its stage package, or its own name at the top level."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def _units() -> set[str]:
    """Every package and top-level module of `appliance/`."""
    return {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def _layer(unit: str) -> int:
    return LAYERS[unit]


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
            # `from appliance import __version__`: a name of the package's own `__init__`, not a unit
            units.update(name if parts or name in _units() else "__init__" for name in names)
        elif isinstance(node, ast.Import):
            units.update(a.name.split(".")[1] for a in node.names if a.name.startswith("appliance."))
    return units


def test_every_unit_has_a_layer():
    assert _units() == set(LAYERS), f"not placed: {sorted(_units() - set(LAYERS))}; " \
                                    f"gone: {sorted(set(LAYERS) - _units())}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path):
    unit = _unit(path)
    for other in _imported_units(path) - {unit}:
        mine, theirs = _layer(unit), _layer(other)
        assert theirs < mine, f"{path.relative_to(PACKAGE)} ({unit}, layer {mine}) imports {other} (layer {theirs})"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_library_reaches_the_store(path: Path):
    unit = _unit(path)
    if _layer(unit) > STAGES_TOP and unit not in STORE_OWNERS:
        assert "store" not in _imported_units(path), \
            f"{path.relative_to(PACKAGE)} imports appliance.store: go through the Library (appliance.library)"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_reaches_past_the_library_to_its_store(path: Path):
    if str(path.relative_to(PACKAGE)) in REACH_PAST_LIBRARY:
        return
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "store":
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            assert name != "library", f"{path.relative_to(PACKAGE)}:{node.lineno} reads the library's store"


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
