"""checkRequirements: the chart refuses, in one line naming what is missing, a cluster without Argo
Workflows' CRDs, without cert-manager's while it is the certificate source, or without the Prometheus
Operator's while the PodMonitor or the PrometheusRule is on. `helm template` stands in for the cluster
with --api-versions, as at install helm asks the API server (tests/e2e/test_helm.py installs into the
e2e tier's, which has Argo's CRDs, and cert-manager's for one release). Every place that renders the
chart here still does: the chart README's command, the cluster tier's values and its monitoring render."""

from __future__ import annotations

import re
import shlex

from tests.deploy.chart import NEEDS_HELM, template
from tests.support import helm
from tools.chart_readme import REQUIRED_APIS

pytestmark = NEEDS_HELM

ARGO = ("argoproj.io/v1alpha1/Workflow", "argoproj.io/v1alpha1/WorkflowTemplate", "argoproj.io/v1alpha1/CronWorkflow")
CERT_MANAGER = ("cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer")
OWN_SECRET = ("--set=certificates.certManager.enabled=false", "--set=certificates.secretName=tls",
              "--set=certificates.caBundle=Q0E=")  # fmt: skip
CLUSTER_VALUES = helm.ROOT / "e2e" / "cluster" / "values-cluster.yaml"


def apis(*names: str) -> list[str]:
    return [f"--api-versions={name}" for name in names]


def refusal(*args: str) -> str:
    """The one line `helm template` fails with."""
    status, error = template(*args)
    assert status != 0, "rendered where it should refuse"
    [line] = [line for line in error.splitlines() if "checkRequirements" in line]
    return line


def test_a_bare_cluster_is_refused_naming_argo_and_cert_manager() -> None:
    line = refusal()
    assert "lacks argoproj.io/v1alpha1 Workflow, WorkflowTemplate, CronWorkflow (install Argo Workflows" in line
    assert "cert-manager.io/v1 Certificate, Issuer (install cert-manager, or set certificates.certManager" in line
    assert "monitoring.coreos.com" not in line and "checkRequirements=false skips" in line


def test_only_what_is_missing_is_named() -> None:
    line = refusal(*apis(*ARGO))
    assert "cert-manager.io/v1 Certificate, Issuer" in line and "argoproj.io" not in line
    line = refusal(*apis(*CERT_MANAGER, "argoproj.io/v1alpha1/Workflow"))
    assert "argoproj.io/v1alpha1 WorkflowTemplate, CronWorkflow (" in line and "cert-manager" not in line


def test_a_given_secret_is_a_certificate_source_and_no_templates_need_no_cron_workflows() -> None:
    assert template(*apis(*ARGO), *OWN_SECRET)[0] == 0
    no_templates = apis("argoproj.io/v1alpha1/Workflow", "argoproj.io/v1alpha1/WorkflowTemplate")
    assert template(*no_templates, *OWN_SECRET, "--set=argo.installTemplates=false")[0] == 0
    assert template(*apis(*ARGO), "--set=webhook.enabled=false")[0] == 0  # no webhook: no certificate
    # Neither source: the Secret the webhook would mount is asked for by name, in one line.
    status, error = template(*apis(*ARGO), "--set=certificates.certManager.enabled=false")
    assert status != 0 and "certificates.secretName: the webhook's TLS Secret" in error.splitlines()[0]


def test_monitoring_needs_the_prometheus_operators_crds() -> None:
    line = refusal(*apis(*ARGO, *CERT_MANAGER), "--set=monitoring.podMonitor.enabled=true")
    assert "monitoring.coreos.com/v1 PodMonitor (install the Prometheus Operator's CRDs" in line
    both = ("--set=monitoring.podMonitor.enabled=true", "--set=monitoring.prometheusRule.enabled=true")
    line = refusal(*apis(*ARGO, *CERT_MANAGER, "monitoring.coreos.com/v1/PodMonitor"), *both)
    assert "monitoring.coreos.com/v1 PrometheusRule (" in line and "PodMonitor" not in line
    operator = apis("monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/PrometheusRule")
    assert template(*apis(*ARGO, *CERT_MANAGER), *operator, *both)[0] == 0


def test_the_check_can_be_turned_off_and_is_the_first_error() -> None:
    assert template("--set=checkRequirements=false")[0] == 0
    # An s3 store without a bucket is an error of its own; the missing CRDs are said first.
    refusal("--set=modelRepository.type=s3")
    status, error = template(*apis(*REQUIRED_APIS), "--set=modelRepository.type=s3")
    assert status != 0 and "modelRepository.s3.bucket" in error


def test_helm_lint_is_no_install_and_checks_nothing_against_a_cluster() -> None:
    assert "0 chart(s) failed" in helm.lint()


def test_the_chart_readmes_template_command_renders() -> None:
    readme = (helm.CHART / "README.md").read_text()
    [block] = [b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "helm template" in b]
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:4] == ["helm", "template", "healer", "deploy/helm/healer"]
    args = [w for w in words[4:] if w not in ("-f", "my-values.yaml")]  # the user's own file
    status, error = template(*args)
    assert status == 0, error
    assert sorted(args[i + 1] for i, w in enumerate(args) if w == "--api-versions") == sorted(REQUIRED_APIS)


def test_the_cluster_tiers_values_render_for_a_cluster_with_argo_alone() -> None:
    """e2e/cluster/healer-up.sh installs with its own certificate (no cert-manager) on a node with
    Argo's CRDs; monitoring-up.sh renders the monitoring objects with checkRequirements=false."""
    given = ("--set=certificates.caBundle=Q0E=",)
    assert template(f"--values={CLUSTER_VALUES}", *given, *apis(*ARGO))[0] == 0
    line = refusal(f"--values={CLUSTER_VALUES}", *given)
    assert "argoproj.io" in line and "cert-manager" not in line
    script = (helm.ROOT / "e2e" / "cluster" / "monitoring-up.sh").read_text()
    assert "--set checkRequirements=false" in script
    monitoring = ("--set=monitoring.podMonitor.enabled=true", "--set=monitoring.prometheusRule.enabled=true")
    assert template(f"--values={CLUSTER_VALUES}", *given, *monitoring, "--set=checkRequirements=false")[0] == 0
