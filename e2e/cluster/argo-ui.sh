#!/usr/bin/env bash
# The Argo UI after the drills (argo_ui.py says what it checks): an operator's ServiceAccount that may
# read workflows in ml, its token, and headless Chromium inside the node's network namespace opening
# argo-server's UI. HEALER_UPDATE_SCREENSHOTS=1 writes the pictures into docs/screenshots/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
command -v chromium >/dev/null || die "missing chromium (apt-get install chromium)"
workflow_reader_account
token="$(kubectl -n ml create token operator --duration=1h)"
kubectl -n ml get workflows -o json >"$BASE/workflows.json"
in_netns env HOME="$BASE" HEALER_UPDATE_SCREENSHOTS="${HEALER_UPDATE_SCREENSHOTS:-}" \
  "$python" "$here/argo_ui.py" "$token" "https://$ARGO_SERVER_IP:2746" <"$BASE/workflows.json"
