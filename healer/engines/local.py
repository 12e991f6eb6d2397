"""LocalEngine: executes the healer-rollback WorkflowTemplate in-process.

It reads the template that Hera builds (the very object ``healer render`` writes for Argo): the
entrypoint's steps in order, each step's ``when``, each runner script's ``-e module:function``,
the retry strategy, ``activeDeadlineSeconds``, the mutex and the exit handler. It records every
run in Argo's Workflow shape (metadata, spec, status with phase and nodes) as JSON under a state
directory, so ``healer runs`` can list them the way ``argo list`` / ``argo get`` do.

Deliberately small: it supports what healer's templates use (steps templates, script templates
through Hera's runner, ``{{workflow.parameters.X}}``, ``{{workflow.status}}`` and
``{{workflow.failures}}``, ``when`` with ``==``/``!=``, retries on an exit-code expression) and
refuses any other construct loudly instead of half-running it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from healer.decisions import same_occurrence_window_s
from healer.engines import MAX_EARLIER_OCCURRENCES, EngineNotFound, EngineRejected, EngineUnavailable, join_or_step_past
from healer.engines.records import RunRecords, epoch, mark_orphaned_runs, new_record, now_text
from healer.vocabulary import RollbackRequest, RunStatus, Submission, workflow_name

log = structlog.get_logger(__name__)

DEFAULT_MUTEX_WAIT_S = 300.0
STOP_GRACE_S = 90.0  # after the deadline, how long a step may take to notice and stop
STEP_DIR = "steps"  # under state_dir: each step attempt's output folder (the root filesystem may be read-only)
CANCELLED = "cancelled: the engine is stopping (the process got SIGTERM)"
_PARAM = re.compile(r"\{\{\s*workflow\.parameters\.([A-Za-z0-9_.-]+)\s*\}\}")
# "asInt(lastRetry.exitCode) == N", or several joined by "||": the exit codes a retry is for.
_RETRY_CLAUSE = re.compile(r"^\s*asInt\(lastRetry\.exitCode\)\s*==\s*(\d+)\s*$")
_WHEN = re.compile(r"^\s*(.*?)\s*(==|!=)\s*(.*?)\s*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


class UnsupportedTemplate(EngineRejected):
    """The template uses something the LocalEngine cannot execute faithfully."""


class _Cancelled(Exception):
    """cancel_all() stopped a run before its steps started (e.g. while it waited for the mutex)."""


def _duration_s(text: str | None) -> float:
    if not text:
        return 0.0
    match = _DURATION.match(str(text))
    if not match:
        raise UnsupportedTemplate(f"duration {text!r} not understood")
    value, unit = float(match.group(1)), match.group(2)
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


@dataclass(frozen=True)
class _ScriptSpec:
    name: str
    function: Callable[..., Any]
    inputs: tuple[tuple[str, str | None], ...]  # (name, default)
    outputs: tuple[tuple[str, str], ...]  # (name, file name in the output directory)
    retry_limit: int
    retry_exit_codes: frozenset[int]  # the exit codes its expression retries; empty: never retried
    backoff_s: float
    backoff_factor: float
    backoff_max_s: float
    deadline_s: float | None = None  # the template's own activeDeadlineSeconds, per attempt


def in_pod_run(name: str, host: str | None = None) -> str:
    """The run an in-pod attempt belongs to, as the model's lease knows it: the engine's run name and
    this pod. Every sidecar's engine names an incident's run alike (``workflow_name``: one name per
    incident, so Argo joins them), but in-pod runs on two pods heal different replicas and must not
    take each other's lease; a retry inside the same pod may (healer.ledger.decide_lease)."""
    return f"{name}@{host or socket.gethostname()}"


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
        self._context_factory = context_factory
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
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # cancel_all() was called
        self._cancels: dict[str, set[threading.Event]] = {}  # run -> its running entry-step attempts
        spec = self._model.spec
        self.entrypoint: str = spec.entrypoint
        self.on_exit: str | None = spec.on_exit
        self.deadline_s: float | None = float(spec.active_deadline_seconds) if spec.active_deadline_seconds else None
        self.defaults = {p.name: (p.value or "") for p in (spec.arguments.parameters or [])}
        mutexes = spec.synchronization.mutexes if spec.synchronization else None
        self.mutex_template: str | None = mutexes[0].name if mutexes else None
        self._templates = {t.name: t for t in spec.templates}
        self._scripts = {t.name: self._script_spec(t) for t in spec.templates if t.script is not None}
        for t in spec.templates:
            if t.script is None and t.steps is None:
                raise UnsupportedTemplate(f"template {t.name!r}: only steps and script templates are supported")
        # Runs a dead process of this host left Pending/Running, marked Error here: whoever builds the
        # engine hears of them (the sidecar escalates those of the models it watches).
        self.orphaned: list[dict[str, Any]] = mark_orphaned_runs(self.state_dir)

    # ---- RollbackEngine --------------------------------------------------------------------------
    def submit(self, request: RollbackRequest) -> Submission:
        """Start the incident's run, or join the one of that name if it is this occurrence's (``_joins``);
        an earlier occurrence's finished run is stepped past to its successor name (``workflow_name``)."""
        if self._stopping.is_set():
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

    def _create(self, name: str, request: RollbackRequest, parameters: dict[str, str]) -> bool:
        """Record and start the run ``name``; False if a record of that name exists."""
        if not self.records.create(name, new_record(name, request, parameters, created_at=self._wall_clock())):
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
                    self._run_steps(name, self.on_exit, exit_params, None, root=False)
            self.records.update(name, lambda r: r["status"].update(phase=phase, message=message, finishedAt=now_text()))

    def _execute_unchecked(self, name: str, parameters: dict[str, str], progress: dict[str, bool]) -> None:
        mutex = (
            _PARAM.sub(lambda m: parameters.get(m.group(1), ""), self.mutex_template) if self.mutex_template else None
        )
        with self._mutex(name, mutex):
            started = time.monotonic()
            deadline = started + self.deadline_s if self.deadline_s else None
            self.records.update(name, lambda r: r["status"].update(phase="Running", startedAt=now_text()))
            phase, message = self._run_steps(name, self.entrypoint, parameters, deadline, root=True)
            if phase != "Succeeded" and self._stopping.is_set():
                message = f"{CANCELLED}; {message}" if message and message != CANCELLED else CANCELLED
            if self.on_exit:
                failures = self.records.failures(name)
                exit_params = {**parameters, "__status": phase, "__failures": json.dumps(failures)}
                # The exit handler runs even after the deadline, as in Argo; the run stays Running
                # until it is done, so whoever waits for the outcome also waits for the alert.
                progress["exit_handler_started"] = True
                self._run_steps(name, self.on_exit, exit_params, None, root=False)
            self.records.update(name, lambda r: r["status"].update(phase=phase, message=message, finishedAt=now_text()))
            log.info(
                "local_rollback_finished", workflow=name, phase=phase, duration_s=round(time.monotonic() - started, 3)
            )

    def _run_steps(
        self,
        name: str,
        template_name: str,
        parameters: dict[str, str],
        deadline: float | None,
        *,
        root: bool,
    ) -> tuple[str, str]:
        template = self._templates[template_name]
        if template.steps is None:
            raise UnsupportedTemplate(f"entry template {template_name!r} must be a steps template")
        node_id = name if root else f"{name}.onExit"
        self.records.add_node(
            name,
            node_id,
            {
                "name": node_id,
                "displayName": node_id if root else f"{name}.onExit",
                "type": "Steps",
                "templateName": template_name,
                "phase": "Running",
                "startedAt": now_text(),
                "children": [],
            },
        )
        phase, message = "Succeeded", ""
        for group_index, group in enumerate(template.steps):
            for step in group.root if hasattr(group, "root") else group.__root__:
                if root and self._stopping.is_set():
                    phase, message = "Failed", CANCELLED  # no further step of a cancelled run starts
                    break
                if step.when and not _evaluate_when(_substitute(step.when, parameters)):
                    self.records.add_node(
                        name,
                        f"{node_id}[{group_index}].{step.name}",
                        {
                            "name": f"{node_id}[{group_index}].{step.name}",
                            "displayName": step.name,
                            "type": "Skipped",
                            "templateName": step.template,
                            "phase": "Skipped",
                            "message": f"when '{_substitute(step.when, parameters)}' evaluated false",
                            "startedAt": now_text(),
                            "finishedAt": now_text(),
                        },
                    )
                    continue
                arguments = {p.name: _substitute(p.value or "", parameters) for p in (step.arguments.parameters or [])}
                step_phase, step_message = self._run_script(
                    name,
                    f"{node_id}[{group_index}].{step.name}",
                    step.name,
                    step.template,
                    arguments,
                    deadline,
                    cancellable=root,
                )
                if step_phase != "Succeeded":
                    phase, message = step_phase, step_message
                    break
            if phase != "Succeeded":
                break
        self.records.update_node(name, node_id, phase=phase, message=message, finishedAt=now_text())
        return phase, message

    def _run_script(
        self,
        name: str,
        node_id: str,
        display: str,
        template_name: str,
        arguments: dict[str, str],
        deadline: float | None,
        *,
        cancellable: bool = True,
    ) -> tuple[str, str]:
        spec = self._scripts.get(template_name)
        if spec is None:
            raise UnsupportedTemplate(f"step {display!r}: template {template_name!r} is not a script template")
        kwargs = {}
        for input_name, default in spec.inputs:
            if input_name in arguments:
                kwargs[input_name] = arguments[input_name]
            elif default is not None:
                kwargs[input_name] = default
            else:
                raise UnsupportedTemplate(f"step {display!r}: input {input_name!r} has no argument")
        self.records.add_node(
            name,
            node_id,
            {
                "name": node_id,
                "displayName": display,
                "type": "Retry",
                "templateName": template_name,
                "phase": "Running",
                "startedAt": now_text(),
                "inputs": {"parameters": [{"name": k, "value": v} for k, v in kwargs.items()]},
                "children": [],
            },
        )
        attempt, backoff = 0, spec.backoff_s
        while True:
            pod_id = f"{node_id}({attempt})"
            self.records.add_node(
                name,
                pod_id,
                {
                    "name": pod_id,
                    "displayName": f"{display}({attempt})",
                    "type": "Pod",
                    "templateName": template_name,
                    "phase": "Running",
                    "startedAt": now_text(),
                },
                parent=node_id,
            )
            # A template's own deadline bounds each attempt, also where the run has none (the exit handler).
            attempt_deadline = deadline
            if spec.deadline_s is not None:
                own = time.monotonic() + spec.deadline_s
                attempt_deadline = own if deadline is None else min(deadline, own)
            phase, message, exit_code, outputs = self._attempt(name, spec, kwargs, attempt_deadline, cancellable)
            self.records.update_node(name, pod_id, phase=phase, message=message, finishedAt=now_text(), outputs=outputs)
            retryable = (
                phase == "Failed"
                and not (cancellable and self._stopping.is_set())
                and attempt < spec.retry_limit
                and spec.retry_exit_codes
                and exit_code in spec.retry_exit_codes
            )
            remaining = (deadline - time.monotonic()) if deadline is not None else None
            if not retryable or (remaining is not None and remaining <= backoff):
                self.records.update_node(
                    name, node_id, phase=phase, message=message, finishedAt=now_text(), outputs=outputs
                )
                return phase, message
            time.sleep(backoff)
            backoff = min(backoff * spec.backoff_factor, spec.backoff_max_s)
            attempt += 1

    def _attempt(
        self, name: str, spec: _ScriptSpec, kwargs: dict[str, str], deadline: float | None, cancellable: bool = True
    ) -> tuple[str, str, int, dict[str, Any]]:
        try:
            output_dir = Path(tempfile.mkdtemp(prefix=f"healer-{spec.name}-", dir=self._step_dir))
        except FileNotFoundError:  # removed under us (a person cleaning up): made again
            self._step_dir.mkdir(parents=True, exist_ok=True)
            output_dir = Path(tempfile.mkdtemp(prefix=f"healer-{spec.name}-", dir=self._step_dir))
        cancelled = threading.Event()
        if cancellable:  # an entry step: cancel_all() stops it (the exit handler, which alerts, is never cancelled)
            with self._lock:
                self._cancels.setdefault(name, set()).add(cancelled)
                if self._stopping.is_set():
                    cancelled.set()
        try:
            return self._attempt_in(name, spec, kwargs, deadline, output_dir, cancelled)
        finally:
            with self._lock:
                self._cancels.get(name, set()).discard(cancelled)

    def _attempt_in(
        self,
        name: str,
        spec: _ScriptSpec,
        kwargs: dict[str, str],
        deadline: float | None,
        output_dir: Path,
        cancelled: threading.Event,
    ) -> tuple[str, str, int, dict[str, Any]]:
        from workflows import context as step_context

        box: dict[str, Any] = {}

        def target() -> None:
            # A fresh context per attempt, built in the thread that uses it (as a fresh pod would be):
            # tritonclient's gevent connections cannot move between threads.
            context = None
            try:
                context = self._context_factory()
                context.workflow_name = in_pod_run(name)
                context.cancelled = cancelled
                with step_context.using(context, output_dir):
                    box["result"] = spec.function(**kwargs)
                box["exit_code"] = 0
            except SystemExit as exc:
                box["exit_code"] = exc.code if isinstance(exc.code, int) else 1
                box["error"] = str(exc.__cause__ or exc)
            except Exception as exc:  # a crashing step is a failed pod, as in Argo
                box["exit_code"] = 1
                box["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                if context is not None:
                    context.triton.close()
                _destroy_gevent_hub()

        worker = threading.Thread(target=target, name=f"step-{spec.name}", daemon=True)
        worker.start()
        worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            # Past activeDeadlineSeconds: Argo kills the pod. We ask the step to stop at its next check.
            cancelled.set()
            # Hold on (and so keep the mutex) until the step stops at its next check: every call it
            # makes has its own timeout, the longest being a model load.
            worker.join(STOP_GRACE_S)
            if worker.is_alive():
                log.error("step_still_running_after_deadline", step=spec.name, grace_s=STOP_GRACE_S)
            outputs = self._collect(spec, output_dir, None, None)
            shutil.rmtree(output_dir, ignore_errors=True)
            return "Failed", "Step exceeded its deadline", 1, outputs
        exit_code = int(box.get("exit_code", 1))
        termination = output_dir / "termination-log"
        message = termination.read_text() if termination.exists() else box.get("error", "")
        if exit_code:
            message = message or f"Error (exit code {exit_code})"
        outputs = self._collect(spec, output_dir, box.get("result"), exit_code)
        shutil.rmtree(output_dir, ignore_errors=True)
        return ("Succeeded" if exit_code == 0 else "Failed"), message, exit_code, outputs

    @staticmethod
    def _collect(spec: _ScriptSpec, output_dir: Path, result: Any, exit_code: int | None) -> dict[str, Any]:
        parameters = []
        for name, file_name in spec.outputs:
            path = output_dir / file_name
            parameters.append({"name": name, "value": path.read_text() if path.exists() else ""})
        outputs: dict[str, Any] = {"parameters": parameters}
        if result is not None:
            outputs["result"] = json.dumps(result, sort_keys=True)
        if exit_code is not None:
            outputs["exitCode"] = str(exit_code)
        return outputs

    # ---- template reading ------------------------------------------------------------------------
    @staticmethod
    def _script_spec(template: Any) -> _ScriptSpec:
        args = list(template.script.args or [])
        if "-e" not in args or args[:2] != ["-m", "hera.workflows.runner"]:
            raise UnsupportedTemplate(f"script {template.name!r} is not a Hera runner script: {args}")
        module_name, _, function_name = args[args.index("-e") + 1].partition(":")
        function = getattr(importlib.import_module(module_name), function_name)
        inputs = tuple((p.name, p.default) for p in (template.inputs.parameters or [])) if template.inputs else ()
        outputs = tuple(
            (p.name, Path(p.value_from.path).name)
            for p in ((template.outputs.parameters or []) if template.outputs else [])
            if p.value_from is not None and p.value_from.path
        )
        limit, exit_codes = 0, frozenset[int]()
        backoff_s, factor, backoff_max = 0.0, 1.0, 0.0
        retry = template.retry_strategy
        if retry is not None:
            limit = int(str(retry.limit.root if hasattr(retry.limit, "root") else retry.limit))
            if retry.expression:
                clauses = [_RETRY_CLAUSE.match(part) for part in retry.expression.split("||")]
                if not all(clauses):
                    raise UnsupportedTemplate(f"retry expression {retry.expression!r} not understood")
                exit_codes = frozenset(int(c.group(1)) for c in clauses if c)
            if retry.backoff is not None:
                backoff_s = _duration_s(retry.backoff.duration)
                raw_factor = retry.backoff.factor
                factor = float(str(raw_factor.root if hasattr(raw_factor, "root") else raw_factor or 1))
                backoff_max = _duration_s(retry.backoff.max_duration) or backoff_s
        return _ScriptSpec(
            name=template.name,
            function=function,
            inputs=inputs,
            outputs=outputs,
            retry_limit=limit,
            retry_exit_codes=exit_codes,
            backoff_s=backoff_s,
            backoff_factor=factor,
            backoff_max_s=backoff_max,
            deadline_s=_int_or_string_s(template.active_deadline_seconds),
        )

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
        self._stopping.set()
        with self._lock:
            for events in self._cancels.values():
                for event in events:
                    event.set()
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
                if self._stopping.is_set():
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


def _destroy_gevent_hub() -> None:
    """tritonclient gives each thread a gevent hub (and its file descriptors); free it with the thread."""
    import sys

    gevent = sys.modules.get("gevent")
    if gevent is not None:
        with contextlib.suppress(Exception):
            gevent.get_hub().destroy(destroy_loop=True)


def _int_or_string_s(value: Any) -> float | None:
    """A template's activeDeadlineSeconds (Hera's IntOrString, or a plain int) in seconds; None if unset."""
    if value is None:
        return None
    return float(str(value.root if hasattr(value, "root") else value))


def _substitute(text: str, parameters: dict[str, str]) -> str:
    text = text.replace("{{workflow.status}}", parameters.get("__status", "Running"))
    text = text.replace("{{workflow.failures}}", parameters.get("__failures", "[]"))
    text = _PARAM.sub(lambda m: parameters.get(m.group(1), ""), text)
    if "{{" in text:
        raise UnsupportedTemplate(f"unresolved expression in {text!r}")
    return text


def _evaluate_when(expression: str) -> bool:
    match = _WHEN.match(expression)
    if not match:
        raise UnsupportedTemplate(f"when expression {expression!r} not understood")
    left, operator, right = match.groups()
    return (left == right) if operator == "==" else (left != right)
