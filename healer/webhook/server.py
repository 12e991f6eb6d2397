"""The admission server: an AdmissionReview answered (``review``, pure but for its log lines) over
HTTPS, with the certificate and key reloaded when cert-manager renews them."""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog

from healer.edges.http_listener import BackgroundServer, Request, Response
from healer.edges.metrics import Registry
from healer.webhook.config import InjectionConfig, load_injection_config
from healer.webhook.patch import NotInjected, not_injected_patch, plan_injection

log = structlog.get_logger("healer.webhook")

MAX_BODY_BYTES = 1 << 20  # a Pod's AdmissionReview is a few kB; the API server caps objects at ~3 MB
# The whole request, TLS handshake and a body up to MAX_BODY_BYTES included: the API server sends a
# review in milliseconds; a client slower than this loses its connection (webhook.timeoutSeconds: 5).
REQUEST_DEADLINE_S = 3.0
# Fewer open connections than the sidecar's listener: each TLS connection holds about 0.5 MiB of
# asyncio's SSL buffers, and the webhook's memory limit is 128 Mi (values.yaml webhook.resources).
# Over the cap the slowest reader still makes room, so a flood cannot keep the API server out.
MAX_CONNECTIONS = 64
BODY_BUDGET_BYTES = 8 << 20  # request bodies buffered at once (a Pod's review is a few kB)
# Said in the 413 over MAX_BODY_BYTES: an Alertmanager notification that large carries a whole storm's
# alerts (max_alerts: 0), and Alertmanager never sends a 4xx again; one alert names the incident.
TOO_LARGE = "an Alertmanager notification: set max_alerts in its webhook_config (e.g. 20, docs/alerts.md)"


class BadReview(ValueError):
    """Not an AdmissionReview: answered with HTTP 400."""


def review(body: bytes, config: InjectionConfig) -> dict[str, Any]:
    """The AdmissionReview response for one request body (pure)."""
    try:
        document = json.loads(body)
    except RecursionError as exc:
        raise BadReview("not JSON this webhook reads: nested too deep") from exc
    except ValueError as exc:
        raise BadReview(f"not JSON: {str(exc)[:200]}") from exc
    if not isinstance(document, dict) or document.get("kind") != "AdmissionReview":
        raise BadReview("not an AdmissionReview")
    if document.get("apiVersion") != "admission.k8s.io/v1":
        raise BadReview(f"apiVersion {document.get('apiVersion')!r}: only admission.k8s.io/v1 is served")
    request = document.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview("request.uid is missing")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    try:
        _mutate(request, response, config)
    except Exception as exc:  # a request shaped like no API server sends: admitted as it is, said why
        log.warning("review_unreadable", uid=request["uid"], error=f"{type(exc).__name__}: {str(exc)[:200]}")
        response.pop("patch", None)
        response.pop("patchType", None)
        response["warnings"] = [f"healer: sidecar not injected: the request could not be read ({type(exc).__name__})"]
    return answer


def _mutate(request: Mapping[str, Any], response: dict[str, Any], config: InjectionConfig) -> None:
    kind = request.get("kind")
    kind = kind if isinstance(kind, Mapping) else {}
    if (kind.get("group"), kind.get("kind")) != ("", "Pod") or request.get("operation") != "CREATE":
        return  # not ours to change
    pod = request.get("object")
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    name = (meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else ""
    where = f"{request.get('namespace', '?')}/{name}"[:300]
    try:
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            raise ValueError("the request's object is not a Pod")
        patch, notes = plan_injection(pod, config)
    except (ValueError, TypeError, AttributeError) as exc:
        # Never block a pod because of healer: admit it as it is, and say why it has no sidecar. Not
        # refused: a Triton pod that cannot take the sidecar (a clash healer cannot resolve) still
        # serves, as it would without healer installed; refusing it would stop a scale-up or a node
        # drain's re-creation for healer's sake (the same reason as failurePolicy: Ignore). A valid
        # pod also keeps the reason in the healer.io/not-injected annotation, because the warning
        # goes to whoever created the pod (for a Deployment, the ReplicaSet controller: nobody).
        log.warning("not_injected", pod=where, uid=request["uid"], error=str(exc))
        response["warnings"] = [f"healer: sidecar not injected: {exc}"]
        if isinstance(exc, NotInjected) and isinstance(pod, dict) and (marked := not_injected_patch(pod, str(exc))):
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(marked).encode()).decode()
        return
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        if notes:
            response["warnings"] = [f"healer: {note}" for note in notes]
        log.info("injected", pod=where, uid=request["uid"], dry_run=bool(request.get("dryRun")), notes=notes)


# ---- the HTTPS server ----------------------------------------------------------------------------------


class ReloadingTLS:
    """An SSL context rebuilt when the certificate or key file changes (cert-manager renews them)."""

    def __init__(self, cert: Path, key: Path, *, check_every_s: float = 1.0) -> None:
        self.cert, self.key = cert, key
        self._check_every_s = check_every_s
        self._lock = threading.Lock()
        self._stamp: tuple[float, float] = (0.0, 0.0)
        self._checked_at = 0.0
        self._context = self._load()

    def _mtimes(self) -> tuple[float, float]:
        return self.cert.stat().st_mtime, self.key.stat().st_mtime

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # One review per connection and no resumption by the API server: TLS 1.3 session tickets only
        # add small writes after the handshake, which a delayed ACK stalled by 40 ms one time in two.
        context.num_tickets = 0
        stamp = self._mtimes()  # before loading: a renewal landing meanwhile differs and is loaded next time
        context.load_cert_chain(self.cert, self.key)
        self._stamp = stamp
        return context

    def context(self) -> ssl.SSLContext:
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= self._check_every_s:
                self._checked_at = now
                try:
                    if self._mtimes() != self._stamp:
                        self._context = self._load()
                        log.info("tls_reloaded", cert=str(self.cert))
                except (OSError, ssl.SSLError) as exc:  # half-written renewal: keep serving the old one
                    log.warning("tls_not_reloaded", cert=str(self.cert), error=str(exc))
            return self._context


class AlertHandler(Protocol):
    """What the server needs of the Alertmanager receiver (healer/webhook/alerts.py AlertReceiver)."""

    path: str
    workers: int  # its own share of the pool's workers: never the reviews'
    metrics: Registry

    def handle(self, request: Request) -> Response: ...


class WebhookServer(BackgroundServer):
    """POST /mutate (AdmissionReview) and GET /healthz over TLS, on the listener slow clients cannot
    starve (healer/edges/http_listener.py): a total deadline per request, TLS handshake included; reviews
    are answered on a small thread pool, never behind a slow client."""

    def __init__(
        self, listen: str, tls: ReloadingTLS, config: InjectionConfig, alerts: AlertHandler | None = None
    ) -> None:
        # ``alerts``: the Alertmanager receiver (healer/webhook/alerts.py), served on its own path, with
        # its counters on GET /metrics; None: not served (404).
        posts = {"/mutate", *((alerts.path,) if alerts else ())}

        def inline(request: Request) -> Response | None:
            if request.method == "GET":
                if request.path == "/metrics" and alerts is not None:
                    return Response(200, alerts.metrics.expose().encode(), "text/plain; version=0.0.4")
                return Response.text(200, "ok\n") if request.path == "/healthz" else Response.text(404, "not found\n")
            if request.method != "POST":
                return Response.text(405, f"GET /healthz or POST {' or '.join(sorted(posts))}\n")
            return None if request.path in posts else Response.text(404, "not found\n")

        def handler(request: Request) -> Response:
            if alerts is not None and request.path == alerts.path:
                return alerts.handle(request)
            try:
                answer = review(request.body, config)
            except BadReview as exc:
                return Response.text(400, f"{exc}\n")
            return Response(200, json.dumps(answer).encode(), "application/json")

        super().__init__(
            listen,
            handler=handler,
            inline=inline,
            name="webhook-https",
            tls=tls.context,
            max_body=MAX_BODY_BYTES,
            too_large=TOO_LARGE if alerts is not None else "",
            request_deadline_s=REQUEST_DEADLINE_S,
            workers=4 + (alerts.workers if alerts is not None else 0),
            max_connections=MAX_CONNECTIONS,
            body_budget=BODY_BUDGET_BYTES,
        )


def serve(
    listen: str, cert: Path, key: Path, injection: Path, stop: threading.Event, alerts: AlertHandler | None = None
) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGTERM)."""
    server = WebhookServer(listen, ReloadingTLS(cert, key), load_injection_config(injection), alerts)
    server.start()
    log.info("webhook_listening", address=server.address, pid=os.getpid())
    try:
        stop.wait()
    finally:
        server.stop()
