"""ArgoEngine over real HTTP against the swagger-enforcing Argo stand-in (tests/argo_server.py).

Argo itself cannot run here; the stand-in validates every request body and every answer against
the official Argo v4.1.2 swagger.json, so what passes here is at least what Argo's API accepts.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from healer.engines import (
    TEMPLATE_NAME,
    EngineNotFound,
    EngineRejected,
    EngineUnavailable,
    RollbackRequest,
    RunStatus,
    Submission,
    workflow_name,
)
from healer.engines.argo import ArgoEngine, label_value
from tests.argo_server import ArgoServer, bodies, free_port

NAMESPACE = "healer"
CREATE = "WorkflowService_CreateWorkflow"
GET = "WorkflowService_GetWorkflow"
REQUEST = RollbackRequest(
    model="linear_scorer",
    from_version="3",
    incident="inc-20240101-0001",
    reason="wrong-answer",
    detail="golden request #2: expected [1.5], got [NaN] (<script>)",
    pod="triton-0",
)
# The template gives every parameter a default; the stand-in is stricter and requires them all,
# so a parameter the engine stopped sending would fail here rather than silently take a default.
TEMPLATES = {TEMPLATE_NAME: frozenset(REQUEST.parameters())}

# Hera 7.1 serialises requests with pydantic's deprecated .json(): not ours to fix, not a failure.
pytestmark = pytest.mark.filterwarnings("ignore:The `json` method is deprecated:DeprecationWarning")


class FakeTime:
    """A clock that moves only when the engine sleeps; ``on_sleep`` scripts the server meanwhile."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] = lambda _count: None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))


@pytest.fixture
def server() -> Iterator[ArgoServer]:
    with ArgoServer(templates=TEMPLATES) as argo:
        yield argo


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def engine(server: ArgoServer, fake_time: FakeTime) -> Iterator[ArgoEngine]:
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=2.0, clock=fake_time.clock, sleep=fake_time.sleep) as argo:
        yield argo


def _create_errors(server: ArgoServer, body: Any) -> list[str]:
    operation, _ = server.spec.route("POST", f"/api/v1/workflows/{NAMESPACE}")
    parameter = operation.body_parameter()
    assert parameter is not None
    return server.spec.errors(parameter["schema"], body)


# -- submit -------------------------------------------------------------------------------------


def test_submit_creates_one_workflow_that_references_the_template(engine: ArgoEngine, server: ArgoServer) -> None:
    submission = engine.submit(REQUEST)

    assert submission == Submission(workflow_name(REQUEST), created=True)
    [created] = server.workflows(NAMESPACE)
    [body] = bodies(server, CREATE)
    assert _create_errors(server, body) == []  # the server checked too; this proves what it checked
    [recorded] = [r for r in server.requests if r.operation_id == CREATE]
    assert recorded.path == f"/api/v1/workflows/{NAMESPACE}"
    assert recorded.headers["Content-Type"] == "application/json"
    assert "Authorization" not in recorded.headers

    workflow = body["workflow"]
    assert workflow["metadata"]["name"] == submission.name == created["metadata"]["name"]
    assert workflow["spec"]["workflowTemplateRef"] == {"name": TEMPLATE_NAME}
    assert "templates" not in workflow["spec"]  # the template's steps live in the cluster, not here
    parameters = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}
    assert parameters == REQUEST.parameters()
    assert workflow["metadata"]["labels"] == {
        "healer.io/model": "linear_scorer",
        "healer.io/from-version": "3",
        "healer.io/to-version": "auto",
        "healer.io/reason": "wrong-answer",
        "healer.io/incident": "inc-20240101-0001",
    }
    annotations = workflow["metadata"]["annotations"]
    assert annotations["workflows.argoproj.io/title"] == "Rollback linear_scorer v3 → stable"
    description = annotations["workflows.argoproj.io/description"]
    for text in ("`linear_scorer`", "v3", "newest stable", "wrong-answer", "`inc-20240101-0001`", "`triton-0`"):
        assert text in description
    assert "\\<script\\>" in description  # the probe's text is shown, not rendered
    assert created["status"]["phase"] == "Pending"


def test_parameters_are_the_ones_the_template_declares(engine: ArgoEngine, server: ArgoServer) -> None:
    from workflows.rollback import PARAMETERS

    # Empty values are sent as "", not dropped (pydantic's exclude_defaults only drops None).
    bare = RollbackRequest(model="linear_scorer", from_version="3", incident="inc-2", to_version="2")
    engine.submit(bare)
    [body] = bodies(server, CREATE)
    parameters = {p["name"]: p["value"] for p in body["workflow"]["spec"]["arguments"]["parameters"]}
    assert parameters["detail"] == parameters["pod"] == ""
    assert sorted(parameters) == sorted(PARAMETERS)
    assert body["workflow"]["metadata"]["annotations"]["workflows.argoproj.io/title"] == (
        "Rollback linear_scorer v3 → v2"
    )


def test_second_submit_joins_the_first(engine: ArgoEngine, server: ArgoServer) -> None:
    first = engine.submit(REQUEST)
    second = engine.submit(REQUEST)

    assert first.created and not second.created
    assert second.name == first.name
    assert len(server.workflows()) == 1
    assert len(bodies(server, CREATE)) == 2


@pytest.mark.parametrize("shared", [True, False], ids=["one-engine", "engine-per-thread"])
def test_concurrent_submits_create_exactly_one(server: ArgoServer, shared: bool) -> None:
    threads = 50
    engines = [ArgoEngine(server.url, NAMESPACE, request_timeout_s=5.0) for _ in range(1 if shared else threads)]
    barrier = threading.Barrier(threads)
    results: list[Submission | BaseException] = []

    def submit(index: int) -> None:
        barrier.wait()
        try:
            results.append(engines[0 if shared else index].submit(REQUEST))
        except BaseException as exc:  # collected, asserted below
            results.append(exc)

    workers = [threading.Thread(target=submit, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=10)
    for engine in engines:
        engine.close()

    assert all(isinstance(r, Submission) for r in results), results
    assert len(results) == threads
    assert sum(1 for r in results if isinstance(r, Submission) and r.created) == 1
    assert {r.name for r in results if isinstance(r, Submission)} == {workflow_name(REQUEST)}
    assert len(server.workflows()) == 1
    assert len(bodies(server, CREATE)) == threads


def test_odd_model_names_become_valid_distinct_labels(engine: ArgoEngine, server: ArgoServer) -> None:
    long_a = "Scorer for EU/West traffic, " * 4 + "A"
    long_b = "Scorer for EU/West traffic, " * 4 + "B"
    for model, incident in ((long_a, "inc-a"), (long_b, "inc-b")):
        engine.submit(RollbackRequest(model=model, from_version="1", incident=incident))  # the server checks syntax

    labels = [wf["metadata"]["labels"]["healer.io/model"] for wf in server.workflows()]
    assert len(set(labels)) == 2
    assert all(len(value) <= 63 for value in labels)
    assert label_value("linear_scorer") == "linear_scorer"
    assert label_value("") == ""


def test_workflows_can_be_found_by_incident_label(engine: ArgoEngine, server: ArgoServer) -> None:
    from hera.workflows import WorkflowsService

    engine.submit(REQUEST)
    engine.submit(RollbackRequest(model="linear_scorer", from_version="3", incident="inc-other"))
    with WorkflowsService(host=server.url, namespace=NAMESPACE) as service:
        found = service.list_workflows(label_selector=f"healer.io/incident={REQUEST.incident}")
    assert [wf.metadata.name for wf in found.items or []] == [workflow_name(REQUEST)]


# -- status ---------------------------------------------------------------------------------------


def test_status_follows_pending_running_succeeded(engine: ArgoEngine, server: ArgoServer) -> None:
    name = engine.submit(REQUEST).name

    pending = engine.status(name)
    assert pending == RunStatus(name, "Pending")
    assert not pending.done

    server.set_status(name, {"phase": ""})  # created, not yet seen by the controller
    assert engine.status(name).phase == "Pending"

    server.set_phase(name, "Running")
    running = engine.status(name)
    assert running.phase == "Running"
    assert running.started_at is not None and running.started_at.endswith("Z")
    assert running.finished_at is None and not running.done

    server.finish(
        name,
        "Succeeded",
        steps={
            "fetch-stable": {"to-version": "2", "source": "s3://models/linear_scorer/2"},
            "promote": {"to-version": "2", "previous-version": "3"},
        },
        global_outputs={"result": "rolled-back"},
    )
    done = engine.status(name)
    assert done.succeeded and done.done
    assert done.started_at == running.started_at
    assert done.finished_at is not None
    assert dict(done.outputs) == {
        "to-version": "2",
        "source": "s3://models/linear_scorer/2",
        "previous-version": "3",
        "result": "rolled-back",
    }
    assert [r.operation_id for r in server.requests].count(GET) == 4


def test_status_of_a_failed_workflow_names_the_failed_step(engine: ArgoEngine, server: ArgoServer) -> None:
    name = engine.submit(REQUEST).name
    server.finish(name, "Failed", steps={"fetch-stable": {}, "verify": {}}, message="golden request #2 still wrong")

    failed = engine.status(name)
    assert failed.phase == "Failed" and failed.done and not failed.succeeded
    assert "golden request #2 still wrong" in failed.message


def test_status_of_an_unknown_workflow_is_rejected(engine: ArgoEngine) -> None:
    with pytest.raises(EngineNotFound, match="not found"):
        engine.status("healer-rollback-nope-0000000000")


# -- wait -----------------------------------------------------------------------------------------


def test_wait_returns_when_succeeded(engine: ArgoEngine, server: ArgoServer, fake_time: FakeTime) -> None:
    name = engine.submit(REQUEST).name

    def progress(sleeps: int) -> None:
        if sleeps == 2:
            server.set_phase(name, "Running")
        if sleeps == 4:
            server.finish(name, "Succeeded", outputs={"to-version": "2"})

    fake_time.on_sleep = progress
    result = engine.wait(name, timeout_s=60)

    assert result.succeeded
    assert result.outputs["to-version"] == "2"
    assert fake_time.sleeps == [1.0] * 4  # polled every poll_interval_s, stopped at once when done


def test_wait_returns_pending_status_at_the_deadline(
    engine: ArgoEngine, server: ArgoServer, fake_time: FakeTime
) -> None:
    # Queued on a mutex: Pending for ever. Hera's own wait() would return at once; ours waits, bounded.
    name = engine.submit(REQUEST).name
    start, started = fake_time.now, time.monotonic()

    result = engine.wait(name, timeout_s=30)

    assert result.phase == "Pending" and not result.done
    assert fake_time.now - start == pytest.approx(30)
    assert len(fake_time.sleeps) == 30
    assert time.monotonic() - started < 2  # fake time: no real waiting


def test_wait_tolerates_a_transient_outage(engine: ArgoEngine, server: ArgoServer, fake_time: FakeTime) -> None:
    name = engine.submit(REQUEST).name
    server.finish(name, "Succeeded", outputs={"to-version": "2"})
    server.fail_next(3, status=503)

    assert engine.wait(name, timeout_s=10).succeeded
    assert len(fake_time.sleeps) == 3


def test_wait_raises_when_argo_never_answers(engine: ArgoEngine, server: ArgoServer, fake_time: FakeTime) -> None:
    name = engine.submit(REQUEST).name
    server.fail_next(1000, status=503)

    with pytest.raises(EngineUnavailable, match="no status"):
        engine.wait(name, timeout_s=5)
    assert fake_time.now - 1000.0 == pytest.approx(5)


def test_wait_stops_at_once_when_the_workflow_is_gone(engine: ArgoEngine, fake_time: FakeTime) -> None:
    with pytest.raises(EngineRejected):
        engine.wait("healer-rollback-gone-0000000000", timeout_s=60)
    assert fake_time.sleeps == []


# -- failures ------------------------------------------------------------------------------------


def test_server_down_is_unavailable_within_the_request_timeout() -> None:
    with ArgoEngine(f"http://127.0.0.1:{free_port()}", NAMESPACE, request_timeout_s=1.0) as engine:
        started = time.monotonic()
        with pytest.raises(EngineUnavailable, match="unreachable") as refused:
            engine.submit(REQUEST)
        assert refused.value.maybe_delivered is False  # refused: nothing reached Argo, safe to fall back
        with pytest.raises(EngineUnavailable):
            engine.status(workflow_name(REQUEST))
        assert time.monotonic() - started < 1.0


def test_slow_server_is_unavailable_quickly(server: ArgoServer) -> None:
    server.set_delay(5.0)
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=0.2) as engine:
        started = time.monotonic()
        with pytest.raises(EngineUnavailable, match="timed out") as timed_out:
            engine.submit(REQUEST)
        assert time.monotonic() - started < 1.0
    # Sent, then no answer in time: Argo may have created it, so it must not be handed to another engine.
    assert timed_out.value.maybe_delivered is True
    assert len(bodies(server, CREATE)) == 1


def test_unresolvable_host_was_certainly_not_delivered() -> None:
    """A DNS failure (the real resolver; .invalid never resolves, RFC 6761) means no connection was
    made: the sidecar may fall back to the in-pod engine at once."""
    host = "http://healer-no-such-host.invalid:2746"
    with ArgoEngine(host, NAMESPACE, request_timeout_s=2.0) as engine:
        with pytest.raises(EngineUnavailable, match=r"healer-no-such-host\.invalid") as unresolved:
            engine.submit(REQUEST)
        assert unresolved.value.maybe_delivered is False
        assert isinstance(unresolved.value.__cause__, requests.ConnectionError)
        with pytest.raises(EngineUnavailable) as again:
            engine.status(workflow_name(REQUEST))
        assert again.value.maybe_delivered is False


def test_503_is_unavailable_and_not_sticky(engine: ArgoEngine, server: ArgoServer) -> None:
    server.fail_next(1, status=503, message="etcd leader changed")
    with pytest.raises(EngineUnavailable, match="etcd leader changed"):
        engine.submit(REQUEST)
    assert engine.submit(REQUEST).created  # nothing was created by the failed attempt


def test_400_is_rejected_with_the_server_message(engine: ArgoEngine, server: ArgoServer) -> None:
    server.fail_next(1, status=400, message="spec.arguments.model.value is required")
    with pytest.raises(EngineRejected, match=r"HTTP 400.*spec\.arguments\.model\.value is required"):
        engine.submit(REQUEST)


def test_a_template_argo_does_not_know_is_rejected(server: ArgoServer) -> None:
    with (
        ArgoEngine(server.url, NAMESPACE, template_name="healer-rollback-v0") as engine,
        pytest.raises(EngineRejected, match=r'workflowtemplates\.argoproj\.io "healer-rollback-v0" not found'),
    ):
        engine.submit(REQUEST)
    assert server.workflows() == []


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, EngineRejected),
        (403, EngineRejected),
        (404, EngineNotFound),
        (429, EngineUnavailable),
        (500, EngineUnavailable),
        (502, EngineUnavailable),
        (504, EngineUnavailable),
    ],
)
def test_status_codes_map_to_engine_errors(
    engine: ArgoEngine, server: ArgoServer, status: int, error: type[Exception]
) -> None:
    server.fail_next(1, status=status, message=f"injected {status}")
    with pytest.raises(error, match=f"HTTP {status}.*injected {status}") as raised:
        engine.submit(REQUEST)
    # Only a 404 says the workflow does not exist: a 401 or 403 says nothing about it.
    assert isinstance(raised.value, EngineNotFound) is (status == 404)


@pytest.mark.parametrize("status", [400, 401, 403])
def test_a_refused_status_request_is_not_a_missing_workflow(
    engine: ArgoEngine, server: ArgoServer, status: int
) -> None:
    name = engine.submit(REQUEST).name
    server.fail_next(1, status=status, message=f"injected {status}")
    with pytest.raises(EngineRejected) as raised:
        engine.status(name)
    assert not isinstance(raised.value, EngineNotFound)


def test_a_non_json_error_page_is_mapped_by_its_status() -> None:
    # An ingress in front of Argo answers HTML, not grpc-gateway JSON.
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Html502(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            payload = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(502)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Html502)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with (
            ArgoEngine(f"http://127.0.0.1:{httpd.server_address[1]}", NAMESPACE) as engine,
            pytest.raises(EngineUnavailable, match=r"HTTP 502.*Bad Gateway"),
        ):
            engine.submit(REQUEST)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_token_is_sent_as_a_bearer_header() -> None:
    bearer = "not-a-real-token"
    with ArgoServer(token=bearer, templates=TEMPLATES) as server:
        with ArgoEngine(server.url, NAMESPACE, token=bearer) as engine:
            assert engine.submit(REQUEST).created
            assert engine.status(workflow_name(REQUEST)).phase == "Pending"
        assert {r.headers.get("Authorization") for r in server.requests} == {f"Bearer {bearer}"}

        with ArgoEngine(server.url, NAMESPACE) as anonymous, pytest.raises(EngineRejected, match="HTTP 401"):
            anonymous.status(workflow_name(REQUEST))


# -- the stand-in itself ----------------------------------------------------------------------------


def _valid_body() -> dict[str, Any]:
    return {
        "workflow": {
            "metadata": {"name": "rollback-1", "labels": {"healer.io/incident": "inc-1"}},
            "spec": {
                "workflowTemplateRef": {"name": TEMPLATE_NAME},
                "arguments": {"parameters": [{"name": k, "value": v} for k, v in REQUEST.parameters().items()]},
            },
        }
    }


def _without_parameter_name(body: dict[str, Any]) -> None:
    del body["workflow"]["spec"]["arguments"]["parameters"][0]["name"]


def _integer_value(body: dict[str, Any]) -> None:
    body["workflow"]["spec"]["arguments"]["parameters"][0]["value"] = 3


def _labels_not_strings(body: dict[str, Any]) -> None:
    body["workflow"]["metadata"]["labels"] = {"healer.io/model": ["linear_scorer"]}


def _bad_label_value(body: dict[str, Any]) -> None:
    body["workflow"]["metadata"]["labels"] = {"healer.io/model": "linear scorer"}


def _no_spec(body: dict[str, Any]) -> None:
    del body["workflow"]["spec"]


def _nameless_template_ref(body: dict[str, Any]) -> None:
    body["workflow"]["spec"]["workflowTemplateRef"] = {}


def _missing_parameter(body: dict[str, Any]) -> None:
    body["workflow"]["spec"]["arguments"]["parameters"].pop()


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (_without_parameter_name, "'name' is a required property"),
        (_integer_value, "3 is not of type 'string'"),
        (_labels_not_strings, "is not of type 'string'"),
        (_bad_label_value, "not a valid label value"),
        (_no_spec, "'spec' is a required property"),
        (_nameless_template_ref, "workflowTemplateRef.name is required"),
        (_missing_parameter, "spec.arguments.triton-url.value is required"),
    ],
)
def test_stand_in_rejects_malformed_workflows(
    server: ArgoServer, breakage: Callable[[dict[str, Any]], None], expected: str
) -> None:
    body = _valid_body()
    breakage(body)
    answer = requests.post(f"{server.url}api/v1/workflows/{NAMESPACE}", json=body, timeout=5)

    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == 3
    assert expected in answer.json()["message"]
    assert server.workflows() == []
    # ...and the untouched body passes: the checks above are about the breakage, nothing else.
    assert requests.post(f"{server.url}api/v1/workflows/{NAMESPACE}", json=_valid_body(), timeout=5).ok


def test_stand_in_enforces_paths_and_query_parameters(server: ArgoServer) -> None:
    base = f"{server.url}api/v1/workflows/{NAMESPACE}"
    assert requests.post(base, json=_valid_body(), timeout=5).ok

    unknown_path = requests.get(f"{server.url}api/v1/workflowz/{NAMESPACE}", timeout=5)
    assert unknown_path.status_code == 404 and unknown_path.json()["code"] == 5
    wrong_method = requests.patch(f"{base}/rollback-1", json={}, timeout=5)
    assert wrong_method.status_code == 404
    unknown_query = requests.get(f"{base}/rollback-1", params={"verbose": "1"}, timeout=5)
    assert unknown_query.status_code == 400 and "verbose" in unknown_query.json()["message"]
    bad_boolean = requests.get(base, params={"listOptions.watch": "yes"}, timeout=5)
    assert bad_boolean.status_code == 400
    duplicate = requests.post(base, json=_valid_body(), timeout=5)
    assert duplicate.status_code == 409
    assert duplicate.json() == {"code": 6, "message": 'workflows.argoproj.io "rollback-1" already exists'}
    listed = requests.get(base, params={"listOptions.labelSelector": "healer.io/incident=inc-1"}, timeout=5)
    assert [wf["metadata"]["name"] for wf in listed.json()["items"]] == ["rollback-1"]
    assert server.spec.route("POST", f"/api/v1/workflows/{NAMESPACE}/lint")[0].operation_id == (
        "WorkflowService_LintWorkflow"
    )


def test_stand_in_fails_loudly_on_its_own_bugs(engine: ArgoEngine, server: ArgoServer) -> None:
    name = engine.submit(REQUEST).name
    server.set_status(name, {"phase": "Running", "startedAt": "yesterday"})  # not RFC 3339: a server bug

    with pytest.raises(EngineUnavailable, match="HTTP 500"):
        engine.status(name)
    with pytest.raises(AssertionError, match="startedAt"):
        server.check()
    server.errors.clear()  # expected here; any other test would fail on exit


def test_importing_the_engine_does_not_import_hera() -> None:
    code = "import sys, healer.engines.argo; print(sorted(m for m in ('hera', 'requests') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert result.stdout.strip() == "[]"


def test_stand_in_stops_promptly_with_a_request_in_flight() -> None:
    server = ArgoServer().start()
    server.set_delay(30.0)
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(requests.get(f"{server.url}api/v1/workflows/{NAMESPACE}", timeout=10))
        except requests.RequestException as exc:
            outcome.append(exc)

    client = threading.Thread(target=call)
    client.start()
    for _ in range(200):
        if server.requests:
            break
        time.sleep(0.005)
    started = time.monotonic()
    server.stop()

    assert time.monotonic() - started < 1.0
    client.join(timeout=2)
    assert not client.is_alive()
    assert isinstance(outcome[0], requests.ConnectionError)  # dropped, not answered late
    server.check()


def test_token_is_read_per_request_so_a_rotated_token_is_used(tmp_path: Any) -> None:
    from healer.engines.factory import argo_engine
    from healer.settings import ArgoSettings, RollbackSettings, Settings, TritonSettings

    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    with ArgoServer(templates=TEMPLATES) as server:
        settings = Settings(
            source="test",
            triton=TritonSettings(),
            models=(),
            rollback=RollbackSettings(
                engine="argo", argo=ArgoSettings(host=server.url, namespace=NAMESPACE, token_file=token_file)
            ),
        )
        engine = argo_engine(settings)
        engine.submit(RollbackRequest(model="m", from_version="2", incident="inc-rot-1"))
        token_file.write_text("rotated-token\n")
        engine.submit(RollbackRequest(model="m", from_version="2", incident="inc-rot-2"))
        sent = [r.headers.get("Authorization") for r in server.requests if r.method == "POST"]
    assert sent == ["Bearer first-token", "Bearer rotated-token"]
