"""Text views of rollback runs, in the spirit of `argo list` and `argo get`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any


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


def format_runs(runs: Sequence[dict[str, Any]]) -> str:
    header = f"{'NAME':<52}{'STATUS':<11}{'AGE':<8}{'DURATION':<10}MODEL  FROM→TO  INCIDENT"
    lines = [header]
    for run in runs:
        meta, status = run["metadata"], run.get("status", {})
        labels = meta.get("labels", {})
        to_version = _output(run, "to-version") or labels.get("healer.io/to-version", "")
        lines.append(
            f"{meta['name']:<52}{status.get('phase', 'Pending'):<11}"
            f"{_duration(meta.get('creationTimestamp'), None):<8}"
            f"{_duration(status.get('startedAt'), status.get('finishedAt')):<10}"
            f"{labels.get('healer.io/model', '')}  v{labels.get('healer.io/from-version', '')}→{to_version}  "
            f"{labels.get('healer.io/incident', '')}"
        )
    return "\n".join(lines)


def format_run(run: dict[str, Any]) -> str:
    meta, status = run["metadata"], run.get("status", {})
    lines = [
        f"Name:        {meta['name']}",
        f"Title:       {meta.get('annotations', {}).get('workflows.argoproj.io/title', '')}",
        f"Status:      {status.get('phase', 'Pending')}",
    ]
    if status.get("message"):
        lines.append(f"Message:     {status['message']}")
    lines += [
        f"Created:     {meta.get('creationTimestamp', '')}",
        f"Started:     {status.get('startedAt', '')}",
        f"Finished:    {status.get('finishedAt', '')}",
        f"Duration:    {_duration(status.get('startedAt'), status.get('finishedAt'))}",
        "Parameters:",
    ]
    for parameter in run.get("spec", {}).get("arguments", {}).get("parameters", []):
        lines.append(f"  {parameter['name']}: {parameter.get('value', '')}")
    lines += ["", f"{'STEP':<40}{'TEMPLATE':<12}{'PHASE':<11}{'DURATION':<10}MESSAGE"]
    for node in sorted(status.get("nodes", {}).values(), key=lambda n: n.get("startedAt", "")):
        if node.get("type") != "Pod" and node.get("type") != "Skipped":
            continue
        lines.append(
            f"{node['displayName']:<40}{node.get('templateName', ''):<12}{node.get('phase', ''):<11}"
            f"{_duration(node.get('startedAt'), node.get('finishedAt')):<10}{node.get('message', '')}"
        )
        for parameter in node.get("outputs", {}).get("parameters", []):
            if parameter["name"] == "phases" and parameter.get("value"):
                for phase in json.loads(parameter["value"]):
                    lines.append(
                        f"  └ {phase['name']:<36}{'':<12}{phase['outcome']:<11}{phase['duration_s']:<10}"
                        f"{phase.get('error', '')}"
                    )
    return "\n".join(lines)


def _output(run: dict[str, Any], name: str) -> str:
    for node in run.get("status", {}).get("nodes", {}).values():
        for parameter in node.get("outputs", {}).get("parameters", []):
            if parameter["name"] == name and parameter.get("value"):
                return str(parameter["value"])
    return ""
