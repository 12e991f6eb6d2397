"""``healer webhook``: a mutating admission webhook that injects the probe sidecar into pods.

A pod opts in with the label ``healer.io/inject: "true"`` (what the MutatingWebhookConfiguration's
``objectSelector`` matches) or the same annotation. The webhook answers an ``admission.k8s.io/v1``
AdmissionReview with a JSONPatch that adds the ``healer`` container, its volumes and the
``healer.io/injected`` and ``healer.io/injection`` annotations; the patch is built by a pure
function of the pod and the settings (``plan_injection``).

Rules:

* idempotent: a pod that already holds the sidecar this webhook wrote is left alone, so a
  reinvocation, or a pod re-created from an injected spec, is not injected twice. That is decided
  on healer's own evidence only, the ``healer.io/injection`` annotation naming the container and
  a digest of what was written into it; never on a container's name (a user's container named
  ``healer`` is not healer's);
* only Pod CREATE requests are mutated; any other kind or operation is allowed untouched;
* every name and port the injection adds is checked against everything already in the pod
  (``place``): the port moves to the first free one from the settings' port up (past the pod's
  declared containerPorts and hostPorts, Triton's --http-port/--grpc-port/--metrics-port and its
  defaults 8000-8002) and the sidecar is told it (``--listen``), as are its liveness probe and
  Triton's readinessProbe; a volume name taken gets ``<name>-2``; a ``hostNetwork`` pod is injected
  the same way, on a port of 1024 or more (the node's network; the pod's securityContext untouched);
* never blocks a pod because of healer: a clash it cannot resolve (a container, or a port name,
  already called ``healer``: the names people and healer's tools find the sidecar by) admits the pod
  without the sidecar, with a warning and the ``healer.io/not-injected`` annotation saying why; a
  Pod object the webhook cannot read is allowed without a patch, with a warning;
* a request that is not an AdmissionReview at all (not JSON, nested too deep, no ``request.uid``)
  gets HTTP 400 with the reason; a body over ``MAX_BODY_BYTES`` gets 413; a review of any other odd
  shape is admitted untouched with a warning; nothing crashes, hangs or drops the connection (the
  listener of healer/edges/http_listener.py: a total deadline per request, slow clients cannot starve it);
* a pod without a ``containers`` array is admitted unmutated with a warning (the API server's
  validation says what is wrong);
* no side effects, so ``dryRun`` requests are answered exactly like the others (``sideEffects: None``);
* with the annotation ``healer.io/readiness: sidecar`` the Triton container's readinessProbe is
  pointed at the sidecar's ``/readyz``; its livenessProbe is never touched (it stays on Triton).

TLS certificate and key are read from files (as cert-manager writes them into a Secret volume) and
reloaded when either file changes, without a restart.

Its parts: ``config`` (the injection settings and the sidecar they describe), ``patch`` (the pure
decision: where the sidecar goes in a pod, the JSONPatch) and ``server`` (the AdmissionReview over
HTTPS). This package names what its users import.
"""

from __future__ import annotations

from collections.abc import Sequence

from healer.core.labels import INJECT, INJECTED, INJECTION, NOT_INJECTED, READINESS, TRITON_CONTAINER
from healer.webhook.config import (
    SERVICE_ACCOUNT_MOUNT,
    SIDECAR,
    SIDECAR_VOLUMES,
    InjectionConfig,
    InjectionConfigError,
    Placement,
    load_injection_config,
    sidecar_container,
    sidecar_volumes,
)
from healer.webhook.patch import (
    READINESS_FAILURES,
    READINESS_PERIOD_S,
    SHLEX_MAX_CHARS,
    TRITON_DEFAULT_PORTS,
    UNPRIVILEGED_PORT_START,
    NotInjected,
    already_injected,
    choose_port,
    injection_digest,
    injection_patch,
    not_injected_patch,
    place,
    plan_injection,
    readiness_probe,
    taken_ports,
    wants_injection,
)
from healer.webhook.server import (
    BODY_BUDGET_BYTES,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    REQUEST_DEADLINE_S,
    BadReview,
    ReloadingTLS,
    WebhookServer,
    review,
    serve,
)

__all__: Sequence[str] = (
    "BODY_BUDGET_BYTES",
    "INJECT",
    "INJECTED",
    "INJECTION",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
    "NOT_INJECTED",
    "READINESS",
    "READINESS_FAILURES",
    "READINESS_PERIOD_S",
    "REQUEST_DEADLINE_S",
    "SERVICE_ACCOUNT_MOUNT",
    "SHLEX_MAX_CHARS",
    "SIDECAR",
    "SIDECAR_VOLUMES",
    "TRITON_CONTAINER",
    "TRITON_DEFAULT_PORTS",
    "UNPRIVILEGED_PORT_START",
    "BadReview",
    "InjectionConfig",
    "InjectionConfigError",
    "NotInjected",
    "Placement",
    "ReloadingTLS",
    "WebhookServer",
    "already_injected",
    "choose_port",
    "injection_digest",
    "injection_patch",
    "load_injection_config",
    "not_injected_patch",
    "place",
    "plan_injection",
    "readiness_probe",
    "review",
    "serve",
    "sidecar_container",
    "sidecar_volumes",
    "taken_ports",
    "wants_injection",
)
