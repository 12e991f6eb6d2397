"""What the chart tests in this folder share: the pinned helm (skipped, as promtool's tests are, where
e2e/build.sh has not built it), values written to a file, and objects looked up by kind and name."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm


def helm_built() -> bool:
    try:
        helm.helm_binary()
    except FileNotFoundError:
        return False
    return True


def crds_cached() -> bool:
    try:
        helm.crd_directory()
    except FileNotFoundError:
        return False
    return True


# helm runs as a program: with the other subprocess tests, outside `make check`.
NEEDS_HELM = [
    pytest.mark.subprocess,
    pytest.mark.skipif(not helm_built(), reason="helm is not built: run `bash e2e/build.sh` (needs Go)"),
]


def values_file(directory: Path, values: dict[str, Any]) -> Path:
    """``values`` as a values file; named by its content, so helm's render cache never mixes two."""
    text = yaml.safe_dump(values, sort_keys=True)
    path = directory / f"values-{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    path.write_text(text)
    return path


def template(*args: str) -> tuple[int, str]:
    """`helm template healer <chart> ARGS` as it exits: (exit status, stderr)."""
    result = helm.helm("template", "healer", str(helm.CHART), *args, check=False)
    return result.returncode, result.stderr.strip()


def named(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]
