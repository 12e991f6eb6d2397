#!/usr/bin/env bash
# `helm test healer`: the chart's test pod runs `healer check` as an injected sidecar would (its
# service account, a projected token, healer-config): argo-server reachable and trusted with the
# chart's argo.caBundle, the rollback template readable with that token, the replica pods listable.
# Then `healer status` as an on-call person runs it from a laptop: a kubeconfig (here the node's admin one,
# from the node's network namespace), no healer.yaml. It lists the pods with a sidecar and reads each
# sidecar's /status through the API server's pod proxy (the real kubelet-run sidecars). Checked: both
# Triton replicas, linear_scorer healthy and in service on each, every tier ok. After healer-up.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
started=$SECONDS
# (helm test --logs reads the release's namespace; the test pod runs in Triton's, beside the sidecars)
test_status=0
helm test healer -n healer --timeout 3m >"$BASE/helm-test.log" 2>&1 ||
  test_status=$?
kubectl -n ml logs healer-check >>"$BASE/helm-test.log" 2>&1 || true
cat "$BASE/helm-test.log" >&2
[ "$test_status" = 0 ] || die "helm test healer failed (exit $test_status)"
grep -q "^ok     argo-server: " "$BASE/helm-test.log" || die "helm test: healer check's argo-server line is missing"
log "helm test: passed in $((SECONDS - started)) s"
# After a drill the sidecars need a few periods to trust the model again: up to 60 s for a healthy view.
started=$SECONDS
while :; do
  status=0
  in_netns "$root/.venv/bin/healer" status --kubeconfig "$BASE/admin.kubeconfig" -n ml -o json \
    >"$BASE/status.json" || status=$?
  [ "$status" = 0 ] || [ $((SECONDS - started)) -ge 60 ] && break
  sleep 2
done
log "status: healer status exited $status after $((SECONDS - started)) s"
in_netns "$root/.venv/bin/healer" status --kubeconfig "$BASE/admin.kubeconfig" -n ml -o wide >&2 || true
"$python" - "$BASE/status.json" "$status" <<'PY'
import json
import sys

view, code = json.load(open(sys.argv[1])), int(sys.argv[2])
rows = [r for r in view["rows"] if r["model"] == "linear_scorer"]
pods = sorted(r["pod"] for r in rows)
print(f"status: {view['pods']} pod(s), {view['healthy']} of {len(view['rows'])} healthy; linear_scorer on {pods}")
if len(rows) < 2:
    sys.exit(f"status: expected linear_scorer on both Triton replicas, got {view['rows']}")
for row in rows:
    if row["state"] != "healthy" or row["drain"] != "in service" or "FAIL" in row["tiers"] or "ERROR" in row["tiers"] or "pass" not in row["tiers"]:
        sys.exit(f"status: {row['pod']}: not healthy and in service: {row}")
if code != 0:
    sys.exit(f"status: exited {code} although every row is healthy")
PY
# The sidecars' own memory in the pods (PID 1 of the healer container: `healer sidecar`), with the
# draining rule on, after the drills before this step: a figure for docs/scale.md, not a check.
for pod in $(kubectl -n ml get pods -l app.kubernetes.io/name=triton -o jsonpath='{.items[*].metadata.name}'); do
  kubectl -n ml exec "$pod" -c healer -- python -c \
    "import re; s=open('/proc/1/status').read(); print('$pod', *(l for l in s.splitlines() if l.startswith(('VmHWM', 'VmRSS'))))" \
    >&2 || log "status: $pod: the sidecar's memory not read"
done
