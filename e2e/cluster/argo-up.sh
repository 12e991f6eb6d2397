#!/usr/bin/env bash
# Argo Workflows on the node (after node-up.sh): its CRDs, workflow-controller and argo-server (the
# binaries e2e/build.sh builds) as processes in the node's network namespace, as the e2e tier runs
# them, with the executor image built here (build-argoexec.sh) imported into containerd: every
# workflow pod's init, wait and emissary run the real argoexec on the real kubelet.
#
# argo-server listens on the node IP ($NODE_IP:2746, TLS signed by the node's CA, client auth mode):
# the sidecars reach it from their pods as they would reach https://argo-server.argo:2746 on a
# cluster with DNS. Its CA is $BASE/pki/ca.crt. node-down.sh stops both.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=SCRIPTDIR/../versions.env
source "$here/../versions.env"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
[ -e "$BASE/up" ] || die "the node is not up: run node-up.sh first"
ARGO_BIN="$cache/argo-$ARGO_VERSION/bin"
for binary in "$ARGO_BIN/argo" "$ARGO_BIN/workflow-controller"; do
  [ -x "$binary" ] || die "missing $binary: run e2e/build.sh"
done
exec_out="$(bash "$here/build-argoexec.sh")"
argoexec_image="$(sed -n 's/.*ARGOEXEC_IMAGE=\([^ ]*\).*/\1/p' <<<"$exec_out")"
argoexec_archive="$(sed -n 's/.*ARGOEXEC_ARCHIVE=\([^ ]*\).*/\1/p' <<<"$exec_out")"
ctr images import --all-platforms "$argoexec_archive" >>"$BASE/logs/images.log" 2>&1

kubectl create namespace argo >&2
for crd in "$root"/tests/vendor/argo/crds/argoproj.io_*.yaml; do kubectl create -f "$crd" >/dev/null; done
kubectl wait --for=condition=Established --timeout=60s crd --all >/dev/null
(
  cd "$BASE/pki"
  leaf argo-server /CN=argo-server \
    "subjectAltName=IP:$NODE_IP,DNS:argo-server.argo.svc,DNS:argo-server.argo\nextendedKeyUsage=serverAuth\n"
)
kubectl -n argo create secret tls argo-server-tls --cert="$BASE/pki/argo-server.crt" --key="$BASE/pki/argo-server.key" >&2
# healer's UI keys (deploy/argo/workflow-controller-configmap.yaml) merged in as an operator would;
# metrics and telemetry off (they would listen on fixed ports).
# (block values: the controller reads each key as YAML under its name, so "enabled: false" on one
# line would read as a mapping inside a mapping)
kubectl -n argo apply -f - >&2 <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: workflow-controller-configmap}
data:
  metricsConfig: |
    enabled: false
  telemetryConfig: |
    enabled: false
YAML
kubectl -n argo patch configmap workflow-controller-configmap --type merge \
  --patch-file "$root/deploy/argo/workflow-controller-configmap.yaml" >&2
# the admin's credentials in namespace argo: the controller reads its ConfigMap from its namespace
cat >"$BASE/argo.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: healer-node, cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$BASE/pki/ca.crt"}}]
users: [{name: admin, user: {client-certificate: "$BASE/pki/admin.crt", client-key: "$BASE/pki/admin.key"}}]
contexts: [{name: argo, context: {cluster: healer-node, user: admin, namespace: argo}}]
current-context: argo
YAML
# ARGO_DEFAULT_REQUEUE_TIME (e.g. 1s): the controller's DEFAULT_REQUEUE_TIME, Argo's default 10s when unset
requeue=()
if [ -n "${ARGO_DEFAULT_REQUEUE_TIME:-}" ]; then requeue=(DEFAULT_REQUEUE_TIME="$ARGO_DEFAULT_REQUEUE_TIME"); fi
start workflow-controller env LEADER_ELECTION_DISABLE=true KUBECONFIG="$BASE/argo.kubeconfig" "${requeue[@]}" \
  "$ARGO_BIN/workflow-controller" --kubeconfig="$BASE/argo.kubeconfig" --configmap=workflow-controller-configmap \
  --executor-image="$argoexec_image" --executor-image-pull-policy=Never --loglevel=info
start argo-server env KUBECONFIG="$BASE/argo.kubeconfig" "$ARGO_BIN/argo" server \
  --kubeconfig="$BASE/argo.kubeconfig" --auth-mode=client --secure=true \
  --tls-certificate-secret-name=argo-server-tls --port=2746 --loglevel=info
controller_started() { grep -q "Starting Workflow Controller" "$BASE/logs/workflow-controller.log"; }
wait_for workflow-controller 90 controller_started
# client auth mode: a request without a token is a 401, which is an answer
server_answers() {
  [ "$(in_netns curl -s -o /dev/null -w '%{http_code}' --cacert "$BASE/pki/ca.crt" -m 2 \
    "https://$NODE_IP:2746/api/v1/version")" = 401 ]
}
wait_for "argo-server on $NODE_IP:2746" 90 server_answers
log "argo: controller and server up, executor $argoexec_image"
