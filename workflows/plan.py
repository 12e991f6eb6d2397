"""The rollback's decisions, pure: which replicas to heal and what to do on each.

No I/O and no clock here: ``workflows/steps/`` reads Triton and the Kubernetes API, asks these
functions, and acts. Every rule is table-tested in tests/workflows/test_plan.py.

Rules that keep a rollback from doing harm:

* a replica is touched only if it serves the failing version, or hosted the model and serves
  nothing now (loading the stable version can then only restore service); a load in progress is
  waited for, and a Triton that never loaded the model is left alone;
* the swap keeps every other version the replica serves, apart from the failing one;
* a replica that already serves the stable version is "already restored": nothing is loaded;
* a replica that serves some other version (a person fixed it another way) is left alone;
* a terminating pod, a pod that is not Running, or one without an IP is skipped and reported.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class ReplicaAction(StrEnum):
    SWAP = "swap"  # serves the failing version: replace it with the stable one
    LOAD = "load"  # this Triton hosted the model and now serves no version: load the stable one
    ALREADY = "already"  # serves the stable version and not the failing one: nothing to do
    LEAVE = "leave"  # serves another version, or never hosted the model: not ours to change
    WAIT = "wait"  # a load or unload is in progress: decide again once it settles


# Index states that say "this Triton hosted the model and it is not serving now": after an unload
# (by hand, or an unload-first rollback cut off) or a failed load. A model never loaded on this
# Triton has no state in the index (another replica set may share the repository).
_ONCE_HOSTED = frozenset({"UNAVAILABLE"})
_IN_PROGRESS = frozenset({"LOADING", "UNLOADING"})


def replica_action(
    served: Collection[str], *, failing: str, stable: str, index_states: Collection[str] = ()
) -> tuple[ReplicaAction, str]:
    """What to do on one replica, given the versions Triton serves there now and the states its
    repository index reports for the model (one per version row), and why."""
    if failing in served:
        return ReplicaAction.SWAP, f"serves the failing v{failing}"
    if not served:
        states = set(index_states)
        if states & _IN_PROGRESS:
            return ReplicaAction.WAIT, f"serves no version while the index says {', '.join(sorted(states))}"
        if states & _ONCE_HOSTED:
            return ReplicaAction.LOAD, "hosted the model and serves no version now: loading the stable one restores it"
        return ReplicaAction.LEAVE, "never loaded the model here: not ours to load"
    if stable in served:
        return ReplicaAction.ALREADY, f"already serves v{stable}, not v{failing}"
    listed = ", ".join(f"v{v}" for v in sorted(served, key=int))
    return ReplicaAction.LEAVE, f"serves {listed}, neither the failing v{failing} nor v{stable}: left alone"


def pinned_versions(served: Collection[str], *, failing: str, stable: str) -> list[int]:
    """The versions the swap's config override pins: the stable one, and every other version this
    replica serves except the failing one (clients that ask for them by number keep being served)."""
    keep = {v for v in served if v != failing} | {stable}
    return sorted(int(v) for v in keep)


def touches_triton(action: ReplicaAction) -> bool:
    return action in {ReplicaAction.SWAP, ReplicaAction.LOAD}


class PodView(Protocol):
    """What the Kubernetes API says of a Triton pod (healer.edges.kube.TritonPod)."""

    @property
    def name(self) -> str: ...

    @property
    def ip(self) -> str: ...

    @property
    def phase(self) -> str: ...

    @property
    def terminating(self) -> bool: ...


@dataclass(frozen=True)
class ReplicaTarget:
    url: str  # host:port of its Triton
    name: str = ""  # the pod's name when listed from the Kubernetes API
    skip: str = ""  # why this replica is not healed; "" heals it
    sidecar: str = ""  # host:port of the healer sidecar beside it (repository_mode per-pod stages through it)


def replica_targets(pods: Iterable[PodView], port: int) -> list[ReplicaTarget]:
    """Pods of the Triton set → the replicas to heal and the ones skipped (with the reason).

    Pod readiness is deliberately not a reason to skip: the sidecar drains a pod whose model is
    broken by failing its readiness, so the pods that most need healing are the not-ready ones.
    Whether each Triton answers is checked by the rollback itself, right before it acts.
    """
    targets = []
    for pod in sorted(pods, key=lambda p: p.name):
        host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
        url = f"{host}:{port}" if pod.ip else ""
        if pod.terminating:
            targets.append(ReplicaTarget(url, pod.name, "terminating (deletionTimestamp set)"))
        elif pod.phase != "Running":
            targets.append(ReplicaTarget(url, pod.name, f"phase {pod.phase or 'unknown'}, not Running"))
        elif not pod.ip:
            targets.append(ReplicaTarget(url, pod.name, "no pod IP yet"))
        else:
            targets.append(ReplicaTarget(url, pod.name))
    return targets


# A wave whose slowest load took under this share of load_timeout_s may double; over SHRINK_AT, it
# halves. Concurrent loads share the store: if a wave of k loads takes a + b·k, doubling a wave that
# took under half the timeout keeps the next one under the timeout.
GROW_BELOW = 0.5
SHRINK_AT = 0.75


def next_wave_size(current: int, slowest_load_s: float | None, *, load_timeout_s: float, ceiling: int) -> int:
    """The next wave's size from how the last one went: double (up to ``ceiling``) while its slowest
    load took under half of ``load_timeout_s``, halve when it took over three quarters, else keep it.
    ``slowest_load_s`` None (nothing was loaded: every replica was already restored or skipped) says
    nothing about the store: keep the size."""
    current, ceiling = max(1, current), max(1, ceiling)
    if slowest_load_s is None:
        return min(current, ceiling)
    if slowest_load_s > SHRINK_AT * load_timeout_s:
        return max(1, current // 2)
    if slowest_load_s < GROW_BELOW * load_timeout_s:
        return min(ceiling, current * 2)
    return min(current, ceiling)


# ---- before acting: is the incident still true, and may its version be quarantined? ---------------


class FailingSeen(StrEnum):
    """What the failing version answered when the rollback asked it again, holding the lease."""

    FAILS = "fails"  # a wrong (or too slow) answer on some replica: evidence from this incident
    PASSES = "passes"  # right answers on every replica asked
    INCONCLUSIVE = "inconclusive"  # served, but no replica gave an answer either way
    NOT_SERVED = "not-served"  # no replica that answered serves it now
    NOT_CHECKED = "not-checked"  # no version was named (the failing one is unknown)


@dataclass(frozen=True)
class RollbackGo:
    """Whether to restore, whether the failing version may be quarantined, and why (one line each).
    ``confirmed``: a check in this incident saw the version answer wrong (this run's confirmation or an
    earlier run's, from the audit trail). It never quarantines a version the ledger lists stable: only a
    person does that (``quarantine_refused``)."""

    act: bool
    quarantine: bool
    why: str
    why_not_quarantined: str = ""
    confirmed: bool = False


def _served_nowhere(version: str) -> RollbackGo:
    """Every replica answered and serves another version of the model, none this one, with no failure of it
    seen in this incident, no wait and no earlier attempt of this run holding the lease (a rerun after a
    restore finishes its record): nothing to do. An outside alert Alertmanager re-sends after its
    repeat_interval for a version already rolled back must not record a heal, send HealerIncidentHealed or
    count toward the breaker."""
    return RollbackGo(
        False, False, f"v{version} is served nowhere (every replica serves another version): nothing to do"
    )


def decide_rollback(  # noqa: PLR0911 (a decision table: one return per case)
    seen: FailingSeen,
    *,
    waited: bool,
    detected: bool,
    quarantine_asked: bool,
    version: str,
    failed_before: bool = False,
    stable_in_ledger: bool = False,
    detected_by_answer: bool = True,
    served_elsewhere: bool = False,
) -> RollbackGo:
    """The rollback holds the model's lease and has asked the failing version again (``seen``).

    ``waited``: it waited for another run's lease first (the world may have changed under it: another rollback, a
    release, a person). ``detected``: the request comes from a check that failed on the version in this incident
    (the sidecar's), not from a person. ``quarantine_asked``: a person asked for the quarantine (``healer rollback
    --quarantine``). ``failed_before``: an earlier run of this incident (killed before its record) saw the version
    fail its confirmation: the audit trail says so. ``stable_in_ledger``: the ledger lists the version stable
    (promoted: verified by a person or a release). ``detected_by_answer``: False for the traffic signal (reason
    ``traffic``, Triton's counters on real traffic): it restores as a detection does, but is no evidence for a
    quarantine (``_traffic_only``).

    * A person's ``--quarantine`` is done as asked: restore and quarantine, whatever the version answers.
    * After a wait, a version that answers right wherever it is served is a stale incident: nothing to do is the
      outcome (moving replicas off a verified version is the harm).
    * So is a person's plain rollback of a version the ledger lists stable that answers right: the advice a dead
      release once printed led exactly there (``--quarantine`` says it is meant).
    * Otherwise the rollback restores as asked: a person's rollback of a version that answers right is still theirs
      to ask for, and the sidecar's own check failed moments ago.
    * A version is quarantined only on evidence: a check that failed on it in this incident (this confirmation, an
      earlier run's, or the sidecar's), or a person's flag. A version the ledger lists stable never without the
      flag, whatever was seen (``quarantine_refused``; decided again where the ledger is written: steps.record).
    """
    confirmed = seen is FailingSeen.FAILS or failed_before
    if quarantine_asked:
        return RollbackGo(True, True, f"v{version}: restore and quarantine, as a person asked", confirmed=confirmed)
    if seen is FailingSeen.NOT_SERVED and served_elsewhere and not (waited or failed_before):
        return _served_nowhere(version)
    stable_kept = quarantine_refused(
        version, stable_in_ledger=stable_in_ledger, restoring=(), person_asked=False, confirmed=confirmed
    )
    if seen is FailingSeen.PASSES and waited:
        return RollbackGo(
            False,
            False,
            f"v{version} answers its golden request right wherever it is served, after waiting for another "
            "run's lease: the incident is stale, nothing to do",
        )
    if seen is FailingSeen.PASSES and stable_in_ledger and not detected:
        return RollbackGo(
            False,
            False,
            f"v{version} is stable in the ledger and answers its golden request right wherever it is served: "
            "nothing to do (healer rollback --quarantine takes it off anyway)",
        )
    if confirmed or detected:
        source = (
            "it failed its golden request again"
            if seen is FailingSeen.FAILS
            else "it failed its golden request earlier in this incident"
            if failed_before
            else "the sidecar's check failed"
            if detected_by_answer
            else "real traffic failed over its limit (Triton's metrics)"
        )
        kept = stable_kept or _traffic_only(version, seen, confirmed=confirmed, by_answer=detected_by_answer)
        if kept:
            return RollbackGo(
                True, False, f"v{version}: restore; {source}", why_not_quarantined=kept, confirmed=confirmed
            )
        return RollbackGo(True, True, f"v{version}: restore; {source}", confirmed=confirmed)
    why_not = (
        f"no check failed on v{version} in this incident ({seen.value}): a person's rollback does not "
        "quarantine without --quarantine"
    )
    return RollbackGo(True, False, f"v{version}: restore, as a person asked", why_not_quarantined=why_not)


def _traffic_only(version: str, seen: FailingSeen, *, confirmed: bool, by_answer: bool) -> str:
    """Why the traffic signal's rollback does not quarantine: no answer of the version was seen wrong ("" when
    one was). Real traffic's failures may come from a node, a config or the traffic itself."""
    if confirmed or by_answer:
        return ""
    return (
        f"only real traffic's failures were seen, and v{version} answered no golden request wrong in this "
        f"incident ({seen.value}): quarantined only on a check's wrong answer"
    )


def quarantine_refused(
    version: str,
    *,
    stable_in_ledger: bool,
    restoring: Collection[str],
    person_asked: bool,
    confirmed: bool = False,
    member_of: Collection[str] = (),
    confirmed_here: bool = False,
) -> str:
    """Why a rollback (its record or its escalation) must not record ``version`` quarantined, "" when it
    may: the last gate, asked again inside the ledger's compare-and-swap, whatever the evidence.

    * the version this rollback restores (or was restoring): never, not even when a person asks;
    * a version the ledger lists stable (every version a rollback restores to is one): only when a
      person asks (``healer rollback --quarantine``). A check that fails on it, this incident's
      confirmation included, may judge it by requests meant for a newer version (store golden requests
      pushed with it, a pipeline's), a flaky node or a config around it: quarantining it would take
      away the version rollbacks restore to.
    * a composing model's version (``member_of``: the pipelines whose suites judge it): only when this run's
      confirmation saw a pipeline fail with it served (``confirmed_here``), or a person asks. Its blame is a
      guess from the order the members' versions changed: a run that failed before it confirmed (waiting
      for a pipeline's lease held by another member's rollback, say) has nothing against it.
    """
    if version in restoring:
        return f"v{version} is the version this rollback restores to: never quarantined"
    if member_of and not confirmed_here and not person_asked:
        return (
            f"v{version} was blamed as a member of {', '.join(member_of)} (from the order the versions changed) "
            "and this run never saw the pipeline fail with it served (it failed before its confirmation, at the "
            "lease or earlier): not quarantined on a guess; a person decides"
        )
    if stable_in_ledger and not person_asked:
        seen = "a check in this incident saw it answer wrong, but " if confirmed else ""
        return (
            f"v{version} is stable in the ledger: {seen}healer never quarantines a stable version on its own "
            "(the check may be at fault: requests meant for another version, the node, a config); a person "
            "decides (healer rollback --quarantine; runbooks/rollback-escalated.md)"
        )
    return ""


def failing_seen(answers: Collection[object]) -> FailingSeen:
    """The confirmation's verdict from the statuses of the golden requests asked (healer.core.results.Status
    values: "fail", "pass", "error"; none asked: not served)."""
    values = {getattr(a, "value", a) for a in answers}
    if not values:
        return FailingSeen.NOT_SERVED
    if "fail" in values:
        return FailingSeen.FAILS
    if values == {"pass"}:
        return FailingSeen.PASSES
    return FailingSeen.INCONCLUSIVE
