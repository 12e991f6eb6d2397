"""The rendered healer-release WorkflowTemplate: schema-valid for Argo v4.1.2, and what the LocalEngine runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from healer.engines.local import LocalEngine
from healer.engines.template_reader import read_template
from healer.vocabulary import ReleaseRequest, release_workflow_name
from workflows.release import PARAMETERS, build_release_template
from workflows.render import render_all

VENDORED_ARGO = Path(__file__).resolve().parents[1] / "vendor" / "argo"


def test_the_release_template_is_valid_against_argo_schema() -> None:
    schema = json.loads((VENDORED_ARGO / "schema.json").read_text())
    ref = {"$ref": "#/definitions/io.argoproj.workflow.v1alpha1.WorkflowTemplate", "definitions": schema["definitions"]}
    document: dict[str, Any] = yaml.safe_load(render_all()["healer-release.yaml"])
    jsonschema.validate(document, ref)


def test_its_shape_is_canary_bake_approve_roll_out_and_a_put_back_on_exit() -> None:
    spec = read_template(build_release_template().build())
    release = spec.templates["release"]
    steps = [[s.name for s in (g.root if hasattr(g, "root") else g.__root__)] for g in release.steps]
    assert steps == [["canary"], ["bake"], ["approve"], ["roll-out"]]
    assert spec.templates["approve"].suspend is not None
    assert spec.on_exit == "on-exit"
    assert spec.mutex({"model": "m"}) == "healer-release-m"
    assert set(spec.defaults) == set(PARAMETERS) and spec.defaults["approve"] == "false"
    put_back = spec.scripts["put-back"]
    assert put_back.deadline_s is not None and put_back.retry_limit == 2  # the exit handler: bounded, retried
    assert {s.retry_exit_codes for s in spec.scripts.values()} == {frozenset({75, 137})}


def test_one_release_id_is_one_run(tmp_path: Path) -> None:
    engine = LocalEngine(build_release_template(), lambda: None, tmp_path)
    request = ReleaseRequest(model="m", version="3", release="rel-1")
    assert release_workflow_name(request) == release_workflow_name(
        ReleaseRequest(model="m", version="3", release="rel-1")
    )
    assert release_workflow_name(request) != release_workflow_name(
        ReleaseRequest(model="m", version="3", release="rel-2")
    )
    assert engine.template_spec.entrypoint == "release"


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"version": "v3"}, "version must be a version number"),
        ({"release": "rel 1"}, "label-safe"),
        ({"bake_s": -1.0}, "bake_s"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(fields: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ReleaseRequest(**{"model": "m", "version": "3", "release": "rel-1", **fields})
