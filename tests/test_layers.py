"""The import structure: every module has a place in the layers contract (pyproject.toml, checked by
`lint-imports` in `make lint`), and no two modules import each other, even through others."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("healer", "probes", "workflows")


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    floors = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [name.strip() for layer in floors["layers"] for name in layer.replace("|", ":").split(":")]


def test_every_module_has_a_layer() -> None:
    """A module no layer names is checked by nothing: a new one must be placed (or sit in a layered package)."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    placed = _layers()
    packages = {m for m in graph.modules if (ROOT / m.replace(".", "/") / "__init__.py").exists()}
    unplaced = sorted(
        m for m in graph.modules if m not in packages and not any(m == p or m.startswith(p + ".") for p in placed)
    )
    assert unplaced == [], f"modules missing from the layers contract in pyproject.toml: {unplaced}"


def test_no_import_cycles_between_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = sorted(graph.modules)
    cycles = [
        (a, b)
        for a in modules
        for b in graph.find_modules_directly_imported_by(a)
        if b != a and graph.chain_exists(importer=b, imported=a)
    ]
    assert cycles == [], f"imports that close a cycle (module -> module): {cycles}"


def _tool(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"tools_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_floors_in_docs_architecture_are_drawn_from_the_code() -> None:
    """docs/architecture.md's table of floors is generated from the contracts and the docstrings."""
    assert _tool("architecture").main(["--check"]) == 0, "run `python tools/architecture.py`"


def test_the_structure_keeps_its_limits() -> None:
    """No file over 600 lines, function over 80, class over 400; no private name imported across modules
    (`python tools/structure.py --check` names each)."""
    assert _tool("structure").main(["--check"]) == 0
