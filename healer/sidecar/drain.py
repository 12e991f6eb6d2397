"""This pod's place in its replica set's drain set: the I/O around one drain decision.

Each cycle the loop says whether the pod wants to drain; the keeper reads the peers (only when
wanting), updates the drain set in the store with compare-and-swap, and asks the pure rule
(healer/core/decisions.py ``drain_plan``, ``drain_decision``) what /readyz should say. Whatever fails on the
way (the peers, the store, a bug), nothing was learnt, and the rule says what that means: never
start a drain, keep one for a while.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import structlog

from healer.core.decisions import (
    DrainDecision,
    DrainPlan,
    Peer,
    drain_decision,
    drain_plan,
    drain_standing,
    drain_wishes_gone,
)
from healer.edges.metrics import Registry
from healer.engines import EngineError
from healer.settings import DrainSettings, Settings
from healer.sidecar.clock import Clock
from healer.sidecar.handover import BoundedCalls
from healer.sidecar.peers import PeerSource, PeersUnavailable

log = structlog.get_logger("healer.sidecar")

DRAIN_CAS_ATTEMPTS = 4  # lost races on the drain set in one cycle before re-deciding next cycle


def short_error(exc: BaseException) -> str:
    """An exception as one bounded line: ours say what happened; anything else also says what it is."""
    text = str(exc)
    return (text if isinstance(exc, PeersUnavailable | EngineError) else f"{type(exc).__name__}: {text}")[:300]


class DrainKeeper:
    """The drain decision /readyz follows when ``sidecar.drain`` is set (``rule``); without it there is
    nothing to keep: a pod that wants to drain does. ``store_factory`` opens the store the drain set
    lives in (the Sidecar passes the configured one, healer/sidecar/loop.py lazy_store); None: no store."""

    def __init__(
        self,
        settings: Settings,
        peers: PeerSource | None,
        *,
        store_factory: Callable[[], Any] | None,
        metrics: Registry,
        clock: Clock,
    ) -> None:
        self.settings: DrainSettings | None = settings.sidecar.drain
        self.peers = peers if self.settings is not None else None
        # The drain set lives in the store (built on first use, within the drain's own bound).
        self._store_factory = store_factory
        self._store: Any = None
        self._calls = BoundedCalls(self.settings.store_timeout_s if self.settings else 5.0)
        self._metrics = metrics
        self._clock = clock
        # Whether this pod may be in the drain set or have a wish there: unknown at start-up (what a
        # previous run of this pod left behind is removed on the first cycle), then what the last read
        # or write said. While it wants to drain its wish is there, and another pod may admit it.
        self._maybe_in_set = True
        self._wished = False  # this pod's wish is known to be in the store (written or read this run)
        self.in_set_since: float | None = None
        self.decision = DrainDecision(False, "")  # replaced whole, so a reader sees one decision
        self._held = False
        self._trouble = ""
        metrics.gauge("healer_drain_wanted", "1 while a required model is failing, healing or escalated.")
        metrics.gauge(
            "healer_drain_held_back",
            "1 while the pod wants to drain but stays in the Service (sidecar.drain.min_ready).",
        )

    @property
    def rule(self) -> bool:
        """The draining rule is on: a pod leaves the Service only once admitted to the drain set."""
        return self.peers is not None

    def decide(self, *, wants: bool, stopping: bool, my_readiness: Callable[[], bool]) -> None:
        """Read the peers and the drain set, apply the rule with compare-and-swap, and decide /readyz.
        ``my_readiness``: this pod's /readyz now, as the peers would see it."""
        drain = self.settings
        if self.peers is None or drain is None:
            return
        now = self._clock.monotonic()
        plan: DrainPlan | None = None
        trouble = ""
        # A pod that does not want to drain and is not in the set has nothing to read or write.
        if wants or self._maybe_in_set:
            try:
                plan = self._view(wants, drain, stopping=stopping, my_readiness=my_readiness)
            except Exception as exc:
                trouble = short_error(exc)
                # Said once per kind of trouble, not every period while the store or the peers are down.
                if trouble != self._trouble:
                    log.warning("drain_view_unavailable", wants=wants, error=trouble)
        self._trouble = trouble
        self._set(wants, self._decision(wants, plan, trouble, now))

    def without_a_view(self, *, wants: Callable[[], bool], trouble: str) -> None:
        """The drain decision when deciding itself failed (a bug): as if nothing was learnt. ``wants`` is
        asked in here, so that it failing too (the same bug) still ends in "serving"."""
        try:
            assert self.settings is not None
            wanted = wants()
            self._set(wanted, self._decision(wanted, None, trouble, self._clock.monotonic()))
        except Exception:  # even that failed: serve (never empty the Service on a bug)
            log.exception("drain_decision_failed")
            self.decision = DrainDecision(False, f"held back: deciding failed ({trouble}): serving")

    def _decision(self, wants: bool, plan: DrainPlan | None, trouble: str, now: float) -> DrainDecision:
        assert self.settings is not None
        return drain_decision(
            wants=wants,
            plan=plan,
            last=self.decision,
            now=now,
            keep_decision_s=self.settings.keep_decision_s,
            trouble=trouble,
        )

    def _view(
        self, wants: bool, drain: DrainSettings, *, stopping: bool, my_readiness: Callable[[], bool]
    ) -> DrainPlan:
        """The I/O of one drain decision: the peers (only when wanting), then the drain set updated
        with compare-and-swap (a lost race re-reads and re-plans, a few times; then next cycle)."""
        source = self.peers
        assert source is not None
        peers = None
        if wants:
            listed = self._calls.run("drain-peers", "read the peers", source.peers, timeout_s=source.timeout_s + 1.0)
            peers = self._with_me(listed, stopping=stopping, my_readiness=my_readiness)
        store = self._store_built(drain)
        me, name, now_wall = source.me, drain.drain_set, self._clock.wall()

        def plan(drained: Mapping[str, float], wishers: Collection[str] = ()) -> DrainPlan:
            return drain_plan(
                me,
                wants=wants,
                peers=peers,
                drained=drained,
                min_ready=drain.min_ready,
                now_wall=now_wall,
                wishers=wishers,
            )

        wished = self._wished

        def update() -> Any:
            if not wants:
                return store.leave_drain_set(name, me, had_wish=wished, attempts=DRAIN_CAS_ATTEMPTS)
            if not wished:
                # Said once, in a key of its own: the pod whose admission is written next admits this one
                # too while it fits, so N pods wanting at once do not race for each of the K places.
                store.wish_to_drain(name, me)
            written = store.update_drain_set_seen(
                name, lambda seen: plan(seen.drained, seen.wishes).drained, attempts=DRAIN_CAS_ATTEMPTS
            )
            gone = drain_wishes_gone(written.wishes, peers or ()) if written.written else frozenset()
            if gone:  # dropped by the one pod that just wrote, not by every pod that reads them
                try:
                    store.forget_wishes(name, gone)
                except Exception as exc:  # bookkeeping: never the decision's failure
                    log.warning("drain_wishes_not_forgotten", pods=sorted(gone), error=short_error(exc))
            return written

        if wants:
            self._maybe_in_set = True  # its wish is (or may be) there from now on: another pod may admit it
        written = self._calls.run("drain-set", "update the drain set", update, timeout_s=drain.store_timeout_s)
        # Wanting: the wish is there and another pod may admit this one; not wanting: out, and sealed.
        self._wished = wants
        self._maybe_in_set = wants or me in written.drained
        self.in_set_since = written.drained.get(me)
        return plan(written.drained)  # the same plan again on the set as written (the rule is idempotent)

    def _store_built(self, drain: DrainSettings) -> Any:
        if self._store is None:
            if self._store_factory is None:
                raise PeersUnavailable("no store configured: the drain set lives in the store")
            self._store = self._calls.run(
                "drain-set", "open the store", self._store_factory, timeout_s=drain.store_timeout_s
            )
        return self._store

    def _set(self, wants: bool, decision: DrainDecision) -> None:
        before, self.decision = self.decision, decision
        _draining, held = drain_standing(wants=wants, rule=True, decision=decision)
        self._metrics.set("healer_drain_wanted", {}, 1.0 if wants else 0.0)
        self._metrics.set("healer_drain_held_back", {}, 1.0 if held else 0.0)
        if (decision.drain, held) != (before.drain, self._held):
            event = "drain_held_back" if held else "drain_allowed" if decision.drain else "drain_ended"
            log.warning(event, why=decision.why, since=self.in_set_since)
        self._held = held

    def _with_me(self, peers: Sequence[Peer], *, stopping: bool, my_readiness: Callable[[], bool]) -> list[Peer]:
        """The view with this pod as it knows itself (its readiness now, stopping or not). A source that
        lists this pod (Kubernetes) must: without it the list is of other pods, and the rule says so."""
        assert self.peers is not None
        me = self.peers.me
        others = [p for p in peers if p.name != me]
        listed = next((p for p in peers if p.name == me), None)
        if self.peers.lists_me and listed is None:
            return others
        terminating = stopping or (listed is not None and listed.terminating)
        return [*others, Peer(me, my_readiness(), terminating)]
