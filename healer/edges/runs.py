"""Text views of rollback runs, in the spirit of `argo list` and `argo get`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from healer.core.labels import (
    ENGINE_ANNOTATION,
    ENGINE_GONE_ANNOTATION,
    FROM_VERSION_LABEL,
    INCIDENT_LABEL,
    MODEL_LABEL,
    TO_VERSION_LABEL,
)


def _parse(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _duration(start: str | None, end: str | None) -> str:
    began, ended = _parse(start), _parse(end)
    if began is None:
        return "-"
    seconds = int(((ended or dt.datetime.now(dt.UTC)) - began).total_seconds())
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _parameter(run: dict[str, Any], name: str) -> str:
    for parameter in run.get("spec", {}).get("arguments", {}).get("parameters", []):
        if parameter.get("name") == name:
            return str(parameter.get("value", ""))
    return ""


def format_runs(runs: Sequence[dict[str, Any]], *, wide: bool = False) -> str:
    """``argo list``: one row per run, newest first as given; ``wide`` adds the detecting pod and the message."""
    header = ["NAME", "STATUS", "AGE", "DURATION", "MODEL", "FROM→TO", "INCIDENT"]
    if wide:
        header += ["POD", "MESSAGE"]
    rows = [header]
    for run in runs:
        meta, status = run["metadata"], run.get("status", {})
        labels = meta.get("labels", {})
        to_version = _output(run, "to-version") or labels.get(TO_VERSION_LABEL, "")
        from_version = labels.get(FROM_VERSION_LABEL) or _release_from(run)
        row = [
            meta["name"],
            _phase(run),
            _duration(meta.get("creationTimestamp"), None),
            _duration(status.get("startedAt"), status.get("finishedAt")),
            labels.get(MODEL_LABEL, ""),
            f"{f'v{from_version}' if from_version else '?'}→{to_version}",
            labels.get(INCIDENT_LABEL, ""),
        ]
        if wide:
            row += [_parameter(run, "pod") or "-", " ".join(str(status.get("message", "")).split()) or "-"]
        rows.append(row)
    return "\n".join(_table(rows))


def format_run(run: dict[str, Any], *, wide: bool = False) -> str:
    """``argo get``: the run, its parameters and its steps; ``wide`` adds each step's node id and start."""
    meta, status = run["metadata"], run.get("status", {})
    lines = [
        f"Name:        {meta['name']}",
        f"Title:       {meta.get('annotations', {}).get('workflows.argoproj.io/title', '')}",
        f"Status:      {_phase(run)}",
    ]
    if status.get("message"):
        lines.append(f"Message:     {status['message']}")
    lines += [
        f"Created:     {meta.get('creationTimestamp', '')}",
        f"Started:     {status.get('startedAt', '')}",
        f"Finished:    {status.get('finishedAt', '')}",
        f"Duration:    {_duration(status.get('startedAt'), status.get('finishedAt'))}",
    ]
    if wide and meta.get("annotations", {}).get(ENGINE_ANNOTATION):
        lines.append(f"Engine:      {meta['annotations'][ENGINE_ANNOTATION]}")
    lines.append("Parameters:")
    for parameter in run.get("spec", {}).get("arguments", {}).get("parameters", []):
        lines.append(f"  {parameter['name']}: {parameter.get('value', '')}")
    header = ["STEP", "TEMPLATE", "PHASE", "DURATION", "MESSAGE"]
    if wide:
        header = [*header[:4], "STARTED", "NODE", "MESSAGE"]
    rows: list[list[str]] = [header]
    for node in sorted(status.get("nodes", {}).values(), key=lambda n: n.get("startedAt", "")):
        if node.get("type") != "Pod" and node.get("type") != "Skipped":
            continue
        row = [
            node["displayName"],
            node.get("templateName", ""),
            node.get("phase", ""),
            _duration(node.get("startedAt"), node.get("finishedAt")),
        ]
        if wide:
            row += [node.get("startedAt", "") or "-", node.get("id", node.get("name", ""))]
        rows.append([*row, node.get("message", "")])
        for parameter in node.get("outputs", {}).get("parameters", []):
            if parameter["name"] == "phases" and parameter.get("value"):
                for phase in json.loads(parameter["value"]):
                    extra = ["", ""] if wide else []
                    rows.append(
                        [
                            f"  └ {phase['name']}",
                            "",
                            str(phase["outcome"]),
                            str(phase["duration_s"]),
                            *extra,
                            str(phase.get("error", "")),
                        ]
                    )
    return "\n".join([*lines, "", *_table(rows)])


def _phase(run: dict[str, Any]) -> str:
    """The run's phase; "Error (engine gone)" for a LocalEngine run whose engine process died (marked,
    or seen so by healer/engines/records.py as_displayed)."""
    phase = str(run.get("status", {}).get("phase") or "Pending")
    gone = run.get("metadata", {}).get("annotations", {}).get(ENGINE_GONE_ANNOTATION) == "true"
    return f"{phase} (engine gone)" if gone else phase


def _release_from(run: dict[str, Any]) -> str:
    """A release's FROM: the stable version its canary step found (its output), else "" (not that far
    yet). A release has no from-version label: that version is known only once the release runs."""
    for name, key in (("roll-out", "from_version"), ("canary", "stable")):
        try:
            value = json.loads(_output(run, name) or "{}").get(key)
        except (ValueError, AttributeError):
            continue
        if value not in (None, ""):
            return str(value)
    return ""


def _output(run: dict[str, Any], name: str) -> str:
    for node in run.get("status", {}).get("nodes", {}).values():
        for parameter in node.get("outputs", {}).get("parameters", []):
            if parameter["name"] == name and parameter.get("value"):
                return str(parameter["value"])
    return ""
