"""The model's replicas (which Tritons to heal, what each serves), one replica restored (swapped, or
unloaded first, then verified), the canary then waves of them, and the put-back of what an earlier,
killed attempt unloaded."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from healer.core.ledger import PutBack, StableRecord
from healer.edges.triton import TritonAPI, TritonRejected, TritonUnavailable
from healer.vocabulary import RollbackRequest
from workflows.plan import (
    SHRINK_AT,
    ReplicaAction,
    ReplicaTarget,
    next_wave_size,
    pinned_versions,
    replica_action,
    touches_triton,
)
from workflows.steps.base import GoldenFailed, PermanentStepError, StepContext, StepError, TransientStepError
from workflows.steps.lease import PUT_BACK_MAX_AGE_S, LeaseKeeper
from workflows.steps.per_pod import per_pod, sidecar_beside, stage_on_replica
from workflows.steps.versions import load_pinned, stable_record_of, unload, verify

log = structlog.get_logger(__name__)


def replica_targets_for(ctx: StepContext, triton_url: str = "") -> list[ReplicaTarget]:
    """The Tritons this rollback heals: every replica the context can list (all of them share the
    model store and the live repository), else the one the request names, else the context's own."""
    if ctx.list_replicas is not None:
        try:
            targets = ctx.list_replicas()
        except Exception as exc:  # the Kubernetes API did not answer: a retry may help
            raise TransientStepError(f"could not list the Triton replicas: {exc}") from exc
        if not targets:
            raise PermanentStepError("no Triton pod matches rollback.replicas")
        return targets
    return [ReplicaTarget(triton_url or ctx.triton.url)]


@contextlib.contextmanager
def on_replica(ctx: StepContext, url: str, *, own_client: bool = False) -> Iterator[StepContext]:
    """``ctx`` aimed at the Triton at ``url`` (its own client, closed afterwards; ``ctx`` itself when
    that is its Triton already, unless ``own_client``: a thread of a wave never shares a client)."""
    if url == ctx.triton.url and not own_client:
        yield ctx
        return
    triton = _triton_for(ctx, url)
    try:
        yield dataclasses.replace(ctx, triton=triton)
    finally:
        triton.close()


def _triton_for(ctx: StepContext, url: str) -> TritonAPI:
    # The thread-safe client: the replicas of a wave are restored from threads of one process.
    from healer.edges.triton_rest import TritonRest

    return TritonRest(url, timeout_s=ctx.settings.triton.timeout_s)


def served_versions(ctx: StepContext, model: str) -> list[str]:
    try:
        return ctx.triton.served_versions(model)
    except TritonUnavailable as exc:
        raise TransientStepError(f"{model} on {ctx.triton.url}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"{model} on {ctx.triton.url}: Triton refused: {exc}") from exc


def triton_live(ctx: StepContext) -> bool:
    try:
        return ctx.triton.server_live()
    except (TritonUnavailable, TritonRejected):
        return False


def _index_states(ctx: StepContext, model: str) -> list[str]:
    try:
        return [r.state or "" for r in ctx.triton.repository_index() if r.name == model]
    except TritonUnavailable as exc:
        raise TransientStepError(f"{model} on {ctx.triton.url}: Triton not reachable: {exc}") from exc
    except TritonRejected as exc:
        raise PermanentStepError(f"{model} on {ctx.triton.url}: Triton refused: {exc}") from exc


_BUSY_STATES = frozenset({"LOADING", "UNLOADING"})


def _settled_index_states(ctx: StepContext, model: str) -> list[str]:
    """The model's states in Triton's index once no version is loading or unloading, waiting at most
    the unload timeout (what it says then, busy or not)."""
    deadline = ctx.clock() + ctx.settings.rollback.unload_timeout_s
    # Bounded by the unload timeout: every iteration returns or sleeps toward it.
    while True:
        states = _index_states(ctx, model)
        if not _BUSY_STATES.intersection(states) or ctx.clock() >= deadline:
            return states
        ctx.check_cancelled(f"waiting for {model} to settle on {ctx.triton.url}")
        ctx.sleep(ctx.settings.rollback.poll_interval_s)


def restore_replicas(
    ctx: StepContext, request: RollbackRequest, version: str, *, before_each: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """The canary, then waves: the first replica that answers and needs a load is restored and
    verified alone; only if it passes are the others restored in waves, the first of
    ``rollback.parallelism``, each next one doubled while the last one's loads took under half of
    ``rollback.load_timeout_s`` (up to ``rollback.max_parallelism``) and halved over three quarters
    (unload-first: one at a time), each replica decided
    (workflows/plan.py), acted on and verified on its own. ``before_each`` (the lease's fence) runs
    before the canary and before each wave. A failure stops the rollback after its wave: replicas
    already restored stay restored, the rest keep what they serve (loaded); every other replica of
    the failing wave still finishes, so none is left halfway."""
    record_ = stable_record_of(ctx, request.model, version)
    return swap_replicas(ctx, request.model, request.from_version, record_, request.triton_url, before_each)


def swap_replicas(
    ctx: StepContext,
    model: str,
    failing: str,
    record_: StableRecord,
    triton_url: str = "",
    before_each: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """``restore_replicas`` for any pair of versions: every replica serving ``failing`` is swapped to
    ``record_``'s version (canary first, then waves), each verified. A release rolls a new version
    out with it (``failing``: the version it replaces) and puts it back with it (``failing``: the new one)."""
    targets = replica_targets_for(ctx, triton_url)
    healed: dict[str, Any] = {}
    skipped = {t.name or t.url: t.skip for t in targets if t.skip}
    waiting = [t for t in targets if not t.skip]
    plan: list[list[str]] = []
    # The canary: the first replica that answers and needs a load. One that does not answer is
    # skipped; one already on the stable version (nothing loaded) is healed but proves nothing.
    canary_loaded = False
    while waiting and not canary_loaded:
        target = waiting.pop(0)
        ctx.check_cancelled(f"restore of {target.url}")
        before_each()
        with on_replica(ctx, target.url) as replica:
            if not triton_live(replica):
                skipped[target.name or target.url] = "Triton not live"
                continue
            healed[target.url] = restore_replica(replica, model, failing, record_, sidecar=target.sidecar)
            plan.append([target.url])
            canary_loaded = touches_triton(ReplicaAction(healed[target.url]["action"]))
    # Unload-first leaves each replica it works on without the model: one at a time, never a wave.
    rollback = ctx.settings.rollback
    unload_first = rollback.order == "unload-first"
    ceiling = 1 if unload_first else max(rollback.parallelism, rollback.max_parallelism)
    size = 1 if unload_first else rollback.parallelism
    canary_load = _slowest_load([healed[u] for u in plan[-1]]) if plan else None
    if canary_load is not None and canary_load > SHRINK_AT * rollback.load_timeout_s:
        size = 1  # the canary alone nearly timed out: concurrent loads of it would
    while waiting:
        wave, waiting = waiting[:size], waiting[size:]
        ctx.check_cancelled(f"restore of {', '.join(t.url for t in wave)}")
        before_each()
        plan.append([t.url for t in wave])
        outcomes = _restore_wave(ctx, model, failing, record_, wave)
        failed = {url: exc for url, exc in outcomes.items() if isinstance(exc, BaseException)}
        for target in wave:
            outcome = outcomes[target.url]
            if outcome is None:
                skipped[target.name or target.url] = "Triton not live"
            elif not isinstance(outcome, BaseException):
                healed[target.url] = outcome
        if failed:
            raise _wave_failed(model, failed, restored=sorted(healed))
        # The next wave grows while the store keeps up and shrinks when loads near their timeout.
        slowest = _slowest_load([o for o in outcomes.values() if isinstance(o, dict)])
        size = next_wave_size(size, slowest, load_timeout_s=rollback.load_timeout_s, ceiling=ceiling)
    if not healed:
        listed = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        raise TransientStepError(f"no replica of {model} could be healed ({listed})")
    touched = sum(1 for r in healed.values() if touches_triton(ReplicaAction(r["action"])))
    golden = {url: r["verify"] for url, r in healed.items()}
    return {
        "order": ctx.settings.rollback.order,
        "replicas": healed,
        "skipped": skipped,
        "touched": touched,
        "waves": plan,
        "golden": next(iter(golden.values())) if len(golden) == 1 else {"replicas": golden},
    }


def _slowest_load(outcomes: list[dict[str, Any]]) -> float | None:
    """The longest load among replicas' outcomes (None: none was loaded)."""
    loads = [float(o["load"]["load_s"]) for o in outcomes if isinstance(o.get("load"), dict) and "load_s" in o["load"]]
    return max(loads) if loads else None


def _restore_wave(
    ctx: StepContext, model: str, failing: str, stable: StableRecord, wave: list[ReplicaTarget]
) -> dict[str, dict[str, Any] | BaseException | None]:
    """Every replica of one wave at once, each on a client of its own; per replica: its outcome, the
    exception that stopped it, or None when its Triton did not answer (skipped)."""

    def one(target: ReplicaTarget) -> dict[str, Any] | None:
        with on_replica(ctx, target.url, own_client=True) as replica:
            if not triton_live(replica):
                return None
            return restore_replica(replica, model, failing, stable, sidecar=target.sidecar)

    outcomes: dict[str, dict[str, Any] | BaseException | None] = {}
    with ThreadPoolExecutor(len(wave), thread_name_prefix="restore") as pool:
        futures = {target.url: pool.submit(one, target) for target in wave}
        # Every call inside has its timeout (loads: rollback.load_timeout_s): waiting for all is bounded.
        for url, future in futures.items():
            try:
                outcomes[url] = future.result()
            except Exception as exc:
                outcomes[url] = exc
    return outcomes


def _wave_failed(model: str, failed: Mapping[str, BaseException], *, restored: list[str]) -> StepError:
    """One error for a wave's failures, naming what is restored (the escalation says where things
    stand): permanent if any was (a retry would not change it), else transient."""
    listed = "; ".join(f"{url}: {exc}" for url, exc in failed.items())
    shown = ", ".join(restored[:10]) + (f" and {len(restored) - 10} more" if len(restored) > 10 else "")
    message = f"{model}: {len(failed)} replica(s) failed ({listed}); {len(restored)} restored before the stop ({shown})"
    if any(isinstance(exc, GoldenFailed) for exc in failed.values()):
        return GoldenFailed(message)
    if any(isinstance(exc, PermanentStepError) for exc in failed.values()):
        return PermanentStepError(message)
    if all(isinstance(exc, StepError) for exc in failed.values()):
        return TransientStepError(message)
    first = next(exc for exc in failed.values() if not isinstance(exc, StepError))
    raise first  # a bug: surfaces as itself, as it would on a single replica


def restore_replica(
    ctx: StepContext, model: str, failing: str, stable: StableRecord, *, sidecar: str = ""
) -> dict[str, Any]:
    """One replica: what it serves decides what to do; then the golden request must pass. In per-pod
    mode its sidecar (``sidecar``, else the one beside its Triton) stages the version in the pod's own
    repository first: if it cannot, the replica is left as it is."""
    version = stable.version
    served = served_versions(ctx, model)
    states = [] if served else _index_states(ctx, model)
    action, why = replica_action(served, failing=failing, stable=version, index_states=states)
    out: dict[str, Any] = {"action": action.value, "why": why, "served_before": served}
    log.info("replica_plan", model=model, version=failing, replica=ctx.triton.url, action=action.value, why=why)
    if action is ReplicaAction.WAIT:
        raise TransientStepError(f"{model} on {ctx.triton.url}: {why}; trying again")
    pinned = pinned_versions(served, failing=failing, stable=version)
    if touches_triton(action) and per_pod(ctx.settings):  # ---- per-pod: the pod's own copy, before anything
        out["stage"] = stage_on_replica(ctx, sidecar or sidecar_beside(ctx.settings, ctx.triton.url), model, stable)
    if action is ReplicaAction.SWAP and ctx.settings.rollback.order == "unload-first":
        out.update(_unload_then_load(ctx, model, stable, pinned, served))
    elif touches_triton(action):
        # The swap: Triton loads the pinned version next to the serving one, then releases the old
        # one; if the load fails the old one keeps serving. The model is never absent.
        out["load"] = load_pinned(ctx, model, stable, pinned)
    if action is ReplicaAction.LEAVE:
        out["verify"] = {v: verify(ctx, model, v) for v in served}
    else:
        out["verify"] = verify(ctx, model, version)
    return out


def stage_in_pod(ctx: StepContext, replica: StepContext, model: str, record: StableRecord) -> dict[str, Any] | None:
    """Per-pod: ``record``'s version staged by the sidecar of ``replica``'s pod, found among the replicas
    ``ctx`` lists (a release's canary, loaded outside restore_replica); None in the other modes."""
    if not per_pod(ctx.settings):
        return None
    url = replica.triton.url
    target = next((t for t in replica_targets_for(ctx) if t.url == url), None)
    sidecar = target.sidecar if target is not None and target.sidecar else sidecar_beside(ctx.settings, url)
    return stage_on_replica(replica, sidecar, model, record)


def _unload_then_load(
    ctx: StepContext, model: str, stable: StableRecord, pinned: list[int], served_before: list[str]
) -> dict[str, Any]:
    """For models too large to be resident twice. What is about to be unloaded is written into the
    lease first (a PutBack: if this process is killed before the load, the next holder of the lease
    loads it again). Whatever fails once the unload was asked for (the unload itself, its wait, the
    deadline, the load), put back what was served: never leave a model unloaded that was loaded."""
    try:
        served_config = ctx.triton.model_config(model)
    except (TritonUnavailable, TritonRejected) as exc:
        raise TransientStepError(f"read the served config of {model} before unloading: {exc}") from exc
    if ctx.lease is not None:
        ctx.lease.remember_unloaded(
            PutBack(
                replica=ctx.triton.url,
                versions=tuple(sorted(int(v) for v in served_before)),
                config=served_config,
                since=time.time(),
            )
        )
    out: dict[str, Any] = {}
    try:
        out["unload"] = unload(ctx, model)
        out["load"] = load_pinned(ctx, model, stable, pinned)
    except StepError as exc:
        loaded, put_back = _put_back(ctx, model, served_config, served_before)
        log.error("restore_failed_after_unload", model=model, error=str(exc), put_back=put_back)
        if loaded and ctx.lease is not None:
            ctx.lease.forget_unloaded(ctx.triton.url)
        raise type(exc)(f"{exc}; {put_back}") from exc
    if ctx.lease is not None:
        ctx.lease.forget_unloaded(ctx.triton.url)
    return out


def _put_back(ctx: StepContext, model: str, served_config: Mapping[str, Any], served: list[str]) -> tuple[bool, str]:
    """Load again exactly the versions that were served before the unload (best effort, checked).
    Returns whether they serve again, and what happened."""
    versions = sorted(int(v) for v in served)
    back = dict(served_config, name=model, version_policy={"specific": {"versions": versions}})
    listed = ", ".join(f"v{v}" for v in versions)
    try:
        ctx.triton.load_model(model, config=json.dumps(back), timeout_s=ctx.settings.rollback.load_timeout_s)
        if all(ctx.triton.model_version_ready(model, str(v)) for v in versions):
            return True, f"{listed} loaded again"
        return False, f"{listed} loaded again but not ready"
    except (TritonUnavailable, TritonRejected) as exc:
        return False, f"{listed} could not be loaded again either: {exc}"


def put_back_unloaded(ctx: StepContext, model: str, keeper: LeaseKeeper, triton_url: str = "") -> dict[str, str]:
    """An earlier holder unloaded the model on these replicas and may not have loaded it again
    (killed between the unload and the load): load again what each served, first of all. Only on a
    replica this rollback would heal (listed and not skipped: an IP that belongs to another pod now
    is not listed), and only if it serves nothing and its index says it once hosted the model. One
    that does not answer keeps its duty in the lease for the next holder; a duty older than
    PUT_BACK_MAX_AGE_S is dropped. Returns what happened per replica."""
    done: dict[str, str] = {}
    remaining: list[PutBack] = []
    listed = {t.url: t.skip for t in replica_targets_for(ctx, triton_url)}
    now = time.time()
    for duty in keeper.duties():
        if duty.since and now - duty.since > PUT_BACK_MAX_AGE_S:
            done[duty.replica] = f"dropped: written {now - duty.since:.0f} s ago"
            continue
        if duty.replica not in listed or listed[duty.replica]:
            why = listed.get(duty.replica) or "not a replica this rollback heals (no longer listed)"
            done[duty.replica] = f"dropped: {why}"
            continue
        with on_replica(ctx, duty.replica) as replica:
            if not triton_live(replica):
                remaining.append(duty)
                done[duty.replica] = "Triton not live: kept for the next holder"
                continue
            served = served_versions(replica, model)
            states = [] if served else _settled_index_states(replica, model)
            if not served and _BUSY_STATES.intersection(states):
                # The killed attempt's unload (or a load) is still going on in Triton: only once it
                # settles can anyone tell whether the replica is left unloaded.
                remaining.append(duty)
                done[duty.replica] = f"still {'/'.join(sorted(_BUSY_STATES.intersection(states)))}: kept"
                continue
            if served or "UNAVAILABLE" not in states:
                done[duty.replica] = "nothing to put back: " + (
                    f"serves v{', v'.join(served)}" if served else "never hosted the model"
                )
                continue
            loaded, done[duty.replica] = _put_back(replica, model, duty.config, [str(v) for v in duty.versions])
            log.warning(
                "put_back_after_interrupted_unload", model=model, replica=duty.replica, outcome=done[duty.replica]
            )
            if not loaded:
                remaining.append(duty)
    if tuple(remaining) != keeper.duties():
        keeper.set_duties(tuple(remaining))
    return done
