#!/usr/bin/env bash
# Prometheus and Alertmanager on the node (after healer-up.sh), from Debian's packages, as processes in
# the node's network namespace: Prometheus scrapes the injected sidecars with the chart's own PodMonitor
# and evaluates the chart's own PrometheusRule (both rendered by `helm template` with the release's
# values and translated as the Prometheus Operator would, prometheus_config.py); Alertmanager listens
# on the node IP, where the chart's config sends the sidecars' and the escalate step's pushed alerts
# (healer-up.sh sets rollback.alert.webhook_url). Waits until every Triton pod's sidecar is scraped.
# Not the Operator's kind of discovery: see discover.sh below.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
for tool in prometheus prometheus-alertmanager; do
  command -v "$tool" >/dev/null || die "missing $tool (apt-get install prometheus prometheus-alertmanager)"
done
mkdir -p "$BASE/prometheus" "$BASE/alertmanager"
# checkRequirements=false: rendered to be translated, never installed (no Prometheus Operator here)
"$HELM" template healer "$root/deploy/helm/healer" -n healer -f "$here/values-cluster.yaml" \
  --set certificates.caBundle=unused --set monitoring.podMonitor.enabled=true --set checkRequirements=false \
  --set monitoring.prometheusRule.enabled=true \
  --show-only templates/monitoring-podmonitor.yaml --show-only templates/monitoring-prometheusrule.yaml \
  >"$BASE/prometheus/chart-monitoring.yaml"
"$python" "$here/prometheus_config.py" config "$BASE/prometheus/chart-monitoring.yaml" "$BASE/prometheus" \
  "$NODE_IP:9093"
promtool check config "$BASE/prometheus/prometheus.yml" >&2
# Pod discovery: Debian's Prometheus has no Kubernetes discovery built in; the pods are listed from
# the API server every 3 s into its file_sd, with the labels Kubernetes discovery gives
# (prometheus_config.py targets).
cat >"$BASE/prometheus/discover.sh" <<SH
while true; do
  "$NODE_BIN/kubectl" --kubeconfig="$BASE/admin.kubeconfig" get pods -A -o json >"$BASE/prometheus/pods.json" &&
    "$python" "$here/prometheus_config.py" targets "$BASE/prometheus/pods.json" >"$BASE/prometheus/targets.json.tmp" &&
    mv "$BASE/prometheus/targets.json.tmp" "$BASE/prometheus/targets.json"
  sleep 3
done
SH
start pod-discovery bash "$BASE/prometheus/discover.sh"
targets_written() { [ -s "$BASE/prometheus/targets.json" ]; }
wait_for "pod discovery's first targets" 30 targets_written
cat >"$BASE/alertmanager/alertmanager.yml" <<'YAML'
route: {receiver: record, group_wait: 1s, group_interval: 5s, repeat_interval: 1h}
receivers: [{name: record}]
YAML
start alertmanager prometheus-alertmanager --config.file="$BASE/alertmanager/alertmanager.yml" \
  --storage.path="$BASE/alertmanager/data" --web.listen-address="$NODE_IP:9093" --cluster.listen-address=
start prometheus prometheus --config.file="$BASE/prometheus/prometheus.yml" \
  --storage.tsdb.path="$BASE/prometheus/data" --web.listen-address=127.0.0.1:9090
am_ready() { in_netns curl -fsS -m 2 "http://$NODE_IP:9093/-/ready"; }
wait_for alertmanager 60 am_ready
# every Triton pod's sidecar is a target that is up
scraped() {
  in_netns curl -fsS -m 2 'http://127.0.0.1:9090/api/v1/query' --data-urlencode 'query=sum(up{job="healer/healer-sidecars"})' |
    grep -q '"value":\[[0-9.]*,"2"\]'
}
wait_for "Prometheus scraping both sidecars" 120 scraped
log "monitoring: Prometheus on 127.0.0.1:9090 (the chart's PodMonitor and rules), Alertmanager on $NODE_IP:9093"
