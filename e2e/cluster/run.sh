#!/usr/bin/env bash
# `make cluster`: the one-node Kubernetes tier (issue 16, first step). Builds or reuses the binaries
# (e2e/build.sh: etcd, kube-apiserver; e2e/cluster/build-node.sh: kubelet, scheduler,
# controller-manager, kubectl) and the images (e2e/images: the healer image from the project's
# Dockerfile on a local Debian base, a Triton image from the nvidia-pytriton wheel), brings the node
# up (node-up.sh), runs smoke-healer.sh on it, and always brings it down, failing if anything is left
# (node-down.sh). Needs root and Debian's containerd, runc, containernetworking-plugins, iptables,
# busybox-static, mmdebstrap, buildah and podman (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
[ "$(id -u)" = 0 ] || { echo "cluster: needs root (network and mount namespaces, cgroups, containerd)" >&2; exit 1; }
bash e2e/build.sh >/dev/null
bash e2e/cluster/build-node.sh >/dev/null
bash e2e/images/build-healer.sh >/dev/null
bash e2e/images/build-triton.sh >/dev/null
echo "cluster: binaries and images ready after $((SECONDS - started)) s" >&2

status=0
down() {
  local code=0
  bash e2e/cluster/node-down.sh || code=$?
  [ "$code" = 0 ] || echo "cluster: node-down.sh left something behind (exit $code)" >&2
  return "$code"
}
if bash e2e/cluster/node-up.sh && bash e2e/cluster/smoke-healer.sh; then
  passed=1
else
  status=1
  passed=0
fi
down || status=1
echo "cluster: tier finished in $((SECONDS - started)) s with exit status $status" >&2
echo "cluster: $passed passed, $((1 - passed)) failed"
exit "$status"
