"""The LocalEngine's interpreter: one run's steps templates, executed in this process.

``TemplateRunner.run_steps`` walks a steps template (read by healer/engines/template_reader.py) group
by group: each step's ``when``, its arguments, and its script template's retries and deadlines. Each
attempt calls the step function from workflows/ in a thread of its own, with a fresh step context
and an output folder (as a fresh pod would have), and every node it runs lands in the run's record
in Argo's shape (Steps, Retry, Pod, Skipped nodes with phase, message, outputs).

``Cancellation`` is the engine's ``cancel_all()`` as the runner sees it: whether the engine is
stopping, and a way to ask every running entry step to stop at its next check.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from healer.engines.records import RunRecords, now_text
from healer.engines.template_reader import (
    ScriptSpec,
    TemplateSpec,
    UnsupportedTemplate,
    evaluate_when,
    parallel_steps,
    substitute,
)

log = structlog.get_logger("healer.engines.local")

SUSPEND_POLL_S = 0.2  # how often a suspended run looks for its resume
STOP_GRACE_S = 90.0  # after the deadline, how long a step may take to notice and stop
CANCELLED = "cancelled: the engine is stopping (the process got SIGTERM)"
STOPPED = "stopped by a person (healer release stop)"
DEADLINE_EXCEEDED = "Step exceeded its deadline"
# A step asked to stop (its deadline, the engine's SIGTERM, a person's stop) that finished its work
# anyway, within its stop grace: it Succeeded (its outputs count), and its message says so and what
# becomes of the run (no further step starts after the run's deadline or stop).
FINISHED_WHEN_ASKED_TO_STOP = "finished its work after it was asked to stop"


def in_pod_run(name: str, host: str | None = None) -> str:
    """The run an in-pod attempt belongs to, as the model's lease knows it: the engine's run name and
    this pod. Every sidecar's engine names an incident's run alike (``workflow_name``: one name per
    incident, so Argo joins them), but in-pod runs on two pods heal different replicas and must not
    take each other's lease; a retry inside the same pod may (healer.core.ledger.decide_lease)."""
    return f"{name}@{host or socket.gethostname()}"


class Cancellation:
    """Whether the engine is stopping, and the cancel events of the entry-step attempts running now."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._attempts: dict[str, set[threading.Event]] = {}  # run -> its running entry-step attempts
        self._stopped_runs: set[str] = set()  # runs stopped one by one (stop_run)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stopped(self, name: str) -> bool:
        """The engine is stopping, or this one run was stopped (``stop_run``)."""
        return self._stopping.is_set() or name in self._stopped_runs

    def stop_run(self, name: str) -> None:
        """As ``argo stop`` does for one run: its running entry step is asked to stop, no further
        step or retry starts, its exit handler still runs."""
        with self._lock:
            self._stopped_runs.add(name)
            for event in self._attempts.get(name, set()):
                event.set()

    def stop(self) -> None:
        """From now on the engine is stopping; every running entry-step attempt is asked to stop."""
        self._stopping.set()
        with self._lock:
            for events in self._attempts.values():
                for event in events:
                    event.set()

    @contextlib.contextmanager
    def attempt(self, name: str, cancellable: bool) -> Iterator[threading.Event]:
        """The event that asks one attempt of run ``name`` to stop: set by ``stop()`` if ``cancellable``
        (an entry step; the exit handler, which alerts, is never cancelled), or by its deadline."""
        cancelled = threading.Event()
        if cancellable:
            with self._lock:
                self._attempts.setdefault(name, set()).add(cancelled)
                if self._stopping.is_set() or name in self._stopped_runs:
                    cancelled.set()
        try:
            yield cancelled
        finally:
            with self._lock:
                self._attempts.get(name, set()).discard(cancelled)


class TemplateRunner:
    """Runs a template's steps for the LocalEngine, recording each node in the run's record."""

    def __init__(
        self,
        template: TemplateSpec,
        records: RunRecords,
        context_factory: Callable[[], Any],
        step_dir: Path,
        cancellation: Cancellation,
    ) -> None:
        self.template = template
        self._records = records
        self._context_factory = context_factory
        self._step_dir = step_dir  # each step attempt's output folder goes here
        self._cancellation = cancellation

    def run_steps(
        self,
        name: str,
        template_name: str,
        parameters: dict[str, str],
        deadline: float | None,
        *,
        root: bool,
    ) -> tuple[str, str]:
        """Run the steps template ``template_name`` as run ``name``'s entrypoint (``root``) or exit
        handler; its (phase, message). ``deadline``: time.monotonic() by which it must be done."""
        template = self.template.templates[template_name]
        if template.steps is None:
            raise UnsupportedTemplate(f"entry template {template_name!r} must be a steps template")
        node_id = name if root else f"{name}.onExit"
        self._records.add_node(
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
            for step in parallel_steps(group):
                if root and self._cancellation.stopped(name):
                    # No further step of a cancelled (or stopped) run starts.
                    phase, message = "Failed", CANCELLED if self._cancellation.stopping else STOPPED
                    break
                if root and deadline is not None and time.monotonic() >= deadline:
                    # Nor of a run past its deadline (its last step finished within its stop grace).
                    phase, message = "Failed", f"{DEADLINE_EXCEEDED}: step {step.name!r} was not started"
                    break
                if step.when and not evaluate_when(substitute(step.when, parameters)):
                    self._records.add_node(
                        name,
                        f"{node_id}[{group_index}].{step.name}",
                        {
                            "name": f"{node_id}[{group_index}].{step.name}",
                            "displayName": step.name,
                            "type": "Skipped",
                            "templateName": step.template,
                            "phase": "Skipped",
                            "message": f"when '{substitute(step.when, parameters)}' evaluated false",
                            "startedAt": now_text(),
                            "finishedAt": now_text(),
                        },
                    )
                    continue
                if self.template.templates[step.template].suspend is not None:
                    step_phase, step_message = self._suspend(
                        name, f"{node_id}[{group_index}].{step.name}", step.name, step.template, deadline, root
                    )
                    if step_phase != "Succeeded":
                        phase, message = step_phase, step_message
                        break
                    continue
                arguments = {p.name: substitute(p.value or "", parameters) for p in (step.arguments.parameters or [])}
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
        self._records.update_node(name, node_id, phase=phase, message=message, finishedAt=now_text())
        return phase, message

    def _suspend(
        self, name: str, node_id: str, display: str, template_name: str, deadline: float | None, cancellable: bool
    ) -> tuple[str, str]:
        """An Argo suspend step: the run waits, its node Running, until someone resumes it
        (``LocalEngine.resume``: the node's phase set to Succeeded in the record), the run's deadline
        passes, or the engine stops."""
        self._records.add_node(
            name,
            node_id,
            {
                "name": node_id,
                "displayName": display,
                "type": "Suspend",
                "templateName": template_name,
                "phase": "Running",
                "startedAt": now_text(),
            },
        )
        # Bounded by the run's deadline (a suspend in an exit handler, which has none, is not supported).
        if deadline is None:
            raise UnsupportedTemplate(f"suspend step {display!r} outside a run with a deadline")
        while True:
            node = self._records.get(name).get("status", {}).get("nodes", {}).get(node_id, {})
            if node.get("phase") == "Succeeded":
                return "Succeeded", ""
            if cancellable and self._cancellation.stopped(name):
                message = CANCELLED if self._cancellation.stopping else STOPPED
            elif time.monotonic() >= deadline:
                message = "Step exceeded its deadline (never resumed)"
            elif node.get("phase") == "Failed":
                message = node.get("message") or "stopped"
            else:
                time.sleep(SUSPEND_POLL_S)
                continue
            self._records.update_node(name, node_id, phase="Failed", message=message, finishedAt=now_text())
            return "Failed", message

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
        spec = self.template.scripts.get(template_name)
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
        self._records.add_node(
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
            self._records.add_node(
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
            if phase == "Succeeded" and message.startswith(FINISHED_WHEN_ASKED_TO_STOP):
                message += self._what_becomes_of_the_run(name, deadline, cancellable)
            self._records.update_node(
                name, pod_id, phase=phase, message=message, finishedAt=now_text(), outputs=outputs
            )
            retryable = (
                phase == "Failed"
                and not (cancellable and self._cancellation.stopped(name))
                and attempt < spec.retry_limit
                and spec.retry_exit_codes
                and exit_code in spec.retry_exit_codes
            )
            remaining = (deadline - time.monotonic()) if deadline is not None else None
            if not retryable or (remaining is not None and remaining <= backoff):
                self._records.update_node(
                    name, node_id, phase=phase, message=message, finishedAt=now_text(), outputs=outputs
                )
                return phase, message
            time.sleep(backoff)
            backoff = min(backoff * spec.backoff_factor, spec.backoff_max_s)
            attempt += 1

    def _what_becomes_of_the_run(self, name: str, deadline: float | None, cancellable: bool) -> str:
        """For a step that finished its work after it was asked to stop: whether its run goes on."""
        if cancellable and self._cancellation.stopped(name):
            why = "is stopping" if self._cancellation.stopping else "was stopped"
        elif cancellable and deadline is not None and time.monotonic() >= deadline:
            why = "is past its deadline"
        else:
            return ""  # only the template's own deadline passed: the run goes on
        return f"; the run {why}: no further step starts (the run is Failed if one was left)"

    def _attempt(
        self, name: str, spec: ScriptSpec, kwargs: dict[str, str], deadline: float | None, cancellable: bool = True
    ) -> tuple[str, str, int, dict[str, Any]]:
        try:
            output_dir = Path(tempfile.mkdtemp(prefix=f"healer-{spec.name}-", dir=self._step_dir))
        except FileNotFoundError:  # removed under us (a person cleaning up): made again
            self._step_dir.mkdir(parents=True, exist_ok=True)
            output_dir = Path(tempfile.mkdtemp(prefix=f"healer-{spec.name}-", dir=self._step_dir))
        # An entry step: cancel_all() stops it (the exit handler, which alerts, is never cancelled).
        with self._cancellation.attempt(name, cancellable) as cancelled:
            return self._attempt_in(name, spec, kwargs, deadline, output_dir, cancelled)

    def _attempt_in(
        self,
        name: str,
        spec: ScriptSpec,
        kwargs: dict[str, str],
        deadline: float | None,
        output_dir: Path,
        cancelled: threading.Event,
    ) -> tuple[str, str, int, dict[str, Any]]:
        from workflows.steps import context as step_context

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
                box["asked_to_stop"] = cancelled.is_set()  # when it finished, not later
                if context is not None:
                    context.triton.close()
                _destroy_gevent_hub()

        worker = threading.Thread(target=target, name=f"step-{spec.name}", daemon=True)
        worker.start()
        worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        asked_to_stop = ""  # why the step was asked to stop while it ran ("" if it was not)
        if worker.is_alive():
            # Past activeDeadlineSeconds: Argo kills the pod. We ask the step to stop at its next check.
            cancelled.set()
            # Hold on (and so keep the mutex) until the step stops at its next check: every call it
            # makes has its own timeout, the longest being a model load.
            worker.join(STOP_GRACE_S)
            if worker.is_alive():
                log.error("step_still_running_after_deadline", step=spec.name, grace_s=STOP_GRACE_S)
                outputs = _collect(spec, output_dir, None, None)
                shutil.rmtree(output_dir, ignore_errors=True)
                return "Failed", DEADLINE_EXCEEDED, 1, outputs
            asked_to_stop = f"its deadline passed; within its {STOP_GRACE_S:g} s stop grace"
        elif box.get("asked_to_stop"):  # set by the engine's stop or a person's, never by the deadline here
            asked_to_stop = "the engine is stopping" if self._cancellation.stopping else "a person stopped the run"
        exit_code = int(box.get("exit_code", 1))
        if exit_code and asked_to_stop.startswith("its deadline passed"):
            # It stopped (or failed) within its grace: the deadline's failure, as before and as in Argo.
            outputs = _collect(spec, output_dir, None, None)
            shutil.rmtree(output_dir, ignore_errors=True)
            return "Failed", DEADLINE_EXCEEDED, 1, outputs
        termination = output_dir / "termination-log"
        message = termination.read_text() if termination.exists() else box.get("error", "")
        if exit_code:
            message = message or f"Error (exit code {exit_code})"
        elif asked_to_stop:
            # Its work is done and its outputs are real: Succeeded, whatever becomes of the run.
            message = f"{FINISHED_WHEN_ASKED_TO_STOP} ({asked_to_stop})"
        outputs = _collect(spec, output_dir, box.get("result"), exit_code)
        shutil.rmtree(output_dir, ignore_errors=True)
        return ("Succeeded" if exit_code == 0 else "Failed"), message, exit_code, outputs


def _collect(spec: ScriptSpec, output_dir: Path, result: Any, exit_code: int | None) -> dict[str, Any]:
    """An attempt's outputs, as Argo reports them: its output parameters' files, its result, its exit code."""
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


def _destroy_gevent_hub() -> None:
    """tritonclient gives each thread a gevent hub (and its file descriptors); free it with the thread."""
    import sys

    gevent = sys.modules.get("gevent")
    if gevent is not None:
        with contextlib.suppress(Exception):
            gevent.get_hub().destroy(destroy_loop=True)
