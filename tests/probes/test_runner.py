"""probe_all's order of work on an in-memory Triton: a fast answer is handed over while a hung model is
still timing out, hung models start beside the others while they are fewer than the workers, and a
slow answer among others is asked again alone."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from healer.settings import Settings
from healer.triton import OutputTensor, TritonTimeout
from probes.result import ProbeResult, Tier
from probes.runner import probe_all


class InMemoryTriton:
    thread_safe = True
    url = "memory:1"

    def __init__(self, golden: Any, *, hang: set[str], slow_once: set[str] = frozenset()) -> None:
        self.golden, self.hang, self.slow_once = golden, hang, set(slow_once)
        self.started: list[str] = []
        self.lock = threading.Lock()

    def server_live(self) -> bool:
        return True

    def served_versions(self, model: str) -> list[str]:
        return ["1"]

    def model_version_ready(self, model: str, version: str) -> bool:
        return True

    def infer(self, model: str, version: str, inputs: Any, names: Any, timeout_s: float) -> dict[str, OutputTensor]:
        with self.lock:
            self.started.append(model)
            slow = model in self.slow_once
            self.slow_once.discard(model)
        if model in self.hang:
            time.sleep(timeout_s)
            raise TritonTimeout("no answer")
        if slow:
            time.sleep(self.golden.latency_slo_ms / 1000 * 2)
        return {
            o.tensor.name: OutputTensor(o.tensor.name, o.tensor.datatype, o.tensor.values) for o in self.golden.outputs
        }


def settings_with(example_settings: Settings, names: list[str], timeout_s: float = 0.3) -> Settings:
    base = example_settings.model("linear_scorer")
    golden = dataclasses.replace(base.golden, timeout_s=timeout_s)
    return dataclasses.replace(
        example_settings, models=tuple(dataclasses.replace(base, name=n, golden=golden, version="1") for n in names)
    )


def test_a_fast_answer_is_handed_over_before_a_hung_model_gives_up(example_settings: Settings) -> None:
    names = ["hung_a", "hung_b", "fast"]
    settings = settings_with(example_settings, names)
    triton = InMemoryTriton(settings.models[0].golden, hang={"hung_a", "hung_b"})
    handed: list[tuple[str, float]] = []
    started = time.monotonic()
    results = probe_all(
        settings,
        triton,
        concurrency=8,
        last=["hung_a", "hung_b"],
        on_model=lambda name, rows: handed.append((name, time.monotonic() - started)),
    )
    # Handed over first, though configured last: not held until the hung models gave up.
    assert next(name for name, _ in handed) == "fast"
    assert triton.started[:2] == ["hung_a", "hung_b"]  # fewer than the workers: started first, beside the rest
    assert [r.model for r in results if r.tier is Tier.BUSINESS] == names  # configured order all the same


def test_hung_models_start_last_when_they_would_take_every_worker(example_settings: Settings) -> None:
    names = ["hung_a", "hung_b", "fast"]
    settings = settings_with(example_settings, names)
    triton = InMemoryTriton(settings.models[0].golden, hang={"hung_a", "hung_b"})
    probe_all(settings, triton, concurrency=2, last=["hung_a", "hung_b"])
    assert triton.started[0] == "fast"


def test_a_slow_answer_among_others_is_asked_again_alone(example_settings: Settings) -> None:
    settings = settings_with(example_settings, ["a", "b"], timeout_s=2.0)
    triton = InMemoryTriton(settings.models[0].golden, hang=set(), slow_once={"a"})
    results: list[ProbeResult] = probe_all(settings, triton, concurrency=4)
    business = {r.model: r for r in results if r.tier is Tier.BUSINESS}
    assert business["a"].passed, business["a"]  # slow once beside "b", right and quick alone
    assert triton.started.count("a") == 2
