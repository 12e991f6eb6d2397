#!/usr/bin/env bash
# Build the two images the node needs, with no registry, as docker-archive tarballs that
# `ctr -n k8s.io images import` loads:
#   registry.k8s.io/pause:<PauseVersion>  the sandbox image: upstream's own build/pause/linux/pause.c
#                                          from the k8s.io/kubernetes module (Go module cache), built
#                                          as its Makefile does (gcc -Os -Wall -Werror -static)
#   healer.local/busybox:<version>        the test pod's image: Debian's busybox-static
# Usage: images.sh OUTDIR   (writes OUTDIR/pause.tar and OUTDIR/busybox.tar; prints the image names)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/../versions.env
source "$here/../versions.env"
out="${1:?usage: images.sh OUTDIR}"
mkdir -p "$out"

module_dir="$(cd "$here/node" && GOFLAGS=-mod=readonly go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" |
  sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
pause_version="$(sed -n 's/^[[:space:]]*PauseVersion = "\(.*\)"/\1/p' "$module_dir/cmd/kubeadm/app/constants/constants.go")"
[ -n "$pause_version" ] || { echo "images: no PauseVersion in kubeadm's constants" >&2; exit 1; }

# docker_archive TARBALL REPO:TAG ROOTFS_DIR ENTRYPOINT_JSON
docker_archive() {
  local tarball="$1" tag="$2" rootfs="$3" entrypoint="$4" work layer_sha config config_sha
  work="$(mktemp -d)"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
  layer_sha="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  config="{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":$entrypoint,\"Env\":[\"PATH=/bin\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_sha\"]}}"
  config_sha="$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)"
  printf '%s' "$config" >"$work/$config_sha.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config_sha" "$tag" >"$work/manifest.json"
  tar --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -cf "$tarball" manifest.json "$config_sha.json" layer.tar
  rm -rf "$work"
}

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT
gcc -Os -Wall -Werror -static -DVERSION="v$pause_version-healer" -o "$rootfs/pause" "$module_dir/build/pause/linux/pause.c"
strip "$rootfs/pause"
docker_archive "$out/pause.tar" "registry.k8s.io/pause:$pause_version" "$rootfs" '["/pause"]'
rm -rf "${rootfs:?}"/*

busybox_bin="/bin/busybox"
if ! file -L "$busybox_bin" 2>/dev/null | grep -q 'statically linked'; then
  echo "images: needs Debian's busybox-static (/bin/busybox, statically linked)" >&2
  exit 1
fi
busybox_version="$(dpkg-query -W -f='${Version}' busybox-static | sed 's/^[0-9]*://; s/-.*//')"
mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/etc"
cp "$busybox_bin" "$rootfs/bin/busybox"
for applet in sh sleep echo cat ls ip ps hostname wget nc; do ln -s busybox "$rootfs/bin/$applet"; done
docker_archive "$out/busybox.tar" "healer.local/busybox:$busybox_version" "$rootfs" '["/bin/sh"]'
echo "PAUSE_IMAGE=registry.k8s.io/pause:$pause_version BUSYBOX_IMAGE=healer.local/busybox:$busybox_version"
