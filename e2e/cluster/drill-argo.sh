#!/usr/bin/env bash
# The wrong-weights drill on the one-node cluster, healed through the real Argo (drill_argo.py says
# what it does and checks), RUNS times (default 1), each with a new broken version; then a Triton pod
# restarted. After node-up.sh, argo-up.sh and healer-up.sh. Usage: drill-argo.sh [RUNS], or
# drill-argo.sh store-down (after monitoring-up.sh: the escalation in the real Alertmanager, pushed and
# from Prometheus). The result's JSON is the last line of stdout, also kept in $BASE/drill-argo.json.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
[ -x "$python" ] || python="$(command -v python3)"
status=0
ARGO_DEFAULT_REQUEUE_TIME="${ARGO_DEFAULT_REQUEUE_TIME:-}" KUBECTL="$NODE_BIN/kubectl" HEALER_NODE_DIR="$BASE" HEALER_NODE_NETNS="$NETNS" "$python" "$here/drill_argo.py" "${@:-1}" |
  tee "$BASE/drill-argo.out" || status=$?
tail -n 1 "$BASE/drill-argo.out" >"$BASE/drill-argo.json"
if [ "$status" != 0 ]; then
  log "the drill failed; the workflows, the Triton pods and the sidecars' last lines:"
  kubectl -n ml get workflows,pods -o wide >&2 || true
  for pod in $(kubectl -n ml get pods -l app.kubernetes.io/name=triton -o name 2>/dev/null); do
    kubectl -n ml logs "$pod" -c healer --tail=20 >&2 || true
  done
fi
exit "$status"
