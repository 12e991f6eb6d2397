#!/usr/bin/env bash
# The Triton image (Containerfile.triton): tritonserver from the nvidia-pytriton wheel + the example
# models, on the local base. Then one run in its own network namespace (--network none: loopback only),
# read-only root, uid 10001: tritonserver starts, loads both example models, and a client inside the same
# container answers /v2/health/live and /v2/health/ready over 127.0.0.1.
#
#   sudo nice -n 19 e2e/images/build-triton.sh        # ISOLATION=chroot (default) | oci; NO_CACHE=1: cold
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

isolation="${ISOLATION:-chroot}"
podman image exists "$BASE_IMAGE" || "$images_here/build-base.sh"
ca_bundle="${BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
volumes=()
if [ -n "$ca_bundle" ] && [ -f "$ca_bundle" ]; then volumes=(-v "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro"); fi

# The models without their bytecode (examples/ has __pycache__ from local runs): a clean copy as context.
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp -r "$repo_root/examples/model_repository" "$context/"
find "$context" -name __pycache__ -prune -exec rm -rf {} +

start=$(now)
buildah bud --isolation "$isolation" --layers ${NO_CACHE:+--no-cache} "${volumes[@]}" \
  --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg PYTRITON_VERSION="$PYTRITON_VERSION" \
  -f "$images_here/Containerfile.triton" -t "$TRITON_IMAGE" "$context"
built=$(now)

# tritonserver in the background, then poll live and ready from inside the same namespace.
podman run --rm --network none --read-only --cap-drop all --security-opt no-new-privileges --shm-size 64m \
  "$TRITON_IMAGE" sh -c '
    tritonserver --model-repository=/models --model-control-mode=explicit \
      --load-model=linear_scorer --load-model=tiny_classifier --http-address=127.0.0.1 \
      --allow-grpc=false --allow-gpu-metrics=false --strict-readiness=true > /tmp/triton.log 2>&1 &
    triton=$!
    for _ in $(seq 120); do
      if python -c "import urllib.request as u; u.urlopen(\"http://127.0.0.1:8000/v2/health/ready\", timeout=1)" 2>/dev/null; then break; fi
      sleep 0.5
    done
    python - <<PY
import json, urllib.request as u
for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/linear_scorer/ready"):
    print(path, u.urlopen("http://127.0.0.1:8000" + path, timeout=2).status)
body = json.dumps({"inputs": [{"name": "FEATURES", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})
req = u.Request("http://127.0.0.1:8000/v2/models/linear_scorer/infer", body.encode(), {"Content-Type": "application/json"})
print("infer", json.load(u.urlopen(req, timeout=5))["outputs"][0]["data"])
PY
    status=$?
    [ $status -eq 0 ] || tail -n 40 /tmp/triton.log
    kill "$triton"; wait "$triton" || true
    exit $status'
archive "$TRITON_IMAGE" triton
end=$(now)
log "image $TRITON_IMAGE: $(image_size "$TRITON_IMAGE") bytes"
log "times: buildah bud ($isolation) $((built - start)) s, run + archives $((end - built)) s"
