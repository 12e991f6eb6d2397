"""An observe-mode drill's evidence that nothing was touched (I/O): the model's files where Triton reads them
and in the store (its versions, ledger, audit trail, lease), what every replica serves, and its readiness,
checked after the push against what the push left (docs/observe.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from healer.core.drill_catalog import Scenario
from healer.core.drill_verdict import Observation
from healer.edges.triton import TritonError, TritonHttp
from healer.settings import Settings
from workflows.steps.drill_observe import Watch


def repository_files(settings: Settings, model: str) -> dict[str, str]:
    """Every file of ``model`` where Triton reads it and in a filesystem store (its ``.healer/<model>`` too):
    path -> sha256. Python's bytecode caches are left out (Triton's stub writes them when it loads)."""
    roots: list[Path] = []
    live = settings.live_repository_path
    if live is not None:
        roots.append(Path(live) / model)
    store = settings.store.filesystem if settings.store is not None else None
    if store is not None:
        roots += [Path(store) / model, Path(store) / ".healer" / model]
    files: dict[str, str] = {}
    for root in dict.fromkeys(roots):
        for path in sorted(root.rglob("*")) if root.is_dir() else ():
            if path.is_file() and "__pycache__" not in path.parts:
                files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def touched(
    settings: Settings,
    model: str,
    *,
    files: Mapping[str, str],
    replicas: Sequence[str],
    version: str,
    observation: Observation,
) -> str:
    """What was touched since the push ("" nothing): a file changed, added or removed; a replica serving
    anything but the pushed version; a replica that left the Service; a rollback submitted."""
    problems = []
    now = repository_files(settings, model)
    changed = sorted(path for path in set(files) | set(now) if files.get(path) != now.get(path))
    if changed:
        problems.append(f"{len(changed)} file(s) changed: {', '.join(changed[:3])}")
    for url in replicas:
        triton = TritonHttp(url, timeout_s=5.0)
        try:
            served = triton.served_versions(model)
        except TritonError as exc:
            served = [f"unknown ({exc})"]
        finally:
            triton.close()
        if served != [version]:
            problems.append(f"{url} serves {', '.join(served) or 'nothing'}, not v{version} as pushed")
    if observation.min_ready is None or observation.min_ready < len(replicas):
        problems.append(f"readiness: {observation.min_ready} of {len(replicas)} replica(s) ready at the worst moment")
    if observation.workflows:
        problems.append(f"rollback(s) submitted: {', '.join(observation.workflows)}")
    return "; ".join(problems)


def notes(observation: Observation, *, files: Mapping[str, str], replicas: Sequence[str], version: str) -> list[str]:
    """The report's lines: the plan, and what was checked untouched."""
    lines = [f"plan: {observation.planned or 'none recorded'}"]
    if observation.untouched == "":
        lines.append(
            f"nothing touched: v{version} still served on {len(replicas)} replica(s), /readyz 200 throughout, "
            f"no rollback, the model's {len(files)} file(s) unchanged"
        )
    elif observation.untouched is not None:
        lines.append(f"touched: {observation.untouched}")
    return lines


def watching(watch: Watch, scenario: Scenario, settings: Settings, model: str) -> None:
    """An observe drill's watch (``scenario.expect.untouched``) keeps the model's files as the push left them."""
    if scenario.expect.untouched:
        watch.files = repository_files(settings, model)


def check_untouched(watch: Watch, settings: Settings, model: str, replicas: Sequence[str], injected: Any) -> None:
    """What was touched since the push, and the report's lines, kept on the watch: checked while the drill's
    target is as the watch left it (before its clean-up). ``injected``: the push (its version)."""
    if watch.files is None:
        return
    version = str(injected.version)
    found = touched(
        settings, model, files=watch.files, replicas=replicas, version=version, observation=watch.observation()
    )
    watch.untouched = found
    watch.notes = notes(watch.observation(), files=watch.files, replicas=replicas, version=version)


def watch_notes(watch: Watch | None) -> list[str]:
    """The report's lines of an observe drill's watch ([] for any other)."""
    return list(watch.notes) if watch is not None else []
