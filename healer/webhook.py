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
"""

from __future__ import annotations

import base64
import hashlib
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

from healer.core.labels import INJECT, INJECTED, READINESS, TRITON_CONTAINER
from healer.edges.http_listener import BackgroundServer, Request, Response

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

# Written by the webhook on the pods it mutates. INJECTION is the evidence that a container is healer's
# own: its name, port and a digest of the fields the webhook wrote and the API server never rewrites
# (name, image, args, port names and numbers). A container is never taken for the sidecar by its name.
INJECTION = "healer.io/injection"
# Written on a pod admitted without the sidecar (a clash it cannot resolve): why. The admission warning
# goes to whoever created the pod, which for a Deployment is the ReplicaSet controller: nobody reads
# it, so the reason is kept on the pod (`kubectl get pod -o yaml`), where an operator looks.
NOT_INJECTED = "healer.io/not-injected"
# Triton's own defaults (HTTP, gRPC, metrics): it binds them unless its arguments say otherwise,
# whether or not the pod declares them.
TRITON_DEFAULT_PORTS = (8000, 8001, 8002)
# On the node's network (hostNetwork) a non-root process without NET_BIND_SERVICE (the sidecar drops
# every capability) cannot bind below this; in a pod's own network the runtimes allow it.
UNPRIVILEGED_PORT_START = 1024
VOLUME_NAME_MAX = 63  # a DNS label


class NotInjected(ValueError):
    """A valid pod the webhook leaves without the sidecar (a clash it cannot resolve): admitted as it
    is, with a warning and the NOT_INJECTED annotation saying why."""


def wants_injection(pod: Mapping[str, Any]) -> bool:
    metadata = pod.get("metadata") or {}
    return "true" in (
        str((metadata.get("labels") or {}).get(INJECT)),
        str((metadata.get("annotations") or {}).get(INJECT)),
    )


def _all_containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every container of the pod, init and ephemeral ones included (their names share one namespace)."""
    found: list[Mapping[str, Any]] = []
    for key in ("containers", "initContainers", "ephemeralContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            found += [c for c in items if isinstance(c, Mapping)]
    return found


def injection_digest(container: Mapping[str, Any]) -> str:
    """The digest of what the webhook wrote into its container and the API server keeps as written:
    defaulting adds fields (protocol, hostPort, terminationMessagePath, a fieldRef's apiVersion) but
    never changes these, so a stored or re-created pod still matches."""
    ports = [[p.get("name"), p.get("containerPort")] for p in container.get("ports") or [] if isinstance(p, Mapping)]
    identity = [container.get("name"), container.get("image"), container.get("args"), ports]
    return "sha256:" + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def already_injected(pod: Mapping[str, Any]) -> bool:
    """Whether the pod holds the sidecar this webhook wrote: only on its own evidence (the INJECTION
    annotation naming a container whose digest matches), never on a container's name: a user's
    container called ``healer``, or a copied annotation without the container, is not healer's."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    raw = annotations.get(INJECTION) if isinstance(annotations, Mapping) else None
    try:
        evidence = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return False
    if not isinstance(evidence, dict):
        return False
    spec = pod.get("spec") or {}
    return any(
        c.get("name") == evidence.get("container") and injection_digest(c) == evidence.get("digest")
        for c in (spec.get("containers") or [] if isinstance(spec, Mapping) else [])
        if isinstance(c, Mapping)
    )


@dataclass(frozen=True)
class Placement:
    """Where the sidecar goes in one pod (pure): its port, and the names of its volumes there."""

    port: int
    volumes: Mapping[str, str]  # the sidecar's volume name -> its name in this pod
    notes: tuple[str, ...] = ()  # what differs from the settings, and why (the admission's warnings)


def sidecar_container(config: InjectionConfig, placement: Placement | None = None) -> dict[str, Any]:
    port = placement.port if placement else config.port
    renamed = dict(placement.volumes) if placement else {}

    def field_env(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    def volume(name: str) -> str:
        return renamed.get(name, name)

    mounts: list[dict[str, Any]] = [
        {"name": volume("healer-config"), "mountPath": "/etc/healer", "readOnly": True},
        {"name": volume("healer-runs"), "mountPath": config.state_dir},
        {"name": volume("healer-tmp"), "mountPath": "/tmp"},  # noqa: S108 - an emptyDir of its own
        {"name": volume("healer-kube-api"), "mountPath": SERVICE_ACCOUNT_MOUNT, "readOnly": True},
    ]
    if config.models_volume:
        mounts.append({"name": config.models_volume, "mountPath": config.models_mount_path})
    container: dict[str, Any] = {
        "name": SIDECAR,
        "image": config.image,
        # --listen: the port chosen for this pod (the settings' port unless it is taken there), which
        # the probes below and Triton's readinessProbe name too; overrides healer.yaml's sidecar.listen.
        "args": ["healer", "sidecar", "--config", "/etc/healer/healer.yaml", f"--listen=0.0.0.0:{port}"],
        "ports": [{"name": SIDECAR, "containerPort": port}],
        "env": [
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
            # `kubectl exec -c healer -- healer promote|check|store ...` finds the sidecar's own config.
            {"name": "HEALER_CONFIG", "value": "/etc/healer/healer.yaml"},
        ],
        # The sidecar's own liveness: its probe loop turns (a hung loop would freeze /readyz's verdict).
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": port},
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


def sidecar_volumes(config: InjectionConfig, placement: Placement | None = None) -> list[dict[str, Any]]:
    renamed = dict(placement.volumes) if placement else {}
    volumes: list[dict[str, Any]] = [
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
    return [{**v, "name": renamed.get(v["name"], v["name"])} for v in volumes]


SIDECAR_VOLUMES = ("healer-config", "healer-runs", "healer-tmp", "healer-kube-api")


SHLEX_MAX_CHARS = 16 * 1024  # a command line longer than this is split on whitespace only
_TRITON_PORT_FLAG = re.compile(r"^--(?:http|grpc|metrics|sagemaker|vertex-ai)-port(?:=([0-9]+))?$")


def _ports_in_use(container: Mapping[str, Any]) -> set[int]:
    """The TCP ports a container listens on in the pod's network namespace: its declared ports (their
    hostPort too: on the node's network it is the same port), and Triton's --http-port/--grpc-port/
    --metrics-port/--sagemaker-port/--vertex-ai-port (often not declared), also inside a shell command
    line (``sh -c "tritonserver ..."``)."""
    ports: set[Any] = set()
    for p in container.get("ports") or []:
        if isinstance(p, Mapping) and str(p.get("protocol") or "TCP") == "TCP":
            ports |= {p.get("containerPort"), p.get("hostPort")}
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
    return {p for p in ports if isinstance(p, int) and not isinstance(p, bool)}


def taken_ports(spec: Mapping[str, Any]) -> dict[int, str]:
    """Each port the sidecar must not listen on in this pod, and who has it: the app containers' and
    the sidecar-style init containers' (restartPolicy Always: they run the whole pod's life; a plain
    init container has finished before the sidecar starts), and Triton's defaults, which it binds
    unless told otherwise, declared or not. With hostNetwork these are the node's ports too."""
    running = [("container", c) for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    running += [
        ("init container", c)
        for c in spec.get("initContainers") or []
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    taken = {port: "Triton's default ports (8000-8002)" for port in TRITON_DEFAULT_PORTS}
    for what, container in running:
        for port in sorted(_ports_in_use(container)):
            taken.setdefault(port, f"{what} {container.get('name')!r}")
    return taken


def choose_port(spec: Mapping[str, Any], config: InjectionConfig) -> tuple[int, str]:
    """The sidecar's port in this pod, and why it is not the settings' one ("" when it is): the first
    port from the settings' one up that nothing in the pod takes (deterministic: a re-created pod gets
    the same), and on the node's network (hostNetwork) none below 1024, which a non-root process
    without capabilities cannot bind. NotInjected when there is none."""
    taken = taken_ports(spec)
    host = spec.get("hostNetwork") is True
    start = max(config.port, UNPRIVILEGED_PORT_START) if host else config.port
    port = next((p for p in range(start, 65536) if p not in taken), None)
    if port is None:
        raise NotInjected(f"no free port from {start} to 65535 for the sidecar: the pod's containers take them all")
    if port == config.port:
        return port, ""
    if config.port in taken:
        why = f"{taken[config.port]} already uses port {config.port}"
    else:
        why = f"port {config.port} is below {UNPRIVILEGED_PORT_START}, which a non-root sidecar cannot bind on the node"
    return port, f"the sidecar listens on port {port}: {why}" + (" (hostNetwork: the node's port)" if host else "")


def _check_names(spec: Mapping[str, Any]) -> None:
    """The names the pod's users and healer's tools find the sidecar by cannot move: a clash there is
    not resolved by renaming (NotInjected)."""
    for container in _all_containers(spec):
        if container.get("name") == SIDECAR:
            # Renaming the sidecar would break every `kubectl exec -c healer`, `kubectl logs -c healer`
            # and `healer status` (which find it by name), and point them at the user's container.
            raise NotInjected(
                f"the pod already has a container named {SIDECAR!r} that this webhook did not inject (no "
                f"{INJECTION} annotation matching it): rename that container, or remove it if it is a copy of "
                "an old sidecar"
            )
    for container in _all_containers(spec):
        for port in container.get("ports") or []:
            if isinstance(port, Mapping) and port.get("name") == SIDECAR:
                # The PodMonitor scrapes, and the chart's NetworkPolicy admits, the port named "healer".
                raise NotInjected(
                    f"container {container.get('name')!r} already has a port named {SIDECAR!r}, the name the "
                    "PodMonitor and the NetworkPolicy give the sidecar's port: rename that port"
                )


def _volume_names(spec: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The sidecar's volumes' names in this pod (its own name, or the first free ``<name>-2``,
    ``-3`` ... when the pod has one so named), and a note per renamed volume. Only the sidecar's
    own mounts name them, so a rename is invisible to everything else."""
    taken = {str(v.get("name")) for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    renamed: dict[str, str] = {}
    notes: list[str] = []
    for name in SIDECAR_VOLUMES:
        chosen = next(
            candidate
            for candidate in (name if n == 1 else f"{name}-{n}"[:VOLUME_NAME_MAX] for n in range(1, len(taken) + 2))
            if candidate not in taken
        )
        taken.add(chosen)
        if chosen != name:
            renamed[name] = chosen
            notes.append(f"the pod has its own volume {name!r}: the sidecar's is named {chosen!r}")
    return renamed, notes


def place(spec: Mapping[str, Any], config: InjectionConfig) -> Placement:
    """Where the sidecar goes in this pod, every name and port it adds checked against the pod (pure).

    Its env and mount paths are its own container's and cannot clash with anything in the pod (the
    mount paths are checked against each other when the settings are loaded). Pod-wide are: the
    container's name and its port's name (NotInjected on a clash: see _check_names), the port number
    (another free one is chosen), the volume names (renamed)."""
    _check_names(spec)
    port, why = choose_port(spec, config)
    volumes, notes = _volume_names(spec)
    return Placement(port=port, volumes=volumes, notes=(why, *notes) if why else tuple(notes))


def _check_pod(spec: Mapping[str, Any]) -> None:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, Mapping) for c in containers):
        # Invalid as it is: the API server's validation says what is wrong, not a patch that cannot
        # apply (a 500), nor one that makes a pod whose only container is healer.
        raise ValueError("the pod has no containers array (a list of containers) to add the sidecar to")


def injection_patch(pod: Mapping[str, Any], config: InjectionConfig) -> list[dict[str, Any]]:
    """The JSONPatch (RFC 6902) that injects the sidecar; [] when there is nothing to do."""
    return plan_injection(pod, config)[0]


def plan_injection(pod: Mapping[str, Any], config: InjectionConfig) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSONPatch that injects the sidecar ([] when there is nothing to do) and notes on what
    differs from the settings in this pod (a port or volume name moved off a clash), for the warnings.

    Raises NotInjected (why) for a valid pod it must leave without the sidecar, ValueError for one it
    cannot read: the caller admits it as it is, with a warning."""
    if not wants_injection(pod):
        return [], []
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    _check_pod(spec)
    if already_injected(pod):
        return [], []
    annotations = metadata.get("annotations")
    taken = {v.get("name") for v in spec.get("volumes") or []}
    if config.models_volume and config.models_volume not in taken:
        raise NotInjected(
            f"the pod has no volume {config.models_volume!r} (the model repository the sidecar mounts at "
            f"{config.models_mount_path}): name Triton's model volume so, or change the injection's models_volume"
        )
    placement = place(spec, config)
    container = sidecar_container(config, placement)
    if spec.get("hostNetwork") is True:
        # On the node's network hostPort is containerPort (the API server would default it so): the
        # scheduler then keeps two such pods whose sidecars chose the same port off one node.
        container["ports"][0]["hostPort"] = placement.port
    patch: list[dict[str, Any]] = [{"op": "add", "path": "/spec/containers/-", "value": container}]
    volumes = sidecar_volumes(config, placement)
    if spec.get("volumes") is None:
        patch.append({"op": "add", "path": "/spec/volumes", "value": volumes})
    else:
        patch += [{"op": "add", "path": "/spec/volumes/-", "value": v} for v in volumes]
    patch += _pull_secrets_patch(spec, config)
    if str((annotations or {}).get(READINESS)) == "sidecar":
        patch.append(_readiness_patch(spec, annotations or {}, placement.port))
    evidence = {"container": SIDECAR, "port": placement.port, "digest": injection_digest(container)}
    if placement.volumes:
        evidence["volumes"] = dict(placement.volumes)
    patch += _evidence_patch(metadata, json.dumps(evidence, sort_keys=True))
    # The same as a label: the chart's NetworkPolicy selects the pods that *have* the sidecar, not the
    # ones that asked for it (a pod admitted without it keeps its own ports).
    patch.append(_add_key(metadata, "labels", INJECTED, SIDECAR))
    return patch, list(placement.notes)


def _pull_secrets_patch(spec: Mapping[str, Any], config: InjectionConfig) -> list[dict[str, Any]]:
    """The healer image's pull secrets the pod lacks, added to its own."""
    if not config.image_pull_secrets:
        return []
    pulls = spec.get("imagePullSecrets")
    have = {p.get("name") for p in pulls or [] if isinstance(p, dict)}
    missing = [{"name": name} for name in config.image_pull_secrets if name not in have]
    if pulls is None:
        return [{"op": "add", "path": "/spec/imagePullSecrets", "value": missing}]
    return [{"op": "add", "path": "/spec/imagePullSecrets/-", "value": p} for p in missing]


def _evidence_patch(metadata: Mapping[str, Any], evidence: str) -> list[dict[str, Any]]:
    """The annotations of an injected pod: INJECTED (for people and scripts), INJECTION (the evidence
    already_injected reads), and a stale NOT_INJECTED (copied from a pod admitted without) removed."""
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": {INJECTED: SIDECAR, INJECTION: evidence}}]
    patch = [
        _add_key(metadata, "annotations", INJECTED, SIDECAR),
        _add_key(metadata, "annotations", INJECTION, evidence),
    ]
    if NOT_INJECTED in annotations:
        patch.append({"op": "remove", "path": f"/metadata/annotations/{_pointer(NOT_INJECTED)}"})
    return patch


def not_injected_patch(pod: Mapping[str, Any], why: str) -> list[dict[str, Any]]:
    """The patch that records on a pod admitted without the sidecar why ([] when its metadata is not
    a mapping with an annotations mapping or none: then the warning alone says it)."""
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("annotations") or {}, dict):
        return []
    return [_add_key(metadata, "annotations", NOT_INJECTED, why[:1000])]


def _readiness_patch(spec: Mapping[str, Any], annotations: Mapping[str, Any], port: int) -> dict[str, Any]:
    """Triton's readinessProbe on the sidecar's /readyz (README "Probes": why these numbers)."""
    triton_name = str(annotations.get(TRITON_CONTAINER) or "triton")
    containers = spec.get("containers") or []
    index = next((i for i, c in enumerate(containers) if c.get("name") == triton_name), None)
    if index is None:
        raise NotInjected(f"{READINESS}: sidecar, but the pod has no container named {triton_name!r}")
    # "add" replaces an existing member: the same op whether the container had a probe or not.
    return {"op": "add", "path": f"/spec/containers/{index}/readinessProbe", "value": readiness_probe(port)}


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


class WebhookServer(BackgroundServer):
    """POST /mutate (AdmissionReview) and GET /healthz over TLS, on the listener slow clients cannot
    starve (healer/edges/http_listener.py): a total deadline per request, TLS handshake included; reviews
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
    "NotInjected",
    "Placement",
    "ReloadingTLS",
    "WebhookServer",
    "injection_patch",
    "load_injection_config",
    "place",
    "plan_injection",
    "review",
    "serve",
)
