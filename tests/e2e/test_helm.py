"""The Helm chart (deploy/helm/healer) with the real helm, built from its Go module by e2e/build.sh.

For the defaults and each example in deploy/helm/examples: ``helm lint --strict``; ``helm template``
with every object validated against its own schema (Kubernetes', Argo's vendored schema.json, the
cert-manager and Prometheus Operator CRDs from their Go modules); the Argo objects equal to what
``healer render`` produces for the same namespace, image and claim; the Roles equal to the calls
read from the code (as tests/deploy/test_deploy_manifests.py reads them); healer.yaml a valid config.
Then ``helm install`` into the tier's real kube-apiserver and Argo: with cert-manager's and the
Prometheus Operator's CRDs installed, and without cert-manager (a provided Secret and caBundle);
the created objects read back, the WorkflowTemplates listed by ``argo template list``, the Roles
asked of the real authorizer, and a labelled pod created while the webhook is down (no kubelet:
nothing the chart deploys ever runs here).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from healer.core.labels import INJECT, INJECTED
from healer.settings import parse_settings
from healer.webhook import SIDECAR, load_injection_config
from tests.e2e.conftest import ArgoCli
from tests.e2e.control_plane import ApiError, ControlPlane
from tests.support import helm
from tests.support.rbac_scan import argo_calls, granted, kube_calls, sidecar_sources
from workflows.render import render_all
from workflows.rollback import ARGO_UI_CONFIG, TemplateOptions

pytestmark = pytest.mark.e2e

ROOT = helm.ROOT
VALUES = {"defaults" if path is None else path.stem: path for path in helm.VALUES_FILES}
# The examples with one volume shared by every pod; the others (object-store, per-pod) mount no claim in the
# workflow steps: tests/deploy/test_chart_repository_examples.py renders them.
SHARED_VOLUME = {
    name: path
    for name, path in VALUES.items()
    if path is None or (yaml.safe_load(path.read_text()).get("config") or {}).get("repository_mode") in (None, "shared")
}
EXECUTOR = {("create", "workflowtaskresults", "argoproj.io"), ("patch", "workflowtaskresults", "argoproj.io")}
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
Quad = tuple[str, str, str, str]  # (namespace, verb, resource, group)


@pytest.fixture(scope="module", autouse=True)
def helm_built() -> None:
    try:
        helm.helm_binary()
        helm.crd_directory()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)


def values_of(path: Path | None, **overrides: Any) -> dict[str, Any]:
    """The chart's values as helm merges them: defaults, then the file (nested maps merged)."""

    def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        merged = dict(base)
        for key, value in extra.items():
            merged[key] = merge(merged[key], value) if isinstance(value, dict) and key in merged else value
        return merged

    values: dict[str, Any] = yaml.safe_load((helm.CHART / "values.yaml").read_text())
    if path is not None:
        values = merge(values, yaml.safe_load(path.read_text()))
    return merge(values, overrides)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    return found


def default_image(values: dict[str, Any]) -> str:
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def sidecar_needs(triton: str, argo: str) -> set[Quad]:
    kube = kube_calls(*sidecar_sources())
    return {(triton, *call) for call in kube} | {(argo, *call) for call in argo_calls()}


def rollback_needs(triton: str, argo: str) -> set[Quad]:
    kube = kube_calls(*sorted((ROOT / "workflows").rglob("*.py")))
    return {(triton, *call) for call in kube} | {(argo, *call) for call in EXECUTOR}


# ---- lint and template ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUES)
def test_helm_lint_passes_strict(name: str) -> None:
    assert "1 chart(s) linted, 0 chart(s) failed" in helm.lint(VALUES[name])


@pytest.mark.parametrize("name", VALUES)
def test_every_rendered_object_is_valid_against_its_own_schema(name: str) -> None:
    docs = helm.render(VALUES[name])
    schemas = {f"{d['kind']}/{d['metadata']['name']}": helm.validate(d) for d in docs}
    assert schemas["WorkflowTemplate/healer-rollback"] == schemas["CronWorkflow/healer-drill-weekly"] == "argo"
    assert schemas["WorkflowTemplate/healer-stage"] == schemas["CronWorkflow/healer-stage-hourly"] == "argo"
    assert schemas["Certificate/healer-webhook"] == "crd"
    assert schemas["MutatingWebhookConfiguration/healer-healer-system-injector"] == "kubernetes"


def test_the_schemas_reject_broken_objects() -> None:
    """Each of the three validations can fail."""
    docs = helm.render()
    deployment = one(docs, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8443"
    with pytest.raises(kubernetes_validate.ValidationError):
        helm.validate(deployment)
    template = one(docs, "WorkflowTemplate", "healer-rollback")
    template["spec"]["templates"][0]["retryStrategy"]["limit"] = 2  # Argo wants a string
    with pytest.raises(jsonschema.ValidationError):
        helm.validate(template)
    certificate = one(docs, "Certificate", "healer-webhook")
    certificate["spec"]["dnsName"] = certificate["spec"].pop("dnsNames")  # a misspelt field
    with pytest.raises(jsonschema.ValidationError):
        helm.validate(certificate)
    with pytest.raises(LookupError):
        helm.validate({"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}})


@pytest.mark.parametrize("name", SHARED_VOLUME)
def test_the_argo_objects_are_what_healer_render_produces(name: str) -> None:
    """The chart ships the render (files/argo/) with only the namespace, image, claim, mount path and
    the chart's labels set from values; checked here against a fresh render with those options."""
    claim, mount = "models-rwx", "/srv/models"  # not the defaults: the chart must set both
    values = values_of(VALUES[name], modelRepository={"mountPath": mount, "claim": {"name": claim}})
    docs = helm.render(
        VALUES[name], {"modelRepository.mountPath": mount, "modelRepository.claim.name": claim}, release="r1"
    )
    options = TemplateOptions(
        image=default_image(values), namespace=values["argo"]["namespace"], models_claim=claim, models_mount_path=mount
    )
    labels = one(docs, "Deployment")["metadata"]["labels"]
    chart_labels = {k: v for k, v in labels.items() if k != "app.kubernetes.io/component"}
    expected = []
    for file, text in render_all(options).items():
        if file == ARGO_UI_CONFIG:
            continue  # keys for Argo's own ConfigMap: not created by the chart
        document = yaml.safe_load(text)
        document["metadata"]["labels"] = {**chart_labels, **document["metadata"]["labels"]}
        expected.append(document)
    shipped = [d for d in docs if d["apiVersion"].startswith("argoproj.io/")]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(shipped, key=key) == sorted(expected, key=key)


def test_s3_credentials_reach_every_workflow_step_and_nothing_else_changes() -> None:
    path = VALUES["values-s3"]
    plain = helm.render(path)
    with_secret = helm.render(path, {"modelRepository.s3.credentialsSecret": "healer-s3"})
    for before, after in zip(by_kind(plain, "WorkflowTemplate"), by_kind(with_secret, "WorkflowTemplate"), strict=True):
        for old, new in zip(before["spec"]["templates"], after["spec"]["templates"], strict=True):
            if "script" in new:
                assert new["script"].pop("envFrom") == [{"secretRef": {"name": "healer-s3"}}]
            assert old == new


@pytest.mark.parametrize("name", VALUES)
def test_the_roles_allow_exactly_the_calls_the_code_makes(name: str) -> None:
    values = values_of(VALUES[name])
    triton, argo = values["triton"]["namespace"], values["argo"]["namespace"]
    for split in (False, True):  # also with the workflows in a namespace of their own
        if split:
            argo = "healer-workflows"
        docs = helm.render(VALUES[name], {"argo.namespace": argo} if split else None)
        sidecar = (triton, values["triton"]["serviceAccount"]["name"])
        assert granted(docs, sidecar) == sidecar_needs(triton, argo), "the sidecar's Roles"
        template = one(docs, "WorkflowTemplate", "healer-rollback")
        rollback = (template["metadata"]["namespace"], template["spec"]["serviceAccountName"])
        assert rollback[0] == argo
        assert granted(docs, rollback) == rollback_needs(triton, argo), "the rollback's Roles"
        webhook = one(docs, "ServiceAccount", "healer-webhook")
        assert granted(docs, ("healer-system", "healer-webhook")) == set()
        assert webhook["automountServiceAccountToken"] is False
        accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind(docs, "ServiceAccount")}
        assert {sidecar, rollback} <= accounts


@pytest.mark.parametrize("name", VALUES)
def test_healer_yaml_is_a_valid_config_wired_to_the_values(name: str) -> None:
    values = values_of(VALUES[name])
    docs = helm.render(VALUES[name])
    config_maps = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "healer-config"]
    assert {d["metadata"]["namespace"] for d in config_maps} == {
        values["triton"]["namespace"],
        values["argo"]["namespace"],
    }
    raw = yaml.safe_load(config_maps[0]["data"]["healer.yaml"])
    settings = parse_settings(raw, source=f"healer-config ({name})", base_dir=Path("/"))
    repo = values["modelRepository"]
    if repo["type"] == "s3":
        assert settings.store is not None and settings.store.s3 is not None
        assert settings.store.s3.bucket == repo["s3"]["bucket"]
        live = None if settings.repository_mode == "object-store" else repo["mountPath"]  # Triton reads the bucket
        assert (str(settings.live_repository) if settings.live_repository else None) == live
    else:
        assert settings.store is not None and settings.store.filesystem == Path(repo["mountPath"])
    assert settings.rollback.engine == "argo"
    assert raw["rollback"]["argo"]["namespace"] == values["argo"]["namespace"]
    assert raw["rollback"]["replicas"]["namespace"] == values["triton"]["namespace"]
    assert raw["sidecar"]["drain"]["peers"]["namespace"] == values["triton"]["namespace"]
    # The injected sidecar listens where the injection settings say, and writes its runs to their emptyDir.
    injection = one(docs, "ConfigMap", "healer-webhook-injection")["data"]["injection.yaml"]
    assert raw["sidecar"]["listen"].endswith(f":{yaml.safe_load(injection)['port']}")
    assert raw["rollback"]["state_dir"] == yaml.safe_load(injection)["state_dir"]


def test_small_floats_reach_healer_yaml_as_numbers(tmp_path: Path) -> None:
    """Helm writes 1.0e-7 as 1e-07, a string to YAML 1.1 (PyYAML): the chart must keep it a number."""
    models = values_of(None)["config"]["models"]
    models[0]["golden"]["outputs"][0].update(atol=1.0e-7, rtol=2e-9)
    extra = tmp_path / "floats.yaml"
    extra.write_text(yaml.safe_dump({"config": {"models": models}}))
    assert "atol: 1.0e-07" in extra.read_text()
    docs = helm.render([extra])
    text = one(docs, "ConfigMap", "healer-config")["data"]["healer.yaml"]
    raw = yaml.safe_load(text)
    output = raw["models"][0]["golden"]["outputs"][0]
    assert (output["atol"], output["rtol"]) == (1.0e-7, 2e-9), text
    parse_settings(raw, source="healer-config", base_dir=Path("/"))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"config.store.filesystem.root": "/x"}, "config.store: set by the chart"),
        ({"config.rollback.argo.host": "x"}, "config.rollback.argo: set by the chart"),
        ({"modelRepository.type": "s3"}, "modelRepository.s3.bucket: required"),
        # values.schema.json: types, choices and misspelt keys, before any template runs
        ({"modelRepository.type": "gcs"}, "at '/modelRepository/type': value must be one of 'nfs', 's3'"),
        ({"webhook.failurePolicy": "Never"}, "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'"),
        ({"webhook.timeoutSeconds": "60"}, "at '/webhook/timeoutSeconds'"),
        ({"webhok.enabled": "false"}, "additional properties 'webhok' not allowed"),
        ({"certificates.certManager.enabled": "false"}, "certificates.secretName"),
        (
            {"certificates.certManager.enabled": "false", "certificates.secretName": "tls"},
            "certificates.caBundle",
        ),
    ],
)
def test_wrong_values_fail_naming_the_key(overrides: dict[str, str], says: str) -> None:
    with pytest.raises(helm.HelmError, match=says):
        helm.render(None, overrides)


def test_the_webhook_objects_fit_together(tmp_path: Path) -> None:
    values = values_of(None)
    docs = helm.render()
    [webhook] = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"  # see values.yaml: an outage must not stop Triton pods
    assert webhook["timeoutSeconds"] == 5 and webhook["reinvocationPolicy"] == "IfNeeded"
    assert webhook["sideEffects"] == "None" and webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["matchPolicy"] == "Equivalent"
    assert webhook["objectSelector"] == {"matchLabels": {INJECT: "true"}}
    assert webhook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [values["triton"]["namespace"]]}
    ]
    assert webhook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    service = one(docs, "Service")
    deployment = one(docs, "Deployment")
    assert webhook["clientConfig"]["service"] == {
        "name": service["metadata"]["name"],
        "namespace": "healer-system",
        "path": "/mutate",
        "port": service["spec"]["ports"][0]["port"],
    }
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert container["ports"] == [{"name": "https", "containerPort": values["webhook"]["port"]}]
    assert service["spec"]["ports"][0]["targetPort"] == "https"
    # The webhook: non-root, read-only, nothing to escalate, no token (it calls no API).
    assert deployment["spec"]["replicas"] == 2
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    # It reads the Secret cert-manager writes, and the CA of that Certificate is injected into the configuration.
    certificate = one(docs, "Certificate", "healer-webhook")
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls_volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    configuration = one(docs, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "healer-system/healer-webhook"
    assert f"{service['metadata']['name']}.healer-system.svc" in certificate["spec"]["dnsNames"]
    issuer = one(docs, "Issuer", certificate["spec"]["issuerRef"]["name"])
    ca = one(docs, "Certificate", issuer["spec"]["ca"]["secretName"])
    assert ca["spec"]["isCA"] is True and "selfSigned" in one(docs, "Issuer", ca["spec"]["issuerRef"]["name"])["spec"]
    # The injection settings load as the webhook loads them, with the chart's image.
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if a.startswith("--"))
    assert container["args"][:2] == ["healer", "webhook"]
    injection_mount = next(m for m in container["volumeMounts"] if args["injection"].startswith(m["mountPath"]))
    injection_map = next(v for v in pod["volumes"] if v["name"] == injection_mount["name"])["configMap"]["name"]
    text = one(docs, "ConfigMap", injection_map)["data"]["injection.yaml"]
    assert container["image"] == default_image(values)
    (tmp_path / "injection.yaml").write_text(text)
    injection = load_injection_config(tmp_path / "injection.yaml")
    assert injection.image == default_image(values) and injection.config_map == "healer-config"
    assert injection.run_as_user == 10001
    # PDB and NetworkPolicy select the webhook's pods; the policy opens only its port.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": values["webhook"]["port"]}]}]
    assert policy["egress"] == [] and policy["policyTypes"] == ["Ingress", "Egress"]


def test_without_cert_manager_the_provided_secret_and_ca_bundle_are_used() -> None:
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...\n").decode()
    docs = helm.render(
        None,
        {
            "certificates.certManager.enabled": "false",
            "certificates.secretName": "my-tls",
            "certificates.caBundle": bundle,
        },
    )
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
    configuration = one(docs, "MutatingWebhookConfiguration")
    assert "annotations" not in configuration["metadata"]
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == bundle
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]["secretName"] == "my-tls"


def test_the_chart_image_is_the_rendered_templates_image_and_the_package_version() -> None:
    from importlib.metadata import version

    docs = helm.render()
    image = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == TemplateOptions().image == f"ghcr.io/healer-dev/healer:{version('healer')}"
    for template in by_kind(docs, "WorkflowTemplate"):
        assert {t["script"]["image"] for t in template["spec"]["templates"] if "script" in t} == {image}
    injection = yaml.safe_load(one(docs, "ConfigMap", "healer-webhook-injection")["data"]["injection.yaml"])
    assert injection["image"] == image


# ---- helm install into the real control plane ---------------------------------------------------------------


def create_namespaces(plane: ControlPlane, *names: str) -> None:
    api = plane.api()
    for name in names:
        try:
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except ApiError as exc:
            if exc.status != 409:
                raise


def install_crds(plane: ControlPlane) -> None:
    """cert-manager's and the Prometheus Operator's CRDs (idempotent: another test may have installed them)."""
    api = plane.api()
    names = []
    for crd in helm.crd_documents():
        names.append(crd["metadata"]["name"])
        try:
            api.create(crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
    plane._wait_established(api, names)


def can_i(plane: ControlPlane, account: tuple[str, str], namespace: str, verb: str, resource: str, group: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{account[0]}:{account[1]}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account[0]}", "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb, "namespace": namespace},
        },
    }
    status = plane.api().post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]
    return bool(status.get("allowed"))


def kubeconfig(plane: ControlPlane) -> Path:
    path = plane.workdir / "admin.kubeconfig"  # written by the control plane for Argo and the CLI
    assert path.is_file()
    return path


@pytest.fixture(scope="module")
def with_crds(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    install_crds(control_plane)
    yield control_plane


def test_helm_install_with_cert_manager_and_monitoring(with_crds: ControlPlane, argo_cli: ArgoCli) -> None:
    """values-s3.yaml (PodMonitor, PrometheusRule and the dashboard on), its Triton namespace and
    the workflows' namespace apart, installed as an operator would; everything read back."""
    plane = with_crds
    triton, argo, release, namespace = "helm-s3", "helm-s3-workflows", "healer", "helm-s3-system"
    create_namespaces(plane, triton, argo)
    overrides = {"triton.namespace": triton, "argo.namespace": argo, "webhook.namespaces[0]": triton}
    started = time.monotonic()
    installed = helm.helm(
        "install", release, str(helm.CHART), f"--namespace={namespace}", "--create-namespace",
        *helm.value_args(VALUES["values-s3"], overrides), kubeconfig=kubeconfig(plane), timeout=180,
    )  # fmt: skip
    print(f"helm install: {time.monotonic() - started:.1f} s")
    # NOTES.txt: where the pods are injected and how to see the templates
    assert f'healer.io/inject: "true" in {triton}' in installed.stdout
    assert f"argo template list -n {argo}" in installed.stdout
    assert f"healer status -n {triton}" in installed.stdout and "Next steps:" in installed.stdout
    caught = "argo.caBundle is empty" in installed.stdout
    assert caught == (not values_of(VALUES["values-s3"])["argo"].get("caBundle")), "NOTES warns about an empty caBundle"
    listed = helm.helm("list", f"--namespace={namespace}", "--output=json", kubeconfig=kubeconfig(plane)).stdout
    assert '"status":"deployed"' in listed.replace(" ", "")
    api = plane.api()
    rendered = helm.render(VALUES["values-s3"], overrides, release=release, namespace=namespace)
    [stored] = [
        c
        for c in api.get(CONFIGURATIONS)["items"]
        if c["metadata"]["name"] == one(rendered, "MutatingWebhookConfiguration")["metadata"]["name"]
    ]
    [webhook] = stored["webhooks"]
    assert webhook["failurePolicy"] == "Ignore" and webhook["objectSelector"] == {"matchLabels": {INJECT: "true"}}
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == [triton]
    assert stored["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{namespace}/{release}-webhook"
    # The cert-manager and Prometheus Operator objects were accepted by their CRDs' schemas.
    certificates = api.get(f"/apis/cert-manager.io/v1/namespaces/{namespace}/certificates")["items"]
    assert {c["metadata"]["name"] for c in certificates} == {f"{release}-webhook", f"{release}-webhook-ca"}
    rules = api.get(f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/prometheusrules")["items"]
    assert len(rules) == 1 and rules[0]["spec"]["groups"]
    assert api.get(f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/podmonitors")["items"]
    # The Roles as stored, then as the authorizer decides.
    stored_roles = [
        {"kind": kind, **item}
        for ns in (triton, argo, namespace)
        for kind, plural in (("Role", "roles"), ("RoleBinding", "rolebindings"))
        for item in api.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}")["items"]
    ]
    assert granted(stored_roles, (triton, "triton")) == sidecar_needs(triton, argo)
    assert granted(stored_roles, (argo, "healer-rollback")) == rollback_needs(triton, argo)
    for quad in sidecar_needs(triton, argo):
        assert can_i(plane, (triton, "triton"), *quad), f"{triton}:triton may not {quad}"
    for quad in rollback_needs(triton, argo):
        assert can_i(plane, (argo, "healer-rollback"), *quad), f"{argo}:healer-rollback may not {quad}"
    for account in ((triton, "triton"), (argo, "healer-rollback"), (namespace, f"{release}-webhook")):
        for ns, verb, resource, group in (
            (triton, "delete", "pods", ""),
            (triton, "get", "secrets", ""),
            (argo, "delete", "workflows", "argoproj.io"),
            ("kube-system", "list", "pods", ""),
        ):
            assert not can_i(plane, account, ns, verb, resource, group), (account, verb, resource, ns)
    assert not can_i(plane, (namespace, f"{release}-webhook"), namespace, "list", "pods", "")
    assert not can_i(plane, (argo, "healer-rollback"), argo, "create", "workflows", "argoproj.io")
    # The WorkflowTemplates through the Argo Server, as `argo template list` shows them.
    listed_templates = argo_cli("template", "list", "-n", argo, "-o", "name").stdout.split()
    assert sorted(listed_templates) == ["healer-drill", "healer-release", "healer-rollback", "healer-stage"]
    crons = argo_cli("cron", "list", "-n", argo, "-o", "name").stdout.split()
    assert sorted(crons) == ["healer-drill-weekly", "healer-stage-hourly"]
    template = api.get(f"/apis/argoproj.io/v1alpha1/namespaces/{argo}/workflowtemplates/healer-rollback")
    assert template["spec"] == one(rendered, "WorkflowTemplate", "healer-rollback")["spec"]
    config = api.get(f"/api/v1/namespaces/{argo}/configmaps/healer-config")["data"]["healer.yaml"]
    assert config == api.get(f"/api/v1/namespaces/{triton}/configmaps/healer-config")["data"]["healer.yaml"]


def test_helm_install_without_cert_manager_and_a_pod_created_while_the_webhook_is_down(
    control_plane: ControlPlane,
) -> None:
    """The defaults with a provided TLS Secret and caBundle; the webhook's pods never run here, so the
    API server cannot reach it: with failurePolicy Ignore a labelled pod is still created, without
    the sidecar, within the webhook's timeout."""
    plane = control_plane
    triton, release, namespace = "helm-plain", "plain", "helm-plain-system"
    create_namespaces(plane, triton, namespace)
    pki = plane.pki
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "webhook-tls", "namespace": namespace},
                "type": "kubernetes.io/tls",
                "data": {
                    "tls.crt": base64.b64encode(pki.cert("argo-server").read_bytes()).decode(),
                    "tls.key": base64.b64encode(pki.key("argo-server").read_bytes()).decode(),
                },
            }
        ]
    )
    overrides = {
        "triton.namespace": triton,
        "argo.namespace": triton,
        "certificates.certManager.enabled": "false",
        "certificates.secretName": "webhook-tls",
        "certificates.caBundle": base64.b64encode(pki.ca.read_bytes()).decode(),
    }
    helm.helm(
        "install", release, str(helm.CHART), f"--namespace={namespace}", *helm.value_args(None, overrides),
        kubeconfig=kubeconfig(plane), timeout=180,
    )  # fmt: skip
    api = plane.api()
    name = one(helm.render(None, overrides, release=release, namespace=namespace), "MutatingWebhookConfiguration")
    stored = api.get(f"{CONFIGURATIONS}/{name['metadata']['name']}")
    assert base64.b64decode(stored["webhooks"][0]["clientConfig"]["caBundle"]) == pki.ca.read_bytes()
    deployment = api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{release}-webhook")
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "webhook-tls"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "triton-0", "labels": {INJECT: "true", "app.kubernetes.io/name": "triton"}},
        "spec": {
            "serviceAccountName": "triton",
            "automountServiceAccountToken": False,
            "containers": [{"name": "triton", "image": "nvcr.io/nvidia/tritonserver:24.10-py3"}],
        },
    }
    started = time.monotonic()
    created = api.create(pod, namespace=triton)
    elapsed = time.monotonic() - started
    timeout_s = stored["webhooks"][0]["timeoutSeconds"]
    assert elapsed < timeout_s + 3, f"the create waited {elapsed:.1f} s on a webhook that is down"
    assert [c["name"] for c in created["spec"]["containers"]] == ["triton"]
    assert SIDECAR not in {c["name"] for c in created["spec"]["containers"]}
    assert INJECTED not in (created["metadata"].get("annotations") or {})
    helm.helm("uninstall", release, f"--namespace={namespace}", kubeconfig=kubeconfig(plane), timeout=120)
    with pytest.raises(ApiError) as gone:
        api.get(f"{CONFIGURATIONS}/{name['metadata']['name']}")
    assert gone.value.status == 404


def test_run_as_user_null_names_no_uid_and_security_contexts_merge() -> None:
    """OpenShift-style uid ranges: runAsUser null leaves every uid, gid and fsGroup to the platform
    (webhook, injected sidecar, workflow steps); the webhook's contexts take extra keys over the defaults."""
    docs = helm.render(
        VALUES["defaults"],
        {"runAsUser": "null", "webhook.podSecurityContext.seLinuxOptions.level": "s0:c1"},
    )
    text = yaml.safe_dump_all(docs)
    assert "runAsUser" not in text and "runAsGroup" not in text and "fsGroup:" not in text
    injection = yaml.safe_load(one(docs, "ConfigMap", "healer-webhook-injection")["data"]["injection.yaml"])
    assert "run_as_user" in injection and injection["run_as_user"] is None
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["seLinuxOptions"] == {"level": "s0:c1"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    for template in (d for d in docs if d["kind"] == "WorkflowTemplate"):
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True, template["metadata"]["name"]
    defaults = helm.render(VALUES["defaults"])
    assert one(defaults, "Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001


def test_name_overrides_rename_the_releases_own_objects_and_the_shared_ones() -> None:
    """fullnameOverride prefixes every name the chart gives, the shared ones too (the config ConfigMap,
    the rollback's ServiceAccount, the Roles: tests/deploy/test_chart_names.py); nameOverride sets
    app.kubernetes.io/name. The WorkflowTemplates keep the names the code submits; without overrides
    every name is what it was."""
    overrides = {"fullnameOverride": "ml-healer", "nameOverride": "healer-ml"}
    assert "0 chart(s) failed" in helm.lint(VALUES["defaults"], overrides)
    docs = helm.render(VALUES["defaults"], overrides, release="r1")
    assert one(docs, "Deployment")["metadata"]["name"] == "ml-healer-webhook"
    assert one(docs, "MutatingWebhookConfiguration")["metadata"]["name"].startswith("ml-healer-")
    assert one(docs, "Pod")["metadata"]["name"] == "ml-healer-check"  # the helm test pod
    own = [d for d in docs if d["kind"] not in ("WorkflowTemplate", "CronWorkflow")]
    assert {d["metadata"]["labels"]["app.kubernetes.io/name"] for d in own if "labels" in d["metadata"]} == {
        "healer-ml"
    }
    assert {d["metadata"]["labels"]["app.kubernetes.io/part-of"] for d in own if "labels" in d["metadata"]} == {
        "healer"
    }
    assert one(docs, "ConfigMap", "ml-healer-config") and one(docs, "WorkflowTemplate", "healer-rollback")
    plain = helm.render(VALUES["defaults"], release="r1")
    assert one(plain, "ConfigMap", "healer-config")
    assert one(plain, "Deployment")["metadata"]["name"] == "r1-webhook"
