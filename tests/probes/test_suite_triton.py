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
