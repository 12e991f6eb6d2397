"""The rendered WorkflowTemplate and the ArgoEngine against the real Argo Server and controller."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from typing import Any

import pytest
import yaml

from healer.core.labels import label_value
from healer.engines import EngineRejected
from healer.engines.argo import DESCRIPTION_ANNOTATION, TITLE_ANNOTATION, ArgoEngine, description, title
from healer.vocabulary import RollbackRequest, workflow_name
from tests.e2e.conftest import ArgoCli
from tests.e2e.control_plane import ROOT, ControlPlane, http_get, wait_for

pytestmark = pytest.mark.e2e

TEMPLATE = ROOT / "deploy" / "argo" / "healer-rollback.yaml"
# The Argo UI's own list request (ui/src/shared/services/workflows-service.ts, Argo v4.1.4).
UI_LIST_FIELDS = ",".join(
    [
        "metadata",
        "items.metadata.uid",
        "items.metadata.name",
        "items.metadata.namespace",
        "items.metadata.creationTimestamp",
        "items.metadata.labels",
        "items.metadata.annotations",
        "items.status.phase",
        "items.status.message",
        "items.status.finishedAt",
        "items.status.startedAt",
        "items.status.estimatedDuration",
        "items.status.progress",
        "items.spec.suspend",
        "items.spec.arguments",
    ]
)


def ui_list(control_plane: ControlPlane, token: str, *selectors: str) -> dict[str, Any]:
    query = urllib.parse.urlencode({"listOptions.labelSelector": ",".join(selectors), "fields": UI_LIST_FIELDS})
    answer: dict[str, Any] = http_get(
        f"{control_plane.argo_url}/api/v1/workflows/ml?{query}", context=control_plane.pki.ssl_context(), token=token
    )
    return answer


def test_template_passes_argo_lint(control_plane: ControlPlane, argo_cli: ArgoCli) -> None:
    offline = argo_cli("lint", "--offline", "--kinds=workflowtemplates", str(TEMPLATE))
    assert "no linting errors found" in (offline.stdout + offline.stderr).lower()
    # Through the server: once again after a refused gRPC dial (seen once in CI on a busy machine, the
    # server already answering HTTP on the same port); a lint error is never asked again.
    for attempt in range(2):
        through_server = argo_cli("lint", "--kinds=workflowtemplates", str(TEMPLATE), check=False)
        said = through_server.stdout + through_server.stderr
        if "code = Unavailable" not in said or attempt == 1:
            break
        time.sleep(2.0)
    assert through_server.returncode == 0, said
    assert "no linting errors found" in said.lower()


def test_template_created_through_argo_server_as_rendered(rollback_template: dict[str, Any]) -> None:
    rendered = yaml.safe_load(TEMPLATE.read_text())
    assert rollback_template["metadata"]["name"] == "healer-rollback"
    assert rollback_template["metadata"]["namespace"] == "ml"
    spec = rollback_template["spec"]
    # What the design relies on survived Argo's and the API server's (full CRD schema) handling.
    for key in ("activeDeadlineSeconds", "onExit", "entrypoint", "serviceAccountName", "synchronization", "volumes"):
        assert spec[key] == rendered["spec"][key], key
    assert spec["workflowMetadata"]["labelsFrom"] == rendered["spec"]["workflowMetadata"]["labelsFrom"]
    heal = next(t for t in spec["templates"] if t["name"] == "heal")
    assert heal["retryStrategy"]["expression"] == (
        "asInt(lastRetry.exitCode) == 75 || asInt(lastRetry.exitCode) == 137"
    )


def test_engine_submits_joins_gets_and_lists(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine, operator_token: str
) -> None:
    """The engine as the sidecar runs it (its token, the shipped Role); the list as a person sees it
    in the Argo UI (the UI's own query, an operator's token)."""
    request = RollbackRequest(
        model="e2e_join",
        from_version="3",
        incident="inc-join-1",
        detail="output 'SCORE': 2/2 values off; worst [0,0] expected 7.1 got 12.1 (|error| 5 > allowed 0.00171)",
        pod="ml/triton-0",
    )
    first = engine.submit(request)
    assert first.created
    assert first.name == workflow_name(request)
    second = engine.submit(request)  # Argo answers 409 AlreadyExists: the second sidecar joins
    assert not second.created
    assert second.name == first.name

    status = wait_for(
        lambda: (s := engine.status(first.name)).phase in {"Running", "Failed"} and s,
        timeout_s=60,
        what="the controller picks the workflow up",
    )
    assert status.started_at is not None

    listed = ui_list(control_plane, operator_token, "healer.io/model=e2e_join", "healer.io/incident=inc-join-1")
    assert [item["metadata"]["name"] for item in listed["items"]] == [first.name]
    item = listed["items"][0]
    labels = item["metadata"]["labels"]
    expected = {
        "healer.io/model": "e2e_join",
        "healer.io/from-version": "3",
        "healer.io/to-version": "auto",
        "healer.io/reason": "wrong-answer",
        "healer.io/incident": "inc-join-1",
        "healer.io/trace-id": "",  # the request carried no traceparent: the label is there, empty
    }
    assert {k: v for k, v in labels.items() if k.startswith("healer.io/")} == expected
    # workflowMetadata.labels from the template, applied by the controller
    assert labels["app.kubernetes.io/name"] == "healer"
    assert labels["app.kubernetes.io/component"] == "rollback"
    annotations = item["metadata"]["annotations"]
    assert annotations[TITLE_ANNOTATION] == title(request) == "Rollback e2e_join v3 → stable"
    assert annotations[DESCRIPTION_ANNOTATION] == description(request)
    parameters = {p["name"]: p.get("value") for p in item["spec"]["arguments"]["parameters"]}
    assert parameters["model"] == "e2e_join"
    assert parameters["detail"] == request.detail

    # One workflow per incident, however many sidecars submit.
    assert len(ui_list(control_plane, operator_token, "healer.io/model=e2e_join")["items"]) == 1


def test_engine_submits_from_a_template_by_name_gets_argos_json_and_stops_it(
    control_plane: ControlPlane, rollback_template: dict[str, Any], operator_token: str, engine: ArgoEngine
) -> None:
    """What `healer drill --target cluster` does with the healer-drill template (here the rollback
    template, the one this tier installs), with an operator's token: a name of its own, Argo's JSON,
    a second create of that name refused (never a second drill), and `argo stop`, which the
    sidecar's own token (``engine``) may not do."""
    sidecar = engine
    engine = ArgoEngine(control_plane.argo_url, "ml", token=operator_token, request_timeout_s=10)
    name = "healer-rollback-named-e2e-1"
    assert (
        engine.submit_template(
            "healer-rollback", {"model": "e2e_named", "from-version": "3", "incident": "inc-named-1"}, name=name
        )
        == name
    )
    with pytest.raises(EngineRejected, match="exists already"):
        engine.submit_template("healer-rollback", {"model": "e2e_named"}, name=name)
    try:
        got = wait_for(
            lambda: (w := engine.get(name)).get("status", {}).get("phase") not in (None, "", "Pending") and w,
            timeout_s=60,
            what="the controller picks the workflow up",
        )
        assert got["metadata"]["name"] == name and got["metadata"]["creationTimestamp"]
        assert got["spec"]["workflowTemplateRef"] == {"name": "healer-rollback"}
        parameters = {p["name"]: p.get("value") for p in got["spec"]["arguments"]["parameters"]}
        assert parameters["model"] == "e2e_named"
        assert got["status"]["nodes"]  # Argo's own names (camelCase), as argo_timeline reads them
        assert all("startedAt" in node for node in got["status"]["nodes"].values())
        with pytest.raises(EngineRejected, match="HTTP 403"):
            sidecar.stop(name, "the sidecar's Role has no patch on workflows")
        engine.stop(name, "stopped by the e2e test")
        # Argo records the stop on the workflow (its exit handler then runs: here no pod would)
        assert engine.get(name)["spec"].get("shutdown") == "Stop"
    finally:
        with contextlib.suppress(Exception):
            engine._service.delete_workflow(name)  # the test's own leftovers
        engine.close()


def test_engine_labels_a_model_name_that_is_not_label_safe(
    control_plane: ControlPlane, rollback_template: dict[str, Any], engine: ArgoEngine, sidecar_token: str
) -> None:
    """The engine's label and the template's labelsFrom (evaluated by the real controller) agree."""
    model = "a" * 70  # too long for a label value: both sides shorten it with the same digest
    request = RollbackRequest(model=model, from_version="2", incident="inc-long-1")
    submission = engine.submit(request)

    def labelled() -> dict[str, str] | None:
        workflow = http_get(
            f"{control_plane.argo_url}/api/v1/workflows/ml/{submission.name}",
            context=control_plane.pki.ssl_context(),
            token=sidecar_token,
        )
        labels: dict[str, str] = workflow["metadata"]["labels"]
        return labels if "app.kubernetes.io/component" in labels else None

    labels = wait_for(labelled, timeout_s=60, what="the controller applies workflowMetadata")
    assert labels["healer.io/model"] == label_value(model)
    assert len(labels["healer.io/model"]) <= 63


def test_engine_refused_without_a_token_that_may_submit(
    control_plane: ControlPlane, rollback_template: dict[str, Any], argo_ca: None
) -> None:
    """argo-server --auth-mode=client authorises as the caller: a token without the role is refused."""
    from healer.engines import EngineRejected

    stranger = control_plane.token("ml", "default")
    with (
        ArgoEngine(control_plane.argo_url, "ml", token=stranger, verify_ssl=True) as argo,
        pytest.raises(EngineRejected, match="403"),
    ):
        argo.submit(RollbackRequest(model="e2e_forbidden", from_version="1", incident="inc-forbidden"))


def test_argo_cli_lists_by_label(rollback_template: dict[str, Any], engine: ArgoEngine, argo_cli: ArgoCli) -> None:
    request = RollbackRequest(model="e2e_cli", from_version="5", incident="inc-cli-1", reason="non-finite")
    name = engine.submit(request).name
    listed = json.loads(argo_cli("list", "-l", "healer.io/reason=non-finite", "-o", "json").stdout)
    assert [w["metadata"]["name"] for w in listed] == [name]
