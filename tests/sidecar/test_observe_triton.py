"""Observe-only on the real Triton (the embedded stack: filesystem store with v1 and v2 promoted stable,
LocalEngine): a broken v3 pushed to a model in observe mode is planned (restore v2, this pod would drain)
and keeps serving, /readyz 200, no engine built, no run, the repository and the ledger untouched. The same
test in act mode heals it: the plan's words are what the act mode does."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.triton_rest import TritonRest
from healer.engines.factory import local_engine
from healer.engines.records import RunRecords
from healer.settings import Settings
from healer.sidecar import Sidecar
from tests.sidecar.test_sidecar_triton import (
    Running,
    http_get,
    latency_not_under_test,
    push_broken_version,
    sidecar_settings,
)
from tests.support.rollback_stack import filesystem_stack

POD = "ml/triton-0"


@pytest.fixture
def stack_factory(example_settings: Settings, triton_server: EmbeddedTriton, tmp_path: Path) -> Any:
    """A new model on the shared real Triton: v1 and v2 in the store, both promoted stable, v2 served."""
    store_root = tmp_path / "store"
    store_root.mkdir()
    return lambda: filesystem_stack(
        example_settings,
        triton_server,
        store_root,
        tmp_path,
        versions={1: ("good", "1"), 2: ("good", "2")},
        stable=[1, 2],
    )


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root``: its sha256 (what Triton reads, and the store's ledger and versions)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.mark.parametrize("mode", ["observe", "act"])
def test_a_broken_push_to_an_observed_model_is_planned_and_left_serving(stack_factory: Any, mode: str) -> None:
    with stack_factory() as stack:
        model = stack.model
        settings = latency_not_under_test(sidecar_settings(stack, mode=mode))
        built: list[str] = []

        def engine() -> Any:
            built.append("engine")
            return local_engine(settings)

        sidecar = Sidecar(settings, TritonRest(stack.settings.triton.url, timeout_s=5), engine_factory=engine, pod=POD)
        with Running(sidecar) as running:
            running.wait_for(lambda s: s["cycles"] >= 2, 10)
            push_broken_version(stack, 3, "wrong_weights")
            live = tree(stack.live / model)
            store = tree(Path(stack.settings.store.filesystem) / ".healer" / model)  # type: ignore[union-attr]
            if mode == "act":
                running.wait_for(lambda s: s["models"][model]["state"] == "healing", 15)
                running.wait_for(lambda s: s["models"][model]["state"] == "healthy", 45)
                assert stack.triton.served_versions(model) == ["2"]
                assert built and [r["status"]["phase"] for r in RunRecords(settings.rollback.state_dir).runs()] == [
                    "Succeeded"
                ]
                return
            status = running.wait_for(lambda s: s["models"][model]["plan"] is not None, 15)
            planned_at = time.monotonic()
            while time.monotonic() - planned_at < 3 * settings.sidecar.period_s:  # still nothing done, later
                assert http_get(running.base + "/readyz")[0] == 200
                time.sleep(0.2)
            status = json.loads(http_get(running.base + "/status")[1])
            metrics = http_get(running.base + "/metrics")[1]
        entry = status["models"][model]
        plan = entry["plan"]
        assert entry["mode"] == "observe" and entry["state"] == "escalated"
        assert (plan["decision"], plan["restore"], plan["version"]) == ("rollback", "2", "3")
        assert plan["restore_why"] == "v2: newest stable, not quarantined"
        assert plan["drain"]["drain"] is True  # without sidecar.drain this pod would have left the Service
        assert plan["replicas"] == [POD] and plan["waves"] == [[POD]] and plan["escalate"] is False
        assert status["drain"]["wanted"] is False and status["drain"]["readyz"] == []
        # Nothing touched: v3 serves, no engine, no run, the files Triton reads and the ledger as pushed.
        assert stack.triton.served_versions(model) == ["3"]
        assert built == []
        records = RunRecords(settings.rollback.state_dir)
        assert records.runs() == []
        assert [r["status"]["phase"] for r in records.runs(plans=True)] == ["Planned"]
        assert tree(stack.live / model) == live
        assert tree(Path(stack.settings.store.filesystem) / ".healer" / model) == store  # type: ignore[union-attr]
        assert f'healer_observed_decisions_total{{decision="rollback",model="{model}"}} 1' in metrics
