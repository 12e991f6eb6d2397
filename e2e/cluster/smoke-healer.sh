#!/usr/bin/env bash
# The first healer pods on a real kubelet (issue 16, after node-up.sh): the images built by
# e2e/images/ (the project's Dockerfile on a local Debian base, and a Triton image carrying the
# nvidia-pytriton wheel's tritonserver) imported into the node's containerd; then
#   1. a pod running the healer image: uid 10001, read-only root, `healer --version`, its imports;
#   2. a Triton pod with the sidecar beside it, Triton's readinessProbe through the sidecar's /readyz
#      and the sidecar's livenessProbe on /healthz, as the webhook injects them: it must become Ready;
#   3. the model broken in the running Triton (a load with a config override that declares 5 inputs):
#      the sidecar's golden request fails, /readyz turns 503 and the kubelet takes the pod out of Ready.
# Prints the seconds each step took. Exit 1 on any miss. Leaves the pods for inspection; node-down.sh
# removes everything.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
images="${HEALER_IMAGES_DIR:-$HOME/.cache/healer-e2e/images}"
require_node_up
for archive in healer triton; do
  [ -f "$images/$archive.docker.tar" ] || die "missing $images/$archive.docker.tar: run e2e/images/build-$archive.sh"
  ctr images import --all-platforms "$images/$archive.docker.tar" >>"$BASE/logs/images.log" 2>&1
done

phase_of() { kubectl get pod "$1" -o jsonpath='{.status.phase}'; }
ready_of() { kubectl get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
until_true() { # SECONDS COMMAND...: poll every 0.5 s; prints the seconds it took, fails past the deadline
  local limit="$1" started="$SECONDS"
  shift
  for _ in $(seq $((limit * 2))); do
    if "$@"; then echo $((SECONDS - started)); return 0; fi
    sleep 0.5
  done
  return 1
}

# 1. the healer image
kubectl apply -f - <<'YAML' >&2
apiVersion: v1
kind: Pod
metadata: {name: healer-version, namespace: default}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: healer
    image: localhost/healer:dev
    imagePullPolicy: Never
    args: [sh, -c, 'id -u; healer --version; python -c "import tritonclient.http, boto3, hera, structlog, yaml"']
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
YAML
succeeded() { [ "$(phase_of healer-version)" = Succeeded ]; }
took="$(until_true 60 succeeded)" || die "healer-version did not succeed: $(kubectl logs healer-version 2>&1 | tail -3)"
out="$(kubectl logs healer-version)"
[ "$(head -n1 <<<"$out")" = 10001 ] || die "healer-version ran as uid $(head -n1 <<<"$out"), not 10001"
log "1. the healer image ran on the node in ${took} s: $(tr '\n' ' ' <<<"$out")"

# 2. Triton with the sidecar, readiness through /readyz
kubectl create configmap healer-smoke --from-file=healer.yaml="$here/healer-smoke.yaml" >&2
kubectl apply -f - <<'YAML' >&2
apiVersion: v1
kind: Pod
metadata: {name: triton-0, namespace: default, labels: {app: triton}}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}, fsGroup: 10001}
  volumes:
  - {name: config, configMap: {name: healer-smoke}}
  - {name: tmp, emptyDir: {}}      # the Python backend writes its environments there (read-only root)
  - {name: store, emptyDir: {}}
  containers:
  - name: triton
    image: localhost/healer-triton:pytriton-0.7.0
    imagePullPolicy: Never
    ports: [{name: http, containerPort: 8000}]
    livenessProbe: {httpGet: {path: /v2/health/live, port: 8000}, periodSeconds: 5, failureThreshold: 6}
    readinessProbe: {httpGet: {path: /readyz, port: 8088}, periodSeconds: 2, timeoutSeconds: 1, failureThreshold: 2}
    volumeMounts: [{name: tmp, mountPath: /tmp}]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
  - name: healer
    image: localhost/healer:dev
    imagePullPolicy: Never
    args: [healer, sidecar, --config, /etc/healer/healer.yaml]
    ports: [{name: healer, containerPort: 8088}]
    livenessProbe: {httpGet: {path: /healthz, port: healer}, periodSeconds: 10, timeoutSeconds: 2, failureThreshold: 3}
    volumeMounts: [{name: config, mountPath: /etc/healer}, {name: store, mountPath: /store}]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
YAML
is_ready() { [ "$(ready_of triton-0)" = True ]; }
took="$(until_true 180 is_ready)" || die "triton-0 never became Ready: $(kubectl describe pod triton-0 | tail -5)"
log "2. Triton with the sidecar became Ready through the kubelet's probe of /readyz in ${took} s"

# 3. break the model in the running Triton: the kubelet must take the pod out of Ready
ip="$(kubectl get pod triton-0 -o jsonpath='{.status.podIP}')"
bad="$(in_netns curl -s -m 5 "http://$ip:8000/v2/models/linear_scorer/config" | python3 -c '
import json, sys
config = json.load(sys.stdin)
config["input"][0]["dims"] = [5]
print(json.dumps({"parameters": {"config": json.dumps(config)}}))')"
in_netns curl -s -f -m 60 -X POST -d "$bad" "http://$ip:8000/v2/repository/models/linear_scorer/load" >/dev/null
not_ready() { [ "$(ready_of triton-0)" = False ]; }
took="$(until_true 60 not_ready)" || die "triton-0 stayed Ready with a broken model"
log "3. the broken model took triton-0 out of Ready in ${took} s: $(in_netns curl -s -m 2 "http://$ip:8088/readyz" | head -n1)"
