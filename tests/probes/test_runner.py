"""probe_all's order of work on an in-memory Triton: a fast answer is handed over while a hung model is
still timing out, hung models start beside the others while they are fewer than the workers, and a
slow answer among others is asked again alone."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from healer.core.results import ProbeResult, Status, Tier
from healer.edges.triton import OutputTensor, TritonTimeout, TritonUnavailable
from healer.settings import Settings
from probes.runner import ONE_SHOT_BEST_OF, probe_all


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
    # The hung models give up after 1.5 s: "fast" must be handed over before that even on a machine at
    # load 7, where a 0.3 s give-up once lost the race (an answer from memory takes microseconds).
    settings = settings_with(example_settings, names, timeout_s=1.5)
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


class ScriptedAnswers(InMemoryTriton):
    """Answers golden requests as scripted, one word per request (the last one repeats): ``fast`` right
    at once, ``slow`` right but over the SLO, ``wrong`` negated, ``down`` no answer (refused)."""

    def __init__(self, golden: Any, script: list[str]) -> None:
        super().__init__(golden, hang=set())
        self.script = script

    def infer(self, model: str, version: str, inputs: Any, names: Any, timeout_s: float) -> dict[str, OutputTensor]:
        word = self.script[min(len(self.started), len(self.script) - 1)]
        self.started.append(model)
        if word == "down":
            raise TritonUnavailable("connection refused")
        if word == "slow":
            time.sleep(self.golden.latency_slo_ms / 1000 * 1.5)
        sign = -1 if word == "wrong" else 1
        return {
            o.tensor.name: OutputTensor(o.tensor.name, o.tensor.datatype, sign * o.tensor.values)
            for o in self.golden.outputs
        }


def one_shot(example_settings: Settings, script: list[str], best_of: int = ONE_SHOT_BEST_OF) -> tuple[ProbeResult, int]:
    # SLO 200 ms: a scripted fast answer is an in-memory copy, far under it however busy the machine;
    # a slow one sleeps 300 ms, over it by construction.
    settings = settings_with(example_settings, ["m"], timeout_s=2.0)
    model = settings.models[0]
    settings = dataclasses.replace(
        settings, models=(dataclasses.replace(model, golden=dataclasses.replace(model.golden, latency_slo_ms=200)),)
    )
    triton = ScriptedAnswers(settings.models[0].golden, script)
    [business] = [r for r in probe_all(settings, triton, best_of=best_of) if r.tier is Tier.BUSINESS]
    return business, len(triton.started)


def test_the_one_shot_probe_passes_a_slow_answer_followed_by_a_quick_one(example_settings: Settings) -> None:
    business, asked = one_shot(example_settings, ["slow", "slow", "fast"])
    assert business.status is Status.PASS and asked == 3, business
    assert len(business.details["slow_answers_ms"]) == 2


def test_the_one_shot_probe_fails_three_slow_answers_on_the_fastest(example_settings: Settings) -> None:
    business, asked = one_shot(example_settings, ["slow"])
    assert (business.status, business.code, asked) == (Status.FAIL, "slow", 3), business
    assert "(the best of 3 answers: " in business.reason


def test_a_wrong_answer_after_slow_ones_counts_as_wrong_and_is_not_asked_again(example_settings: Settings) -> None:
    business, asked = one_shot(example_settings, ["slow", "wrong", "fast"])
    assert (business.status, business.code, asked) == (Status.FAIL, "wrong-answer", 2), business
    business, asked = one_shot(example_settings, ["wrong", "fast"])
    assert (business.status, business.code, asked) == (Status.FAIL, "wrong-answer", 1), business


def test_no_answer_after_a_slow_one_leaves_the_slow_answer_standing(example_settings: Settings) -> None:
    business, asked = one_shot(example_settings, ["slow", "down", "fast"])
    assert (business.status, business.code, asked) == (Status.FAIL, "slow", 2), business


def test_the_sidecar_asks_once_as_before(example_settings: Settings) -> None:
    business, asked = one_shot(example_settings, ["slow", "fast"], best_of=1)
    assert (business.status, business.code, asked) == (Status.FAIL, "slow", 1), business
    assert "best of" not in business.reason and "slow_answers_ms" not in business.details
