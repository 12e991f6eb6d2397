"""``healer webhook``: a mutating admission webhook that injects the probe sidecar into pods.

A pod opts in with the label ``healer.io/inject: "true"`` (what the MutatingWebhookConfiguration's
``objectSelector`` matches) or the same annotation. The webhook answers an ``admission.k8s.io/v1``
AdmissionReview with a JSONPatch that adds the ``healer`` container, its volumes and the
``healer.io/injected`` annotation; the patch is built by a pure function (``injection_patch``).

Rules:

* idempotent: a pod that already has a ``healer`` container (or the annotation) is left alone, so
  a reinvocation, or a pod re-created from an injected spec, is not injected twice;
* only Pod CREATE requests are mutated; any other kind or operation is allowed untouched;
* never blocks a pod because of healer: a Pod object the webhook cannot read is allowed without a
  patch, with a warning that says why (the API server shows it to the client);
* a request that is not an AdmissionReview at all (not JSON, nested too deep, no ``request.uid``)
  gets HTTP 400 with the reason; a body over ``MAX_BODY_BYTES`` gets 413; a review of any other odd
  shape is admitted untouched with a warning; nothing crashes, hangs or drops the connection (the
  listener of healer/http_listener.py: a total deadline per request, slow clients cannot starve it);
* a pod that cannot run the sidecar is admitted unmutated with a warning naming why: no
  ``containers`` array (the API server's validation says what is wrong), a container already on
  the sidecar's port (it would crash-loop on "Address already in use"), ``hostNetwork``;
* no side effects, so ``dryRun`` requests are answered exactly like the others (``sideEffects: None``);
* with the annotation ``healer.io/readiness: sidecar`` the Triton container's readinessProbe is
  pointed at the sidecar's ``/readyz``; its livenessProbe is never touched (it stays on Triton).

TLS certificate and key are read from files (as cert-manager writes them into a Secret volume) and
reloaded when either file changes, without a restart.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from healer.http_listener import BackgroundServer, Request, Response
from healer.labels import INJECT, INJECTED, READINESS, TRITON_CONTAINER

log = structlog.get_logger("healer.webhook")

SIDECAR = "healer"
MAX_BODY_BYTES = 1 << 20  # a Pod's AdmissionReview is a few kB; the API server caps objects at ~3 MB
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# The whole request, TLS handshake and a body up to MAX_BODY_BYTES included: the API server sends a
# review in milliseconds; a client slower than this loses its connection (webhook.timeoutSeconds: 5).
REQUEST_DEADLINE_S = 3.0
# Fewer open connections than the sidecar's listener: each TLS connection holds about 0.5 MiB of
# asyncio's SSL buffers, and the webhook's memory limit is 128 Mi (values.yaml webhook.resources).
# Over the cap the slowest reader still makes room, so a flood cannot keep the API server out.
MAX_CONNECTIONS = 64
BODY_BUDGET_BYTES = 8 << 20  # request bodies buffered at once (a Pod's review is a few kB)
# Triton's readinessProbe on /readyz (README "Probes"): a pod leaves the Service at most
# period × failures after /readyz turns 503; one missed answer alone never unreadies it.
READINESS_PERIOD_S = 2
READINESS_FAILURES = 2


class InjectionConfigError(ValueError):
    """The injection settings file is wrong; the message names the file, the key and the problem."""


@dataclass(frozen=True)
class InjectionConfig:
    """What the injected sidecar looks like (a ConfigMap mounted into the webhook's pod)."""

    image: str
    config_map: str = "healer-config"  # holds healer.yaml, mounted at /etc/healer
    port: int = 8088
    # The image's USER; None: the platform assigns one (OpenShift's restricted SCC, from the
    # namespace's range), so the sidecar's securityContext names none.
    run_as_user: int | None = 10001
    state_dir: str = "/var/lib/healer/runs"
    # Sized from benchmarks/sidecar_footprint.py: 63 MiB peak watching 3 models; a rollback run in
    # the pod (the fallback engine) needs more for its duration.
    requests: Mapping[str, str] = field(default_factory=lambda: {"cpu": "20m", "memory": "96Mi"})
    limits: Mapping[str, str] = field(default_factory=lambda: {"memory": "256Mi"})
    token_expiration_s: int = 3600
    # The pod's own volume that holds the model repository (Triton's), mounted into the sidecar too:
    # with a filesystem store (NFS) the sidecar's drain set, ledger reads and in-pod fallback need it.
    # "": nothing mounted (an S3 store). A pod without that volume is not injected (a warning says why).
    models_volume: str = ""
    models_mount_path: str = "/models"
    # Secrets whose keys become the sidecar's environment (envFrom), e.g. the S3 credentials.
    env_from_secrets: tuple[str, ...] = ()
    # Pull secrets the pod needs for the healer image (a private registry), added to the pod's own.
    image_pull_secrets: tuple[str, ...] = ()


_CONFIG_KEYS = {
    "image",
    "config_map",
    "port",
    "run_as_user",
    "state_dir",
    "requests",
    "limits",
    "token_expiration_s",
    "models_volume",
    "models_mount_path",
    "env_from_secrets",
    "image_pull_secrets",
}


def load_injection_config(path: Path) -> InjectionConfig:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InjectionConfigError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(document, dict):
        raise InjectionConfigError(f"{path}: must be a mapping of injection settings")
    unknown = sorted(str(k) for k in document if k not in _CONFIG_KEYS)
    if unknown:
        raise InjectionConfigError(f"{path}: {unknown[0]}: unknown key (known: {', '.join(sorted(_CONFIG_KEYS))})")
    if not isinstance(document.get("image"), str) or not document["image"]:
        raise InjectionConfigError(f"{path}: image: required, the healer image to inject")
    _check_types(path, document)
    defaults = InjectionConfig(image=document["image"])
    config = InjectionConfig(
        image=document["image"],
        config_map=str(document.get("config_map", defaults.config_map)),
        port=int(document.get("port", defaults.port)),
        run_as_user=_run_as_user(document, defaults.run_as_user),
        state_dir=str(document.get("state_dir", defaults.state_dir)),
        requests=dict(document.get("requests") or defaults.requests),
        limits=dict(document.get("limits") or defaults.limits),
        token_expiration_s=int(document.get("token_expiration_s", defaults.token_expiration_s)),
        models_volume=str(document.get("models_volume", defaults.models_volume)),
        models_mount_path=str(document.get("models_mount_path", defaults.models_mount_path)),
        env_from_secrets=tuple(document.get("env_from_secrets") or ()),
        image_pull_secrets=tuple(document.get("image_pull_secrets") or ()),
    )
    # Two mounts at one path make every injected pod invalid: the API server would refuse them all.
    paths = [m["mountPath"].rstrip("/") for m in sidecar_container(config)["volumeMounts"]]
    taken = sorted({p for p in paths if paths.count(p) > 1})
    if taken:
        raise InjectionConfigError(f"{path}: state_dir/models_mount_path: {taken[0]} is mounted twice in the sidecar")
    return config


def _run_as_user(document: Mapping[str, Any], default: int | None) -> int | None:
    """run_as_user as given (an explicit null: the platform assigns one), else the default."""
    if "run_as_user" not in document:
        return default
    value = document["run_as_user"]
    return None if value is None else int(value)


def _check_types(path: Path, document: Mapping[str, Any]) -> None:
    for key in ("port", "run_as_user", "token_expiration_s"):
        if key == "run_as_user" and key in document and document[key] is None:
            continue  # the platform assigns one
        if key in document and (not isinstance(document[key], int) or isinstance(document[key], bool)):
            raise InjectionConfigError(f"{path}: {key}: must be an integer, got {document[key]!r}")
    if document.get("run_as_user") is not None and document["run_as_user"] < 1:
        raise InjectionConfigError(
            f"{path}: run_as_user: must be a uid of 1 or more (or null), got {document['run_as_user']}"
        )
    if "port" in document and not 1 <= document["port"] <= 65535:
        raise InjectionConfigError(f"{path}: port: must be 1..65535, got {document['port']}")
    for key in ("requests", "limits"):
        value = document.get(key)
        if value is not None and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            raise InjectionConfigError(f"{path}: {key}: must map resource names to quantities as strings")
    for key in ("models_volume", "models_mount_path"):
        if key in document and not isinstance(document[key], str):
            raise InjectionConfigError(f"{path}: {key}: must be a string, got {document[key]!r}")
    if not str(document.get("models_mount_path", "/")).startswith("/"):
        raise InjectionConfigError(f"{path}: models_mount_path: must be an absolute path")
    for key in ("env_from_secrets", "image_pull_secrets"):
        secrets = document.get(key) or []
        if not isinstance(secrets, list) or not all(isinstance(name, str) and name for name in secrets):
            raise InjectionConfigError(f"{path}: {key}: must be a list of Secret names")


# ---- the patch (pure) ----------------------------------------------------------------------------------


def wants_injection(pod: Mapping[str, Any]) -> bool:
    metadata = pod.get("metadata") or {}
    return "true" in (
        str((metadata.get("labels") or {}).get(INJECT)),
        str((metadata.get("annotations") or {}).get(INJECT)),
    )


def already_injected(pod: Mapping[str, Any]) -> bool:
    metadata = pod.get("metadata") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    return INJECTED in (metadata.get("annotations") or {}) or any(c.get("name") == SIDECAR for c in containers)


def sidecar_container(config: InjectionConfig) -> dict[str, Any]:
    def field_env(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    mounts: list[dict[str, Any]] = [
        {"name": "healer-config", "mountPath": "/etc/healer", "readOnly": True},
        {"name": "healer-runs", "mountPath": config.state_dir},
        {"name": "healer-tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir of its own
        {"name": "healer-kube-api", "mountPath": SERVICE_ACCOUNT_MOUNT, "readOnly": True},
    ]
    if config.models_volume:
        mounts.append({"name": config.models_volume, "mountPath": config.models_mount_path})
    container: dict[str, Any] = {
        "name": SIDECAR,
        "image": config.image,
        "args": ["healer", "sidecar", "--config", "/etc/healer/healer.yaml"],
        "ports": [{"name": "healer", "containerPort": config.port}],
        "env": [
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
            # `kubectl exec -c healer -- healer promote|check|store ...` finds the sidecar's own config.
            {"name": "HEALER_CONFIG", "value": "/etc/healer/healer.yaml"},
        ],
        # The sidecar's own liveness: its probe loop turns (a hung loop would freeze /readyz's verdict).
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "healer"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "volumeMounts": mounts,
        "resources": {"requests": dict(config.requests), "limits": dict(config.limits)},
        "securityContext": {
            "runAsNonRoot": True,
            **({"runAsUser": config.run_as_user} if config.run_as_user is not None else {}),
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},  # Pod Security "restricted" asks it per container
        },
    }
    if config.env_from_secrets:
        container["envFrom"] = [{"secretRef": {"name": name}} for name in config.env_from_secrets]
    return container


def sidecar_volumes(config: InjectionConfig) -> list[dict[str, Any]]:
    return [
        {"name": "healer-config", "configMap": {"name": config.config_map}},
        {"name": "healer-runs", "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": "healer-tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        # The pod's token for the sidecar alone, with the API server's own audience (Argo's client
        # auth mode forwards it to the API server); the kubelet rotates it, healer re-reads it.
        {
            "name": "healer-kube-api",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": config.token_expiration_s}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                        }
                    },
                ]
            },
        },
    ]


SHLEX_MAX_CHARS = 16 * 1024  # a command line longer than this is split on whitespace only
_TRITON_PORT_FLAG = re.compile(r"^--(?:http|grpc|metrics|sagemaker|vertex-ai)-port(?:=([0-9]+))?$")


def _ports_in_use(container: Mapping[str, Any]) -> set[int]:
    """The TCP ports a container listens on in the pod's network namespace: its declared ports, and
    Triton's --http-port/--grpc-port/--metrics-port/--sagemaker-port/--vertex-ai-port (often not
    declared), also inside a shell command line (``sh -c "tritonserver ..."``)."""
    ports = {
        p.get("containerPort")
        for p in container.get("ports") or []
        if isinstance(p, Mapping) and str(p.get("protocol") or "TCP") == "TCP"
    }
    words: list[str] = []
    for item in [*(container.get("command") or []), *(container.get("args") or [])]:
        text = str(item)
        if len(text) > SHLEX_MAX_CHARS:
            # shlex is pure Python (~0.5 s of CPU for 800 kB, holding the GIL): anyone who can reach
            # the port could stall every review with such bodies. Whitespace words still show flags.
            words += text.split()
            continue
        # `sh -c "tritonserver --http-port=8088 ..."`: one argument holding a whole command line.
        try:
            words += shlex.split(text)
        except ValueError:  # unbalanced quotes: the words as they are
            words += text.split()
    for i, word in enumerate(words):
        if match := _TRITON_PORT_FLAG.match(word):
            value = match.group(1) or (words[i + 1] if i + 1 < len(words) else "")
            if re.fullmatch(r"[0-9]{1,5}", value):
                ports.add(int(value))
    return {p for p in ports if isinstance(p, int)}


def port_clash(spec: Mapping[str, Any], port: int) -> str:
    """Who already listens on ``port`` beside the sidecar ("" if nobody): an app container, or a
    sidecar-style init container (restartPolicy Always: it runs the whole pod's life). A plain init
    container has finished before the sidecar starts."""
    running = [("container", c) for c in spec.get("containers") or []]
    running += [("init container", c) for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for what, container in running:
        if port in _ports_in_use(container):
            return f"{what} {container.get('name')!r} already uses port {port}"
    return ""


def _check_pod(spec: Mapping[str, Any]) -> None:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, Mapping) for c in containers):
        # Invalid as it is: the API server's validation says what is wrong, not a patch that cannot
        # apply (a 500), nor one that makes a pod whose only container is healer.
        raise ValueError("the pod has no containers array (a list of containers) to add the sidecar to")


def _check_port(spec: Mapping[str, Any], port: int) -> None:
    if spec.get("hostNetwork") is True:
        raise ValueError(
            f"hostNetwork: the sidecar's port {port} would be the node's, shared with every pod and "
            "process there and outside any NetworkPolicy"
        )
    if clash := port_clash(spec, port):
        raise ValueError(
            f"{clash}, the sidecar's port: a second listener there would crash-loop and its probes hit the "
            "other; free the port or change the injection's port"
        )


def injection_patch(pod: Mapping[str, Any], config: InjectionConfig) -> list[dict[str, Any]]:
    """The JSONPatch (RFC 6902) that injects the sidecar; [] when there is nothing to do.

    Raises ValueError (why) for a pod it must not change: the caller admits it as it is, with a warning."""
    if not wants_injection(pod):
        return []
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    _check_pod(spec)
    if already_injected(pod):
        return []
    _check_port(spec, config.port)
    patch: list[dict[str, Any]] = [{"op": "add", "path": "/spec/containers/-", "value": sidecar_container(config)}]
    volumes = sidecar_volumes(config)
    taken = {v.get("name") for v in spec.get("volumes") or []}
    clash = [v["name"] for v in volumes if v["name"] in taken]
    if clash:
        raise ValueError(f"the pod already has volumes named {', '.join(clash)}")
    if config.models_volume and config.models_volume not in taken:
        raise ValueError(
            f"the pod has no volume {config.models_volume!r} (the model repository the sidecar mounts at "
            f"{config.models_mount_path}): name Triton's model volume so, or change the injection's models_volume"
        )
    if spec.get("volumes") is None:
        patch.append({"op": "add", "path": "/spec/volumes", "value": volumes})
    else:
        patch += [{"op": "add", "path": "/spec/volumes/-", "value": v} for v in volumes]
    if config.image_pull_secrets:
        pulls = spec.get("imagePullSecrets")
        have = {p.get("name") for p in pulls or [] if isinstance(p, dict)}
        missing = [{"name": name} for name in config.image_pull_secrets if name not in have]
        if pulls is None:
            patch.append({"op": "add", "path": "/spec/imagePullSecrets", "value": missing})
        else:
            patch += [{"op": "add", "path": "/spec/imagePullSecrets/-", "value": p} for p in missing]
    annotations = metadata.get("annotations")
    patch.append(_add_key(metadata, "annotations", INJECTED, SIDECAR))
    # The same as a label: the chart's NetworkPolicy selects the pods that *have* the sidecar, not the
    # ones that asked for it (a pod admitted unmutated, e.g. for a port clash, keeps its own ports).
    patch.append(_add_key(metadata, "labels", INJECTED, SIDECAR))
    if str((annotations or {}).get(READINESS)) == "sidecar":
        patch.append(_readiness_patch(spec, annotations or {}, config))
    return patch


def _readiness_patch(
    spec: Mapping[str, Any], annotations: Mapping[str, Any], config: InjectionConfig
) -> dict[str, Any]:
    """Triton's readinessProbe on the sidecar's /readyz (README "Probes": why these numbers)."""
    triton_name = str(annotations.get(TRITON_CONTAINER) or "triton")
    containers = spec.get("containers") or []
    index = next((i for i, c in enumerate(containers) if c.get("name") == triton_name), None)
    if index is None:
        raise ValueError(f"{READINESS}: sidecar, but the pod has no container named {triton_name!r}")
    # "add" replaces an existing member: the same op whether the container had a probe or not.
    return {"op": "add", "path": f"/spec/containers/{index}/readinessProbe", "value": readiness_probe(config.port)}


def readiness_probe(port: int | str) -> dict[str, Any]:
    """Every 2 s, out of the Service after 2 misses in a row (at most ~4 s after /readyz turns 503,
    plus the sidecar's own confirmation), back after 1 success. A single lost answer (a slow node,
    a dropped packet) does not unready the pod; failureThreshold 1 would."""
    return {
        "httpGet": {"path": "/readyz", "port": port},
        "periodSeconds": READINESS_PERIOD_S,
        "timeoutSeconds": 1,
        "failureThreshold": READINESS_FAILURES,
        "successThreshold": 1,
    }


def _add_key(metadata: Mapping[str, Any], field_name: str, key: str, value: str) -> dict[str, Any]:
    """The patch op that sets ``metadata.<field_name>[key]``, creating the map when it is absent."""
    if not isinstance(metadata.get(field_name), dict):
        return {"op": "add", "path": f"/metadata/{field_name}", "value": {key: value}}
    return {"op": "add", "path": f"/metadata/{field_name}/{_pointer(key)}", "value": value}


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


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
        patch = injection_patch(pod, config)
    except (ValueError, TypeError, AttributeError) as exc:
        # Never block a pod because of healer: admit it as it is, and say why it has no sidecar.
        log.warning("not_injected", pod=where, uid=request["uid"], error=str(exc))
        response["warnings"] = [f"healer: sidecar not injected: {exc}"]
        return
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        log.info("injected", pod=where, uid=request["uid"], dry_run=bool(request.get("dryRun")))


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


class WebhookServer(BackgroundServer):
    """POST /mutate (AdmissionReview) and GET /healthz over TLS, on the listener slow clients cannot
    starve (healer/http_listener.py): a total deadline per request, TLS handshake included; reviews
    are answered on a small thread pool, never behind a slow client."""

    def __init__(self, listen: str, tls: ReloadingTLS, config: InjectionConfig) -> None:
        def inline(request: Request) -> Response | None:
            if request.method == "GET":
                return Response.text(200, "ok\n") if request.path == "/healthz" else Response.text(404, "not found\n")
            if request.method != "POST":
                return Response.text(405, "GET /healthz or POST /mutate\n")
            return None if request.path == "/mutate" else Response.text(404, "not found\n")

        def handler(request: Request) -> Response:
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
            request_deadline_s=REQUEST_DEADLINE_S,
            workers=4,
            max_connections=MAX_CONNECTIONS,
            body_budget=BODY_BUDGET_BYTES,
        )


def serve(listen: str, cert: Path, key: Path, injection: Path, stop: threading.Event) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGTERM)."""
    server = WebhookServer(listen, ReloadingTLS(cert, key), load_injection_config(injection))
    server.start()
    log.info("webhook_listening", address=server.address, pid=os.getpid())
    try:
        stop.wait()
    finally:
        server.stop()


__all__: Sequence[str] = (
    "BadReview",
    "InjectionConfig",
    "ReloadingTLS",
    "WebhookServer",
    "injection_patch",
    "load_injection_config",
    "review",
    "serve",
)
