"""The Argo UI on the one-node cluster, after the drills (e2e/cluster/argo-ui.sh runs this inside the
node's network namespace): Argo's own web UI, served by the real argo-server, shows the rollbacks
that really ran (their heal pods run by argoexec on the kubelet) and the store-down escalation, as an
operator with a token sees them. Opened in headless Chromium (the e2e tier's DevTools driver); the
list and the two pages are checked for what a person needs and photographed: into docs/screenshots/
with HEALER_UPDATE_SCREENSHOTS=1, else into a temporary folder. Usage: argo_ui.py TOKEN ARGO_URL
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.e2e.test_argo_ui import Browser  # noqa: E402 - the repository root on the path first

TITLE = "workflows.argoproj.io/title"
COMPONENT = "app.kubernetes.io/component"
SHOTS = (
    ROOT / "docs" / "screenshots"
    if os.environ.get("HEALER_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="healer-cluster-ui-"))
)


def main() -> int:
    token, argo_url = sys.argv[1], sys.argv[2].rstrip("/")
    everything: list[dict[str, Any]] = json.loads(sys.stdin.read())["items"]
    # the rollbacks (the template's workflowMetadata labels them), not the drills' own workflows
    workflows = [w for w in everything if (w["metadata"].get("labels") or {}).get(COMPONENT) == "rollback"]
    succeeded = [w for w in workflows if (w.get("status") or {}).get("phase") == "Succeeded"]
    failed = [w for w in workflows if (w.get("status") or {}).get("phase") == "Failed"]
    if not succeeded or not failed:
        raise SystemExit(f"argo-ui: want a succeeded and a failed rollback, have {len(succeeded)} and {len(failed)}")
    profile = Path(tempfile.mkdtemp(prefix="healer-cluster-chromium-"))
    browser = Browser(profile / "profile", reachable=argo_url.split("//", 1)[1].split(":", 1)[0])
    try:
        browser.set_cookie(argo_url + "/", "authorization", f"Bearer {token}")
        browser.open(f"{argo_url}/workflows/ml")
        # the list shows a workflow's title (healer sets workflows.argoproj.io/title) in place of its name
        titles = [(w["metadata"].get("annotations") or {}).get(TITLE) or w["metadata"]["name"] for w in workflows]
        text = browser.wait_for_text("MODEL", "REASON", *titles)
        browser.screenshot(SHOTS / "cluster-rollback-list.png")
        if "linear_scorer" not in text or "wrong-answer" not in text:
            raise SystemExit(f"argo-ui: the list lacks healer's model and reason columns:\n{text[:2000]}")

        name = succeeded[0]["metadata"]["name"]
        browser.open(f"{argo_url}/workflows/ml/{name}?tab=workflow")
        browser.wait_for_text(name, "heal(0)")
        browser.screenshot(SHOTS / "cluster-rollback.png")

        name = failed[-1]["metadata"]["name"]
        browser.open(f"{argo_url}/workflows/ml/{name}?tab=workflow")
        browser.wait_for_text(name, "escalate")
        browser.screenshot(SHOTS / "cluster-escalation.png")
        uncaught = [line for line in browser.console if "Uncaught" in line]
        if uncaught:
            raise SystemExit(f"argo-ui: the UI threw: {uncaught}")
    finally:
        browser.close()
    print(f"argo-ui: the list, a rollback and an escalation shown and photographed in {SHOTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
