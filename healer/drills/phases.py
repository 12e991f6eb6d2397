"""A drill's rollback phases (I/O): read back from the engine that ran them, for the report's timeline;
and a release's floor, from its outputs."""

from __future__ import annotations

import json
from typing import Any

import structlog

from healer.core.drill_verdict import phase_spans
from healer.engines import RollbackEngine

log = structlog.get_logger(__name__)


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


def run_phases(engine: RollbackEngine, name: str, injected: Any) -> list[Any]:
    """Every attempt's phases: from the run record's heal pods where the engine keeps one (the
    LocalEngine, like `argo get`), else the run's final ``phases`` output."""
    try:
        attempts = attempt_phases(engine, name)
    except Exception as exc:  # the timeline loses its phases, the verdict does not depend on them
        log.warning("drill_phases_unavailable", workflow=name, error=str(exc))
        return []
    return [span for phases in attempts for span in phase_spans(name, phases, injected.wall)]


def release_floor_s(outputs: Any, bake_s: float) -> float | None:
    """What a release cannot take less than: the canary's load, the bake, and each roll-out wave's
    slowest load, one after another (None: the run did not get that far)."""
    try:
        canary = json.loads(outputs.get("canary") or "{}")
        roll_out = json.loads(outputs.get("roll-out") or "{}")
    except ValueError:
        return None
    if "load" not in canary or "waves" not in roll_out:
        return None
    replicas = roll_out.get("replicas") or {}
    waves = [
        max((float((replicas.get(url) or {}).get("load", {}).get("load_s", 0.0)) for url in wave), default=0.0)
        for wave in roll_out["waves"]
    ]
    return round(float(canary["load"].get("load_s", 0.0)) + bake_s + sum(waves), 3)
