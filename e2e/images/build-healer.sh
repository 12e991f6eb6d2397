#!/usr/bin/env bash
# The healer image, from the repository's own Dockerfile, on the local base (build-base.sh) instead of
# python:3.11.14-slim-bookworm: `buildah bud --build-arg PYTHON_IMAGE=localhost/healer-base:...`. The build
# stage's `pip wheel` reaches PyPI; nothing else leaves the machine. Then one run of the image, as the
# Dockerfile's USER (10001) with a read-only root filesystem and no network: `healer --version`.
#
#   sudo nice -n 19 e2e/images/build-healer.sh        # ISOLATION=chroot (default) | oci
#
# Archives (docker-archive for `ctr -n k8s.io images import`, and OCI) go to the cache.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

isolation="${ISOLATION:-chroot}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo_root/pyproject.toml" | head -n1)"
podman image exists "$BASE_IMAGE" || "$images_here/build-base.sh"

# Behind a TLS-intercepting proxy (as here: "CERTIFICATE_VERIFY_FAILED ... self-signed certificate in
# certificate chain" from pip in the build stage), the host's CA bundle is bind-mounted into the RUN steps
# only (buildah bud -v: not part of any layer). Debian's pip reads the system bundle. BUILD_CA_BUNDLE= : none.
ca_bundle="${BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
volumes=()
if [ -n "$ca_bundle" ] && [ -f "$ca_bundle" ]; then volumes=(-v "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro"); fi

start=$(now)
# --layers: buildah caches each step in containers-storage, so an unchanged tree rebuilds in seconds.
buildah bud --isolation "$isolation" --layers ${NO_CACHE:+--no-cache} "${volumes[@]}" \
  --build-arg PYTHON_IMAGE="$BASE_IMAGE" --build-arg HEALER_VERSION="$version" \
  -f "$repo_root/Dockerfile" -t "$HEALER_IMAGE" "$repo_root"
built=$(now)

# The pod's securityContext: uid/gid 10001 (the image's USER), read-only root, nothing written but /tmp.
podman run --rm --network none --read-only --cap-drop all --security-opt no-new-privileges \
  "$HEALER_IMAGE" sh -c 'id; healer --version; python -c "import pathlib; pathlib.Path(\"/opt/healer/x\").touch()" 2>&1 | tail -n1'
archive "$HEALER_IMAGE" healer
end=$(now)
log "image $HEALER_IMAGE: $(image_size "$HEALER_IMAGE") bytes"
log "times: buildah bud ($isolation) $((built - start)) s, run + archives $((end - built)) s"
