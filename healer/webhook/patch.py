"""The patch (pure): whether a pod gets the sidecar, where it goes in that pod (every name and port it
adds checked against the pod), and the JSONPatch that adds it, or the annotation saying why not."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from healer.core.labels import INJECT, INJECTED, INJECTION, NOT_INJECTED, READINESS, TRITON_CONTAINER
from healer.webhook.config import (
    SIDECAR,
    SIDECAR_VOLUMES,
    InjectionConfig,
    Placement,
    sidecar_container,
    sidecar_volumes,
)

# Triton's readinessProbe on /readyz (README "Probes"): a pod leaves the Service at most
# period × failures after /readyz turns 503; one missed answer alone never unreadies it.
READINESS_PERIOD_S = 2
READINESS_FAILURES = 2
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
