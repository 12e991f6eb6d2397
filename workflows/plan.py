"""The rollback's decisions, pure: which replicas to heal and what to do on each.

No I/O and no clock here: ``workflows/steps.py`` reads Triton and the Kubernetes API, asks these
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
    """What the Kubernetes API says of a Triton pod (healer.kube.TritonPod)."""

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
