"""A wrong-weights push healed through the real Argo in the two repository modes without a shared volume
(e2e/cluster/modes.sh; issue 29): Triton reading the S3 store itself (``object-store``) and the pods of
an InferenceService's predictor as KServe creates them in raw deployment mode (``kserve``: each pod's
own emptyDir filled by the storage initializer, repository_mode per-pod).

``drill_modes.py fill MODE``: the bucket's prefix MODE/ filled as a pipeline would (versions 1 and 2).
``drill_modes.py drill MODE``: the push, as a pipeline would: object-store, version 3 put into the
bucket and loaded on each replica; kserve, version 3 written into each pod's /mnt/models (through its
sidecar, the one container there that may write) and loaded. Then nothing but healer acts: the
sidecars detect, drain, submit; Argo's heal pod restores version 2 on both replicas. Measured as
drill_argo.py measures the shared volume's: seconds from the first replica serving the push to both
serving the stable version (``restore_s``) and both Ready again (``ready_s``). Then a Triton pod is
deleted and its replacement must serve version 2 (object-store: the bucket's config.pbtxt pinned;
kserve: the storage initializer's copy of the bucket). Prints the timeline and a JSON line; exit 1 on
any miss.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drill_argo import ROOT, DrillFailed, in_netns, kubectl, kubectl_json, ready, stamp

MODEL, STABLE, BROKEN = "linear_scorer", "2", "3"
BUCKET = "healer-models"
S3_URL = os.environ.get("HEALER_S3_URL", "")  # the Service's ClusterIP, from the node's namespace
DEADLINE_S = 240.0
GOAL_S = 10.0  # issue 29: from the push to both replicas serving the stable version again


@dataclass(frozen=True)
class Mode:
    namespace: str
    selector: str
    port: int
    container: str  # Triton's


MODES = {
    "object-store": Mode("ml-object-store", "app.kubernetes.io/name=triton-object-store", 8000, "triton"),
    "kserve": Mode("ml-kserve", "serving.kserve.io/inferenceservice=linear-scorer", 8080, "kserve-container"),
}


def s3_client() -> Any:
    import boto3  # only the fill and the object-store push need it
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=S3_URL, region_name="us-east-1",
        aws_access_key_id="healer-cluster", aws_secret_access_key="healer-cluster-secret",  # noqa: S106 - store-s3.sh's test pair
        config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1}),
    )  # fmt: skip


def version_files(source: Path) -> dict[str, bytes]:
    return {
        p.relative_to(source).as_posix(): p.read_bytes()
        for p in sorted(source.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def fill(prefix: str) -> None:
    """Versions 1 and 2 and config.pbtxt under PREFIX/linear_scorer/ (whatever an earlier run left
    under the prefix removed first: this drill's own scratch prefix)."""
    s3 = s3_client()
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        s3.create_bucket(Bucket=BUCKET)  # store-s3.sh made it
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=item["Key"])
    model_dir = ROOT / "examples" / "model_repository" / MODEL
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{MODEL}/config.pbtxt", Body=(model_dir / "config.pbtxt").read_bytes())
    for version in ("1", "2"):
        for name, data in version_files(model_dir / version).items():
            s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{MODEL}/{version}/{name}", Body=data)
    print(f"fill: s3://{BUCKET}/{prefix}/{MODEL}: versions 1, 2 and config.pbtxt", flush=True)


def triton(mode: Mode, ip: str, path: str, *, method: str = "GET", timeout: float = 2) -> int:
    out = in_netns(
        "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", str(timeout), "-X", method,
        f"http://{ip}:{mode.port}{path}", timeout=timeout + 5,
    )  # fmt: skip
    return int(out or 0)


def pods(mode: Mode) -> list[dict[str, Any]]:
    found = kubectl_json("-n", mode.namespace, "get", "pods", "-l", mode.selector)["items"]
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def serving(mode: Mode, ip: str) -> str:
    stable = triton(mode, ip, f"/v2/models/{MODEL}/versions/{STABLE}/ready") == 200
    broken = triton(mode, ip, f"/v2/models/{MODEL}/versions/{BROKEN}/ready") == 200
    return {(True, False): "stable", (False, True): "broken", (True, True): "both"}.get((stable, broken), "none")


def push(name: str, mode_name: str, mode: Mode, replicas: dict[str, str]) -> float:
    """The broken version where this mode's Triton reads it, then loaded on each replica; returns when
    the first replica served it."""
    files = version_files(ROOT / "examples" / "broken" / MODEL / "wrong_weights")
    if mode_name == "object-store":
        s3 = s3_client()
        for relative, data in files.items():
            s3.put_object(Bucket=BUCKET, Key=f"object-store/{MODEL}/{BROKEN}/{relative}", Body=data)
    else:  # each pod's own copy, written through its sidecar (kserve-container mounts it read-only)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for relative, data in files.items():
                info = tarfile.TarInfo(f"{BROKEN}/{relative}")
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        for pod in replicas:
            subprocess.run(
                ["nsenter", f"--net=/run/netns/{os.environ['HEALER_NODE_NETNS']}", "--", os.environ["KUBECTL"],
                 f"--kubeconfig={Path(os.environ['HEALER_NODE_DIR']) / 'admin.kubeconfig'}", "-n", mode.namespace,
                 "exec", "-i", pod, "-c", "healer", "--", "python", "-c",
                 "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|')"
                 f".extractall('/mnt/models/{MODEL}')"],
                input=archive.getvalue(), check=True, capture_output=True, timeout=60,
            )  # fmt: skip
    loaded: list[float] = []
    for pod, ip in replicas.items():
        status = triton(mode, ip, f"/v2/repository/models/{MODEL}/load", method="POST", timeout=60)
        if status != 200:
            raise DrillFailed(f"{name}: loading the push on {pod}: HTTP {status}")
        loaded.append(time.time())
    return loaded[0]


def replicas_on_stable(mode: Mode) -> dict[str, str]:
    found = pods(mode)
    if len(found) != 2 or not all(ready(p) for p in found):
        raise DrillFailed(f"want 2 Ready Triton pods before the push, have {[p['metadata']['name'] for p in found]}")
    replicas = {p["metadata"]["name"]: p["status"]["podIP"] for p in found}
    for pod, ip in replicas.items():
        if serving(mode, ip) != "stable":
            raise DrillFailed(f"{pod} does not serve v{STABLE} before the push: {serving(mode, ip)}")
    return replicas


def watch(mode: Mode, since: float) -> tuple[dict[str, float], str]:
    seen: dict[str, float] = {}
    workflow = ""
    while time.time() < since + DEADLINE_S:
        now = time.time()
        found = pods(mode)
        if any(not ready(p) for p in found):
            seen.setdefault("first_drained", now)
        if not workflow:
            items = kubectl_json("-n", mode.namespace, "get", "workflows")["items"]
            workflow = items[0]["metadata"]["name"] if items else ""
            if workflow:
                seen.setdefault("workflow_seen", now)
        if workflow and "workflow_done" not in seen:
            status = kubectl_json("-n", mode.namespace, "get", "workflow", workflow).get("status") or {}
            if status.get("phase") in ("Failed", "Error"):
                raise DrillFailed(f"workflow {workflow} {status['phase']}: {status.get('message')}")
            if status.get("phase") == "Succeeded":
                seen["workflow_done"] = now
        on_stable = len(found) == 2 and all(serving(mode, p["status"]["podIP"]) == "stable" for p in found)
        if on_stable:
            seen.setdefault("both_serve_stable", now)
        if on_stable and "workflow_done" in seen and all(ready(p) for p in found):
            seen["both_ready_on_stable"] = now
            return seen, workflow
        time.sleep(0.2)
    raise DrillFailed(f"not healed within {DEADLINE_S:g} s; seen: {sorted(seen)}, workflow {workflow!r}")


def heal_outputs(mode: Mode, workflow: str) -> tuple[dict[str, str], float | None]:
    wf = kubectl_json("-n", mode.namespace, "get", "workflow", workflow)
    heal = next(
        n for n in wf["status"]["nodes"].values() if n.get("type") == "Pod" and n["displayName"].startswith("heal")
    )
    outputs = {p["name"]: p.get("value", "") for p in (heal.get("outputs") or {}).get("parameters", [])}
    return outputs, stamp(wf["metadata"]["creationTimestamp"])


def replacement_serves(mode: Mode, replicas: dict[str, str]) -> str:
    victim = sorted(replicas)[0]
    kubectl("-n", mode.namespace, "delete", "pod", victim, "--wait=false")
    deadline = time.time() + 180
    while time.time() < deadline:
        found = pods(mode)
        fresh = [p for p in found if p["metadata"]["name"] not in replicas and ready(p)]
        if fresh and len([p for p in found if ready(p)]) == 2:
            return serving(mode, fresh[0]["status"]["podIP"])
        time.sleep(0.5)
    raise DrillFailed(f"no Ready replacement for {victim} within 180 s")


def drill(mode_name: str) -> dict[str, Any]:
    mode = MODES[mode_name]
    replicas = replicas_on_stable(mode)
    first_loaded = push(mode_name, mode_name, mode, replicas)
    seen, workflow = watch(mode, first_loaded)
    outputs, created = heal_outputs(mode, workflow)
    timeline = {**seen, **({"workflow_created": created} if created else {})}
    offsets = {k: round(v - first_loaded, 2) for k, v in timeline.items()}
    print(f"drill {mode_name}: v{BROKEN} (wrong weights) pushed; seconds from the first replica serving it:")
    for name, offset in sorted(offsets.items(), key=lambda item: item[1]):
        print(f"drill {mode_name}: {offset:7.2f} s  {name}", flush=True)
    if outputs.get("to-version") != STABLE:
        raise DrillFailed(f"the heal step restored {outputs.get('to-version')!r}, not v{STABLE}")
    after_restart = replacement_serves(mode, replicas_on_stable(mode))
    if after_restart != "stable":
        raise DrillFailed(f"the replacement pod serves {after_restart!r}, not v{STABLE}")
    print(f"drill {mode_name}: a replacement Triton pod serves v{STABLE}", flush=True)
    return {
        "mode": mode_name,
        "workflow": workflow,
        "timeline_s": offsets,
        "restore_s": offsets["both_serve_stable"],
        "ready_s": offsets["both_ready_on_stable"],
        "goal_s": GOAL_S,
        "after_restart": after_restart,
        "heal_phases": json.loads(outputs.get("phases") or "[]"),
    }


def main() -> int:
    action, mode_name = sys.argv[1], sys.argv[2]
    if action == "fill":
        fill(mode_name)
        return 0
    print(json.dumps(drill(mode_name), sort_keys=True))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (DrillFailed, subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
        print(f"drill: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
