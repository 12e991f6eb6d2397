"""The Kubernetes edge: the few API calls healer makes, over a small REST client.

Everything here is best effort for healing: callers log a failure and carry on, because the
Kubernetes API being down must never stop a model from being restored. Every call has a timeout
and is tried once (a retry storm against a down API server would stall the probe loop).

Why not the official client: importing ``kubernetes.client`` costs about 45 MB of RSS in every
Triton pod (measured: the sidecar at 108 MiB in-cluster against 64 off-cluster), for four calls.
This client is the standard library's ``urllib`` and ``ssl``: the service-account token is re-read
on every call (projected tokens rotate), the cluster CA verifies the API server.

Every call healer makes is declared in ``API_CALLS`` (verb, resource, API group): the RBAC tests
check the shipped Roles against this list, so a new call without a permission fails a test.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where the kubelet mounts the pod's service-account token and CA (HEALER_SERVICE_ACCOUNT_DIR moves
# it, e.g. for a benchmark of the in-cluster path outside a cluster).
SERVICE_ACCOUNT_DIR = Path(
    os.environ.get("HEALER_SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
)
SERVICE_ACCOUNT_NAMESPACE = str(SERVICE_ACCOUNT_DIR / "namespace")
MAX_RESPONSE_BYTES = 16 << 20  # a pod list of a large set; anything bigger is not what we asked for


@dataclass(frozen=True)
class ApiCall:
    """One Kubernetes API call healer makes: what an RBAC rule must allow."""

    verb: str  # get | list | create | patch
    resource: str
    group: str = ""  # "" = the core API group


# Every call, by the KubeClient method that makes it (tests read this to check the shipped Roles).
API_CALLS: Mapping[str, ApiCall] = {
    "triton_pods": ApiCall("list", "pods"),
    "pod_readiness": ApiCall("list", "pods"),
    "annotate_pod": ApiCall("patch", "pods"),
    "pod_event": ApiCall("create", "events"),
}


class KubeError(Exception):
    """The Kubernetes API refused or did not answer."""


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str, *, default_namespace: str) -> PodRef:
        """ "ns/name" or "name" (in the default namespace)."""
        namespace, _, name = text.rpartition("/")
        if not name:
            raise ValueError(f"not a pod reference: {text!r}")
        return cls(namespace or default_namespace, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class TritonPod:
    name: str
    ip: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    terminating: bool  # deletionTimestamp set: on its way out, whatever its phase says


@dataclass(frozen=True)
class PodReadiness:
    """A pod as the drain rule weighs it (healer/core/decisions.py ``drain_plan``)."""

    name: str
    ready: bool  # its Ready condition is True: the Service sends it traffic
    terminating: bool  # deletionTimestamp set: on its way out
    annotations: Mapping[str, str]


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def default_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


class KubeClient:
    """The Kubernetes API over urllib: one host, a bearer token read per call, TLS verified."""

    def __init__(
        self,
        host: str,
        *,
        token: Callable[[], str] | None = None,
        ca_file: str | None = None,
        timeout_s: float = 5.0,
        component: str = "healer",
    ) -> None:
        self.host = host.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        self.component = component
        self._ssl: ssl.SSLContext | None = None
        if self.host.startswith("https://"):
            self._ssl = ssl.create_default_context(cafile=ca_file)

    @classmethod
    def in_cluster(cls, *, timeout_s: float = 5.0) -> KubeClient:
        """From the pod's service account (what ``kubectl`` calls in-cluster config)."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token_file = SERVICE_ACCOUNT_DIR / "token"
        ca_file = SERVICE_ACCOUNT_DIR / "ca.crt"
        if not host:
            raise KubeError("not in a cluster: KUBERNETES_SERVICE_HOST is not set")
        if not token_file.is_file() or not ca_file.is_file():
            raise KubeError(f"no service-account token or CA in {SERVICE_ACCOUNT_DIR} (automountServiceAccountToken?)")
        bracketed = f"[{host}]" if ":" in host else host

        def token() -> str:
            # Re-read every call: a projected token is rotated by the kubelet while the pod runs.
            return token_file.read_text().strip()

        return cls(f"https://{bracketed}:{port}", token=token, ca_file=str(ca_file), timeout_s=timeout_s)

    @classmethod
    def for_host(
        cls, host: str, *, token: str | None = None, ca_file: str | None = None, timeout_s: float = 5.0
    ) -> KubeClient:
        """Talk to an API server at ``host`` (tests point this at a local API server)."""
        return cls(host, token=(lambda: token) if token else None, ca_file=ca_file, timeout_s=timeout_s)

    # ---- the calls (each declared in API_CALLS) -----------------------------------------------------------
    def triton_pods(self, namespace: str, selector: str) -> list[TritonPod]:
        """Every pod matching a label selector, sorted by name, with what a rollback needs to know."""
        found = []
        for pod in self._list_pods(namespace, selector):
            metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
            found.append(
                TritonPod(
                    name=str(metadata.get("name", "")),
                    ip=str(status.get("podIP") or ""),
                    phase=str(status.get("phase") or ""),
                    # Kubernetes keeps reporting a deleted pod Running until it is gone: deletionTimestamp tells.
                    terminating=metadata.get("deletionTimestamp") is not None,
                )
            )
        return sorted(found, key=lambda p: p.name)

    def pod_readiness(self, namespace: str, selector: str) -> list[PodReadiness]:
        """Every pod matching a label selector with its Ready condition and annotations, sorted by name."""
        found = []
        for pod in self._list_pods(namespace, selector):
            metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
            conditions = status.get("conditions") or []
            found.append(
                PodReadiness(
                    name=str(metadata.get("name", "")),
                    ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
                    terminating=metadata.get("deletionTimestamp") is not None,
                    annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
                )
            )
        return sorted(found, key=lambda p: p.name)

    def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str]) -> None:
        """Merge annotations into the pod's metadata (a JSON merge patch: nothing else changes)."""
        self._request(
            "annotate",
            "PATCH",
            f"/api/v1/namespaces/{_segment(pod.namespace)}/pods/{_segment(pod.name)}",
            body={"metadata": {"annotations": dict(annotations)}},
            content_type="application/merge-patch+json",
        )

    def pod_event(self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal") -> None:
        """Record an Event on the pod (shown by `kubectl describe pod`)."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{uuid.uuid4().hex[:12]}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace},
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self.component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._request("event", "POST", f"/api/v1/namespaces/{_segment(pod.namespace)}/events", body=event)

    # ---- transport ----------------------------------------------------------------------------------------
    def _list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": selector})
        answer = self._request("list pods", "GET", f"/api/v1/namespaces/{_segment(namespace)}/pods?{query}")
        items = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise KubeError("list pods: the API server's answer has no items list")
        return [item for item in items if isinstance(item, dict)]

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self._token is not None:
            try:
                headers["Authorization"] = f"Bearer {self._token()}"
            except OSError as exc:
                raise KubeError(f"{what}: cannot read the service-account token: {exc}") from exc
        request = urllib.request.Request(self.host + path, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._ssl) as response:  # noqa: S310
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(2048).decode(errors="replace")
            raise KubeError(f"{what}: HTTP {exc.code} {exc.reason}: {_status_message(detail)[:300]}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise KubeError(f"{what}: Kubernetes API not reachable: {getattr(exc, 'reason', exc)}") from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise KubeError(f"{what}: answer larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(raw) if raw else {}
        except ValueError as exc:
            raise KubeError(f"{what}: the API server's answer is not JSON: {exc}") from exc


def _segment(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _status_message(text: str) -> str:
    """The message of a Kubernetes Status body, else the text itself."""
    try:
        document = json.loads(text)
    except ValueError:
        return text
    return str(document.get("message", text)) if isinstance(document, dict) else text
