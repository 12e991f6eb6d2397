"""Watching a drill (I/O): the sidecars' /status and /readyz, and the golden request on every replica.

A ``Watch`` samples every ``interval_s`` from the moment of injection and keeps the first time
each thing happened (detected, drained, escalated, restored), the workflows the sidecars handed the
incident to, and the fewest replicas ready at any sample. It reads the sidecars either in-process
(``LocalView``: the Sidecar's own ``status()``) or over HTTP (``HttpView``: what a pod's probes and
the Argo drill see). ``Watch.observation()`` gives the pure ``Observation`` the verdict is made of.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from healer.core.drill_verdict import Mark, Observation, PhaseSpan
from healer.core.results import Status
from healer.edges.triton import TritonError, TritonHttp
from healer.settings import GoldenRequest, ModelSettings
from probes.tiers import check_business


class SidecarView(Protocol):
    name: str

    def status(self) -> dict[str, Any]:
        """The sidecar's /status document."""
        ...

    def readyz(self) -> int:
        """The HTTP status /readyz answers (200 or 503)."""
        ...


class LocalView:
    """An in-process Sidecar, read through its public API (status(), ready())."""

    def __init__(self, name: str, sidecar: Any) -> None:
        self.name = name
        self._sidecar = sidecar

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self._sidecar.status()
        return status

    def readyz(self) -> int:
        return 200 if self._sidecar.ready()[0] else 503


class HttpView:
    """A sidecar over HTTP (its /status and /readyz), as the pod's readinessProbe reads it."""

    def __init__(self, name: str, base_url: str, *, timeout_s: float = 2.0) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=self.timeout_s) as response:  # noqa: S310
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError:
            return 0, ""  # no answer: not ready, as a readinessProbe counts it

    def status(self) -> dict[str, Any]:
        code, body = self._get("/status")
        if code != 200:
            return {}
        try:
            document: dict[str, Any] = json.loads(body)
        except ValueError:
            return {}
        return document

    def readyz(self) -> int:
        return self._get("/readyz")[0]


Suites = Callable[[str | None], Sequence[GoldenRequest]]  # a version's golden suite (None: every version's)


class GoldenWatch:
    """Is the target restored? On every replica: the injected version no longer served, and the golden
    suite passes on every version that is. One client per replica, used from one thread. ``suite_of``: the
    suite the sidecar judges a version by (DrillTarget.suite: the store's requests too); default: the
    configured one."""

    def __init__(self, urls: Sequence[str], model: ModelSettings, *, suite_of: Suites | None = None) -> None:
        self.model = model
        self._suite_of = suite_of or (lambda version: model.suite)
        self._clients = {url: TritonHttp(url, timeout_s=2.0) for url in urls}

    def restored(self, injected_version: str | None) -> bool:
        for triton in self._clients.values():
            try:
                versions = triton.served_versions(self.model.name)
            except TritonError:
                return False
            if not versions or injected_version in versions:
                return False
            for version in versions:
                result = check_business(triton, self.model.name, version, self._suite_of(version))
                if result.status is not Status.PASS:
                    return False
        return True

    def loaded(self) -> bool:
        """The model is served on every replica whose Triton is live."""
        for triton in self._clients.values():
            try:
                if triton.server_live() and not triton.served_versions(self.model.name):
                    return False
            except TritonError:
                continue  # a dead replica serves nothing and holds nothing loaded
        return True

    def close(self) -> None:
        for triton in self._clients.values():
            triton.close()


class Traffic:
    """Clients: the golden request to the default version (what Triton routes an unpinned request to:
    the highest version served), round robin over the replicas every ``interval_s`` from a thread,
    counting answers that are wrong (a wrong value, NaN, an error from the model, over the SLO).
    A replica that does not answer is not counted either way. ``suite_of``: as GoldenWatch's; asked for the
    requests every version must pass (the version a client is routed to is not known here)."""

    def __init__(
        self, urls: Sequence[str], model: ModelSettings, interval_s: float = 0.05, *, suite_of: Suites | None = None
    ) -> None:
        self.model, self.urls, self.interval_s = model, list(urls), interval_s
        self._suite_of = suite_of or (lambda version: model.suite)
        self.requests = self.wrong = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-traffic", daemon=True)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def _run(self) -> None:
        clients = [TritonHttp(url, timeout_s=2.0) for url in self.urls]
        try:
            i = 0
            while not self._stop.wait(self.interval_s):
                triton = clients[i % len(clients)]
                i += 1
                result = check_business(triton, self.model.name, "", self._suite_of(None))
                if result.status is Status.ERROR:
                    continue
                self.requests += 1
                self.wrong += result.status is Status.FAIL
        finally:
            for triton in clients:
                triton.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10.0)


@dataclass
class Sample:
    """One look at every sidecar."""

    states: list[str]  # the model's state per sidecar (healthy, suspect, healing, escalated; "" unknown)
    ready: list[bool]  # /readyz 200 per sidecar
    live: list[bool]  # Triton live per sidecar
    workflows: list[str]
    breaker_open: bool
    bad_streak: int  # the largest bad streak seen
    wrong_answers: int = 0  # wrong answers the sidecars counted since they started, all together
    plans: tuple[str, ...] = ()  # observe mode: each sidecar's last plan (its summary), where it recorded one


def sample(views: Sequence[SidecarView], model: str) -> Sample:
    states, ready, live, workflows = [], [], [], []
    breaker, streak, wrong = False, 0, 0
    plans: list[str] = []
    for view in views:
        status = view.status()
        entry = status.get("models", {}).get(model, {}) if status else {}
        state, plan = str(entry.get("state", "")), entry.get("plan") or {}
        if plan:  # observe mode (docs/observe.md): an incident held as planned is not an escalation
            plans.append(str(plan.get("summary", "")))
            state = "planned" if state == "escalated" else state
        states.append(state)
        live.append(bool(status.get("triton_live", False)) if status else False)
        workflow = str(entry.get("workflow") or (entry.get("incident") or {}).get("workflow") or "")
        if workflow:
            workflows.append(workflow)
        breaker = breaker or bool(entry.get("breaker_open", False))
        streak = max(streak, int(entry.get("bad_streak", 0) or 0))
        wrong += int(entry.get("wrong_answers", 0) or 0)
        ready.append(view.readyz() == 200)
    return Sample(states, ready, live, workflows, breaker, streak, wrong, tuple(plans))


class Watch:
    """Accumulates what a drill run saw, in seconds from the injection (``injected_at``, monotonic)."""

    def __init__(
        self, injected_at: float, *, wrong_before: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.injected_at = injected_at
        # The sidecars' wrong-answer count sampled before the injection: what they count from there on
        # is this run's (a transient suspect state can be shorter than a sample interval; a count cannot).
        self.wrong_before = wrong_before
        self.clock = clock
        self.detect_s: float | None = None
        self.restore_s: float | None = None
        self.escalate_s: float | None = None
        self.workflows: list[str] = []
        self.drained = False
        self.not_live = False
        self.breaker_open = False
        self.min_ready: int | None = None
        self.final_state = ""
        self.marks: list[Mark] = [Mark(0.0, "injected")]
        self.phases: list[PhaseSpan] = []
        self.error = ""
        self.model_loaded: bool | None = None
        self.after_restart: str | None = None
        self.last: Sample | None = None
        self._healthy_again = False
        self.wrong_answers = 0
        self.planned = ""  # observe mode: the first plan a sidecar recorded
        self.files: dict[str, str] | None = None  # observe mode: the model's files as the push left them
        self.untouched: str | None = None  # observe mode: what was touched since ("" nothing; None: not checked)
        self.notes: list[str] = []  # observe mode: the report's lines (the plan, what was checked)

    def now_s(self) -> float:
        return round(self.clock() - self.injected_at, 3)

    def mark(self, kind: str, text: str = "") -> None:
        self.marks.append(Mark(self.now_s(), kind, text))

    def see(self, seen: Sample) -> None:
        """Fold one sample in."""
        t = self.now_s()
        self.last = seen
        ready_count = sum(seen.ready)
        self.min_ready = ready_count if self.min_ready is None else min(self.min_ready, ready_count)
        for workflow in seen.workflows:
            if workflow not in self.workflows:
                self.workflows.append(workflow)
                self.mark("submitted", workflow)
        acting = any(s in {"healing", "escalated", "planned"} for s in seen.states)
        if seen.plans and not self.planned:
            self.planned = seen.plans[0]
            self.mark("planned", seen.plans[0])
        wrong = max(0, seen.wrong_answers - self.wrong_before)
        if wrong > self.wrong_answers:
            if not acting:
                self.mark("wrong-answer", f"wrong answer {wrong} (a sidecar's bad streak: {seen.bad_streak})")
            self.wrong_answers = wrong
        if not all(seen.ready) and not self.drained:
            self.drained = True
            self.mark("drained", "a replica's /readyz answered 503")
        if not all(seen.live) and not self.not_live:
            self.not_live = True
            self.mark("not-live", "the sidecar reports Triton not live")
        if self.detect_s is None and (acting or self.drained or self.not_live):
            self.detect_s = t
            self.marks.append(Mark(t, "detected", ", ".join(s for s in seen.states if s)))
        if seen.breaker_open:
            self.breaker_open = True
        if "escalated" in seen.states and self.escalate_s is None:
            self.escalate_s = t
            self.mark("escalated", "circuit breaker open" if seen.breaker_open else "the rollback did not restore")
        self.final_state = _overall(seen.states)
        if self.workflows and self.restore_s is not None and self.final_state == "healthy" and not self._healthy_again:
            self._healthy_again = True
            self.mark("trusted", "the sidecars trust the model again")

    def restored(self) -> None:
        if self.restore_s is None:
            self.restore_s = self.now_s()
            self.marks.append(Mark(self.restore_s, "restored", "the golden request passes on every replica"))

    def observation(self) -> Observation:
        return Observation(
            detect_s=self.detect_s,
            restore_s=self.restore_s,
            escalate_s=self.escalate_s,
            workflows=tuple(self.workflows),
            drained=self.drained,
            not_live=self.not_live,
            breaker_open=self.breaker_open,
            min_ready=self.min_ready,
            model_loaded=self.model_loaded,
            after_restart=self.after_restart,
            final_state=self.final_state,
            wrong_answers=self.wrong_answers,
            marks=tuple(sorted(self.marks, key=lambda m: m.at_s)),
            phases=tuple(self.phases),
            error=self.error,
            planned=self.planned,
            untouched=self.untouched,
        )


def _overall(states: Sequence[str]) -> str:
    """One state for the replica set: the worst any sidecar reports."""
    for state in ("escalated", "healing", "planned", "suspect", "", "healthy"):
        if state in states:
            return state or "unknown"
    return "unknown"
