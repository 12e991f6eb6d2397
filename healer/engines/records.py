"""The LocalEngine's run records: one JSON file per run under ``rollback.state_dir``, in Argo's
Workflow shape (metadata, spec, status with phase and nodes), so ``healer runs`` lists and shows
them the way ``argo list`` / ``argo get`` do.

Reading needs nothing else (no template, no client, no folder created): ``healer runs`` and the
sidecar's start-up (``mark_orphaned_runs``) only read, or mark what a dead process left behind.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import fcntl
import json
import os
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from healer.core.labels import (
    ENGINE_ANNOTATION,
    ENGINE_GONE_ANNOTATION,
    ENGINE_INSTANCE_ANNOTATION,
    FROM_VERSION_LABEL,
    INCIDENT_LABEL,
    MODEL_LABEL,
    REASON_LABEL,
    TO_VERSION_LABEL,
    request_labels,
)
from healer.core.observe import PLAN_PREFIX, PLANNED, Plan
from healer.engines import EngineNotFound, EngineRejected, EngineUnavailable
from healer.vocabulary import RELEASE_TEMPLATE_NAME, TEMPLATE_NAME, ReleaseRequest, RollbackRequest

log = structlog.get_logger("healer.engines.local")

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")  # Kubernetes object names, and a little more


def now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: Any) -> float | None:
    """A record's RFC 3339 timestamp in seconds since the epoch; None if absent or not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


# A record's read-change-write takes milliseconds: a lock held this long is a stuck process.
RECORD_LOCK_WAIT_S = 10.0


class RunRecords:
    """The run records in ``state_dir``: created exclusively (one run per name, across threads and
    processes), read while another writer may be mid-create, changed under a lock (a thread lock and a
    lock file per record: the engine that runs it, and ``healer runs resume`` from another process)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        if not _RUN_NAME.fullmatch(name):  # a name is a file name here: never a path out of state_dir
            raise EngineNotFound(f"no run {name!r} in {self.state_dir}: not a run name")
        return self.state_dir / f"{name}.json"

    def create(self, name: str, record: dict[str, Any]) -> bool:
        """Write ``record`` as the run ``name``; False if a record of that name exists."""
        # Exclusive create of a complete file (link() fails if the name exists): one run per incident
        # name across threads and processes, and never a half-written record that blocks the name.
        fd, temp = tempfile.mkstemp(dir=self.state_dir, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle, indent=2)
            os.link(temp, self.path(name))
        except FileExistsError:
            return False
        finally:
            os.unlink(temp)
        return True

    def get(self, name: str) -> dict[str, Any]:
        path = self.path(name)
        for _attempt in range(50):
            try:
                record: dict[str, Any] = json.loads(path.read_text())
                return record
            except FileNotFoundError:
                raise EngineNotFound(f"no run {name} in {self.state_dir}") from None
            except ValueError:
                time.sleep(0.01)  # an exclusive create is visible before its first write completes
        raise EngineRejected(f"{path}: not a run record")

    def runs(self, *, plans: bool = False) -> list[dict[str, Any]]:
        """Every run, newest first (a missing folder: none); ``plans``: with the plans of observed models
        (phase Planned: nothing was run; healer/core/observe.py)."""
        runs = []
        for prefix in (TEMPLATE_NAME, RELEASE_TEMPLATE_NAME, *((PLAN_PREFIX,) if plans else ())):
            for path in sorted(self.state_dir.glob(f"{prefix}-*.json")):
                with contextlib.suppress(ValueError, OSError):
                    runs.append(json.loads(path.read_text()))
        return sorted(runs, key=lambda r: r["metadata"].get("creationTimestamp", ""), reverse=True)

    def update(self, name: str, change: Callable[[dict[str, Any]], Any]) -> None:
        """Read, ``change`` and write the run ``name``, holding its lock: the thread lock among this
        engine's threads, and a lock file (flock) among processes (``healer runs resume`` beside the
        engine running the run), so that neither writes over what the other just wrote."""
        with self._lock, self._file_lock(name):
            record = self.get(name)
            change(record)
            write_record(self.path(name), record)

    @contextlib.contextmanager
    def _file_lock(self, name: str) -> Iterator[None]:
        path = self.state_dir / f".{self.path(name).stem}.lock"  # not a run record's name: runs() skips it
        # Read-only is enough for flock: another user (a person's `runs resume`) can lock it too.
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + RECORD_LOCK_WAIT_S
            # Bounded: each pass either takes the lock, raises at the deadline, or sleeps toward it.
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise EngineUnavailable(
                            f"{path}: another process held the run record's lock for {RECORD_LOCK_WAIT_S:g} s; "
                            "try again"
                        ) from None
                    time.sleep(0.01)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def add_node(self, name: str, node_id: str, node: dict[str, Any], parent: str | None = None) -> None:
        def change(record: dict[str, Any]) -> None:
            nodes = record["status"]["nodes"]
            node["id"] = node_id
            nodes[node_id] = node
            parent_id = parent or _parent_of(node_id, nodes)
            if parent_id and parent_id in nodes:
                nodes[parent_id].setdefault("children", []).append(node_id)

        self.update(name, change)

    def update_node(self, name: str, node_id: str, **fields: Any) -> None:
        self.update(name, lambda r: r["status"]["nodes"][node_id].update(fields))

    def failures(self, name: str) -> list[dict[str, Any]]:
        """The failed steps, as Argo's ``{{workflow.failures}}`` lists them."""
        nodes = self.get(name)["status"]["nodes"].values()
        return [
            {
                "displayName": n["displayName"],
                "message": n.get("message", ""),
                "templateName": n["templateName"],
                "phase": n["phase"],
                "podName": n["name"],
                "finishedAt": n.get("finishedAt", ""),
            }
            for n in nodes
            if n.get("type") == "Pod" and n.get("phase") in {"Failed", "Error"}
        ]


def new_record(name: str, request: RollbackRequest, parameters: dict[str, str], *, created_at: float) -> dict[str, Any]:
    """A run's record as the engine starts it (Pending), owned by this process."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": timestamp(created_at),
            "labels": {
                **request_labels(request),
                "workflows.argoproj.io/workflow-template": TEMPLATE_NAME,
            },
            "annotations": {
                "workflows.argoproj.io/title": f"Rollback {request.model} v{request.from_version} → stable",
                "workflows.argoproj.io/description": request.detail,
                # Who runs it: a run whose engine process died is marked Error, not left Running.
                ENGINE_ANNOTATION: f"{socket.gethostname()}/{os.getpid()}",
                ENGINE_INSTANCE_ANNOTATION: process_instance(os.getpid()) or "",
            },
        },
        "spec": {
            "workflowTemplateRef": {"name": TEMPLATE_NAME},
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]},
        },
        "status": {"phase": "Pending", "nodes": {}},
    }


def new_release_record(
    name: str, request: ReleaseRequest, parameters: dict[str, str], *, created_at: float
) -> dict[str, Any]:
    """A release's record as the engine starts it (Pending): the rollback's shape, its own labels."""
    record = new_record(
        name,
        RollbackRequest(model=request.model, from_version=request.version, incident=request.release),
        parameters,
        created_at=created_at,
    )
    metadata = record["metadata"]
    metadata["labels"] = {
        MODEL_LABEL: request.model,
        TO_VERSION_LABEL: request.version,
        INCIDENT_LABEL: request.release,
        "workflows.argoproj.io/workflow-template": RELEASE_TEMPLATE_NAME,
    }
    metadata["annotations"]["workflows.argoproj.io/title"] = f"Release {request.model} v{request.version}"
    metadata["annotations"]["workflows.argoproj.io/description"] = f"release {request.release}"
    record["spec"]["workflowTemplateRef"] = {"name": RELEASE_TEMPLATE_NAME}
    return record


def plan_record(plan: Plan, *, pod: str = "") -> dict[str, Any]:
    """An observed model's plan in a run's shape (``healer runs list`` and ``get`` show it), phase Planned:
    never a run (its name is not one: healer-plan-...), nothing was submitted, loaded or drained. A node per
    part of the plan (drain, fetch-stable, restore, escalate), each Skipped with what it would do."""
    at = timestamp(plan.planned_at) if plan.planned_at else now_text()
    parameters = {"model": plan.model, "from-version": plan.version, "incident": plan.incident, "pod": pod}
    parts = [
        ("drain", plan.drain.why),
        ("fetch-stable", f"would restore v{plan.restore}: {plan.restore_why}" if plan.restore else plan.restore_why),
        (
            "restore",
            "; ".join(f"wave {i}: {', '.join(wave)}" for i, wave in enumerate(plan.waves))
            + ("; skipped: " + "; ".join(plan.replicas.skipped) if plan.replicas.skipped else "")
            or plan.replicas.error
            or "nothing: no rollback",
        ),
        ("escalate", plan.escalate_why if plan.escalate else "would not escalate"),
    ]
    nodes: dict[str, dict[str, Any]] = {
        plan.name: {"id": plan.name, "name": plan.name, "displayName": plan.name, "type": "Steps", "phase": PLANNED},
        **{
            f"{plan.name}.{step}": {
                "id": f"{plan.name}.{step}",
                "name": f"{plan.name}.{step}",
                "displayName": step,
                "templateName": step,
                "type": "Skipped",
                "phase": PLANNED,
                "message": message,
                "startedAt": at,
                "finishedAt": at,
            }
            for step, message in parts
        },
    }
    nodes[plan.name]["outputs"] = {"parameters": [{"name": "to-version", "value": plan.restore}]}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": plan.name,
            "creationTimestamp": at,
            "labels": {
                MODEL_LABEL: plan.model,
                FROM_VERSION_LABEL: plan.version,
                TO_VERSION_LABEL: plan.restore,
                INCIDENT_LABEL: plan.incident,
                REASON_LABEL: plan.reason,
            },
            "annotations": {
                "workflows.argoproj.io/title": f"Plan (observe) {plan.model} v{plan.version}: {plan.decision.value}",
                "workflows.argoproj.io/description": plan.summary,
            },
        },
        "spec": {"arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}},
        "status": {"phase": PLANNED, "message": plan.summary, "nodes": nodes, "plan": plan.to_dict()},
    }


def mark_orphaned_runs(state_dir: Path, *, prefix: str = TEMPLATE_NAME) -> list[dict[str, Any]]:
    """Mark Error the runs that a process of this host which no longer exists left Pending/Running:
    they will never finish, and nobody will alert for them. Returns the records as marked.

    The owner is recognised by its process instance (boot id and start time), not its PID alone:
    in a container the engine is PID 1, and so is the engine of the restarted container. Light on
    purpose (no template, no client): the sidecar calls it at start-up, before any engine is built.
    A missing ``state_dir`` is not created (it may be on a read-only root filesystem): nothing to mark.
    """
    here = socket.gethostname()
    marked: list[dict[str, Any]] = []
    if not Path(state_dir).is_dir():
        return marked
    for path in sorted(Path(state_dir).glob(f"{prefix}-*.json")):
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError, AttributeError):
            record = json.loads(path.read_text())
            if record["status"].get("phase") not in {"Pending", "Running"}:
                continue
            annotations = record["metadata"].get("annotations", {})
            host, _, pid = annotations.get(ENGINE_ANNOTATION, "").partition("/")
            if host != here or not pid.isdigit():
                continue  # another host's run: nothing here can tell whether its engine lives
            if owner_alive(int(pid), annotations.get(ENGINE_INSTANCE_ANNOTATION, "")):
                continue
            record["status"].update(
                phase="Error", message=f"engine process {pid} ended before the run finished", finishedAt=now_text()
            )
            record["metadata"].setdefault("annotations", {})[ENGINE_GONE_ANNOTATION] = "true"
            write_record(path, record)
            marked.append(record)
            log.warning("orphaned_run_marked", workflow=record["metadata"]["name"], pid=pid)
    return marked


def orphaned_by(record: dict[str, Any], *, here: str | None = None) -> str | None:
    """The PID of the engine process that left ``record`` Pending or Running and no longer exists, when
    that process was on this host (``here``: its name); None for a finished run, a live engine's, or
    another host's (nothing here can tell whether that engine lives)."""
    try:
        if record["status"].get("phase") not in {"Pending", "Running"}:
            return None
        annotations = record["metadata"].get("annotations") or {}
        host, _, pid = str(annotations.get(ENGINE_ANNOTATION, "")).partition("/")
        if host != (here if here is not None else socket.gethostname()) or not pid.isdigit():
            return None
        return None if owner_alive(int(pid), str(annotations.get(ENGINE_INSTANCE_ANNOTATION, ""))) else pid
    except (KeyError, TypeError, AttributeError):
        return None


def as_displayed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as ``healer runs`` shows it. A run whose engine process died reads Error (engine gone),
    as mark_orphaned_runs would mark it; on a copy: ``healer runs`` only reads (the next engine or
    sidecar start on this host marks the record itself, and runs its exit handler). Else ``record``."""
    pid = orphaned_by(record)
    if pid is None:
        return record
    shown = copy.deepcopy(record)
    shown["status"].update(phase="Error", message=f"engine process {pid} ended before the run finished")
    shown["metadata"].setdefault("annotations", {})[ENGINE_GONE_ANNOTATION] = "true"
    return shown


def died_with_engine(state_dir: Path, run: str) -> bool:
    """Whether ``run`` (a lease's run: ``<name>@<host>``, template_runner.in_pod_run) is a run of this
    host in ``state_dir`` that was marked Error because its engine process died (``mark_orphaned_runs``).
    False for any other run: another host's (nothing here can tell), or none of that name."""
    name, _, host = run.partition("@")
    if host != socket.gethostname():
        return False
    try:
        record = RunRecords(state_dir).get(name)
    except (EngineRejected, OSError):  # EngineNotFound among them: not a run of this state directory
        return False
    annotations = (record.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ENGINE_GONE_ANNOTATION) == "true"


def write_record(path: Path, record: dict[str, Any]) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=2)
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def process_instance(pid: int) -> str | None:
    """``<boot id>/<start time>`` of process ``pid``: unlike the PID, never reused by a later process
    (a restarted container's PID 1, a PID recycled after a wrap). None where /proc cannot tell."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) is in parentheses and may itself hold ") ": count the fields after the last ")".
    fields = stat[stat.rindex(")") + 1 :].split()
    return f"{boot_id}/{fields[19]}" if len(fields) > 19 else None  # field 22: starttime, in clock ticks


def owner_alive(pid: int, instance: str) -> bool:
    if not instance:  # a record written before instances were kept, or where /proc could not tell
        return _alive(pid)
    current = process_instance(pid)
    if current is None:  # gone, or /proc hides it (hidepid): ask the kernel about the PID alone
        return _alive(pid)
    return current == instance


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parent_of(node_id: str, nodes: dict[str, Any]) -> str | None:
    # "<wf>[0].heal" hangs under "<wf>"; "<wf>.onExit[0].escalate" under "<wf>.onExit".
    if "[" in node_id:
        return node_id[: node_id.rindex("[")]
    return None


def resume_suspended(records: RunRecords, name: str) -> list[str]:
    """Resume a run waiting at a suspend step (`argo resume`): its Running suspend nodes marked
    Succeeded, which the engine running it reads. Returns the nodes resumed ([]: none was waiting)."""
    resumed: list[str] = []

    def change(record: dict[str, Any]) -> None:
        for node_id, node in record["status"]["nodes"].items():
            if node.get("type") == "Suspend" and node.get("phase") == "Running":
                node.update(phase="Succeeded", message="resumed", finishedAt=now_text())
                resumed.append(node_id)

    records.update(name, change)
    return resumed
