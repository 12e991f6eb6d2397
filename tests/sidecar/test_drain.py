"""healer/sidecar/drain.py: draining never empties the Service (the drain set in a real filesystem store,
a fleet of sidecars on fake time), and the settings of the drain and of stopping."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

from healer.core.decisions import Peer
from healer.core.state import Phase
from healer.settings import DrainPeers, DrainSettings, Settings, SidecarSettings
from healer.sidecar import Sidecar
from tests.sidecar.conftest import break_all, make, write_config
from tests.support.sidecar_fleet import (
    Board,
    FakeClock,
    ScriptedEngine,
    ScriptedTriton,
    cycle_all,
    fleet,
)

# --- draining never empties the Service: the drain set in a real (filesystem) store, fake time -----------


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


def one_drained_one_held(
    settings: Settings, tmp_path: Path
) -> tuple[Board, list[tuple[Sidecar, ScriptedTriton]], FakeClock, str, str]:
    """Two pods, the model broken on both, settled: one drained, the other held back serving."""
    board, members, clock = fleet(settings, tmp_path, 2)
    cycle_all(members, clock, board)
    break_all(members)
    for _ in range(2):
        cycle_all(members, clock, board)
    [drained] = board.drained()
    [held] = board.ready_pods()
    return board, members, clock, drained, held


def test_a_blip_on_the_held_pod_brings_the_drained_pod_back(settings: Settings, tmp_path: Path) -> None:
    board, members, clock, drained, held = one_drained_one_held(settings, tmp_path)
    board.not_ready = {held}  # one failed readinessProbe on the pod that serves
    clock.now += 1
    board.sidecars[drained].cycle()
    assert drained in board.ready_pods() and board.drained() == {}  # serves again
    board.not_ready = set()
    for _ in range(2):
        cycle_all(members, clock, board)
    assert len(board.ready_pods()) == 1 and len(board.drained()) == 1  # one drains again, one serves


def test_when_the_serving_pod_is_deleted_the_drained_pod_serves_again(settings: Settings, tmp_path: Path) -> None:
    board, members, clock, drained, held = one_drained_one_held(settings, tmp_path)
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


# --- the settings of the drain and of stopping ------------------------------------------------------------


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
