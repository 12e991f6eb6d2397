"""A drill's rollback phases (I/O): read back from the engine that ran them, for the report's timeline."""

from __future__ import annotations

import json
from typing import Any

from healer.engines import RollbackEngine


def attempt_phases(engine: RollbackEngine, name: str) -> list[list[dict[str, Any]]]:
    """Every attempt's phases of the run ``name``: its heal pods' ``phases`` outputs where the engine keeps
    a record of them (the LocalEngine, like `argo get`), else the run's final ``phases`` output."""
    get = getattr(engine, "get", None)
    attempts: list[list[dict[str, Any]]] = []
    if get is not None:
        nodes = get(name).get("status", {}).get("nodes", {}).values()
        pods = sorted(
            (n for n in nodes if n.get("type") == "Pod" and n.get("templateName") == "heal"),
            key=lambda n: str(n.get("name", "")),
        )
        for pod in pods:
            for parameter in pod.get("outputs", {}).get("parameters", []):
                if parameter.get("name") == "phases" and parameter.get("value"):
                    parsed = json.loads(parameter["value"])
                    attempts.append(parsed if isinstance(parsed, list) else [])
        if attempts:
            return attempts
    parsed = json.loads(engine.status(name).outputs.get("phases") or "[]")
    return [parsed if isinstance(parsed, list) else []]
