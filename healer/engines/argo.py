"""``ArgoEngine``: run rollbacks as Argo Workflows, through Hera's ``WorkflowsService``.

Each rollback is a Workflow that references the ``healer-rollback`` WorkflowTemplate by
``workflowTemplateRef``. Its name is deterministic per incident (``workflow_name``), so a second
submission of the same incident is answered 409 AlreadyExists by Argo and joins the first: that is
the deduplication across pods and threads (a mutex would only queue the duplicates). A 409 joins only
the same occurrence: the existing run's creationTimestamp against the Argo Server's clock (the Date
of its answer), healer/core/decisions.py ``joins_same_occurrence``; an earlier occurrence's finished run
is stepped past to a successor name derived from its uid, the same for every replica.

Hera and requests are imported when an engine is built, not with this module: a sidecar that never
talks to Argo does not pay for them.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from healer.core.labels import label_value, label_value_expression, request_labels
from healer.engines import MAX_EARLIER_OCCURRENCES, EngineNotFound, EngineRejected, EngineUnavailable, join_or_step_past
from healer.vocabulary import AUTO, TEMPLATE_NAME, RollbackRequest, RunStatus, Submission, workflow_name

if TYPE_CHECKING:
    import requests
    from hera.exceptions import HeraException
    from hera.workflows.models import Workflow

__all__ = ["ArgoEngine", "label_value", "label_value_expression"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

TITLE_ANNOTATION = "workflows.argoproj.io/title"
DESCRIPTION_ANNOTATION = "workflows.argoproj.io/description"
_MAX_DETAIL = 2000  # the description is for people; the full detail is still a workflow parameter
# Hera's message for status codes it has no exception class for (e.g. 502, 503, 504).
_HERA_STATUS = re.compile(r"Server returned status code (\d+)")
_HERA_MESSAGE = re.compile(r"with message: `(.*)`\Z", re.DOTALL)
# 408 and 429 are the client-error codes that mean "later", not "never".
_RETRYABLE_4XX = frozenset({408, 429})


def _version(version: str) -> str:
    return "stable" if version == AUTO else f"v{version}"


def _markdown_text(text: str) -> str:
    """One line of plain text that Markdown shows as written."""
    text = " ".join(text.split())
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 1] + "…"
    return re.sub(r"([\\`*_{}\[\]<>()#+!|~])", r"\\\1", text)


def title(request: RollbackRequest) -> str:
    return f"Rollback {request.model} {_version(request.from_version)} → {_version(request.to_version)}"


def description(request: RollbackRequest) -> str:
    """Markdown for the Argo UI: why (the reason and the probe's own words), what is being rolled
    back, and where it was seen. Why comes first: the workflow list shows only the first words, on
    one line, beside the Model and Reason columns (deploy/argo/workflow-controller-configmap.yaml);
    a row's drawer shows it all."""
    to_version = "newest stable version (auto)" if request.to_version == AUTO else _version(request.to_version)
    why = f"**{request.reason}**" + (f": {_markdown_text(request.detail)}" if request.detail else "")
    lines = [
        why,
        f"**Model** `{request.model}`: {_version(request.from_version)} → {to_version}",
        f"**Incident** `{request.incident}`",
    ]
    if request.pod:
        lines.append(f"**Detected by pod** `{request.pod}`")
    return "\n\n".join(lines)


def _timeout_session(
    timeout_s: float,
    token_provider: Callable[[], str] | None = None,
    on_response: Callable[[requests.Response], None] | None = None,
) -> requests.Session:
    """The one transport seam under Hera's service: every request gets a timeout (Hera passes none)
    and, with ``token_provider``, a fresh bearer token (projected service-account tokens rotate);
    ``on_response`` sees each answer (Hera keeps only its body: the Date header is the server's clock)."""
    import requests

    class TimeoutSession(requests.Session):
        def request(self, method: str, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = timeout_s
            if token_provider is not None:
                kwargs["headers"] = {**(kwargs.get("headers") or {}), "Authorization": f"Bearer {token_provider()}"}
            response = super().request(method, url, *args, **kwargs)
            if on_response is not None:
                on_response(response)
            return response

    return TimeoutSession()


def _status_code(exc: HeraException) -> int | None:
    # Hera's subclasses carry status_code as a class attribute; its base class (used for every
    # other code, e.g. 503) only annotates it, so the code is read back from the message.
    code = getattr(type(exc), "status_code", None)
    if isinstance(code, int):
        return code
    match = _HERA_STATUS.match(str(exc))
    return int(match.group(1)) if match else None


def _server_message(exc: HeraException) -> str:
    match = _HERA_MESSAGE.search(str(exc))
    return match.group(1) if match else str(exc)


def _time(value: Any) -> str | None:
    """A Hera ``Time`` (a datetime wrapper) back to Argo's RFC 3339 text."""
    if value is None:
        return None
    moment = getattr(value, "root", value)
    return str(moment.isoformat().replace("+00:00", "Z"))


def _epoch(value: Any) -> float | None:
    """A Hera ``Time`` (the API server's creationTimestamp) in seconds since the epoch; None if unset."""
    moment = getattr(value, "root", value)
    if not isinstance(moment, dt.datetime):
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


def _http_date(value: str | None) -> float | None:
    """An HTTP Date header (RFC 9110: always GMT) in seconds since the epoch; None if absent or garbled."""
    if not value:
        return None
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


def _outputs(workflow: Workflow) -> dict[str, str]:
    """Output parameters of the workflow's nodes, in the order they ran, then its global outputs."""
    status = workflow.status
    if status is None:
        return {}
    merged: dict[str, str] = {}
    nodes = sorted(
        (status.nodes or {}).values(),
        key=lambda node: (_time(node.started_at) or "", _time(node.finished_at) or "\uffff", node.id),
    )
    for node in nodes:  # a later step's value for the same name wins, as it would downstream
        for parameter in (node.outputs.parameters if node.outputs else None) or []:
            if parameter.value is not None:
                merged[parameter.name] = parameter.value
    for parameter in (status.outputs.parameters if status.outputs else None) or []:
        if parameter.value is not None:  # the workflow's declared outputs are authoritative
            merged[parameter.name] = parameter.value
    return merged


def _message(workflow: Workflow) -> str:
    """The workflow's message, plus the messages of the failed steps (Argo's own says only which child)."""
    status = workflow.status
    if status is None:
        return ""
    message = status.message or ""
    if status.phase in {"Failed", "Error"}:
        for node in (status.nodes or {}).values():
            if node.type == "Pod" and node.phase in {"Failed", "Error"} and node.message:
                step = node.display_name or node.name
                if node.message not in message:
                    message = f"{message}; {step}: {node.message}" if message else f"{step}: {node.message}"
    return message


class ArgoEngine:
    """Submit, inspect and wait for ``healer-rollback`` workflows on an Argo Server."""

    def __init__(
        self,
        host: str,
        namespace: str,
        *,
        token: str | None = None,
        token_provider: Callable[[], str] | None = None,
        verify_ssl: bool | str = True,  # or the path of a CA bundle (requests' ``verify``)
        request_timeout_s: float = 5.0,
        poll_interval_s: float = 1.0,
        template_name: str = TEMPLATE_NAME,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        join_window_s: float | None = None,  # None: healer/core/decisions.py same_occurrence_window_s(default deadline)
        service: Any = None,  # the workflows' transport; None: Hera's WorkflowsService on argo-server at host
    ) -> None:
        if not host.startswith(("http://", "https://")):
            raise ValueError(f"Argo host must start with http:// or https://, got {host!r}")
        if not namespace:
            raise ValueError("Argo namespace must not be empty")
        if not template_name:
            raise ValueError("template_name must not be empty")
        if request_timeout_s <= 0 or poll_interval_s <= 0:
            raise ValueError("request_timeout_s and poll_interval_s must be positive")
        if join_window_s is None:
            from healer.core.decisions import same_occurrence_window_s
            from healer.settings import RollbackSettings

            join_window_s = same_occurrence_window_s(RollbackSettings().deadline_s)
        if join_window_s < 0:
            raise ValueError("join_window_s must not be negative")
        from hera.workflows import WorkflowsService

        # Hera joins paths with urljoin: without a trailing slash, a path prefix (an ingress at
        # https://host/argo) would be dropped.
        self.host = host if host.endswith("/") else host + "/"
        self.namespace = namespace
        self.template_name = template_name
        self.request_timeout_s = request_timeout_s
        self.poll_interval_s = poll_interval_s
        self.join_window_s = join_window_s
        self._clock = clock
        self._sleep = sleep
        self._answered = threading.local()  # .date: the Date header of this thread's last answer
        self._service = service or WorkflowsService(
            host=self.host,
            verify_ssl=verify_ssl,  # type: ignore[arg-type]  # requests' verify: a bool or a CA bundle path
            token=token,
            namespace=namespace,
            session=_timeout_session(request_timeout_s, token_provider, self._note_answer),
        )
        self.via = "the Kubernetes API" if service is not None else "argo-server"

    def close(self) -> None:
        if self.via == "argo-server":
            self._service.session.close()  # (WorkflowsService.close is the same, but untyped)
        else:
            self._service.close()

    def __enter__(self) -> ArgoEngine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def workflow(self, request: RollbackRequest, *, after: str = "") -> Workflow:
        """The Workflow ``submit`` creates for ``request`` (public so it can be shown or linted);
        ``after``: the uid of an earlier occurrence's run (``workflow_name``)."""
        from hera.workflows.models import (
            Arguments,
            ObjectMeta,
            Parameter,
            Workflow,
            WorkflowSpec,
            WorkflowTemplateRef,
        )

        return Workflow(
            api_version="argoproj.io/v1alpha1",
            kind="Workflow",
            metadata=ObjectMeta(
                name=workflow_name(request, after=after),
                namespace=self.namespace,
                labels={key: label_value(value) for key, value in request_labels(request).items()},
                annotations={TITLE_ANNOTATION: title(request), DESCRIPTION_ANNOTATION: description(request)},
            ),
            spec=WorkflowSpec(
                workflow_template_ref=WorkflowTemplateRef(name=self.template_name),
                arguments=Arguments(
                    parameters=[Parameter(name=key, value=value) for key, value in request.parameters().items()]
                ),
            ),
        )

    def submit(self, request: RollbackRequest) -> Submission:
        """Create the incident's workflow, or join it if it exists (Argo answers 409) and is this
        occurrence's (``_joins``); an earlier occurrence's finished run is stepped past to its
        successor name, where the same holds.

        No retry: ``EngineUnavailable`` after a timeout does not prove that nothing was created, but
        submitting again is safe (the same name collides and joins).
        """
        after = ""
        for _attempt in range(MAX_EARLIER_OCCURRENCES + 1):
            workflow = self.workflow(request, after=after)
            name = workflow.metadata.name
            assert name is not None
            try:
                created = self._create(workflow)
            except _Conflict:
                try:
                    joined, after = self._joins(request, name)
                except EngineNotFound:
                    continue  # deleted since the 409 (its TTL ran out): the name is free again
                if joined:
                    return Submission(name, created=False)
                continue
            return Submission(created.metadata.name or name, created=True)
        raise EngineRejected(
            f"{MAX_EARLIER_OCCURRENCES} runs of earlier occurrences of incident {request.incident} "
            f"(from {workflow_name(request)}); not submitting more"
        )

    def _create(self, workflow: Workflow) -> Workflow:
        from hera.workflows.models import WorkflowCreateRequest

        create = WorkflowCreateRequest(namespace=self.namespace, workflow=workflow)
        what = workflow.metadata.name or f"{workflow.metadata.generate_name}*"
        return self._call(f"create workflow {what}", lambda: self._service.create_workflow(create))

    def _joins(self, request: RollbackRequest, name: str) -> tuple[bool, str]:
        """Whether the run that holds ``name`` is this occurrence's; if not, the ``after`` of its
        successor. Its age is read from Argo alone: its creationTimestamp (the API server's) against
        the Date of the answer that carried it (the Argo Server's); this pod's clock may differ."""
        try:
            existing, server_now = self._read_dated(name)
        except EngineUnavailable as exc:
            # A run of this name exists, maybe this occurrence's and going: not safe to hand elsewhere.
            raise EngineUnavailable(str(exc), maybe_delivered=True) from exc
        status = existing.status
        phase = (status.phase if status else None) or "Pending"
        # Every replica that finds this run derives the same successor: its uid, else its own times.
        return join_or_step_past(
            request,
            name,
            phase=phase,
            created_at=_epoch(existing.metadata.creation_timestamp),
            engine_now=server_now,
            window_s=self.join_window_s,
            successor_seed=existing.metadata.uid or _time(existing.metadata.creation_timestamp) or name,
        )

    def _read_dated(self, name: str) -> tuple[Workflow, float | None]:
        """The workflow and the Argo Server's time when it answered (None: no usable Date header)."""
        self._answered.date = None
        workflow = self._call(f"get workflow {name}", lambda: self._service.get_workflow(name))
        return workflow, _http_date(self._answered.date)

    def _note_answer(self, response: requests.Response) -> None:
        self._answered.date = response.headers.get("Date")

    def get(self, name: str) -> dict[str, Any]:
        """The whole workflow as Argo's JSON (what ``argo get -o json`` prints): every node, its
        times and outputs (the drills read each heal pod's phases from it)."""
        return _workflow_json(self._call(f"get workflow {name}", lambda: self._service.get_workflow(name)))

    def submit_template(self, template: str, parameters: Mapping[str, str], *, name: str) -> str:
        """Create the workflow ``name`` from another WorkflowTemplate in this namespace (``argo submit
        --from workflowtemplate/TEMPLATE -p ...``). Not an incident's rollback: no join. The caller
        names it, so that a create whose answer was lost can be looked up (``status(name)``) rather
        than submitted twice; a 409 (that name exists) is ``EngineRejected``."""
        from hera.workflows.models import Arguments, ObjectMeta, Parameter, Workflow, WorkflowSpec, WorkflowTemplateRef

        workflow = Workflow(
            api_version="argoproj.io/v1alpha1",
            kind="Workflow",
            metadata=ObjectMeta(name=name, namespace=self.namespace),
            spec=WorkflowSpec(
                workflow_template_ref=WorkflowTemplateRef(name=template),
                arguments=Arguments(parameters=[Parameter(name=k, value=v) for k, v in parameters.items()]),
            ),
        )
        try:
            created = self._create(workflow)
        except _Conflict as exc:
            raise EngineRejected(f"a workflow named {name} exists already: {exc}") from exc
        return created.metadata.name or name

    def list(self, label_selector: str = "") -> list[dict[str, Any]]:
        """The workflows in the namespace matching ``label_selector``, as Argo's JSON (``argo list``)."""
        if self.via != "argo-server":
            listed = self._call("list workflows", lambda: self._service.list_workflows(label_selector=label_selector))
            return list(listed)
        answer = self._call(
            "list workflows",
            lambda: self._service.list_workflows(namespace=self.namespace, label_selector=label_selector or None),
        )
        return [_workflow_json(w) for w in (answer.items or [])]

    def template_exists(self, name: str | None = None) -> None:
        """Read the WorkflowTemplate a rollback is created from (``healer check``, the chart's helm test):
        argo-server answers, its certificate is trusted and this caller may read the template (which
        argo-server does as the caller when it creates a workflow from it). Raises an EngineError."""
        template = name or self.template_name
        self._call(
            f"get workflowtemplate {template}",
            lambda: self._service.get_workflow_template(name=template, namespace=self.namespace),
        )

    def check_create(self, request: RollbackRequest) -> None:
        """Create ``request``'s workflow as a server-side dry run (``healer check``): argo-server and the
        API server check it, and this caller's right to create it, and store nothing. Raises an
        EngineError; a 409 (a real run of that name exists) also proves the right."""
        from hera.workflows.models import WorkflowCreateRequest

        workflow = self.workflow(request)
        create = WorkflowCreateRequest(namespace=self.namespace, workflow=workflow, server_dry_run=True)
        try:
            self._call(
                f"create workflow {workflow.metadata.name} (dry run)", lambda: self._service.create_workflow(create)
            )
        except _Conflict:
            return

    def stop(self, name: str, message: str) -> None:
        """``argo stop``: the workflow ends and its exit handler runs (a drill's cleanup)."""
        from hera.workflows.models import WorkflowStopRequest

        request = WorkflowStopRequest(name=name, namespace=self.namespace, message=message)
        self._call(f"stop workflow {name}", lambda: self._service.stop_workflow(name, request))

    def status(self, name: str) -> RunStatus:
        """The workflow's phase, message, times and output parameters (one GET)."""
        workflow = self._call(f"get workflow {name}", lambda: self._service.get_workflow(name))
        status = workflow.status
        return RunStatus(
            name=name,
            # "" is Argo's "not yet seen by the controller": still waiting, as Pending is.
            phase=(status.phase if status else None) or "Pending",
            message=_message(workflow),
            started_at=_time(status.started_at) if status else None,
            finished_at=_time(status.finished_at) if status else None,
            outputs=MappingProxyType(_outputs(workflow)),
        )

    def wait(self, name: str, timeout_s: float) -> RunStatus:
        """Poll until the workflow is done or ``timeout_s`` has passed; then return the last status.

        Unlike Hera's ``Workflow.wait`` this keeps waiting while Pending (queued on a mutex).
        ``EngineUnavailable`` while polling is tolerated until the deadline; it is raised only if no
        status was read at all. ``EngineRejected`` is raised at once: ``EngineNotFound`` (404, e.g. the
        workflow was deleted) or another refusal (401, 403: nothing learnt about the workflow).
        A request under way at the deadline may overrun it by up to ``request_timeout_s``.
        """
        deadline = self._clock() + max(0.0, timeout_s)
        last: RunStatus | None = None
        error: EngineUnavailable | None = None
        while True:
            try:
                last = self.status(name)
                if last.done:
                    return last
            except EngineUnavailable as exc:
                error = exc
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            self._sleep(min(self.poll_interval_s, remaining))
        if last is None:
            assert error is not None
            raise EngineUnavailable(f"no status for workflow {name} within {timeout_s:g} s: {error}") from error
        return last

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """One call to Argo, its failures mapped to the engine's two kinds (and 409 to ``_Conflict``)."""
        import requests
        from hera.exceptions import HeraException

        try:
            return call()
        except WorkflowApiError as exc:
            code, message = exc.status, str(exc)
            if code == 409:
                raise _Conflict(message) from exc
            if code == 404:
                raise EngineNotFound(f"the Kubernetes API refused to {what} (HTTP 404): {message}") from exc
            if code is not None and 400 <= code < 500 and code not in _RETRYABLE_4XX:
                raise EngineRejected(
                    f"the Kubernetes API at {self.host} refused to {what} (HTTP {code}): {message}"
                ) from exc
            raise EngineUnavailable(
                f"the Kubernetes API at {self.host} could not {what}"
                + (f" (HTTP {code})" if code else "")
                + f": {message}",
                maybe_delivered=exc.maybe_delivered or code in (500, 504),
            ) from exc
        except HeraException as exc:
            code = _status_code(exc)
            message = _server_message(exc)
            if code == 409:
                raise _Conflict(message) from exc
            if code == 404:  # the only refusal that says the workflow does not exist
                raise EngineNotFound(f"Argo refused to {what} (HTTP 404): {message}") from exc
            if code is not None and 400 <= code < 500 and code not in _RETRYABLE_4XX:
                raise EngineRejected(f"Argo refused to {what} (HTTP {code}): {message}") from exc
            # A 504 may hide a create that went through; other refusals (502, 503, 429) did not apply it.
            raise EngineUnavailable(
                f"Argo could not {what} (HTTP {code}): {message}", maybe_delivered=code in (None, 500, 504)
            ) from exc
        except requests.ConnectionError as exc:
            raise EngineUnavailable(
                f"Argo at {self.host} unreachable to {what}: {exc}", maybe_delivered=not _never_connected(exc)
            ) from exc
        except requests.RequestException as exc:  # read timed out, reset, TLS, a body that is not JSON
            raise EngineUnavailable(f"Argo at {self.host} unreachable to {what}: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            # Hera parsing an answer that is not Argo's (an error body without "message", a 200 that
            # is not a Workflow): something other than Argo answered, e.g. a proxy.
            raise EngineUnavailable(f"unexpected answer from {self.host} to {what}: {exc!r}") from exc


class WorkflowApiError(Exception):
    """What a transport other than Hera's (healer/engines/kube_workflows.py) raises: the server refused
    (``status``) or did not answer (``status`` None); ``maybe_delivered``: a create may have been
    applied although no answer came back."""

    def __init__(self, message: str, *, status: int | None, maybe_delivered: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.maybe_delivered = maybe_delivered


def _workflow_json(workflow: Workflow) -> dict[str, Any]:
    """A Workflow model as Argo's JSON (what ``argo get -o json`` prints)."""
    dump = getattr(workflow, "model_dump", None)
    if dump is not None:
        return dict(dump(by_alias=True, exclude_none=True, mode="json"))
    return dict(json.loads(workflow.json(by_alias=True, exclude_none=True)))  # pydantic v1


def _never_connected(exc: BaseException) -> bool:
    """Whether the request failed before a connection to Argo was made, so it certainly was not delivered:
    the host name did not resolve, the connection was refused or unreachable, or connecting timed out.

    A failure after connecting (a reset, a read timeout, a TLS error) may follow a request Argo received;
    a server certificate that fails verification does not: the handshake stops before any request.
    """
    import socket
    import ssl

    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        # urllib3's NewConnectionError (and its NameResolutionError) subclass ConnectTimeoutError.
        if isinstance(current, ConnectTimeoutError | socket.gaierror | ConnectionRefusedError):
            return True
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        if isinstance(current, MaxRetryError):
            todo.append(current.reason)
        todo += [current.__cause__, current.__context__]
        todo += [arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException)]
    return False


class _Conflict(Exception):
    """Argo answered 409 AlreadyExists."""
