#!/usr/bin/env bash
# Issue 31's signals on the node (after monitoring-up.sh; drill_signals.py says what each checks):
#   observe        linear_scorer switched to observe-only by a helm upgrade: a wrong-weights push planned,
#                  shown by `healer status`, its info alert in Alertmanager, nothing touched; switched back
#   outside-alert  the node's Alertmanager configured from the chart's example (alertmanager-receiver.yaml)
#                  to call the webhook's receiver: 50 alerts for a version start one rollback through Argo,
#                  and the healed incident's info alert reaches Alertmanager
# Usage: signals.sh [observe|outside-alert] (default both). The results' JSON in $BASE/signals-*.json.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
[ -s "$BASE/alert-receiver-token" ] || die "no $BASE/alert-receiver-token: healer-up.sh writes it"

# Alertmanager runs in the node's namespace, outside the cluster's DNS: the example's URL points at the
# webhook Service's ClusterIP (kube-proxy's rules), its certificate checked for the Service's name.
alertmanager_to_receiver() {
  local ip
  ip="$(kubectl -n healer get service healer-webhook -o jsonpath='{.spec.clusterIP}')"
  [ -n "$ip" ] || die "the webhook Service has no ClusterIP"
  "$python" - "$root/deploy/helm/examples/alertmanager-receiver.yaml" "$BASE/alertmanager/alertmanager.yml" "$ip" \
    "$BASE/alert-receiver-token" "$BASE/pki/ca.crt" <<'PY'
import sys

import yaml

example, out, ip, token, ca = sys.argv[1:]
config = yaml.safe_load(open(example))
route = config["route"]["routes"][0]
route.update(group_wait="1s", group_interval="5s")  # the example's 10 s and 1 m: a drill's seconds
webhook = next(r for r in config["receivers"] if r["name"] == "healer")["webhook_configs"][0]
webhook["url"] = f"https://{ip}/alerts/v1/alertmanager"
webhook["http_config"]["authorization"]["credentials_file"] = token
webhook["http_config"]["tls_config"].update(ca_file=ca, server_name="healer-webhook.healer.svc")
config["route"].update(group_wait="1s", group_interval="5s", repeat_interval="1h")
open(out, "w").write(yaml.safe_dump(config, sort_keys=False))
PY
  command -v amtool >/dev/null && amtool check-config "$BASE/alertmanager/alertmanager.yml" >&2
  in_netns curl -fsS -m 5 -X POST "http://$NODE_IP:9093/-/reload" >&2
  in_netns curl -fsS -m 5 "http://$NODE_IP:9093/api/v2/status" | grep -q "alerts/v1/alertmanager" ||
    die "Alertmanager did not load the receiver's route"
  log "signals: Alertmanager routes alerts naming a model version to https://$ip/alerts/v1/alertmanager"
}

run_scenario() {
  local status=0
  KUBECTL="$NODE_BIN/kubectl" HELM="$HELM" HEALER_NODE_DIR="$BASE" HEALER_NODE_NETNS="$NETNS" \
    "$python" "$here/drill_signals.py" "$1" | tee "$BASE/signals-$1.out" || status=$?
  tail -n 1 "$BASE/signals-$1.out" >"$BASE/signals-$1.json"
  if [ "$status" != 0 ]; then
    log "signals $1 failed; the workflows, the Triton pods, the sidecars' and the webhook's last lines:"
    kubectl -n ml get workflows,pods -o wide >&2 || true
    for pod in $(kubectl -n ml get pods -l app.kubernetes.io/name=triton -o name 2>/dev/null); do
      kubectl -n ml logs "$pod" -c healer --tail=20 >&2 || true
    done
    kubectl -n healer logs deployment/healer-webhook --tail=30 >&2 || true
  fi
  return "$status"
}

[ $# -gt 0 ] || set -- observe outside-alert
for scenario in "$@"; do
  case "$scenario" in
    observe) run_scenario observe ;;
    outside-alert) alertmanager_to_receiver && run_scenario outside-alert ;;
    *) die "unknown scenario $scenario (observe, outside-alert)" ;;
  esac
done
