"""The sidecar's HTTP endpoints (/livez, /healthz, /readyz, /metrics, /status, and in per-pod mode the
staging endpoints of healer/sidecar/stage.py) on the listener of healer/edges/http_listener.py: /readyz and
/livez answered from memory on the loop, the rest on its pool; and the /status document, assembled from
what the loop learnt (``status_document``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from healer.core.decisions import drain_standing, wants_drain
from healer.core.results import ProbeResult, Tier
from healer.core.state import summarise
from healer.edges.http_listener import MAX_CONNECTIONS, BackgroundServer, Request, Response
from healer.edges.metrics import Registry
from healer.settings import Settings
from healer.sidecar.stage import MAX_BODY, PATHS, Stager

if TYPE_CHECKING:
    from healer.sidecar.book import ModelBook
    from healer.sidecar.drain import DrainKeeper


class Observed(Protocol):
    """What the endpoints read of a sidecar (healer/sidecar/loop.py ``Sidecar``; a stand-in in tests)."""

    metrics: Registry

    @property
    def cycles(self) -> int: ...

    @property
    def triton_live(self) -> bool: ...

    @property
    def last_results(self) -> Mapping[str, Sequence[ProbeResult]]: ...

    def ready(self) -> tuple[bool, list[str]]: ...

    def loop_stalled(self) -> str: ...

    def status(self) -> dict[str, Any]: ...


# ---- the /status document ----------------------------------------------------------------------------------


def status_document(
    settings: Settings,
    pod: str,
    book: ModelBook,
    keeper: DrainKeeper,
    *,
    workflow_of: Callable[[str], str],
    ready: tuple[bool, list[str]],
    stopping: bool,
    pipeline_of: Callable[[str], dict[str, Any] | None] = lambda name: None,
    observe_of: Callable[[str], dict[str, Any]] = lambda name: {},
    traffic_of: Callable[[str], dict[str, Any] | None] = lambda name: None,
) -> dict[str, Any]:
    """Each model's state, last results and rollback, and the drain as this pod stands in it (what the
    peers weigh a drain against: HttpPeers reads it). ``ready``: /readyz's answer, taken before.
    ``pipeline_of``: a pipeline's members, their versions and whom its incident blames (None: not one).
    ``observe_of``: the model's mode and its last plan (healer/sidecar/observe.py). ``traffic_of``: the
    traffic signal's last window per version (healer/sidecar/traffic_view.py; None: not read)."""
    pipelines = {name: pipeline_of(name) for name in book.states}
    ready_now, ready_lines = ready
    drain = settings.sidecar.drain
    with book.lock:
        models = {}
        for name, state in book.states.items():
            entry = dict(summarise(state))
            entry["workflow"] = workflow_of(name) or (state.incident.workflow if state.incident else "")
            entry["wrong_answers"] = book.wrong_answers[name]
            entry["last"] = {
                r.tier.value + (f"@v{r.version}" if r.version and r.tier is not Tier.LIVENESS else ""): {
                    "status": r.status.value,
                    "latency_ms": round(r.latency_ms, 3),
                    "reason": r.reason,
                }
                for r in book.last_results.get(name, [])
            }
            if pipelines.get(name) is not None:
                entry["pipeline"] = pipelines[name]
            entry.update(observe_of(name))
            traffic = traffic_of(name)
            if traffic is not None:
                entry["traffic"] = traffic
            models[name] = entry
        wants = wants_drain(book.model_problems(settings.models), stopping=stopping)
        decision = keeper.decision
        draining, held_back = drain_standing(wants=wants, rule=keeper.rule, decision=decision)
        return {
            "pod": pod,
            "triton": settings.triton.url,
            "triton_live": book.triton_live,
            "cycles": book.cycles,
            "stopping": stopping,  # SIGTERM received: the peers count this pod as terminating
            "models": models,
            # What the peers weigh a drain against (HttpPeers reads it), and why this pod drains or not.
            "drain": {
                "rule": keeper.rule,
                "set": drain.drain_set if drain is not None and keeper.rule else None,
                "ready": ready_now,
                "stopping": stopping,
                "wanted": wants,
                "in_set_since": keeper.in_set_since,
                "draining": draining,
                "held_back": held_back,
                "why": decision.why if wants else "",
                "readyz": ready_lines,
            },
        }


# ---- the sidecar's endpoints ---------------------------------------------------------------------------


def readyz(owner: Observed) -> Response:
    ready, problems = owner.ready()
    return Response.text(
        200 if ready else 503, "".join(f"{line}\n" for line in (["ok", *problems] if ready else problems))
    )


def healthz(owner: Observed) -> Response:
    """The sidecar's own liveness (its container's livenessProbe): the probe loop is turning."""
    stalled = owner.loop_stalled()
    if stalled:
        return Response.text(503, f"probe loop stalled: {stalled}\n")
    return Response.text(200, "ok: the probe loop is turning\n")


def livez(owner: Observed) -> Response:
    """The liveness tier as the sidecar's loop last probed it (every ``period_s``): no I/O here."""
    if owner.cycles == 0:
        return Response.text(503, "triton not live: no probe cycle completed yet\n")
    if owner.triton_live:
        return Response.text(200, "ok: live at the last probe cycle\n")
    reasons = [r.reason for results in owner.last_results.values() for r in results if r.tier is Tier.LIVENESS]
    return Response.text(503, f"triton not live: {next((r for r in reasons if r), 'the liveness tier failed')}\n")


class SidecarServer(BackgroundServer):
    """/livez (Triton), /healthz (the sidecar itself), /readyz, /metrics, /status on a background thread;
    with a ``stager`` (repository_mode per-pod) also POST /healer/v1/stage and /healer/v1/quarantine."""

    def __init__(
        self,
        sidecar: Observed,
        listen: str,
        *,
        max_connections: int = MAX_CONNECTIONS,
        clock: Callable[[], float] | None = None,
        stager: Stager | None = None,
    ) -> None:
        owner = sidecar
        self.stager = stager

        simple = {"/readyz": readyz, "/livez": livez, "/healthz": healthz}

        def inline(request: Request) -> Response | None:
            if request.path in PATHS:
                # The pool: the stager waits (bounded) for its own threads. Without one: not served here.
                return None if stager is not None else Response.text(404, "not found (repository_mode not per-pod)\n")
            if request.method != "GET":
                return Response.text(405, "GET only\n")
            if request.path in simple:
                return simple[request.path](owner)
            if request.path in {"/metrics", "/status"}:
                return None  # the thread pool: they build a whole document
            return Response.text(404, "not found\n")

        def handler(request: Request) -> Response:
            if stager is not None and request.path in PATHS:
                return stager.handle(request)
            if request.path == "/metrics":
                return Response(200, owner.metrics.expose().encode(), "text/plain; version=0.0.4; charset=utf-8")
            return Response(200, (json.dumps(owner.status(), indent=2) + "\n").encode(), "application/json")

        super().__init__(
            listen,
            handler=handler,
            inline=inline,
            name="sidecar-http",
            max_body=MAX_BODY,  # the staging requests (a few names); any other POST is then answered, not cut off
            max_connections=max_connections,
            clock=clock,
        )

    def stop(self) -> None:
        super().stop()
        if self.stager is not None:
            self.stager.close()
