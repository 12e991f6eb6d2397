"""The Alertmanager receiver (healer/webhook/alerts.py) served by the webhook's real server over TLS: the
token, the caps, and an alert storm handed to a real LocalEngine (the healer-rollback template run in
this process; its runs fail here, no Triton answers, which is beside the point: they are counted)."""

from __future__ import annotations

import dataclasses
import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from healer.core.alert_intake import ALERT_CONTENT, ALERT_PATH
from healer.core.state import incident_key
from healer.edges.http_listener import Request
from healer.engines import EngineUnavailable, RollbackEngine
from healer.engines.factory import local_engine
from healer.engines.local import LocalEngine
from healer.settings import RollbackSettings, Settings
from healer.vocabulary import RollbackRequest, Submission, workflow_name
from healer.webhook import MAX_BODY_BYTES, InjectionConfig, ReloadingTLS, WebhookServer
from healer.webhook.alerts import ALERTS_METRIC, AlertReceiver
from tests.support.tls import self_signed

TOKEN = "s3cr3t-token-of-the-receiver"  # noqa: S105 - a test token
CONFIG = InjectionConfig(image="ghcr.io/healer-dev/healer:0.1.0")


def alert(status: str = "firing", **labels: str) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "TritonFailureRatio", **labels},
        "annotations": {"summary": "failure ratio over 5 %"},
        "startsAt": "2026-12-03T20:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "c0ffee",
    }


def payload(*alerts: dict[str, Any]) -> bytes:
    return json.dumps({"version": "4", "receiver": "healer", "status": "firing", "alerts": list(alerts)}).encode()


def storm_alert(i: int) -> dict[str, Any]:
    return alert(model="linear_scorer", version="2", pod=f"triton-{i % 4}", namespace="ml")


@dataclasses.dataclass
class Served:
    server: WebhookServer
    receiver: AlertReceiver
    ca: Path
    token_file: Path

    def post(self, body: bytes, *, token: str | None = TOKEN, path: str = ALERT_PATH) -> tuple[int, bytes]:
        host, port = self.server.address.rsplit(":", 1)
        connection = http.client.HTTPSConnection(
            host, int(port), context=ssl.create_default_context(cafile=str(self.ca)), timeout=15
        )
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def metric(self, outcome: str, reason: str) -> float:
        return self.receiver.metrics.value(ALERTS_METRIC, {"outcome": outcome, "reason": reason})


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"), "webhook")


def settings_for(example_settings: Settings, state_dir: Path) -> Settings:
    # No Triton at this address (port 9 refuses at once): each run fails fast at its confirmation.
    return dataclasses.replace(
        example_settings,
        triton=dataclasses.replace(example_settings.triton, url="127.0.0.1:9", timeout_s=0.5),
        rollback=RollbackSettings(deadline_s=5, state_dir=state_dir),
    )


@contextmanager
def serving(
    tls: tuple[Path, Path], settings: Settings, engine_factory: Callable[[], RollbackEngine], tmp: Path
) -> Iterator[Served]:
    cert, key = tls
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    receiver = AlertReceiver(settings, token_file=token_file, engine_factory=engine_factory)
    server = WebhookServer("127.0.0.1:0", ReloadingTLS(cert, key), CONFIG, receiver)
    server.start()
    try:
        yield Served(server, receiver, cert, token_file)
    finally:
        server.stop()


@pytest.mark.subprocess  # openssl
def test_fifty_alerts_for_one_model_within_a_second_start_one_workflow(
    tls: tuple[Path, Path], example_settings: Settings, tmp_path: Path
) -> None:
    settings = settings_for(example_settings, tmp_path / "runs")
    engines: list[LocalEngine] = []

    def build() -> RollbackEngine:
        engines.append(local_engine(settings))
        return engines[-1]

    with serving(tls, settings, build, tmp_path) as served:
        answers: list[tuple[int, bytes]] = []
        started = time.monotonic()

        def send(i: int) -> None:
            # Each alert in its own request, as 50 Alertmanager groups would; a 503 (both alert workers busy)
            # or a connection the listener dropped (50 TLS handshakes at once past its 3 s request deadline
            # on a busy machine) is sent again, as Alertmanager does, until an answer or 30 s.
            deadline = time.monotonic() + 30
            code, answer = 0, b""
            while time.monotonic() < deadline:
                try:
                    code, answer = served.post(payload(storm_alert(i)))
                except OSError as exc:
                    code, answer = 0, repr(exc).encode()
                    time.sleep(0.05)
                    continue
                if code != 503:
                    break
                time.sleep(0.05)
            answers.append((code, answer))

        senders = [threading.Thread(target=send, args=(i,)) for i in range(50)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(40)
        elapsed = time.monotonic() - started
        assert len(answers) == 50 and {code for code, _ in answers} == {200}, [a for a in answers if a[0] != 200]
        outcomes = [json.loads(answer)["incidents"][0]["outcome"] for _, answer in answers]
        assert sorted(set(outcomes)) == ["joined", "submitted"] and outcomes.count("submitted") == 1
        (engine,) = engines
        key = incident_key("linear_scorer", "2", ALERT_CONTENT)
        runs = [r["metadata"]["name"] for r in engine.records.runs()]  # every run of its state directory
        request = RollbackRequest(model="linear_scorer", from_version="2", incident=key)
        assert runs == [workflow_name(request)]  # the name the sidecars' rollbacks of that key join
        assert served.metric("submitted", "TritonFailureRatio") == 1
        assert served.metric("joined", "TritonFailureRatio") == 49
        print(f"50 alerts posted in {elapsed:.2f} s: {len(runs)} workflow ({runs[0]})")
        engine.drain(30)


@pytest.mark.subprocess  # openssl
def test_the_token_the_caps_and_what_is_ignored(
    tls: tuple[Path, Path], example_settings: Settings, tmp_path: Path
) -> None:
    settings = settings_for(example_settings, tmp_path / "runs")

    def no_engine() -> RollbackEngine:
        raise AssertionError("nothing here may reach the engine")

    with serving(tls, settings, no_engine, tmp_path) as served:
        good = payload(storm_alert(0))
        assert served.post(good, token=None)[0] == 401
        assert served.post(good, token="wrong")[0] == 401  # noqa: S106
        assert served.post(good, token=TOKEN[:-1])[0] == 401
        code, answer = served.post(b"{junk")
        assert code == 400 and b"not an Alertmanager webhook payload: not JSON" in answer
        code, answer = served.post(json.dumps({"version": "4", "alerts": [1]}).encode())
        assert (code, answer) == (400, b"not an Alertmanager webhook payload: alerts[0]: not an object\n")
        # Over 1 MiB: refused from the header, before the body is read.
        host, port = served.server.address.rsplit(":", 1)
        oversized = http.client.HTTPSConnection(
            host, int(port), context=ssl.create_default_context(cafile=str(served.ca)), timeout=5
        )
        try:
            oversized.putrequest("POST", ALERT_PATH)
            oversized.putheader("Authorization", f"Bearer {TOKEN}")
            oversized.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
            oversized.endheaders()
            refused = oversized.getresponse()
            assert refused.status == 413
            assert b"set max_alerts in its webhook_config (e.g. 20" in refused.read()
        finally:
            oversized.close()
        assert served.post(good, path="/alerts/v1/other")[0] == 404
        code, answer = served.post(
            payload(
                alert("resolved", model="linear_scorer", version="2", pod="triton-0"),
                alert(model="linear_scorer", pod="triton-0"),
                alert(model="not_watched", version="2", namespace="ml"),
            )
        )
        assert code == 200
        assert [i["reason"] for i in json.loads(answer)["ignored"]] == [
            "resolved",
            "no-version-label",
            "model-not-watched",
        ]
        assert served.metric("ignored", "resolved") == 1
        # The counters on GET /metrics of the same server.
        host, port = served.server.address.rsplit(":", 1)
        connection = http.client.HTTPSConnection(
            host, int(port), context=ssl.create_default_context(cafile=str(served.ca)), timeout=5
        )
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        assert f'{ALERTS_METRIC}{{outcome="ignored",reason="model-not-watched"}} 1' in text
        # No token to compare with: nothing is accepted.
        served.token_file.write_text("")
        assert served.post(good)[0] == 401
        served.token_file.unlink()
        assert served.post(good)[0] == 401


class CountingEngine:
    """A stand-in at the submission seam only (no run is started): counts submits, creates a run per new
    incident name and can fail on demand."""

    def __init__(self) -> None:
        self.submitted: list[RollbackRequest] = []
        self.fail: Exception | None = None

    def submit(self, request: RollbackRequest) -> Submission:
        if self.fail is not None:
            raise self.fail
        created = all(r.incident != request.incident for r in self.submitted)
        self.submitted.append(request)
        return Submission(name=f"healer-rollback-{request.incident}", created=created)


def test_the_breaker_holds_back_a_fourth_rollback_in_the_window_and_an_engine_failure_is_503(
    example_settings: Settings, tmp_path: Path
) -> None:
    now = [0.0]
    engine = CountingEngine()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    receiver = AlertReceiver(
        example_settings,
        token_file=token,
        engine_factory=lambda: engine,  # type: ignore[arg-type,return-value]
        clock=lambda: now[0],
    )

    def post(model: str, version: str) -> tuple[int, dict[str, Any]]:
        request = Request(
            "POST",
            ALERT_PATH,
            {"authorization": f"Bearer {TOKEN}"},
            payload(alert(model=model, version=version, namespace="ml")),
        )
        response = receiver.handle(request)
        return response.code, json.loads(response.body)["incidents"][0]

    outcomes = []
    for version in ("2", "3", "4", "5"):
        code, incident = post("linear_scorer", version)
        outcomes.append((code, incident["outcome"]))
        now[0] += 60
    assert outcomes == [(200, "submitted")] * 3 + [(200, "breaker_open")]
    assert incident["why"].startswith("circuit breaker open: 3 rollbacks of linear_scorer in the last 60 min")
    assert len(engine.submitted) == 3
    now[0] += example_settings.sidecar.window_s  # the window passed: the breaker closes
    engine.fail = EngineUnavailable("argo-server refused the connection", maybe_delivered=False)
    code, incident = post("linear_scorer", "6")
    assert (code, incident["outcome"]) == (503, "not_submitted")
    assert incident["why"] == "EngineUnavailable: argo-server refused the connection"
    # Alertmanager sends it again (the 503); the engine takes it now.
    engine.fail = None
    assert post("linear_scorer", "6")[1]["outcome"] == "submitted"


def test_healer_webhook_refuses_the_receiver_without_a_token_file_or_with_a_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 64 before serving anything, naming what is wrong (no certificate is read first)."""
    from healer.cli import main

    args = ["webhook", "--listen", "127.0.0.1:0", "--tls-cert", "c", "--tls-key", "k", "--injection", "i"]
    example = Path(__file__).resolve().parents[2] / "examples" / "healer.yaml"
    assert main([*args, "--alerts-config", str(example)]) == 64
    assert "--alerts-config needs --alerts-token-file" in capsys.readouterr().err
    bad = tmp_path / "healer.yaml"
    bad.write_text("triton: {url: 127.0.0.1:8000}\nmodels: []\n")
    assert main([*args, "--alerts-config", str(bad), "--alerts-token-file", str(tmp_path / "token")]) == 64
    assert str(bad) in capsys.readouterr().err


class SlowEngine(CountingEngine):
    """A stand-in at the submission seam: an engine slower than the receiver's bound (Argo's create and
    a get on a 409, each up to its request timeout); each submit lands ``delay_s`` late, a run created
    per new incident name (the same name joins, as Argo's 409)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def submit(self, request: RollbackRequest) -> Submission:
        time.sleep(self.delay_s)
        return super().submit(request)


def test_submissions_landing_past_the_bound_are_counted_by_the_breaker_and_joined_by_the_retry(
    example_settings: Settings, tmp_path: Path
) -> None:
    """Six incidents of one model through an engine slower than the bound (each answered 503, sent
    again by Alertmanager once the call landed): the breaker counts what the late calls started, so
    max_rollbacks (3) runs are created, not six, and a retry joins its landed run without a new call."""
    engine = SlowEngine(delay_s=0.4)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    receiver = AlertReceiver(
        example_settings,
        token_file=token,
        engine_factory=lambda: engine,  # type: ignore[arg-type,return-value]
        submit_timeout_s=0.1,
    )

    def post(version: str) -> tuple[int, dict[str, Any]]:
        request = Request(
            "POST",
            ALERT_PATH,
            {"authorization": f"Bearer {TOKEN}"},
            payload(alert(model="linear_scorer", version=version, namespace="ml")),
        )
        response = receiver.handle(request)
        return response.code, json.loads(response.body)["incidents"][0]

    outcomes = []
    for version in ("2", "3", "4", "5", "6", "7"):
        code, incident = post(version)
        outcomes.append((code, incident["outcome"]))
        if incident["outcome"] == "not_submitted":
            assert incident["why"] == "the engine did not answer within 0.1 s"
            late = receiver._busy  # the call left to its thread: it records itself when it lands
            assert late is not None
            late.join(5)
            assert not late.is_alive()
            retried = post(version)  # Alertmanager's retry: joins the run that landed, no new engine call
            outcomes.append((retried[0], retried[1]["outcome"]))
    assert outcomes == [(503, "not_submitted"), (200, "joined")] * 3 + [(200, "breaker_open")] * 3
    created = {r.incident for r in engine.submitted}
    assert len(engine.submitted) == len(created) == example_settings.sidecar.max_rollbacks == 3


def test_the_engine_bound_covers_the_engines_own_worst_case_within_the_listeners(example_settings: Settings) -> None:
    from healer.edges.http_listener import WORK_DEADLINE_S
    from healer.webhook.alerts import submit_timeout_s_of

    argo = example_settings.rollback.argo
    bound = submit_timeout_s_of(example_settings)
    assert bound < WORK_DEADLINE_S
    assert bound >= min(2 * argo.request_timeout_s, WORK_DEADLINE_S - 1)  # a create and a get on a 409
    fast = dataclasses.replace(
        example_settings,
        rollback=dataclasses.replace(example_settings.rollback, argo=dataclasses.replace(argo, request_timeout_s=1.0)),
    )
    assert submit_timeout_s_of(fast) == 2.5


def test_a_notification_over_max_alerts_is_read_from_its_first_alerts_and_answered_200(
    example_settings: Settings, tmp_path: Path
) -> None:
    """Refused (400), a storm's notification would be lost: Alertmanager never sends a 4xx again."""
    from healer.core.alert_intake import MAX_ALERTS

    engine = CountingEngine()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    receiver = AlertReceiver(
        example_settings,
        token_file=token,
        engine_factory=lambda: engine,  # type: ignore[arg-type,return-value]
    )
    storm = [storm_alert(i) for i in range(MAX_ALERTS + 7)]
    response = receiver.handle(Request("POST", ALERT_PATH, {"authorization": f"Bearer {TOKEN}"}, payload(*storm)))
    answer = json.loads(response.body)
    assert response.code == 200, answer
    assert [(i["outcome"], i["alerts"]) for i in answer["incidents"]] == [("submitted", MAX_ALERTS)]
    assert answer["unread"] == 7 and len(engine.submitted) == 1
