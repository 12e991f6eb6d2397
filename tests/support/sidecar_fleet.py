"""Sidecars without a Triton or an engine: a scripted Triton and scripted engines, fake time, and a
fleet of sidecars sharing one drain set in a real (filesystem) store, with the replica set as the
Kubernetes API would show it. For the sidecar's unit tests and the metrics its exposition lists."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from healer.core.decisions import Peer
from healer.edges.store import FilesystemBlobs, ModelStore, StoreUnavailable
from healer.edges.triton import IndexEntry, OutputTensor, TritonTimeout
from healer.engines import EngineNotFound
from healer.settings import DrainPeers, DrainSettings, Settings, TensorSpec
from healer.sidecar import PeersUnavailable, Sidecar
from healer.vocabulary import RollbackRequest, RunStatus, Submission, workflow_name


def golden_metadata(golden: Any) -> dict[str, Any]:
    """A version's metadata as Triton gives it (GET /v2/models/{m}/versions/{v}) for a model the golden
    request fits: its inputs and expected outputs, with their datatypes and shapes."""
    tensors = {"inputs": list(golden.inputs), "outputs": [o.tensor for o in golden.outputs]}
    return {
        side: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in specs]
        for side, specs in tensors.items()
    }


class ScriptedTriton:
    """Answers like Triton would for one model serving one version; ``wrong`` flips the answer."""

    url = "127.0.0.1:1"

    def __init__(self, settings: Settings) -> None:
        self.golden = settings.models[0].golden
        self.model_goldens = {m.name: m.golden for m in settings.models}  # each model's, for its metadata
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
        return {"name": model, "backend": "python"}  # a plain model's whole config (Triton always names both)

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        return golden_metadata(self.model_goldens.get(model, self.golden))

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
            raise EngineNotFound(f"no workflow {name}")
        return RunStatus(name, self.phase)

    def wait(self, name: str, timeout_s: float) -> RunStatus:
        return self.status(name)


class FakeClock:
    """The sidecar's clock (healer/sidecar/clock.py ``Clock``) on fake time, kopf-style: it moves only
    when the code under test waits on it, or when the test moves it (``now += seconds``). A wait
    returns at once: the time moved to when its event gets set (``set_at``), else by the whole timeout.
    ``waits``: every wait's timeout, in order. The wall clock reads the same seconds."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.waits: list[float] = []
        self._alarms: list[tuple[float, threading.Event]] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def set_at(self, when: float, event: threading.Event | None = None) -> threading.Event:
        """``event`` (a new one if None), set once this clock reaches ``when``: e.g. the loop's stop."""
        alarm = event if event is not None else threading.Event()
        self._alarms.append((when, alarm))
        return alarm

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        assert timeout_s >= 0
        self.waits.append(round(timeout_s, 6))
        if event.is_set():
            return True
        until = self.now + timeout_s
        for when, alarm in sorted(self._alarms, key=lambda a: a[0]):
            if when <= until and not alarm.is_set():
                self.now = max(self.now, when)
                alarm.set()
                if alarm is event:
                    return True
        self.now = until
        return event.is_set()


class Board:
    """The replica set as the Kubernetes API would show it: each pod's Ready condition as the kubelet
    would set it from the pod's /readyz, and whether it is terminating. ``begin_round`` freezes that
    view and the drain set's listing, so that every sidecar of the round decides on what it read
    before any of them wrote: each reads, then each writes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sidecars: dict[str, Sidecar] = {}
        self.engines: dict[str, ScriptedEngine] = {}
        self.down = False  # the peers cannot be read (the Kubernetes API is down)
        self.store_down = False
        self.terminating: set[str] = set()
        self.not_ready: set[str] = set()  # a readiness blip, as the kubelet reports it
        self.hidden: set[str] = set()  # not in the list (deleted, or a selector that misses them)
        self._frozen: list[Peer] | None = None
        self.frozen_keys: list[str] | None = None
        self.read_this_round: set[str] = set()

    def ready_pods(self) -> set[str]:
        return {name for name, sidecar in self.sidecars.items() if sidecar.ready()[0] and name not in self.not_ready}

    def live(self) -> list[Peer]:
        return [
            Peer(name, name in self.ready_pods(), name in self.terminating)
            for name in self.sidecars
            if name not in self.hidden
        ]

    def peers(self) -> list[Peer]:
        if self.down:
            raise PeersUnavailable("API down")
        return list(self._frozen) if self._frozen is not None else self.live()

    def begin_round(self) -> None:
        self._frozen = self.live()
        self.frozen_keys = FilesystemBlobs(self.root).keys(".healer/drain/ml")
        self.read_this_round = set()

    def end_round(self) -> None:
        self._frozen = self.frozen_keys = None

    def drained(self) -> dict[str, float]:
        return dict(ModelStore(FilesystemBlobs(self.root)).drain_set("ml").drained)


class BoardPeers:
    lists_me = True
    timeout_s = 1.0

    def __init__(self, board: Board, me: str) -> None:
        self.board = board
        self.me = me

    def peers(self) -> list[Peer]:
        return self.board.peers()


class RoundBlobs(FilesystemBlobs):
    """One sidecar's view of the shared store: its first listing of the drain set in a round is the
    one taken when the round began (it read before anybody wrote); a retry after a lost race lists
    afresh. ``board.store_down`` makes every call fail as an unreachable store would."""

    def __init__(self, board: Board, me: str) -> None:
        super().__init__(board.root)
        self.board = board
        self.me = me

    def keys(self, prefix: str) -> list[str]:
        if self.board.store_down:
            raise StoreUnavailable("store down")
        if self.board.frozen_keys is not None and self.me not in self.board.read_this_round:
            self.board.read_this_round.add(self.me)
            return [k for k in self.board.frozen_keys if k.startswith(prefix + "/")]
        return super().keys(prefix)

    def create(self, key: str, data: bytes) -> bool:
        if self.board.store_down:
            raise StoreUnavailable("store down")
        return super().create(key, data)


def fleet(
    settings: Settings, tmp_path: Path, n: int, *, min_ready: int = 1, stale: dict[str, float] | None = None
) -> tuple[Board, list[tuple[Sidecar, ScriptedTriton]], FakeClock]:
    drain = DrainSettings(
        min_ready=min_ready,
        peers=DrainPeers("ml", "app=triton"),
        keep_decision_s=10.0,
        set_name="ml",
        store_timeout_s=5.0,
    )
    settings = dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, drain=drain))
    root = tmp_path / "store"
    root.mkdir(parents=True, exist_ok=True)
    if stale:  # a drain set left behind by an earlier run of these pods
        ModelStore(FilesystemBlobs(root)).update_drain_set("ml", lambda d: {**d, **stale})
    board, clock, members = Board(root), FakeClock(), []
    for i in range(n):
        name = f"triton-{i}"
        triton = ScriptedTriton(settings)
        engine = ScriptedEngine()
        store = ModelStore(RoundBlobs(board, name))
        sidecar = Sidecar(
            settings,
            triton,
            engine_factory=lambda engine=engine: engine,  # type: ignore[misc]
            pod=f"ml/{name}",
            clock=clock,
            peers=BoardPeers(board, name),
            drain_store=lambda store=store: store,  # type: ignore[misc]
        )
        board.sidecars[name] = sidecar
        board.engines[name] = engine
        members.append((sidecar, triton))
    return board, members, clock


def assert_serving_enough(board: Board, min_ready: int) -> None:
    # Pods that can serve: probed at least once, Triton live, not terminating, no readiness blip.
    can_serve = [
        n
        for n, s in board.sidecars.items()
        if s.cycles and s.triton_live and n not in board.terminating and n not in board.not_ready
    ]
    assert len(board.ready_pods()) >= min(min_ready, len(can_serve)), (board.ready_pods(), board.drained())


def cycle_all(
    members: list[tuple[Sidecar, ScriptedTriton]],
    clock: FakeClock,
    board: Board,
    *,
    min_ready: int = 1,
    interleave: bool = True,
    order: Sequence[int] | None = None,
) -> set[str]:
    """One period of every sidecar; with ``interleave``, every one decides on what it read before any wrote."""
    clock.now += 1
    if interleave:
        board.begin_round()
    try:
        for i in order if order is not None else range(len(members)):
            members[i][0].cycle()
            assert_serving_enough(board, min_ready)  # after every single step
    finally:
        board.end_round()
    return board.ready_pods()
