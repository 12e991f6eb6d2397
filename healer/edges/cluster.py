"""The operator's edge to a cluster: the official ``kubernetes`` client, loaded from a kubeconfig as
kubectl loads it (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``; ``--context``; exec plugins
such as ``aws eks get-token`` or ``kubelogin``, OIDC, client certificates), or from the pod's service
account when run inside one.

Only the CLI's operator-side commands use this module (``healer status``, ``healer runs``,
``healer rollback`` and ``healer drill --engine argo`` without an argo-server). The sidecar never
imports it: the official client costs about 68 MB of RSS in every Triton pod (import-linter keeps it
out of the sidecar's import graph); the sidecar's few calls go through healer/edges/kube.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_TIMEOUT_S = 10.0


class ClusterError(Exception):
    """The cluster could not be reached, or refused: a one-line message for people (what was asked,
    of whom, and what came back), never a traceback."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ClusterAccess:
    """An API client for one cluster and the namespace to use there."""

    api_client: Any  # kubernetes.client.ApiClient
    namespace: str
    # How it was loaded, for messages: "kubeconfig ~/.kube/config, context prod" or "in-cluster".
    source: str
    user: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        self.api_client.close()


def kubeconfig_present(kubeconfig: str | None = None) -> bool:
    """Whether a kubeconfig would be found: the one given, $KUBECONFIG's, or ~/.kube/config."""
    if kubeconfig:
        return True
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return any(Path(p).expanduser().is_file() for p in listed) or Path("~/.kube/config").expanduser().is_file()


def connect(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ClusterAccess:
    """The cluster, as kubectl would reach it with the same flags. The namespace: ``namespace``, else
    the context's, else the pod's own (in-cluster), else "default". Raises ClusterError."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if not kubeconfig_present(kubeconfig) and context is None and IN_CLUSTER_NAMESPACE.parent.is_dir():
        configuration = _configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ClusterError(f"in-cluster service account: {exc}") from exc
        own = IN_CLUSTER_NAMESPACE.read_text().strip() if IN_CLUSTER_NAMESPACE.is_file() else ""
        return ClusterAccess(
            client.ApiClient(configuration), namespace or own or "default", "in-cluster", timeout_s=timeout_s
        )
    path = kubeconfig or None  # None: $KUBECONFIG (its list merged) or ~/.kube/config, as kubectl
    where = f"kubeconfig {path or os.environ.get('KUBECONFIG') or '~/.kube/config'}"
    try:
        contexts, current = config.list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else current
        if chosen is None:
            names = ", ".join(sorted(c["name"] for c in contexts)) or "none"
            raise ClusterError(f"{where}: no context {context!r} (contexts: {names})")
        configuration = _configuration()
        # Exec plugins and OIDC run here, as kubectl runs them; a token they print is refreshed on expiry.
        config.load_kube_config(config_file=path, context=chosen["name"], client_configuration=configuration)
    except ConfigException as exc:
        raise ClusterError(f"{where}: {exc}") from exc
    except (OSError, ValueError) as exc:  # unreadable file, YAML that is not a kubeconfig, a plugin that failed
        raise ClusterError(f"{where}: {type(exc).__name__}: {exc}") from exc
    settings = chosen.get("context") or {}
    return ClusterAccess(
        client.ApiClient(configuration),
        namespace or settings.get("namespace") or "default",
        f"{where}, context {chosen['name']}",
        user=str(settings.get("user", "")),
        timeout_s=timeout_s,
    )


def _configuration() -> Any:
    """The client's configuration with retries off: urllib3 would otherwise retry a read that timed
    out three more times, so one wedged sidecar would hold `healer status` for four timeouts."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.retries = 0
    return configuration


def api_failure(access: ClusterAccess, what: str, exc: BaseException) -> ClusterError:
    """An exception from the official client as a ClusterError naming what was asked and who asked.
    A 403 says which user lacked which right; a connection failure says where it tried."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        message = status_message(exc.body) or (exc.reason or "")
        who = f" as {access.user}" if access.user else ""
        hint = ""
        if exc.status == 401:
            hint = " (the credentials were not accepted: log in again, or check the kubeconfig's user)"
        elif exc.status == 403:
            hint = f" (the user{who} lacks this right: ask for a Role that allows it in {access.namespace})"
        return ClusterError(
            f"{access.host} refused to {what} (HTTP {exc.status}){who}: {message}{hint}", status=exc.status
        )
    return ClusterError(f"{access.host} unreachable to {what} ({access.source}): {type(exc).__name__}: {exc}")


def status_message(body: Any) -> str:
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if not body:
        return ""
    try:
        document = json.loads(body)
    except ValueError:
        return str(body)[:300]
    return str(document.get("message", "")) if isinstance(document, Mapping) else str(body)[:300]


def list_pods(access: ClusterAccess, selector: str = "") -> list[dict[str, Any]]:
    """The pods in the namespace (every namespace when it is "": kubectl's -A) matching ``selector``, as
    the API's JSON."""
    from kubernetes import client

    api = client.CoreV1Api(access.api_client)
    options = {"label_selector": selector, "_request_timeout": access.timeout_s, "_preload_content": False}
    try:
        if access.namespace:
            listed = api.list_namespaced_pod(access.namespace, **options)
        else:
            listed = api.list_pod_for_all_namespaces(**options)
        document = json.loads(listed.data)
    except Exception as exc:
        raise api_failure(access, f"list pods in {access.namespace or 'every namespace'}", exc) from exc
    return list(document.get("items") or [])


def sidecar_status(access: ClusterAccess, namespace: str, pod: str, port: int) -> dict[str, Any] | str:
    """A sidecar's /status document through the API server's pod proxy, or why it could not be read."""
    from kubernetes import client

    api = client.CoreV1Api(access.api_client)
    try:
        answer = api.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:{port}", namespace, "status", _request_timeout=access.timeout_s, _preload_content=False
        )
        document = json.loads(answer.data)
    except Exception as exc:
        return str(api_failure(access, f"read {namespace}/{pod}'s /status", exc))
    return document if isinstance(document, dict) else f"{namespace}/{pod}: /status is not a JSON object"
