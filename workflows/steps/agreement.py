"""The agreement gate (docs/agreement.md): the model's replay set sent to a new version and to the stable
version, both served by one Triton, and their answers judged by the model's agreement rules
(healer/core/agreement.py). Used by a release's bake (on its canary, where both versions are loaded) and by
``healer promote --agreement``.

Whatever keeps the gate from judging the whole set (no replay set, a file that does not load, the stable
version not served beside the new one, an error or a timeout from either version, the deadline) is an
``error`` verdict: nothing learnt, never a verdict on part of the set. The gate only reads and infers: it
loads, unloads and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from healer.core.agreement import Agreement, Judged, Rules, Verdict
from healer.core.agreement import verdict as verdict_of
from healer.settings import ModelSettings
from probes.replay import ReplayError, ReplayUnanswered, answer_both, read_replay_set, replay_inputs, replay_prefix

log = structlog.get_logger(__name__)

GATE_DEADLINE_S = 300.0  # the whole set, both versions: at most MAX_INPUTS x 2 requests


def nothing_learnt(why: str) -> Verdict:
    return Verdict(Agreement.ERROR, f"{why}: nothing learnt")


class _NothingLearnt(Exception):
    pass


def agreement_gate(
    model: ModelSettings,
    store: Any,
    triton: Any,
    *,
    stable: str,
    candidate: str,
    cancelled: Callable[[], None] = lambda: None,
    deadline_s: float = GATE_DEADLINE_S,
) -> Verdict:
    """``candidate``'s answers to ``model``'s replay set against ``stable``'s, on ``triton`` (serving both).
    The store's own errors are raised (the caller says where); every other trouble is an error verdict."""
    try:
        judged = _answers(
            model, store, triton, stable=stable, candidate=candidate, cancelled=cancelled, deadline_s=deadline_s
        )
    except _NothingLearnt as exc:
        return nothing_learnt(str(exc))
    assert model.agreement is not None
    verdict = verdict_of(judged, Rules.of(model.agreement))
    log.info(
        "agreement_judged",
        model=model.name,
        stable=stable,
        candidate=candidate,
        agreement=verdict.status.value,
        inputs=verdict.inputs,
        disagreeing=verdict.disagreeing,
    )
    return verdict


def _answers(
    model: ModelSettings,
    store: Any,
    triton: Any,
    *,
    stable: str,
    candidate: str,
    cancelled: Callable[[], None],
    deadline_s: float,
) -> list[Judged]:
    from healer.edges.triton import TritonError

    settings = model.agreement
    if settings is None:
        raise _NothingLearnt(f"{model.name} has no agreement rules (models[].agreement)")
    try:
        files = read_replay_set(store, model.name, candidate)
    except ReplayError as exc:
        raise _NothingLearnt(str(exc)) from exc
    if not files:
        raise _NothingLearnt(
            f"no replay set for {model.name} in {store.location}/{replay_prefix(model.name)} "
            f"(nor {replay_prefix(model.name, candidate)})"
        )
    try:
        served = triton.served_versions(model.name)
        missing = [v for v in (stable, candidate) if v not in served]
        if missing:
            listed = ", ".join(f"v{v}" for v in served) or "nothing"
            raise _NothingLearnt(
                f"{triton.url} serves {listed}, not {' and '.join(f'v{v}' for v in missing)}: both versions must "
                "be loaded side by side to be compared"
            )
        inputs = replay_inputs(files, triton.model_metadata(model.name, candidate))
        return answer_both(
            triton,
            model.name,
            stable=stable,
            candidate=candidate,
            inputs=inputs,
            outputs=settings.outputs,
            timeout_s=settings.timeout_s,
            deadline_s=deadline_s,
            cancelled=cancelled,
        )
    except ReplayError as exc:
        raise _NothingLearnt(str(exc)) from exc
    except ReplayUnanswered as exc:
        raise _NothingLearnt(f"no answer: {exc}") from exc
    except TritonError as exc:
        raise _NothingLearnt(f"Triton {triton.url}: {exc}") from exc
