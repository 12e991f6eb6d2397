"""The webhook's settings (the injection file, a ConfigMap mounted into its pod) and the sidecar
container and volumes they describe (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from healer.core.pod_contract import (
    CONFIG_DIR,
    CONFIG_MAP,
    CONFIG_PATH,
    HEALER_UID,
    SIDECAR_CONTAINER,
    SIDECAR_PORT,
    STATE_DIR,
)

SIDECAR = SIDECAR_CONTAINER
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# The sidecar's volumes (renamed in a pod that has its own of the same name: see place()).
CONFIG_VOLUME = "healer-config"  # the CONFIG_MAP, at CONFIG_DIR
RUNS_VOLUME = "healer-runs"  # its state directory
TMP_VOLUME = "healer-tmp"
KUBE_API_VOLUME = "healer-kube-api"  # its token for the API server
SIDECAR_VOLUMES = (CONFIG_VOLUME, RUNS_VOLUME, TMP_VOLUME, KUBE_API_VOLUME)


class InjectionConfigError(ValueError):
    """The injection settings file is wrong; the message names the file, the key and the problem."""


@dataclass(frozen=True)
class InjectionConfig:
    """What the injected sidecar looks like (a ConfigMap mounted into the webhook's pod)."""

    image: str
    config_map: str = CONFIG_MAP  # holds healer.yaml, mounted at CONFIG_DIR
    port: int = SIDECAR_PORT
    # The image's USER; None: the platform assigns one (OpenShift's restricted SCC, from the
    # namespace's range), so the sidecar's securityContext names none.
    run_as_user: int | None = HEALER_UID
    state_dir: str = STATE_DIR
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
        {"name": volume(CONFIG_VOLUME), "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": volume(RUNS_VOLUME), "mountPath": config.state_dir},
        {"name": volume(TMP_VOLUME), "mountPath": "/tmp"},  # noqa: S108 - an emptyDir of its own
        {"name": volume(KUBE_API_VOLUME), "mountPath": SERVICE_ACCOUNT_MOUNT, "readOnly": True},
    ]
    if config.models_volume:
        mounts.append({"name": config.models_volume, "mountPath": config.models_mount_path})
    container: dict[str, Any] = {
        "name": SIDECAR,
        "image": config.image,
        # --listen: the port chosen for this pod (the settings' port unless it is taken there), which
        # the probes below and Triton's readinessProbe name too; overrides healer.yaml's sidecar.listen.
        "args": ["healer", "sidecar", "--config", CONFIG_PATH, f"--listen=0.0.0.0:{port}"],
        "ports": [{"name": SIDECAR, "containerPort": port}],
        "env": [
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
            # `kubectl exec -c healer -- healer promote|check|store ...` finds the sidecar's own config.
            {"name": "HEALER_CONFIG", "value": CONFIG_PATH},
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
        {"name": CONFIG_VOLUME, "configMap": {"name": config.config_map}},
        {"name": RUNS_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
        # The pod's token for the sidecar alone, with the API server's own audience (Argo's client
        # auth mode forwards it to the API server); the kubelet rotates it, healer re-reads it.
        {
            "name": KUBE_API_VOLUME,
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
