"""The fails-one-in-ten drill's side (I/O): real traffic of single-row requests, the sidecars judging it
from Triton's metrics, and whether a rollback was decided on them.

The drills' usual clients (workflows/steps/drill_observe.py Traffic) send the golden request and judge
its answer. A fault that depends on the input is not met that way, so this client sends one row of each
golden input, to the default version, round robin over the replicas, and counts only whether Triton
answered with an error. The sidecars judge the same traffic from Triton's metrics (docs/traffic-signal.md).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import structlog

from healer.core.drill_catalog import Scenario
from healer.core.drill_verdict import Observation
from healer.edges.triton_rest import TritonRest
from healer.edges.triton_types import TritonError, TritonUnavailable
from healer.settings import ModelSettings, Settings, TensorSpec, TrafficSettings
from workflows.steps.drill_inject import DrillTarget
from workflows.steps.drill_observe import Traffic

log = structlog.get_logger("healer.drills")

# The drill's limits: a short window, so that the two windows of a confirmation fit in a drill's seconds.
DRILL_WINDOW_S = 2.0
REAL_TRAFFIC = "real traffic: "  # how the sidecar's traffic verdict begins its detail (healer/sidecar/traffic.py)

# Each embedded Triton's metrics endpoint by its host:port, as the drill stack starts them
# (healer/drills/stack.py); a Triton not started here (a cluster's) reads the default, port 8002.
METRICS_URLS: dict[str, str] = {}


def with_traffic_signal(settings: Settings, url: str) -> Settings:
    """One sidecar's settings judging real traffic on its replica ``url`` (docs/traffic-signal.md)."""
    traffic = TrafficSettings(
        enabled=True,
        metrics_url=METRICS_URLS.get(url),
        window_s=DRILL_WINDOW_S,
        min_requests=20,
        max_failure_ratio=0.05,
    )
    return dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, traffic=traffic))


def detected_by(engine: Any, workflows: Sequence[str]) -> str:
    """ "metrics" when a rollback's detail says real traffic decided it, "golden" when one exists that does
    not, "" when there was none (or its record cannot be read)."""
    found = ""
    for name in workflows:
        try:
            record = engine.get(name)
        except Exception as exc:  # an engine without records (Argo's): not known here
            log.info("drill_record_unread", workflow=name, error=str(exc))
            continue
        detail = str(
            ((record.get("metadata") or {}).get("annotations") or {}).get("workflows.argoproj.io/description", "")
        )
        if detail.startswith(REAL_TRAFFIC):
            return "metrics"
        found = "golden"
    return found


def single_row(inputs: Sequence[TensorSpec]) -> tuple[TensorSpec, ...]:
    """The first row of each batched input (shape [n, ...] -> [1, ...])."""
    rows = []
    for tensor in inputs:
        values = tensor.values[:1]
        rows.append(TensorSpec(name=tensor.name, datatype=tensor.datatype, shape=(1, *tensor.shape[1:]), values=values))
    return tuple(rows)


class SingleRowClients:
    """Requests of one row to the default version every ``interval_s``; ``requests`` answered or failed,
    ``wrong`` of them failed (an unreachable replica is not counted either way)."""

    def __init__(self, urls: Sequence[str], model: ModelSettings, interval_s: float = 0.02) -> None:
        self.urls, self.model, self.interval_s = list(urls), model, interval_s
        self.inputs = single_row(model.golden.inputs)
        self.outputs = [o.tensor.name for o in model.golden.outputs]
        self.requests = self.wrong = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-single-rows", daemon=True)

    def start(self) -> SingleRowClients:
        self._thread.start()
        return self

    def _run(self) -> None:
        clients = [TritonRest(url, timeout_s=2.0) for url in self.urls]
        i = 0
        while not self._stop.wait(self.interval_s):
            triton = clients[i % len(clients)]
            i += 1
            try:
                triton.infer(self.model.name, "", self.inputs, self.outputs, 2.0)
            except TritonUnavailable:
                continue
            except TritonError:
                self.wrong += 1
            self.requests += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10.0)


def clients_for(scenario: Scenario, replicas: Sequence[str], target: DrillTarget) -> Traffic | SingleRowClients | None:
    """The scenario's clients, started: the golden request judged (``traffic``), single rows counted
    (``traffic_signal``), or none."""
    if scenario.traffic:
        return Traffic(replicas, target.model_settings, suite_of=target.suite).start()
    if scenario.traffic_signal:
        return SingleRowClients(replicas, target.model_settings).start()
    return None


def with_detected_by(scenario: Scenario, observation: Observation, engine: Any) -> Observation:
    """The observation with which signal decided its rollback, when the scenario expects one."""
    if not scenario.expect.detected_by or engine is None:
        return observation
    return dataclasses.replace(observation, detected_by=detected_by(engine, observation.workflows))
