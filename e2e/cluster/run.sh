#!/usr/bin/env bash
# `make cluster`: the one-node Kubernetes tier (issue 16). Builds or reuses the binaries
# (e2e/build.sh: etcd, kube-apiserver, Argo, Helm; build-node.sh: kubelet, scheduler,
# controller-manager, kube-proxy, kubectl; build-argoexec.sh: Argo's executor and its image) and the
# images (e2e/images: the healer image from the project's Dockerfile on a local Debian base, a Triton
# image from the nvidia-pytriton wheel), then in order, stopping at the first failure:
#   node-up.sh        the node (netns, etcd, API server, controller-manager, scheduler, containerd,
#                     kubelet, kube-proxy) with the egress rule checked
#   smoke-healer.sh   the healer image and a sidecar's readiness through the kubelet
#   argo-up.sh        Argo's CRDs, controller and server, the executor image imported
#   healer-up.sh      helm install of the chart, two injected Triton replicas, a version promoted
#   monitoring-up.sh  Prometheus (the chart's PodMonitor and rules) and Alertmanager, Debian's
#   drill-argo.sh     a wrong-weights push healed through Argo's heal pod; a Triton pod restarted
#   drill-argo.sh hang         a version whose requests hang (timeouts), healed the same way
#   drill-argo.sh fallback     argo-server stopped: the sidecars heal in their pods; none submitted after
#   drill-template.sh          the healer-drill WorkflowTemplate (wrong-weights) run by Argo: its pod drills
#   stage-template.sh          the healer-stage WorkflowTemplate run by Argo: the stable versions re-read and stamped
#   status.sh                  `healer status` with a kubeconfig: both sidecars' /status through the pod proxy
#   drill-argo.sh one-in-five  every fifth answer wrong: seen, never drained or rolled back
#   drill-argo.sh store-down   a push with the stable ledger unreadable: escalated, the alert in
#                     Alertmanager pushed by healer and from Prometheus's evaluation of the chart's rule
#   store-s3.sh       SeaweedFS as a pod, the release upgraded to the S3 store, a push healed from it
#   argo-ui.sh        Argo's UI over those real rollbacks and the escalation, in headless Chromium
#                     (HEALER_UPDATE_SCREENSHOTS=1: its pictures into docs/screenshots/cluster-*.png)
#   release.sh        healer-release run by Argo: a wrong-weights version stopped at the canary, a good one
#                     released to both replicas and promoted (last: it changes the stable version)
# and always node-down.sh, failing if anything is left. Needs root and Debian's containerd, runc,
# containernetworking-plugins, iptables, busybox-static, mmdebstrap, buildah, podman, prometheus,
# prometheus-alertmanager and chromium (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
[ "$(id -u)" = 0 ] || { echo "cluster: needs root (network and mount namespaces, cgroups, containerd)" >&2; exit 1; }
bash e2e/build.sh >/dev/null
bash e2e/cluster/build-node.sh >/dev/null
bash e2e/images/build-healer.sh >/dev/null
bash e2e/images/build-triton.sh >/dev/null
bash e2e/cluster/build-argo-images.sh >/dev/null
echo "cluster: binaries and images ready after $((SECONDS - started)) s" >&2

# What a failed step leaves to read before node-down.sh removes it: the pods and events, the node's
# tmpfs and disk use, the kubelet's and containerd's last lines.
diagnose() {
  bash -c 'source e2e/cluster/common.sh
    kubectl get pods -A -o wide
    kubectl get events -A --sort-by=.lastTimestamp | tail -n 40
    nsenter --mount="/proc/$(cat "$BASE/pids/mount-holder")/ns/mnt" -- df -h $NODE_TMPFS_DIRS
    df -h "$BASE"
    for name in kubelet containerd; do echo "--- $name.log"; tail -n 60 "$BASE/logs/$name.log"; done' >&2 2>&1 || true
}

down() {
  local code=0
  bash e2e/cluster/node-down.sh || code=$?
  [ "$code" = 0 ] || echo "cluster: node-down.sh left something behind (exit $code)" >&2
  return "$code"
}
# Each step needs the one before it: the first that fails ends the tier (the rest count as failed).
steps=(node-up.sh smoke-healer.sh argo-up.sh healer-up.sh monitoring-up.sh "drill-argo.sh 3" "drill-argo.sh hang"
  "drill-argo.sh fallback" drill-template.sh stage-template.sh status.sh "drill-argo.sh one-in-five" "drill-argo.sh store-down" store-s3.sh
  argo-ui.sh release.sh)
passed=0
status=0
for step in "${steps[@]}"; do
  step_started=$SECONDS
  read -ra command <<<"$step"
  if bash "e2e/cluster/${command[0]}" "${command[@]:1}"; then
    passed=$((passed + 1))
    echo "cluster: $step passed in $((SECONDS - step_started)) s" >&2
  else
    echo "cluster: $step FAILED after $((SECONDS - step_started)) s" >&2
    diagnose
    status=1
    break
  fi
  # the smoke's pods are done with: their Triton would go on using a core
  if [ "$step" = smoke-healer.sh ]; then
    bash -c 'source e2e/cluster/common.sh &&
      kubectl delete pod triton-0 healer-version hello --wait=false' >/dev/null 2>&1 || true
  fi
done
down || status=1
echo "cluster: tier finished in $((SECONDS - started)) s with exit status $status" >&2
echo "cluster: $passed passed, $((${#steps[@]} - passed)) failed"
exit "$status"
