"""The sidecar's plumbing between decisions and engines, with fake time, a scripted Triton and
scripted engines (the real Triton and engines are exercised in test_sidecar_triton.py)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from healer.decisions import Peer
from healer.engines import (
    EngineRejected,
    EngineUnavailable,
    RollbackRequest,
    RunStatus,
    Submission,
    workflow_name,
)
from healer.settings import DrainSettings, Settings, SidecarSettings, TensorSpec, TierThresholds
from healer.sidecar import KubePeers, PeersUnavailable, Sidecar
from healer.state import Phase
from healer.triton import IndexEntry, OutputTensor, TritonTimeout


class ScriptedTriton:
    """Answers like Triton would for one model serving one version; ``wrong`` flips the answer."""

    url = "127.0.0.1:1"

    def __init__(self, settings: Settings) -> None:
        self.golden = settings.models[0].golden
        self.wrong = False
        self.hang = False  # the model sleeps past the golden timeout

    def server_live(self) -> bool:
        return True

    def model_version_ready(self, model: str, version: str) -> bool:
        return True

    def served_versions(self, model: str) -> list[str]:
        return ["3"]

    def repository_index(self) -> list[IndexEntry]:
        return []

    def model_config(self, model: str) -> dict[str, Any]:
        return {}

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        if self.hang:
            raise TritonTimeout("TimeoutError: timed out")
        outputs = {}
        for expected in self.golden.outputs:
            values = np.array(expected.tensor.values, copy=True)
            if self.wrong:
                values = values + 100
            outputs[expected.tensor.name] = OutputTensor(expected.tensor.name, expected.tensor.datatype, values)
        return outputs

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None:
        pass

    def unload_model(self, model: str) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedEngine:
    def __init__(self, submit_errors: Sequence[Exception] = (), status_error: Exception | None = None) -> None:
        self.submit_errors = list(submit_errors)
        self.status_error = status_error
        self.created: list[str] = []
        self.requests: list[RollbackRequest] = []
        self.phase = "Running"

    def submit(self, request: RollbackRequest) -> Submission:
        self.requests.append(request)
        if self.submit_errors:
            raise self.submit_errors.pop(0)
        name = workflow_name(request)
        created = name not in self.created
        self.created.append(name)
        return Submission(name, created)

    def status(self, name: str) -> RunStatus:
        if self.status_error is not None:
            raise self.status_error
        if name not in self.created:
            raise EngineRejected(f"no workflow {name}")
        return RunStatus(name, self.phase)

    def wait(self, name: str, timeout_s: float) -> RunStatus:
        return self.status(name)


@pytest.fixture
def settings(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        models=(example_settings.model("linear_scorer"),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    settings: Settings, primary: ScriptedEngine, fallback: ScriptedEngine | None = None
) -> tuple[Sidecar, ScriptedTriton, FakeClock]:
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        fallback_factory=(lambda: fallback) if fallback else None,
        clock=clock,
        wall=lambda: clock.now,
    )
    return sidecar, triton, clock


def test_an_engine_that_did_not_answer_is_asked_again_next_cycle(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("timed out")])
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING and primary.created == []
    clock.now += 1
    sidecar.cycle()
    assert len(primary.created) == 1  # taken on the second try
    assert sidecar.status()["models"]["linear_scorer"]["workflow"] == primary.created[0]


def test_no_fallback_while_the_primary_may_have_started_the_workflow(settings: Settings) -> None:
    # The create timed out after reaching Argo, and Argo does not answer the follow-up question either.
    primary = ScriptedEngine(
        submit_errors=[EngineUnavailable("read timed out", maybe_delivered=True)],
        status_error=EngineUnavailable("still down"),
    )
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert fallback.created == []  # two rollbacks must never race


def test_fallback_when_the_primary_certainly_did_not_take_it(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("connection refused", maybe_delivered=False)])
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert len(fallback.created) == 1
    assert sidecar.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "fallback_local"}) == 1


def test_fallback_after_asking_again_finds_no_workflow(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("read timed out", maybe_delivered=True)])
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert len(fallback.created) == 1


def test_no_more_submissions_once_escalated(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("down")] * 1000)
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    clock.now += sidecar.policy.rollback_timeout_s + 1
    sidecar.cycle()  # the healing timeout escalates
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    attempts = len(primary.submit_errors)
    for _ in range(3):
        clock.now += 1
        sidecar.cycle()
    assert len(primary.submit_errors) == attempts  # nothing asked the engine again


def test_a_failed_run_alerts_and_the_alert_keeps_firing_until_restored(settings: Settings) -> None:
    sent: list[dict[str, Any]] = []
    primary = ScriptedEngine()
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    settings = dataclasses.replace(
        settings,
        rollback=dataclasses.replace(
            settings.rollback, alert=dataclasses.replace(settings.rollback.alert, webhook_url="http://am:9093")
        ),
    )
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        clock=clock,
        wall=lambda: clock.now,
        send_alert=lambda url, alerts, timeout: sent.extend(alerts),
    )
    triton.wrong = True
    sidecar.cycle()
    primary.phase = "Failed"
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1 and "endsAt" not in sent[0]
    clock.now += 121
    sidecar.cycle()
    assert len(sent) == 2  # re-sent: Alertmanager would resolve a silent alert
    triton.wrong = False
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY
    assert "endsAt" in sent[-1]  # resolved


def test_one_models_exception_does_not_stop_the_cycle(settings: Settings) -> None:
    primary = ScriptedEngine(status_error=RuntimeError("a bug in an engine"))
    sidecar, triton, clock = make(settings, primary)
    triton.wrong = True
    sidecar.cycle()
    clock.now += 1
    sidecar.cycle()  # status() raises RuntimeError: logged, the cycle completes
    assert sidecar.cycles == 2


def test_a_hung_model_is_a_timeout_incident_and_its_rollback_says_so(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary)
    triton.hang = True
    sidecar.cycle()  # failure_threshold 1: live, ready, no answer in time -> healing
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.HEALING and state.incident is not None
    assert state.incident.reason == "timeout"
    assert sidecar.ready() == (False, ["linear_scorer: healing"])
    [request] = primary.requests
    assert request.reason == "timeout"  # labelled as such in Argo: a hang, not a slow answer


# --- every path ends: whatever the engines raise (or hang on), the healing timeout escalates and alerts ---


def alerting(settings: Settings) -> Settings:
    alert = dataclasses.replace(settings.rollback.alert, webhook_url="http://am:9093")
    return dataclasses.replace(settings, rollback=dataclasses.replace(settings.rollback, alert=alert))


def make_alerting(
    settings: Settings,
    engine_factory: Callable[[], Any],
    fallback_factory: Callable[[], Any] | None = None,
) -> tuple[Sidecar, ScriptedTriton, FakeClock, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    settings = alerting(settings)
    triton = ScriptedTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=engine_factory,
        fallback_factory=fallback_factory,
        clock=clock,
        wall=lambda: clock.now,
        send_alert=lambda url, alerts, timeout: sent.extend(alerts),
    )
    return sidecar, triton, clock, sent


def detect_then_wait_out_the_healing_timeout(sidecar: Sidecar, triton: ScriptedTriton, clock: FakeClock) -> None:
    triton.wrong = True
    sidecar.cycle()  # failure_threshold 1: healing, first submission attempt
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING
    for _ in range(3):  # retried every cycle ...
        clock.now += 1
        sidecar.cycle()
        assert sidecar.states["linear_scorer"].phase is Phase.HEALING
    clock.now += sidecar.policy.rollback_timeout_s  # ... until the healing timeout
    sidecar.cycle()


def assert_escalated_with_an_alert(sidecar: Sidecar, sent: list[dict[str, Any]]) -> None:
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.ESCALATED, state
    assert "no outcome from the rollback" in state.last_reason
    [alert] = sent
    assert alert["labels"]["model"] == "linear_scorer" and "endsAt" not in alert
    assert sidecar.status()["models"]["linear_scorer"]["workflow"] == ""
    not_submitted = sidecar.metrics.value(
        "healer_rollbacks_total", {"model": "linear_scorer", "outcome": "not_submitted"}
    )
    assert not_submitted == 5  # every cycle while healing tried, and said so


def test_an_engine_factory_that_raises_ends_escalated_with_an_alert(settings: Settings) -> None:
    built: list[str] = []

    def factory() -> Any:
        built.append("try")
        raise PermissionError("[Errno 30] Read-only file system: '/tmp/healer/runs'")

    sidecar, triton, clock, sent = make_alerting(settings, factory)
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert_escalated_with_an_alert(sidecar, sent)
    assert len(built) == 5  # asked again every cycle: a volume may have been mounted since


def test_a_submit_that_raises_a_non_engine_error_ends_escalated_with_an_alert(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[RuntimeError("a bug in the engine")] * 1000)
    fallback = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary, lambda: fallback)
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert_escalated_with_an_alert(sidecar, sent)
    assert fallback.created == []  # whether the primary started it is unknown: never two rollbacks


def test_a_fallback_factory_that_raises_ends_escalated_with_an_alert(settings: Settings) -> None:
    primary = ScriptedEngine(submit_errors=[EngineUnavailable("connection refused", maybe_delivered=False)] * 1000)

    def fallback() -> Any:
        raise OSError("[Errno 30] Read-only file system: '/tmp/healer/runs'")

    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary, fallback)
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert_escalated_with_an_alert(sidecar, sent)


class HangingEngine(ScriptedEngine):
    """submit() blocks until released: a stuck NFS, a server that accepts and never answers."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.calls = 0

    def submit(self, request: RollbackRequest) -> Submission:
        self.calls += 1
        self.release.wait(30)
        return super().submit(request)


@pytest.fixture
def hanging() -> Iterator[HangingEngine]:
    engine = HangingEngine()
    yield engine
    engine.release.set()  # let the abandoned worker thread finish


def test_a_hanging_engine_call_is_bounded_and_ends_escalated_with_an_alert(
    settings: Settings, hanging: HangingEngine
) -> None:
    settings = dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, engine_call_timeout_s=0.05))
    fallback = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: hanging, lambda: fallback)
    started = time.monotonic()
    detect_then_wait_out_the_healing_timeout(sidecar, triton, clock)
    assert time.monotonic() - started < 5  # five cycles, none stalled on the hung call
    assert_escalated_with_an_alert(sidecar, sent)
    assert hanging.calls == 1  # not called again while the first call is still out
    assert fallback.created == []  # a hung create may still land: never two rollbacks


def test_a_probe_cycle_that_raises_still_lets_the_healing_timeout_escalate(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING

    def broken() -> bool:
        raise RuntimeError("a bug while probing")

    triton.server_live = broken  # type: ignore[method-assign]
    clock.now += sidecar.policy.rollback_timeout_s + 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1


def test_the_manifests_fallback_engine_writes_to_an_empty_dir_not_the_read_only_root() -> None:
    from pathlib import Path

    import yaml

    from healer.settings import parse_settings

    manifest = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "triton-with-healer.yaml"
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifest.read_text()) if d}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    healer = next(c for c in pod["containers"] if c["name"] == "healer")
    assert healer["securityContext"]["readOnlyRootFilesystem"] is True
    config = parse_settings(yaml.safe_load(docs["ConfigMap"]["data"]["healer.yaml"]), source="cm", base_dir=Path("/"))
    assert config.sidecar.fallback_to_local
    mount = next(m for m in healer["volumeMounts"] if Path(m["mountPath"]) == config.rollback.state_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume and not mount.get("readOnly", False)


# --- draining never empties the Service (in-memory peers, fake time) -------------------------------------


class Board:
    """The replica set as the Kubernetes API would show it: each pod's drain announcement, and its
    Ready condition as the kubelet would set it from the pod's /readyz."""

    def __init__(self) -> None:
        self.wanted: dict[str, float | None] = {}
        self.sidecars: dict[str, Sidecar] = {}
        self.engines: dict[str, ScriptedEngine] = {}
        self.down = False

    def source(self, me: str) -> BoardPeers:
        return BoardPeers(self, me)

    def ready_pods(self) -> set[str]:
        return {name for name, sidecar in self.sidecars.items() if sidecar.ready()[0]}


class BoardPeers:
    def __init__(self, board: Board, me: str) -> None:
        self.board = board
        self.me = me

    def announce(self, wanted_at: float | None) -> None:
        if self.board.down:
            raise PeersUnavailable("API down")
        self.board.wanted[self.me] = wanted_at

    def peers(self) -> list[Peer]:
        if self.board.down:
            raise PeersUnavailable("API down")
        return [Peer(name, s.ready()[0], self.board.wanted.get(name)) for name, s in self.board.sidecars.items()]


def fleet(
    settings: Settings, n: int, *, min_ready: int = 1
) -> tuple[Board, list[tuple[Sidecar, ScriptedTriton]], FakeClock]:
    drain = DrainSettings(min_ready=min_ready, peer_urls=("http://peers",), settle_s=2.0, keep_decision_s=10.0)
    settings = dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, drain=drain))
    board, clock, members = Board(), FakeClock(), []
    for i in range(n):
        name = f"triton-{i}"
        triton = ScriptedTriton(settings)
        engine = ScriptedEngine()
        sidecar = Sidecar(
            settings,
            triton,
            engine_factory=lambda engine=engine: engine,  # type: ignore[misc]
            pod=f"ml/{name}",
            clock=clock,
            wall=lambda: clock.now,
            peers=board.source(name),
        )
        board.sidecars[name] = sidecar
        board.engines[name] = engine
        members.append((sidecar, triton))
    return board, members, clock


def cycle_all(members: list[tuple[Sidecar, ScriptedTriton]], clock: FakeClock, board: Board) -> set[str]:
    clock.now += 1
    for sidecar, _ in members:
        sidecar.cycle()
        assert board.ready_pods(), "every pod out of the Service at once"  # checked after every single step
    return board.ready_pods()


def test_a_model_broken_on_every_replica_never_empties_the_service(settings: Settings) -> None:
    board, members, clock = fleet(settings, 3)
    for _ in range(2):
        cycle_all(members, clock, board)
    for _, triton in members:
        triton.wrong = True
    seen = [cycle_all(members, clock, board) for _ in range(8)]
    assert seen[-1] == seen[-2] and len(seen[-1]) == 1  # settled: two drained, one held back
    [held_name] = seen[-1]
    held = board.sidecars[held_name]
    ok, lines = held.ready()
    assert ok and lines[0].startswith("drain held back (linear_scorer: healing): held back: 1 pod(s) serving")
    assert held.metrics.value("healer_drain_held_back", {}) == 1.0
    drain = held.status()["drain"]
    assert (drain["wanted"], drain["held_back"], drain["draining"], drain["ready"]) == (True, True, False, True)
    # Every replica's rollback was still submitted: healing does not wait for the drain.
    assert all(s.states["linear_scorer"].phase is Phase.HEALING for s, _ in members)
    drained = [s for name, s in board.sidecars.items() if name != held_name]
    assert all(s.status()["drain"]["draining"] and s.ready() == (False, ["linear_scorer: healing"]) for s in drained)


def test_a_model_broken_on_one_replica_drains_that_one(settings: Settings) -> None:
    board, members, clock = fleet(settings, 3)
    cycle_all(members, clock, board)
    members[1][1].wrong = True
    cycle_all(members, clock, board)  # announced; deciding after settle_s
    assert board.ready_pods() == {"triton-0", "triton-1", "triton-2"}
    for _ in range(3):
        cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-0", "triton-2"}
    assert board.wanted["triton-1"] is not None
    members[1][1].wrong = False  # healed: the want is withdrawn and the pod serves again
    board.engines["triton-1"].phase = "Succeeded"
    cycle_all(members, clock, board)
    assert board.wanted["triton-1"] is None and board.ready_pods() == {"triton-0", "triton-1", "triton-2"}


def test_with_the_peers_unreadable_a_grant_is_kept_for_a_while_then_the_pod_serves(settings: Settings) -> None:
    board, members, clock = fleet(settings, 2)
    cycle_all(members, clock, board)
    members[0][1].wrong = True
    for _ in range(4):
        cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-1"}
    board.down = True
    for _ in range(5):
        cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-1"}  # kept: every pod keeps its own decision
    for _ in range(7):  # past keep_decision_s (10 s) without a view
        cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-0", "triton-1"}
    assert "peers unreadable" in members[0][0].ready()[1][0]


def test_a_new_want_while_the_peers_are_unreadable_does_not_drain(settings: Settings) -> None:
    board, members, clock = fleet(settings, 2)
    cycle_all(members, clock, board)
    board.down = True
    for _, triton in members:
        triton.wrong = True
    for _ in range(6):
        cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-0", "triton-1"}  # blind: nobody drains
    assert all(s.metrics.value("healer_drain_held_back", {}) == 1.0 for s, _ in members)


def test_without_the_drain_setting_every_failing_pod_drains_as_before(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary)
    sidecar.cycle()
    triton.wrong = True
    sidecar.cycle()
    assert sidecar.ready() == (False, ["linear_scorer: healing"])
    assert sidecar.status()["drain"]["draining"] is True


def test_kube_peers_read_ready_conditions_and_annotations() -> None:
    from healer.kube import KubeError, PodReadiness

    class FakeKube:
        def __init__(self) -> None:
            self.annotated: list[tuple[str, dict[str, str]]] = []
            self.fail = False

        def annotate_pod(self, pod: Any, annotations: dict[str, str]) -> None:
            if self.fail:
                raise KubeError("annotate: Kubernetes API not reachable")
            self.annotated.append((str(pod), dict(annotations)))

        def pod_readiness(self, namespace: str, selector: str) -> list[PodReadiness]:
            if self.fail:
                raise KubeError("list pods: Kubernetes API not reachable")
            return [
                PodReadiness("triton-0", True, False, {"healer.io/drain-wanted": "1700000000.250"}),
                PodReadiness("triton-1", False, True, {"healer.io/drain-wanted": ""}),
                PodReadiness("triton-2", True, False, {"healer.io/drain-wanted": "garbage"}),
            ]

    kube = FakeKube()
    source = KubePeers(kube, "ml/triton-0", "ml", "app=triton")
    assert source.me == "triton-0"
    source.announce(1700000000.25)
    source.announce(None)
    assert kube.annotated == [
        ("ml/triton-0", {"healer.io/drain-wanted": "1700000000.250"}),
        ("ml/triton-0", {"healer.io/drain-wanted": ""}),
    ]
    assert source.peers() == [
        Peer("triton-0", True, 1700000000.25, False),
        Peer("triton-1", False, None, True),
        Peer("triton-2", True, None, False),
    ]
    kube.fail = True
    with pytest.raises(PeersUnavailable):
        source.peers()
    with pytest.raises(PeersUnavailable):
        source.announce(1.0)
    with pytest.raises(PeersUnavailable):
        KubePeers(None, "ml/triton-0", "ml", "app=triton").peers()
