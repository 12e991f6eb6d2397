"""A wrong-weights push healed through the real Argo on the one-node cluster (e2e/cluster/drill-argo.sh).

What a user would see after `helm install`: a new version with wrong weights is copied into the model
repository both Triton replicas read and loaded into each of them, as a release pipeline would. Then
nothing but healer acts: each injected sidecar's golden request fails, the sidecars drain as many pods
as ``min_ready`` allows and submit a rollback to argo-server; the workflow controller creates the heal
pod, the kubelet runs it (argoexec's init, wait and emissary around healer's step), it restores the
stable version on both replicas and quarantines the broken one, and the sidecars confirm.

Observed here, every 0.2 s, through the API server and the pods' own ports (inside the node's network
namespace): the pods' Ready condition, the Workflow and its pod, and which version each Triton serves.
Then one Triton pod is deleted: its replacement must load the stable version (the quarantine holds).
Prints one line per phase (seconds from the push) and the result as JSON on the last line; exit 1 on
any miss. A simulation is not involved: every process named here is the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

BASE = Path(os.environ["HEALER_NODE_DIR"])
NETNS = os.environ["HEALER_NODE_NETNS"]
NODE_IP = os.environ.get("HEALER_NODE_IP", "10.250.0.1")
KUBECTL = os.environ["KUBECTL"]
ROOT = Path(__file__).resolve().parents[2]
MODEL = "linear_scorer"
STABLE, BROKEN = "2", "3"
STABLE = "2"
BUDGET_S = 90.0
DEADLINE_S = 240.0  # for one run: past it something is wrong, not slow


class DrillFailed(Exception):
    pass


def in_netns(*argv: str, timeout: float = 30) -> str:
    done = subprocess.run(
        ["nsenter", f"--net=/run/netns/{NETNS}", "--", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise DrillFailed(f"{' '.join(argv[:4])}...: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def kubectl_json(*args: str) -> Any:
    return json.loads(in_netns(KUBECTL, f"--kubeconfig={BASE / 'admin.kubeconfig'}", *args, "-o", "json"))


def kubectl(*args: str) -> str:
    return in_netns(KUBECTL, f"--kubeconfig={BASE / 'admin.kubeconfig'}", *args)


def triton(ip: str, path: str, *, method: str = "GET", timeout: float = 2) -> int:
    """The HTTP status of a call to a Triton pod, made from inside the node's network namespace."""
    out = in_netns(
        "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", str(timeout), "-X", method,
        f"http://{ip}:8000{path}", timeout=timeout + 5,
    )  # fmt: skip
    return int(out or 0)


def triton_pods() -> list[dict[str, Any]]:
    pods = kubectl_json("-n", "ml", "get", "pods", "-l", "app.kubernetes.io/name=triton")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def serving(ip: str, broken: str) -> str:
    """Which version the Triton at ip serves: 'stable', 'broken', 'both' or 'none'."""
    stable_ready = triton(ip, f"/v2/models/{MODEL}/versions/{STABLE}/ready") == 200
    broken_ready = triton(ip, f"/v2/models/{MODEL}/versions/{broken}/ready") == 200
    states = {(True, False): "stable", (False, True): "broken", (True, True): "both"}
    return states.get((stable_ready, broken_ready), "none")


def stamp(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def workflows() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = kubectl_json("-n", "ml", "get", "workflows")["items"]
    return found


def replicas_on_stable(broken: str) -> dict[str, str]:
    """The two Ready Triton pods before the push, name -> IP, each serving the stable version."""
    pods = triton_pods()
    if len(pods) != 2 or not all(ready(p) for p in pods):
        raise DrillFailed(f"want 2 Ready Triton pods before the push, have {[p['metadata']['name'] for p in pods]}")
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    for name, ip in ips.items():
        if serving(ip, broken) != "stable":
            raise DrillFailed(f"{name} does not serve v{STABLE} before the push: {serving(ip, broken)}")
    return ips


def push_broken(ips: dict[str, str], broken: str, variant: str = "wrong_weights") -> tuple[float, float]:
    """The push: the broken version into the repository, then loaded on each replica in turn, as a
    pipeline would. Returns when the first replica and when both served it."""
    target = BASE / "models" / MODEL / broken
    shutil.copytree(ROOT / "examples" / "broken" / MODEL / variant, target)
    for path in [target, *target.rglob("*")]:
        os.chown(path, 10001, 10001)
    loaded: list[float] = []
    for name, ip in ips.items():
        status = triton(ip, f"/v2/repository/models/{MODEL}/load", method="POST", timeout=60)
        if status != 200:
            raise DrillFailed(f"loading the push on {name}: HTTP {status}")
        loaded.append(time.time())
    return loaded[0], loaded[-1]


def watch(before: set[str], since: float, broken: str) -> tuple[dict[str, float], str, int]:
    """Poll until a new workflow succeeded and both pods are Ready on the stable version.
    (when each was first seen, the workflow's name, the most pods drained at once)."""
    seen: dict[str, float] = {}
    workflow_name = ""
    most_drained = 0
    started, polls = time.time(), 0
    while time.time() < since + DEADLINE_S:
        now = time.time()
        polls += 1
        pods = triton_pods()
        not_ready = [p["metadata"]["name"] for p in pods if not ready(p)]
        most_drained = max(most_drained, len(not_ready))
        if not_ready:
            seen.setdefault("first_drained", now)
        if not workflow_name:
            new = [w["metadata"]["name"] for w in workflows() if w["metadata"]["name"] not in before]
            workflow_name = new[0] if new else ""
        if workflow_name and "workflow_done" not in seen:
            status = kubectl_json("-n", "ml", "get", "workflow", workflow_name).get("status") or {}
            if status.get("phase") in ("Failed", "Error"):
                raise DrillFailed(f"workflow {workflow_name} {status['phase']}: {status.get('message')}")
            if status.get("phase") == "Succeeded":
                seen["workflow_done"] = now
        on_stable = len(pods) == 2 and all(serving(p["status"]["podIP"], broken) == "stable" for p in pods)
        if on_stable:
            seen.setdefault("both_serve_stable", now)
        if on_stable and "workflow_done" in seen and not not_ready:
            seen["both_ready_on_stable"] = now
            seen["poll_interval_s"] = (now - started) / polls  # a duration, not a moment
            return seen, workflow_name, most_drained
        time.sleep(0.2)
    raise DrillFailed(f"not healed within {DEADLINE_S:g} s; seen: {seen}, workflow {workflow_name!r}")


def heal_record(workflow_name: str) -> tuple[dict[str, float | None], dict[str, str]]:
    """The times the API server recorded for the workflow and its heal pod, and the heal step's outputs."""
    wf = kubectl_json("-n", "ml", "get", "workflow", workflow_name)
    status = wf["status"]
    heal = next(n for n in status["nodes"].values() if n.get("type") == "Pod" and n["displayName"].startswith("heal"))
    outputs = {p["name"]: p.get("value", "") for p in (heal.get("outputs") or {}).get("parameters", [])}
    times: dict[str, float | None] = {"workflow_created": stamp(wf["metadata"]["creationTimestamp"])}
    selector = f"workflows.argoproj.io/workflow={workflow_name}"
    for pod in kubectl_json("-n", "ml", "get", "pods", "-l", selector)["items"][:1]:  # podGC may have taken it
        conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
        main = next(c for c in pod["status"].get("containerStatuses", []) if c["name"] == "main")
        state = main.get("state", {})
        times["heal_pod_scheduled"] = stamp(conditions.get("PodScheduled", {}).get("lastTransitionTime"))
        times["heal_main_started"] = stamp((state.get("terminated") or state.get("running") or {}).get("startedAt"))
        times["heal_main_finished"] = stamp((state.get("terminated") or {}).get("finishedAt"))
    times["heal_node_finished"] = stamp(heal.get("finishedAt"))
    times["workflow_finished"] = stamp(status.get("finishedAt"))
    return times, outputs


def replacement_serves(ips: dict[str, str], broken: str) -> str:
    """Delete one Triton pod; what its replacement serves once both are Ready again."""
    victim = sorted(ips)[0]
    kubectl("-n", "ml", "delete", "pod", victim, "--wait=false")
    deadline = time.time() + 180
    while time.time() < deadline:
        pods = triton_pods()
        fresh = [p for p in pods if p["metadata"]["name"] not in ips and ready(p)]
        if fresh and len([p for p in pods if ready(p)]) == 2:
            return serving(fresh[0]["status"]["podIP"], broken)
        time.sleep(0.5)
    raise DrillFailed(f"no Ready replacement for {victim} within 180 s")


def one_run(broken: str, variant: str = "wrong_weights") -> dict[str, Any]:
    """Push ``broken`` (examples/broken/<model>/<variant>), watch it healed through Argo; the run's
    timeline in seconds from the first wrong answer possible (the first replica serving the push)."""
    before = {w["metadata"]["name"] for w in workflows()}
    ips = replicas_on_stable(broken)
    first_loaded, both_loaded = push_broken(ips, broken, variant)
    seen, workflow_name, most_drained = watch(before, first_loaded, broken)
    recorded, outputs = heal_record(workflow_name)
    timeline = {"push_loaded_on_both": both_loaded, "first_drained": seen.get("first_drained"), **recorded}
    timeline["both_serve_stable"] = seen["both_serve_stable"]
    timeline["both_ready_on_stable"] = seen["both_ready_on_stable"]
    poll_s = round(seen["poll_interval_s"], 2)
    offsets = {k: round(v - first_loaded, 2) for k, v in timeline.items() if v is not None}
    print(f"drill: v{broken} ({variant}) pushed; seconds from the first replica serving it:", flush=True)
    for name, offset in sorted(offsets.items(), key=lambda item: item[1]):
        print(f"drill: {offset:7.2f} s  {name}", flush=True)
    if most_drained > 1:
        raise DrillFailed(f"{most_drained} of 2 pods were drained at once; min_ready 1 allows 1")
    if outputs.get("to-version") != STABLE:
        raise DrillFailed(f"the heal step restored {outputs.get('to-version')!r}, not v{STABLE}")
    if (BASE / "models" / MODEL / broken).exists():
        raise DrillFailed(f"v{broken} is still in the live repository: not quarantined")
    if offsets["both_ready_on_stable"] > BUDGET_S:
        raise DrillFailed(f"restored in {offsets['both_ready_on_stable']} s, over the {BUDGET_S:g} s budget")
    return {
        "version": broken,
        "variant": variant,
        "workflow": workflow_name,
        "timeline_s": offsets,
        "restore_s": offsets["both_serve_stable"],
        "ready_s": offsets["both_ready_on_stable"],
        "most_pods_drained_at_once": most_drained,
        "poll_interval_s": poll_s,
        "heal_phases": json.loads(outputs.get("phases") or "[]"),
    }


def next_version() -> str:
    """A version number no drill has pushed yet (in the repository, quarantined or pulled)."""
    model_dir = BASE / "models" / MODEL
    names = [p.name for p in model_dir.iterdir()] + [p.name for p in model_dir.glob(".healer-quarantine/*")]
    names += [p.name.rsplit("-", 1)[1] for p in BASE.glob(f"pulled-{MODEL}-*")]
    return str(max(int(n.split("-")[0]) for n in names if n.split("-")[0].isdecimal()) + 1)


def alerts_in_alertmanager() -> set[tuple[str, str]]:
    """(alertname, version label or "") of the alerts the real Alertmanager on the node IP holds now."""
    out = in_netns("curl", "-fsS", "-m", "5", f"http://{NODE_IP}:9093/api/v2/alerts")
    return {(alert["labels"]["alertname"], alert["labels"].get("version", "")) for alert in json.loads(out)}


def firing_in_prometheus(alertname: str) -> bool:
    out = in_netns(
        "curl", "-fsS", "-m", "5", "http://127.0.0.1:9090/api/v1/query",
        "--data-urlencode", f'query=ALERTS{{alertname="{alertname}",alertstate="firing"}}',
    )  # fmt: skip
    return bool(json.loads(out)["data"]["result"])


def store_down(broken: str) -> dict[str, Any]:
    """A push while the stable ledger cannot be read (its folder made unreadable, as an unmounted or
    broken store would be): the heal pod cannot find a version to restore, retries until the
    workflow's deadline, and escalates. The escalation must reach the real Alertmanager twice: pushed
    by healer (HealerRollbackEscalated) and from the real Prometheus evaluating the chart's rule on
    the sidecars' metrics (HealerModelEscalated, after its 1 minute `for`). Then the runbook's fix
    puts both replicas back on the stable version (runbook_fix)."""
    ledger = BASE / "models" / ".healer" / MODEL / "ledger"
    before = {w["metadata"]["name"] for w in workflows()}
    ips = replicas_on_stable(broken)
    mode = ledger.stat().st_mode
    ledger.chmod(0)
    try:
        first_loaded, _ = push_broken(ips, broken)
        seen: dict[str, float] = {}
        deadline = first_loaded + 300
        while time.time() < deadline and len(seen) < 4:
            now = time.time()
            new = [w for w in workflows() if w["metadata"]["name"] not in before]
            if new and (new[0].get("status") or {}).get("phase") in ("Failed", "Error"):
                seen.setdefault("workflow_failed", now)
            alerts = alerts_in_alertmanager()
            if ("HealerRollbackEscalated", broken) in alerts:  # this escalation's, not an earlier one's
                seen.setdefault("pushed_alert_in_alertmanager", now)
            if firing_in_prometheus("HealerModelEscalated"):
                seen.setdefault("prometheus_firing", now)
            if ("HealerModelEscalated", "") in alerts:
                seen.setdefault("prometheus_alert_in_alertmanager", now)
            time.sleep(1)
    finally:
        ledger.chmod(mode)
    offsets = {k: round(v - first_loaded, 1) for k, v in sorted(seen.items(), key=lambda item: item[1])}
    for name, offset in offsets.items():
        print(f"drill: {offset:7.1f} s  {name}", flush=True)
    if len(seen) < 4:
        raise DrillFailed(f"store-down: within 300 s only {sorted(seen)}")
    fixed_s = runbook_fix(ips, broken)
    print(
        f"drill: the runbook's fix (store back, the rollback again with a new incident): both Ready on v{STABLE} "
        f"after {fixed_s:.1f} s",
        flush=True,
    )
    return {"version": broken, "timeline_s": offsets, "runbook_fix_s": round(fixed_s, 1)}


def runbook_fix(ips: dict[str, str], broken: str) -> float:
    """runbooks/rollback-escalated.md's Fix, as the person paged would do it: the cause gone (the ledger
    readable again), the rollback run again for the same version with a new incident id, from inside a
    sidecar; then both pods must be Ready on the stable version (the escalated one trusts the model
    again after success_threshold good answers). Returns the seconds it took."""
    started = time.time()
    pod = next(iter(ips))
    in_netns(
        KUBECTL, f"--kubeconfig={BASE / 'admin.kubeconfig'}", "-n", "ml", "exec", pod, "-c", "healer", "--",
        "healer", "rollback", MODEL, broken, "--incident", f"inc-runbook-fix-{broken}-{int(started)}",
        "--config", "/etc/healer/healer.yaml", timeout=BUDGET_S + 60,
    )  # fmt: skip
    while time.time() < started + 120:
        pods = triton_pods()
        if (
            len(pods) == 2
            and all(ready(p) for p in pods)
            and all(serving(ip, broken) == "stable" for ip in ips.values())
        ):
            return time.time() - started
        time.sleep(1)
    raise DrillFailed(f"after the runbook's fix the Triton pods are not both Ready on v{STABLE} within 120 s")


def sidecar_status(ip: str) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(in_netns("curl", "-fsS", "-m", "5", f"http://{ip}:8088/status"))
    return status


def argo_server(action: str) -> None:
    done = subprocess.run(
        ["bash", str(Path(__file__).with_name("argo-server.sh")), action],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise DrillFailed(f"argo-server.sh {action}: {done.stderr.strip()[-400:]}")


def fallback(broken: str) -> dict[str, Any]:
    """argo-server down (an outage): the sidecars cannot submit, so each rolls back inside its pod
    (sidecar.fallback_to_local) and the replicas are healed all the same; no Workflow is created. When
    argo-server is back, nothing is submitted for the healed incident: one rollback per model."""
    before = {w["metadata"]["name"] for w in workflows()}
    ips = replicas_on_stable(broken)
    argo_server("stop")
    try:
        first_loaded, _ = push_broken(ips, broken)
        seen: dict[str, float] = {}
        while time.time() < first_loaded + DEADLINE_S and "both_serve_stable" not in seen:
            pods = triton_pods()
            if any(not ready(p) for p in pods):
                seen.setdefault("first_drained", time.time())
            if len(pods) == 2 and all(serving(p["status"]["podIP"], broken) == "stable" for p in pods):
                seen["both_serve_stable"] = time.time()
            time.sleep(0.2)
        if "both_serve_stable" not in seen:
            raise DrillFailed(f"fallback: not restored within {DEADLINE_S:g} s with argo-server down")
    finally:
        argo_server("start")
    time.sleep(15)  # the sidecars' next cycles, with Argo reachable again
    created = sorted({w["metadata"]["name"] for w in workflows()} - before)
    if created:
        raise DrillFailed(f"fallback: workflows created for a healed incident: {created}")
    if not all(serving(ip, broken) == "stable" for ip in ips.values()):
        raise DrillFailed("fallback: a replica left the stable version after argo-server came back")
    offsets = {k: round(v - first_loaded, 2) for k, v in seen.items()}
    for name, offset in offsets.items():
        print(f"drill: {offset:7.2f} s  {name} (argo-server down: in-pod rollback)", flush=True)
    return {"version": broken, "timeline_s": offsets, "workflows_created": created}


def back_to_stable(ips: dict[str, str], pushed: str) -> None:
    """What a person would do after a push healer rightly left alone: take the version out of the
    repository (kept aside under $BASE) and load the model again, which serves the stable version."""
    shutil.move(BASE / "models" / MODEL / pushed, BASE / f"pulled-{MODEL}-{pushed}")
    for name, ip in ips.items():
        if triton(ip, f"/v2/repository/models/{MODEL}/load", method="POST", timeout=60) != 200:
            raise DrillFailed(f"reloading {MODEL} on {name} after pulling v{pushed}")
    if not all(serving(ip, pushed) == "stable" for ip in ips.values()):
        raise DrillFailed(f"after pulling v{pushed} a replica does not serve v{STABLE}")


def one_in_five(broken: str, watch_s: float = 25.0) -> dict[str, Any]:
    """A version that answers every fifth request wrong: each wrong answer is seen, none follows
    another, so nothing is drained or rolled back (the rule is failure_threshold wrong answers in a
    row). Then the version is pulled, as a person would, and the replicas serve the stable one again."""
    before = {w["metadata"]["name"] for w in workflows()}
    ips = replicas_on_stable(broken)
    wrong_before = {ip: sidecar_status(ip)["models"][MODEL]["wrong_answers"] for ip in ips.values()}
    first_loaded, _ = push_broken(ips, broken, "one_in_five")
    drained = 0
    while time.time() < first_loaded + watch_s:
        drained = max(drained, sum(1 for p in triton_pods() if not ready(p)))
        time.sleep(0.5)
    wrong = {ip: sidecar_status(ip)["models"][MODEL]["wrong_answers"] - wrong_before[ip] for ip in ips.values()}
    created = sorted({w["metadata"]["name"] for w in workflows()} - before)
    print(f"drill: one-in-five for {watch_s:g} s: wrong answers seen {wrong}, drained {drained}", flush=True)
    if sum(wrong.values()) < 2:
        raise DrillFailed(f"one-in-five proves nothing: only {wrong} wrong answers seen")
    if drained or created:
        raise DrillFailed(f"one-in-five: drained {drained} pod(s), created {created}")
    back_to_stable(ips, broken)
    return {"version": broken, "wrong_answers_seen": wrong, "drained": drained, "workflows_created": created}


def main() -> int:
    scenarios = {"store-down": store_down, "fallback": fallback, "one-in-five": one_in_five}
    if sys.argv[1:2] and sys.argv[1] in scenarios:
        run = scenarios[sys.argv[1]](next_version())
        print(json.dumps({"scenario": sys.argv[1], "run": run}, sort_keys=True))
        return 0
    if sys.argv[1:2] == ["hang"]:
        print(json.dumps({"scenario": "hang", "engine": "argo", "run": one_run(next_version(), "hang")}))
        return 0
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    result: dict[str, Any] = {
        "scenario": "wrong-weights",
        "engine": "argo",
        "cluster": "one node: real kubelet, containerd, runc, Argo controller and argoexec",
        "argo_requeue": os.environ.get("ARGO_DEFAULT_REQUEUE_TIME") or "Argo's default (10s)",
        "timestamps": "the API server's are whole seconds; the rest polled (poll_interval_s per run)",
        "runs": [one_run(next_version()) for _ in range(runs)],
    }
    last = result["runs"][-1]["version"]
    ips = replicas_on_stable(last)
    result["after_restart"] = replacement_serves(ips, last)
    if result["after_restart"] != "stable":
        raise DrillFailed(f"the replacement pod serves {result['after_restart']!r}, not v{STABLE}")
    print(f"drill: a replacement Triton pod serves v{STABLE} (the pushed versions stay quarantined)", flush=True)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (DrillFailed, subprocess.TimeoutExpired, urllib.error.URLError) as exc:
        print(f"drill: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
