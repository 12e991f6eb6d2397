"""The figures of the code's structure (files, the largest file, function and class, how many names the
import contracts list, private names imported across modules), and the limits `make lint` holds them to.

    python tools/structure.py           # the figures
    python tools/structure.py --check   # exit 1 naming each file, function or class over its limit
                                        # and each `from healer.x import _private` across modules
A development tool, not shipped."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("healer", "probes", "workflows")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 400
# Declarations, not logic: one dataclass field per settings key, each with its doc line and bounds.
LONG_FILES_ALLOWED = frozenset({"healer/settings/sections.py"})


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def spans(tree: ast.AST, kind: tuple[type, ...]) -> list[tuple[int, str]]:
    return [
        ((node.end_lineno or node.lineno) - node.lineno + 1, node.name)
        for node in ast.walk(tree)
        if isinstance(node, kind)
    ]


def over_limits(path: Path, text: str, tree: ast.AST) -> list[str]:
    name = str(path.relative_to(ROOT))
    found = []
    if len(text.splitlines()) > MAX_FILE_LINES and name not in LONG_FILES_ALLOWED:
        found.append(f"{name}: {len(text.splitlines())} lines (at most {MAX_FILE_LINES})")
    for lines, function in spans(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if lines > MAX_FUNCTION_LINES:
            found.append(f"{name}: function {function} has {lines} lines (at most {MAX_FUNCTION_LINES})")
    for lines, klass in spans(tree, (ast.ClassDef,)):
        if lines > MAX_CLASS_LINES:
            found.append(f"{name}: class {klass} has {lines} lines (at most {MAX_CLASS_LINES})")
    return found


def longest(tree: ast.AST, kind: tuple[type, ...]) -> tuple[int, str]:
    best = (0, "")
    for node in ast.walk(tree):
        if isinstance(node, kind):
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            best = max(best, (span, node.name))
    return best


def is_our_module(dotted: str) -> bool:
    path = ROOT / dotted.replace(".", "/")
    return dotted.split(".", maxsplit=1)[0] in PACKAGES and (
        path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    )


def private_imports(path: Path, tree: ast.AST) -> list[str]:
    """`from x import _name`, or `x._name` on a module of ours bound by an import, in another module."""
    where = str(path.relative_to(ROOT))
    found = []
    modules: set[str] = set()  # local names bound to one of our modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{where}: from {node.module} import {alias.name}")
                elif is_our_module(f"{node.module}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname for alias in node.names if alias.asname and is_our_module(alias.name)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def contract_names() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = 0
    for contract in config["tool"]["importlinter"]["contracts"]:
        for key in ("layers", "source_modules", "forbidden_modules", "modules"):
            for entry in contract.get(key, []):
                names += len(entry.replace("|", ":").split(":"))
    return names


def main(argv: list[str]) -> int:
    files = sources()
    rows = []
    private: list[str] = []
    over: list[str] = []
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
        over += over_limits(path, text, tree)
    rows.sort(reverse=True)
    if "--check" in argv:
        for line in over + private:
            print(line, file=sys.stderr)
        return 1 if over or private else 0
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
    sys.exit(main(sys.argv[1:]))
