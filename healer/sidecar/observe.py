"""Observe-only, the sidecar's side (docs/observe.md): the I/O around healer/core/observe.py.

For a model in mode ``observe`` the loop (healer/sidecar/loop.py) hands the state machine's rollback or
escalation to ``Observer.plan`` instead of acting: it reads what a rollback would read (the ledger, the
replicas, the peers and the drain set), read-only and bounded, asks the pure rule for the ``Plan``, and
says it: a record ``healer runs list`` shows as Planned (``rollback.state_dir``, best effort), the
``healer_observed_decisions_total`` counter, a Normal Event (WouldRollback, WouldEscalate), a log line and
/status (``healer status``). Nothing is drained, submitted, loaded or written besides the plan's record.

The modes are read again when the settings file changes (``reload``: the mounted ConfigMap's file, by its
inode, mtime and size, once per probe cycle): only the modes; a file that does not load keeps the last good
ones, says so in the log, an Event and ``healer_settings_reloads_total{outcome="refused"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from healer.core.decisions import Peer
from healer.core.ledger import choose_restore_version
from healer.core.observe import (
    Asked,
    Decision,
    DrainView,
    Plan,
    Replicas,
    acted_on,
    drain_by_rule,
    drain_without_rule,
    kept_submission,
    mode_changes,
    modes,
    plan_of,
    state_after_switch,
)
from healer.core.state import Incident
from healer.edges.metrics import Registry
from healer.edges.settings_file import SettingsFile, SettingsRefused
from healer.settings import ModelSettings, Settings
from healer.settings.sections import MODE_OBSERVE
from healer.sidecar.clock import Clock
from healer.sidecar.drain import DrainKeeper, short_error
from healer.sidecar.handover import BoundedCalls
from healer.sidecar.info_word import InfoWord

log = structlog.get_logger("healer.sidecar")

PLAN_READS_S = 5.0  # everything one plan reads (ledger, replicas, peers, drain set), at most this long in all

DECISIONS = "healer_observed_decisions_total"
OBSERVED = "healer_model_observed"
RELOADS = "healer_settings_reloads_total"
DECISIONS_HELP = "What observed models' incidents would have led to (rollback, escalate, recovered): nothing was done."


class Observer:
    """Each model's mode, and the plans of the observed ones."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Registry,
        event: Callable[[str, str, str], None],
        clock: Clock,
        store_factory: Callable[[], Any] | None,
        drain_keeper: DrainKeeper,
        pod: str = "",
        triton_url: str = "",
        load: Callable[[str], Settings] | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._event = event
        self._clock = clock
        self._store_factory = store_factory
        self._store: Any = None
        self._keeper = drain_keeper
        self._pod = pod
        self._triton_url = triton_url
        self._calls = BoundedCalls(PLAN_READS_S)
        self.modes: dict[str, str] = modes(settings)
        self.plans: dict[str, Plan] = {}  # each model's last plan
        # model -> the incident whose rollback was decided while it acted, asked about since its switch to
        # observe (healer/sidecar/observe.py follow_handed): its end is told as any run's, never planned.
        self.handed: dict[str, str] = {}
        self.tell: Callable[[Plan, Incident], None] | None = None  # the info alert (healer/sidecar/info_word.py)
        self.info_word: InfoWord | None = None
        self._file = SettingsFile(settings.source, load)  # the same reader as the alert receiver's
        metrics.gauge(OBSERVED, "1 while a model is in observe mode: healer decides and records, never acts.")
        self._export_modes()

    @property
    def observing(self) -> frozenset[str]:
        return frozenset(name for name, mode in self.modes.items() if mode == MODE_OBSERVE)

    def view(self, model: str) -> dict[str, Any]:
        """The model's mode and last plan, for /status."""
        plan = self.plans.get(model)
        return {"mode": self.modes.get(model, ""), "plan": plan.to_dict() if plan is not None else None}

    # ---- the modes, read again when the file changes -------------------------------------------------------
    def reload(self) -> dict[str, tuple[str, str]]:
        """The modes from the settings file when it changed since last read: the models whose mode changed
        (name -> (before, after)); {} when nothing changed or the file was refused (the last good modes kept)."""
        source = self._file.source
        try:
            fresh = self._file.changed()
        except SettingsRefused as refused:  # the file names the key; the modes in force stay
            why = short_error(refused.__cause__ or refused)
            log.error("settings_reload_refused", file=source, error=why, kept="the last good modes")
            self._count(RELOADS, "Reads of the settings file after a change, by outcome.", {"outcome": "refused"})
            self._event("SettingsRefused", f"{source} not applied, the last good modes kept: {why}"[:1000], "Warning")
            return {}
        if fresh is None:
            return {}
        after = modes(fresh)
        changes = mode_changes(self.modes, after)
        self.modes.update({name: mode for name, mode in after.items() if name in self.modes})
        added = sorted(set(after) - set(self.modes))
        self._count(RELOADS, "Reads of the settings file after a change, by outcome.", {"outcome": "applied"})
        log.warning(
            "settings_reloaded",
            file=source,
            modes_changed={name: f"{a} -> {b}" for name, (a, b) in changes.items()},
            not_applied="only the modes are read again; every other key, and models added"
            + (f" ({', '.join(added)})" if added else "")
            + ", at the sidecar's restart",
        )
        for name, (before, now) in changes.items():
            self._event("ModeChanged", f"{name}: mode {before} -> {now} (read from {source})", "Normal")
        self._export_modes()
        return changes

    def _export_modes(self) -> None:
        for name, mode in self.modes.items():
            self._metrics.set(OBSERVED, {"model": name}, 1.0 if mode == MODE_OBSERVE else 0.0)

    def _count(self, name: str, help_text: str, labels: Mapping[str, str]) -> None:
        # Declared on first use: an acting sidecar exports no empty series of it.
        self._metrics.counter(name, help_text)
        self._metrics.inc(name, labels)

    # ---- a plan ---------------------------------------------------------------------------------------
    def plan(
        self,
        model: ModelSettings,
        incident: Incident,
        *,
        escalation: str | None,
        blamed: tuple[str, str] | None,
        my_readiness: Callable[[], bool],
    ) -> Plan:
        """What a rollback (``escalation`` None) or an escalation of ``incident`` would do, read and said;
        nothing of it done."""
        deadline = self._clock.monotonic() + PLAN_READS_S
        target, version = blamed if blamed is not None else (incident.model, incident.version)
        restore, restore_why, restore_read = self._restore(target, version, deadline)
        rollback = self._settings.rollback
        plan = plan_of(
            incident,
            escalation=escalation,
            restore=restore,
            restore_why=restore_why,
            restore_read=restore_read,
            drain=self._drain(model, deadline, my_readiness),
            replicas=self._replicas(deadline),
            parallelism=rollback.parallelism,
            max_parallelism=rollback.max_parallelism,
            one_at_a_time=rollback.order != "swap",
            blamed=blamed,
            planned_at=self._clock.wall(),
        )
        self.plans[model.name] = plan
        self._say(plan, detect_s=incident.detected_at - incident.first_bad_at)
        if self.tell is not None:
            self.tell(plan, incident)  # queued for a worker: never blocks the loop
        return plan

    def recovered(self, model: str, incident: Incident) -> None:
        """An observed model answers right again with nothing done: its incident is over."""
        self._count(DECISIONS, DECISIONS_HELP, {"model": model, "decision": Decision.RECOVERED.value})
        log.info("observed_decision", model=model, decision=Decision.RECOVERED.value, incident=incident.key)
        self._event("ObservedRecovered", f"{model}: answers right again; nothing was done (observe mode)", "Normal")

    def _bounded(self, label: str, what: str, call: Callable[[], Any], deadline: float) -> Any:
        left = deadline - self._clock.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what}: no time left of the plan's {PLAN_READS_S:g} s")
        return self._calls.run(label, what, call, timeout_s=left)

    def _opened(self, deadline: float) -> Any:
        if self._store is None:
            assert self._store_factory is not None
            self._store = self._bounded("observe-store", "open the store", self._store_factory, deadline)
        return self._store

    def _restore(self, model: str, failing: str, deadline: float) -> tuple[str | None, str, bool]:
        """(the version the rollback would restore, why, whether the ledger was read)."""
        if self._store_factory is None:
            return None, "no store configured: there is no stable version to restore", True
        try:
            store = self._opened(deadline)
            ledger = self._bounded("observe-store", "read the ledger", lambda: store.ledger(model), deadline)
            available = self._bounded("observe-store", "list the versions", lambda: store.versions(model), deadline)
        except Exception as exc:  # nothing learnt: the plan says so
            return None, f"the ledger could not be read: {short_error(exc)}", False
        choice = choose_restore_version(ledger, failing_version=failing, available=available)
        return (choice.record.version if choice.record is not None else None), choice.reason, True

    def _drain(self, model: ModelSettings, deadline: float, my_readiness: Callable[[], bool]) -> DrainView:
        """Would this pod leave the Service? The draining rule on the peers and the drain set, read only."""
        drain, source = self._keeper.settings, self._keeper.peers
        if not model.required or drain is None or source is None:
            return drain_without_rule(required=model.required)
        try:
            listed = self._bounded("observe-peers", "read the peers", source.peers, deadline)
            store = self._opened(deadline)
            drained = self._bounded(
                "observe-store", "read the drain set", lambda: dict(store.drain_set(drain.drain_set).drained), deadline
            )
        except Exception as exc:
            return DrainView(None, f"the peers or the drain set could not be read: {short_error(exc)}")
        me = source.me
        mine = next((p for p in listed if p.name == me), None)
        peers = [p for p in listed if p.name != me]
        if mine is not None or not source.lists_me:
            peers.append(Peer(me, my_readiness(), mine.terminating if mine is not None else False))
        return drain_by_rule(me, peers=peers, drained=drained, min_ready=drain.min_ready, now_wall=self._clock.wall())

    def _replicas(self, deadline: float) -> Replicas:
        from workflows.steps.context import replica_lister

        lister = replica_lister(self._settings)
        if lister is None:
            own = self._pod or self._triton_url or self._settings.triton.url
            return Replicas(names=(own,), own_only=True)
        try:
            targets = self._bounded("observe-replicas", "list the replicas", lister, deadline)
        except Exception as exc:
            return Replicas(error=short_error(exc))
        return Replicas(
            names=tuple(t.name or t.url for t in targets if not t.skip),
            skipped=tuple(f"{t.name or t.url}: {t.skip}" for t in targets if t.skip),
        )

    def _say(self, plan: Plan, *, detect_s: float) -> None:
        self._count(DECISIONS, DECISIONS_HELP, {"model": plan.model, "decision": plan.decision.value})
        written = self._write(plan)
        log.warning(
            "observed_decision",
            model=plan.model,
            version=plan.version,
            incident=plan.incident,
            decision=plan.decision.value,
            plan=plan.name,
            summary=plan.summary,
            restore=plan.restore,
            drain=plan.drain.drain,
            drain_why=plan.drain.why,
            waves=[list(w) for w in plan.waves],
            escalate=plan.escalate,
            detect_s=round(detect_s, 3),
            record=written,
        )
        reason = "WouldRollback" if plan.decision is Decision.ROLLBACK else "WouldEscalate"
        self._event(reason, f"{plan.model} v{plan.version}: {plan.summary} (plan {plan.name})"[:1000], "Normal")

    def _write(self, plan: Plan) -> str:
        """The plan's record beside the LocalEngine's runs (``healer runs list``); best effort: the plan is
        in /status and the Event either way. Returns where, or why not."""
        from healer.engines.records import RunRecords, plan_record

        state_dir = Path(self._settings.rollback.state_dir)
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            created = RunRecords(state_dir).create(plan.name, plan_record(plan, pod=self._pod))
        except OSError as exc:  # a read-only root filesystem, a full disk
            log.warning("plan_record_not_written", plan=plan.name, error=short_error(exc))
            return f"not written: {short_error(exc)}"
        return str(state_dir / f"{plan.name}.json") + ("" if created else " (recorded before)")


# ---- the loop's hooks (healer/sidecar/loop.py) ------------------------------------------------------------


def intercept(sidecar: Any, model: ModelSettings, action: Any) -> bool:
    """An action of the state machine for an observed model, planned instead of done; False: done as usual
    (an escalation or a restore of a rollback that ran: it was submitted while the model acted, and its end
    is told as any run's)."""
    if model.name not in sidecar.book.observing and not _planned_for_member(sidecar.observer, model, action):
        return False  # the model acts
    return _instead(sidecar, model, action)


def _instead(sidecar: Any, model: ModelSettings, action: Any) -> bool:
    from healer.core.state import Escalate, Restored, SubmitRollback

    observer: Observer = sidecar.observer
    incident: Incident = action.incident
    if incident.workflow or observer.handed.get(model.name) == incident.key:
        if isinstance(action, Restored):
            observer.handed.pop(model.name, None)  # its incident is over
        return False  # a rollback handed to an engine while the model acted: followed and told as any run's
    if isinstance(action, Restored):
        observer.recovered(model.name, incident)
        return True
    if not isinstance(action, SubmitRollback | Escalate):
        return False
    request = sidecar._request(incident)  # a pipeline's incident restores whom it blames
    blamed = (request.model, request.from_version) if request.model != incident.model else None
    plan = observer.plan(
        model,
        incident,
        escalation=action.why if isinstance(action, Escalate) else None,
        blamed=blamed,
        my_readiness=lambda: bool(sidecar.ready()[0]),
    )
    sidecar.book.hold(model.name, plan)
    return True


def _planned_for_member(observer: Observer, model: ModelSettings, action: Any) -> bool:
    """An acting pipeline's incident planned because the member it blames is observed: its end is the plan's."""
    from healer.core.state import Restored

    plan = observer.plans.get(model.name)
    return isinstance(action, Restored) and plan is not None and plan.incident == action.incident.key


def plan_for_member(sidecar: Any, model: ModelSettings, incident: Incident, blamed: Any) -> bool:
    """The hook before every submission (healer/sidecar/loop.py ``_try_submit``); True: not submitted. An
    observed model's submission is never made: one kept from before its switch to observe is asked about
    (``follow_handed``). An acting pipeline's incident that blames a composing model in observe mode: the
    member's rollback is planned (the observe path), never submitted (the pending submission dropped)."""
    from healer.core.state import SubmitRollback

    if model.name in sidecar.book.observing:
        follow_handed(sidecar, model, incident)
        return True
    if blamed is None or not blamed.member or blamed.model not in sidecar.book.observing:
        return False
    sidecar._pending.pop(model.name, None)
    _instead(sidecar, model, SubmitRollback(incident))
    return True


def follow_handed(sidecar: Any, model: ModelSettings, incident: Incident) -> None:
    """A rollback decided while the model acted, not known to be taken when it was switched to observe: an
    engine call may have landed (an answer lost, a call past its bound). Each engine built is asked whether
    it has the run (the names ``submit_incident`` would give), bounded; nothing is submitted. Present: the
    run is watched to its end as any other (RollbackSubmitted). Absent everywhere: nothing was handed over,
    the incident is planned. Unanswered: asked again next cycle; the healing timeout escalates it."""
    from healer.core.state import RollbackSubmitted, SubmitRollback
    from healer.sidecar.handover import Watched

    observer: Observer = sidecar.observer
    handovers = sidecar.handovers
    request = sidecar._request(incident)
    engines = dict(handovers.engines)
    answers = {label: _asked(handovers, label, engine, request, model.name) for label, engine in engines.items()}
    found = kept_submission(answers)
    if found.answer is Asked.UNANSWERED:
        log.warning("kept_rollback_unanswered", model=model.name, incident=incident.key, why=found.why)
        return
    sidecar._pending.pop(model.name, None)
    observer.handed.pop(model.name, None)
    if found.answer is Asked.ABSENT:
        log.info("kept_rollback_absent", model=model.name, incident=incident.key, why=found.why)
        _instead(sidecar, model, SubmitRollback(incident))
        return
    handovers.watching[model.name] = Watched(found.engine, engines[found.engine], found.workflow)
    sidecar._apply(model, RollbackSubmitted(sidecar.clock.monotonic(), found.workflow))
    log.warning(
        "rollback_followed",
        model=model.name,
        incident=incident.key,
        workflow=found.workflow,
        engine=found.engine,
        why="submitted before the model was switched to observe: watched to its end",
    )
    sidecar.notify.event(
        "RollbackStarted",
        f"{model.name} v{incident.version} → stable: {found.workflow} (submitted while it acted; now observed)",
        "Warning",
    )


def _asked(handovers: Any, label: str, engine: Any, request: Any, owner: str) -> tuple[Asked, str]:
    """Does ``engine`` have a run of this incident that a submission would join? (Asked, its name or why)."""
    import dataclasses

    from healer.core.decisions import joins_existing_run
    from healer.engines import EngineNotFound
    from healer.sidecar.handover import MAX_INCIDENT_RUNS
    from healer.vocabulary import workflow_name

    for n in range(1, MAX_INCIDENT_RUNS + 1):
        attempt = request if n == 1 else dataclasses.replace(request, incident=f"{request.incident}-r{n}")
        name = workflow_name(attempt)
        try:
            status = handovers._calls.run(label, "status", lambda name=name: engine.status(name), owner=owner)
        except EngineNotFound:
            return Asked.ABSENT, f"{label}: no run {name}"
        except Exception as exc:  # unreachable, refused, a call of ours still hanging: nothing learnt
            return Asked.UNANSWERED, f"{label}: {short_error(exc)}"
        if joins_existing_run(done=status.done, succeeded=status.succeeded):
            return Asked.PRESENT, name
    return Asked.UNANSWERED, f"{label}: {MAX_INCIDENT_RUNS} earlier runs of incident {request.incident}"


def observer_for(sidecar: Any, store_factory: Callable[[], Any] | None) -> Observer:
    """The sidecar's Observer (its settings, metrics, Events, clock, drain keeper), its observed models
    taken out of the drain (healer/sidecar/book.py ``observing``)."""
    observer = Observer(
        sidecar.settings,
        metrics=sidecar.metrics,
        event=sidecar.notify.event,
        clock=sidecar.clock,
        store_factory=store_factory,
        drain_keeper=sidecar.drain_keeper,
        pod=sidecar.pod,
        triton_url=sidecar.triton_url,
    )
    sidecar.book.observing = observer.observing
    word = InfoWord(sidecar.settings.rollback.alert, sidecar.notify.post)  # rollback.alert.info: an info alert
    observer.tell = lambda plan, incident: word.observed(plan, incident, wall_of=sidecar.notify.wall_of)
    observer.info_word = word
    return observer


def reload_modes(sidecar: Any) -> None:
    """The modes read again when the settings file changed; a model switched to act starts its detection
    over when its plan was held (healer/core/observe.py ``state_after_switch``), and the drain follows the
    new modes. A model switched to observe keeps the incident healer acts on to its end (a rollback running
    or maybe handed to an engine; an escalation): the switch takes effect at its next incident. Never
    raises: a bug here leaves the modes as they were, the cycle goes on."""
    try:
        observer: Observer = sidecar.observer
        changes = observer.reload()
        if not changes:
            return
        book = sidecar.book
        with book.lock:
            for name, (_before, after) in changes.items():
                state, planned = book.states[name], book.planned.get(name)
                book.states[name] = state_after_switch(state, to=after, planned=planned)
                if after != MODE_OBSERVE:
                    book.planned.pop(name, None)
                    observer.handed.pop(name, None)
                    continue
                pending = sidecar._pending.get(name)
                if pending is not None:  # decided while acting, maybe taken: asked about, never submitted
                    observer.handed[name] = pending.key
                if acted_on(state, planned):
                    _say_deferred(name, state, pending is not None)
            book.observing = observer.observing
    except Exception:
        log.exception("modes_not_reloaded")


def _say_deferred(model: str, state: Any, asked: bool) -> None:
    incident = state.incident
    log.warning(
        "observe_from_next_incident",
        model=model,
        incident=incident.key if incident is not None else None,
        workflow=incident.workflow if incident is not None else "",
        state=state.phase.value,
        why=(
            "switched to observe while healer acts on this incident"
            + (" (a rollback decided, maybe taken by an engine: asked, never submitted again)" if asked else "")
            + ": followed to its end as an acting model's, the pod drained for it meanwhile; "
            "the next incident is planned"
        ),
    )
