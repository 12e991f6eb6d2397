"""The ArgoEngine without Argo: the Workflow it builds, and its failure paths over real HTTP against
a fault injector (tests/support/argo_faults.py), which answers what the real Argo Server cannot be made to
answer on cue: 5xx, 429, a body that is not JSON, an answer held past the timeout, a connection
dropped, 50 concurrent creates of one name.

What the real Argo accepts and reports (the submission, 409 joins, get and list by label, phases,
outputs, the failed step, 401/403/404, token rotation) is tested in ``make e2e``:
tests/e2e/test_argo.py and tests/e2e/test_engine_lifecycle.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from healer.engines import EngineNotFound, EngineRejected, EngineUnavailable
from healer.engines.argo import ArgoEngine, label_value
from healer.settings import Settings
from healer.vocabulary import TEMPLATE_NAME, RollbackRequest, Submission, workflow_name
from tests.support.argo_faults import ArgoFaults, free_port

NAMESPACE = "healer"
TOKEN = "test-token"  # noqa: S105 - a test value
REQUEST = RollbackRequest(
    model="linear_scorer",
    from_version="3",
    incident="inc-20240101-0001",
    reason="wrong-answer",
    detail="golden request #2: expected [1.5], got [NaN] (<script>)",
    pod="triton-0",
)

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
def server() -> Iterator[ArgoFaults]:
    with ArgoFaults() as faults:
        yield faults


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def engine(server: ArgoFaults, fake_time: FakeTime) -> Iterator[ArgoEngine]:
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=2.0, clock=fake_time.clock, sleep=fake_time.sleep) as argo:
        yield argo


# -- the Workflow it builds (no server: what Argo makes of it is in tests/e2e) ---------------------


def test_the_workflow_references_the_template_with_labels_and_annotations() -> None:
    with ArgoEngine("http://127.0.0.1:9", NAMESPACE) as engine:
        workflow = engine.workflow(REQUEST)

    assert workflow.metadata.name == workflow_name(REQUEST)
    assert workflow.spec is not None and workflow.spec.workflow_template_ref is not None
    assert workflow.spec.workflow_template_ref.name == TEMPLATE_NAME
    assert workflow.spec.templates is None  # the template's steps live in the cluster, not here
    assert workflow.spec.arguments is not None
    parameters = {p.name: p.value for p in workflow.spec.arguments.parameters or []}
    assert parameters == REQUEST.parameters()
    assert workflow.metadata.labels == {
        "healer.io/model": "linear_scorer",
        "healer.io/from-version": "3",
        "healer.io/to-version": "auto",
        "healer.io/reason": "wrong-answer",
        "healer.io/incident": "inc-20240101-0001",
    }
    annotations = workflow.metadata.annotations or {}
    assert annotations["workflows.argoproj.io/title"] == "Rollback linear_scorer v3 → stable"
    description = annotations["workflows.argoproj.io/description"]
    for text in ("`linear_scorer`", "v3", "newest stable", "wrong-answer", "`inc-20240101-0001`", "`triton-0`"):
        assert text in description
    assert "\\<script\\>" in description  # the probe's text is shown, not rendered


def test_every_parameter_the_template_declares_is_sent_even_empty() -> None:
    from workflows.rollback import PARAMETERS

    bare = RollbackRequest(model="linear_scorer", from_version="3", incident="inc-2", to_version="2")
    with ArgoEngine("http://127.0.0.1:9", NAMESPACE) as engine:
        workflow = engine.workflow(bare)
    assert workflow.spec is not None and workflow.spec.arguments is not None
    parameters = {p.name: p.value for p in workflow.spec.arguments.parameters or []}
    assert parameters["detail"] == parameters["pod"] == ""
    assert sorted(parameters) == sorted(PARAMETERS)
    assert (workflow.metadata.annotations or {})["workflows.argoproj.io/title"] == "Rollback linear_scorer v3 → v2"


def test_odd_model_names_become_valid_distinct_labels() -> None:
    long_a = "Scorer for EU/West traffic, " * 4 + "A"
    long_b = "Scorer for EU/West traffic, " * 4 + "B"
    labels = [label_value(long_a), label_value(long_b)]
    assert labels[0] != labels[1]
    assert all(len(value) <= 63 for value in labels)
    assert label_value("linear_scorer") == "linear_scorer"
    assert label_value("") == ""


# -- concurrency: one create wins, the others get 409 and join -------------------------------------


def submit_at_once(engines: list[ArgoEngine], threads: int, *, join_s: float) -> list[Submission | BaseException]:
    """``threads`` submits of REQUEST released together, thread i on engines[i] (or all on the one engine);
    what each returned or raised, the engines closed after."""
    barrier = threading.Barrier(threads)
    results: list[Submission | BaseException] = []

    def submit(index: int) -> None:
        barrier.wait()
        try:
            results.append(engines[index % len(engines)].submit(REQUEST))
        except BaseException as exc:  # collected, asserted by the caller
            results.append(exc)

    workers = [threading.Thread(target=submit, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=join_s)
    for engine in engines:
        engine.close()
    return results


@pytest.mark.parametrize("shared", [True, False], ids=["one-engine", "engine-per-thread"])
def test_concurrent_submits_create_exactly_one(server: ArgoFaults, shared: bool) -> None:
    threads = 50
    engines = [ArgoEngine(server.url, NAMESPACE, request_timeout_s=5.0) for _ in range(1 if shared else threads)]
    results = submit_at_once(engines, threads, join_s=10)

    assert all(isinstance(r, Submission) for r in results), results
    assert len(results) == threads
    assert sum(1 for r in results if isinstance(r, Submission) and r.created) == 1
    assert {r.name for r in results if isinstance(r, Submission)} == {workflow_name(REQUEST)}
    assert len(server.workflows()) == 1
    assert len([r for r in server.requests if r.method == "POST"]) == threads


# -- wait() through an outage ----------------------------------------------------------------------


def test_wait_tolerates_a_transient_outage(engine: ArgoEngine, server: ArgoFaults, fake_time: FakeTime) -> None:
    name = engine.submit(REQUEST).name
    server.set_phase(name, "Succeeded")
    server.fail_next(3, status=503)

    assert engine.wait(name, timeout_s=10).succeeded
    assert len(fake_time.sleeps) == 3


def test_wait_raises_when_argo_never_answers(engine: ArgoEngine, server: ArgoFaults, fake_time: FakeTime) -> None:
    name = engine.submit(REQUEST).name
    server.fail_next(1000, status=503)

    with pytest.raises(EngineUnavailable, match="no status"):
        engine.wait(name, timeout_s=5)
    assert fake_time.now - 1000.0 == pytest.approx(5)


# -- failures ------------------------------------------------------------------------------------


def test_server_down_is_unavailable_within_the_request_timeout() -> None:
    with ArgoEngine(f"http://127.0.0.1:{free_port()}", NAMESPACE, request_timeout_s=5.0) as engine:
        started = time.monotonic()
        with pytest.raises(EngineUnavailable, match="unreachable") as refused:
            engine.submit(REQUEST)
        assert refused.value.maybe_delivered is False  # refused: nothing reached Argo, safe to fall back
        with pytest.raises(EngineUnavailable):
            engine.status(workflow_name(REQUEST))
        # At once: a refusal waited out as a timeout would take 5 s per call (the bound leaves a busy
        # machine seconds of slack, and still fails on one such wait).
        assert time.monotonic() - started < 2.5


def test_slow_server_is_unavailable_quickly(server: ArgoFaults) -> None:
    server.set_delay(5.0)
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=0.2) as engine:
        started = time.monotonic()
        with pytest.raises(EngineUnavailable, match="timed out") as timed_out:
            engine.submit(REQUEST)
        assert time.monotonic() - started < 2.5  # half the server's 5 s delay: the 0.2 s request timeout ended it
    # Sent, then no answer in time: Argo may have created it, so it must not be handed to another engine.
    assert timed_out.value.maybe_delivered is True
    assert len([r for r in server.requests if r.method == "POST"]) == 1
    stopping = time.monotonic()
    server.stop()  # the held answer does not hold the test up
    assert time.monotonic() - stopping < 2.5  # half the held answer's 5 s


def test_a_connection_dropped_after_the_request_may_have_delivered_it(engine: ArgoEngine, server: ArgoFaults) -> None:
    server.fail_next(1, status=0)
    with pytest.raises(EngineUnavailable, match="unreachable") as dropped:
        engine.submit(REQUEST)
    assert dropped.value.maybe_delivered is True  # connected and sent: Argo may have created it
    assert engine.submit(REQUEST).created  # the next attempt gets through


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


def test_503_is_unavailable_and_not_sticky(engine: ArgoEngine, server: ArgoFaults) -> None:
    server.fail_next(1, status=503, message="etcd leader changed")
    with pytest.raises(EngineUnavailable, match="etcd leader changed") as unavailable:
        engine.submit(REQUEST)
    assert unavailable.value.maybe_delivered is False  # a 503 did not apply it
    assert engine.submit(REQUEST).created  # nothing was created by the failed attempt


@pytest.mark.parametrize(
    ("status", "error", "maybe_delivered"),
    [
        (400, EngineRejected, None),
        (401, EngineRejected, None),
        (403, EngineRejected, None),
        (404, EngineNotFound, None),
        (429, EngineUnavailable, False),
        (500, EngineUnavailable, True),
        (502, EngineUnavailable, False),
        (504, EngineUnavailable, True),
    ],
)
def test_status_codes_map_to_engine_errors(
    engine: ArgoEngine, server: ArgoFaults, status: int, error: type[Exception], maybe_delivered: bool | None
) -> None:
    server.fail_next(1, status=status, message=f"injected {status}")
    with pytest.raises(error, match=f"HTTP {status}.*injected {status}") as raised:
        engine.submit(REQUEST)
    # Only a 404 says the workflow does not exist: a 400, 401 or 403 says nothing about it.
    assert isinstance(raised.value, EngineNotFound) is (status == 404)
    if maybe_delivered is not None:
        assert isinstance(raised.value, EngineUnavailable)
        assert raised.value.maybe_delivered is maybe_delivered


def test_a_refused_status_request_is_not_a_missing_workflow(engine: ArgoEngine, server: ArgoFaults) -> None:
    """A 400 on a GET (real Argo's 401 and 403 are in tests/e2e/test_engine_lifecycle.py)."""
    name = engine.submit(REQUEST).name
    server.fail_next(1, status=400, message="injected 400")
    with pytest.raises(EngineRejected) as raised:
        engine.status(name)
    assert not isinstance(raised.value, EngineNotFound)


def test_a_non_json_error_page_is_mapped_by_its_status(engine: ArgoEngine, server: ArgoFaults) -> None:
    # An ingress in front of Argo answers HTML, not grpc-gateway JSON.
    server.fail_next(1, status=502, raw=b"<html><body>502 Bad Gateway</body></html>")
    with pytest.raises(EngineUnavailable, match=r"HTTP 502.*Bad Gateway"):
        engine.submit(REQUEST)


def test_a_200_that_is_not_a_workflow_is_unavailable_not_a_crash(engine: ArgoEngine, server: ArgoFaults) -> None:
    # A captive portal or a misrouted proxy answering 200 with its own page.
    name = engine.submit(REQUEST).name
    server.fail_next(1, status=200, raw=b"<html><body>Sign in</body></html>")
    with pytest.raises(EngineUnavailable):
        engine.status(name)
    server.fail_next(1, status=200, raw=b'{"items": []}')
    with pytest.raises(EngineUnavailable, match="unexpected answer"):
        engine.submit(RollbackRequest(model="m", from_version="1", incident="inc-not-a-workflow"))


@pytest.mark.subprocess
def test_importing_the_engine_does_not_import_hera() -> None:
    code = "import sys, healer.engines.argo; print(sorted(m for m in ('hera', 'requests') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert result.stdout.strip() == "[]"


@pytest.mark.subprocess
def test_an_argo_server_certificate_that_fails_verification_was_certainly_not_delivered(tmp_path: Path) -> None:
    """Argo's default certificate is self-signed: without its CA the handshake stops before any request,
    so the sidecar may fall back to the in-pod engine; with ``rollback.argo.ca_file`` the handshake passes."""
    import http.server
    import ssl

    from tests.support.tls import self_signed

    cert, key = self_signed(tmp_path, "argo-server")
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.send_response(503)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with (
            ArgoEngine(host, "ml", token=TOKEN, request_timeout_s=5) as engine,
            pytest.raises(EngineUnavailable) as raised,
        ):
            engine.submit(REQUEST)
        assert raised.value.maybe_delivered is False and "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
        assert seen == []
        trusted = ArgoEngine(host, "ml", token=TOKEN, verify_ssl=str(cert), request_timeout_s=5)
        with trusted, pytest.raises(EngineUnavailable, match="HTTP 503"):
            trusted.submit(REQUEST)
        assert len(seen) == 1  # the CA given: the request went through
    finally:
        server.shutdown()
        server.server_close()


# -- a name clash: join the same occurrence only (the run's age on the server's clock) ---------------

DAYS = 86400.0


class ServerTime:
    """The server's clock (creationTimestamp, the Date header): moved by the test, not by sleeping.
    The client's clock is left alone: the engine must not read it for a run's age."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server_time(server: ArgoFaults) -> ServerTime:
    clock = ServerTime()
    server.clock = clock
    return clock


def test_a_failed_run_of_an_earlier_occurrence_is_not_joined(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    """The same broken version back three days later: a new run, not a join of the old Failed one
    (joined, the sidecar would escalate at once without trying to restore)."""
    first = engine.submit(REQUEST)
    server.set_phase(first.name, "Failed")
    server_time.now += 3 * DAYS

    again = engine.submit(REQUEST)

    assert again.created
    assert again.name != first.name
    assert len(again.name) <= 63  # a label value on the workflow's pods
    assert len(server.workflows()) == 2
    # Another replica detecting the same new occurrence derives the same successor, and joins it.
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=2.0) as replica:
        assert replica.submit(REQUEST) == Submission(again.name, created=False)
    assert len(server.workflows()) == 2


def first_run_aged(
    engine: ArgoEngine, server: ArgoFaults, server_time: ServerTime, *, phase: str, after_s: float
) -> Submission:
    """REQUEST's first run, in ``phase``, seen ``after_s`` later by the server's clock."""
    first = engine.submit(REQUEST)
    server.set_phase(first.name, phase)
    server_time.now += after_s
    return first


def test_a_failed_run_of_this_occurrence_is_joined(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    """A replica that detects late, after the first replica's run already failed: it joins (and escalates)."""
    first = first_run_aged(engine, server, server_time, phase="Failed", after_s=60)
    assert engine.submit(REQUEST) == Submission(first.name, created=False)
    assert len(server.workflows()) == 1


def test_a_run_still_going_is_joined_however_old(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    first = first_run_aged(engine, server, server_time, phase="Running", after_s=3 * DAYS)
    assert engine.submit(REQUEST) == Submission(first.name, created=False)


def test_the_window_is_the_engines_setting(server: ArgoFaults, server_time: ServerTime) -> None:
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=2.0, join_window_s=30) as short:
        first = short.submit(REQUEST)
        server.set_phase(first.name, "Failed")
        server_time.now += 31
        assert short.submit(REQUEST).created


def test_without_a_date_header_a_finished_run_is_not_joined(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    """The engine cannot tell the run's age (a proxy stripped the Date header): do no harm, start anew
    (a duplicate rollback is serialised by the model's mutex; an old Failed run joined restores nothing)."""
    from structlog.testing import capture_logs

    first = engine.submit(REQUEST)
    server.set_phase(first.name, "Failed")
    server.send_date = False

    with capture_logs() as logs:
        again = engine.submit(REQUEST)

    assert again.created and again.name != first.name
    [line] = [entry for entry in logs if entry["event"] == "earlier_run_not_joined"]
    assert line["workflow"] == first.name and line["successor"] == again.name
    assert "current time" in line["why"]
    # Still one successor: a second replica, no Date either, finds it going and joins it.
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=2.0) as replica:
        assert replica.submit(REQUEST) == Submission(again.name, created=False)


def test_without_a_creation_time_a_finished_run_is_not_joined(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    first = engine.submit(REQUEST)
    server.set_phase(first.name, "Succeeded")
    server.set_created(first.name, None)

    again = engine.submit(REQUEST)
    assert again.created and again.name != first.name


def test_each_earlier_occurrence_has_its_successor(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    """Three occurrences days apart, each rollback failed: three runs, each joined by its own replicas."""
    names = []
    for _occurrence in range(3):
        submission = engine.submit(REQUEST)
        assert submission.created
        names.append(submission.name)
        server.set_phase(submission.name, "Failed")
        server_time.now += 2 * DAYS
    assert len(set(names)) == 3
    assert names[0] == workflow_name(REQUEST)


def test_concurrent_replicas_of_a_new_occurrence_start_one_run(server: ArgoFaults, server_time: ServerTime) -> None:
    with ArgoEngine(server.url, NAMESPACE, request_timeout_s=5.0) as first:
        old = first.submit(REQUEST).name
    server.set_phase(old, "Failed")
    server_time.now += 3 * DAYS
    threads = 20
    engines = [ArgoEngine(server.url, NAMESPACE, request_timeout_s=5.0) for _ in range(threads)]
    results = submit_at_once(engines, threads, join_s=20)

    assert all(isinstance(r, Submission) for r in results), results
    submissions = [r for r in results if isinstance(r, Submission)]
    assert len(submissions) == threads
    assert sum(1 for r in submissions if r.created) == 1
    assert len({r.name for r in submissions}) == 1 and submissions[0].name != old
    assert len(server.workflows()) == 2


def test_a_clash_whose_run_cannot_be_read_may_have_been_delivered(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    """409, then the GET of the existing run fails (a 503 alone says "not applied"): a run of that name
    exists, maybe this occurrence's and going, so the rollback must not be handed to another engine."""
    engine.submit(REQUEST)
    server.fail_next(1, status=503, message="etcd leader changed", method="GET")

    with pytest.raises(EngineUnavailable, match="etcd leader changed") as raised:
        engine.submit(REQUEST)
    assert raised.value.maybe_delivered is True
    assert len(server.workflows()) == 1


def test_a_run_deleted_between_the_clash_and_the_read_is_created_again(
    server: ArgoFaults, server_time: ServerTime, engine: ArgoEngine
) -> None:
    """Argo's TTL deletes the old run just after the 409: its name is free again, and taken."""
    server.fail_next(1, status=409, message="already exists", method="POST")  # then the GET finds none

    assert engine.submit(REQUEST) == Submission(workflow_name(REQUEST), created=True)
    assert len(server.workflows()) == 1


def test_the_engine_built_from_settings_takes_its_window_from_the_rollback_deadline(example_settings: Settings) -> None:
    from healer.core.decisions import healing_timeout_s
    from healer.engines.factory import argo_engine

    rollback = dataclasses.replace(
        example_settings.rollback,
        deadline_s=600.0,
        argo=dataclasses.replace(example_settings.rollback.argo, host="http://127.0.0.1:9", namespace=NAMESPACE),
    )
    engine = argo_engine(dataclasses.replace(example_settings, rollback=rollback))
    assert isinstance(engine, ArgoEngine)
    with engine:
        assert engine.join_window_s == 2 * healing_timeout_s(600.0) == 1320.0
