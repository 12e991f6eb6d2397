"""`healer check`: what an injected sidecar needs from the cluster, checked from a pod that has the
sidecar's service account, token and healer.yaml (the chart's `helm test` pod, or `kubectl exec -c
healer` into a sidecar). Each check says what it tried and what came back; none changes anything.

* healer.yaml loads (the ConfigMap the chart rendered);
* argo-server answers at rollback.argo.host, its certificate is trusted with rollback.argo.ca_file,
  and this pod's token may read the healer-rollback WorkflowTemplate (argo-server reads it as the
  caller when a rollback is created from it): the most likely install fault, which otherwise shows
  only at the first incident, as every rollback falling back into the pods;
* the Kubernetes API lists the replica pods (rollback.replicas), as the draining rule and the
  rollback do.
"""

from __future__ import annotations

from dataclasses import dataclass

from healer.settings import Settings


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def run_checks(settings: Settings) -> list[Check]:
    checks = [Check("config", True, f"{settings.source} loads: {len(settings.models)} model(s)")]
    checks.append(_argo(settings))
    checks.append(_replicas(settings))
    return checks


def _argo(settings: Settings) -> Check:
    from healer.engines import EngineError
    from healer.engines.factory import argo_engine

    argo = settings.rollback.argo
    if settings.rollback.engine != "argo":
        return Check("argo-server", True, f"not used (rollback.engine is {settings.rollback.engine})")
    import secrets

    from healer.vocabulary import RollbackRequest

    # A rollback as a sidecar would submit it, created as a server-side dry run: nothing is stored.
    request = RollbackRequest(
        model=settings.models[0].name if settings.models else "healer-check",
        from_version="1",
        incident=f"healer-check-{secrets.token_hex(4)}",
        reason="manual",
        detail="healer check: a dry run, never stored",
    )
    try:
        with argo_engine(settings) as engine:
            engine.template_exists()
            engine.check_create(request)
    except (EngineError, OSError, ValueError) as exc:
        trust = f"CA {argo.ca_file}" if argo.ca_file else "the system CAs (rollback.argo.ca_file unset)"
        return Check("argo-server", False, f"{argo.host}: {exc} (certificate checked against {trust})")
    return Check(
        "argo-server",
        True,
        f"{argo.host} answers, is trusted, and lets this token read the rollback template and create a "
        "rollback (a dry run)",
    )


def _replicas(settings: Settings) -> Check:
    from healer import kube

    replicas = settings.rollback.replicas
    if replicas is None:
        return Check("kubernetes-api", True, "not used (rollback.replicas unset)")
    if not kube.in_cluster():
        return Check("kubernetes-api", False, "not in a pod: no service account to list the replicas with")
    try:
        pods = kube.KubeClient.in_cluster().pod_readiness(replicas.namespace, replicas.selector)
    except (kube.KubeError, OSError) as exc:
        return Check("kubernetes-api", False, f"list pods {replicas.selector} in {replicas.namespace}: {exc}")
    ready = sum(1 for p in pods if p.ready)
    return Check(
        "kubernetes-api", True, f"{len(pods)} replica pod(s) {replicas.selector} in {replicas.namespace}, {ready} Ready"
    )
