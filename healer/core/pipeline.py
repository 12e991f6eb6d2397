"""Pipelines (pure): an ensemble, or a BLS model that declares what it calls, judged as one by its own
golden suite, and whom to roll back when that suite fails.

A pipeline's composing models (its *members*) come from Triton's own config of an ensemble
(``ensemble_scheduling.step[].model_name``, each step's ``model_version``: -1 runs the newest version
loaded) or from healer.yaml (``models[].calls``, a BLS model's). The members have no golden request of
their own: the pipeline's suite is their evidence. When it fails, the one to blame is the member whose
served version changed since the pipeline last passed (several: the most recent change); when none
changed, the pipeline's own version. A member whose served version could not be read now is
"nothing learnt": nobody is blamed until it is read (docs/pipelines.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LATEST = -1  # an ensemble step's model_version that runs the newest version loaded


@dataclass(frozen=True)
class Member:
    """One composing model, and the version the pipeline runs of it (LATEST: the newest loaded)."""

    name: str
    version: int = LATEST


def ensemble_members(config: Mapping[str, Any]) -> tuple[Member, ...]:
    """The composing models of an ensemble from Triton's config of it (``GET /v2/models/{m}/config``), in
    step order, each once; () for a model that is not an ensemble. A malformed step raises ValueError."""
    scheduling = config.get("ensemble_scheduling")
    if config.get("platform") != "ensemble" and not scheduling:
        return ()
    steps = (scheduling or {}).get("step") if isinstance(scheduling, Mapping) else None
    if not isinstance(steps, Sequence) or isinstance(steps, str):
        raise ValueError("ensemble_scheduling.step: expected a list of steps")
    members: dict[str, Member] = {}
    for i, step in enumerate(steps):
        name = step.get("model_name") if isinstance(step, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"ensemble_scheduling.step[{i}].model_name: expected a model name, got {name!r}")
        raw = step.get("model_version", LATEST)
        try:
            version = int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"ensemble_scheduling.step[{i}].model_version: expected a number, got {raw!r}") from None
        members.setdefault(name, Member(name, version if version > 0 else LATEST))
    return tuple(members.values())


def pipeline_members(calls: Sequence[str], config: Mapping[str, Any] | None) -> tuple[Member, ...]:
    """A configured model's members: the ones healer.yaml declares (``calls``, a BLS model's), then its
    ensemble steps' from Triton's config (None: not read), each once."""
    members = {name: Member(name) for name in calls}
    for member in ensemble_members(config or {}):
        members.setdefault(member.name, member)
    return tuple(members.values())


def running_version(member: Member, served: Sequence[str]) -> str | None:
    """The version of ``member`` the pipeline runs, of the versions Triton serves of it: a step's fixed
    version when served, else the newest served (what -1 runs); None when it runs none."""
    if member.version != LATEST:
        return str(member.version) if str(member.version) in served else None
    numbers = [int(v) for v in served if v.isdigit()]
    return str(max(numbers)) if numbers else None


@dataclass(frozen=True)
class Blame:
    """Whom to roll back for a pipeline's failure. ``model`` None: nobody (nothing learnt yet)."""

    model: str | None
    version: str = ""  # the version of it that serves now: the failing one
    member: bool = False  # a composing model (True) or the pipeline itself
    why: str = ""


def blame(
    pipeline: str,
    version: str,
    *,
    members: Sequence[str],
    now: Mapping[str, str | None],
    passed: Mapping[str, str],
    passed_own: str | None = None,
    changed_at: Mapping[str, float] | None = None,
) -> Blame:
    """Whom the pipeline ``pipeline`` (serving ``version``, which fails its suite) blames.

    ``now``: each member's version running now (None or absent: not read); ``passed``: each member's when
    the pipeline last passed (absent: never seen passing); ``passed_own``: the pipeline's own version then;
    ``changed_at``: when each member's (and the pipeline's, under its own name) current version was first
    seen, on one clock.

    * A member not read now: nothing learnt, nobody blamed (asked again next cycle).
    * Members whose version changed since the last pass: the most recent change is blamed (the same time:
      the later step of the pipeline). The pipeline's own version changed too: it competes by the same rule.
    * Nothing changed underneath: the pipeline's own version is blamed.
    """
    unread = [m for m in members if now.get(m) is None]
    if unread:
        return Blame(None, why=f"{', '.join(unread)}: served version not read; nobody blamed yet (nothing learnt)")
    when = changed_at or {}
    changed = [(m, passed[m], str(now[m])) for m in members if m in passed and passed[m] != now[m]]
    order = {m: i for i, m in enumerate(members)}
    candidates = [(when.get(m, float("-inf")), order[m], m, str(now[m])) for m, _, _ in changed]
    own_changed = passed_own is not None and passed_own != version
    if own_changed:
        candidates.append((when.get(pipeline, float("-inf")), -1, pipeline, version))
    unknown = [m for m in members if m not in passed]
    never = f"; never seen passing: {', '.join(unknown)}" if unknown else ""
    if not candidates:
        return Blame(
            pipeline,
            version,
            member=False,
            why=f"no composing model changed version since {pipeline} last passed: its own v{version}{never}",
        )
    _, _, chosen, chosen_version = max(candidates)
    listed = [f"{m} v{before}->v{after}" for m, before, after in changed]
    if own_changed:
        listed.append(f"{pipeline} v{passed_own}->v{version}")
    if len(candidates) == 1:
        why = f"{listed[0]} since {pipeline} last passed"
    else:
        why = (
            f"{len(candidates)} changed since {pipeline} last passed ({', '.join(listed)}): "
            f"{chosen}'s change is the most recent"
        )
    return Blame(chosen, chosen_version, member=chosen != pipeline, why=why + never)
