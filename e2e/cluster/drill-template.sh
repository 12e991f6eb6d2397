#!/usr/bin/env bash
# The drill as the chart ships it for clusters: the healer-drill WorkflowTemplate, submitted as an
# operator would from the Argo UI or `argo submit --from workflowtemplate/healer-drill`. Its pod
# (run by argoexec on the kubelet) pushes the broken variant, watches the sidecars and the golden
# request on every replica, asserts the outcome, and always puts the stable version back; the report
# step prints the verdict. Needs the broken variants on the models volume (.healer-drills/broken).
# Usage: drill-template.sh [SCENARIO] (default wrong-weights). After healer-up.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=SCRIPTDIR/../versions.env
source "$here/../versions.env"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
[ -e "$BASE/up" ] || die "the node is not up: run node-up.sh first"
scenario="${1:-wrong-weights}"
broken="$BASE/models/.healer-drills/broken"
if [ ! -d "$broken" ]; then
  mkdir -p "$broken"
  cp -r "$root/examples/broken/linear_scorer" "$broken/"
  find "$broken" -name __pycache__ -prune -exec rm -rf {} +
  chown -R 10001:10001 "$BASE/models/.healer-drills"
fi
name="$(kubectl -n ml create -o jsonpath='{.metadata.name}' -f - <<YAML
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: healer-drill-, namespace: ml}
spec:
  workflowTemplateRef: {name: healer-drill}
  arguments:
    parameters:
      - {name: scenario, value: $scenario}
      - {name: model, value: linear_scorer}
YAML
)"
log "drill $scenario: workflow $name"
finished() {
  case "$(kubectl -n ml get workflow "$name" -o jsonpath='{.status.phase}')" in
    Succeeded | Failed | Error) return 0 ;;
    *) return 1 ;;
  esac
}
wait_for "workflow $name finished" 420 finished
phase="$(kubectl -n ml get workflow "$name" -o jsonpath='{.status.phase}')"
kubectl -n ml get workflow "$name" -o json | "${PYTHON:-$root/.venv/bin/python}" -c '
import json, sys
nodes = json.load(sys.stdin)["status"]["nodes"].values()
for node in sorted(nodes, key=lambda n: n.get("startedAt") or ""):
    if node.get("type") == "Pod":
        print("drill-template: %s: %s %s" % (node["displayName"], node["phase"], node.get("message", "")))
    for param in (node.get("outputs") or {}).get("parameters", []):
        if param["name"] == "report":
            print(param.get("value", ""))
'
[ "$phase" = Succeeded ] || die "drill $scenario: workflow $name $phase"
log "drill $scenario through the healer-drill WorkflowTemplate: passed"
