#!/usr/bin/env bash
# Build the node components (issue 16): kubelet, kube-scheduler, kube-controller-manager, kube-proxy
# and kubectl at $KUBERNETES_VERSION, from the Go module proxy, through the wrapper module
# e2e/cluster/node (e2e/kubernetes's go.mod plus `tool` lines, tidied); and the cluster's CoreDNS at
# $COREDNS_VERSION through e2e/cluster/coredns (coredns-<version>-<main.go's hash>/bin).
# Same GOFLAGS, CGO_ENABLED and ldflags as e2e/build.sh's kube-apiserver, so the shared Go build
# cache ($(go env GOCACHE)) reuses every package the apiserver build already compiled.
# Output: ${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}/kubernetes-node-<version>/bin. Does not
# touch e2e/build.sh's components.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
dest="$cache/kubernetes-node-$KUBERNETES_VERSION"
go_build_env
ldflags="$(kubernetes_ldflags)"

components=("$@")
if [ "${#components[@]}" = 0 ]; then
  components=(kubelet kube-scheduler kube-controller-manager kube-proxy kubectl)
fi
mkdir -p "$dest/bin"
for name in "${components[@]}"; do
  if [ -x "$dest/bin/$name" ]; then
    echo "build-node: $name cached in $dest/bin" >&2
    continue
  fi
  started=$SECONDS
  (cd "$here/node" && nice -n 19 go build -ldflags "$ldflags" -o "$dest/bin/$name.tmp" "k8s.io/kubernetes/cmd/$name")
  mv "$dest/bin/$name.tmp" "$dest/bin/$name"
  echo "build-node: $name built in $((SECONDS - started)) s" >&2
done
# CoreDNS, from the wrapper module e2e/cluster/coredns (its own main.go: seven plugins)
coredns_dest="$(dirname "$COREDNS_BIN")"
if [ -x "$COREDNS_BIN" ]; then
  echo "build-node: coredns cached in $coredns_dest" >&2
else
  started=$SECONDS
  mkdir -p "$coredns_dest"
  (cd "$here/coredns" && nice -n 19 go build -ldflags "-s -w" -o "$coredns_dest/coredns.tmp" .)
  mv "$coredns_dest/coredns.tmp" "$coredns_dest/coredns"
  echo "build-node: coredns built in $((SECONDS - started)) s" >&2
fi
echo "NODE_BIN=$dest/bin"
