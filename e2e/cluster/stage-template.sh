#!/usr/bin/env bash
# The background staging as the chart ships it: a workflow from the healer-stage WorkflowTemplate (what
# the healer-stage-hourly CronWorkflow starts every hour; suspended in this tier's values so that it
# never fires in the middle of a timed drill), run by argoexec on the kubelet in the healer image with
# the models volume: the stable versions read in full against the ledger and stamped. Checked: the
# workflow Succeeded, its output lists every stable version as verified, and the stamps on the volume
# were written by it. After healer-up.sh (version 2 promoted).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
[ "$(kubectl -n ml get cronworkflow healer-stage-hourly -o jsonpath='{.spec.suspend}')" = true ] ||
  die "healer-stage-hourly is not suspended in this tier (values-cluster.yaml): it could fire during a drill"
before=$(date +%s)
name=$(kubectl create -o name -f - <<'YAML'
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: healer-stage-, namespace: ml}
spec:
  workflowTemplateRef: {name: healer-stage}
YAML
)
name="${name#*/}"
log "stage: $name submitted"
phase() { kubectl -n ml get workflow "$name" -o jsonpath='{.status.phase}'; }
done_() { case "$(phase)" in Succeeded | Failed | Error) return 0 ;; *) return 1 ;; esac; }
wait_for "stage workflow $name" 180 done_
kubectl -n ml get workflow "$name" -o json >"$BASE/stage-workflow.json"
"$python" - "$BASE/stage-workflow.json" "$BASE/models/linear_scorer" "$before" <<'PY'
import json
import os
import sys

workflow, model_dir, before = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
status = workflow["status"]
if status["phase"] != "Succeeded":
    sys.exit(f"stage: the workflow ended {status['phase']}: {status.get('message', '')}")
node = next(n for n in status["nodes"].values() if n.get("templateName") == "stage" and n["type"] == "Pod")
staged = json.loads(next(p["value"] for p in node["outputs"]["parameters"] if p["name"] == "staged"))
print(f"stage: {workflow['metadata']['name']} Succeeded in {node.get('finishedAt')}; " + ", ".join(
    f"{s['model']} v{s['version']} {s['outcome']} ({s['bytes']} B, {s['seconds']} s)" for s in staged))
if not staged or any(s["outcome"] not in ("verified", "fetched") for s in staged):
    sys.exit(f"stage: not every stable version was staged: {staged}")
for s in staged:
    stamp = os.path.join(model_dir, ".healer-verified", f"{s['version']}.json")
    if not os.path.isfile(stamp) or os.stat(stamp).st_mtime < before - 1:
        sys.exit(f"stage: {stamp} was not written by this run")
PY
