"""healer/core/observe.py: the modes and the plan of an observed model's incident, as tables."""

from __future__ import annotations

import dataclasses

import pytest

from healer.core.decisions import Peer
from healer.core.observe import (
    PLAN_PREFIX,
    Asked,
    Decision,
    DrainView,
    Replicas,
    acted_on,
    drain_by_rule,
    drains_for,
    exported_state,
    held,
    held_plan,
    kept_submission,
    mode_changes,
    mode_of,
    modes,
    observed_models,
    plan_name,
    plan_of,
    planned_waves,
    serving_here,
    state_after_switch,
)
from healer.core.state import Incident, ModelState, Phase, Policy, Probed, Tick, Verdict, transition
from healer.settings import Settings, SidecarSettings

INCIDENT = Incident(
    key="inc-0123456789abcdef",
    model="linear_scorer",
    version="3",
    reason="wrong-answer",
    detail="y: expected [1.0], got [101.0]",
    first_bad_at=10.0,
    detected_at=10.4,
)
DRAINS = DrainView(True, "would drain: sidecar.drain unset")
THREE = Replicas(names=("triton-0", "triton-1", "triton-2"), skipped=("triton-3: terminating",))


@pytest.mark.parametrize(
    ("model_mode", "sidecar_mode", "expected"),
    [
        (None, "act", "act"),
        (None, "observe", "observe"),
        ("observe", "act", "observe"),
        ("act", "observe", "act"),
    ],
)
def test_a_models_own_mode_overrides_the_sidecars(
    example_settings: Settings, model_mode: str | None, sidecar_mode: str, expected: str
) -> None:
    model = dataclasses.replace(example_settings.models[0], mode=model_mode)
    settings = dataclasses.replace(
        example_settings, models=(model, *example_settings.models[1:]), sidecar=SidecarSettings(mode=sidecar_mode)
    )
    assert mode_of(model, sidecar_mode) == expected
    assert (model.name in observed_models(settings)) is (expected == "observe")
    assert modes(settings)[model.name] == expected


def test_the_default_is_act_for_every_model(example_settings: Settings) -> None:
    assert observed_models(example_settings) == frozenset()
    assert set(modes(example_settings).values()) == {"act"}


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ({"a": "observe"}, {"a": "observe"}, {}),
        ({"a": "observe", "b": "act"}, {"a": "act", "b": "act"}, {"a": ("observe", "act")}),
        ({"a": "act"}, {"a": "observe", "new": "observe"}, {"a": ("act", "observe")}),  # a new model: restart
        ({"a": "act", "gone": "act"}, {"a": "act"}, {}),
    ],
)
def test_mode_changes(before: dict[str, str], after: dict[str, str], changed: dict[str, tuple[str, str]]) -> None:
    assert mode_changes(before, after) == changed


@pytest.mark.parametrize(
    ("names", "parallelism", "ceiling", "one", "waves"),
    [
        ((), 50, 200, False, ()),
        (("a",), 50, 200, False, (("a",),)),
        (("a", "b", "c", "d", "e", "f", "g", "h"), 2, 200, False, (("a",), ("b", "c"), ("d", "e", "f", "g"), ("h",))),
        (("a", "b", "c", "d", "e", "f"), 2, 3, False, (("a",), ("b", "c"), ("d", "e", "f"))),
        (("a", "b", "c"), 50, 200, True, (("a",), ("b",), ("c",))),  # unload-first: one at a time
        (("a", "b", "c"), 0, 0, False, (("a",), ("b",), ("c",))),  # nonsense bounds: at least one a wave
    ],
)
def test_planned_waves_canary_then_doubling(
    names: tuple[str, ...], parallelism: int, ceiling: int, one: bool, waves: tuple[tuple[str, ...], ...]
) -> None:
    assert planned_waves(names, parallelism=parallelism, max_parallelism=ceiling, one_at_a_time=one) == waves


def plan(**changes: object) -> object:
    arguments: dict[str, object] = {
        "escalation": None,
        "restore": "2",
        "restore_why": "v2: newest stable, not quarantined",
        "drain": DRAINS,
        "replicas": THREE,
        "parallelism": 2,
        "max_parallelism": 200,
        "one_at_a_time": False,
        **changes,
    }
    return plan_of(INCIDENT, **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "decision", "restore", "escalate", "waves", "words"),
    [
        (
            {},
            Decision.ROLLBACK,
            "2",
            False,
            (("triton-0",), ("triton-1", "triton-2")),
            "would roll back linear_scorer v3 to v2",
        ),
        (
            {"escalation": "circuit breaker open: 3 rollbacks"},
            Decision.ESCALATE,
            "2",
            True,
            (),
            "would escalate linear_scorer v3: circuit breaker open",
        ),
        (
            {"restore": None, "restore_why": "no version of this model was ever promoted stable"},
            Decision.ESCALATE,
            "",
            True,
            (),
            "would fail at fetch-stable and escalate: no version of this model was ever promoted stable",
        ),
        (
            {"restore": None, "restore_why": "the ledger could not be read: timeout", "restore_read": False},
            Decision.ROLLBACK,
            "",
            False,
            (("triton-0",), ("triton-1", "triton-2")),
            "would roll back linear_scorer v3 to its stable version",
        ),
        (
            {"replicas": Replicas()},
            Decision.ESCALATE,
            "2",
            True,
            (),
            "no replica to heal",
        ),
        (
            {"replicas": Replicas(error="the Kubernetes API did not answer")},
            Decision.ROLLBACK,
            "2",
            False,
            (),
            "could not be listed",
        ),
    ],
)
def test_the_plan_of_an_incident(
    changes: dict[str, object],
    decision: Decision,
    restore: str,
    escalate: bool,
    waves: tuple[tuple[str, ...], ...],
    words: str,
) -> None:
    made = plan(**changes)
    assert made.decision is decision  # type: ignore[attr-defined]
    assert made.restore == restore  # type: ignore[attr-defined]
    assert made.escalate is escalate  # type: ignore[attr-defined]
    assert made.waves == waves  # type: ignore[attr-defined]
    assert words in made.summary + " " + made.why  # type: ignore[attr-defined]
    assert made.summary.endswith("nothing done")  # type: ignore[attr-defined]
    document = made.to_dict()  # type: ignore[attr-defined]
    assert document["done"] == "nothing: observe mode" and document["decision"] == decision.value


def test_a_pipelines_plan_names_the_member_it_blames() -> None:
    made = plan(blamed=("scoring_pipeline_mid", "4"))
    assert made.blamed == "scoring_pipeline_mid v4"  # type: ignore[attr-defined]
    assert "would roll back scoring_pipeline_mid v4 to v2" in made.summary  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("drain", "words"),
    [
        (DrainView(True, "would be drained: 2 other pod(s) serving"), "; would drain;"),
        (DrainView(False, "would be held back: 0 other pod(s) serving, min_ready 1"), "; would not drain;"),
        (DrainView(None, "the peers or the drain set could not be read"), "; drain unknown;"),
    ],
)
def test_the_summary_says_the_drain_decision(drain: DrainView, words: str) -> None:
    assert words in plan(drain=drain).summary  # type: ignore[attr-defined]


def test_a_plan_is_named_once_per_model_and_incident_and_never_like_a_run() -> None:
    name = plan_name("linear_scorer", INCIDENT.key)
    assert name == plan_name("linear_scorer", INCIDENT.key)
    assert name != plan_name("linear_scorer", "inc-other")
    assert name != plan_name("tiny_classifier", INCIDENT.key)
    assert name.startswith(f"{PLAN_PREFIX}-linear-scorer-") and not name.startswith("healer-rollback")
    assert plan_name("Weird/Name", "x").startswith("healer-plan-weird-name-")


POLICY = Policy(failure_threshold=3, success_threshold=2, rollback_timeout_s=150.0)


def detected() -> ModelState:
    """A model whose third wrong answer asked for a rollback (the state machine's own steps)."""
    state = ModelState(model="linear_scorer")
    for at in (10.0, 10.2, 10.4):
        state, actions = transition(state, Probed(at, Verdict.WRONG, version="3", content="c"), POLICY)
    assert state.phase is Phase.HEALING and actions
    return state


def test_a_held_plan_is_planned_once_and_never_times_out() -> None:
    state = held(detected(), plan())  # type: ignore[arg-type]
    assert state.phase is Phase.ESCALATED and state.healing_since is None
    assert state.last_reason.startswith("observe: would roll back")
    # More wrong answers: no new action (the same incident is not planned again).
    after, actions = transition(state, Probed(20.0, Verdict.WRONG, version="3", content="c"), POLICY)
    assert actions == [] and after.phase is Phase.ESCALATED
    # Time passes far beyond the rollback timeout: no escalation (nothing was submitted).
    after, actions = transition(after, Tick(10_000.0), POLICY)
    assert actions == [] and after.phase is Phase.ESCALATED


def test_a_held_plan_ends_when_the_model_answers_right_again() -> None:
    state = held(detected(), plan())  # type: ignore[arg-type]
    state, actions = transition(state, Probed(30.0, Verdict.GOOD, version="4"), POLICY)
    assert actions == []
    state, actions = transition(state, Probed(31.0, Verdict.GOOD, version="4"), POLICY)
    assert state.phase is Phase.HEALTHY and [type(a).__name__ for a in actions] == ["Restored"]


@pytest.mark.parametrize(
    ("state", "to", "reset"),
    [
        ("held", "act", True),  # observing -> act: detection starts over, so the broken version is healed
        ("held", "observe", False),
        ("healthy", "act", False),
        ("run", "act", False),  # escalated after a real run: a person's, as before
        ("breaker", "act", False),  # escalated by the breaker while acting: no plan, a person's
        # decided while acting, maybe taken by an engine: kept (asked about, never submitted again)
        ("pending", "observe", False),
        ("running", "observe", False),  # a rollback running: watched to its end
    ],
)
def test_switching_mode(state: str, to: str, reset: bool) -> None:
    states = {
        "held": held(detected(), plan()),  # type: ignore[arg-type]
        "healthy": ModelState(model="linear_scorer"),
        "pending": detected(),
        "running": dataclasses.replace(
            detected(), incident=dataclasses.replace(INCIDENT, workflow="healer-rollback-linear-scorer-1")
        ),
        "run": dataclasses.replace(
            detected(),
            phase=Phase.ESCALATED,
            incident=dataclasses.replace(INCIDENT, workflow="healer-rollback-linear-scorer-1"),
        ),
        "breaker": dataclasses.replace(detected(), phase=Phase.ESCALATED, breaker_open=True),
    }
    before = states[state]
    after = state_after_switch(before, to=to, planned=PLANNED_KEY if state == "held" else None)
    if reset:
        assert after.phase is Phase.HEALTHY and after.incident is None and after.bad_streak == 0
        assert after.rollbacks == before.rollbacks  # the breaker's history is kept
    else:
        assert after == before


PLANNED_KEY = detected().incident.key  # type: ignore[union-attr]
RUNNING = dataclasses.replace(detected(), incident=dataclasses.replace(INCIDENT, workflow="healer-rollback-ls-1"))


@pytest.mark.parametrize(
    ("name", "state", "planned", "observed", "exported", "serving", "drains"),
    [
        ("healthy", ModelState(model="linear_scorer"), None, True, "healthy", True, False),
        ("healthy, acting", ModelState(model="linear_scorer"), None, False, "healthy", True, True),
        # an observed model's plan held: planned, not escalated; it is served, and never drains the pod
        ("plan held", "held", PLANNED_KEY, True, "planned", True, False),
        ("plan held, not ready", "held-not-ready", PLANNED_KEY, True, "planned", False, False),
        # an acting pipeline's plan for its observed member: planned; the pipeline acts, so its pod drains
        ("acting, plan held", "held", PLANNED_KEY, False, "planned", False, True),
        # the same state without a plan held for it (a real escalation): escalated, drains
        ("escalated", "held", None, True, "escalated", False, True),
        ("escalated, another plan", "held", "inc-other", True, "escalated", False, True),
        # a rollback healing it, submitted before the switch to observe: drained until it ends
        ("observed, healing", RUNNING, None, True, "healing", False, True),
        ("observed, decided", "detected", None, True, "healing", False, True),
        ("observed, escalated run", "escalated-run", None, True, "escalated", False, True),
        ("acting, healing", RUNNING, None, False, "healing", False, True),
    ],
)
def test_what_the_metrics_and_the_drain_say_of_a_state(
    name: str, state: object, planned: str | None, observed: bool, exported: str, serving: bool, drains: bool
) -> None:
    states = {
        "held": held(detected(), plan()),  # type: ignore[arg-type]
        "held-not-ready": dataclasses.replace(held(detected(), plan()), not_ready=True),  # type: ignore[arg-type]
        "detected": detected(),
        "escalated-run": dataclasses.replace(RUNNING, phase=Phase.ESCALATED),
    }
    model = states[state] if isinstance(state, str) else state
    assert isinstance(model, ModelState)
    assert exported_state(model, planned) == exported, name
    assert serving_here(model, observed=observed, planned=planned) is serving, name
    assert drains_for(model, observed=observed, planned=planned) is drains, name
    assert held_plan(model, planned) is (exported == "planned"), name
    assert acted_on(model, planned) is (exported in {"healing", "escalated"}), name


@pytest.mark.parametrize(
    ("answers", "answer", "engine", "workflow"),
    [
        ({}, Asked.ABSENT, "", ""),  # no engine even built: nothing was sent
        ({"primary": (Asked.ABSENT, "primary: no run w")}, Asked.ABSENT, "", ""),
        ({"primary": (Asked.PRESENT, "w")}, Asked.PRESENT, "primary", "w"),
        ({"primary": (Asked.UNANSWERED, "primary: timeout")}, Asked.UNANSWERED, "", ""),
        (
            {"primary": (Asked.UNANSWERED, "primary: timeout"), "fallback": (Asked.PRESENT, "w")},
            Asked.PRESENT,
            "fallback",
            "w",
        ),
        (
            {"primary": (Asked.ABSENT, "primary: no run w"), "fallback": (Asked.UNANSWERED, "fallback: hung")},
            Asked.UNANSWERED,
            "",
            "",
        ),
    ],
)
def test_a_rollback_kept_across_the_switch_to_observe(
    answers: dict[str, tuple[Asked, str]], answer: Asked, engine: str, workflow: str
) -> None:
    kept = kept_submission(answers)
    assert (kept.answer, kept.engine, kept.workflow) == (answer, engine, workflow)
    assert kept.why


def pods(*spec: str) -> list[Peer]:
    """'name' ready, 'name-' not ready, 'name~' terminating."""
    return [Peer(s.rstrip("-~"), ready=not s.endswith("-"), terminating=s.endswith("~")) for s in spec]


@pytest.mark.parametrize(
    ("peers", "drained", "min_ready", "drain", "line"),
    [
        # the one-node cluster: two replicas, both failing, min_ready 1: only the first to ask drains
        (pods("a", "b"), {}, 1, True, "would drain if first to ask (min_ready 1: at most 1 of 2 drained)"),
        (
            pods("a", "b", "c", "d"),
            {},
            1,
            True,
            "would drain if among the first 3 to ask (min_ready 1: at most 3 of 4 drained)",
        ),
        (pods("a", "b", "c"), {"c": 5.0}, 1, True, "would drain if first to ask (min_ready 1: at most 2 of 3 drained)"),
        (pods("a", "b"), {"b": 5.0}, 1, False, "would not drain (held back: min_ready 1)"),
        (pods("a"), {}, 1, False, "would not drain (held back: min_ready 1)"),
        (pods("a", "b"), {}, 0, True, "would drain (min_ready 0: every pod may leave)"),
        (pods("a", "b"), {"a": 5.0}, 1, True, "would stay drained (in the drain set already)"),
        (pods("a-", "b"), {}, 1, True, "would drain (not ready: it takes no serving place)"),
        (pods("a~", "b-"), {}, 1, True, "would drain (terminating: leaving anyway)"),
        (pods("b", "c"), {}, 1, None, ""),  # this pod not among its peers: nothing learnt
    ],
)
def test_the_drain_by_rule_says_who_would_drain_first(
    peers: list[Peer], drained: dict[str, float], min_ready: int, drain: bool | None, line: str
) -> None:
    view = drain_by_rule("a", peers=peers, drained=drained, min_ready=min_ready, now_wall=100.0)
    assert view.drain is drain
    assert view.line == line
    if line:
        assert f"; {line}; nothing done" in plan(drain=view).summary  # type: ignore[attr-defined]
        assert len(line) <= 80  # one short line
