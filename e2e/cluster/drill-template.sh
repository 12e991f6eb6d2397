#!/usr/bin/env bash
# The drill as the chart ships it for clusters: the healer-drill WorkflowTemplate. Its pod
# (run by argoexec on the kubelet) pushes the broken variant, watches the sidecars and the golden
# request on every replica, asserts the outcome, and always puts the stable version back; the report
# step prints the verdict. Needs the broken variants on the models volume (.healer-drills/broken).
# Submitted the way an operator would: `healer drill --target cluster SCENARIO -o json` from outside
# the cluster (here: the node's namespace) with a kubeconfig holding the operator's token (the
# workflows through the Kubernetes API, no argo-server); it prints the
# result with Argo's side of the time (workflow created, heal pod, each heal phase, finished).
# Usage: drill-template.sh [SCENARIO] (default wrong-weights). After healer-up.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
scenario="${1:-wrong-weights}"
broken="$BASE/models/.healer-drills/broken"
if [ ! -d "$broken" ]; then
  mkdir -p "$broken"
  cp -r "$root/examples/broken/linear_scorer" "$broken/"
  find "$broken" -name __pycache__ -prune -exec rm -rf {} +
  chown -R 10001:10001 "$BASE/models/.healer-drills"
fi
# An operator's machine: a ServiceAccount that may run drills in ml (create workflows from the
# templates, read them), its token, and the chart's own healer.yaml with rollback.argo pointed at
# argo-server's address from here (the node's namespace, without the cluster's DNS) and its CA.
operator_account drill-runner operator-runs-drills <<'YAML'
  - apiGroups: [argoproj.io]
    resources: [workflows]
    verbs: [create, get, list, watch, patch] # patch: argo stop, when a drill runs past its time
  - apiGroups: [argoproj.io]
    resources: [workflowtemplates]
    verbs: [get, list]
YAML
operator="$BASE/operator"
mkdir -p "$operator"
kubectl -n ml create token operator --duration=1h >"$operator/token"
kubectl -n ml get configmap healer-config -o jsonpath='{.data.healer\.yaml}' >"$operator/chart-healer.yaml"
"$python" - "$operator/chart-healer.yaml" "$operator/healer.yaml" "https://$ARGO_SERVER_IP:2746" \
  "$operator/token" "$BASE/pki/ca.crt" "$operator/state" <<'PY'
import sys

import yaml

source, target, host, token, ca, state = sys.argv[1:]
config = yaml.safe_load(open(source))
config["rollback"]["argo"].update({"host": host, "token_file": token, "ca_file": ca})
config["rollback"]["state_dir"] = state
with open(target, "w") as out:
    yaml.safe_dump(config, out, sort_keys=False)
PY
# The operator's kubeconfig: the API server as the node's admin kubeconfig names it, the operator's
# token. With it the drill's workflows are created and read through the Kubernetes API (as the argo
# CLI does without an argo-server); the healer.yaml above still says where argo-server is.
"$python" - "$BASE/admin.kubeconfig" "$operator/token" "$operator/kubeconfig" <<'PY'
import sys

import yaml

admin, token, target = sys.argv[1:]
config = yaml.safe_load(open(admin))
cluster = config["clusters"][0]
config = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [cluster],
    "users": [{"name": "operator", "user": {"token": open(token).read().strip()}}],
    "contexts": [{"name": "operator", "context": {"cluster": cluster["name"], "user": "operator", "namespace": "ml"}}],
    "current-context": "operator",
}
with open(target, "w") as out:
    yaml.safe_dump(config, out)
PY
status=0
in_netns "$root/.venv/bin/healer" drill --config "$operator/healer.yaml" --kubeconfig "$operator/kubeconfig" \
  --target cluster "$scenario" --model linear_scorer -o json --report "$BASE/drill-template.html" \
  >"$BASE/drill-template.json" || status=$?
[ -s "$BASE/drill-template.json" ] || die "drill $scenario: healer drill --target cluster printed no result (exit $status)"
"$python" - "$BASE/drill-template.json" <<'PY'
import json
import sys

(result,) = json.load(open(sys.argv[1]))
print(f"drill-template: {result['scenario']}: {result['outcome']} (passed {result['passed']}), "
      f"detect {result['detect_s']} s, restore {result['restore_s']} s; {'; '.join(result['notes'])}")
for mark in result["marks"]:
    print(f"drill-template: {mark['at_s']:7.2f} s  {mark['kind']}: {mark['text']}")
for phase in result["phases"]:
    print(f"drill-template: {phase['start_s']:7.2f} s  phase {phase['name']} {phase['outcome']} "
          f"({phase['end_s'] - phase['start_s']:.2f} s)")
kinds = {mark["kind"] for mark in result["marks"]}
missing = {"workflow-created", "heal-pod-started", "heal-code-started", "workflow-finished"} - kinds
names = {phase["name"] for phase in result["phases"]}
if not result["passed"] or missing or not {"lease", "fetch-stable", "restore", "record"} <= names:
    sys.exit(f"drill-template: not passed, or Argo's side missing: marks {sorted(missing)}, phases {sorted(names)}")
PY
[ "$status" = 0 ] || die "drill $scenario: healer drill --target cluster exited $status"
log "drill $scenario through healer drill --target cluster (the healer-drill WorkflowTemplate): passed"
