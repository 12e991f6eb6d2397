"""The canary and the waves, on in-memory Tritons (the real-Triton cases are in test_rollback_triton.py):
which replica is the canary, how many load at once, and what a failure leaves."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from healer.core.ledger import StableRecord
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import OutputTensor, TritonRejected
from healer.settings import Settings
from healer.vocabulary import RollbackRequest
from tests.support.fleet_triton import FleetTriton
from workflows import steps
from workflows.plan import ReplicaTarget
from workflows.steps import replicas

MODEL = "linear_scorer"


class FakeTriton(FleetTriton):
    """One replica: what it serves, loads that take ``load_s``, the golden answer from the settings."""

    running = 0
    most_at_once = 0
    lock = threading.Lock()

    def __init__(self, url: str, serves: list[str], golden: Any, *, refuses: bool = False, load_s: float = 0.05):
        super().__init__(url, serves, golden)
        self.refuses, self.load_s = refuses, load_s
        self.loads = 0

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None:
        with FakeTriton.lock:
            FakeTriton.running += 1
            FakeTriton.most_at_once = max(FakeTriton.most_at_once, FakeTriton.running)
        try:
            time.sleep(self.load_s)
            if self.refuses:
                raise TritonRejected(400, "load failed: no such version in this repository")
            self.loads += 1
            super().load_model(model, config=config, timeout_s=timeout_s)
        finally:
            with FakeTriton.lock:
                FakeTriton.running -= 1

    def infer(self, model: str, version: str, inputs: Any, output_names: Any, timeout_s: float) -> dict[str, Any]:
        return {
            o.tensor.name: OutputTensor(o.tensor.name, o.tensor.datatype, o.tensor.values) for o in self.golden.outputs
        }


@pytest.fixture
def fleet(example_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    FakeTriton.running = FakeTriton.most_at_once = 0
    store = ModelStore(FilesystemBlobs(tmp_path / "store"))
    (tmp_path / "store" / MODEL / "1").mkdir(parents=True)
    (tmp_path / "store" / MODEL / "1" / "model.py").write_text("v1")
    record = StableRecord(version="1", files={}, promoted_at="t", promoted_by="test", config={"name": MODEL})
    store.update_ledger(MODEL, lambda ledger: ledger.with_stable(record))
    golden = example_settings.model(MODEL).golden

    def make(
        serving: list[list[str]],
        *,
        refuses: set[int] = frozenset(),
        order: str = "swap",
        parallelism: int = 50,
        max_parallelism: int = 200,
        load_s: float = 0.2,  # long enough for a wave's threads to overlap on a busy machine
        load_timeout_s: float = 60.0,
    ):
        tritons = {
            f"10.0.0.{i}:8000": FakeTriton(f"10.0.0.{i}:8000", serves, golden, refuses=i in refuses, load_s=load_s)
            for i, serves in enumerate(serving)
        }
        monkeypatch.setattr(replicas, "_triton_for", lambda ctx, url: tritons[url])
        settings = dataclasses.replace(
            example_settings,
            rollback=dataclasses.replace(
                example_settings.rollback,
                order=order,
                parallelism=parallelism,
                max_parallelism=max_parallelism,
                load_timeout_s=load_timeout_s,
            ),
        )
        first = next(iter(tritons.values()))
        ctx = steps.StepContext(
            settings=settings,
            triton=FakeTriton("local:1", [], golden),
            store=store,
            live_repository=tmp_path / "live",
            list_replicas=lambda: [ReplicaTarget(url, f"triton-{i}") for i, url in enumerate(tritons)],
        )
        assert first.url != ctx.triton.url
        return ctx, tritons

    return make


REQUEST = RollbackRequest(model=MODEL, from_version="2", incident="inc-1")


def test_a_replica_already_restored_is_no_canary(fleet: Any) -> None:
    """The first replica already serves v1 (nothing to load): the canary is the next one, and only
    after it loaded and passed do the other two load, together."""
    ctx, tritons = fleet([["1"], ["2"], ["2"], ["2"]])
    outcome = steps.restore_replicas(ctx, REQUEST, "1")
    urls = list(tritons)
    assert outcome["waves"] == [[urls[0]], [urls[1]], [urls[2], urls[3]]]
    assert [t.serves for t in tritons.values()] == [["1"]] * 4
    assert outcome["replicas"][urls[0]]["action"] == "already"


def test_a_canary_that_refuses_stops_before_any_other_load(fleet: Any) -> None:
    ctx, tritons = fleet([["2"], ["2"], ["2"]], refuses={0})
    with pytest.raises(steps.PermanentStepError, match="Triton refused"):
        steps.restore_replicas(ctx, REQUEST, "1")
    assert [t.loads for t in tritons.values()] == [0, 0, 0]
    assert [t.serves for t in tritons.values()] == [["2"]] * 3


def test_a_wave_loads_at_once_and_a_failing_member_stops_the_next_wave(fleet: Any) -> None:
    ctx, tritons = fleet([["2"]] * 7, refuses={2}, parallelism=3)
    with pytest.raises(steps.PermanentStepError) as raised:
        steps.restore_replicas(ctx, REQUEST, "1")
    served = [t.serves for t in tritons.values()]
    assert served[:4] == [["1"], ["1"], ["2"], ["1"]]  # canary, then the wave: two restored, one kept v2
    assert served[4:] == [["2"]] * 3  # the next wave never started
    assert FakeTriton.most_at_once == 3
    assert "1 replica(s) failed" in str(raised.value) and "3 restored before the stop" in str(raised.value)


def test_unload_first_never_unloads_two_replicas_at_once(fleet: Any) -> None:
    ctx, tritons = fleet([["2"]] * 5, order="unload-first", parallelism=50)
    outcome = steps.restore_replicas(ctx, REQUEST, "1")
    assert FakeTriton.most_at_once == 1
    assert [len(w) for w in outcome["waves"]] == [1] * 5
    assert [t.serves for t in tritons.values()] == [["1"]] * 5


def test_waves_double_while_loads_are_quick_up_to_the_ceiling(fleet: Any) -> None:
    # 0.25 s loads: quick against the 60 s load timeout (they double), and long enough that a wave's five
    # threads overlap on a busy machine (10 ms loads once saw only 3 at once at load 7).
    ctx, tritons = fleet([["2"]] * 20, parallelism=2, max_parallelism=5, load_s=0.25)
    outcome = steps.restore_replicas(ctx, REQUEST, "1")
    assert [len(w) for w in outcome["waves"]] == [1, 2, 4, 5, 5, 3]
    assert FakeTriton.most_at_once == 5
    assert [t.serves for t in tritons.values()] == [["1"]] * 20


def test_loads_near_their_timeout_shrink_the_waves_to_one(fleet: Any) -> None:
    """The canary's load took over three quarters of load_timeout_s: concurrent loads of the same
    model from the same store would run past it, so the rest go one at a time."""
    ctx, _tritons = fleet([["2"]] * 4, parallelism=50, load_s=0.05, load_timeout_s=0.06)
    outcome = steps.restore_replicas(ctx, REQUEST, "1")
    assert [len(w) for w in outcome["waves"]] == [1, 1, 1, 1]
    assert FakeTriton.most_at_once == 1


def test_a_ceiling_below_the_first_wave_is_refused_naming_the_key(tmp_path: Path) -> None:
    import shutil

    from healer.settings import ConfigError, load_settings

    root = Path(__file__).resolve().parents[2]
    text = (root / "examples" / "healer.yaml").read_text()
    shutil.copytree(root / "examples" / "golden", tmp_path / "golden")  # the example's golden files, relative
    config = tmp_path / "healer.yaml"
    config.write_text(text.replace("rollback:\n", "rollback:\n  parallelism: 50\n  max_parallelism: 20\n", 1))
    with pytest.raises(ConfigError, match=r"rollback\.max_parallelism: must be at least rollback\.parallelism \(50\)"):
        load_settings(config)
    config.write_text(text.replace("rollback:\n", "rollback:\n  parallelism: 300\n", 1))
    assert load_settings(config).rollback.max_parallelism == 300  # the default ceiling follows it
