"""The Kubernetes edge: annotate a pod for diagnosis and record Events on it.

Everything here is best effort for healing: callers log a failure and carry on, because the
Kubernetes API being down must never stop a model from being restored. Every call has a timeout.
The kubernetes client (~70 MB RSS) is imported only when a KubeClient is built.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


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
    """A pod as the drain rule weighs it (healer/decisions.py ``may_drain``)."""

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
    def __init__(self, api_client: Any, *, timeout_s: float = 5.0, component: str = "healer") -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._client = client
        self.timeout_s = timeout_s
        self.component = component

    @classmethod
    def in_cluster(cls, *, timeout_s: float = 5.0) -> KubeClient:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        # One attempt per call: a retry storm against a down API server would stall the probe loop.
        configuration.retries = 0
        return cls(client.ApiClient(configuration), timeout_s=timeout_s)

    @classmethod
    def for_host(cls, host: str, *, token: str | None = None, timeout_s: float = 5.0) -> KubeClient:
        """Talk to an API server at ``host`` (tests point this at a local stand-in)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = host
        if token:
            configuration.api_key = {"authorization": f"Bearer {token}"}
        configuration.retries = 0
        return cls(client.ApiClient(configuration), timeout_s=timeout_s)

    def triton_pods(self, namespace: str, selector: str) -> list[TritonPod]:
        """Every pod matching a label selector, sorted by name, with what a rollback needs to know."""
        pods = self._call(
            "list pods",
            self._core.list_namespaced_pod,
            namespace,
            label_selector=selector,
            _request_timeout=self.timeout_s,
        )
        found = [
            TritonPod(
                name=pod.metadata.name,
                ip=(pod.status.pod_ip or "") if pod.status is not None else "",
                phase=(pod.status.phase or "") if pod.status is not None else "",
                # Kubernetes keeps reporting a deleted pod Running until it is gone: deletionTimestamp tells.
                terminating=pod.metadata.deletion_timestamp is not None,
            )
            for pod in pods.items
        ]
        return sorted(found, key=lambda p: p.name)

    def pod_readiness(self, namespace: str, selector: str) -> list[PodReadiness]:
        """Every pod matching a label selector with its Ready condition and annotations, sorted by name."""
        pods = self._call(
            "list pods",
            self._core.list_namespaced_pod,
            namespace,
            label_selector=selector,
            _request_timeout=self.timeout_s,
        )
        found = []
        for pod in pods.items:
            conditions = (pod.status.conditions if pod.status is not None else None) or []
            found.append(
                PodReadiness(
                    name=pod.metadata.name,
                    ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
                    terminating=pod.metadata.deletion_timestamp is not None,
                    annotations=dict(pod.metadata.annotations or {}),
                )
            )
        return sorted(found, key=lambda p: p.name)

    def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str]) -> None:
        """Merge annotations into the pod's metadata (a JSON merge patch: nothing else changes)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        self._call(
            "annotate",
            self._core.patch_namespaced_pod,
            pod.name,
            pod.namespace,
            body,
            _content_type="application/merge-patch+json",
            _request_timeout=self.timeout_s,
        )

    def pod_event(self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal") -> None:
        """Record an Event on the pod (shown by `kubectl describe pod`)."""
        now = dt.datetime.now(dt.UTC)
        event = self._client.CoreV1Event(
            metadata=self._client.V1ObjectMeta(name=f"{pod.name}.{uuid.uuid4().hex[:12]}", namespace=pod.namespace),
            involved_object=self._client.V1ObjectReference(
                kind="Pod", name=pod.name, namespace=pod.namespace, api_version="v1"
            ),
            reason=reason,
            message=message[:1024],
            type=event_type,
            source=self._client.V1EventSource(component=self.component),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        self._call(
            "event",
            self._core.create_namespaced_event,
            pod.namespace,
            event,
            _request_timeout=self.timeout_s,
        )

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return method(*args, **kwargs)
        except ApiException as exc:
            raise KubeError(f"{what}: HTTP {exc.status} {exc.reason}: {str(exc.body)[:300]}") from exc
        except (HTTPError, OSError) as exc:
            raise KubeError(f"{what}: Kubernetes API not reachable: {exc}") from exc
