#!/usr/bin/env bash
# The local base image: Debian bookworm minbase with Debian's python3 (3.11), venv and pip, from Debian's
# packages only (mmdebstrap), imported into containers-storage with `podman import` (buildah and podman
# share /var/lib/containers/storage, so `buildah bud` finds it as localhost/healer-base:...).
#
# It stands in for python:3.11.14-slim-bookworm, which needs docker.io. Differences the healer Dockerfile
# cares about: python is /usr/bin/python (python-is-python3), pip is Debian's python3-pip (23.0.1, which
# has `pip --python`), both on PATH; the interpreter is Debian's 3.11.2 + security patches, not 3.11.14.
#
#   sudo nice -n 19 e2e/images/build-base.sh          # root: mmdebstrap, podman import
#
# The rootfs tarball and a package manifest are kept in the cache; the image is re-imported from the
# tarball when containers-storage lacks it. Rebuild: FORCE=1.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

tarball="$cache/base-$DEBIAN_SUITE-py3.11.tar"
packages="python3,python3-venv,python3-pip,python-is-python3,ca-certificates"
start=$(now)
if [ ! -s "$tarball" ] || [ -n "${FORCE:-}" ]; then
  log "mmdebstrap $DEBIAN_SUITE minbase + $packages"
  # No docs, man pages or locales (as the slim images); apt lists and caches are cleaned by mmdebstrap.
  mmdebstrap --variant=minbase --format=tar --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="chroot \"\$1\" dpkg-query -W -f '\${Package}=\${Version}\n' > '$cache/base-manifest.txt'" \
    --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/tmp/*' \
    "$DEBIAN_SUITE" "$tarball.part" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
    "deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main"
  mv "$tarball.part" "$tarball"
fi
debootstrapped=$(now)

if [ -n "${FORCE:-}" ] || ! podman image exists "$BASE_IMAGE"; then
  podman rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
  # What python:*-slim sets that matters here; the rest (CMD) as the official image has it.
  podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --message "debian $DEBIAN_SUITE minbase + $packages (mmdebstrap)" \
    "$tarball" "$BASE_IMAGE" >/dev/null
fi
end=$(now)
podman run --rm --network none --read-only --user 65534:65534 "$BASE_IMAGE" sh -c 'python --version; pip --version; python -c "import venv, ssl; print(\"venv, ssl ok\")"'
log "tarball $(du -h "$tarball" | cut -f1), image $(image_size "$BASE_IMAGE") bytes"
log "times: mmdebstrap $((debootstrapped - start)) s, import $((end - debootstrapped)) s"
sha256sum "$tarball" | cut -d' ' -f1 > "$tarball.sha256"
