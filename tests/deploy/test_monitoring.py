"""Alerts, dashboard and runbooks agree with each other and with the metrics the sidecar exports.

No helm: the alert rules are plain YAML in the chart's files/prometheus-rules.yaml
(the PrometheusRule template loads them with .Files.Get and replaces four placeholders), the
dashboard is plain JSON, and the PromQL is checked by reading its metric selectors and label lists.
The metrics and their labels are not a list kept here: they are read from the /metrics exposition of
a real Sidecar driven through a detection, a rollback, a restore and a confirmation cycle.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from healer.core.labels import INJECT
from healer.core.results import Status, Tier
from healer.core.state import Phase
from healer.edges.alerts import ALERT_NAME, RELEASE_ALERT_NAME
from healer.edges.metrics import sidecar_registry
from healer.settings import Settings, SidecarSettings, TierThresholds
from healer.webhook import InjectionConfig, sidecar_container
from tests.support.prometheus_rules import BASE_URL, PLACEHOLDER, RULES, rendered_rules
from tests.support.sidecar_fleet import cycle_all, fleet

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "healer"
DASHBOARD = CHART / "files" / "dashboards" / "healer.json"
RULE_TEMPLATE = CHART / "templates" / "monitoring-prometheusrule.yaml"
PODMONITOR_TEMPLATE = CHART / "templates" / "monitoring-podmonitor.yaml"
DASHBOARD_TEMPLATE = CHART / "templates" / "monitoring-dashboard.yaml"
RUNBOOKS = ROOT / "runbooks"
SECTIONS = ["Symptoms", "Diagnose", "Likely causes", "Fix"]
# Pages that are not one alert's or one failure mode's: the index, and a symptom/command/cause/fix table.
NOT_RUNBOOKS = {"README.md", "triton-troubleshooting.md"}
# Labels Prometheus adds to every series scraped through the PodMonitor (prometheus-operator's
# generatePodMonitorConfig: namespace, container, pod, job, endpoint; instance from the address).
TARGET_LABELS = {"namespace", "pod", "container", "job", "endpoint", "instance"}
# Labels a Prometheus or Thanos over several clusters adds outside the scrape (external_labels): the
# dashboard's cluster variable reads "cluster" (the chart renames it to monitoring.clusterLabel).
EXTERNAL_LABELS = {"cluster"}
# Metrics from elsewhere that the rules use: Prometheus's own and kube-state-metrics'.
EXTERNAL_METRICS = {"up": {"job"}, "kube_deployment_status_replicas_available": {"namespace", "deployment"}}


# ---- the metrics, as a real sidecar exports them -------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, example_settings: Settings) -> dict[str, set[str]]:
    """metric name -> label names, from the exposition of one sidecar (with the draining rule) that
    saw a healthy cycle, a confirmation cycle, a wrong answer, a rollback that succeeded and a restore."""
    settings = dataclasses.replace(
        example_settings,
        models=(example_settings.model("linear_scorer"),),
        sidecar=SidecarSettings(period_s=1.0, business=TierThresholds(failure_threshold=1, success_threshold=1)),
    )
    board, members, clock = fleet(settings, tmp_path_factory.mktemp("store"), 1)
    sidecar, triton = members[0]
    cycle_all(members, clock, board)
    sidecar.cycle(only={"linear_scorer"})  # a confirmation cycle
    triton.wrong = True
    cycle_all(members, clock, board)  # detected, rolled back
    board.engines["triton-0"].phase = "Succeeded"
    triton.wrong = False
    for _ in range(2):
        cycle_all(members, clock, board)
    assert sidecar.states["linear_scorer"].phase is Phase.HEALTHY  # the whole story ran
    return exposition_labels(sidecar.metrics.expose(), histograms=histogram_names(sidecar.metrics))


def histogram_names(registry: Any) -> set[str]:
    return {name for name, (kind, _) in registry._help.items() if kind == "histogram"}


def exposition_labels(text: str, *, histograms: set[str]) -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            labels.setdefault(line.split()[2], set())
        elif line and not line.startswith("#"):
            match = re.match(r"(\w+)(?:\{(.*)\})? ", line)
            assert match, line
            name = base_name(match.group(1), histograms)
            labels.setdefault(name, set()).update(re.findall(r'(\w+)="', match.group(2) or ""))
    for name in histograms:
        labels[name].discard("le")
    return labels


def base_name(series: str, histograms: set[str]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if series.endswith(suffix) and series.removesuffix(suffix) in histograms:
            return series.removesuffix(suffix)
    return series


def test_every_declared_metric_has_series_in_the_driven_sidecar(exported: dict[str, set[str]]) -> None:
    # Guards the fixture: a metric with no series would have no labels to check against.
    empty = {name for name, labels in exported.items() if not labels}
    assert empty <= {
        "healer_triton_live",  # label-less gauges
        "healer_drain_wanted",
        "healer_drain_held_back",
        "healer_golden_first_token_seconds",  # streamed requests only (tests/sidecar/test_token_metrics.py)
        "healer_golden_inter_token_gap_seconds",
    }
    assert set(sidecar_registry()._help) <= set(exported)


# ---- PromQL, read ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Use:
    """A metric selector in an expression: the metric, and its matchers (label, operator, value)."""

    metric: str
    matchers: list[tuple[str, str, str]]


# Strings, {matchers}, [ranges], numbers and durations, identifiers, anything else: one token each.
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\d+(?:\.\d+)?[a-z]*|[A-Za-z_:][\w:]*|\S')
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
KEYWORDS = {"offset", "bool", "and", "or", "unless"}


def metric_uses(expr: str) -> list[Use]:
    """Every metric selector in a PromQL expression (functions, keywords and label lists are not)."""
    tokens = TOKEN.findall(LABEL_LIST.sub(" ", expr))
    uses = []
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if not re.fullmatch(r"[A-Za-z_:][\w:]*", token) or token in KEYWORDS or following == "(":
            continue
        uses.append(Use(token, MATCHER.findall(following) if following.startswith("{") else []))
    return uses


def label_lists(expr: str, kinds: tuple[str, ...] = ("by", "without", "on", "ignoring")) -> list[str]:
    return [
        label.strip()
        for kind, labels in LABEL_LIST.findall(expr)
        if kind in kinds
        for label in labels.split(",")
        if label.strip()
    ]


def test_the_promql_reader_finds_metrics_matchers_and_label_lists() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, tier) (rate(healer_probe_latency_seconds_bucket{model=~"$model", '
        'tier="business"}[5m]))) unless on (pod) up offset 1h > 0'
    )
    uses = metric_uses(expr)
    assert [u.metric for u in uses] == ["healer_probe_latency_seconds_bucket", "up"]
    assert uses[0].matchers == [("model", "=~", "$model"), ("tier", "=", "business")]
    assert label_lists(expr) == ["le", "tier", "pod"]


def enum_values(exported: dict[str, set[str]]) -> dict[str, set[str]]:
    """The values a label may take, from the code (a matcher on any other value matches nothing)."""
    help_text = sidecar_registry()._help["healer_rollbacks_total"][1]
    outcomes = set(re.findall(r"\b[a-z_]+\b", help_text.split("(", 1)[1])) | {"not_submitted"}
    return {
        "state": {p.value for p in Phase},
        "tier": {t.value for t in Tier},
        "status": {s.value for s in Status},
        "outcome": outcomes,
    }


def check_expression(expr: str, exported: dict[str, set[str]], where: str) -> list[str]:
    """Problems with one expression: unknown metrics, labels a metric does not have, enum values the
    code never sets, and by/on labels that none of its metrics (nor Prometheus) provide."""
    histograms = histogram_names(sidecar_registry())
    enums = enum_values(exported)
    problems = []
    added = TARGET_LABELS | EXTERNAL_LABELS
    available = set(added)
    for use in metric_uses(expr):
        name = base_name(use.metric, histograms)
        if name in EXTERNAL_METRICS:
            labels = EXTERNAL_METRICS[name] | added
        elif name in exported:
            labels = exported[name] | added | ({"le"} if use.metric.endswith("_bucket") else set())
        else:
            problems.append(f"{where}: {use.metric}: no such metric")
            continue
        available |= labels
        for label, op, value in use.matchers:
            if label not in labels:
                problems.append(f"{where}: {use.metric} has no label {label!r}")
            if label in enums and "$" not in value:
                wanted = set(value.split("|")) if op in {"=~", "!~"} else {value}
                unknown = wanted - enums[label] - {".*", ".+"}
                if unknown:
                    problems.append(f"{where}: {label} {sorted(unknown)} is never set (known {sorted(enums[label])})")
    for label in label_lists(expr):
        if label not in available:
            problems.append(f"{where}: by/on label {label!r} is on none of its metrics")
    return problems


def test_the_expression_check_can_fail(exported: dict[str, set[str]]) -> None:
    assert check_expression('sum by (model) (healer_triton_live{model="x"})', exported, "e") == [
        "e: healer_triton_live has no label 'model'",
        "e: by/on label 'model' is on none of its metrics",
    ]
    assert check_expression('healer_rollbacks_total{outcome="restarted"}', exported, "e")[0].startswith(
        "e: outcome ['restarted'] is never set"
    )
    assert check_expression("healer_rollback_total", exported, "e") == ["e: healer_rollback_total: no such metric"]
    assert check_expression('rate(healer_probe_latency_seconds_bucket{le="1"}[5m])', exported, "e") == []


# ---- the alert rules ------------------------------------------------------------------------------------


def rules() -> list[dict[str, Any]]:
    """The rules as written, with monitoring.clusterLabel unset (its placeholder empty)."""
    document = yaml.safe_load(RULES.read_text().replace("__CLUSTER_BY__", ""))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_aggregation_by_namespace_also_keeps_the_cluster_label_when_one_is_set() -> None:
    """monitoring.clusterLabel: one Prometheus over several clusters must not merge their alerts."""
    text = RULES.read_text()
    clauses = re.findall(
        r"\b(?:by|on) \(([^)]*)\)", "\n".join(x for x in text.splitlines() if not x.lstrip().startswith("#"))
    )
    assert clauses and all(c.startswith("__CLUSTER_BY__namespace") for c in clauses if "namespace" in c), clauses


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def test_every_alert_has_severity_summary_description_and_a_runbook() -> None:
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)) and len(names) >= 8
    for alert in alerts():
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert["alert"]
        annotations = alert["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), alert["alert"]
        assert re.fullmatch(r"__RUNBOOK_BASE_URL__/[a-z0-9-]+\.md", annotations["runbook_url"]), alert["alert"]
        assert (RUNBOOKS / annotations["runbook_url"].rsplit("/", 1)[1]).is_file(), alert["alert"]
        assert re.fullmatch(r"\d+[smh]", alert.get("for", "0s")), alert["alert"]


def test_every_metric_in_an_alert_exists_with_the_labels_used(exported: dict[str, set[str]]) -> None:
    problems = [p for rule in rules() for p in check_expression(rule["expr"], exported, rule.get("alert", "rule"))]
    assert problems == []


def test_the_alert_texts_use_only_labels_their_expression_keeps() -> None:
    for alert in alerts():
        expr = alert["expr"]
        if "absent(" in expr:  # absent() keeps only the selector's equality matchers
            kept: set[str] | None = {label for use in metric_uses(expr) for label, op, _ in use.matchers if op == "="}
        elif " by (" in expr:  # an aggregation keeps its by-labels
            kept = set(label_lists(expr, ("by",)))
        else:
            kept = None  # a filter keeps every label of the series
        for text in (alert["annotations"]["summary"], alert["annotations"]["description"]):
            for label in re.findall(r"\$labels\.(\w+)", text):
                assert kept is None or label in kept, f"{alert['alert']}: $labels.{label} is aggregated away"


def test_the_template_replaces_every_placeholder_of_the_rules() -> None:
    template = RULE_TEMPLATE.read_text()
    assert '.Files.Get "files/prometheus-rules.yaml"' in template
    assert "if $values.enabled" in template
    replaced = set(re.findall(r'replace "(__[A-Z_]+__)"', template))
    assert replaced == set(PLACEHOLDER.findall(RULES.read_text()))


def test_rendered_runbook_urls_resolve_to_pages() -> None:
    for group in rendered_rules(BASE_URL + "/")["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url.startswith(BASE_URL + "/") and "//" not in url.removeprefix("https://")
            assert (RUNBOOKS / url.removeprefix(BASE_URL + "/")).is_file()


def test_the_scrape_alerts_watch_the_podmonitors_job() -> None:
    template = PODMONITOR_TEMPLATE.read_text()
    name = re.search(r"^  name: (.+)$", template, re.M)
    assert name and name.group(1).strip() == '{{ include "healer.fullname" . }}-sidecars'
    # The Prometheus Operator names a PodMonitor's job <namespace>/<name>.
    assert '(printf "%s/%s-sidecars" .Release.Namespace (include "healer.fullname" .))' in RULE_TEMPLATE.read_text()
    exprs = [r["expr"] for g in rendered_rules()["groups"] for r in g["rules"] if "up{" in r["expr"]]
    assert exprs and all('job="healer/healer-sidecars"' in e for e in exprs)
    # Every healer_* series an alert reads is this release's job's (a second release's PodMonitor
    # scrapes the same sidecars under its own job).
    healer = [e for g in rendered_rules()["groups"] for r in g["rules"] if "healer_" in (e := r["expr"])]
    assert healer and all(
        m.startswith('{job="healer/healer-sidecars"')
        for e in healer
        for m in re.findall(r"healer_[a-z_]+(\{[^}]*\})?", e)
    )


# ---- runbooks -----------------------------------------------------------------------------------------


def runbook_pages() -> list[Path]:
    return sorted(p for p in RUNBOOKS.glob("*.md") if p.name not in NOT_RUNBOOKS)


def declared_alerts(page: Path) -> set[str]:
    line = re.search(r"^\*\*Alerts?:\*\*(.*)$", page.read_text(), re.M)
    return set(re.findall(r"`(Healer\w+)`", line.group(1))) if line else set()


@pytest.mark.parametrize("page", runbook_pages(), ids=lambda p: p.name)
def test_each_runbook_has_the_four_sections_in_order(page: Path) -> None:
    headings = re.findall(r"^## (.+)$", page.read_text(), re.M)
    assert [h for h in headings if h in SECTIONS] == SECTIONS, headings


def test_the_triton_table_has_symptom_command_cause_fix() -> None:
    text = (RUNBOOKS / "triton-troubleshooting.md").read_text()
    headers = re.findall(r"^\| (symptom .*) \|$", text, re.M)
    assert headers and all(h == "symptom | command | cause | fix" for h in headers)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| symptom")]
    assert len(rows) >= 20


def test_alerts_and_alert_pages_link_both_ways() -> None:
    by_alert = {a["alert"]: a["annotations"]["runbook_url"].rsplit("/", 1)[1] for a in alerts()}
    by_alert[ALERT_NAME] = "rollback-escalated.md"  # the alert the sidecar sends itself (healer/edges/alerts.py)
    by_alert[RELEASE_ALERT_NAME] = "release-stopped.md"  # the release's exit handler sends it
    declared = {name: page.name for page in runbook_pages() for name in declared_alerts(page)}
    assert declared == by_alert  # every alert's page names it, and every named alert links to its page


def test_the_pushed_alerts_runbook_url_is_the_escalation_page() -> None:
    from healer.settings import AlertSettings

    example = yaml.safe_load((ROOT / "examples" / "healer-cluster.yaml").read_text())
    for url in (AlertSettings().runbook_url, example["rollback"]["alert"]["runbook_url"]):
        assert url.endswith("/runbooks/rollback-escalated.md")


def markdown_links(path: Path) -> Iterator[str]:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" not in target:
            yield target


@pytest.mark.parametrize("page", sorted(RUNBOOKS.glob("*.md")), ids=lambda p: p.name)
def test_runbook_links_resolve(page: Path) -> None:
    missing = [t for t in markdown_links(page) if not (page.parent / t).exists()]
    assert missing == []


def test_the_readme_links_every_runbook() -> None:
    linked = {(ROOT / t).resolve() for t in markdown_links(ROOT / "README.md") if t.startswith("runbooks/")}
    assert all(p.exists() for p in linked)
    assert set(RUNBOOKS.glob("*.md")) <= {p for p in linked}


# `healer COMMAND [SUB] rest-of-command`: words that are whole words, the rest up to a pipe, `;` or code's end.
HEALER_COMMAND = re.compile(r"\bhealer +([a-z]+)(?![\w-])(?: +([a-z]+)(?![\w-]))?([^`\n|;]*)")


def flags_of(parser: argparse.ArgumentParser, words: list[str]) -> set[str]:
    """The options of `healer WORDS...`: the command's, and its subcommand's when WORDS names one."""
    flags = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and len(words) > 1 and words[1] in action.choices:
            child = action.choices[words[1]]
            flags |= {option for sub in child._actions for option in sub.option_strings}
    return flags


@pytest.mark.parametrize(
    "page", [*sorted(RUNBOOKS.glob("*.md")), ROOT / "README.md"], ids=lambda p: str(p.relative_to(ROOT))
)
def test_healer_commands_in_the_docs_use_real_subcommands_and_flags(page: Path) -> None:
    """`healer <command> [<sub>] ... --flag`: the command exists and takes each flag on its line."""
    from healer.cli import _parser

    _, commands = _parser()
    seen = 0
    for command, sub, rest in HEALER_COMMAND.findall(page.read_text()):
        words, words_text = [command, sub], f"{command} {sub}".strip()
        if words[0] not in commands:
            continue  # prose ("healer stops", "healer never"), not a command
        seen += 1
        flags = flags_of(commands[words[0]], words)
        for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", rest):
            assert flag in flags, f"{page.name}: healer {words_text} ... {flag}"
    if page in {RUNBOOKS / "rollback-escalated.md", ROOT / "README.md"}:
        assert seen >= 5, "the pattern finds no commands where there are many"


# ---- the dashboard ----------------------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def dashboard_queries() -> list[tuple[str, str]]:
    queries = [
        (panel["title"], target["expr"]) for panel in dashboard()["panels"] for target in panel.get("targets", [])
    ]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable["definition"])
            assert match, variable["definition"]
            queries.append((f"${variable['name']}", f"sum by ({match.group(2)}) ({match.group(1)})"))
    return queries


def test_the_dashboard_is_grafana_json_with_unique_ids_and_a_datasource_variable() -> None:
    board = dashboard()
    assert board["uid"] == "healer" and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "namespace", "model"} <= names
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
            assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]


def test_the_dashboard_has_the_panels_people_look_for() -> None:
    exprs = " ".join(expr for _, expr in dashboard_queries())
    for needle in (
        "healer_time_to_detect_seconds_bucket",
        "healer_time_to_restore_seconds_bucket",
        "sum by (outcome) (round(increase(healer_rollbacks_total",
        "healer_model_state",
        "sum by (tier, status) (rate(healer_probe_results_total",
        "healer_probe_latency_seconds_bucket",
        "healer_triton_live",
    ):
        assert needle in exprs, needle


def test_every_metric_in_the_dashboard_exists_with_the_labels_used(exported: dict[str, set[str]]) -> None:
    problems = [p for title, expr in dashboard_queries() for p in check_expression(expr, exported, title)]
    assert problems == []


def test_every_dashboard_query_is_one_jobs_and_the_chosen_clusters() -> None:
    """Two releases whose PodMonitors scrape the same sidecars record each pod under each job: one
    job at a time (a single-valued variable, no All), or every pod would count twice."""
    queries = dashboard_queries()
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    job, cluster = variables["job"], variables["cluster"]
    assert job["includeAll"] is False and job["multi"] is False
    assert cluster["includeAll"] is True and cluster["allValue"] == ".*"  # also matches series without the label
    names = [v["name"] for v in dashboard()["templating"]["list"]]
    assert names.index("cluster") < names.index("job") < names.index("namespace") < names.index("model")
    for where, expr in queries:
        selectors = re.findall(r"healer_[a-z_]+(\{[^}]*\})?", expr)
        assert selectors, where
        for selector in selectors:
            if where == "$cluster":
                continue  # the variable that lists the clusters
            assert 'cluster=~"$cluster"' in selector, (where, expr)
            if where != "$job":
                assert 'job="$job"' in selector, (where, expr)


def test_the_dashboard_configmap_carries_the_json_and_the_grafana_labels() -> None:
    template = DASHBOARD_TEMPLATE.read_text()
    assert template.startswith("{{- if .Values.monitoring.grafanaDashboard.enabled }}")
    assert '.Files.Get "files/dashboards/healer.json"' in template and "$json | indent 4" in template
    assert ".Values.monitoring.grafanaDashboard" in template and "$dashboard.labels" in template
    assert "$dashboard.namespace" in template and "$dashboard.annotations" in template


# ---- the PodMonitor --------------------------------------------------------------------------------------


def test_the_podmonitor_scrapes_the_injected_sidecars_port() -> None:
    template = PODMONITOR_TEMPLATE.read_text()
    assert template.startswith("{{- if .Values.monitoring.podMonitor.enabled }}")
    # Helm's own lines out, every other expression a placeholder: what is left is the manifest.
    lines = [line for line in template.splitlines() if not re.fullmatch(r"\s*\{\{-.*\}\}\s*", line)]
    document = yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", "\n".join(lines)))
    assert (document["apiVersion"], document["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert document["spec"]["selector"]["matchLabels"] == {INJECT: "true"}
    assert document["spec"]["namespaceSelector"] == {"any": True}
    [endpoint] = document["spec"]["podMetricsEndpoints"]
    [port] = sidecar_container(InjectionConfig(image="healer"))["ports"]
    assert (endpoint["port"], endpoint["path"]) == (port["name"], "/metrics")
    assert ".Values.monitoring.podMonitor.interval" in template and ".Values.monitoring.podMonitor.labels" in template


def test_the_templates_read_only_values_the_chart_declares() -> None:
    values_file = CHART / "values.yaml"
    if not values_file.exists():
        pytest.skip("the chart's values.yaml is not there yet")
    values = yaml.safe_load(values_file.read_text())
    for template in (RULE_TEMPLATE, PODMONITOR_TEMPLATE, DASHBOARD_TEMPLATE):
        for path in re.findall(r"\.Values\.([\w.]+)", template.read_text()):
            node: Any = values
            for key in path.split("."):
                assert isinstance(node, dict) and key in node, f"{template.name}: .Values.{path}"
                node = node[key]


def test_the_release_alert_links_its_own_page() -> None:
    from healer.settings import AlertSettings
    from workflows.steps.release import release_runbook_url

    assert release_runbook_url(AlertSettings()).endswith("/runbooks/release-stopped.md")
    custom = AlertSettings(runbook_url="https://wiki.example.com/healer/rollback-escalated.md")
    assert release_runbook_url(custom) == "https://wiki.example.com/healer/release-stopped.md"
    # A page of the site's own naming: the rollback's page it is (it links the release's).
    assert release_runbook_url(AlertSettings(runbook_url="https://wiki/x")) == "https://wiki/x"
