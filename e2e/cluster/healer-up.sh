#!/usr/bin/env bash
# healer installed on the node the way the README tells a user (after node-up.sh and argo-up.sh):
#   - the model repository: a PersistentVolume of type hostPath on the node ($BASE/models, owned by uid
#     10001) standing in for the NFS export, bound to the claim triton-models in namespace ml, seeded
#     with the example models (versions 1 and 2 of linear_scorer);
#   - `helm install healer deploy/helm/healer` with e2e/cluster/values-cluster.yaml: the images built
#     here (imagePullPolicy Never), the webhook's certificate signed by the node's CA (no cert-manager),
#     argo-server at the chart's default address (https://argo-server.argo:2746, through the cluster's
#     DNS) with that CA;
#   - a Triton Deployment of two replicas labelled for injection: the webhook adds the sidecar, and
#     each pod becomes Ready through the kubelet's probe of the sidecar's /readyz;
#   - version 2 promoted as stable from inside one sidecar (`healer promote`).
# Prints the seconds each step took.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
[ -x "$HELM" ] || die "missing $HELM: run e2e/build.sh"
images="${HEALER_IMAGES_DIR:-$HOME/.cache/healer-e2e/images}"
for archive in healer triton; do
  ctr images import --all-platforms "$images/$archive.docker.tar" >>"$BASE/logs/images.log" 2>&1
done
started=$SECONDS

# --- the model repository (hostPath standing in for NFS) ----------------------------------------------
rm -rf "$BASE/models"
mkdir -p "$BASE/models"
cp -r "$root/examples/model_repository/linear_scorer" "$BASE/models/"
find "$BASE/models" -name __pycache__ -prune -exec rm -rf {} +
chown -R 10001:10001 "$BASE/models"
kubectl create namespace ml >&2
kubectl create namespace healer >&2
kubectl apply -f - >&2 <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: healer-models}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $BASE/models, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: triton-models, namespace: ml}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: healer-models
  resources: {requests: {storage: 1Gi}}
YAML

# --- the webhook's certificate, signed by the node's CA ---------------------------------------------------
(
  cd "$BASE/pki"
  leaf healer-webhook /CN=healer-webhook.healer.svc \
    "subjectAltName=DNS:healer-webhook.healer.svc,DNS:healer-webhook.healer.svc.cluster.local\nextendedKeyUsage=serverAuth\n"
)
kubectl -n healer create secret tls healer-webhook-tls --cert="$BASE/pki/healer-webhook.crt" \
  --key="$BASE/pki/healer-webhook.key" >&2

# --- the alert receiver's token (values-cluster.yaml: alertReceiver.existingSecret) -------------------------
(umask 077 && openssl rand -hex 32 | tr -d '\n' >"$BASE/alert-receiver-token")
kubectl -n healer create secret generic healer-alert-receiver --from-file=token="$BASE/alert-receiver-token" >&2

# --- helm install ------------------------------------------------------------------------------------------
helm install healer "$root/deploy/helm/healer" -n healer -f "$here/values-cluster.yaml" \
  --set-file "argo.caBundle=$BASE/pki/ca.crt" \
  --set "certificates.caBundle=$(base64 -w0 "$BASE/pki/ca.crt")" \
  --set "config.rollback.alert.webhook_url=http://$NODE_IP:9093" --wait --timeout 180s >&2
log "helm install: the webhook Ready after $((SECONDS - started)) s"

# --- Triton, two replicas, injected -------------------------------------------------------------------------
step=$SECONDS
kubectl apply -f "$here/triton-deployment.yaml" >&2
kubectl -n ml rollout status deployment/triton --timeout=240s >&2
injected="$(kubectl -n ml get pods -l app.kubernetes.io/name=triton -o jsonpath='{range .items[*]}{.spec.containers[*].name}{"\n"}{end}')"
[ "$(grep -c healer <<<"$injected")" = 2 ] || die "the sidecar was not injected into both Triton pods: $injected"
log "triton: 2 replicas injected and Ready through /readyz after $((SECONDS - step)) s"

# --- promote version 2 ----------------------------------------------------------------------------------------
pod="$(kubectl -n ml get pods -l app.kubernetes.io/name=triton -o jsonpath='{.items[0].metadata.name}')"
kubectl -n ml exec "$pod" -c healer -- healer promote --config /etc/healer/healer.yaml linear_scorer 2 --by e2e-cluster >&2
log "healer: installed in $((SECONDS - started)) s"
