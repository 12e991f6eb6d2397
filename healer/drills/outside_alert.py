"""The outside-alert drills (docs/alerts.md, docs/drills.md): an Alertmanager-shaped alert posted to healer's
receiver (healer/webhook/alerts.py ``AlertReceiver``, served here on a loopback port over plain HTTP, its
bearer token in a file) starts the rollback, not a sidecar: no sidecar probes the model during these drills,
so whatever is rolled back is the alert's doing.

* ``outside-alert`` (``Scenario.alert`` "wrong"): the scenario's broken variant is pushed and served on
  every replica, then an alert names that version: one rollback, its confirmation finds the version
  failing, the stable version restored on every replica (HEALED, one workflow).
* ``outside-alert-right``: nothing is pushed; the alert names the stable version that is served and
  answers right: the rollback's confirmation finds it passing and touches nothing (NO_ROLLBACK: the
  served versions, the ledger's quarantine and the run's outcome checked; the run is named in a mark).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from healer.core.drill_catalog import Scenario
from healer.core.drill_verdict import DrillResult, Observation, judge
from healer.edges.logs import iso_utc
from healer.edges.processes import free_port
from workflows.steps.drill_inject import Injected, InjectionFailed, injected_for, push_and_serve, served
from workflows.steps.drill_observe import GoldenWatch, Watch

ALERT_NAME = "TritonModelAnswersWrong"  # an outside rule's name (not healer's own: Healer* alerts are ignored)
POST_TIMEOUT_S = 15.0  # one post to the receiver (its engine call is bounded at 6 s)
RUN_POLL_S = 0.1


def alert_payload(model: str, version: str, pod: str) -> bytes:
    """What Alertmanager's webhook sends (payload version 4) for one firing alert."""
    alert = {
        "status": "firing",
        "labels": {"alertname": ALERT_NAME, "model": model, "version": version, "pod": pod, "namespace": "drill"},
        "annotations": {"summary": f"{model} v{version} answers wrong (an outside rule, the drill's)"},
        "startsAt": iso_utc(time.time()),
        "fingerprint": secrets.token_hex(8),
    }
    return json.dumps({"version": "4", "receiver": "healer", "status": "firing", "alerts": [alert]}).encode()


@contextlib.contextmanager
def receiver_on_loopback(settings: Any, engine: Any, scratch: Path) -> Iterator[tuple[str, str]]:
    """The receiver on 127.0.0.1 (plain HTTP: the drill's own loopback), its token in a file; yields
    (url, token) and stops it at the end."""
    from healer.edges.http_listener import BackgroundServer
    from healer.webhook.alerts import AlertReceiver
    from healer.webhook.server import MAX_BODY_BYTES

    scratch.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    token_file = scratch / "alerts-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    receiver = AlertReceiver(settings, token_file=token_file, engine_factory=lambda: engine)
    port = free_port()
    server = BackgroundServer(
        f"127.0.0.1:{port}", handler=receiver.handle, name="drill-alerts", max_body=MAX_BODY_BYTES
    )
    server.start()
    try:
        yield f"http://127.0.0.1:{port}{receiver.path}", token
    finally:
        server.stop()


def post_alert(url: str, token: str, body: bytes) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - the drill's own loopback receiver
        url, data=body, method="POST", headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=POST_TIMEOUT_S) as response:  # noqa: S310
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def run_alert(runner: Any, scenario: Scenario) -> DrillResult:
    """One outside-alert drill (see the module's docstring); the target ends on its stable version."""
    budget_s = runner.settings.rollback.deadline_s
    extra: list[Any] = []
    replicas: list[str] = []
    injected: Injected | None = None
    engine: Any = None
    watch: Watch | None = None
    notes: list[str] = []
    error = ""
    untouched: str | None = None
    try:
        replicas = runner._replicas(scenario, extra)
        engine = runner._engine(scenario, replicas, [free_port() for _ in replicas])
        target = runner.target
        injected = injected_for(target)
        if scenario.alert == "wrong":
            push_and_serve(target, target.variant(scenario.variant), injected, replicas)
        else:
            injected.mark_now()
        watch = Watch(injected.at)
        untouched = _alerted(runner, scenario, engine, replicas, injected, watch, notes)
    except Exception as exc:  # the drill's own failure: reported, and the target still cleaned up
        error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        notes += runner._clean_up([], engine, injected, None, replicas, extra, budget_s)
    observation = watch.observation() if watch is not None else Observation(error=error or "not injected")
    if untouched is not None:
        observation = dataclasses.replace(observation, untouched=untouched)
    if error:
        observation = dataclasses.replace(observation, error=error)
    started = iso_utc(injected.wall) if injected is not None and injected.wall else ""
    verdict = judge(scenario, observation, budget_s)
    return DrillResult(scenario, observation, verdict, budget_s, started_at=started, notes=tuple(notes))


def _alerted(
    runner: Any,
    scenario: Scenario,
    engine: Any,
    replicas: list[str],
    injected: Injected,
    watch: Watch,
    notes: list[str],
) -> str | None:
    """Post the alert, wait for its rollback, see where it left the replicas; what was touched (right alert)."""
    target = runner.target
    stable = injected.stable.version
    budget_s = runner.settings.rollback.deadline_s
    untouched: str | None = None
    named = injected.version or stable
    golden = GoldenWatch(replicas, target.model_settings, suite_of=target.suite)
    with receiver_on_loopback(runner.settings, engine, runner.scratch / "alerts" / scenario.name) as (url, token):
        answer = post_alert(url, token, alert_payload(target.model, named, "triton-0"))
    handed = answer.get("incidents") or []
    if len(handed) != 1 or not handed[0].get("workflow"):
        raise InjectionFailed(f"the receiver started no rollback: {json.dumps(answer)[:500]}")
    workflow = str(handed[0]["workflow"])
    watch.mark("alert-posted", f"{ALERT_NAME} for {target.model} v{named}: {handed[0]['outcome']} {workflow}")
    status = _wait(engine, workflow, budget_s + 30.0)
    watch.mark("alert-run-ended", f"{workflow} {status.phase} {getattr(status, 'message', '') or ''}".strip())
    if scenario.alert == "wrong":
        watch.workflows.append(workflow)
        watch.final_state = "healthy" if golden.restored(injected.version) else "not restored"
        if watch.final_state == "healthy":
            watch.restored()
    else:
        ended = [served(u, target.model) for u in replicas]
        quarantined = target.store.ledger(target.model).is_quarantined(stable)
        changed = [f"{u} serves {v}" for u, v in zip(replicas, ended, strict=True) if v != [stable]]
        untouched = "; ".join(changed + (["the stable version quarantined"] if quarantined else []))
        watch.final_state = "healthy" if golden.restored(None) else "not passing"
        notes.append(f"the alert's rollback {workflow} ended {status.phase}: its confirmation left v{named} alone")
    golden.close()
    return untouched


def _wait(engine: Any, workflow: str, give_up_s: float) -> Any:
    deadline = time.monotonic() + give_up_s
    while True:
        status = engine.status(workflow)
        if status.done or time.monotonic() >= deadline:
            return status
        time.sleep(RUN_POLL_S)
