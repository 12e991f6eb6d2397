"""Argo Workflows through the Kubernetes API, as the ``argo`` CLI works in its default mode: the
Workflow objects are created, read and stopped with the caller's kubeconfig, without an argo-server
(no port-forward, no token file). The Argo controller runs what is created; RBAC on
``workflows.argoproj.io`` decides who may.

It answers the few calls the ArgoEngine makes of Hera's WorkflowsService (create, get, stop, list),
with the same models, so the engine's rules (join a run of this occurrence, wait, status) are the
same whichever way the workflows travel. Operator side only (the official client; see healer/edges/cluster.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from healer.core.labels import STOPPED_ANNOTATION
from healer.edges.cluster import ClusterAccess, status_message
from healer.engines.argo import ArgoEngine, WorkflowApiError
from healer.vocabulary import TEMPLATE_NAME

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "workflows"


def engine_through_kubernetes(
    access: ClusterAccess,
    *,
    template_name: str = TEMPLATE_NAME,
    poll_interval_s: float = 1.0,
    join_window_s: float | None = None,
) -> ArgoEngine:
    """The ArgoEngine over the Kubernetes API with a kubeconfig (healer.edges.cluster.connect), as the
    ``argo`` CLI works without an argo-server: Workflow objects created and read directly."""
    engine: ArgoEngine | None = None

    def note(date: str | None) -> None:
        if engine is not None:
            engine._answered.date = date  # the API server's clock, for the join rule

    engine = ArgoEngine(
        access.host,
        access.namespace,
        request_timeout_s=access.timeout_s,
        poll_interval_s=poll_interval_s,
        template_name=template_name,
        join_window_s=join_window_s,
        service=KubeWorkflows(access, on_date=note),
    )
    return engine


class KubeWorkflows:
    """Hera's WorkflowsService's create/get/stop/list over the Kubernetes API (CustomObjectsApi)."""

    def __init__(self, access: ClusterAccess, *, on_date: Callable[[str | None], None] | None = None) -> None:
        from kubernetes import client

        self.access = access
        self._api = client.CustomObjectsApi(access.api_client)
        self._on_date = on_date or (lambda _date: None)

    @property
    def host(self) -> str:
        return self.access.host

    def create_workflow(self, create: Any) -> Any:
        body = _dump(create.workflow)
        body.setdefault("apiVersion", f"{GROUP}/{VERSION}")
        body.setdefault("kind", "Workflow")
        namespace = create.namespace or self.access.namespace
        return _workflow(self._call("create", lambda **kw: self._api.create_namespaced_custom_object_with_http_info(
            GROUP, VERSION, namespace, PLURAL, body, **kw)))  # fmt: skip

    def get_workflow(self, name: str) -> Any:
        return _workflow(self._call("get", lambda **kw: self._api.get_namespaced_custom_object_with_http_info(
            GROUP, VERSION, self.access.namespace, PLURAL, name, **kw)))  # fmt: skip

    def stop_workflow(self, name: str, request: Any) -> Any:
        # What `argo stop` does without an argo-server: the controller stops the workflow and runs its
        # exit handler (spec.shutdown). The message goes on an annotation, for people.
        patch = {
            "spec": {"shutdown": "Stop"},
            "metadata": {"annotations": {STOPPED_ANNOTATION: request.message or ""}},
        }
        return _workflow(self._call("stop", lambda **kw: self._api.patch_namespaced_custom_object_with_http_info(
            GROUP, VERSION, self.access.namespace, PLURAL, name, patch, **kw)))  # fmt: skip

    def get_workflow_template(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        where = namespace or self.access.namespace
        return dict(self._call("get", lambda **kw: self._api.get_namespaced_custom_object_with_http_info(
            GROUP, VERSION, where, "workflowtemplates", name, **kw)))  # fmt: skip

    def list_workflows(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict[str, Any]]:
        where, selector = namespace or self.access.namespace, label_selector or ""
        if not where:  # an access to every namespace (kubectl's -A)
            listed = self._call("list", lambda **kw: self._api.list_cluster_custom_object_with_http_info(
                GROUP, VERSION, PLURAL, label_selector=selector, **kw))  # fmt: skip
            return list(listed.get("items") or [])
        listed = self._call("list", lambda **kw: self._api.list_namespaced_custom_object_with_http_info(
            GROUP, VERSION, where, PLURAL, label_selector=selector, **kw))  # fmt: skip
        return list(listed.get("items") or [])

    def close(self) -> None:
        """Nothing to release: the caller owns ``access`` (one client for every call of a command)."""

    def _call(self, verb: str, call: Callable[..., Any]) -> Any:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            data, status, headers = call(_request_timeout=(self.access.timeout_s, self.access.timeout_s))
        except ApiException as exc:
            if exc.status in (0, None):  # the client's own failure before an answer: TLS, a bad URL
                raise WorkflowApiError(f"{exc.reason or exc}", status=None, maybe_delivered=False) from exc
            message = status_message(exc.body) or exc.reason or ""
            who = f" as {self.access.user}" if self.access.user else ""
            raise WorkflowApiError(f"{message}{who}", status=exc.status) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # urllib3 wraps the connection's own failure in MaxRetryError: look at its reason.
            cause = getattr(exc, "reason", None) or exc
            never = (
                urllib3.exceptions.NewConnectionError,
                urllib3.exceptions.ConnectTimeoutError,
                ConnectionRefusedError,
            )
            connected = not isinstance(cause, never) and not isinstance(exc, never)
            raise WorkflowApiError(
                f"{type(exc).__name__}: {exc}", status=None, maybe_delivered=verb == "create" and connected
            ) from exc
        self._on_date((headers or {}).get("Date"))
        if not isinstance(data, Mapping):  # a 200 that is not a Kubernetes object: a proxy or login page in the way
            raise WorkflowApiError(
                f"HTTP {status} but not a Kubernetes object (a proxy or login page?): {str(data)[:30]!r}",
                status=None,
                maybe_delivered=verb == "create",
            )
        return data


def _dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


def _workflow(data: Mapping[str, Any]) -> Any:
    from hera.workflows.models import Workflow

    return Workflow.model_validate(dict(data))
