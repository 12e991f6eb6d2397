"""The simulated Triton of benchmarks/scale_restore.py (benchmarks/sim_triton.py): it answers the calls
the rollback makes through TritonRest as Triton does, its shared-store model slows concurrent loads as
designed, and the product's restore runs against it. Threads only: no program is started."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.sim_triton import OutputSpec, SimulatedTriton
from healer.core.results import Status
from healer.edges.triton import TritonRejected
from healer.edges.triton_rest import TritonRest
from healer.settings import Settings
from probes.tiers import check_business

MODEL = "linear_scorer"


def expected_outputs(settings: Settings) -> dict[str, OutputSpec]:
    golden = settings.model(MODEL).golden
    return {
        o.tensor.name: OutputSpec(o.tensor.datatype, tuple(o.tensor.shape), tuple(o.tensor.values.ravel().tolist()))
        for o in golden.outputs
    }


@pytest.fixture
def sim(example_settings: Settings) -> Iterator[SimulatedTriton]:
    with SimulatedTriton(
        2,
        model=MODEL,
        good_versions={"1", "2"},
        outputs=expected_outputs(example_settings),
        serving=["3"],
        load_s=0.05,
        unload_s=0.05,
        versions_present={"1", "2", "3"},
    ) as simulated:
        yield simulated


def pinned(versions: list[int]) -> str:
    return json.dumps({"name": MODEL, "backend": "python", "version_policy": {"specific": {"versions": versions}}})


def test_it_answers_the_calls_triton_rest_makes(sim: SimulatedTriton, example_settings: Settings) -> None:
    golden = example_settings.model(MODEL).golden
    triton = TritonRest(sim.urls[0], timeout_s=2)
    assert triton.server_live()
    assert triton.served_versions(MODEL) == ["3"]
    assert triton.model_version_ready(MODEL, "3") and not triton.model_version_ready(MODEL, "2")
    assert [(r.name, r.version, r.state) for r in triton.repository_index()] == [(MODEL, "3", "READY")]
    assert triton.model_config(MODEL)["name"] == MODEL
    broken = check_business(triton, MODEL, "3", golden)
    assert broken.status is Status.FAIL and "2/2 values off" in broken.reason and "got 8.1" in broken.reason

    # The swap: a load with a config override pinning v2; the old version serves until it is done.
    triton.load_model(MODEL, config=pinned([2]), timeout_s=10)
    assert triton.served_versions(MODEL) == ["2"]
    assert triton.model_version_ready(MODEL, "2") and not triton.model_version_ready(MODEL, "3")
    assert triton.model_config(MODEL)["version_policy"] == {"specific": {"versions": [2]}}
    states = {r.version: r.state for r in triton.repository_index()}
    assert states == {"2": "READY", "3": "UNAVAILABLE"}
    restored = check_business(triton, MODEL, "2", golden)
    assert restored.status is Status.PASS, restored.reason
    assert TritonRest(sim.urls[1], timeout_s=2).served_versions(MODEL) == ["3"]  # each replica its own

    with pytest.raises(TritonRejected):  # a version the repository does not hold: Triton refuses
        triton.load_model(MODEL, config=pinned([7]), timeout_s=10)
    with pytest.raises(TritonRejected):
        triton.infer(MODEL, "3", golden.inputs, ["SCORE"], golden.timeout_s)  # not served: 400

    triton.unload_model(MODEL)
    assert triton.served_versions(MODEL) == []
    assert {r.state for r in triton.repository_index()} >= {"UNLOADING"}
    deadline = time.monotonic() + 2
    while any(r.state == "UNLOADING" for r in triton.repository_index()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert {r.state for r in triton.repository_index()} == {"UNAVAILABLE"}
    triton.load_model(MODEL, timeout_s=10)  # no override: the newest version present
    assert triton.served_versions(MODEL) == ["3"]


def _load_times(sim: SimulatedTriton, count: int) -> list[float]:
    def one(url: str) -> float:
        started = time.perf_counter()
        TritonRest(url, timeout_s=2).load_model(MODEL, config=pinned([2]), timeout_s=10)
        return time.perf_counter() - started

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, sim.urls[:count]))


def test_concurrent_loads_share_the_stores_bandwidth(example_settings: Settings) -> None:
    """S = 100 kB from a 1 MB/s store: a load alone reads for 0.1 s; four at once share the store,
    0.4 s each. With an unsaturated store the same four take only the fixed part."""
    outputs = expected_outputs(example_settings)

    def four(load_s: float, model_bytes: float, bandwidth_bps: float) -> SimulatedTriton:
        return SimulatedTriton(
            4,
            model=MODEL,
            good_versions={"2"},
            outputs=outputs,
            serving=["3"],
            load_s=load_s,
            model_bytes=model_bytes,
            bandwidth_bps=bandwidth_bps,
            tick_s=0.005,
        )

    with four(load_s=0.0, model_bytes=1e5, bandwidth_bps=1e6) as limited:
        [alone] = _load_times(limited, 1)
        limited.set_serving(["3"])
        limited.reset_stats()
        together = _load_times(limited, 4)
        stats = limited.stats()
    assert 0.09 <= alone <= 0.25, alone
    assert all(0.38 <= t <= 0.65 for t in together), together
    assert stats["peak_concurrent_readers"] == 4 and stats["loads"] == 4
    with four(load_s=0.1, model_bytes=1e5, bandwidth_bps=math.inf) as unsaturated:
        free = _load_times(unsaturated, 4)
    assert all(0.09 <= t <= 0.3 for t in free), free


def test_the_products_restore_heals_every_simulated_replica(example_settings: Settings, tmp_path: Path) -> None:
    """workflows.steps.heal over three simulated replicas (the canary, then one wave of two), with a
    real filesystem store promoted through the real promote path against the simulation."""
    from benchmarks.scale_restore import template_store
    from healer.edges.store import FilesystemBlobs, ModelStore
    from healer.settings import RollbackSettings, StoreSettings
    from healer.vocabulary import RollbackRequest
    from workflows.plan import ReplicaTarget
    from workflows.steps import StepContext, heal

    outputs = expected_outputs(example_settings)
    root = template_store(tmp_path, outputs)
    with SimulatedTriton(
        3, model=MODEL, good_versions={"1", "2"}, outputs=outputs, serving=["3"], load_s=0.05, live_repository=root
    ) as sim:
        settings = dataclasses.replace(
            example_settings,
            triton=dataclasses.replace(example_settings.triton, url=sim.urls[0]),
            store=StoreSettings(filesystem=root),
            live_repository=root,
            rollback=RollbackSettings(state_dir=tmp_path / "runs", parallelism=2),
        )
        ctx = StepContext(
            settings=settings,
            triton=TritonRest(sim.urls[0], timeout_s=2),
            store=ModelStore(FilesystemBlobs(root)),
            live_repository=root,
            list_replicas=lambda: [ReplicaTarget(u) for u in sim.urls],
        )
        report = heal(ctx, RollbackRequest(model=MODEL, from_version="3", incident="inc-sim"))
        assert sim.served() == [["2"], ["2"], ["2"]]
    restore = next(p for p in report["phases"] if p["name"] == "restore")
    assert restore["outputs"]["waves"] == [sim.urls[:1], sim.urls[1:]]
    assert {r["action"] for r in restore["outputs"]["replicas"].values()} == {"swap"}
    assert report["to_version"] == "2"
