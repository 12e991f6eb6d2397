#!/usr/bin/env bash
# argo-server on the node: stop (scaled to 0, as an outage would be: the sidecars then roll back in
# their pods) or start (scaled to 1, waits until its Service answers). Usage: argo-server.sh stop|start.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
case "${1:-}" in
  stop)
    kubectl -n argo scale deployment/argo-server --replicas=0 >&2
    gone() { [ -z "$(kubectl -n argo get pods -l app=argo-server -o name)" ]; }
    wait_for "argo-server's pod gone" 90 gone
    ;;
  start)
    kubectl -n argo scale deployment/argo-server --replicas=1 >&2
    kubectl -n argo rollout status deployment/argo-server --timeout=120s >&2
    wait_for "argo-server at https://$ARGO_SERVER_IP:2746" 90 argo_server_answers
    ;;
  *) die "usage: argo-server.sh stop|start" ;;
esac
