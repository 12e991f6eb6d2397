"""healer/core/pipeline.py: an ensemble's members from Triton's config, the version a step runs, and
whom a failing pipeline blames (table tests)."""

from __future__ import annotations

from typing import Any

import pytest

from healer.core.pipeline import (
    LATEST,
    Blame,
    Member,
    blame,
    config_members,
    ensemble_members,
    nobody,
    pipeline_members,
    running_version,
)

ENSEMBLE = {
    "name": "ens",
    "platform": "ensemble",
    "ensemble_scheduling": {
        "step": [
            {"model_name": "pre", "model_version": -1},
            {"model_name": "mid", "model_version": "-1"},  # Triton's JSON writes int64 as a string
            {"model_name": "post", "model_version": 3},
            {"model_name": "pre", "model_version": -1},  # a model used twice is one member
        ]
    },
}


def test_an_ensembles_members_are_its_steps_models_in_order_each_once() -> None:
    assert ensemble_members(ENSEMBLE) == (Member("pre"), Member("mid"), Member("post", 3))


def test_a_model_that_is_not_an_ensemble_has_no_members() -> None:
    assert ensemble_members({"name": "m", "platform": "", "backend": "python"}) == ()
    assert pipeline_members((), None) == ()


def test_a_bls_models_declared_calls_come_first_then_its_ensemble_steps() -> None:
    assert pipeline_members(("tok", "mid"), ENSEMBLE) == (
        Member("tok"),
        Member("mid"),
        Member("pre"),
        Member("post", 3),
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"platform": "ensemble", "ensemble_scheduling": {"step": "x"}}, "ensemble_scheduling.step: expected a list"),
        ({"platform": "ensemble"}, "ensemble_scheduling.step: expected a list"),
        ({"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_version": 1}]}}, "step[0].model_name"),
        (
            {"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "a", "model_version": "x"}]}},
            "step[0].model_version: expected a number, got 'x'",
        ),
    ],
)
def test_a_malformed_ensemble_config_says_which_step_and_key(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ensemble_members(config)


@pytest.mark.parametrize(
    ("member", "served", "runs"),
    [
        (Member("m"), ["1", "3", "2"], "3"),  # -1: the newest loaded
        (Member("m"), [], None),
        (Member("m", 2), ["1", "2", "3"], "2"),  # a fixed step version
        (Member("m", 2), ["3"], None),  # its version not served: the step runs nothing
    ],
)
def test_the_version_a_step_runs(member: Member, served: list[str], runs: str | None) -> None:
    assert member.version in (LATEST, 2)
    assert running_version(member, served) == runs


MEMBERS = ("pre", "mid", "post")
PASSED = {"pre": "1", "mid": "1", "post": "1"}


NO_EVIDENCE = (
    "no pass seen and no stable version in the ledger: no evidence whom to blame; nobody blamed, a person decides"
)
NOT_KNOWN = "which one broke it is not known; nobody blamed, a person decides"


@pytest.mark.parametrize(
    ("now", "passed", "passed_own", "version", "expected"),
    [
        # one member changed: that member, at its version now
        ({**PASSED, "mid": "2"}, PASSED, "1", "1", Blame("mid", "2", True, "mid v1->v2 since ens last passed")),
        # nothing changed underneath: the pipeline's own version
        (
            PASSED,
            PASSED,
            "1",
            "1",
            Blame("ens", "1", False, "no composing model changed version since ens last passed: its own v1"),
        ),
        # several changed: nobody guessed at; the why names them all
        (
            {"pre": "2", "mid": "2", "post": "1"},
            PASSED,
            "1",
            "1",
            nobody(f"2 changed since ens last passed (pre v1->v2, mid v1->v2): {NOT_KNOWN}"),
        ),
        # the pipeline's own version changed and no member: the pipeline
        (PASSED, PASSED, "1", "2", Blame("ens", "2", False, "ens v1->v2 since ens last passed")),
        # the pipeline's own change and a member's: nobody guessed at
        (
            {**PASSED, "post": "4"},
            PASSED,
            "1",
            "2",
            nobody(f"2 changed since ens last passed (post v1->v4, ens v1->v2): {NOT_KNOWN}"),
        ),
        # a member with no baseline (never seen passing, no stable version): no evidence, never the pipeline
        ({**PASSED, "mid": "2"}, {"pre": "1", "post": "1"}, "1", "1", nobody(f"mid: {NO_EVIDENCE}")),
        ({**PASSED}, {"pre": "1", "post": "1"}, "1", "1", nobody(f"mid: {NO_EVIDENCE}")),
        # the pipeline's own baseline unknown: no evidence either, even with one member changed
        ({**PASSED, "mid": "2"}, PASSED, None, "1", nobody(f"ens itself: {NO_EVIDENCE}")),
        (PASSED, PASSED, None, "1", nobody(f"ens itself: {NO_EVIDENCE}")),
        (
            {},
            {},
            None,
            "1",
            Blame(None, why="pre, mid, post: served version not read; nobody blamed yet (nothing learnt)"),
        ),
        # a member not read now: nothing learnt, nobody blamed
        (
            {"pre": "1", "mid": None, "post": "1"},
            PASSED,
            "1",
            "1",
            Blame(None, why="mid: served version not read; nobody blamed yet (nothing learnt)"),
        ),
        (
            {"pre": "1", "post": "2"},
            PASSED,
            "1",
            "1",
            Blame(None, why="mid: served version not read; nobody blamed yet (nothing learnt)"),
        ),
    ],
)
def test_whom_a_failing_pipeline_blames(
    now: dict[str, str | None],
    passed: dict[str, str],
    passed_own: str | None,
    version: str,
    expected: Blame,
) -> None:
    assert blame("ens", version, members=MEMBERS, now=now, passed=passed, passed_own=passed_own) == expected


def test_without_evidence_the_pipeline_itself_is_never_blamed() -> None:
    """Whatever is missing, a pipeline with a member or its own version of no baseline blames nobody."""
    for missing in MEMBERS:
        partial = {m: v for m, v in PASSED.items() if m != missing}
        for own in ("1", None):
            decided = blame("ens", "1", members=MEMBERS, now=PASSED, passed=partial, passed_own=own)
            assert decided.model is None and missing in decided.why
            assert decided.escalate  # a person decides, now: waiting learns nothing more


def test_nothing_learnt_never_blames_anyone_whatever_changed() -> None:
    decided = blame("ens", "2", members=MEMBERS, now={"pre": "5"}, passed=PASSED, passed_own="1")
    assert decided.model is None and not decided.member
    assert not decided.escalate  # asked again at the next submission, not escalated at once


def test_nobody_blamed_for_good_escalates_and_a_model_blamed_never_does() -> None:
    """Blame.escalate is the sidecar's cue to escalate at once: only when nobody is blamed and no later cycle
    can tell whom (several changed, no evidence); never with a model to roll back."""
    assert nobody("x") == Blame(None, why="x", escalate=True)
    changed = blame("ens", "1", members=MEMBERS, now={**PASSED, "mid": "2"}, passed=PASSED, passed_own="1")
    assert changed.model == "mid" and not changed.escalate


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "config of ens: it names None"),  # a partial answer: no name
        ({"name": "other", "platform": "ensemble"}, "it names 'other'"),
        ({"name": "ens"}, "neither platform nor backend"),  # still loading: not "a plain model"
        ({"name": "ens", "platform": "", "backend": ""}, "neither platform nor backend"),
    ],
)
def test_a_partial_config_is_not_read_never_taken_for_a_plain_model(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_members("ens", config)


def test_a_whole_config_says_ensemble_or_plain() -> None:
    assert config_members("ens", {**ENSEMBLE}) == ensemble_members(ENSEMBLE)
    assert config_members("m", {"name": "m", "platform": "", "backend": "python"}) == ()
