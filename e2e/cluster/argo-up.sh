#!/usr/bin/env bash
# Argo Workflows on the node (after node-up.sh), installed from Argo's own manifests (manifests/
# cluster-install in the Argo module at $ARGO_VERSION: CRDs, workflow-controller, argo-server, their
# RBAC) with the images built here (build-argo-images.sh: argocli, workflow-controller, argoexec) in
# place of quay.io's, through a kustomize overlay that changes only what a user on this cluster would:
#   - the images (localhost/..., imagePullPolicy Never: there is no registry);
#   - the controller's executor image (argoexec built here), and its DEFAULT_REQUEUE_TIME when
#     ARGO_DEFAULT_REQUEUE_TIME is set (Argo's default, 10s, otherwise);
#   - argo-server's certificate from a Secret signed by the node's CA (client auth mode, Argo's default),
#     also for localhost (make cluster-demo relays its port to this machine's 127.0.0.1);
#   - argo-server's Service on a fixed ClusterIP ($ARGO_SERVER_IP), for the node's own checks (the
#     node's namespace does not use the cluster DNS); pods reach it as argo-server.argo, the chart's
#     default, which the certificate names too.
# Then healer's UI columns and links merged into Argo's ConfigMap, as the README's step 1 does.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
for archive in $(bash "$here/build-argo-images.sh"); do
  ctr images import --all-platforms "$archive" >>"$BASE/logs/images.log" 2>&1
done
module_dir="$(cd "$here/argoexec" && GOFLAGS=-mod=readonly go_module_dir "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION")"
[ -d "$module_dir/manifests/cluster-install" ] || die "no manifests/cluster-install in the Argo module ($module_dir)"
rm -rf "$BASE/argo"
mkdir -p "$BASE/argo/overlay"
cp -R "$module_dir/manifests" "$BASE/argo/manifests"
chmod -R u+w "$BASE/argo/manifests"
requeue_env=""
if [ -n "${ARGO_DEFAULT_REQUEUE_TIME:-}" ]; then
  requeue_env="
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: DEFAULT_REQUEUE_TIME, value: \"$ARGO_DEFAULT_REQUEUE_TIME\"}"
fi
cat >"$BASE/argo/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: argo
resources: [../manifests/cluster-install]
images:
  - {name: quay.io/argoproj/workflow-controller, newName: localhost/workflow-controller, newTag: $ARGO_VERSION}
  - {name: quay.io/argoproj/argocli, newName: localhost/argocli, newTag: $ARGO_VERSION}
patches:
  - target: {kind: Deployment, name: workflow-controller}
    patch: |
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: replace
        path: /spec/template/spec/containers/0/args
        value: [--executor-image=localhost/argoexec:$ARGO_VERSION, --executor-image-pull-policy=Never]$requeue_env
  - target: {kind: Deployment, name: argo-server}
    patch: |
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: replace
        path: /spec/template/spec/containers/0/args
        value: [server, --tls-certificate-secret-name=argo-server-tls]
  - target: {kind: Service, name: argo-server}
    patch: |
      - op: add
        path: /spec/clusterIP
        value: $ARGO_SERVER_IP
YAML
kubectl create namespace argo >&2
(
  cd "$BASE/pki"
  leaf argo-server /CN=argo-server \
    "subjectAltName=IP:$ARGO_SERVER_IP,DNS:argo-server.argo.svc,DNS:argo-server.argo,IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
)
kubectl -n argo create secret tls argo-server-tls --cert="$BASE/pki/argo-server.crt" --key="$BASE/pki/argo-server.key" >&2
# Argo 4's full CRDs are too long for a client-side apply's annotation (README step 1)
kubectl apply --server-side -k "$BASE/argo/overlay" >&2
kubectl -n argo patch configmap workflow-controller-configmap --type merge \
  --patch-file "$root/deploy/argo/workflow-controller-configmap.yaml" >&2
for deployment in workflow-controller argo-server; do
  kubectl -n argo rollout status "deployment/$deployment" --timeout=180s >&2
done
wait_for "argo-server at https://$ARGO_SERVER_IP:2746 (its Service)" 90 argo_server_answers
log "argo: installed from Argo's manifests, controller and server Ready, executor localhost/argoexec:$ARGO_VERSION"
