"""A stand-in for the Argo Server API that enforces the official Argo v4.1.2 ``swagger.json``.

Argo cannot run here (no Kubernetes, no container runtime), so the engine is tested over real HTTP
against this server instead. It is strict where the real server is strict and where a mistake of
ours would otherwise pass unnoticed:

* method + path must match a path template of ``swagger.json`` (else 404);
* query parameters must be declared by the operation and of its type (else 400);
* JSON bodies must validate against the operation's body schema (else 400), plus a few checks Argo
  makes itself that the schema cannot express (a template to run, parameter names, label syntax);
* every answer it gives must validate against the operation's response schema: a failure there is
  a bug in this server, recorded in ``errors`` and raised when the context manager exits.

Only create, get and list workflows are implemented; other operations of the spec answer 501.
It is a stand-in, not Argo: no controller runs, tests script a workflow's progress themselves
(``set_phase``, ``finish``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import socket
import threading
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jsonschema

# Vendored from Argo v4.1.2 (origin and licence in tests/vendor/argo/README.md).
SWAGGER_PATH = Path(__file__).resolve().parent / "vendor" / "argo" / "swagger.json"

# gRPC codes as grpc-gateway puts them in error bodies, with the HTTP status it maps them to.
INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, UNAUTHENTICATED = (
    3,
    5,
    6,
    12,
    13,
    14,
    16,
)
DEADLINE_EXCEEDED, PERMISSION_DENIED, RESOURCE_EXHAUSTED = 4, 7, 8
_HTTP_STATUS = {
    DEADLINE_EXCEEDED: 504,
    PERMISSION_DENIED: 403,
    RESOURCE_EXHAUSTED: 429,
    INVALID_ARGUMENT: 400,
    NOT_FOUND: 404,
    ALREADY_EXISTS: 409,
    UNIMPLEMENTED: 501,
    INTERNAL: 500,
    UNAVAILABLE: 503,
    UNAUTHENTICATED: 401,
}
_GRPC_CODE = {status: code for code, status in _HTTP_STATUS.items()}

_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ArgoError(Exception):
    """An error answer, in grpc-gateway's shape: ``{"code": <gRPC code>, "message": ...}``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS[self.code]


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    operation_id: str
    spec: Mapping[str, Any]

    def query_parameters(self) -> dict[str, Mapping[str, Any]]:
        return {p["name"]: p for p in self.spec.get("parameters", []) if p["in"] == "query"}

    def body_parameter(self) -> Mapping[str, Any] | None:
        return next((p for p in self.spec.get("parameters", []) if p["in"] == "body"), None)

    def response_schema(self, status: int | str) -> Mapping[str, Any] | None:
        response = self.spec.get("responses", {}).get(str(status))
        return None if response is None else response.get("schema")


def _format_checker() -> jsonschema.FormatChecker:
    # jsonschema checks "date-time" only when rfc3339-validator is installed: check it ourselves,
    # so a timestamp in the wrong shape fails here rather than in a client's parser.
    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("date-time")
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or _RFC3339.fullmatch(value) is not None

    return checker


class SwaggerSpec:
    """Routing and JSON Schema validation from a Swagger 2.0 document."""

    def __init__(self, path: Path = SWAGGER_PATH) -> None:
        self.document: dict[str, Any] = json.loads(path.read_text())
        assert self.document.get("swagger") == "2.0", "expected a Swagger 2.0 document"
        self._routes: list[tuple[re.Pattern[str], list[str], int, str]] = []
        for template in self.document["paths"]:
            names = re.findall(r"\{([^}/]+)\}", template)
            pattern = re.escape(template)
            for name in names:
                pattern = pattern.replace(re.escape("{" + name + "}"), "([^/]+)")
            literal_segments = sum(1 for part in template.split("/") if part and "{" not in part)
            self._routes.append((re.compile(pattern), names, literal_segments, template))
        # Literal segments beat parameters: /workflows/{namespace}/lint is not /workflows/{namespace}/{name}.
        self._routes.sort(key=lambda route: -route[2])
        self._validators: dict[str, jsonschema.Draft4Validator] = {}
        self._lock = threading.Lock()
        self._format_checker = _format_checker()

    def route(self, method: str, path: str) -> tuple[Operation, dict[str, str]]:
        for pattern, names, _, template in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            operation = self.document["paths"][template].get(method.lower())
            if operation is None:
                continue  # another template may still match with this method
            params = {name: unquote(value) for name, value in zip(names, match.groups(), strict=True)}
            return Operation(method.upper(), template, operation["operationId"], operation), params
        raise ArgoError(NOT_FOUND, f"Not Found: no operation {method.upper()} {path} in swagger.json")

    def validator(self, schema: Mapping[str, Any]) -> jsonschema.Draft4Validator:
        """A Draft 4 validator (Swagger 2.0's schema dialect) that resolves ``#/definitions/...``."""
        key = json.dumps(schema, sort_keys=True)
        with self._lock:
            validator = self._validators.get(key)
            if validator is None:
                full = {"allOf": [schema], "definitions": self.document["definitions"]}
                jsonschema.Draft4Validator.check_schema({"allOf": [schema]})
                validator = jsonschema.Draft4Validator(full, format_checker=self._format_checker)
                self._validators[key] = validator
            return validator

    def errors(self, schema: Mapping[str, Any], instance: Any) -> list[str]:
        """Every validation error, as ``path: message`` lines, best match first."""
        validator = self.validator(schema)
        found = list(validator.iter_errors(instance))
        if not found:
            return []
        best = jsonschema.exceptions.best_match(found)
        ordered = [best, *(error for error in found if error is not best)]
        return [f"{error.json_path}: {error.message}" for error in ordered]


@functools.cache
def default_spec() -> SwaggerSpec:
    """The official spec, parsed once per test session (800 kB of JSON)."""
    return SwaggerSpec()


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: Any  # the parsed JSON body, or None
    operation_id: str | None = None  # None when no operation of the spec matched


@dataclass
class _Fault:
    remaining: int
    status: int
    message: str


class ArgoServer:
    """The stand-in server. Use as a context manager; ``url`` is ``http://127.0.0.1:<port>/``."""

    def __init__(
        self,
        *,
        spec: SwaggerSpec | None = None,
        token: str | None = None,
        templates: Mapping[str, frozenset[str] | set[str]] | None = None,
    ) -> None:
        """``token``: require ``Authorization: Bearer <token>``. ``templates``: WorkflowTemplates that
        exist, by name, with the parameters they require (None: accept any template reference)."""
        self.spec = spec or default_spec()
        self.token = token
        self.templates = None if templates is None else {k: frozenset(v) for k, v in templates.items()}
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []  # bugs of this server: raised on exit
        self._workflows: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []
        self._delay_s = 0.0
        self._resource_version = 1000
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._handler_threads: set[threading.Thread] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> ArgoServer:
        handler = type("Handler", (_Handler,), {"argo": self})
        httpd = _QuietServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        # 50 clients connect at once in the concurrency tests: the default backlog of 5 drops SYNs,
        # and a dropped SYN costs the client a one-second retransmit.
        httpd.request_queue_size = 256
        httpd.daemon_threads = True
        httpd.server_bind()
        httpd.server_activate()
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name="argo-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping on an injected delay
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
            threads = list(self._handler_threads)
        for connection in connections:  # keep-alive handlers wait for a next request: end them
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout=5)
        self._httpd.server_close()
        assert self._thread is not None
        self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ArgoServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if exc_type is None:
            self.check()

    def check(self) -> None:
        """Fail loudly on a bug of this server, even when the client under test swallowed its 500."""
        assert not self.errors, "the Argo stand-in broke its own contract:\n" + "\n".join(self.errors)

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    # -- faults ---------------------------------------------------------------------------------

    def fail_next(self, count: int, status: int = 503, message: str = "the Argo stand-in is unavailable") -> None:
        """Answer the next ``count`` requests with ``status`` (after recording them)."""
        with self._lock:
            self._faults.append(_Fault(count, status, message))

    def set_delay(self, seconds: float) -> None:
        """Hold every answer for ``seconds`` (0 to stop); a stopping server cuts the wait short."""
        self._delay_s = seconds

    # -- workflows, as tests script them ----------------------------------------------------------

    def workflows(self, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(wf) for (ns, _), wf in self._workflows.items() if namespace in (None, ns)]

    def workflow(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._find(name, namespace))

    def set_phase(self, name: str, phase: str, message: str = "", namespace: str | None = None) -> None:
        with self._lock:
            wf = self._find(name, namespace)
            status = wf.setdefault("status", {})
            status["phase"] = phase
            if message:
                status["message"] = message
            else:
                status.pop("message", None)
            if phase and phase != "Pending":
                status.setdefault("startedAt", now_rfc3339())
            self._touch(wf)

    def finish(
        self,
        name: str,
        phase: str,
        *,
        outputs: Mapping[str, str] | None = None,
        message: str = "",
        steps: Mapping[str, Mapping[str, str]] | None = None,
        global_outputs: Mapping[str, str] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Complete a workflow as Argo's controller would: phase, times, a node tree with outputs.

        ``steps`` maps step name to its output parameters (one Pod node each, in order);
        by default a single step ``rollback`` carries ``outputs``. On failure the last step fails
        with ``message``. ``global_outputs`` become ``status.outputs`` (the workflow's own outputs).
        """
        assert phase in {"Succeeded", "Failed", "Error"}, phase
        steps = steps if steps is not None else {"rollback": outputs or {}}
        with self._lock:
            wf = self._find(name, namespace)
            status = wf.setdefault("status", {})
            started = status.get("startedAt") or now_rfc3339()
            finished = now_rfc3339()
            nodes: dict[str, Any] = {}
            children = []
            for index, (step, parameters) in enumerate(steps.items()):
                last = index == len(steps) - 1
                node_phase = phase if last else "Succeeded"
                node_id = f"{name}-{zlib.crc32(f'{name}[{index}].{step}'.encode())}"
                node: dict[str, Any] = {
                    "id": node_id,
                    "name": f"{name}[{index}].{step}",
                    "displayName": step,
                    "type": "Pod",
                    "templateName": step,
                    "templateScope": f"namespaced/{wf['spec'].get('workflowTemplateRef', {}).get('name', name)}",
                    "boundaryID": name,
                    "phase": node_phase,
                    "startedAt": started,
                    "finishedAt": finished,
                    "progress": "1/1",
                    "hostNodeName": "stand-in-node",
                    "outputs": {
                        "parameters": [{"name": key, "value": value} for key, value in parameters.items()],
                        "exitCode": "0" if node_phase == "Succeeded" else "1",
                    },
                    "resourcesDuration": {"cpu": 1, "memory": 1},
                }
                if node_phase != "Succeeded" and message:
                    node["message"] = message
                nodes[node_id] = node
                children.append(node_id)
            nodes[name] = {
                "id": name,
                "name": name,
                "displayName": name,
                "type": "Steps",
                "templateName": "rollback",
                "phase": phase,
                "startedAt": started,
                "finishedAt": finished,
                "progress": f"{len(children)}/{len(children)}",
                "children": children[:1],
                "outboundNodes": children[-1:],
            }
            status.update(
                {
                    "phase": phase,
                    "startedAt": started,
                    "finishedAt": finished,
                    "nodes": nodes,
                    "progress": f"{len(children)}/{len(children)}",
                }
            )
            if phase != "Succeeded":
                status["message"] = message or f"child '{children[-1]}' failed"
            else:
                status.pop("message", None)
            if global_outputs:
                status["outputs"] = {"parameters": [{"name": k, "value": v} for k, v in global_outputs.items()]}
            wf["metadata"].setdefault("labels", {})["workflows.argoproj.io/completed"] = "true"
            self._touch(wf)

    def set_status(self, name: str, status: Mapping[str, Any], namespace: str | None = None) -> None:
        """Replace ``status`` wholesale (it must still validate when served)."""
        with self._lock:
            wf = self._find(name, namespace)
            wf["status"] = copy.deepcopy(dict(status))
            self._touch(wf)

    def _find(self, name: str, namespace: str | None) -> dict[str, Any]:
        for (ns, wf_name), wf in self._workflows.items():
            if wf_name == name and namespace in (None, ns):
                return wf
        raise KeyError(f"no workflow {name!r} on the stand-in")

    def _touch(self, wf: dict[str, Any]) -> None:
        self._resource_version += 1
        wf["metadata"]["resourceVersion"] = str(self._resource_version)
        phase = wf.get("status", {}).get("phase")
        if phase:
            wf["metadata"].setdefault("labels", {})["workflows.argoproj.io/phase"] = phase

    # -- request handling ---------------------------------------------------------------------------

    def handle(
        self, method: str, raw_path: str, headers: Mapping[str, str], raw_body: bytes
    ) -> tuple[int, dict[str, Any] | None]:
        """Answer one request: (status, JSON body). Raises nothing; server bugs become 500s."""
        split = urlsplit(raw_path)
        query = parse_qs(split.query, keep_blank_values=True)
        body: Any = None
        body_error: ArgoError | None = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError as exc:
                body_error = ArgoError(INVALID_ARGUMENT, f"invalid JSON body: {exc}")
        try:
            operation, path_params = self.spec.route(method, split.path)
        except ArgoError as error:
            operation, path_params, route_error = None, {}, error
        with self._lock:
            operation_id = operation.operation_id if operation else None
            self.requests.append(RecordedRequest(method, split.path, query, dict(headers), body, operation_id))
            fault = next((f for f in self._faults if f.remaining > 0), None)
            if fault is not None:
                fault.remaining -= 1
        if self._delay_s and self._stopping.wait(self._delay_s):
            return 0, None  # stopping: drop the connection
        try:
            if fault is not None:
                raise ArgoError(_GRPC_CODE.get(fault.status, UNAVAILABLE), fault.message)
            if operation is None:
                raise route_error
            return self._answer(operation, path_params, query, headers, body_error or body)
        except ArgoError as error:
            answer = {"code": error.code, "message": error.message}
            if operation is not None:
                problems = self._response_problems(operation, "default", answer)
                if problems:
                    return self._server_bug(f"error answer breaks swagger.json: {problems[0]}")
            return (fault.status if fault else error.http_status), answer
        except Exception as exc:  # a bug in the stand-in: fail the test, do not hide it
            return self._server_bug(f"{type(exc).__name__}: {exc}")

    def _answer(
        self,
        operation: Operation,
        path_params: Mapping[str, str],
        query: Mapping[str, list[str]],
        headers: Mapping[str, str],
        body: Any,
    ) -> tuple[int, dict[str, Any]]:
        self._authorise(headers)
        self._check_query(operation, query)
        if isinstance(body, ArgoError):
            raise body
        self._check_body(operation, headers, body)
        answer = self._dispatch(operation, path_params, query, body)
        problems = self._response_problems(operation, 200, answer)
        if problems:
            return self._server_bug(f"{operation.operation_id} 200 answer breaks swagger.json: {problems[0]}")
        return 200, answer

    def _server_bug(self, message: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.errors.append(message)
        return 500, {"code": INTERNAL, "message": f"Argo stand-in bug: {message}"}

    def _response_problems(self, operation: Operation, status: int | str, answer: Any) -> list[str]:
        schema = operation.response_schema(status)
        assert schema is not None, f"{operation.operation_id} declares no {status} response"
        return self.spec.errors(schema, answer)

    def _authorise(self, headers: Mapping[str, str]) -> None:
        if self.token is None:
            return
        supplied = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        if supplied != f"Bearer {self.token}":
            raise ArgoError(
                UNAUTHENTICATED, "token not valid. see https://argo-workflows.readthedocs.io/en/latest/faq/"
            )

    def _check_query(self, operation: Operation, query: Mapping[str, list[str]]) -> None:
        declared = operation.query_parameters()
        for name, values in query.items():
            parameter = declared.get(name)
            if parameter is None:
                raise ArgoError(INVALID_ARGUMENT, f"unknown query parameter {name!r} for {operation.operation_id}")
            kind = parameter.get("type")
            if kind != "array" and len(values) > 1:
                raise ArgoError(INVALID_ARGUMENT, f"query parameter {name!r} given {len(values)} times")
            for value in values:
                if kind == "boolean" and value not in {"true", "false"}:
                    raise ArgoError(INVALID_ARGUMENT, f"query parameter {name!r}: {value!r} is not a boolean")
                integral = kind == "integer" or parameter.get("format") in {"int64", "int32"}
                if integral and not re.fullmatch(r"-?\d+", value):
                    raise ArgoError(INVALID_ARGUMENT, f"query parameter {name!r}: {value!r} is not an integer")

    def _check_body(self, operation: Operation, headers: Mapping[str, str], body: Any) -> None:
        parameter = operation.body_parameter()
        if parameter is None:
            if body is not None:
                raise ArgoError(INVALID_ARGUMENT, f"{operation.operation_id} takes no body")
            return
        if body is None:
            if parameter.get("required"):
                raise ArgoError(INVALID_ARGUMENT, f"{operation.operation_id} needs a JSON body")
            return
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if content_type.split(";")[0].strip() != "application/json":
            raise ArgoError(INVALID_ARGUMENT, f"body must be application/json, got {content_type!r}")
        problems = self.spec.errors(parameter["schema"], body)
        if problems:
            raise ArgoError(INVALID_ARGUMENT, f"request body breaks swagger.json: {problems[0]}")

    def _dispatch(
        self, operation: Operation, params: Mapping[str, str], query: Mapping[str, list[str]], body: Any
    ) -> dict[str, Any]:
        handler = {
            "WorkflowService_CreateWorkflow": self._create,
            "WorkflowService_GetWorkflow": self._get,
            "WorkflowService_ListWorkflows": self._list,
        }.get(operation.operation_id)
        if handler is None:
            raise ArgoError(UNIMPLEMENTED, f"{operation.operation_id} is not implemented by the Argo stand-in")
        return handler(params, query, body)

    def _create(self, params: Mapping[str, str], _query: Mapping[str, list[str]], body: Any) -> dict[str, Any]:
        namespace = params["namespace"]
        wf = copy.deepcopy(body.get("workflow"))
        if not wf:
            raise ArgoError(INVALID_ARGUMENT, "workflow is required")
        _check_workflow(wf, self.templates)
        metadata = wf["metadata"]
        if metadata.get("namespace", namespace) != namespace:
            raise ArgoError(INVALID_ARGUMENT, f"metadata.namespace {metadata['namespace']!r} is not {namespace!r}")
        if not metadata.get("name"):
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        name = metadata["name"]
        with self._lock:
            if (namespace, name) in self._workflows:
                raise ArgoError(ALREADY_EXISTS, f'workflows.argoproj.io "{name}" already exists')
            metadata.update(
                {
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now_rfc3339(),
                    "generation": 1,
                }
            )
            metadata.setdefault("labels", {})["workflows.argoproj.io/creator"] = "system-serviceaccount-argo-server"
            wf.setdefault("apiVersion", "argoproj.io/v1alpha1")
            wf.setdefault("kind", "Workflow")
            wf["status"] = {"phase": "Pending"}
            self._touch(wf)
            if not body.get("serverDryRun"):
                self._workflows[(namespace, name)] = wf
            return copy.deepcopy(wf)

    def _get(self, params: Mapping[str, str], _query: Mapping[str, list[str]], _body: Any) -> dict[str, Any]:
        with self._lock:
            wf = self._workflows.get((params["namespace"], params["name"]))
            if wf is None:
                raise ArgoError(NOT_FOUND, f'workflows.argoproj.io "{params["name"]}" not found')
            return copy.deepcopy(wf)

    def _list(self, params: Mapping[str, str], query: Mapping[str, list[str]], _body: Any) -> dict[str, Any]:
        selector = _parse_selector(query.get("listOptions.labelSelector", [""])[0])
        with self._lock:
            items = [
                copy.deepcopy(wf)
                for (ns, _), wf in sorted(self._workflows.items())
                if ns == params["namespace"] and _selected(wf["metadata"].get("labels", {}), selector)
            ]
            return {"metadata": {"resourceVersion": str(self._resource_version)}, "items": items}

    # bookkeeping used by the handler

    def _register(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)
            self._handler_threads.add(threading.current_thread())

    def _unregister(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)
            self._handler_threads.discard(threading.current_thread())


def _check_workflow(wf: Mapping[str, Any], templates: Mapping[str, frozenset[str]] | None) -> None:
    """What Argo's own validation insists on that swagger.json cannot say."""
    _check_metadata(wf["metadata"])
    spec = wf["spec"]
    ref = spec.get("workflowTemplateRef")
    if ref is not None:
        if not ref.get("name"):
            raise ArgoError(INVALID_ARGUMENT, "spec.workflowTemplateRef.name is required")
    elif not spec.get("templates"):
        raise ArgoError(INVALID_ARGUMENT, "spec.templates or spec.workflowTemplateRef is required")
    elif not spec.get("entrypoint"):
        raise ArgoError(INVALID_ARGUMENT, "spec.entrypoint is required")
    supplied: dict[str, Any] = {}
    for parameter in (spec.get("arguments") or {}).get("parameters") or []:
        if not parameter["name"]:
            raise ArgoError(INVALID_ARGUMENT, "spec.arguments.parameters: name must not be empty")
        if parameter["name"] in supplied:
            raise ArgoError(INVALID_ARGUMENT, f"spec.arguments.parameters: {parameter['name']!r} given twice")
        supplied[parameter["name"]] = parameter
    if ref is not None and templates is not None:
        required = templates.get(ref["name"])
        if required is None:
            raise ArgoError(INVALID_ARGUMENT, f'workflowtemplates.argoproj.io "{ref["name"]}" not found')
        for missing in sorted(required - {k for k, p in supplied.items() if p.get("value") is not None}):
            raise ArgoError(INVALID_ARGUMENT, f"spec.arguments.{missing}.value is required")


def _check_metadata(metadata: Mapping[str, Any]) -> None:
    name = metadata.get("name") or ""
    if not name and not metadata.get("generateName"):
        raise ArgoError(INVALID_ARGUMENT, "metadata.name or metadata.generateName is required")
    if name and (len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name)):
        raise ArgoError(INVALID_ARGUMENT, f"metadata.name {name!r} is not a valid Kubernetes object name")
    for key, value in (metadata.get("labels") or {}).items():
        _check_label(key, value)
    for key in metadata.get("annotations") or {}:
        _check_label(key, "")


def _check_label(key: str, value: str) -> None:
    prefix, _, label = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ArgoError(INVALID_ARGUMENT, f"metadata key {key!r}: invalid prefix")
    if len(label) > 63 or not _LABEL_NAME.fullmatch(label):
        raise ArgoError(INVALID_ARGUMENT, f"metadata key {key!r}: invalid name")
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ArgoError(INVALID_ARGUMENT, f"label {key}={value!r}: not a valid label value")


def _parse_selector(selector: str) -> list[tuple[str, str | None, bool]]:
    """Equality selectors only (``a=b``, ``a==b``, ``a!=b``, ``a``): enough for tests, loud otherwise."""
    terms: list[tuple[str, str | None, bool]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), value.strip(), False))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            terms.append((key.strip(), value.strip(), True))
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", term):
            terms.append((term, None, True))
        else:
            raise ArgoError(INVALID_ARGUMENT, f"label selector {term!r} is not supported by the Argo stand-in")
    return terms


def _selected(labels: Mapping[str, str], terms: list[tuple[str, str | None, bool]]) -> bool:
    for key, value, equal in terms:
        if value is None:
            if key not in labels:
                return False
        elif (labels.get(key) == value) != equal:
            return False
    return True


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up (timeouts, stop()) are expected; server bugs are caught in handle()


class _Handler(BaseHTTPRequestHandler):
    argo: ArgoServer  # set on the subclass made by ArgoServer.start
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server; stop() closes idle connections
    timeout = 10  # a client that connects and says nothing does not pin a thread forever

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without NODELAY, Nagle plus the client's
        # delayed ACK add 40 ms to every answer on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.argo._register(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.argo._unregister(self.connection)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        status, answer = self.argo.handle(self.command, self.path, dict(self.headers.items()), raw_body)
        if status == 0:
            self.close_connection = True
            return
        payload = json.dumps(answer).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client timed out and left (a delay test): its choice, not a server bug
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests assert on server.requests, not on stderr


def free_port() -> int:
    """A port nothing listens on (bound, then released): for "server down" tests."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bodies(server: ArgoServer, operation_id: str) -> list[Any]:
    """The JSON bodies of the recorded requests for one operation, in order."""
    return [r.body for r in list(server.requests) if r.operation_id == operation_id]
