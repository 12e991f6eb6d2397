"""`healer check`: what an injected sidecar needs from the cluster, checked from a pod that has the
sidecar's service account, token and healer.yaml (the chart's `helm test` pod, or `kubectl exec -c
healer` into a sidecar). Each check says what it tried and what came back; none changes anything.

* healer.yaml loads (the ConfigMap the chart rendered);
* argo-server answers at rollback.argo.host, its certificate is trusted with rollback.argo.ca_file,
  and this pod's token may read the healer-rollback WorkflowTemplate (argo-server reads it as the
  caller when a rollback is created from it): the most likely install fault, which otherwise shows
  only at the first incident, as every rollback falling back into the pods;
* the Kubernetes API lists the replica pods (rollback.replicas), as the draining rule and the
  rollback do;
* each model's golden request fits the versions Triton serves (their metadata: input names,
  datatypes, shapes; expected output names), when Triton answers at triton.url: a misfit fails
  naming the key of healer.yaml. Sent as it is, Triton would refuse it, which reads as a failing
  model (the sidecar tells the two apart: probes/contract.py). Triton not reachable from here (the
  chart's test pod): not checked, said so in a WARN line (not ok, not a failure: the exit code is the
  checks' that were done).
"""

from __future__ import annotations

from dataclasses import dataclass

from healer.settings import Settings


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    # False: it could not be done from here (Triton not reachable from the chart's test pod): not ok, yet
    # no failure either; a warning line, and the exit code is left to the checks that were done.
    checked: bool = True


def not_checked(name: str, detail: str) -> Check:
    return Check(name, False, f"not checked: {detail}", checked=False)


def run_checks(settings: Settings) -> list[Check]:
    checks = [Check("config", True, f"{settings.source} loads: {len(settings.models)} model(s)")]
    checks.append(_argo(settings))
    checks.append(_replicas(settings))
    checks.extend(_golden_requests(settings))
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
        from healer.cli.reach import connection_failure

        trust = f"CA {argo.ca_file}" if argo.ca_file else "the system CAs (rollback.argo.ca_file unset)"
        cause = connection_failure(exc)
        said = f"cannot reach it: {cause}" if cause else str(exc)
        return Check("argo-server", False, f"{argo.host}: {said} (certificate checked against {trust})")
    return Check(
        "argo-server",
        True,
        f"{argo.host} answers, is trusted, and lets this token read the rollback template and create a "
        "rollback (a dry run)",
    )


def _replicas(settings: Settings) -> Check:
    from healer.edges import kube

    replicas = settings.rollback.replicas
    if replicas is None:
        return Check("kubernetes-api", True, "not used (rollback.replicas unset)")
    query = replicas.pod_query
    if query is None:
        return Check(
            "kubernetes-api", True, f"not used (rollback.replicas.addresses: {len(replicas.addresses)} Tritons)"
        )
    namespace, selector = query
    if not kube.in_cluster():
        return Check("kubernetes-api", False, "not in a pod: no service account to list the replicas with")
    try:
        pods = kube.KubeClient.in_cluster().pod_readiness(namespace, selector)
    except (kube.KubeError, OSError) as exc:
        return Check("kubernetes-api", False, f"list pods {selector} in {namespace}: {exc}")
    ready = sum(1 for p in pods if p.ready)
    return Check("kubernetes-api", True, f"{len(pods)} replica pod(s) {selector} in {namespace}, {ready} Ready")


def _golden_requests(settings: Settings) -> list[Check]:
    """One check per model: its golden request against each version Triton serves (or the pinned one)."""
    from healer.edges.triton import TritonError
    from healer.edges.triton_rest import TritonRest
    from probes.contract import suite_misfits
    from probes.fit import golden_key, served_contract
    from probes.tiers import resolve_versions

    url = settings.triton.url
    if not settings.models:
        return []
    try:
        triton = TritonRest(url, timeout_s=settings.triton.timeout_s)
        live = triton.server_live()
    except (TritonError, ValueError) as exc:
        from healer.cli.reach import connection_failure

        return [not_checked("golden-requests", f"Triton at {url} not reachable ({connection_failure(exc) or exc})")]
    if not live:
        return [not_checked("golden-requests", f"Triton at {url} is not live")]
    checks = []
    for model in settings.models:
        name = f"golden:{model.name}"
        try:
            versions = resolve_versions(triton, model.name, model.version)
        except TritonError as exc:
            checks.append(not_checked(name, f"Triton at {url} did not list its versions ({exc})"))
            continue
        if not versions:
            checks.append(not_checked(name, f"Triton at {url} serves no version of {model.name}"))
            continue
        findings: list[str] = []
        fitting, unread = [], []
        for version in versions:
            contract = served_contract(triton, model.name, version)
            if contract is None:
                unread.append(f"v{version}")
                continue
            wrong = suite_misfits(model.suite, contract, key=golden_key(settings, model.name))
            findings.extend(wrong)
            if not wrong:
                fitting.append(f"v{version}")
        if findings:
            checks.append(Check(name, False, "; ".join(findings)))
        elif fitting:
            note = f" (metadata of {', '.join(unread)} not read)" if unread else ""
            checks.append(Check(name, True, f"fits {', '.join(fitting)} as Triton at {url} serves it{note}"))
        else:
            checks.append(not_checked(name, f"Triton at {url} gave no metadata of {', '.join(unread)}"))
    return checks
