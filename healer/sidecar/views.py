"""The sidecar's HTTP endpoints (/livez, /healthz, /readyz, /metrics, /status) on the listener of
healer/http_listener.py: /readyz and /livez answered from memory on the loop, the rest on its pool."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from healer.http_listener import MAX_CONNECTIONS, BackgroundServer, Request, Response
from probes.result import Tier

if TYPE_CHECKING:
    from healer.sidecar.loop import Sidecar


# ---- the sidecar's endpoints ---------------------------------------------------------------------------


def readyz(owner: Sidecar) -> Response:
    ready, problems = owner.ready()
    return Response.text(
        200 if ready else 503, "".join(f"{line}\n" for line in (["ok", *problems] if ready else problems))
    )


def healthz(owner: Sidecar) -> Response:
    """The sidecar's own liveness (its container's livenessProbe): the probe loop is turning."""
    stalled = owner.loop_stalled()
    if stalled:
        return Response.text(503, f"probe loop stalled: {stalled}\n")
    return Response.text(200, "ok: the probe loop is turning\n")


def livez(owner: Sidecar) -> Response:
    """The liveness tier as the sidecar's loop last probed it (every ``period_s``): no I/O here."""
    if owner.cycles == 0:
        return Response.text(503, "triton not live: no probe cycle completed yet\n")
    if owner.triton_live:
        return Response.text(200, "ok: live at the last probe cycle\n")
    reasons = [r.reason for results in owner.last_results.values() for r in results if r.tier is Tier.LIVENESS]
    return Response.text(503, f"triton not live: {next((r for r in reasons if r), 'the liveness tier failed')}\n")


class SidecarServer(BackgroundServer):
    """/livez (Triton), /healthz (the sidecar itself), /readyz, /metrics, /status on a background thread."""

    def __init__(self, sidecar: Sidecar, listen: str, *, max_connections: int = MAX_CONNECTIONS) -> None:
        owner = sidecar

        def inline(request: Request) -> Response | None:
            if request.method != "GET":
                return Response.text(405, "GET only\n")
            if request.path == "/readyz":
                return readyz(owner)
            if request.path == "/livez":
                return livez(owner)
            if request.path == "/healthz":
                return healthz(owner)
            if request.path in {"/metrics", "/status"}:
                return None  # the thread pool: they build a whole document
            return Response.text(404, "not found\n")

        def handler(request: Request) -> Response:
            if request.path == "/metrics":
                return Response(200, owner.metrics.expose().encode(), "text/plain; version=0.0.4; charset=utf-8")
            return Response(200, (json.dumps(owner.status(), indent=2) + "\n").encode(), "application/json")

        super().__init__(listen, handler=handler, inline=inline, name="sidecar-http", max_connections=max_connections)
