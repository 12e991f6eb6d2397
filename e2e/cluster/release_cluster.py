"""`healer release` on the one-node cluster (release.sh): the healer-release WorkflowTemplate the chart
installed, run by the real Argo controller with argoexec pods on the kubelet, against the two injected
Triton replicas and the S3 store (after store-s3.sh). Run inside the node's network namespace.

1. a version with wrong weights, uploaded to the bucket as a pipeline would, released: the canary's
   golden request fails, the run ends Failed, its put-back pod runs; both replicas serve the stable
   version, the version is quarantined, only one replica ever served it;
2. a good version (version 1's files under a new number) released with a short bake: the run
   Succeeds, both replicas serve it alone, and it is the stable version in the ledger.

Prints one JSON line per release with the run's and each step's times (the figures in docs/releasing.md).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drill_argo as d  # the cluster's helpers (kubectl, Triton calls from the netns)

BUCKET, PREFIX = "healer-models", "triton"
DEADLINE_S = 300.0


def s3_client() -> Any:
    import boto3
    from botocore.config import Config

    ip = d.kubectl("-n", "storage", "get", "service", "seaweedfs", "-o", "jsonpath={.spec.clusterIP}").strip()
    return boto3.client(
        "s3",
        endpoint_url=f"http://{ip}:8333",
        region_name="us-east-1",
        aws_access_key_id="healer-cluster",
        aws_secret_access_key="healer-cluster-secret",  # noqa: S106 - SeaweedFS without IAM: any pair (store-s3.sh)
        config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 2}),
    )


def next_version(s3: Any) -> int:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{d.MODEL}/").get("Contents") or []
    in_bucket = [int(o["Key"].split("/")[2]) for o in listed if o["Key"].split("/")[2].isdecimal()]
    return max([*in_bucket, int(d.next_version()) - 1]) + 1


def upload(s3: Any, version: int, source: Path) -> None:
    """A new version into the bucket only: the release stages it where Triton reads it."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            key = f"{PREFIX}/{d.MODEL}/{version}/{path.relative_to(source).as_posix()}"
            s3.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())


def served(ip: str) -> list[str]:
    out = d.in_netns("curl", "-s", "-m", "3", f"http://{ip}:8000/v2/models/{d.MODEL}", timeout=8)
    try:
        return sorted(json.loads(out).get("versions") or [], key=int)
    except ValueError:
        return []


class Sampler:
    """Which replicas ever served ``version`` while the release ran (every 0.25 s)."""

    def __init__(self, ips: dict[str, str], version: str) -> None:
        self.ips, self.version, self.touched = ips, version, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for name, ip in self.ips.items():
                try:
                    if self.version in served(ip):
                        self.touched.add(name)
                except d.DrillFailed:
                    continue

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join(10)
        return self.touched


def release(version: int, release_id: str, bake_s: float) -> tuple[dict[str, Any], set[str]]:
    manifest = d.BASE / f"release-{release_id}.json"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Workflow",
                "metadata": {"generateName": "healer-release-", "namespace": "ml"},
                "spec": {
                    "workflowTemplateRef": {"name": "healer-release"},
                    "arguments": {
                        "parameters": [
                            {"name": "model", "value": d.MODEL},
                            {"name": "version", "value": str(version)},
                            {"name": "release", "value": release_id},
                            {"name": "bake-s", "value": f"{bake_s:g}"},
                        ]
                    },
                },
            }
        )
    )
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in d.triton_pods()}
    sampler = Sampler(ips, str(version))
    name = d.kubectl("create", "-f", str(manifest), "-o", "name").strip().split("/")[-1]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        workflow = d.kubectl_json("-n", "ml", "get", "workflow", name)
        if (workflow.get("status") or {}).get("phase") in {"Succeeded", "Failed", "Error"}:
            break
        if time.monotonic() > deadline:
            raise d.DrillFailed(f"{name} not done within {DEADLINE_S:g} s: {workflow.get('status')}")
        time.sleep(1)
    time.sleep(1.0)  # the sampler's last look after the put-back
    touched = sampler.stop()
    (d.BASE / f"release-{release_id}-workflow.json").write_text(json.dumps(workflow))
    return workflow, touched


def steps(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each node of the release's steps by its display name (the step's Retry node, e.g. ``canary``, and
    its pods, ``canary(0)``): phase, message, seconds and output parameters."""
    found: dict[str, dict[str, Any]] = {}
    for node in workflow["status"].get("nodes", {}).values():
        if node.get("type") not in {"Retry", "Pod", "Skipped", "Suspend"}:
            continue
        started, finished = d.stamp(node.get("startedAt")), d.stamp(node.get("finishedAt"))
        outputs = {p["name"]: p.get("value", "") for p in (node.get("outputs") or {}).get("parameters") or []}
        found[node["displayName"]] = {
            "phase": node.get("phase"),
            "message": node.get("message", ""),
            "seconds": round(finished - started, 1) if started and finished else None,
            "outputs": outputs,
        }
    return found


def of_step(found: dict[str, dict[str, Any]], step: str) -> list[dict[str, Any]]:
    """The step's nodes: its Retry node and each of its pods (an Argo Retry node's message is about the
    retry, its pods' are the step's own)."""
    return [v for k, v in found.items() if k == step or (k.startswith(f"{step}(") and k.endswith(")"))]


def summary(
    kind: str, version: int, workflow: dict[str, Any], touched: set[str], ips: dict[str, str]
) -> dict[str, Any]:
    """One release's figures as the step prints them (docs/releasing.md)."""
    status = workflow["status"]
    found = steps(workflow)
    return {
        "release": kind,
        "version": version,
        "workflow": workflow["metadata"]["name"],
        "phase": status["phase"],
        "seconds": round(d.stamp(status["finishedAt"]) - d.stamp(status["startedAt"]), 1),
        "touched": sorted(touched),
        "served_after": {name: served(ip) for name, ip in ips.items()},
        "steps": {k: {x: v[x] for x in ("phase", "seconds", "message")} for k, v in found.items()},
    }


def main() -> int:
    s3 = s3_client()
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in d.triton_pods()}
    before = {name: served(ip) for name, ip in ips.items()}
    stable = sorted({v for vs in before.values() for v in vs}, key=int)
    if len(stable) != 1 or any(vs != stable for vs in before.values()):
        raise d.DrillFailed(f"release: the replicas do not all serve one version before: {before}")
    stable_version = stable[0]
    root = d.ROOT / "examples"

    bad = next_version(s3)
    upload(s3, bad, root / "broken" / d.MODEL / "wrong_weights")
    workflow, touched = release(bad, f"cluster-bad-{bad}", 5.0)
    result = summary("bad", bad, workflow, touched, ips)
    print(json.dumps(result), flush=True)
    found, after = steps(workflow), result["served_after"]
    if workflow["status"]["phase"] != "Failed":
        raise d.DrillFailed(f"the bad release ended {workflow['status']['phase']}")
    if not any("golden request failed" in n["message"] for n in of_step(found, "canary")):
        raise d.DrillFailed(f"the bad release did not stop at the canary's golden request: {of_step(found, 'canary')}")
    ran_after = [k for k in ("bake", "roll-out") if any(n["phase"] != "Skipped" for n in of_step(found, k))]
    if ran_after:
        raise d.DrillFailed(f"steps after the canary ran: {ran_after}")
    put_back_nodes = of_step(found, "put-back")
    if not put_back_nodes or any(n["phase"] != "Succeeded" for n in put_back_nodes):
        raise d.DrillFailed(f"the put-back did not succeed: {put_back_nodes}")
    put_back = next((json.loads(n["outputs"]["put-back"]) for n in put_back_nodes if n["outputs"].get("put-back")), {})
    if put_back.get("quarantined") is not True:
        raise d.DrillFailed(f"v{bad} not quarantined: {put_back}")
    if any(vs != [stable_version] for vs in after.values()):
        raise d.DrillFailed(f"not every replica is back on v{stable_version}: {after}")
    if len(touched) > 1:
        raise d.DrillFailed(f"more than the canary served v{bad}: {sorted(touched)}")

    good = next_version(s3)
    upload(s3, good, root / "model_repository" / d.MODEL / "1")
    workflow, touched = release(good, f"cluster-good-{good}", 5.0)
    result = summary("good", good, workflow, touched, ips)
    print(json.dumps(result), flush=True)
    after = result["served_after"]
    if workflow["status"]["phase"] != "Succeeded":
        status = workflow["status"]
        raise d.DrillFailed(f"the good release ended {status['phase']}: {status.get('message')}")
    if any(vs != [str(good)] for vs in after.values()):
        raise d.DrillFailed(f"not every replica serves v{good} alone: {after}")
    pod = next(iter(ips))
    ledger = json.loads(
        d.kubectl(
            "-n", "ml", "exec", pod, "-c", "healer", "--", "healer", "store", "ls", "--config",
            "/etc/healer/healer.yaml", d.MODEL, "-o", "json",
        )
    )  # fmt: skip
    entry = ledger[0] if isinstance(ledger, list) and ledger else {}
    quarantined = {str(q.get("version")) for q in entry.get("quarantined") or []}
    if str(good) not in entry.get("stable", []) or str(bad) not in quarantined or str(bad) in entry.get("stable", []):
        raise d.DrillFailed(f"the ledger after the releases: {entry}")
    print(f"release: v{bad} stopped at the canary, v{good} released to {len(after)} replicas and promoted", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        sys.exit(main())
    except d.DrillFailed as exc:
        print(f"release: {exc}", file=sys.stderr)
        sys.exit(1)
