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
#   signals.sh        observe-only switched on by a helm upgrade: a push planned, shown, nothing touched;
#                     Alertmanager calling the chart's alert receiver: 50 alerts, one rollback through Argo;
#                     the info alerts of the plan and of the healed incident in Alertmanager
#   store-s3.sh       SeaweedFS as a pod, the release upgraded to the S3 store, a push healed from it
#   argo-ui.sh        Argo's UI over those real rollbacks and the escalation, in headless Chromium
#                     (HEALER_UPDATE_SCREENSHOTS=1: its pictures into docs/screenshots/cluster-*.png)
#   release.sh        healer-release run by Argo: a wrong-weights version stopped at the canary, a good one
#                     released to both replicas and promoted (it changes the stable version)
#   modes.sh object-store      Triton reading the bucket itself (no model volume), a release of its own: a push healed
#   modes.sh kserve            an InferenceService's predictor pods as KServe makes them (storage initializer, emptyDir),
#                     per-pod mode: a push healed in each pod's own copy; each removed after, nothing left
# and always node-down.sh, failing if anything is left. Needs root and Debian's containerd, runc,
# containernetworking-plugins, iptables, busybox-static, mmdebstrap, buildah, podman, prometheus,
# prometheus-alertmanager and chromium (.ci/run installs them), and Go: checked first (steps.sh), one
# line naming what is missing. Not run beside make cluster-demo (demo.sh): one line, nothing touched.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
# shellcheck source=SCRIPTDIR/steps.sh
source e2e/cluster/steps.sh # the checks, the build, run_step, diagnose, node_down (shared with demo.sh)
require_root cluster
check_requirements cluster prometheus=prometheus prometheus-alertmanager=prometheus-alertmanager chromium=chromium || exit 3
# Never beside make cluster-demo (2 cores; and the nodes make the same mount points on the host): one line, no harm
hold_cluster_lock || { echo "cluster: make cluster or make cluster-demo is starting here: not run beside it" >&2; exit 1; }
if netns_exists "$DEMO_NETNS"; then
  echo "cluster: make cluster-demo's node is up here (make cluster-down stops it): not run beside it" >&2
  exit 1
fi
build_components

# Each step needs the one before it: the first that fails ends the tier (the rest count as failed).
steps=(node-up.sh smoke-healer.sh argo-up.sh healer-up.sh monitoring-up.sh "drill-argo.sh 3" "drill-argo.sh hang"
  "drill-argo.sh fallback" drill-template.sh stage-template.sh status.sh "drill-argo.sh one-in-five" "drill-argo.sh store-down" signals.sh store-s3.sh
  argo-ui.sh release.sh "modes.sh object-store" "modes.sh kserve")
passed=0
status=0
for step in "${steps[@]}"; do
  read -ra command <<<"$step"
  if ! run_step "${command[@]}"; then
    diagnose
    status=1
    break
  fi
  passed=$((passed + 1))
  # the smoke's pods are done with: their Triton would go on using a core
  if [ "$step" = smoke-healer.sh ]; then kubectl delete pod triton-0 healer-version hello --wait=false >/dev/null 2>&1 || true; fi
done
node_down || status=1
echo "cluster: tier finished in $((SECONDS - started)) s with exit status $status" >&2
echo "cluster: $passed passed, $((${#steps[@]} - passed)) failed"
exit "$status"
