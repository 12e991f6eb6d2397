"""``healer status``: what healer is doing across the fleet right now, pod × model (pure).

The CLI reads the pods that carry a healer sidecar, each sidecar's ``/status`` (through the API
server's pod proxy) and the rollback workflows, all through the Kubernetes API, and hands them here;
this module only decides what each row says. A sidecar that could not be read is a row that says
so, never a row that looks healthy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healer.core.labels import DIAGNOSIS_ANNOTATION, INCIDENT_LABEL, MODEL_LABEL
from healer.core.pod_contract import SIDECAR_CONTAINER


@dataclass(frozen=True)
class FleetPod:
    """A pod with a healer sidecar, as the API server lists it."""

    namespace: str
    name: str
    phase: str
    ready: bool
    node: str = ""
    sidecar_port: int | None = None
    terminating: bool = False
    kept_for_diagnosis: str = ""  # the incident, when the pod is kept after an escalation


@dataclass(frozen=True)
class FleetRow:
    pod: str
    model: str
    state: str
    serving: str
    tiers: str  # the last result of each tier, e.g. "live ok, ready ok, business FAIL"
    drain: str
    incident: str
    rollback: str  # the incident's workflow and its phase
    breaker: str
    problem: str = ""  # why the row is not what a healthy one would be
    pipeline: str = ""  # a pipeline's members and the versions they run, and whom its incident blamed
    mode: str = "act"  # observe: healer decides and records a plan, never acts (docs/observe.md)
    plan: str = ""  # an observed model's last plan, in one line
    traffic: str = ""  # the traffic signal's last window per version, or why nothing was learnt (traffic_line)


@dataclass(frozen=True)
class FleetView:
    rows: tuple[FleetRow, ...]
    pods: int
    healthy: int  # rows whose model is healthy on a Ready pod
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "healthy": self.healthy,
            "rows": [row.__dict__ for row in self.rows],
            "notes": list(self.notes),
        }


def pod_from_api(pod: Mapping[str, Any]) -> FleetPod | None:
    """A pod as the API lists it, or None when it has no healer sidecar."""
    spec, meta, status = pod.get("spec") or {}, pod.get("metadata") or {}, pod.get("status") or {}
    sidecar = next((c for c in spec.get("containers") or [] if c.get("name") == SIDECAR_CONTAINER), None)
    if sidecar is None:
        return None
    port = next((p.get("containerPort") for p in sidecar.get("ports") or [] if p.get("containerPort")), None)
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    annotations = meta.get("annotations") or {}
    return FleetPod(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        phase=str(status.get("phase", "Unknown")),
        ready=conditions.get("Ready") == "True",
        node=str(spec.get("nodeName", "")),
        sidecar_port=int(port) if port else None,
        terminating=bool(meta.get("deletionTimestamp")),
        kept_for_diagnosis=str(annotations.get(INCIDENT_LABEL, "")) if annotations.get(DIAGNOSIS_ANNOTATION) else "",
    )


def fleet_view(
    pods: Sequence[FleetPod],
    statuses: Mapping[str, Mapping[str, Any] | str],
    workflows: Sequence[Mapping[str, Any]],
) -> FleetView:
    """One row per pod × model. ``statuses``: each pod's /status document, or why it could not be
    read; ``workflows``: the rollback workflows (Argo's JSON), for each incident's phase."""
    phases = _workflow_phases(workflows)
    rows: list[FleetRow] = []
    healthy = 0
    notes: list[str] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        name = f"{pod.namespace}/{pod.name}"
        document = statuses.get(name)
        pod_state = _pod_state(pod)
        if not isinstance(document, Mapping):
            why = document if isinstance(document, str) else "no /status read"
            rows.append(FleetRow(name, "-", "UNKNOWN", "-", "-", pod_state, "-", "-", "-", f"sidecar not read: {why}"))
            continue
        try:
            rows += _model_rows(name, pod, document, phases)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a sidecar of another version
            rows.append(
                FleetRow(name, "-", "UNKNOWN", "-", "-", pod_state, "-", "-", "-", f"unexpected /status: {exc!r}")
            )
            continue
        healthy += sum(1 for r in rows if r.pod == name and r.state == "healthy" and pod.ready)
        if pod.kept_for_diagnosis:
            notes.append(f"{name} is kept for diagnosis after incident {pod.kept_for_diagnosis}")
    notes += split_fleet(rows)
    return FleetView(tuple(rows), len(pods), healthy, tuple(notes))


def split_fleet(rows: Sequence[FleetRow]) -> list[str]:
    """A line per model whose pods do not all serve the same versions: what a release or a rollback cut
    off leaves (a replica swapped, the next not). Only while neither is under way is it a problem; the
    store doctor cannot see it (it reads the store, not the Tritons), so `healer status` says it."""
    by_model: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        if row.model != "-" and row.serving != "-":
            by_model.setdefault(row.model, {}).setdefault(row.serving, []).append(row.pod)
    lines = []
    for model, serving in sorted(by_model.items()):
        if len(serving) < 2:
            continue
        parts = [
            f"{'not served' if versions == 'NO' else versions} on {', '.join(sorted(pods))}"
            for versions, pods in sorted(serving.items(), key=lambda item: (-len(item[1]), item[0]))
        ]
        lines.append(
            f"split fleet: {model} is served as " + "; ".join(parts) + " (unless a release or a rollback is under "
            f"way: `healer rollback {model} VERSION`, VERSION the one to leave, puts every replica on the stable one)"
        )
    return lines


def _model_rows(name: str, pod: FleetPod, document: Mapping[str, Any], phases: Mapping[str, str]) -> list[FleetRow]:
    """One pod's rows from its /status document (healer/sidecar/views.py status_document)."""
    rows: list[FleetRow] = []
    drain = _drain(document.get("drain") or {}, _pod_state(pod))
    for model, entry in sorted((document.get("models") or {}).items()):
        incident = entry.get("incident") or {}
        workflow = entry.get("workflow") or incident.get("workflow") or ""
        rollback = f"{workflow} {phases.get(workflow, '')}".strip() if workflow else "-"
        state = str(entry.get("state", "?"))
        problem = str(entry.get("reason") or "") if state != "healthy" else ""
        plan = entry.get("plan") or {}
        if entry.get("mode") == "observe" and plan and state == "escalated" and not workflow:
            # An observed model's incident is held, planned, until it answers right: nothing ran.
            state, rollback = "planned", f"{plan.get('name', '')} Planned"
            problem = f"observe: {plan.get('summary', '')}"
        rows.append(
            FleetRow(
                pod=name,
                model=model,
                state=state.upper() if state != "healthy" else state,
                serving=_serving(entry),
                tiers=_tiers(entry.get("last") or {}),
                drain=drain,
                incident=str(incident.get("key") or "-"),
                rollback=rollback,
                breaker="OPEN" if entry.get("breaker_open") else f"{entry.get('rollbacks_in_window', 0)} in window",
                problem=problem,
                pipeline=_pipeline(entry.get("pipeline"), str(incident.get("key") or "")),
                mode=str(entry.get("mode") or "act"),
                plan=str(plan.get("summary") or ""),
                traffic=traffic_line(entry.get("traffic")),
            )
        )
    return rows


def traffic_line(entry: Any) -> str:
    """The traffic signal of a /status entry (healer/sidecar/traffic_view.py) in one line: each version's
    last window (failed of real requests, the ratio, the verdict and signal) or why nothing was learnt;
    "" when the sidecar reads no traffic."""
    if not isinstance(entry, Mapping):
        return ""
    if entry.get("learnt"):  # the endpoint not read, or no version of the model listed
        return f"traffic: {entry['learnt']}"
    parts: list[str] = []
    for version, each in sorted((entry.get("versions") or {}).items()):
        if not isinstance(each, Mapping):
            continue
        if "requests" not in each or each.get("learnt"):
            parts.append(f"v{version} {each.get('learnt') or 'nothing learnt'}")
        else:
            parts.append(
                f"v{version} {each.get('failures')} failed of {each.get('requests')} real requests "
                f"({float(each.get('ratio') or 0.0):.1%}) over {each.get('window_s')} s: {each.get('verdict')}, "
                f"{each.get('signal')}"
            )
    return "traffic: " + "; ".join(parts) if parts else ""


def _pipeline(view: Mapping[str, Any] | None, incident: str) -> str:
    """A pipeline's line (healer/sidecar/pipelines.py ``view``): its members, each with the version it runs,
    and the member its open incident blames ("" for a model that is no pipeline)."""
    if not view:
        return ""
    members = ", ".join(f"{m['model']} v{m.get('serving') or '?'}" for m in view.get("members") or [])
    blamed = view.get("blamed") or ""
    if blamed and incident and view.get("blamed_incident") == incident:
        return f"pipeline of {members}; blamed: {blamed} ({view.get('blamed_why') or ''})"
    return f"pipeline of {members}"


def _serving(entry: Mapping[str, Any]) -> str:
    """The versions the sidecar probed (its last results' keys, e.g. business@v2), or NO when it
    reports the model not served."""
    if entry.get("serving") is False:
        return "NO"
    versions = sorted({key.split("@v", 1)[1] for key in entry.get("last") or {} if "@v" in key}, key=_version_key)
    return ",".join(f"v{v}" for v in versions) or "-"


def _version_key(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (0, version)


def _pod_state(pod: FleetPod) -> str:
    if pod.terminating:
        return "terminating"
    if pod.phase != "Running":
        return pod.phase
    return "in service" if pod.ready else "NOT READY"


def _drain(drain: Mapping[str, Any], pod_state: str) -> str:
    if drain.get("draining"):
        return "DRAINED"
    if drain.get("held_back"):
        return "held back (min_ready)"
    return pod_state


def _tiers(last: Mapping[str, Any]) -> str:
    """The last result of each tier: the worst of its versions' (healer/core/results.py Status)."""
    by_tier: dict[str, str] = {}
    order = {"pass": 0, "error": 1, "fail": 2}
    for key, result in last.items():
        tier = key.split("@", 1)[0]
        status = str((result or {}).get("status", "?"))
        if tier not in by_tier or order.get(status, 2) > order.get(by_tier[tier], 2):
            by_tier[tier] = status
    return (
        ", ".join(f"{tier} {status if status == 'pass' else status.upper()}" for tier, status in by_tier.items()) or "-"
    )


def _workflow_phases(workflows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str((w.get("metadata") or {}).get("name", "")): str((w.get("status") or {}).get("phase") or "Pending")
        for w in workflows
    }


def format_fleet(view: FleetView, *, wide: bool = False) -> str:
    """A table as kubectl prints one: a row per pod × model, the problems after it."""
    header = ["POD", "MODEL", "STATE", "SERVING", "TIERS", "DRAIN", "INCIDENT", "ROLLBACK"]
    if wide:
        header.append("BREAKER")
    rows = [header]
    for row in view.rows:
        model = f"{row.model} (observe)" if row.mode == "observe" else row.model
        cells = [row.pod, model, row.state, row.serving, row.tiers, row.drain, row.incident, row.rollback]
        if wide:
            cells.append(row.breaker)
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    models = len({r.model for r in view.rows if r.model != "-"})
    lines.append(
        f"{view.pods} pod(s), {models} model(s): {view.healthy} of {len(view.rows)} pod × model healthy and in service"
    )
    lines += [f"  {row.pod} {row.model}: {row.problem}" for row in view.rows if row.problem]
    lines += [f"  {row.pod} {row.model}: {row.pipeline}" for row in view.rows if row.pipeline]
    lines += [f"  {row.pod} {row.model}: {row.traffic}" for row in view.rows if row.traffic]
    lines += [f"  {note}" for note in view.notes]
    return "\n".join(lines)


def rollback_workflows(workflows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The workflows that are healer rollbacks (labelled with a model), newest first."""
    mine = [w for w in workflows if MODEL_LABEL in ((w.get("metadata") or {}).get("labels") or {})]
    return sorted(mine, key=lambda w: str((w.get("metadata") or {}).get("creationTimestamp", "")), reverse=True)
