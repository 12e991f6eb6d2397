"""Prometheus's configuration from the chart's own monitoring objects, as the Prometheus Operator would
generate it (e2e/cluster/monitoring-up.sh; no Operator runs on the one-node cluster).

  prometheus_config.py config RENDERED.yaml OUTDIR ALERTMANAGER
reads the PodMonitor and the PrometheusRule that `helm template` renders, and writes:
  prometheus.yml  one scrape job per PodMonitor endpoint, named <namespace>/<name> as the Operator
                  names it (the chart's scrape alerts select that job): the PodMonitor's label
                  selector and named container port as relabelling on pod discovery's labels, its
                  path and interval; the target labels namespace and pod as the Operator adds them;
                  Alertmanager at ALERTMANAGER (host:port)
  rules.yml       the PrometheusRule's spec (its groups)
Only what the chart's PodMonitor uses is translated (matchLabels, namespaceSelector any, port, path,
interval): anything else in it is refused, so a change to the chart cannot be silently dropped here.

  prometheus_config.py targets PODS.json
prints the targets of pod discovery for the pods in PODS.json (`kubectl get pods -A -o json`), in
Prometheus's file_sd format with the labels its Kubernetes discovery (role pod) gives: one target per
container port of each running pod with an IP. Debian's Prometheus 2.42 is built without Kubernetes
discovery ("field kubernetes_sd_configs not found"), so monitoring-up.sh refreshes this file from the
API server every few seconds instead; the PodMonitor's relabelling applies to it unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def _label(name: str) -> str:
    """A Kubernetes label name as Prometheus's pod discovery exposes it."""
    return "".join(c if c.isalnum() else "_" for c in name)


def scrape_job(monitor: dict[str, Any], endpoint: dict[str, Any], targets: str) -> dict[str, Any]:
    spec = monitor["spec"]
    unsupported = set(spec) - {"namespaceSelector", "selector", "podMetricsEndpoints"}
    unsupported |= set(spec["selector"]) - {"matchLabels"}
    unsupported |= set(endpoint) - {"port", "path", "interval"}
    if unsupported or spec.get("namespaceSelector") != {"any": True}:
        raise SystemExit(f"PodMonitor {monitor['metadata']['name']}: not translated here: {sorted(unsupported)}")
    keep = [
        {"source_labels": [f"__meta_kubernetes_pod_label_{_label(key)}"], "regex": value, "action": "keep"}
        for key, value in spec["selector"]["matchLabels"].items()
    ]
    port = endpoint["port"]
    keep.append({"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port, "action": "keep"})
    meta = monitor["metadata"]
    return {
        "job_name": f"{meta['namespace']}/{meta['name']}",
        "scrape_interval": endpoint.get("interval", "30s"),
        "metrics_path": endpoint.get("path", "/metrics"),
        "file_sd_configs": [{"files": [targets], "refresh_interval": "5s"}],
        "relabel_configs": [
            *keep,
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        ],
    }


def pod_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prometheus's Kubernetes discovery (role pod) for these pods: one target per container port."""
    found = []
    for pod in pods:
        status, meta = pod.get("status") or {}, pod["metadata"]
        if status.get("phase") != "Running" or not status.get("podIP"):
            continue
        pod_labels = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": status["podIP"],
            **{f"__meta_kubernetes_pod_label_{_label(k)}": v for k, v in (meta.get("labels") or {}).items()},
        }
        for container in pod["spec"]["containers"]:
            for port in container.get("ports") or []:
                labels = {
                    **pod_labels,
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                }
                found.append({"targets": [f"{status['podIP']}:{port['containerPort']}"], "labels": labels})
    return found


def write_config(rendered: str, out: str, alertmanager: str) -> None:
    documents = [d for d in yaml.safe_load_all(Path(rendered).read_text()) if d]
    monitors = [d for d in documents if d["kind"] == "PodMonitor"]
    rules = [d for d in documents if d["kind"] == "PrometheusRule"]
    if not monitors or not rules:
        raise SystemExit(f"{rendered}: want a PodMonitor and a PrometheusRule, found {[d['kind'] for d in documents]}")
    targets = str(Path(out, "targets.json"))
    config = {
        "global": {"evaluation_interval": "15s"},
        "rule_files": ["rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            scrape_job(monitor, endpoint, targets)
            for monitor in monitors
            for endpoint in monitor["spec"]["podMetricsEndpoints"]
        ],
    }
    Path(out, "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    groups = [group for rule in rules for group in rule["spec"]["groups"]]
    Path(out, "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))


def main() -> None:
    if sys.argv[1:2] == ["config"]:
        write_config(*sys.argv[2:5])
    elif sys.argv[1:2] == ["targets"]:
        print(json.dumps(pod_targets(json.loads(Path(sys.argv[2]).read_text())["items"])))
    else:
        raise SystemExit("usage: prometheus_config.py config RENDERED OUTDIR ALERTMANAGER | targets PODS.json")


if __name__ == "__main__":
    main()
