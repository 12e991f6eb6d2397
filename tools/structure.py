"""The figures of the code's structure, for docs/architecture.md and a change's closing note:
files, the largest file, function and class, the layers contract's length, private names imported
across modules and import cycles. `python tools/structure.py` (a development tool, not shipped)."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("healer", "probes", "workflows")


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def longest(tree: ast.AST, kind: tuple[type, ...]) -> tuple[int, str]:
    best = (0, "")
    for node in ast.walk(tree):
        if isinstance(node, kind):
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            best = max(best, (span, node.name))
    return best


def private_imports(path: Path, tree: ast.AST) -> list[str]:
    """`from x import _name` where x is another module of ours (a package's own __init__ may not either)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            found += [
                f"{path.relative_to(ROOT)}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_")
            ]
    return found


def contract_names() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = 0
    for contract in config["tool"]["importlinter"]["contracts"]:
        for key in ("layers", "source_modules", "forbidden_modules", "modules"):
            for entry in contract.get(key, []):
                names += len(entry.replace("|", ":").split(":"))
    return names


def main() -> int:
    files = sources()
    rows = []
    private: list[str] = []
    biggest_function = biggest_class = (0, "")
    for path in files:
        text = path.read_text()
        tree = ast.parse(text)
        rows.append((len(text.splitlines()), str(path.relative_to(ROOT))))
        function = longest(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
        klass = longest(tree, (ast.ClassDef,))
        biggest_function = max(biggest_function, (function[0], f"{path.relative_to(ROOT)}:{function[1]}"))
        biggest_class = max(biggest_class, (klass[0], f"{path.relative_to(ROOT)}:{klass[1]}"))
        private += private_imports(path, tree)
    rows.sort(reverse=True)
    print(f"files: {len(files)}")
    print(f"largest file: {rows[0][1]} ({rows[0][0]} lines); over 600 lines: {[r[1] for r in rows if r[0] > 600]}")
    print(f"largest function: {biggest_function[1]} ({biggest_function[0]} lines)")
    print(f"largest class: {biggest_class[1]} ({biggest_class[0]} lines)")
    print(f"import-linter contracts name {contract_names()} modules")
    print(f"private names imported across modules: {len(private)}")
    for line in private:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
