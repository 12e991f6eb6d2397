"""The healer-stage WorkflowTemplate and its hourly CronWorkflow: rendered valid for Argo, and the step
its pod runs, run here as the pod would (healer.yaml from $HEALER_CONFIG, outputs in $HEALER_OUTPUT_DIR)
on a real filesystem store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from healer.core.ledger import StableRecord
from healer.edges.store import FilesystemBlobs, ModelStore, stamped_hashes
from workflows.render import render_all
from workflows.stage import STAGE_CRON, STAGE_TEMPLATE, stage_step

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests" / "vendor" / "argo" / "schema.json").read_text())


def _valid(document: dict[str, Any], kind: str) -> None:
    jsonschema.validate(document, {"$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}", **SCHEMA})


def test_rendered_stage_template_and_cron_are_valid_and_say_what_they_run() -> None:
    template = yaml.safe_load(render_all()[f"{STAGE_TEMPLATE}.yaml"])
    cron = yaml.safe_load(render_all()[f"{STAGE_CRON}.yaml"])
    _valid(template, "WorkflowTemplate")
    _valid(cron, "CronWorkflow")
    spec = template["spec"]
    [step] = [t for t in spec["templates"] if t["name"] == "stage"]
    assert step["script"]["args"] == ["-m", "hera.workflows.runner", "-e", "workflows.stage:stage_step"]
    assert {m["name"] for m in step["script"]["volumeMounts"]} == {"healer-config", "models"}
    assert int(step["activeDeadlineSeconds"]) < spec["activeDeadlineSeconds"] <= 3600  # ends before the next run
    assert spec["synchronization"] == {"mutexes": [{"name": "healer-stage"}]}
    # Staging changes nothing Triton serves and takes no lease: the schedule is on as rendered.
    assert "suspend" not in cron["spec"] or cron["spec"]["suspend"] is False
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["workflowSpec"]["workflowTemplateRef"] == {"name": STAGE_TEMPLATE}


@pytest.fixture
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A store holding linear_scorer v1 and v2, both promoted; healer.yaml pointing at it and at an
    empty live repository; the step's output folder."""
    store_root, live, out = tmp_path / "store", tmp_path / "live", tmp_path / "out"
    live.mkdir()
    store = ModelStore(FilesystemBlobs(store_root))
    for version in ("1", "2"):
        folder = store_root / "linear_scorer" / version
        folder.mkdir(parents=True)
        (folder / "model.py").write_text(f"# v{version}\n")
        record = StableRecord(
            version=version, files=store.version_files("linear_scorer", version), promoted_at="t", promoted_by="test"
        )
        store.update_ledger("linear_scorer", lambda ledger, r=record: ledger.with_stable(r))  # type: ignore[misc]
    config = yaml.safe_load((ROOT / "examples" / "healer.yaml").read_text())
    config["store"] = {"filesystem": {"root": str(store_root)}}
    config["live_repository"] = str(live)
    config["models"] = [m for m in config["models"] if m["name"] == "linear_scorer"]
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("HEALER_CONFIG", str(path))
    monkeypatch.setenv("HEALER_OUTPUT_DIR", str(out))
    return {"store": store_root, "live": live, "out": out, "config": path}


def test_the_stage_step_stages_and_stamps_the_stable_versions(pod: dict[str, Path]) -> None:
    assert stage_step() == {"staged": 2, "store": str(pod["store"])}
    staged = json.loads((pod["out"] / "staged").read_text())
    assert [(s["version"], s["outcome"]) for s in staged] == [("2", "fetched"), ("1", "fetched")]
    assert stamped_hashes(pod["live"] / "linear_scorer" / "2") is not None
    assert stage_step(model="linear_scorer")["staged"] == 2  # again: read in full, found unchanged
    again = json.loads((pod["out"] / "staged").read_text())
    assert {s["outcome"] for s in again} == {"verified"}


def test_the_stage_step_fails_naming_what_it_could_not_stage(pod: dict[str, Path]) -> None:
    """The store is the live repository and a stable version's bytes changed there: nothing to fetch
    again from, so the step fails and its message (the node's, in Argo) names the version."""
    config = yaml.safe_load(pod["config"].read_text())
    config["live_repository"] = str(pod["store"])
    pod["config"].write_text(yaml.safe_dump(config))
    stage_step()  # stamps both where they are
    (pod["store"] / "linear_scorer" / "2" / "model.py").write_text("# tampered\n")
    with pytest.raises(SystemExit) as stopped:
        stage_step()
    assert stopped.value.code == 1
    message = (pod["out"] / "termination-log").read_text()
    assert "linear_scorer v2" in message and "1 version(s) could not be staged" in message


def test_the_stage_step_without_a_store_fails_naming_the_file_and_key(pod: dict[str, Path]) -> None:
    config = yaml.safe_load(pod["config"].read_text())
    del config["store"], config["live_repository"]
    pod["config"].write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit):
        stage_step()
    message = (pod["out"] / "termination-log").read_text()
    assert str(pod["config"]) in message and "store" in message
