"""Running drills in-process (I/O): sidecars next to each replica, inject, watch, judge, clean up.

For each scenario: the replicas it needs (the target's Triton; a second one for the storm; a
dedicated one to kill), one real ``Sidecar`` per replica probing every ``period_s`` with the
configured thresholds, and the rollback engine (the LocalEngine over the same template Argo runs,
healing every replica of the scenario; or the ArgoEngine). The baseline must be healthy and ready
on every replica before anything is broken. Then the injection, and a ``Watch`` from that moment:
detection, drain, escalation, the workflow(s), and the golden request on every replica until it
passes again. Whatever happened, the target ends on its stable version (``restore_stable``,
bounded) and the extra Tritons are stopped.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from healer.core.drill_catalog import Injection, Scenario
from healer.core.drill_verdict import DrillResult, Observation, finished, judge
from healer.drills.agreement import release_settings
from healer.drills.observed import check_untouched, watch_notes, watching
from healer.drills.outside_alert import run_alert
from healer.drills.phases import release_floor_s, run_phases
from healer.drills.traffic_signal import SingleRowClients, clients_for, with_detected_by, with_traffic_signal
from healer.edges.logs import iso_utc
from healer.edges.processes import free_port
from healer.engines import RollbackEngine
from healer.settings import REPOSITORY_PER_POD, DrainSettings, ReplicaSettings, Settings
from workflows.steps.drill_inject import (
    DrillTarget,
    Injected,
    InjectionFailed,
    after_restart,
    delete_served_files,
    healed_back,
    injected_for,
    member_target,
    next_version,
    push_again,
    push_and_serve,
    push_with_config,
    put_version,
    restore_stable,
    retrain_source,
    served,
    stable_record,
    tamper_stable,
    unmount_store,
)
from workflows.steps.drill_observe import GoldenWatch, HttpView, LocalView, SidecarView, Traffic, Watch, sample

log = structlog.get_logger(__name__)
_DRILL_SETS = itertools.count(1)

INTERVAL_S = 0.02  # how often the watch samples the sidecars
BASELINE_TIMEOUT_S = 30.0
RELEASE_GIVE_UP_S = 300.0  # a drill's release that has not ended by then is reported as it stands
STOP_TIMEOUT_S = 30.0


@dataclass
class _Running:
    """One sidecar probing in its own thread (and serving its endpoints when peers must read them)."""

    sidecar: Any
    view: SidecarView
    server: Any = None
    address: str = ""  # host:port of its listener, when it serves one
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        if self.server is not None:
            self.server.start()
        self.thread = threading.Thread(target=self.sidecar.run, args=(self.stop,), name="drill-sidecar", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(STOP_TIMEOUT_S)
        if self.server is not None:
            self.server.stop()
        self.sidecar.triton.close()


ReplicaFactory = Callable[[str], Any]  # name -> a started EmbeddedTriton-like object (url, kill(), stop())
# A model's name -> the target aimed at it (its stable version promoted and served), for a scenario that
# breaks a model of its own; raises InjectionFailed or StackError when that model cannot be drilled.
TargetFactory = Callable[[str], DrillTarget]
Progress = Callable[[str, Scenario, DrillResult | None], None]  # ("start" | "done", scenario, result)


class DrillRunner:
    def __init__(
        self,
        target: DrillTarget,
        *,
        scratch: Path,
        engine: str = "local",
        start_replica: ReplicaFactory | None = None,
        stop_replica: Callable[[Any], None] | None = None,
        progress: Progress | None = None,
        recover: Callable[[], list[str]] | None = None,
        reset: Callable[[], None] | None = None,
        target_for: TargetFactory | None = None,
    ) -> None:
        self.target = target
        self.target_for = target_for
        self.scratch = scratch
        self.engine_kind = engine
        self._start_replica = start_replica
        self._stop_replica = stop_replica or (lambda replica: replica.stop())
        self._progress = progress or (lambda *_: None)
        self._recover = recover
        self._reset = reset  # the stack's repository as found, before the stable version is settled

    @property
    def settings(self) -> Settings:
        return self.target.settings

    @property
    def period_s(self) -> float:
        return self.settings.sidecar.period_s

    def run_all(self, scenarios: Sequence[Scenario]) -> list[DrillResult]:
        results = []
        for scenario in scenarios:
            self._progress("start", scenario, None)
            result = self.run(scenario)
            self._progress("done", scenario, result)
            results.append(result)
        return results

    # ---- one scenario ------------------------------------------------------------------------------
    def run(self, scenario: Scenario) -> DrillResult:
        if scenario.model and scenario.model != self.target.model:
            return _aimed(self, scenario)
        if scenario.injection is Injection.RELEASE or scenario.alert:
            return self._run_release(scenario) if not scenario.alert else run_alert(self, scenario)
        budget_s = self.settings.rollback.deadline_s
        extra: list[Any] = []
        running: list[_Running] = []
        injected: Injected | None = None
        watch: Watch | None = None
        engine: RollbackEngine | None = None
        replicas: list[str] = []
        notes: list[str] = []
        error = ""
        traffic: Traffic | SingleRowClients | None = None
        try:
            replicas = self._replicas(scenario, extra)
            ports = [free_port() for _ in replicas]
            engine = self._engine(scenario, replicas, ports)
            running = self._sidecars(scenario, replicas, ports, engine)
            wait_baseline(running, self.target.model)
            before = sample([r.view for r in running], self.target.model)
            injected = injected_for(pushed_target(self.target, scenario))
            traffic = clients_for(scenario, replicas, self.target)  # the golden request, or single rows
            killed = self._inject(scenario, injected, replicas, extra)
            watch = Watch(injected.at, wrong_before=before.wrong_answers)
            watching(watch, scenario, self.settings, self.target.model)  # observe mode: the files as pushed
            if killed:
                watch.mark("killed", f"SIGKILL to Triton {replicas[0]}")
            self._watch(scenario, watch, [r.view for r in running], replicas, injected)
            check_untouched(watch, self.settings, self.target.model, replicas, injected)  # observe: before clean-up
            if engine is not None:
                watch.phases = [span for name in watch.workflows for span in run_phases(engine, name, injected)]
        except Exception as exc:  # the drill's own failure: reported, and the target still cleaned up
            error = _failure(scenario, exc)
        finally:
            if traffic is not None:
                traffic.stop()
            notes += self._clean_up(running, engine, injected, watch, replicas, extra, budget_s) + watch_notes(watch)
        observation = watch.observation() if watch is not None else Observation(error=error or "not injected")
        if error:
            observation = dataclasses.replace(observation, error=error)
        if traffic is not None:
            observation = dataclasses.replace(observation, requests=traffic.requests, wrong_served=traffic.wrong)
        observation = with_detected_by(scenario, observation, engine)  # the traffic signal's drill
        verdict = judge(scenario, observation, budget_s)
        started = iso_utc(injected.wall) if injected is not None and injected.wall else ""
        return DrillResult(scenario, observation, verdict, budget_s, started_at=started, notes=tuple(notes))

    # ---- releases ------------------------------------------------------------------------------------
    def _run_release(self, scenario: Scenario) -> DrillResult:
        """`healer release` of a new version (the scenario's variant, else a good retrain) across the
        scenario's replicas, with their sidecars probing as usual and clients sending requests: which
        replicas ever served the new version, where each ended, the run's outcome and length."""
        extra: list[Any] = []
        running: list[_Running] = []
        injected: Injected | None = None
        engine: RollbackEngine | None = None
        replicas: list[str] = []
        traffic: Traffic | None = None
        watch: Watch | None = None
        notes: list[str] = []
        error = ""
        found: dict[str, Any] = {}
        try:
            replicas = self._replicas(scenario, extra)
            ports = [free_port() for _ in replicas]
            engine = self._engine(scenario, replicas, ports)
            running = self._sidecars(scenario, replicas, ports, engine)
            wait_baseline(running, self.target.model)
            injected = Injected(stable_record(self.target))
            source = (
                self.target.variant(scenario.variant) if scenario.variant else retrain_source(self.target, injected)
            )
            version = next_version(self.target)
            put_version(self.target, version, source, injected)
            injected.version = version
            if scenario.traffic:
                traffic = Traffic(replicas, self.target.model_settings, suite_of=self.target.suite).start()
            injected.mark_now()
            watch = Watch(injected.at)
            found = self._release(scenario, injected, replicas, watch, running)
        except Exception as exc:  # the drill's own failure: reported, and the target still cleaned up
            error = _failure(scenario, exc)
        finally:
            if traffic is not None:
                traffic.stop()
            notes += self._clean_up(running, engine, injected, None, replicas, extra, self.settings.rollback.deadline_s)
        base = watch.observation() if watch is not None else Observation(error=error or "not injected")
        observation = dataclasses.replace(
            base,
            error=error or base.error,
            requests=traffic.requests if traffic is not None else 0,
            wrong_served=traffic.wrong if traffic is not None else 0,
            **found,
        )
        verdict = judge(scenario, observation, self.settings.rollback.deadline_s)
        started = iso_utc(injected.wall) if injected is not None and injected.wall else ""
        return DrillResult(
            scenario, observation, verdict, self.settings.rollback.deadline_s, started_at=started, notes=tuple(notes)
        )

    def _release(
        self, scenario: Scenario, injected: Injected, replicas: list[str], watch: Watch, running: list[_Running]
    ) -> dict[str, Any]:
        """Run the release (the LocalEngine over the healer-release template) and watch the replicas."""
        from healer.engines.factory import local_release_engine
        from healer.vocabulary import ReleaseRequest

        assert injected.version is not None
        version, model = injected.version, self.target.model
        views = [r.view for r in running]
        aimed = _aimed_at(self.settings, replicas, [r.address for r in running] if self._per_pod else [])
        settings = release_settings(aimed, scenario, model, check_interval_s=min(0.5, self.period_s))
        releases = local_release_engine(settings, state_dir=self.scratch / "releases" / scenario.name)
        request = ReleaseRequest(
            model=model, version=version, release=f"drill-{scenario.name}-{int(time.time())}", bake_s=scenario.bake_s
        )
        name = releases.submit_release(request).name
        watch.mark("release-submitted", name)
        touched: set[str] = set()
        stopped = False
        give_up = time.monotonic() + RELEASE_GIVE_UP_S
        # Bounded by RELEASE_GIVE_UP_S: every pass returns or sleeps; each served() call has its timeout.
        while True:
            for url in replicas:
                try:
                    if version in served(url, model, timeout_s=2.0) and url not in touched:
                        touched.add(url)
                        watch.mark("serving-new", f"{url} serves v{version}")
                except Exception:  # noqa: S112 - a replica not answering one sample is sampled again
                    continue
            nodes = {n.get("displayName"): n for n in (releases.get(name)["status"].get("nodes") or {}).values()}
            if scenario.stop_halfway and not stopped and "bake" in nodes:
                releases.stop(name)
                stopped = True
                watch.mark("stopped", "the release stopped by hand during the bake")
            watch.see(sample(views, model))  # the sidecars keep probing: a rollback they start shows here
            status = releases.status(name)
            if status.done or time.monotonic() >= give_up:
                break
            time.sleep(INTERVAL_S * 2.5)
        for display, node in nodes.items():
            if node.get("type") == "Retry" and node.get("phase") in {"Failed", "Succeeded"}:
                watch.mark(f"release-{display}", f"{display}: {node.get('phase')} {node.get('message', '')}".strip())
        watch.mark("release-ended", f"{name} {status.phase}")
        ended = [served(url, model, timeout_s=5.0) for url in replicas]
        stable = injected.stable.version
        ledger = self.target.store.ledger(model)
        return {
            "release_floor_s": release_floor_s(status.outputs, scenario.bake_s),
            "release_phase": status.phase if status.done else "Running",
            "release_s": watch.now_s(),
            "touched": len(touched),
            "released_everywhere": all(v == [version] for v in ended) and ledger.stable_record(version) is not None,
            "back_on_stable": all(v == [stable] for v in ended),
            "quarantined": ledger.is_quarantined(version),
        }

    def _clean_up(
        self,
        running: list[_Running],
        engine: RollbackEngine | None,
        injected: Injected | None,
        watch: Watch | None,
        replicas: list[str],
        extra: list[Any],
        budget_s: float,
    ) -> list[str]:
        """Stop the sidecars, wait for rollbacks, check a healed model survives a restart, then put
        the target back on its stable version. Returns the notes for the report."""
        notes: list[str] = []
        for r in running:
            r.close()
        drain = getattr(engine, "drain", None)
        if drain is not None:
            still = drain(budget_s)
            if still:
                notes.append(f"rollbacks still running at cleanup: {', '.join(still)}")
        if injected is not None:
            live = [u for u in replicas if not any(getattr(x, "url", None) == u and x.killed for x in extra)]
            if watch is not None and watch.restore_s is not None and live and injected.version:
                # Healed: does it stay healed when a replica restarts? Checked with the sidecars stopped,
                # or a second incident would be healed by the override again and hide it.
                watch.after_restart = after_restart(injected.aimed or self.target, live[0], injected.version)
            if self._reset is not None:
                try:
                    self._reset()
                except OSError as exc:
                    notes.append(f"cleanup: {exc}")
            problems = restore_stable(injected.aimed or self.target, injected, urls=live or None)
            notes += [f"cleanup: {p}" for p in problems]
            if problems and self._recover is not None:
                notes.append("cleanup: the target's Triton was restarted")
                notes += [f"cleanup after the restart: {p}" for p in self._recover()]
        for replica in extra:
            self._stop_replica(replica.server)
        return notes

    # ---- set-up ------------------------------------------------------------------------------------
    def _replicas(self, scenario: Scenario, extra: list[Any]) -> list[str]:
        needs_replicas = scenario.injection is Injection.KILL_TRITON or scenario.replicas > 1
        if needs_replicas and self._start_replica is None:
            raise InjectionFailed("this target cannot start Triton replicas (the embedded stack can)")
        if scenario.injection is Injection.KILL_TRITON:
            replica = _Extra(self._start_replica("killed") if self._start_replica else None)
            extra.append(replica)
            return [replica.url]
        urls = list(self.target.replicas)
        for i in range(1, scenario.replicas):
            replica = _Extra(self._start_replica(f"replica-{i}") if self._start_replica else None)
            extra.append(replica)
            urls.append(replica.url)
        return urls

    def _engine(self, scenario: Scenario, replicas: list[str], ports: list[int]) -> RollbackEngine:
        """One engine for the whole replica set (as Argo is): it heals every replica of the scenario."""
        from healer.engines.factory import argo_engine, local_engine

        if self.engine_kind == "argo":
            # The cluster's own healer.yaml lists its replicas (the Kubernetes API) for Argo's heal pod.
            return argo_engine(self.settings)
        sidecars = [f"127.0.0.1:{port}" for port in ports] if self._per_pod else []
        return local_engine(
            _aimed_at(self.settings, replicas, sidecars), state_dir=self.scratch / "runs" / scenario.name
        )

    @property
    def _per_pod(self) -> bool:
        return self.settings.repository_mode == REPOSITORY_PER_POD

    def _sidecars(
        self, scenario: Scenario, replicas: list[str], ports: list[int], engine: RollbackEngine
    ) -> list[_Running]:
        from healer.compose import build_sidecar
        from healer.sidecar import HttpPeers
        from healer.sidecar.views import SidecarServer

        urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
        # One drain set for the drill's replica set, as a Deployment's pods share one: the rule serialises
        # admissions through it. (A set per sidecar let both admit themselves at once, each seeing the
        # other still ready: both left the Service on a busy machine, issue 27 item 10.)
        set_name = f"drill-{self.target.model[:60]}-{os.getpid()}-{next(_DRILL_SETS)}"
        running = []
        for i, (url, port) in enumerate(zip(replicas, ports, strict=True)):
            settings = _sidecar_settings(
                _aimed_at(self.settings, replicas, [f"127.0.0.1:{p}" for p in ports] if self._per_pod else []),
                url=url,
                listen=f"127.0.0.1:{port}",
                scenario=scenario,
            )
            peers = None
            if scenario.drain_rule:
                drain = DrainSettings(
                    min_ready=1,
                    peer_urls=urls,
                    keep_decision_s=10.0,
                    timeout_s=1.0,
                    # Its own set per drill: a drill against the configured target writes into the real
                    # store, where "default" could be a replica set's own drain set.
                    set_name=set_name,
                )
                settings = dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, drain=drain))
                peers = HttpPeers(f"drill/triton-{i}", urls, timeout_s=1.0)
            sidecar = build_sidecar(
                settings,
                engine_factory=lambda engine=engine: engine,  # type: ignore[misc]
                pod=f"drill/triton-{i}",
                triton_url=url,
                peers=peers,
            )
            stager = pod_stager(self.target, settings, url) if self._per_pod else None
            if scenario.drain_rule or stager is not None:
                server = SidecarServer(sidecar, settings.sidecar.listen, stager=stager)
                view: SidecarView = (
                    HttpView(f"triton-{i}", f"http://{settings.sidecar.listen}")
                    if scenario.drain_rule
                    else LocalView(f"triton-{i}", sidecar)
                )
                running.append(_Running(sidecar, view, server, address=settings.sidecar.listen))
            else:
                running.append(_Running(sidecar, LocalView(f"triton-{i}", sidecar)))
        for r in running:
            r.start()
        return running

    # ---- breaking it ---------------------------------------------------------------------------------
    def _inject(self, scenario: Scenario, injected: Injected, replicas: list[str], extra: list[Any]) -> bool:
        """Break the target as the scenario says; ``injected`` records the moment and the undo. True: killed."""
        target = injected.aimed or self.target
        kind = scenario.injection
        if kind in {Injection.PUSH, Injection.FLAP, Injection.STORM}:
            push_and_serve(target, target.variant(scenario.variant), injected, replicas)
        elif kind is Injection.PUSH_CONFIG:
            push_with_config(target, target.variant(scenario.variant), injected)
        elif kind is Injection.PUSH_WITHIN_TOLERANCE:
            push_and_serve(target, retrain_source(target, injected), injected, replicas)
        elif kind is Injection.DELETE_FILES:
            delete_served_files(target, injected, self.scratch / "backup" / scenario.name)
        elif kind is Injection.STORE_DOWN:
            push_and_serve(target, target.variant(scenario.variant), injected, replicas)
            unmount_store(target, injected)
        elif kind is Injection.STABLE_BROKEN:
            push_and_serve(target, target.variant(scenario.variant), injected, replicas)
            tamper_stable(target, injected)
        elif kind is Injection.KILL_TRITON:
            victim = extra[0]
            injected.mark_now()
            victim.kill()
            return True
        return False

    # ---- watching ------------------------------------------------------------------------------------
    def _watch(
        self, scenario: Scenario, watch: Watch, views: list[SidecarView], replicas: list[str], injected: Injected
    ) -> None:
        thresholds = self.settings.sidecar
        quiet_s = max(2.0, (thresholds.business.failure_threshold + 2) * self.period_s)
        give_up_s = (
            self.settings.rollback.deadline_s
            + (thresholds.business.failure_threshold + thresholds.business.success_threshold + 2) * self.period_s
            + 30.0
        )
        golden = GoldenWatch(replicas, self.target.model_settings, suite_of=self.target.suite)
        pushes = 1
        flaps = scenario.max_rollbacks or self.settings.sidecar.max_rollbacks
        try:
            while True:
                seen = sample(views, self.target.model)
                watch.see(seen)
                if watch.workflows and watch.restore_s is None and healed_back(golden, scenario, replicas, injected):
                    watch.restored()
                if (
                    scenario.injection is Injection.FLAP
                    and pushes <= flaps
                    and len(watch.workflows) == pushes
                    and watch.final_state == "healthy"
                    and golden.restored(injected.version)
                ):
                    pushes += 1
                    push_again(self.target, self.target.variant(scenario.variant), injected)
                    watch.mark("pushed-again", f"v{injected.version} deployed again ({pushes})")
                    continue
                # A flapping model: after the last push, wait for the breaker (or the hard end), not a heal.
                flapping = scenario.injection is Injection.FLAP and watch.escalate_s is None
                elapsed = watch.now_s()
                if (
                    not flapping
                    and finished(scenario, watch.observation(), elapsed_s=elapsed, quiet_s=quiet_s, give_up_s=give_up_s)
                ) or elapsed >= give_up_s:
                    break
                time.sleep(INTERVAL_S)
            watch.model_loaded = golden.loaded()
            watch.mark("end", "the watch ended")
        finally:
            golden.close()


def pushed_target(target: DrillTarget, scenario: Scenario) -> DrillTarget:
    """What the scenario's push breaks: the target, or the composing model of it the scenario names."""
    return member_target(target, scenario.member) if scenario.member else target


def _aimed(runner: DrillRunner, scenario: Scenario) -> DrillResult:
    """A scenario that breaks a model of its own: the same run, aimed at that model's target."""
    from healer.drills.stack import StackError

    try:
        if runner.target_for is None:
            raise InjectionFailed(f"this target drills {runner.target.model} only, not {scenario.model}")
        target = runner.target_for(scenario.model)
    except (InjectionFailed, StackError) as exc:
        observation = Observation(error=f"{scenario.model}: {exc}")
        budget_s = runner.settings.rollback.deadline_s
        return DrillResult(scenario, observation, judge(scenario, observation, budget_s), budget_s)
    aimed = copy.copy(runner)
    aimed.target = target
    return aimed.run(scenario)


def pod_stager(target: DrillTarget, settings: Settings, url: str) -> Any:
    """per-pod: the sidecar's staging endpoints over its replica's own repository (None otherwise)."""
    from healer.sidecar.stage import stager_from_settings

    repository = target.pods.get(url)
    if repository is None:
        raise InjectionFailed(f"per-pod: no repository of its own known for the replica {url}")
    return stager_from_settings(dataclasses.replace(settings, live_repository=repository))


def wait_baseline(running: list[_Running], model: str) -> None:
    """Before breaking anything: every sidecar has probed twice, the model is healthy and every replica ready."""
    deadline = time.monotonic() + BASELINE_TIMEOUT_S
    while time.monotonic() < deadline:
        statuses = [r.view.status() for r in running]
        if all(
            s.get("cycles", 0) >= 2 and s["models"][model]["state"] == "healthy" and r.view.readyz() == 200
            for s, r in zip(statuses, running, strict=True)
            if s
        ) and all(statuses):
            return
        time.sleep(INTERVAL_S)
    raise InjectionFailed(f"baseline: {model} not healthy and ready on every replica within {BASELINE_TIMEOUT_S:g} s")


def _failure(scenario: Scenario, exc: Exception) -> str:
    """Why a drill could not run as planned: an injection that failed says so; anything else is the
    drill's own bug, logged with its traceback."""
    if isinstance(exc, InjectionFailed):
        return str(exc)
    log.exception("drill_failed", scenario=scenario.name)
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Extra:
    """A Triton the runner started for one scenario."""

    server: Any
    killed: bool = False

    @property
    def url(self) -> str:
        return str(self.server.url)

    def kill(self) -> None:
        self.killed = True
        self.server.kill()


def _aimed_at(settings: Settings, replicas: list[str], sidecars: Sequence[str] = ()) -> Settings:
    """The drill's settings aimed at its replica set, as a healer.yaml without Kubernetes says it:
    triton.url the first replica, rollback.replicas.addresses every one (a rollback and a release
    heal them all through that setting), each with its sidecar's listener where given (per-pod:
    ``{triton: host:port, sidecar: host:port}``, the sidecar stages into its replica's repository)."""
    addresses = ReplicaSettings(addresses=tuple(replicas), sidecars=tuple(sidecars))
    return dataclasses.replace(
        settings,
        triton=dataclasses.replace(settings.triton, url=replicas[0]),
        rollback=dataclasses.replace(settings.rollback, replicas=addresses),
    )


def _sidecar_settings(settings: Settings, *, url: str, listen: str, scenario: Scenario) -> Settings:
    from healer.drills.stack import sidecar_settings_for

    settings = sidecar_settings_for(settings, url=url, listen=listen, max_rollbacks=scenario.max_rollbacks)
    if scenario.traffic_signal:  # the sidecars judge real traffic from Triton's metrics (docs/traffic-signal.md)
        settings = with_traffic_signal(settings, url)
    if not scenario.mode:
        return settings
    # observe: the sidecars only decide and record (docs/observe.md)
    return dataclasses.replace(settings, sidecar=dataclasses.replace(settings.sidecar, mode=scenario.mode))
