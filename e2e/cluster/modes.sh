#!/usr/bin/env bash
# Two more Triton Deployments on the node, each healed through Argo's heal pod (issue 29), after
# store-s3.sh (SeaweedFS as the pod seaweedfs.storage). Usage: modes.sh object-store | kserve
#   object-store  Triton reads the bucket itself (triton-object-store.yaml: --model-repository=s3://...,
#                 no model volume), repository_mode object-store (values-object-store-cluster.yaml)
#   kserve        an InferenceService's predictor pods as KServe creates them in raw deployment mode
#                 (kserve-predictor.yaml: kserve-container, storage-initializer, kserve-provision-location),
#                 opted in through the webhook, repository_mode per-pod (values-kserve-cluster.yaml)
# Each: the prefix MODE/ of the bucket filled, a release of the chart of its own (namespace healer-MODE,
# its Triton and Argo objects in ml-MODE, the chart's checkRequirements preflight on), the Deployment
# injected, v2 promoted, then drill_modes.py's wrong-weights push healed and timed, and a pod replaced.
# Everything it made is removed at the end, and the step fails if any of it is left.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
mode="${1:?usage: modes.sh object-store|kserve}"
case "$mode" in
  object-store) manifest="$here/triton-object-store.yaml" deployment=triton-object-store ;;
  kserve) manifest="$here/kserve-predictor.yaml" deployment=linear-scorer-predictor ;;
  *) die "modes.sh: unknown mode '$mode' (object-store or kserve)" ;;
esac
webhook_ns="healer-$mode" ns="ml-$mode"
started=$SECONDS
s3_ip="$(kubectl -n storage get service seaweedfs -o jsonpath='{.spec.clusterIP}')" ||
  die "no SeaweedFS Service in namespace storage: run store-s3.sh first"
drill() {
  in_netns env HEALER_S3_URL="http://$s3_ip:8333" KUBECTL="$NODE_BIN/kubectl" HEALER_NODE_DIR="$BASE" \
    HEALER_NODE_NETNS="$NETNS" PYTHONPATH="$here" "$python" "$here/drill_modes.py" "$@"
}

# What this step made, removed whether it passed or not; then nothing of it may be left.
clean_up() {
  kubectl -n "$ns" delete deployment "$deployment" --ignore-not-found --wait=true --timeout=120s >&2 || true
  helm uninstall healer -n "$webhook_ns" --wait --timeout 120s >&2 2>&1 || true
  kubectl delete namespace "$ns" "$webhook_ns" --ignore-not-found --wait=true --timeout=180s >&2 || true
}
left_over() {
  local left=""
  kubectl get namespace "$ns" "$webhook_ns" >/dev/null 2>&1 && left+=" namespaces"
  kubectl get mutatingwebhookconfigurations -o name | grep -q "healer-$webhook_ns-injector" && left+=" the webhook configuration"
  kubectl get pods -A -o name -l "$(sed -n 's/^  selector: //p' "$here/values-$mode-cluster.yaml")" | grep -q . && left+=" Triton pods"
  [ -z "$left" ] || { log "$mode: left behind:$left"; return 1; }
}
trap 'clean_up' EXIT

# --- the bucket, the namespaces, the credentials and the webhook's certificate ------------------------------
drill fill "$mode" >&2
kubectl create namespace "$webhook_ns" >&2
kubectl create namespace "$ns" >&2
kubectl -n "$ns" create secret generic healer-s3 --from-literal=AWS_ACCESS_KEY_ID=healer-cluster \
  --from-literal=AWS_SECRET_ACCESS_KEY=healer-cluster-secret >&2
(
  cd "$BASE/pki"
  leaf "webhook-$mode" "/CN=healer-webhook.$webhook_ns.svc" \
    "subjectAltName=DNS:healer-webhook.$webhook_ns.svc,DNS:healer-webhook.$webhook_ns.svc.cluster.local\nextendedKeyUsage=serverAuth\n"
)
kubectl -n "$webhook_ns" create secret tls healer-webhook-tls --cert="$BASE/pki/webhook-$mode.crt" \
  --key="$BASE/pki/webhook-$mode.key" >&2

# --- helm install (checkRequirements on, as a user's install) ----------------------------------------------
step=$SECONDS
helm install healer "$root/deploy/helm/healer" -n "$webhook_ns" -f "$here/values-cluster.yaml" \
  -f "$here/values-$mode-cluster.yaml" --set-file "argo.caBundle=$BASE/pki/ca.crt" --set alertReceiver.enabled=false \
  --set "certificates.caBundle=$(base64 -w0 "$BASE/pki/ca.crt")" \
  --set "config.rollback.alert.webhook_url=http://$NODE_IP:9093" --wait --timeout 180s >&2
log "$mode: helm install (its checkRequirements preflight passed) in $((SECONDS - step)) s"

# --- the Deployment, injected ---------------------------------------------------------------------------------
step=$SECONDS
kubectl apply -f "$manifest" >&2
kubectl -n "$ns" rollout status "deployment/$deployment" --timeout=240s >&2
selector="$(sed -n 's/^  selector: //p' "$here/values-$mode-cluster.yaml")"
containers="$(kubectl -n "$ns" get pods -l "$selector" -o jsonpath='{range .items[*]}{.spec.containers[*].name}{"\n"}{end}')"
[ "$(grep -c healer <<<"$containers")" = 2 ] || die "$mode: the sidecar was not injected into both pods: $containers"
if [ "$mode" = kserve ]; then
  # the sidecar mounts KServe's volume where the per-pod mode stages, and sees what the initializer copied
  pod="$(kubectl -n "$ns" get pods -l "$selector" -o jsonpath='{.items[0].metadata.name}')"
  kubectl -n "$ns" get pod "$pod" -o jsonpath='{range .spec.containers[?(@.name=="healer")].volumeMounts[*]}{.name}={.mountPath}{"\n"}{end}' |
    grep -qx "kserve-provision-location=/mnt/models" || die "kserve: the sidecar does not mount kserve-provision-location at /mnt/models"
  kubectl -n "$ns" exec "$pod" -c healer -- ls /mnt/models/linear_scorer/2 >&2
fi
log "$mode: 2 replicas injected and Ready through /readyz after $((SECONDS - step)) s"
pod="$(kubectl -n "$ns" get pods -l "$selector" -o jsonpath='{.items[0].metadata.name}')"
kubectl -n "$ns" exec "$pod" -c healer -- healer promote --config /etc/healer/healer.yaml linear_scorer 2 --by "e2e-cluster-$mode" >&2

# --- the push, healed through Argo and timed ---------------------------------------------------------------------
status=0
drill drill "$mode" | tee "$BASE/drill-$mode.out" || status=$?
if [ "$status" != 0 ]; then
  log "$mode: the drill failed; the workflows, the pods and the sidecars' last lines:"
  kubectl -n "$ns" get workflows,pods -o wide >&2 || true
  for p in $(kubectl -n "$ns" get pods -l "$selector" -o name 2>/dev/null); do
    kubectl -n "$ns" logs "$p" -c healer --tail=25 >&2 || true
  done
  exit "$status"
fi
trap - EXIT
clean_up
left_over
log "$mode: done in $((SECONDS - started)) s, nothing of it left"
