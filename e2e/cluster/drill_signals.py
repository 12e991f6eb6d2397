"""Issue 31's signals on the one-node cluster (e2e/cluster/signals.sh): observe-only, outside alerts, info alerts.

Every process named here is the real one: the kubelet-run Triton pods and their injected sidecars, the
chart's webhook serving Alertmanager's webhook, argo-server, the workflow controller and its heal pod,
Debian's Alertmanager on the node IP. Two scenarios, each printed as it goes and as JSON on its last line;
exit 1 on any miss.

``observe``: ``linear_scorer`` switched to observe-only by a ``helm upgrade`` (models[].mode, the chart's
healer-config; the running sidecars read it, Triton is not restarted), then a wrong-weights push loaded on
both replicas. Checked: both sidecars record a plan, `healer status` with the node's kubeconfig shows it
(PLANNED, what it would have done), its info alert (HealerObservedDecision) reaches Alertmanager, and
nothing is touched: no pod drained, no Workflow, both Tritons still serve the push, the push still in the
repository, the ledger unchanged, the Triton pods neither replaced nor restarted. Then the push is pulled
as a person would and the model switched back to act (read the same way).

``outside-alert``: a version with the stable weights (it answers right, so healer's own checks are
happy) is pushed; then an outside system says it is bad: 50 firing alerts for it (one per pod and
source, as a storm of Prometheus rules would) are posted to Alertmanager within a second. Alertmanager,
configured by signals.sh from the chart's example (deploy/helm/examples/alertmanager-receiver.yaml),
notifies the webhook's receiver with the token; the receiver submits one healer-rollback Workflow. Checked:
exactly one Workflow, it succeeds, both replicas serve the stable version, the pushed version is not
quarantined (an alert alone is no evidence: the rollback's reason is ``manual``), and the healed
incident's info alert (HealerIncidentHealed) reaches Alertmanager. The alerts are then resolved and the
version pulled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drill_argo as d  # the tier's own helpers: the pods, the pushes, Alertmanager's alerts

HELM = os.environ["HELM"]
HERE = Path(__file__).resolve().parent
STORM = 50  # alerts posted for one version within a second
BATCHES = 5  # posts of STORM / BATCHES alerts each, all sent at once
OUTSIDE_ALERT = "ModelQualityDrop"  # a team's own alert (not healer's): routed to the receiver


def helm_models_mode(mode: str) -> None:
    """``helm upgrade --reuse-values`` with every model of values-cluster.yaml in ``mode``: the chart
    rewrites healer-config, the kubelet updates the mounted file, the sidecars read it on a cycle."""
    models = yaml.safe_load((HERE / "values-cluster.yaml").read_text())["config"]["models"]
    values = BASE_DIR / f"values-mode-{mode}.yaml"
    values.write_text(yaml.safe_dump({"config": {"models": [{**m, "mode": mode} for m in models]}}))
    d.in_netns(
        HELM, f"--kubeconfig={BASE_DIR / 'admin.kubeconfig'}", "upgrade", "healer", str(d.ROOT / "deploy/helm/healer"),
        "-n", "healer", "--reuse-values", "-f", str(values), "--wait", "--timeout", "180s", timeout=240,
    )  # fmt: skip


BASE_DIR = d.BASE


def wait_for_mode(ips: dict[str, str], mode: str, deadline_s: float = 180.0) -> float:
    """Seconds until every sidecar's /status shows the model in ``mode``."""
    started = time.time()
    while time.time() < started + deadline_s:
        if all(d.sidecar_status(ip)["models"][d.MODEL].get("mode") == mode for ip in ips.values()):
            return time.time() - started
        time.sleep(1)
    raise d.DrillFailed(f"the sidecars did not read mode {mode} within {deadline_s:g} s of the helm upgrade")


def triton_containers() -> dict[str, tuple[str, int]]:
    """Each Triton pod's uid and its triton container's restart count (a replaced or restarted one differs)."""
    found = {}
    for pod in d.triton_pods():
        restarts = {c["name"]: c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", [])}
        found[pod["metadata"]["name"]] = (pod["metadata"]["uid"], restarts.get("triton", -1))
    return found


def ledger_digest() -> str:
    ledger = BASE_DIR / "models" / ".healer" / d.MODEL
    digest = hashlib.sha256()
    for path in sorted(p for p in ledger.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(ledger)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def healer_status() -> dict[str, Any]:
    """`healer status -n ml -o json` with the node's kubeconfig, as on-call runs it (exit 1: not all healthy)."""
    done = subprocess.run(
        ["nsenter", f"--net=/run/netns/{d.NETNS}", "--", str(d.ROOT / ".venv/bin/healer"), "status",
         "--kubeconfig", str(BASE_DIR / "admin.kubeconfig"), "-n", "ml", "-o", "json"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise d.DrillFailed(f"healer status: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    view: dict[str, Any] = json.loads(done.stdout)
    return view


def watch_observed(ips: dict[str, str], broken: str, since: float) -> dict[str, Any]:
    """What happens after the push: when each sidecar planned, the most pods drained, `healer status`'s
    rows once both planned, when the observed decision's info alert was in Alertmanager. At least 20 s
    watched (20 periods: a drain or a submission would have happened), at most 90 s."""
    planned: dict[str, float] = {}
    drained = 0
    rows: list[dict[str, Any]] = []
    alert_s: float | None = None
    while time.time() < since + 90:
        now = time.time()
        drained = max(drained, sum(1 for p in d.triton_pods() if not d.ready(p)))
        for name, ip in ips.items():
            if d.sidecar_status(ip)["models"][d.MODEL].get("plan"):
                planned.setdefault(name, now)
        if alert_s is None and ("HealerObservedDecision", broken) in d.alerts_in_alertmanager():
            alert_s = now - since
        if len(planned) == 2 and not rows:
            rows = [r for r in healer_status()["rows"] if r["model"] == d.MODEL]
        if rows and alert_s is not None and now > since + 20:
            break
        time.sleep(0.5)
    return {"planned": planned, "drained": drained, "rows": rows, "alert_s": alert_s}


def untouched_misses(seen: dict[str, Any], broken: str, facts: dict[str, Any]) -> list[str]:
    """What the observe scenario wanted and did not see."""
    misses = []
    rows = seen["rows"]
    if len(seen["planned"]) != 2:
        misses.append(f"a plan on both sidecars (only {sorted(seen['planned'])})")
    if len(rows) != 2 or any(r["state"] != "PLANNED" or r["mode"] != "observe" or not r["plan"] for r in rows):
        misses.append(f"healer status showing the plan on both pods ({rows})")
    if seen["alert_s"] is None:
        misses.append(f"HealerObservedDecision for v{broken} in Alertmanager")
    if seen["drained"]:
        misses.append(f"no pod drained ({seen['drained']} were)")
    if facts["created"]:
        misses.append(f"no workflow ({facts['created']})")
    if set(facts["serving"].values()) != {"broken"}:
        misses.append(f"both still serving the push, untouched ({facts['serving']})")
    if not (BASE_DIR / "models" / d.MODEL / broken).is_dir():
        misses.append(f"v{broken} still in the repository")
    if not facts["ledger_unchanged"]:
        misses.append("the ledger unchanged")
    if facts["pods_after"] != facts["pods_before"]:
        misses.append(
            f"the Triton pods neither replaced nor restarted ({facts['pods_before']} -> {facts['pods_after']})"
        )
    return misses


def observe(broken: str) -> dict[str, Any]:
    before = {w["metadata"]["name"] for w in d.workflows()}
    ips = d.replicas_on_stable(broken)
    pods_before = triton_containers()
    ledger_before = ledger_digest()
    helm_models_mode("observe")
    switch_s = wait_for_mode(ips, "observe")
    print(f"drill: both sidecars read mode observe {switch_s:.1f} s after the helm upgrade", flush=True)
    first_loaded, _ = d.push_broken(ips, broken)
    seen = watch_observed(ips, broken, first_loaded)
    facts = {
        "created": sorted({w["metadata"]["name"] for w in d.workflows()} - before),
        "serving": {name: d.serving(ip, broken) for name, ip in ips.items()},
        "ledger_unchanged": ledger_digest() == ledger_before,
        "pods_before": pods_before,
        "pods_after": triton_containers(),
    }
    for row in seen["rows"]:
        print(f"drill: healer status: {row['pod']} {row['model']} {row['state']} mode={row['mode']}: {row['plan']}")
    offsets = {name: round(at - first_loaded, 2) for name, at in seen["planned"].items()}
    print(f"drill: planned {offsets} s after the push; info alert in Alertmanager after {seen['alert_s'] or 0:.2f} s")
    misses = untouched_misses(seen, broken, facts)
    # put it back whatever was seen: the version pulled as a person would, the model acting again
    d.back_to_stable(ips, broken)
    helm_models_mode("act")
    back_s = wait_for_mode(ips, "act")
    print(f"drill: v{broken} pulled; both sidecars read mode act again {back_s:.1f} s after the helm upgrade")
    if misses:
        raise d.DrillFailed("observe: wanted " + "; ".join(misses))
    return {
        "version": broken,
        "mode_switch_read_s": round(switch_s, 1),
        "planned_s": offsets,
        "observed_alert_s": round(seen["alert_s"], 2),
        "plans": [r["plan"] for r in seen["rows"]],
        "drained": seen["drained"],
        "workflows_created": facts["created"],
        "triton_pods_unchanged": True,
        "back_to_act_s": round(back_s, 1),
    }


def push_good(ips: dict[str, str], version: str) -> float:
    """A version with the stable weights (it answers right), loaded on both replicas; when both serve it."""
    target = BASE_DIR / "models" / d.MODEL / version
    shutil.copytree(BASE_DIR / "models" / d.MODEL / d.STABLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [target, *target.rglob("*")]:
        os.chown(path, 10001, 10001)
    for name, ip in ips.items():
        status = d.triton(ip, f"/v2/repository/models/{d.MODEL}/load", method="POST", timeout=60)
        if status != 200:
            raise d.DrillFailed(f"loading v{version} on {name}: HTTP {status}")
    return time.time()


def post_alerts(version: str, pods: list[str], *, resolved: bool = False) -> float:
    """STORM alerts for one model version to Alertmanager's API, in BATCHES posts sent at once (as several
    Prometheus servers and rules would); returns the seconds the posts took. ``resolved``: the same
    alerts, ended now."""
    now = datetime.now(UTC)
    alerts = [
        {
            "labels": {
                "alertname": OUTSIDE_ALERT,
                "severity": "critical",
                "healer_rollback": "true",  # the opt-in the example route matches (alertmanager-receiver.yaml)
                "model": d.MODEL,
                "version": version,
                "namespace": "ml",
                "pod": pods[number % len(pods)],
                "source": f"quality-check-{number}",  # 50 distinct alerts, one group
            },
            "annotations": {"summary": f"{d.MODEL} v{version}: the business metric dropped (drill)"},
            "startsAt": (now - timedelta(seconds=5)).isoformat(),
            **({"endsAt": now.isoformat()} if resolved else {}),
        }
        for number in range(STORM)
    ]
    url = f"http://{d.NODE_IP}:9093/api/v2/alerts"
    command = ["nsenter", f"--net=/run/netns/{d.NETNS}", "--", "curl", "-fsS", "-m", "5", "-X", "POST"]
    command += ["-H", "Content-Type: application/json", url, "--data"]
    started = time.time()
    posts = [
        subprocess.Popen(
            [*command, json.dumps(alerts[batch::BATCHES])], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for batch in range(BATCHES)
    ]
    errors = [post.communicate(timeout=10)[1] for post in posts]
    failed = [error for post, error in zip(posts, errors, strict=True) if post.returncode != 0]
    if failed:
        raise d.DrillFailed(f"posting alerts to Alertmanager: {failed[0].strip()[-300:]}")
    return time.time() - started


def watch_healed(ips: dict[str, str], version: str, before: set[str], since: float) -> tuple[dict[str, float], str]:
    """When the receiver's workflow was created (the API server's time: whole seconds) and succeeded, both
    replicas served the stable version, and the healed incident's info alert was in Alertmanager."""
    seen: dict[str, float] = {}
    workflow = ""
    while time.time() < since + d.DEADLINE_S and "healed_alert" not in seen:
        now = time.time()
        new = sorted({w["metadata"]["name"] for w in d.workflows()} - before)
        if new:
            workflow = new[0]
            found = d.kubectl_json("-n", "ml", "get", "workflow", workflow)
            seen.setdefault("workflow_created", d.stamp(found["metadata"]["creationTimestamp"]) or now)
            phase = (found.get("status") or {}).get("phase")
            if phase in ("Failed", "Error"):
                raise d.DrillFailed(f"workflow {workflow} {phase}")
            if phase == "Succeeded":
                seen.setdefault("workflow_succeeded", now)
        if all(d.serving(ip, version) == "stable" for ip in ips.values()):
            seen.setdefault("both_serve_stable", now)
        if "workflow_succeeded" in seen and ("HealerIncidentHealed", version) in d.alerts_in_alertmanager():
            seen["healed_alert"] = now
        time.sleep(0.5)
    return seen, workflow


def outside_alert(version: str) -> dict[str, Any]:
    before = {w["metadata"]["name"] for w in d.workflows()}
    ips = d.replicas_on_stable(version)
    loaded = push_good(ips, version)
    time.sleep(5)  # five periods: healer's own checks see a version that answers right
    quiet = sorted({w["metadata"]["name"] for w in d.workflows()} - before)
    if quiet or not all(d.ready(p) for p in d.triton_pods()):
        raise d.DrillFailed(f"v{version} answers right, yet healer acted on its own: workflows {quiet}")
    sent = time.time()
    posted_s = post_alerts(version, sorted(ips))
    print(
        f"drill: {STORM} alerts for {d.MODEL} v{version} posted to Alertmanager in {BATCHES} posts, {posted_s:.2f} s",
        flush=True,
    )
    seen, _ = watch_healed(ips, version, before, sent)
    time.sleep(15)  # Alertmanager's group_interval (5 s) twice more: a notification sent again must join
    created = sorted({w["metadata"]["name"] for w in d.workflows()} - before)
    post_alerts(version, sorted(ips), resolved=True)
    offsets = {k: round(v - sent, 2) for k, v in sorted(seen.items(), key=lambda item: item[1])}
    for name, offset in offsets.items():
        print(f"drill: {offset:7.2f} s  {name}", flush=True)
    misses = [name for name in ("workflow_succeeded", "both_serve_stable", "healed_alert") if name not in seen]
    if len(created) != 1:
        misses.append(f"exactly 1 workflow for {STORM} alerts ({created})")
    if not (BASE_DIR / "models" / d.MODEL / version).is_dir():
        misses.append(f"v{version} not quarantined on an alert alone")
    if misses:
        raise d.DrillFailed("outside-alert: wanted " + "; ".join(misses))
    d.back_to_stable(ips, version)
    return {
        "version": version,
        "alerts": STORM,
        "posted_in_s": round(posted_s, 2),
        "workflows_created": created,
        "timeline_s": offsets,
        "pushed_to_alert_s": round(sent - loaded, 1),
    }


def main() -> int:
    scenarios = {"observe": observe, "outside-alert": outside_alert}
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in scenarios:
        print(f"usage: drill_signals.py {'|'.join(scenarios)}", file=sys.stderr)
        return 2
    run = scenarios[name](d.next_version())
    print(json.dumps({"scenario": name, "run": run}, sort_keys=True))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (d.DrillFailed, subprocess.TimeoutExpired, urllib.error.URLError) as exc:
        print(f"drill: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
