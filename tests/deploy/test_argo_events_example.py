"""deploy/argo-events/healer-alerts.yaml: its EventSource and Sensor are valid against Argo Events' own API
schema (v1.9.6, tests/vendor/argo-events, unknown keys refused), its RBAC against Kubernetes', and its
trigger submits the healer-rollback template with healer's parameters, its incident key and workflow name
computed as healer computes them (the templates evaluated by Go's text/template and sprig, as the Sensor
evaluates them: tests/support/argo_events_template)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from healer.core.alert_intake import ALERT_CONTENT
from healer.core.state import incident_key
from healer.vocabulary import TEMPLATE_NAME, RollbackRequest, workflow_name
from workflows.rollback import PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "argo-events" / "healer-alerts.yaml"
SCHEMA = ROOT / "tests" / "vendor" / "argo-events" / "schema.json"
HARNESS = ROOT / "tests" / "support" / "argo_events_template"
K8S_VERSION = "1.37.0"


def documents() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text())}


@cache
def strict_definitions() -> dict[str, Any]:
    """The vendored definitions with unknown keys refused wherever an object lists its keys (as the API
    server's strict field validation would): a misspelt key must fail the test, not pass unnoticed."""
    definitions = copy.deepcopy(json.loads(SCHEMA.read_text())["definitions"])

    def tighten(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                tighten(value)
        elif isinstance(node, list):
            for value in node:
                tighten(value)

    tighten(definitions)
    return definitions


def validate(document: dict[str, Any]) -> None:
    schema = {
        "$ref": f"#/definitions/io.argoproj.events.v1alpha1.{document['kind']}",
        "definitions": strict_definitions(),
    }
    jsonschema.Draft7Validator(schema).validate(document)


def trigger() -> dict[str, Any]:
    (only,) = documents()["Sensor"]["spec"]["triggers"]
    return only["template"]["argoWorkflow"]


@pytest.mark.parametrize("kind", ["EventSource", "Sensor"])
def test_the_event_source_and_sensor_are_valid_argo_events_objects(kind: str) -> None:
    validate(documents()[kind])


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("EventSource", ("spec", "webhook", "alertmanager", "methd"), "POST"),  # a misspelt key
        ("EventSource", ("spec", "webhook", "alertmanager", "authSecret"), "healer-alert-receiver"),  # a wrong type
        ("Sensor", ("spec", "triggers", 0, "template", "argoWorkflow", "operation"), 3),
    ],
)
def test_the_validation_can_fail(kind: str, path: tuple[Any, ...], value: Any) -> None:
    document = copy.deepcopy(documents()[kind])
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate(document)


def test_the_rbac_is_valid_and_lets_the_sensor_create_workflows_only() -> None:
    docs = documents()
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        kubernetes_validate.validate(docs[kind], K8S_VERSION, strict=True)
    assert docs["Role"]["rules"][0] == {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["create"]}
    assert docs["Sensor"]["spec"]["template"]["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["Sensor"]["spec"]["dependencies"][0]["eventSourceName"] == docs["EventSource"]["metadata"]["name"]
    assert docs["Sensor"]["spec"]["dependencies"][0]["eventName"] in docs["EventSource"]["spec"]["webhook"]


def test_the_trigger_submits_the_rollback_template_with_its_parameters() -> None:
    workflow = trigger()["source"]["resource"]
    assert trigger()["operation"] == "submit"
    assert workflow["spec"]["workflowTemplateRef"] == {"name": TEMPLATE_NAME}
    names = [p["name"] for p in workflow["spec"]["arguments"]["parameters"]]
    assert set(names) <= set(PARAMETERS)
    given = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}
    assert given["reason"] == "manual"  # confirmed by the rollback's own golden requests; never a quarantine alone
    filled = {p["dest"] for p in trigger()["parameters"]}
    assert filled == {"metadata.name"} | {
        f"spec.arguments.parameters.{names.index(n)}.value"
        for n in ("model", "from-version", "incident", "detail", "pod")
    }


def evaluate(templates: list[str], data: dict[str, Any]) -> list[dict[str, str]]:
    go = shutil.which("go")
    assert go is not None
    lines = "".join(json.dumps({"template": t, "data": data}) + "\n" for t in templates)
    ran = subprocess.run(
        [go, "run", "."], cwd=HARNESS, input=lines, capture_output=True, text=True, timeout=300, check=False
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return [json.loads(line) for line in ran.stdout.splitlines()]


def notification(model: str, version: str, **common: str) -> dict[str, Any]:
    """What the webhook EventSource makes of Alertmanager's POST: the body, with the headers beside it."""
    return {
        "header": {"Content-Type": ["application/json"]},
        "body": {
            "version": "4",
            "status": "firing",
            "receiver": "healer",
            "groupLabels": {"model": model, "version": version},
            "commonLabels": {"model": model, "version": version, **common},
            "commonAnnotations": {"summary": "5 % of requests fail"},
            "alerts": [],
        },
    }


@pytest.mark.subprocess  # go
@pytest.mark.skipif(shutil.which("go") is None, reason="needs Go (its module proxy for sprig and gjson)")
@pytest.mark.parametrize(
    ("model", "common", "pod"),
    [
        ("linear_scorer", {"alertname": "TritonFailureRatio", "namespace": "ml", "pod": "triton-0"}, "ml/triton-0"),
        ("Tiny.Classifier_V2", {"pod": "triton-1"}, "triton-1"),
        ("a_model_with_a_name_longer_than_thirty_characters", {"namespace": "ml"}, ""),
    ],
)
def test_the_sensor_names_the_incident_and_the_workflow_as_healer_does(
    model: str, common: dict[str, str], pod: str
) -> None:
    by_dest = {p["dest"]: p["src"] for p in trigger()["parameters"]}
    names = [p["name"] for p in trigger()["source"]["resource"]["spec"]["arguments"]["parameters"]]

    def dest(name: str) -> str:
        return f"spec.arguments.parameters.{names.index(name)}.value"

    templates = [by_dest["metadata.name"]["dataTemplate"], by_dest[dest("incident")]["dataTemplate"]]
    templates += [by_dest[dest("detail")]["dataTemplate"], by_dest[dest("pod")]["dataTemplate"]]
    name, incident, detail, where = evaluate(templates, notification(model, "7", **common))
    key = incident_key(model, "7", ALERT_CONTENT)
    assert incident == {"value": key}  # the key healer's own receiver gives these alerts
    request = RollbackRequest(model=model, from_version="7", incident=key)
    assert name == {"value": workflow_name(request)}  # so a second submission, the Sensor's or healer's, collides
    assert detail["value"].startswith(f"Alertmanager alert {common.get('alertname', '(several)')} via Argo Events")
    # No pod in common: the template evaluates to nothing, which the Sensor replaces by the src's value "".
    assert (
        where == ({"value": pod} if pod else {"error": where.get("error", "")}) and by_dest[dest("pod")]["value"] == ""
    )
    assert by_dest[dest("model")]["dataKey"] == "body.commonLabels.model"
    assert by_dest[dest("from-version")]["dataKey"] == "body.commonLabels.version"


def passes_filters(event: dict[str, Any]) -> bool:
    """The Sensor's data filters on an event, as a STAND-IN for Argo Events v1.9's filterData (type string, a
    dotted path only): a missing path fails its filter; each value a regular expression, found anywhere
    (Go's regexp Match); ``=`` passes when one matches, ``!=`` when one does not; all filters (and)."""
    import re

    (dependency,) = documents()["Sensor"]["spec"]["dependencies"]
    assert dependency["filters"]["dataLogicalOperator"] == "and"
    for rule in dependency["filters"]["data"]:
        assert rule["type"] == "string"
        node: Any = event
        for part in rule["path"].split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        found = [re.search(value, str(node)) is not None for value in rule["value"]]
        if not (any(found) if rule.get("comparator", "=") == "=" else not all(found)):
            return False
    return True


@pytest.mark.parametrize(
    ("alertname", "status", "acted_on"),
    [
        ("TritonFailureRatio", "firing", True),
        ("HealerRollbackEscalated", "firing", False),  # healer's own: never taken back
        ("HealerObservedDecision", "firing", False),
        (None, "firing", False),  # no alertname in common: a group that may mix in healer's own
        ("TritonFailureRatio", "resolved", False),
    ],
)
def test_the_sensor_never_acts_on_healers_own_alerts(alertname: str | None, status: str, acted_on: bool) -> None:
    event = notification("linear_scorer", "2", **({"alertname": alertname} if alertname else {}))
    event["body"]["status"] = status
    assert passes_filters(event) is acted_on
