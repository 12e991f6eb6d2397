"""The sidecar's plumbing between decisions and engines, with fake time, a scripted Triton and
scripted engines (the real Triton and engines are exercised in test_sidecar_triton.py)."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog

from healer.core.decisions import Peer
from healer.core.state import Phase
from healer.edges.triton import OutputTensor
from healer.engines import EngineNotFound, EngineRejected, EngineUnavailable
from healer.settings import DrainPeers, DrainSettings, Settings, SidecarSettings, TensorSpec, TierThresholds
from healer.sidecar import HttpPeers, KubePeers, PeersUnavailable, Sidecar
from healer.sidecar.clock import REAL_CLOCK, Clock
from healer.vocabulary import RollbackRequest, RunStatus, Submission, workflow_name
from tests.support.sidecar_fleet import (
    FakeClock,
    ScriptedEngine,
    ScriptedTriton,
    cycle_all,
    fleet,
)


@pytest.fixture
def settings(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        models=(example_settings.model("linear_scorer"),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


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


def test_fallback_when_the_primary_has_no_template(settings: Settings) -> None:
    # Argo answers 404 to the create: its WorkflowTemplate is not installed, nothing was started.
    primary = ScriptedEngine(submit_errors=[EngineNotFound("Argo refused to submit (HTTP 404): template not found")])
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert len(fallback.created) == 1


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

    manifest = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "triton-with-healer.yaml"
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifest.read_text()) if d}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    healer = next(c for c in pod["containers"] if c["name"] == "healer")
    assert healer["securityContext"]["readOnlyRootFilesystem"] is True
    config = parse_settings(yaml.safe_load(docs["ConfigMap"]["data"]["healer.yaml"]), source="cm", base_dir=Path("/"))
    assert config.sidecar.fallback_to_local
    mount = next(m for m in healer["volumeMounts"] if Path(m["mountPath"]) == config.rollback.state_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume and not mount.get("readOnly", False)


# --- draining never empties the Service: the drain set in a real (filesystem) store, fake time -----------


def break_all(members: list[tuple[Sidecar, ScriptedTriton]]) -> None:
    for _, triton in members:
        triton.wrong = True


@pytest.mark.parametrize(("n", "min_ready"), [(3, 1), (3, 2), (3, 3), (1, 1), (2, 1)])
def test_a_model_broken_on_every_replica_never_empties_the_service(
    settings: Settings, tmp_path: Path, n: int, min_ready: int
) -> None:
    board, members, clock = fleet(settings, tmp_path, n, min_ready=min_ready)
    cycle_all(members, clock, board, min_ready=min_ready)
    break_all(members)
    orders = list(itertools.permutations(range(n)))
    seen = [cycle_all(members, clock, board, min_ready=min_ready, order=orders[k % len(orders)]) for k in range(8)]
    assert seen[-1] == seen[-2] and len(seen[-1]) == min(n, min_ready)  # settled: the rest drained
    assert len(board.drained()) == max(0, n - min_ready)
    held = [s for name, s in board.sidecars.items() if name in seen[-1]]
    for sidecar in held:
        ok, lines = sidecar.ready()
        assert ok and lines[0].startswith("drain held back (linear_scorer: healing): held back: "), lines
        assert f"min_ready {min_ready}" in lines[0]
        assert sidecar.metrics.value("healer_drain_held_back", {}) == 1.0
        drain = sidecar.status()["drain"]
        assert (drain["wanted"], drain["held_back"], drain["draining"], drain["ready"]) == (True, True, False, True)
    # Every replica's rollback was still submitted: healing does not wait for the drain.
    assert all(s.states["linear_scorer"].phase is Phase.HEALING for s, _ in members)
    drained = [s for name, s in board.sidecars.items() if name not in seen[-1]]
    assert all(s.status()["drain"]["draining"] and s.ready() == (False, ["linear_scorer: healing"]) for s in drained)


def test_a_model_broken_on_one_replica_drains_that_one_and_it_comes_back(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 3)
    cycle_all(members, clock, board)
    members[1][1].wrong = True
    assert cycle_all(members, clock, board) == {"triton-0", "triton-2"}  # no settling time: admitted at once
    assert set(board.drained()) == {"triton-1"}
    assert members[1][0].status()["drain"]["in_set_since"] == clock.now
    members[1][1].wrong = False  # healed: out of the set, serving again
    board.engines["triton-1"].phase = "Succeeded"
    for _ in range(2):
        cycle_all(members, clock, board)
    assert board.drained() == {} and board.ready_pods() == {"triton-0", "triton-1", "triton-2"}


def test_all_wanting_pods_out_of_the_service_come_back(settings: Settings, tmp_path: Path) -> None:
    """Both pods drained (a drain set left so, or the old "drains for free" rule): the Service must not
    stay empty for the incident; one serves again at once, then the other stays drained."""
    board, members, clock = fleet(settings, tmp_path, 2, stale={"triton-0": 1.0, "triton-1": 1.0})
    break_all(members)
    clock.now += 1
    for sidecar, _ in members:
        sidecar.cycle()
    assert board.ready_pods(), board.drained()  # not both out
    for _ in range(3):
        cycle_all(members, clock, board)
    assert len(board.ready_pods()) == 1 and len(board.drained()) == 1


def test_a_blip_on_the_held_pod_brings_the_drained_pod_back(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    break_all(members)
    for _ in range(2):
        cycle_all(members, clock, board)
    [drained] = board.drained()
    [held] = board.ready_pods()
    board.not_ready = {held}  # one failed readinessProbe on the pod that serves
    clock.now += 1
    board.sidecars[drained].cycle()
    assert drained in board.ready_pods() and board.drained() == {}  # serves again
    board.not_ready = set()
    for _ in range(2):
        cycle_all(members, clock, board)
    assert len(board.ready_pods()) == 1 and len(board.drained()) == 1  # one drains again, one serves


def test_when_the_serving_pod_is_deleted_the_drained_pod_serves_again(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    break_all(members)
    for _ in range(2):
        cycle_all(members, clock, board)
    [drained] = board.drained()
    [held] = board.ready_pods()
    board.terminating = {held}
    clock.now += 1
    board.sidecars[drained].cycle()
    assert drained in board.ready_pods() and board.drained() == {}
    board.hidden = {held}  # gone from the list: its entry, were there one, is pruned by whoever writes
    cycle_all(members[:1] if drained == "triton-0" else members[1:], clock, board)
    assert drained in board.ready_pods()


def test_a_restarted_sidecar_removes_its_stale_entry(settings: Settings, tmp_path: Path) -> None:
    """triton-0's entry outlived its sidecar: it serves (healthy), and its entry would hold triton-1 back forever."""
    board, members, clock = fleet(settings, tmp_path, 2, stale={"triton-0": 1.0})
    members[1][1].wrong = True
    cycle_all(members, clock, board)
    assert "triton-0" not in board.drained()  # removed on its first cycle
    cycle_all(members, clock, board)
    assert set(board.drained()) == {"triton-1"} and board.ready_pods() == {"triton-0"}


def test_a_pod_missing_from_its_peer_list_never_drains(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 3)
    board.hidden = {"triton-0"}  # a selector that misses this pod: the list is of other pods
    members[0][1].wrong = True
    for _ in range(3):
        cycle_all(members, clock, board)
    assert board.drained() == {} and "triton-0" in board.ready_pods()
    assert "is not among its peers" in members[0][0].ready()[1][0]


@pytest.mark.parametrize("what", ["peers", "store"])
def test_with_no_view_a_drain_is_kept_for_a_while_then_the_pod_serves(
    settings: Settings, tmp_path: Path, what: str
) -> None:
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    members[0][1].wrong = True
    cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-1"}
    setattr(board, "down" if what == "peers" else "store_down", True)
    whys = []
    for _ in range(5):
        cycle_all(members, clock, board, interleave=False)
        assert board.ready_pods() == {"triton-1"}  # kept: it is in the set, nobody counts it
        whys.append(members[0][0].status()["drain"]["why"])
    assert len({len(w) for w in whys}) == 1  # the kept reason does not grow every cycle
    for _ in range(6):  # past keep_decision_s (10 s) without a view
        cycle_all(members, clock, board, interleave=False)
    assert board.ready_pods() == {"triton-0", "triton-1"}
    assert "no current view" in members[0][0].ready()[1][0]


def test_a_new_want_without_a_view_does_not_drain(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    board.store_down = True
    break_all(members)
    for _ in range(6):
        cycle_all(members, clock, board, interleave=False)
    assert board.ready_pods() == {"triton-0", "triton-1"}  # blind: nobody drains
    assert all(s.metrics.value("healer_drain_held_back", {}) == 1.0 for s, _ in members)


def test_a_bug_in_deciding_does_not_freeze_the_drain(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    members[0][1].wrong = True
    cycle_all(members, clock, board)
    assert board.ready_pods() == {"triton-1"}
    sidecar = members[0][0]

    def broken_peers() -> list[Peer]:
        raise RuntimeError("a bug in the peer source")

    sidecar.drain_keeper.peers.peers = broken_peers  # type: ignore[union-attr,method-assign]
    for _ in range(11):  # peers() raising anything at all: kept for keep_decision_s, then serving
        cycle_all(members, clock, board, interleave=False)
    assert board.ready_pods() == {"triton-0", "triton-1"}

    def broken(*_: Any) -> None:
        raise RuntimeError("a bug in deciding")

    board2, members2, clock2 = fleet(settings, tmp_path / "b", 2)
    cycle_all(members2, clock2, board2)
    members2[0][1].wrong = True
    cycle_all(members2, clock2, board2)
    members2[0][0]._decide_drain = broken  # type: ignore[method-assign]
    for _ in range(11):  # the decision itself raising: the same, never frozen
        cycle_all(members2, clock2, board2, interleave=False)
    assert board2.ready_pods() == {"triton-0", "triton-1"}

    # Asking whether the pod wants to drain raising too (the bug is in the models' verdicts): the cycle
    # still ends, and the pod serves (review of issue 17: it used to be asked outside the guard).
    board3, members3, clock3 = fleet(settings, tmp_path / "c", 2)
    cycle_all(members3, clock3, board3)
    members3[0][1].wrong = True
    cycle_all(members3, clock3, board3)
    members3[0][0]._wants_drain = broken  # type: ignore[method-assign]
    for _ in range(11):
        cycle_all(members3, clock3, board3, interleave=False)
    assert board3.ready_pods() == {"triton-0", "triton-1"}


def test_without_the_drain_setting_every_failing_pod_drains_as_before(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary)
    sidecar.cycle()
    triton.wrong = True
    sidecar.cycle()
    assert sidecar.ready() == (False, ["linear_scorer: healing"])
    assert sidecar.status()["drain"]["draining"] is True


def test_a_stopping_sidecar_leaves_the_service_and_the_drain_set(settings: Settings, tmp_path: Path) -> None:
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    members[0][1].wrong = True
    cycle_all(members, clock, board)
    assert set(board.drained()) == {"triton-0"}
    sidecar = members[0][0]
    sidecar.begin_stop()
    assert sidecar.ready() == (False, ["stopping: SIGTERM received, leaving the Service"])
    status = sidecar.status()
    assert status["stopping"] is True and status["drain"]["ready"] is False
    assert sidecar.shutdown(grace_s=5) == []
    assert board.drained() == {}


def test_kube_peers_read_ready_conditions_and_deletion() -> None:
    from healer.edges.kube import KubeError, PodReadiness

    class FakeKube:
        timeout_s = 3.0

        def __init__(self) -> None:
            self.fail = False

        def pod_readiness(self, namespace: str, selector: str) -> list[PodReadiness]:
            if self.fail:
                raise KubeError("list pods: Kubernetes API not reachable")
            return [
                PodReadiness("triton-0", True, False, {"healer.io/drain-wanted": "1700000000.250"}),
                PodReadiness("triton-1", False, True, {}),
                PodReadiness("triton-2", True, False, {}),
            ]

    kube = FakeKube()
    source = KubePeers(kube, "ml/triton-0", "ml", "app=triton")
    assert (source.me, source.lists_me, source.timeout_s) == ("triton-0", True, 3.0)
    assert not hasattr(source, "announce")  # nothing is written to the pods: no patch permission needed
    assert source.peers() == [
        Peer("triton-0", True, False),  # an old drain-wanted annotation means nothing any more
        Peer("triton-1", False, True),
        Peer("triton-2", True, False),
    ]
    kube.fail = True
    with pytest.raises(PeersUnavailable):
        source.peers()
    with pytest.raises(PeersUnavailable):
        KubePeers(None, "ml/triton-0", "ml", "app=triton").peers()


def test_http_peers_report_stopping_sidecars_and_raise_when_none_answers(settings: Settings) -> None:
    from healer.edges.embedded import free_port
    from healer.sidecar.views import SidecarServer

    servers, urls = [], []
    sidecars = []
    for i in range(2):
        sidecar, _triton, _clock = make(settings, ScriptedEngine())
        sidecar.pod = f"ml/triton-{i}"
        sidecar.cycle()
        sidecars.append(sidecar)
        server = SidecarServer(sidecar, f"127.0.0.1:{free_port()}")
        server.start()
        servers.append(server)
        urls.append(f"http://{server.address}")
    try:
        sidecars[1].begin_stop()
        dead = f"http://127.0.0.1:{free_port()}"
        peers = HttpPeers("ml/triton-0", [*urls, dead], timeout_s=1.0).peers()
        assert sorted(peers, key=lambda p: p.name) == [
            Peer("ml/triton-0", True, False),
            Peer("ml/triton-1", False, True),  # stopping: terminating, not serving
        ]
        with pytest.raises(PeersUnavailable, match="none of the 2"):
            HttpPeers("ml/triton-0", [dead, f"http://127.0.0.1:{free_port()}"], timeout_s=0.5).peers()
    finally:
        for server in servers:
            server.stop()


# --- engines: one rollback per model, every path ends ---------------------------------------------------


def test_a_refusal_when_asking_again_is_not_absence(settings: Settings) -> None:
    """A create that timed out, then 403 on the GET: the workflow may exist; never start a second one."""
    primary = ScriptedEngine(
        submit_errors=[EngineUnavailable("read timed out", maybe_delivered=True)],
        status_error=EngineRejected("Argo refused to get workflow (HTTP 403): forbidden"),
    )
    fallback = ScriptedEngine()
    sidecar, triton, _clock = make(settings, primary, fallback)
    triton.wrong = True
    sidecar.cycle()
    assert fallback.created == []
    primary.status_error = EngineNotFound("Argo refused to get workflow (HTTP 404): not found")
    primary.submit_errors = [EngineUnavailable("read timed out", maybe_delivered=True)]
    sidecar.cycle()
    assert len(fallback.created) == 1  # 404: certainly absent


def test_a_refusal_while_polling_is_not_a_vanished_run(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    sidecar.cycle()
    primary.status_error = EngineRejected("Argo refused to get workflow (HTTP 401): token expired")
    for _ in range(3):
        clock.now += 1
        sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING and sent == []  # still watching it
    primary.status_error = None
    primary.phase = "Succeeded"
    triton.wrong = False
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY


def test_a_vanished_run_escalates_once(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    sidecar.cycle()
    primary.status_error = EngineNotFound("no run")
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED
    assert len(sent) == 1 and "disappeared" in sent[0]["annotations"]["description"]


class PresetEngine(ScriptedEngine):
    """Runs of some names exist already, in a given phase (e.g. another replica's, finished)."""

    def __init__(self, phases: dict[str, str]) -> None:
        super().__init__()
        self.phases = phases
        self.created = list(phases)

    def status(self, name: str) -> RunStatus:
        return RunStatus(name, self.phases.get(name, "Running"), finished_at="2020-01-01T00:00:00Z")


def suffixed(request_name: str, n: int) -> str:
    return workflow_name(RollbackRequest(model="linear_scorer", from_version="3", incident=f"{request_name}-r{n}"))


def test_a_fast_failing_rollback_is_joined_not_submitted_again(settings: Settings) -> None:
    """Another replica's run of this incident Failed at once (store down): every later replica joins it and
    escalates, whatever the clocks say; it does not create -r2, -r3, ... each with its own alert."""
    probe, triton, _clock = make(settings, ScriptedEngine())
    triton.wrong = True
    probe.cycle()
    incident = probe.states["linear_scorer"].incident
    assert incident is not None
    first = workflow_name(RollbackRequest(model="linear_scorer", from_version="3", incident=incident.key))
    engine = PresetEngine({first: "Failed"})
    sidecar, triton, clock, sent = make_alerting(settings, lambda: engine)
    triton.wrong = True
    sidecar.cycle()
    assert engine.created == [first, first]  # asked once, joined
    assert sidecar.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "joined"}) == 1
    clock.now += 1
    sidecar.cycle()
    assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED and len(sent) == 1
    # A run that Succeeded healed an earlier occurrence: this one is new, the next suffix is used.
    engine = PresetEngine({first: "Succeeded"})
    again, triton, _clock = make(settings, engine)
    triton.wrong = True
    again.cycle()
    assert engine.created[-1] == suffixed(incident.key, 2)
    assert again.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "submitted"}) == 1


def test_the_healing_timeout_then_a_failed_run_escalates_once(settings: Settings) -> None:
    primary = ScriptedEngine()
    sidecar, triton, clock, sent = make_alerting(settings, lambda: primary)
    triton.wrong = True
    with structlog.testing.capture_logs() as logs:
        sidecar.cycle()
        clock.now += sidecar.policy.rollback_timeout_s + 1
        sidecar.cycle()
        assert sidecar.states["linear_scorer"].phase is Phase.ESCALATED and len(sent) == 1
        primary.phase = "Failed"  # the run ends after all
        clock.now += 1
        sidecar.cycle()
    assert len(sent) == 1
    assert sidecar.metrics.value("healer_rollbacks_total", {"model": "linear_scorer", "outcome": "escalated"}) == 1
    assert len([e for e in logs if e["event"] == "incident"]) == 1


def test_draining_the_engines_survives_an_engine_added_meanwhile(settings: Settings) -> None:
    sidecar, _triton, _clock = make(settings, ScriptedEngine())

    class Late:
        def drain(self, timeout_s: float) -> list[str]:
            # A construction left to its worker thread lands while the engines are drained.
            sidecar.handovers.engines["fallback"] = ScriptedEngine()
            return ["run-a"]

    sidecar.handovers.engines["primary"] = Late()  # type: ignore[assignment]
    assert sidecar.drain(1.0) == ["run-a"]


@pytest.mark.parametrize("time_", ["fake", "real"])
def test_shutdown_cancels_in_pod_rollbacks_within_the_grace_period(settings: Settings, time_: str) -> None:
    """On fake time, and once on the real clock end to end (about a second: the first drain's share)."""
    clock: Clock = FakeClock() if time_ == "fake" else REAL_CLOCK
    engine = ScriptedEngine()
    sidecar = Sidecar(settings, ScriptedTriton(settings), engine_factory=lambda: engine, clock=clock)
    calls: list[tuple[str, float]] = []

    class Local:
        def __init__(self) -> None:
            self.cancelled = threading.Event()

        def drain(self, timeout_s: float) -> list[str]:
            calls.append(("drain", timeout_s))
            clock.wait(self.cancelled, timeout_s)  # an in-pod rollback that goes on until cancelled
            return [] if self.cancelled.is_set() else ["healer-rollback-x"]

        def cancel_all(self) -> list[str]:
            calls.append(("cancel_all", 0.0))
            self.cancelled.set()
            return ["healer-rollback-x"]

    sidecar.handovers.engines["fallback"] = Local()  # type: ignore[assignment]
    started = clock.monotonic()
    sidecar.begin_stop()
    assert sidecar.shutdown(grace_s=3.0) == []
    assert clock.monotonic() - started < 3.0  # within the grace period: cancelled, not SIGKILLed mid-step
    assert [c[0] for c in calls] == ["drain", "cancel_all", "drain"]
    assert 0 < calls[0][1] < 2.0  # part of the time for the rollback to finish, the rest to stop and alert


@pytest.mark.subprocess
def test_an_orphaned_in_pod_rollback_is_escalated_at_start_up(settings: Settings, tmp_path: Path) -> None:
    import json
    import socket
    import subprocess
    import sys

    from healer.engines.records import mark_orphaned_runs

    dead = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
        ).stdout
    )
    record = {
        "metadata": {
            "name": "healer-rollback-linear-scorer-0123456789",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "healer.io/model": "linear_scorer",
                "healer.io/from-version": "3",
                "healer.io/incident": "inc-0123456789abcdef",
                "healer.io/reason": "wrong-answer",
            },
            "annotations": {"healer.io/engine": f"{socket.gethostname()}/{dead}"},
        },
        "status": {"phase": "Running", "nodes": {}},
    }
    (tmp_path / "healer-rollback-linear-scorer-0123456789.json").write_text(json.dumps(record))
    other = {
        **record,
        "metadata": {**record["metadata"], "name": "healer-rollback-other-1", "labels": {"healer.io/model": "other"}},
    }
    (tmp_path / "healer-rollback-other-1.json").write_text(json.dumps(other))
    sidecar, _triton, _clock, sent = make_alerting(settings, ScriptedEngine)
    sidecar.escalate_orphans(mark_orphaned_runs(tmp_path))
    state = sidecar.states["linear_scorer"]
    assert state.phase is Phase.ESCALATED and state.incident is not None
    assert state.incident.workflow == "healer-rollback-linear-scorer-0123456789"
    [alert] = sent  # one, for the model it watches
    assert (
        alert["labels"]["incident"] == "inc-0123456789abcdef" and "was cut off" in alert["annotations"]["description"]
    )
    sidecar.escalate_orphans(mark_orphaned_runs(tmp_path))  # marked already: nothing more
    assert len(sent) == 1
    sidecar.cycle()  # good answers (success_threshold 1): trusted again, the alert resolved
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY and "endsAt" in sent[-1]


class TwoModelTriton(ScriptedTriton):
    """Both example models; ``wrong`` and ``raises`` name the models that answer wrongly or make probing raise."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.goldens = {m.name: m.golden for m in settings.models}
        self.wrong_models: set[str] = set()
        self.raises: set[str] = set()

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        if model in self.raises:
            raise ValueError("cannot convert the answer to a numpy array")
        outputs = {}
        for expected in self.goldens[model].outputs:
            values = np.array(expected.tensor.values, copy=True)
            if model in self.wrong_models:
                values = values + 100
            outputs[expected.tensor.name] = OutputTensor(expected.tensor.name, expected.tensor.datatype, values)
        return outputs


@pytest.fixture
def two_models(example_settings: Settings) -> Settings:
    return dataclasses.replace(
        example_settings,
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )


def test_an_exception_probing_one_model_leaves_the_others_verdicts(two_models: Settings) -> None:
    triton = TwoModelTriton(two_models)
    triton.raises = {"tiny_classifier"}
    triton.wrong_models = {"linear_scorer"}
    clock = FakeClock()
    primary = ScriptedEngine()
    sidecar = Sidecar(two_models, triton, engine_factory=lambda: primary, clock=clock)
    sidecar.cycle()
    assert sidecar.cycles == 1  # a fresh sidecar completes its cycle
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING  # the other model's verdict still counts
    assert sidecar.states["tiny_classifier"].phase is Phase.HEALTHY  # nothing learnt, nothing changed
    last = sidecar.status()["models"]["tiny_classifier"]["last"]
    assert any(v["status"] == "error" and "probe raised: ValueError" in v["reason"] for v in last.values())
    triton.wrong_models = set()
    triton.raises = set()
    sidecar.cycle()
    assert sidecar.ready()[0] is False  # still healing linear_scorer: /readyz answers, it is not stuck at 503


def test_a_hung_call_for_one_model_does_not_block_the_fallback_of_another(two_models: Settings) -> None:
    settings = dataclasses.replace(
        two_models, sidecar=dataclasses.replace(two_models.sidecar, engine_call_timeout_s=0.05)
    )
    release = threading.Event()

    class HangsForLinear(ScriptedEngine):
        def submit(self, request: RollbackRequest) -> Submission:
            if request.model == "linear_scorer":
                release.wait(30)  # Argo accepted the connection and never answered
            return super().submit(request)

    primary = HangsForLinear()
    fallback = ScriptedEngine()
    triton = TwoModelTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(
        settings,
        triton,
        engine_factory=lambda: primary,
        fallback_factory=lambda: fallback,
        clock=clock,
    )
    try:
        triton.wrong_models = {"linear_scorer"}
        sidecar.cycle()  # linear_scorer's create hangs: maybe delivered, no fallback
        triton.wrong_models = {"linear_scorer", "tiny_classifier"}
        for _ in range(3):
            clock.now += 1
            sidecar.cycle()
        # tiny_classifier's request was never sent (not attempted): the in-pod engine takes it.
        assert [r.model for r in fallback.requests] == ["tiny_classifier"]
        assert sidecar.status()["models"]["tiny_classifier"]["workflow"] == fallback.created[0]
        # linear_scorer's hung create may still land: it never falls back while that call is out.
        assert sidecar.states["linear_scorer"].phase is Phase.HEALING
        assert sidecar.status()["models"]["linear_scorer"]["workflow"] == ""
    finally:
        release.set()


# --- the settings of the drain and of stopping ------------------------------------------------------------


def write_config(tmp_path: Path, sidecar: dict[str, Any], *, store: bool = True) -> Path:
    import yaml

    from tests.conftest import EXAMPLES

    document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
    document.pop("embedded", None)
    document["models"] = document["models"][:1]
    document.pop("live_repository", None)
    if store:
        document["store"] = {"filesystem": {"root": str(tmp_path)}}
    else:
        document.pop("store", None)
    document["rollback"] = {"engine": "argo", "argo": {"host": "http://127.0.0.1:9"}}
    document["sidecar"] = sidecar
    path = tmp_path / "healer.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_drain_and_stopping_settings_load(tmp_path: Path) -> None:
    from healer.settings import load_settings

    drain = {"peers": {"namespace": "ml", "selector": "app=triton"}, "set": "triton-a", "store_timeout_s": 2}
    loaded = load_settings(write_config(tmp_path, {"drain": drain, "termination_grace_s": 120})).sidecar
    assert loaded.termination_grace_s == 120.0
    assert loaded.drain is not None and (loaded.drain.drain_set, loaded.drain.store_timeout_s) == ("triton-a", 2.0)
    derived = load_settings(write_config(tmp_path, {"drain": {"peers": drain["peers"]}})).sidecar.drain
    assert derived is not None and derived.drain_set == "ml.app_triton"  # one set per namespace and selector
    assert SidecarSettings().termination_grace_s == 30.0  # Kubernetes' default grace period


@pytest.mark.parametrize("name", ["../x", "ledger", "a b"])
def test_a_drain_set_name_that_is_not_a_plain_name_is_refused(tmp_path: Path, name: str) -> None:
    from healer.settings import ConfigError, load_settings

    drain = {"peers": {"namespace": "ml", "selector": "app=triton"}, "set": name}
    with pytest.raises(ConfigError, match=r"sidecar\.drain\.set: must be a name"):
        load_settings(write_config(tmp_path, {"drain": drain}))


def test_the_sidecar_command_refuses_a_drain_without_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from healer.cli import main
    from healer.cli.output import EXIT_USAGE

    drain = {"peer_urls": ["http://127.0.0.1:9"], "set": "triton"}
    config = write_config(tmp_path, {"drain": drain, "fallback_to_local": False}, store=False)
    assert main(["sidecar", "--config", str(config)]) == EXIT_USAGE
    assert "store: is required by sidecar.drain" in capsys.readouterr().err


def _without_store(settings: Settings, **sidecar: Any) -> Settings:
    return dataclasses.replace(settings, store=None, sidecar=dataclasses.replace(settings.sidecar, **sidecar))


@pytest.mark.parametrize(
    ("case", "listen", "problem"),
    [
        ("as configured", None, None),
        ("a --listen of its own", "127.0.0.1:9090", None),
        ("--listen on Triton's port", "127.0.0.1:8000", "sidecar: --listen: port 8000 is Triton's"),
        ("--listen with no port", "127.0.0.1", "sidecar: --listen: "),
        ("no store, the in-pod engine", None, "store: is required to roll back in the pod (engine local"),
        ("no store, the in-pod fallback", None, "store: is required to roll back in the pod"),
        ("no store, a drain set", None, "store: is required by sidecar.drain"),
        ("no store, nothing in the pod", None, None),
    ],
)
def test_what_keeps_a_sidecar_from_starting(
    example_settings: Settings, case: str, listen: str | None, problem: str | None
) -> None:
    """healer/compose.py ``sidecar_problem``, pure: `healer sidecar` prints it and exits EXIT_USAGE."""
    from healer.compose import sidecar_problem

    argo = dataclasses.replace(example_settings.rollback, engine="argo")
    drain = DrainSettings(peer_urls=("http://127.0.0.1:9",), set_name="triton")
    settings = {
        "no store, the in-pod engine": _without_store(example_settings),
        "no store, the in-pod fallback": dataclasses.replace(
            _without_store(example_settings, fallback_to_local=True), rollback=argo
        ),
        "no store, a drain set": dataclasses.replace(
            _without_store(example_settings, fallback_to_local=False, drain=drain), rollback=argo
        ),
        "no store, nothing in the pod": dataclasses.replace(
            _without_store(example_settings, fallback_to_local=False), rollback=argo
        ),
    }.get(case, example_settings)
    found = sidecar_problem(settings, listen=listen)
    if problem is None:
        assert found is None, case
    else:
        assert found is not None and problem in found, (case, found)


# ---- fast confirmation ------------------------------------------------------------------------------------


class CountingTriton(ScriptedTriton):
    """Answers wrong to the requests ``wrong_at`` says (1-based count of golden requests)."""

    def __init__(self, settings: Settings, wrong_at: Callable[[int], bool]) -> None:
        super().__init__(settings)
        self.requests, self.wrong_at, self.live = 0, wrong_at, True

    def server_live(self) -> bool:
        return self.live

    def infer(self, *args: Any, **kwargs: Any) -> dict[str, OutputTensor]:
        self.requests += 1
        self.wrong = self.wrong_at(self.requests)
        return super().infer(*args, **kwargs)


def confirming(settings: Settings, *, threshold: int = 3, confirm_s: float = 0.2) -> Settings:
    business = TierThresholds(failure_threshold=threshold, success_threshold=1)
    return dataclasses.replace(
        settings, sidecar=SidecarSettings(period_s=1.0, confirm_interval_s=confirm_s, business=business)
    )


def test_a_wrong_answer_is_confirmed_at_the_confirm_interval_not_the_period(settings: Settings) -> None:
    engine = ScriptedEngine()
    settings = confirming(settings)
    triton = CountingTriton(settings, lambda n: n >= 3)  # broken from the third request on
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    stop = clock.set_at(clock.now + 10)
    start = clock.now
    sidecar.run(stop)
    # Two good periods, a wrong answer at t=2, confirmed by two re-probes 0.2 s apart: rolled back at t=2.4.
    assert clock.waits[:4] == [1.0, 1.0, 0.2, 0.2]
    assert len(engine.created) == 1 and engine.requests[0].reason == "wrong-answer"
    assert sidecar.states["linear_scorer"].incident is not None
    assert sidecar.states["linear_scorer"].incident.detected_at == pytest.approx(start + 2.4)
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) == 2
    assert clock.waits[4:] == [0.6] + [1.0] * (len(clock.waits) - 5)  # back on the period once healing


@pytest.mark.parametrize(
    ("name", "wrong_at"),
    [("one-off", lambda n: n == 3), ("one in five", lambda n: n % 5 == 0), ("every other", lambda n: n % 2 == 0)],
)
def test_isolated_wrong_answers_are_re_probed_and_never_roll_back(
    settings: Settings, name: str, wrong_at: Callable[[int], bool]
) -> None:
    engine = ScriptedEngine()
    settings = confirming(settings, threshold=2)
    triton = CountingTriton(settings, wrong_at)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    sidecar.run(clock.set_at(clock.now + 30))
    assert engine.requests == [], name
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) >= 1
    assert sidecar.states["linear_scorer"].phase in {Phase.HEALTHY, Phase.SUSPECT}
    assert sidecar.ready()[0]


def test_confirmation_is_bounded_while_nothing_is_learnt(settings: Settings) -> None:
    # A wrong answer, then Triton stops answering liveness: the model stays suspect (an unknown verdict
    # moves nothing), and is re-probed at most failure_threshold times per period, not in a tight loop.
    settings = confirming(settings, threshold=3)
    triton = CountingTriton(settings, lambda n: True)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=ScriptedEngine, clock=clock)
    original = sidecar.cycle

    def cycle(only: Any = None) -> None:
        original(only)
        triton.live = False  # down after the first answer

    sidecar.cycle = cycle  # type: ignore[method-assign]
    sidecar.run(clock.set_at(clock.now + 5))
    assert sidecar.states["linear_scorer"].phase is Phase.SUSPECT
    assert clock.waits[:4] == [0.2, 0.2, 0.2, 0.4]  # three re-probes, then the rest of the period
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) == 3 * 5


def test_confirmation_off(settings: Settings) -> None:
    settings = confirming(settings, confirm_s=0)
    triton = CountingTriton(settings, lambda n: True)
    clock = FakeClock()
    engine = ScriptedEngine()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    sidecar.run(clock.set_at(clock.now + 5))
    assert set(clock.waits) == {1.0}
    assert sidecar.states["linear_scorer"].incident is not None
    assert sidecar.states["linear_scorer"].incident.detected_at == pytest.approx(1002.0)  # the third period


@pytest.mark.parametrize(("value", "error"), [(0.01, "between 0.05 and period_s"), (6, "between 0.05 and period_s")])
def test_a_confirm_interval_outside_the_period_is_refused(tmp_path: Path, value: float, error: str) -> None:
    from healer.settings import ConfigError, load_settings

    with pytest.raises(ConfigError, match=rf"sidecar\.confirm_interval_s: must be 0 \(off\) or {error}"):
        load_settings(write_config(tmp_path, {"period_s": 5, "confirm_interval_s": value}))
    assert load_settings(write_config(tmp_path, {"confirm_interval_s": 0})).sidecar.confirm_interval_s == 0
    assert SidecarSettings().confirm_interval_s == 0.2


def test_a_replica_still_wrong_after_the_run_succeeded_submits_the_next_run(settings: Settings) -> None:
    # The run healed the replicas it planned; this one loaded the broken version afterwards (a push
    # still rolling out) and joined the run before it ended. It must not wait out the healing timeout.
    business = TierThresholds(failure_threshold=2, success_threshold=1)
    settings = dataclasses.replace(settings, sidecar=SidecarSettings(period_s=1.0, business=business))
    engine = ScriptedEngine()
    sidecar, triton, clock = make(settings, engine)
    triton.wrong = True
    for _ in range(2):
        sidecar.cycle()
        clock.now += 1
    assert len(engine.created) == 1
    engine.phase = "Succeeded"
    for _ in range(2):  # the success is seen (that cycle's probe is older news), then a wrong answer
        sidecar.cycle()
        clock.now += 1
    assert len(engine.created) == 1 and sidecar.states["linear_scorer"].bad_streak == 1
    sidecar.cycle()  # a second wrong answer in a row: the same incident's next run
    assert len(set(engine.created)) == 2
    assert [r.incident for r in engine.requests[-1:]] == [engine.requests[0].incident + "-r2"]
    assert sidecar.states["linear_scorer"].phase is Phase.HEALING
    assert sidecar.status()["models"]["linear_scorer"]["workflow"] == engine.created[-1]


def test_a_slow_answer_waits_for_the_period_not_the_confirm_interval(settings: Settings) -> None:
    settings = confirming(settings)
    triton = CountingTriton(settings, lambda n: False)
    clock = FakeClock()
    engine = ScriptedEngine()
    sidecar = Sidecar(settings, triton, engine_factory=lambda: engine, clock=clock)
    original = triton.infer

    def slow_after_two(*args: Any, **kwargs: Any) -> dict[str, OutputTensor]:
        answer = original(*args, **kwargs)
        if triton.requests > 2:  # over the 100 ms SLO (measured on the real clock): correct but slow
            time.sleep(0.12)
            clock.now += 0.12
        return answer

    triton.infer = slow_after_two  # type: ignore[method-assign]
    sidecar.run(clock.set_at(clock.now + 6))
    assert sidecar.metrics.value("healer_probe_confirmations_total", {"model": "linear_scorer"}) == 0
    incident = sidecar.states["linear_scorer"].incident
    assert incident is not None and incident.reason == "slow"
    assert incident.detected_at - incident.first_bad_at == pytest.approx(2.0)  # three periods, as without confirmation


class ConfirmTriton(CountingTriton):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, lambda n: False)
        self.golden_by_model = {m.name: m.golden for m in settings.models}
        self.broken: set[str] = set()
        self.ready = True
        self.asked: list[str] = []

    def model_version_ready(self, model: str, version: str) -> bool:
        return self.ready or model not in self.broken

    def infer(
        self, model: str, version: str, inputs: Sequence[TensorSpec], output_names: Sequence[str], timeout_s: float
    ) -> dict[str, OutputTensor]:
        self.asked.append(model)
        outputs = {}
        for expected in self.golden_by_model[model].outputs:
            values = np.array(expected.tensor.values, copy=True)
            if model in self.broken:
                values = values + 100
            outputs[expected.tensor.name] = OutputTensor(expected.tensor.name, expected.tensor.datatype, values)
        return outputs


def test_a_confirmation_cycle_probes_only_the_suspect_model_and_keeps_the_others_results(
    example_settings: Settings,
) -> None:
    business = TierThresholds(failure_threshold=3, success_threshold=1)
    settings = dataclasses.replace(
        example_settings, sidecar=SidecarSettings(period_s=1.0, confirm_interval_s=0.2, business=business)
    )
    triton = ConfirmTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=ScriptedEngine, clock=clock)
    sidecar.cycle()
    other = next(m.name for m in settings.models if m.name != "linear_scorer")
    triton.broken, triton.asked = {"linear_scorer"}, []
    sidecar.cycle()  # a full cycle: the first wrong answer
    assert triton.asked == ["linear_scorer", other] and sidecar.cycles == 2
    kept = sidecar.status()["models"][other]["last"]
    triton.asked = []
    sidecar.cycle(only=frozenset({"linear_scorer"}))
    assert triton.asked == ["linear_scorer"]  # the other model is not probed again
    assert sidecar.cycles == 2  # confirmation cycles are not periods
    assert sidecar.status()["models"][other]["last"] == kept  # its last results are kept, not dropped
    assert sidecar.status()["models"]["linear_scorer"]["wrong_answers"] == 2
    assert sidecar.states["linear_scorer"].bad_streak == 2


def test_a_model_not_ready_during_confirmation_is_judged_by_the_next_full_cycle(settings: Settings) -> None:
    settings = confirming(settings)
    triton = ConfirmTriton(settings)
    clock = FakeClock()
    sidecar = Sidecar(settings, triton, engine_factory=ScriptedEngine, clock=clock)
    triton.broken = {"linear_scorer"}
    sidecar.cycle()
    triton.ready = False  # reloading
    for _ in range(3):
        sidecar.cycle(only=frozenset({"linear_scorer"}))
    state = sidecar.states["linear_scorer"]
    assert (state.phase, state.not_ready, sidecar.ready()[0]) == (Phase.SUSPECT, False, True)


def test_a_stalled_probe_loop_fails_the_sidecars_own_liveness(settings: Settings) -> None:
    """Review of issue 15, 2: /readyz answers from the last verdict, so a hung loop would freeze it
    forever; /healthz (the sidecar container's livenessProbe) fails instead, and the kubelet restarts it."""
    from healer.sidecar.views import healthz

    sidecar, _triton, clock = make(settings, ScriptedEngine())
    assert healthz(sidecar).code == 200  # starting: within the grace
    clock.now += sidecar.stall_after_s - 1
    assert healthz(sidecar).code == 200
    sidecar.cycle()
    assert healthz(sidecar).code == 200
    clock.now += sidecar.stall_after_s + 1
    answer = healthz(sidecar)
    assert answer.code == 503 and b"probe loop stalled: the last probe cycle" in answer.body
    sidecar.cycle()
    assert healthz(sidecar).code == 200


def test_a_long_peers_selector_gets_a_drain_set_name_that_keeps_sets_apart() -> None:
    long_a = DrainPeers(
        namespace="ml-serving", selector="app.kubernetes.io/name=triton-inference-server," + "x" * 80 + "a"
    )
    long_b = DrainPeers(
        namespace="ml-serving", selector="app.kubernetes.io/name=triton-inference-server," + "x" * 80 + "b"
    )
    a, b = DrainSettings(peers=long_a).drain_set, DrainSettings(peers=long_b).drain_set
    assert a != b and len(a) <= 100 and len(b) <= 100
    assert DrainSettings(peers=DrainPeers(namespace="ml", selector="app=triton")).drain_set == "ml.app_triton"  # kept


def test_healer_status_reads_the_sidecars_own_status_document(settings: Settings) -> None:
    """`healer status` (healer/edges/fleet.py) over what a real Sidecar's /status says, healthy then
    healing: the shape the two agree on is tested here, not only on the cluster."""
    from healer.edges.fleet import FleetPod, fleet_view

    primary = ScriptedEngine()
    sidecar, triton, clock = make(settings, primary)
    sidecar.cycle()
    pod = FleetPod("ml", "t-0", "Running", True, sidecar_port=8088)
    [row] = fleet_view([pod], {"ml/t-0": sidecar.status()}, []).rows
    assert (row.model, row.state, row.problem) == ("linear_scorer", "healthy", "")
    assert "business pass" in row.tiers and row.serving.startswith("v")
    triton.wrong = True
    clock.now += 1
    sidecar.cycle()
    workflows = [{"metadata": {"name": primary.created[0]}, "status": {"phase": "Running"}}]
    [row] = fleet_view([pod], {"ml/t-0": sidecar.status()}, workflows).rows
    assert row.state == "HEALING" and row.rollback == f"{primary.created[0]} Running"
    assert "business FAIL" in row.tiers and row.problem
