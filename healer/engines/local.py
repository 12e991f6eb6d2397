"""LocalEngine: executes the healer-rollback WorkflowTemplate in-process.

It runs the template that Hera builds (the very object ``healer render`` writes for Argo), read by
healer/engines/template_reader.py (the entrypoint's steps in order, each step's ``when``, each runner
script's ``-e module:function``, the retry strategy, ``activeDeadlineSeconds``, the mutex and the exit
handler) and executed step by step by healer/engines/template_runner.py. It records every run in
Argo's Workflow shape (metadata, spec, status with phase and nodes) as JSON under a state directory
(healer/engines/records.py), so ``healer runs`` can list them the way ``argo list`` / ``argo get`` do.

This module is the engine itself: submitting (one run per incident occurrence), a run's thread, its
mutex and exit handler, waiting, draining and cancelling; and, at start-up, the runs a dead process
left behind (marked Error, in ``orphaned``).

Deliberately small: it supports what healer's templates use (steps templates, script templates
through Hera's runner, ``{{workflow.parameters.X}}``, ``{{workflow.status}}`` and
``{{workflow.failures}}``, ``when`` with ``==``/``!=``, retries on an exit-code expression) and
refuses any other construct loudly instead of half-running it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from healer.core.decisions import same_occurrence_window_s
from healer.core.labels import ENGINE_ANNOTATION, ENGINE_GONE_ANNOTATION, ENGINE_INSTANCE_ANNOTATION
from healer.engines import MAX_EARLIER_OCCURRENCES, EngineNotFound, EngineRejected, EngineUnavailable, join_or_step_past
from healer.engines.records import (
    RunRecords,
    epoch,
    mark_orphaned_runs,
    new_record,
    new_release_record,
    now_text,
    owner_alive,
    process_instance,
    resume_suspended,
)
from healer.engines.template_reader import UnsupportedTemplate, read_template
from healer.engines.template_runner import CANCELLED, Cancellation, TemplateRunner, in_pod_run
from healer.vocabulary import (
    RELEASE_TEMPLATE_NAME,
    ReleaseRequest,
    RollbackRequest,
    RunStatus,
    Submission,
    release_workflow_name,
    workflow_name,
)

# What callers import from here: the engine, and (for leases and tests) the names its runs take.
__all__ = [
    "CANCELLED",
    "DEFAULT_MUTEX_WAIT_S",
    "STEP_DIR",
    "LocalEngine",
    "UnsupportedTemplate",
    "in_pod_run",
    "orphaned_releases",
]

log = structlog.get_logger(__name__)

DEFAULT_MUTEX_WAIT_S = 300.0
# How long finishing an orphaned release waits for its model's release mutex (another process finishing
# it: the dead holder's lease TTL, 30 s, then the put-back's swaps).
ORPHAN_MUTEX_WAIT_S = 180.0
STEP_DIR = "steps"  # under state_dir: each step attempt's output folder (the root filesystem may be read-only)


class _Cancelled(Exception):
    """cancel_all() stopped a run before its steps started (e.g. while it waited for the mutex)."""


class LocalEngine:
    """A RollbackEngine that runs the WorkflowTemplate in this process (one thread per run)."""

    def __init__(
        self,
        template: Any,
        context_factory: Callable[[], Any],
        state_dir: Path,
        *,
        mutex_wait_s: float = DEFAULT_MUTEX_WAIT_S,
        poll_interval_s: float = 0.02,
        wall_clock: Callable[[], float] = time.time,  # its records' creationTimestamp, and a run's age
        join_window_s: float | None = None,  # None: healer/core/decisions.py same_occurrence_window_s(default deadline)
    ) -> None:
        self._model = template.build()  # the Argo model Hera renders: what Argo itself would run
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.records = RunRecords(self.state_dir)
        # Step attempts write their outputs here, not in the system temp folder: in a pod the root
        # filesystem is read-only and state_dir is the writable volume.
        self._step_dir = self.state_dir / STEP_DIR
        self._step_dir.mkdir(exist_ok=True)
        self._mutex_wait_s = mutex_wait_s
        self._poll_interval_s = poll_interval_s
        if join_window_s is None:
            from healer.settings import RollbackSettings

            join_window_s = same_occurrence_window_s(RollbackSettings().deadline_s)
        if join_window_s < 0:
            raise ValueError("join_window_s must not be negative")
        self.join_window_s = join_window_s
        self._wall_clock = wall_clock
        self._threads: dict[str, threading.Thread] = {}  # run -> the thread that runs it in this process
        self._lock = threading.Lock()
        self._cancellation = Cancellation()  # cancel_all() was called; the entry-step attempts it stops
        self.template_spec = read_template(self._model)  # UnsupportedTemplate for what cannot run here
        self.entrypoint: str = self.template_spec.entrypoint
        self.on_exit: str | None = self.template_spec.on_exit
        self.deadline_s: float | None = self.template_spec.deadline_s
        self.defaults = self.template_spec.defaults
        self.mutex_template: str | None = self.template_spec.mutex_template
        self._runner = TemplateRunner(
            self.template_spec, self.records, context_factory, self._step_dir, self._cancellation
        )
        # Runs a dead process of this host left Pending/Running, marked Error here: whoever builds the
        # engine hears of them (the sidecar escalates those of the models it watches).
        self.orphaned: list[dict[str, Any]] = mark_orphaned_runs(self.state_dir)

    # ---- RollbackEngine --------------------------------------------------------------------------
    def submit(self, request: RollbackRequest) -> Submission:
        """Start the incident's run, or join the one of that name if it is this occurrence's (``_joins``);
        an earlier occurrence's finished run is stepped past to its successor name (``workflow_name``)."""
        if self._cancellation.stopping:
            raise EngineUnavailable("the local engine is stopping: no new run", maybe_delivered=False)
        parameters = {**self.defaults, **request.parameters()}
        after = ""
        for _attempt in range(MAX_EARLIER_OCCURRENCES + 1):
            name = workflow_name(request, after=after)
            if self._create(name, request, parameters):
                return Submission(name=name, created=True)
            try:
                joined, after = self._joins(request, name)
            except EngineNotFound:
                continue  # removed since (someone cleaned the state directory): the name is free again
            if joined:
                return Submission(name=name, created=False)
        raise EngineRejected(
            f"{MAX_EARLIER_OCCURRENCES} runs of earlier occurrences of incident {request.incident} "
            f"(from {workflow_name(request)}) in {self.state_dir}; not submitting more"
        )

    def submit_release(self, request: ReleaseRequest) -> Submission:
        """Start the release's run (an engine built over the healer-release template), or join the
        one of its name: one run per release id."""
        if self._cancellation.stopping:
            raise EngineUnavailable("the local engine is stopping: no new run", maybe_delivered=False)
        if self.template_spec.entrypoint != "release":
            raise EngineRejected("this engine runs the rollback template, not the release one")
        parameters = {**self.defaults, **request.parameters()}
        name = release_workflow_name(request)
        record = new_release_record(name, request, parameters, created_at=self._wall_clock())
        return Submission(name=name, created=self._start(name, record, parameters))

    def resume(self, name: str) -> list[str]:
        """Resume a run waiting at a suspend step (`argo resume`); the steps resumed ([]: none waits)."""
        return resume_suspended(self.records, name)

    def stop(self, name: str) -> None:
        """Stop one run of this engine (`argo stop`): its running step stops at its next check, no
        further step starts, and its exit handler runs."""
        self.get(name)  # EngineNotFound for a run that does not exist
        with self._lock:
            ours = name in self._threads
        if not ours:
            raise EngineRejected(f"{name} is run by another process (its own `healer release`): stop it there")
        self._cancellation.stop_run(name)

    def finish_orphaned_release(self, name: str, *, wait_s: float = ORPHAN_MUTEX_WAIT_S) -> RunStatus | None:
        """Finish, in this process, a release run whose engine process died (SIGKILL, OOM, a lost
        shell): its exit handler runs here as the dead engine would have run it (the put-back, which
        reads the ledger under the model's lease: a version promoted before the process died is left
        serving and the release finished; otherwise every replica serving it goes back to the stable
        version), then the record's final phase is written: Succeeded when the put-back found the
        release promoted, else Error. The release's mutex is held meanwhile (a second process finishing
        it waits, then finds it done). Returns the run's status; None when it is not an orphan (its
        engine lives, or another process finished it first) or the mutex stayed busy for ``wait_s``."""
        if self.template_spec.entrypoint != "release" or not self.on_exit:
            raise EngineRejected("this engine runs the rollback template, not the release one")
        parameters = _run_parameters(self.get(name))
        try:
            with self._mutex(name, self.template_spec.mutex(parameters), wait_s=wait_s, note=False):
                dead = self._claim_orphan(name)
                if dead is None:
                    return None
                self._run_orphan_exit_handler(name, parameters, dead)
        except TimeoutError as exc:
            log.warning("orphaned_release_not_finished", workflow=name, error=str(exc))
            return None
        return self.status(name)

    def _claim_orphan(self, name: str) -> str | None:
        """Under the release's mutex: if ``name`` is still an orphan, make it this process's (a third
        process sees its engine alive) and mark the steps the dead engine left Running as Error; the
        dead engine's pid. None: not an orphan (any more)."""
        claimed: list[str] = []

        def change(record: dict[str, Any]) -> None:
            if not _orphaned(record):
                return
            annotations = record["metadata"].setdefault("annotations", {})
            dead = annotations.get(ENGINE_ANNOTATION, "").partition("/")[2]
            annotations[ENGINE_ANNOTATION] = f"{socket.gethostname()}/{os.getpid()}"
            annotations[ENGINE_INSTANCE_ANNOTATION] = process_instance(os.getpid()) or ""
            # Its dead steps' lease is taken over at once by the put-back (same release, a run known dead).
            annotations[ENGINE_GONE_ANNOTATION] = "true"
            ended = f"engine process {dead} ended before this step finished"
            for node in record["status"].get("nodes", {}).values():
                if node.get("phase") in {"Pending", "Running"}:
                    node.update(phase="Error", message=ended, finishedAt=now_text())
            record["status"]["message"] = (
                f"engine process {dead} ended before the run finished: its exit handler runs in process {os.getpid()}"
            )
            claimed.append(dead)

        self.records.update(name, change)
        if claimed:
            log.warning("orphaned_release_claimed", workflow=name, dead_pid=claimed[0], pid=os.getpid())
        return claimed[0] if claimed else None

    def _run_orphan_exit_handler(self, name: str, parameters: dict[str, str], dead: str) -> None:
        assert self.on_exit is not None
        started = time.monotonic()
        failures = self.records.failures(name) or [
            {
                "displayName": "engine",
                "message": f"engine process {dead} ended before the run finished",
                "phase": "Error",
            }
        ]
        exit_params = {**parameters, "__status": "Error", "__failures": json.dumps(failures)}
        try:
            exit_phase, exit_message = self._runner.run_steps(name, self.on_exit, exit_params, None, root=False)
        except Exception as exc:  # an engine bug must still end the run visibly
            log.exception("orphaned_release_exit_handler_crashed", workflow=name)
            exit_phase, exit_message = "Error", f"engine error: {type(exc).__name__}: {exc}"
        put_back = _json_object(self.status(name).outputs.get("put-back", ""))
        phase, message = orphan_outcome(dead, os.getpid(), exit_phase, exit_message, put_back)
        self.records.update(name, lambda r: r["status"].update(phase=phase, message=message, finishedAt=now_text()))
        log.info(
            "orphaned_release_finished",
            workflow=name,
            phase=phase,
            dead_pid=dead,
            duration_s=round(time.monotonic() - started, 3),
        )

    def _create(self, name: str, request: RollbackRequest, parameters: dict[str, str]) -> bool:
        """Record and start the run ``name``; False if a record of that name exists."""
        return self._start(name, new_record(name, request, parameters, created_at=self._wall_clock()), parameters)

    def _start(self, name: str, record: dict[str, Any], parameters: dict[str, str]) -> bool:
        if not self.records.create(name, record):
            return False
        thread = threading.Thread(target=self._execute, args=(name, parameters), name=f"rollback-{name}", daemon=True)
        with self._lock:
            self._threads[name] = thread
        thread.start()
        return True

    def _joins(self, request: RollbackRequest, name: str) -> tuple[bool, str]:
        """Whether the run recorded as ``name`` is this occurrence's; if not, the ``after`` of its
        successor. Its age: the record's creationTimestamp against this engine's wall clock (the one
        that wrote it: the processes that share a state directory share a host)."""
        record = self.get(name)
        metadata = record.get("metadata") or {}
        phase = (record.get("status") or {}).get("phase") or "Pending"
        created_text = metadata.get("creationTimestamp")
        # Every process that finds this record derives the same successor: its uid, else its own times.
        return join_or_step_past(
            request,
            name,
            phase=phase,
            created_at=epoch(created_text),
            engine_now=self._wall_clock(),
            window_s=self.join_window_s,
            successor_seed=str(metadata.get("uid") or created_text or name),
            engine_gone=(metadata.get("annotations") or {}).get(ENGINE_GONE_ANNOTATION) == "true",
        )

    def status(self, name: str) -> RunStatus:
        record = self.get(name)
        status = record.get("status", {})
        outputs: dict[str, str] = {}
        for node in status.get("nodes", {}).values():
            for parameter in node.get("outputs", {}).get("parameters", []):
                if parameter.get("value"):
                    outputs[parameter["name"]] = parameter["value"]
        return RunStatus(
            name=name,
            phase=status.get("phase") or "Pending",
            message=status.get("message", ""),
            started_at=status.get("startedAt"),
            finished_at=status.get("finishedAt"),
            outputs=outputs,
        )

    def wait(self, name: str, timeout_s: float) -> RunStatus:
        deadline = time.monotonic() + timeout_s
        thread = self._threads.get(name)
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        # Another process may own the run: poll its record until done or our deadline.
        status = self.status(name)
        while not status.done and time.monotonic() < deadline:
            time.sleep(self._poll_interval_s)
            status = self.status(name)
        return status

    def run(self, request: RollbackRequest, timeout_s: float) -> RunStatus:
        submission = self.submit(request)
        return self.wait(submission.name, timeout_s)

    # ---- records (argo list / argo get) ----------------------------------------------------------
    def get(self, name: str) -> dict[str, Any]:
        return self.records.get(name)

    def list_runs(self) -> list[dict[str, Any]]:
        return self.records.runs()

    # ---- execution -------------------------------------------------------------------------------
    def _execute(self, name: str, parameters: dict[str, str]) -> None:
        progress = {"exit_handler_started": False}
        try:
            self._execute_unchecked(name, parameters, progress)
        except Exception as exc:  # an engine bug must still end the run visibly, never leave it Running
            if isinstance(exc, _Cancelled):
                phase, message = "Failed", str(exc)
            else:
                log.exception("local_engine_crashed", workflow=name)
                phase, message = "Error", f"engine error: {type(exc).__name__}: {exc}"
            if self.on_exit and not progress["exit_handler_started"]:
                # Somebody must still hear about it: run the exit handler, as Argo would for an Error.
                failures = [{"displayName": "engine", "message": message, "phase": phase}]
                exit_params = {**parameters, "__status": phase, "__failures": json.dumps(failures)}
                with contextlib.suppress(Exception):
                    self._runner.run_steps(name, self.on_exit, exit_params, None, root=False)
            self.records.update(name, lambda r: r["status"].update(phase=phase, message=message, finishedAt=now_text()))

    def _execute_unchecked(self, name: str, parameters: dict[str, str], progress: dict[str, bool]) -> None:
        with self._mutex(name, self.template_spec.mutex(parameters)):
            started = time.monotonic()
            deadline = started + self.deadline_s if self.deadline_s else None
            self.records.update(name, lambda r: r["status"].update(phase="Running", startedAt=now_text()))
            phase, message = self._runner.run_steps(name, self.entrypoint, parameters, deadline, root=True)
            if phase != "Succeeded" and self._cancellation.stopping:
                message = f"{CANCELLED}; {message}" if message and message != CANCELLED else CANCELLED
            if self.on_exit:
                failures = self.records.failures(name)
                exit_params = {**parameters, "__status": phase, "__failures": json.dumps(failures)}
                # The exit handler runs even after the deadline, as in Argo; the run stays Running
                # until it is done, so whoever waits for the outcome also waits for the alert.
                progress["exit_handler_started"] = True
                self._runner.run_steps(name, self.on_exit, exit_params, None, root=False)
            self.records.update(name, lambda r: r["status"].update(phase=phase, message=message, finishedAt=now_text()))
            log.info(
                "local_rollback_finished", workflow=name, phase=phase, duration_s=round(time.monotonic() - started, 3)
            )

    # ---- stopping ---------------------------------------------------------------------------------
    def drain(self, timeout_s: float) -> list[str]:
        """Wait (bounded) for this engine's runs to finish, e.g. before the process exits: a rollback
        cut off mid-rollback leaves the lease held until it expires (and, with rollback.order
        unload-first, the model unloaded). Returns the runs still going."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = dict(self._threads)
        for thread in threads.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        return [name for name, thread in threads.items() if thread.is_alive()]

    def cancel_all(self) -> list[str]:
        """Stop every run of this engine, e.g. on SIGTERM, while there is time left to do it cleanly:
        each running entry step is asked to stop at its next check (an unload-first rollback puts back
        what it unloaded), no further step or retry starts, and the exit handler still runs (it alerts:
        the run ends Failed, "cancelled"). New submissions are refused. Returns the runs still going;
        ``drain`` waits for them."""
        self._cancellation.stop()
        with self._lock:
            running = [name for name, thread in self._threads.items() if thread.is_alive()]
        if running:
            log.warning("local_rollbacks_cancelled", workflows=running)
        return running

    @contextlib.contextmanager
    def _mutex(self, name: str, mutex: str | None, *, wait_s: float | None = None, note: bool = True) -> Iterator[None]:
        """Hold ``mutex`` (an flock: a dead process's is let go by the kernel), waiting ``wait_s`` at
        most (default: the engine's mutex wait); ``note``: say so in run ``name``'s record while waiting."""
        if mutex is None:
            yield
            return
        lock_dir = self.state_dir / "locks"
        lock_dir.mkdir(exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", mutex)
        wait_s = self._mutex_wait_s if wait_s is None else wait_s
        with (lock_dir / f"{safe}.lock").open("w") as handle:
            deadline = time.monotonic() + wait_s
            waiting_noted = False
            while True:
                if self._cancellation.stopping:
                    raise _Cancelled(f"{CANCELLED} (while waiting for {mutex})")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if note and not waiting_noted:
                        self.records.update(name, lambda r: r["status"].update(message=f"Waiting for {mutex} lock"))
                        waiting_noted = True
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"mutex {mutex} not acquired within {wait_s:g} s") from None
                    time.sleep(self._poll_interval_s)
            try:
                if waiting_noted:
                    self.records.update(name, lambda r: r["status"].update(message=""))
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


# ---- releases a dead process left behind ---------------------------------------------------------------


def orphaned_releases(state_dir: Path, *, model: str | None = None) -> list[str]:
    """The release runs (of ``model``, or every model's) that a process of this host which no longer
    exists left Pending or Running: their exit handler never ran, so nobody will finish them or put
    their replicas back until ``LocalEngine.finish_orphaned_release`` does. Read only (no template,
    no folder created, nothing marked): cheap enough for every command to ask."""
    names: list[str] = []
    if not Path(state_dir).is_dir():
        return names
    for path in sorted(Path(state_dir).glob(f"{RELEASE_TEMPLATE_NAME}-*.json")):
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError, AttributeError):
            record = json.loads(path.read_text())
            if model is not None and _run_parameters(record).get("model") != model:
                continue
            if _orphaned(record):
                names.append(str(record["metadata"]["name"]))
    return names


def orphan_outcome(
    dead: str, pid: int, exit_phase: str, exit_message: str, put_back: dict[str, Any]
) -> tuple[str, str]:
    """An orphaned release's final (phase, message) once its exit handler ran in process ``pid``
    (pure): Succeeded when the put-back found the version promoted (the release is finished), else
    Error, saying what the put-back did."""
    ended = f"engine process {dead} ended before the run finished"
    if exit_phase != "Succeeded":
        return "Error", f"{ended}; its put-back, run by process {pid}, failed: {exit_message}"
    if put_back.get("finished"):
        return "Succeeded", f"{ended}, after the promotion: finished by process {pid} ({put_back.get('left', '')})"
    if put_back.get("nothing"):
        return "Error", f"{ended}; process {pid} ran its exit handler: {put_back['nothing']}"
    return (
        "Error",
        f"{ended}; put back by process {pid}: every replica serves the stable v{put_back.get('stable', '?')}",
    )


def _orphaned(record: dict[str, Any]) -> bool:
    """Pending or Running, started by a process of this host that no longer exists."""
    if (record.get("status") or {}).get("phase", "Pending") not in {"Pending", "Running"}:
        return False
    annotations = (record.get("metadata") or {}).get("annotations") or {}
    host, _, pid = str(annotations.get(ENGINE_ANNOTATION, "")).partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another host's run: nothing here can tell whether its engine lives
    return not owner_alive(int(pid), str(annotations.get(ENGINE_INSTANCE_ANNOTATION, "")))


def _run_parameters(record: dict[str, Any]) -> dict[str, str]:
    arguments = ((record.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    return {str(p["name"]): str(p.get("value", "")) for p in arguments if isinstance(p, dict) and "name" in p}


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
