#!/usr/bin/env bash
# `healer release` on the real cluster: the healer-release WorkflowTemplate the chart installed, run by
# Argo's controller with argoexec pods on the kubelet, over both injected Triton replicas and the S3
# store. A wrong-weights version is stopped at the canary (the put-back pod runs, the version is
# quarantined, only one replica ever served it); a good version is released to both and promoted.
# The last step: it changes the stable version the other drills assume (release_cluster.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
kubectl -n ml get workflowtemplate healer-release >/dev/null || die "the chart did not install healer-release"
started=$SECONDS
in_netns env KUBECTL="$NODE_BIN/kubectl" HEALER_NODE_DIR="$BASE" HEALER_NODE_NETNS="$NETNS" \
  "$python" "$here/release_cluster.py" | tee "$BASE/release.jsonl"
log "release: done in $((SECONDS - started)) s"
