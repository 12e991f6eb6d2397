"""Pipelines (pure): an ensemble, or a BLS model that declares what it calls, judged as one by its own
golden suite, and whom to roll back when that suite fails.

A pipeline's composing models (its *members*) come from Triton's own config of an ensemble
(``ensemble_scheduling.step[].model_name``, each step's ``model_version``: -1 runs the newest version
loaded) or from healer.yaml (``models[].calls``, a BLS model's). The members have no golden request of
their own: the pipeline's suite is their evidence. When it fails, the one to blame is the member whose
served version changed since the pipeline last passed (or, never seen passing, since its newest stable
version); when none changed, the pipeline's own version. A member whose served version could not be read
now is "nothing learnt": nobody is blamed until it is read; with no baseline, or more than one change,
nobody is blamed either and a person decides (docs/pipelines.md).
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


def config_members(name: str, config: Mapping[str, Any]) -> tuple[Member, ...]:
    """``name``'s ensemble steps from a config Triton answered for it; () only for a complete config of a
    model that is not an ensemble. A config that names another model (or none), or that has neither a
    platform nor a backend (a partial answer: Triton still loading it), raises ValueError: not read, and
    never taken for "not a pipeline"."""
    named = config.get("name")
    if named != name:
        raise ValueError(f"config of {name}: it names {named!r}: not this model's config, not read")
    if config.get("platform") == "ensemble" or config.get("ensemble_scheduling"):
        return ensemble_members(config)
    if not config.get("platform") and not config.get("backend"):
        raise ValueError(f"config of {name}: neither platform nor backend: a partial config, not read")
    return ()


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
    """Whom to roll back for a pipeline's failure. ``model`` None: nobody; then ``escalate`` says which kind:
    True, a person decides (several changed, no evidence, a nested ensemble, a config never read whole): the
    incident escalates at once, nothing rolled back, decided once; False, nothing learnt yet (a member's
    version not read): asked again at the next submission, bounded by the healing timeout."""

    model: str | None
    version: str = ""  # the version of it that serves now: the failing one
    member: bool = False  # a composing model (True) or the pipeline itself
    why: str = ""
    escalate: bool = False  # nobody blamed and nothing more to learn: a person decides, now


def nobody(why: str) -> Blame:
    """Nobody is blamed and waiting will not tell whom: a person decides (the incident escalates at once)."""
    return Blame(None, why=why, escalate=True)


def blame(
    pipeline: str,
    version: str,
    *,
    members: Sequence[str],
    now: Mapping[str, str | None],
    passed: Mapping[str, str],
    passed_own: str | None = None,
) -> Blame:
    """Whom the pipeline ``pipeline`` (serving ``version``, which fails its suite) blames.

    ``now``: each member's version running now (None or absent: not read); ``passed``: each member's
    baseline, the version it ran when the pipeline last passed or else its newest stable version in its
    ledger (absent: neither is known); ``passed_own``: the pipeline's own version likewise (None: unknown).

    * A member not read now: nothing learnt, nobody blamed (asked again next cycle).
    * A member, or the pipeline itself, with no baseline: no evidence; nobody blamed, a person decides
      (``escalate``: the incident escalates at once).
    * Exactly one of the members and the pipeline changed version since the baseline: that one.
    * More than one changed: which broke it is not known; nobody blamed, the why names them all, a person
      decides (``escalate``).
    * Nothing changed underneath: the pipeline's own version is blamed.
    """
    unread = [m for m in members if now.get(m) is None]
    if unread:
        return Blame(None, why=f"{', '.join(unread)}: served version not read; nobody blamed yet (nothing learnt)")
    unknown = [m for m in members if m not in passed] + ([f"{pipeline} itself"] if passed_own is None else [])
    if unknown:
        return nobody(
            f"{', '.join(unknown)}: no pass seen and no stable version in the ledger: no evidence whom to "
            "blame; nobody blamed, a person decides"
        )
    changed = [(m, passed[m], str(now[m])) for m in members if passed[m] != now[m]]
    if passed_own != version:
        changed.append((pipeline, str(passed_own), version))
    listed = [f"{m} v{before}->v{after}" for m, before, after in changed]
    if not changed:
        return Blame(
            pipeline,
            version,
            member=False,
            why=f"no composing model changed version since {pipeline} last passed: its own v{version}",
        )
    if len(changed) > 1:
        return nobody(
            f"{len(changed)} changed since {pipeline} last passed ({', '.join(listed)}): which one broke it "
            "is not known; nobody blamed, a person decides"
        )
    chosen, _, chosen_version = changed[0]
    return Blame(chosen, chosen_version, member=chosen != pipeline, why=f"{listed[0]} since {pipeline} last passed")
