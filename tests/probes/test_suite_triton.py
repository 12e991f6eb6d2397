"""Issue 30's done-when, on the real Triton: a model with a golden suite of three requests (1, 7 and 64
tokens) is healed when a new version is wrong only past position 32. With one golden request of 7
tokens (healer before suites) the same version passes every probe and is left serving wrong answers;
before suites healer.yaml refused a list under golden, so these tests fail on that code."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.cli import main
from healer.core.results import Status, Tier
from healer.edges.embedded import EmbeddedTriton, free_port
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.edges.triton_rest import TritonRest
from healer.engines.factory import local_engine
from healer.settings import ModelSettings, Settings, SidecarSettings, StoreSettings, TierThresholds, parse_section
from healer.sidecar import Sidecar
from healer.vocabulary import RollbackRequest
from probes.runner import probe_all
from probes.store_suite import StoreSuites
from tests.sidecar.test_sidecar_triton import Running
from tests.support.rollback_stack import SETUP_LOAD_TIMEOUT_S, AlertReceiver, make_settings, serve_versions
from tests.support.sequence_model import golden_request, write_sequence_model
from workflows.steps.promote import promote

THREE = [golden_request("one", 1), golden_request("seven", 7), golden_request("long", 64)]


def model_settings(name: str, golden: Any, tmp: Path, **keys: Any) -> ModelSettings:
    section: ModelSettings = parse_section(
        ModelSettings, {"name": name, "golden": golden, **keys}, source="healer.yaml", base_dir=tmp, key="models[0]"
    )
    return section


def business(results: list[Any], version: str) -> Any:
    [result] = [r for r in results if r.tier is Tier.BUSINESS and r.version == version]
    return result


@dataclasses.dataclass
class Stack:
    settings: Settings
    triton: TritonHttp
    store: ModelStore
    roots: tuple[Path, Path]  # the live repository and the store

    def push_wrong_past_32(self) -> None:
        for root in self.roots:
            write_sequence_model(root, self.settings.models[0].name, {2: 32})
        serve_versions(self.triton, self.settings.models[0].name, [2])


@contextmanager
def sequence_stack(base: Settings, triton_server: EmbeddedTriton, tmp: Path, model: ModelSettings) -> Iterator[Stack]:
    """``model`` (the sequence model) on the running Triton, v1 correct and promoted through the whole
    suite, in a filesystem store."""
    store_root, live = tmp / "store", triton_server.model_repository
    for root in (live, store_root):
        write_sequence_model(root, model.name, {1: 0})
    store = ModelStore(FilesystemBlobs(store_root))
    triton = TritonHttp(triton_server.url, timeout_s=5.0)
    with AlertReceiver() as alerts:
        settings = make_settings(
            base,
            url=triton_server.url,
            model=model,
            store=StoreSettings(filesystem=store_root),
            live=live,
            state_dir=tmp / "runs",
            alert_url=alerts.url,
        )
        try:
            triton.load_model(model.name, timeout_s=SETUP_LOAD_TIMEOUT_S)
            serve_versions(triton, model.name, [1])
            promote(settings, triton, store, model.name, "1", by="test")  # the whole suite verifies v1
            yield Stack(settings, triton, store, (live, store_root))
        finally:
            try:
                triton.unload_model(model.name)
            finally:
                triton.close()


def rollback(stack: Stack, reason: str) -> Any:
    name = stack.settings.models[0].name
    request = RollbackRequest(
        model=name,
        from_version="2",
        incident=f"inc-{name}".replace("_", "-"),
        reason="wrong-answer",
        detail=reason,
        pod="t-0",
    )
    return local_engine(stack.settings).run(request, timeout_s=120)


def test_a_suite_heals_a_version_wrong_only_past_position_32(
    example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    name = "sequence_suite"
    single = model_settings(name, golden_request("seven", 7), tmp_path)  # what healer.yaml allowed before
    with sequence_stack(example_settings, triton_server, tmp_path, model_settings(name, THREE, tmp_path)) as stack:
        stack.push_wrong_past_32()
        today = probe_all(dataclasses.replace(stack.settings, models=(single,)), stack.triton)
        assert business(today, "2").status is Status.PASS  # one 7-token request cannot see it

        found = business(probe_all(stack.settings, stack.triton), "2")
        assert found.status is Status.FAIL and found.code == "wrong-answer", found
        assert found.reason.startswith("golden request 'long': output 'OUT': 32/64 values off"), found.reason
        assert found.details["failed_request"] == "long"
        assert [r["status"] for r in found.details["requests"]] == ["pass", "pass", "fail"]

        status = rollback(stack, found.reason)
        assert status.phase == "Succeeded", status
        assert status.outputs["to-version"] == "1"
        assert stack.triton.served_versions(name) == ["1"]
        assert business(probe_all(stack.settings, stack.triton), "1").status is Status.PASS
        assert stack.store.ledger(name).is_quarantined("2")


def test_the_sidecar_heals_a_version_wrong_past_position_32(
    example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    """The same push with the sidecar running: detected by the suite, rolled back, healthy again."""
    name = "sequence_sidecar"
    with sequence_stack(example_settings, triton_server, tmp_path, model_settings(name, THREE, tmp_path)) as stack:
        sidecar_settings = SidecarSettings(
            listen=f"127.0.0.1:{free_port()}",
            period_s=1.0,
            business=TierThresholds(failure_threshold=3, success_threshold=2),
            readiness=TierThresholds(failure_threshold=2, success_threshold=1),
        )
        settings = dataclasses.replace(stack.settings, sidecar=sidecar_settings)
        own = TritonRest(settings.triton.url, timeout_s=5)  # the sidecar's client, used from its probe workers
        sidecar = Sidecar(settings, own, engine_factory=lambda: local_engine(settings), pod="ml/triton-0")
        with Running(sidecar) as running:
            running.wait_for(lambda s: s["cycles"] >= 2 and s["models"][name]["state"] == "healthy", 20)
            stack.push_wrong_past_32()
            healing = running.wait_for(lambda s: s["models"][name]["state"] in ("healing", "escalated"), 30)
            assert healing["models"][name]["state"] == "healing", healing
            assert healing["models"][name]["incident"]["version"] == "2"
            running.wait_for(lambda s: s["models"][name]["state"] == "healthy", 60)
        assert stack.triton.served_versions(name) == ["1"]
        assert stack.store.ledger(name).is_quarantined("2")


def test_a_request_kept_in_the_store_beside_the_model_heals_it_too(
    example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The long request is not in healer.yaml: a pipeline wrote it to <model>/golden/long.yaml in the
    store. The sidecar's suites (StoreSuites) and the rollback's confirmation read it."""
    name = "sequence_store_suite"
    model = model_settings(name, THREE[:2], tmp_path, golden_in_store=True)
    golden_dir = tmp_path / "store" / name / "golden"
    golden_dir.mkdir(parents=True)
    (golden_dir / "long.yaml").write_text(yaml.safe_dump(THREE[2]))
    with sequence_stack(example_settings, triton_server, tmp_path, model) as stack:
        stack.push_wrong_past_32()
        assert business(probe_all(stack.settings, stack.triton), "2").status is Status.PASS  # healer.yaml's alone
        suites = StoreSuites(lambda: stack.store)
        found = business(probe_all(stack.settings, stack.triton, suites=suites.suite_of), "2")
        assert found.status is Status.FAIL and found.reason.startswith("golden request 'long': "), found

        config = tmp_path / "healer.yaml"  # `healer probe` reads the store's requests too
        config.write_text(
            yaml.safe_dump(
                {
                    "triton": {"url": triton_server.url},
                    "store": {"filesystem": {"root": str(tmp_path / "store")}},
                    "models": [{"name": name, "golden": THREE[:2], "golden_in_store": True}],
                }
            )
        )
        assert main(["probe", "--config", str(config)]) == 1
        assert f"{name} v2 business fail: golden request 'long': output 'OUT'" in capsys.readouterr().out

        status = rollback(stack, found.reason)
        assert status.phase == "Succeeded", status
        assert stack.triton.served_versions(name) == ["1"]
        phases = json.dumps(json.loads(status.outputs["phases"]))
        assert "golden request 'long'" in phases, phases  # the rollback confirmed v2's failure with it


def test_a_versions_own_requests_in_the_store_judge_that_version_alone(
    example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    """Per-version requests (golden_in_store): v2 answers differently past position 32, and a request
    that expects exactly that travels in its own folder, <model>/2/golden/long_v2.yaml (a Python-backend
    version directory with a golden/ folder in it: Triton loads it). The probe judges v2 by it and v1
    not; a person's rollback from v2 verifies the restored v1 by v1's suite (under <model>/golden/ the
    same request failed the stable v1's verify: the rollback escalated); promoting v2 hashes the file
    with its other files."""
    from healer.vocabulary import MANUAL

    name = "sequence_version_suite"
    model = model_settings(name, THREE[:2], tmp_path, golden_in_store=True)
    new_behaviour: dict[str, Any] = golden_request("long_v2", 64)
    new_behaviour["outputs"][0]["data"] = [2 * t + 1 + (t >= 32) for t in range(64)]
    with sequence_stack(example_settings, triton_server, tmp_path, model) as stack:
        for root in stack.roots:
            write_sequence_model(root, name, {2: 32})
            (root / name / "2" / "golden").mkdir()
            (root / name / "2" / "golden" / "long_v2.yaml").write_text(yaml.safe_dump(new_behaviour))
        serve_versions(stack.triton, name, [1, 2])
        assert stack.triton.model_version_ready(name, "2") and stack.triton.model_version_ready(name, "1")

        suites = StoreSuites(lambda: stack.store)
        assert [r.name for r in suites.suite_of(model, "2")] == ["one", "seven", "long_v2"]
        assert [r.name for r in suites.suite_of(model, "1")] == ["one", "seven"]
        results = probe_all(stack.settings, stack.triton, suites=suites.suite_of)
        assert business(results, "2").status is Status.PASS, business(results, "2")
        assert business(results, "1").status is Status.PASS, business(results, "1")
        only_v1 = dataclasses.replace(stack.settings, models=(dataclasses.replace(model, version="1"),))
        as_v2s = StoreSuites(lambda: stack.store)  # v2's request asked of v1: what every version would face
        wrong = business(probe_all(only_v1, stack.triton, suites=lambda m, _v: as_v2s.suite_of(m, "2")), "1")
        assert wrong.status is Status.FAIL and "long_v2" in wrong.reason, wrong

        serve_versions(stack.triton, name, [2])
        request = RollbackRequest(model=name, from_version="2", incident="inc-own-suite", reason=MANUAL, pod="t-0")
        status = local_engine(stack.settings).run(request, timeout_s=120)
        assert status.phase == "Succeeded", status
        assert stack.triton.served_versions(name) == ["1"]
        assert not stack.store.ledger(name).quarantined

        serve_versions(stack.triton, name, [2])
        promote(stack.settings, stack.triton, stack.store, name, "2", by="test")  # its own request passes
        record = stack.store.ledger(name).stable_record("2")
        assert record is not None and "golden/long_v2.yaml" in record.files
