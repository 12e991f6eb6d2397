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
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from healer.decisions import same_occurrence_window_s
from healer.engines import MAX_EARLIER_OCCURRENCES, EngineNotFound, EngineRejected, EngineUnavailable, join_or_step_past
from healer.engines.records import (
    RunRecords,
    epoch,
    mark_orphaned_runs,
    new_record,
    new_release_record,
    now_text,
    resume_suspended,
)
from healer.engines.template_reader import UnsupportedTemplate, read_template
from healer.engines.template_runner import CANCELLED, Cancellation, TemplateRunner, in_pod_run
from healer.labels import ENGINE_GONE_ANNOTATION
from healer.vocabulary import (
    ReleaseRequest,
    RollbackRequest,
    RunStatus,
    Submission,
    release_workflow_name,
    workflow_name,
)

# What callers import from here: the engine, and (for leases and tests) the names its runs take.
__all__ = ["CANCELLED", "DEFAULT_MUTEX_WAIT_S", "STEP_DIR", "LocalEngine", "UnsupportedTemplate", "in_pod_run"]

log = structlog.get_logger(__name__)

DEFAULT_MUTEX_WAIT_S = 300.0
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
        join_window_s: float | None = None,  # None: healer/decisions.py same_occurrence_window_s(default deadline)
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
    def _mutex(self, name: str, mutex: str | None) -> Iterator[None]:
        if mutex is None:
            yield
            return
        lock_dir = self.state_dir / "locks"
        lock_dir.mkdir(exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", mutex)
        with (lock_dir / f"{safe}.lock").open("w") as handle:
            deadline = time.monotonic() + self._mutex_wait_s
            waiting_noted = False
            while True:
                if self._cancellation.stopping:
                    raise _Cancelled(f"{CANCELLED} (while waiting for {mutex})")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waiting_noted:
                        self.records.update(name, lambda r: r["status"].update(message=f"Waiting for {mutex} lock"))
                        waiting_noted = True
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"mutex {mutex} not acquired within {self._mutex_wait_s:g} s") from None
                    time.sleep(self._poll_interval_s)
            try:
                if waiting_noted:
                    self.records.update(name, lambda r: r["status"].update(message=""))
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
