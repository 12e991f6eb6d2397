#!/usr/bin/env bash
# Regenerate the wrapper modules (e2e/*/go.mod, go.sum) from versions.env. Run after changing a
# version, then commit the result: e2e/build.sh builds only from the committed, checksummed files.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
go_line="go 1.26.5"  # Argo v4.1.4 needs 1.26.5; Kubernetes v1.37 and etcd v3.7 need 1.26.0

# etcd: the server module's etcdmain package, called from a two-line main (etcd/main.go).
cat >"$here/etcd/go.mod" <<MOD
module healer.e2e/etcd

$go_line

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD

# Kubernetes: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# ./staging/src/...; a wrapper replaces each with the published module of the same release
# (kubernetes/kubernetes#79384). The list is that release's own replace block.
k8s_mod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
staging_version="v0${KUBERNETES_VERSION#v1}"
{
  printf 'module healer.e2e/kubernetes\n\n%s\n\nrequire k8s.io/kubernetes %s\n\n' "$go_line" "$KUBERNETES_VERSION"
  printf 'tool k8s.io/kubernetes/cmd/kube-apiserver\n\nreplace (\n'
  sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/[a-z0-9-]*$#\1#p' "$k8s_mod" |
    while read -r module; do printf '\t%s => %s %s\n' "$module" "$module" "$staging_version"; done
  printf ')\n'
} >"$here/kubernetes/go.mod"

# Argo: the CLI (which is also `argo server`) and the workflow controller.
cat >"$here/argo/go.mod" <<MOD
module healer.e2e/argo

$go_line

require github.com/argoproj/argo-workflows/v4 $ARGO_VERSION

tool (
	github.com/argoproj/argo-workflows/v4/cmd/argo
	github.com/argoproj/argo-workflows/v4/cmd/workflow-controller
)
MOD

# Helm: its CLI (tests/e2e/test_helm.py lints, renders and installs the chart with it).
cat >"$here/helm/go.mod" <<MOD
module healer.e2e/helm

$go_line

require helm.sh/helm/v3 $HELM_VERSION

tool helm.sh/helm/v3/cmd/helm
MOD

# The one-node cluster's wrappers (e2e/cluster): the node's commands from the Kubernetes module, and
# Argo's executor (its imports reach further than argo's and workflow-controller's).
sed -e 's#^module healer.e2e/kubernetes$#module healer.e2e/cluster-node#' \
  -e 's#^tool k8s.io/kubernetes/cmd/kube-apiserver$#tool (\n\tk8s.io/kubernetes/cmd/kubelet\n\tk8s.io/kubernetes/cmd/kube-scheduler\n\tk8s.io/kubernetes/cmd/kube-controller-manager\n\tk8s.io/kubernetes/cmd/kube-proxy\n\tk8s.io/kubernetes/cmd/kubectl\n)#' \
  "$here/kubernetes/go.mod" >"$here/cluster/node/go.mod"
cat >"$here/cluster/argoexec/go.mod" <<MOD
module healer.e2e/cluster-argoexec

$go_line

require github.com/argoproj/argo-workflows/v4 $ARGO_VERSION

tool github.com/argoproj/argo-workflows/v4/cmd/argoexec
MOD

# CoreDNS for the cluster's DNS: main.go (committed) links only the plugins its Corefile uses.
cat >"$here/cluster/coredns/go.mod" <<MOD
module healer.e2e/cluster-coredns

$go_line

require github.com/coredns/coredns $COREDNS_VERSION
MOD

# Each wrapper's go.sum starts from the upstream module's own go.sum (its maintainers' checksums;
# the checksum database does not know every pseudo-version they pin), and tidy keeps what is used.
seed() { # component module@version
  local dir
  dir="$(go_module_dir "$2")"
  cp "$dir/go.sum" "$here/$1/go.sum"
  chmod u+w "$here/$1/go.sum"
}
seed etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
seed kubernetes "k8s.io/kubernetes@$KUBERNETES_VERSION"
seed argo "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION"
seed helm "helm.sh/helm/v3@$HELM_VERSION"
seed cluster/node "k8s.io/kubernetes@$KUBERNETES_VERSION"
seed cluster/argoexec "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION"
seed cluster/coredns "github.com/coredns/coredns@$COREDNS_VERSION"
for component in etcd kubernetes argo helm cluster/node cluster/argoexec cluster/coredns; do
  (cd "$here/$component" && go mod tidy)
done
echo "wrappers updated; commit e2e/*/go.mod e2e/*/go.sum e2e/cluster/*/go.mod e2e/cluster/*/go.sum"
