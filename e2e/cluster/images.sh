#!/usr/bin/env bash
# Build the two images the node needs, with no registry, as docker-archive tarballs that
# `ctr -n k8s.io images import` loads:
#   registry.k8s.io/pause:<PauseVersion>  the sandbox image: upstream's own build/pause/linux/pause.c
#                                          from the k8s.io/kubernetes module (Go module cache), built
#                                          as its Makefile does (gcc -Os -Wall -Werror -static)
#   healer.local/busybox:<version>        the test pod's image: Debian's busybox-static
#   healer.local/coredns:<version>        the cluster's DNS: build-node.sh's CoreDNS, uid 65532
# Usage: images.sh OUTDIR   (writes OUTDIR/{pause,busybox,coredns}.tar; prints the image names)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
out="${1:?usage: images.sh OUTDIR}"
mkdir -p "$out"

module_dir="$(cd "$here/node" && GOFLAGS=-mod=readonly go_module_dir "k8s.io/kubernetes@$KUBERNETES_VERSION")"
pause_version="$(sed -n 's/^[[:space:]]*PauseVersion = "\(.*\)"/\1/p' "$module_dir/cmd/kubeadm/app/constants/constants.go")"
[ -n "$pause_version" ] || { echo "images: no PauseVersion in kubeadm's constants" >&2; exit 1; }

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
for applet in sh sleep echo cat ls ip ps hostname wget nc nslookup; do ln -s busybox "$rootfs/bin/$applet"; done
docker_archive "$out/busybox.tar" "healer.local/busybox:$busybox_version" "$rootfs" '["/bin/sh"]'
rm -rf "${rootfs:?}"/*

coredns_bin="$COREDNS_BIN"
[ -x "$coredns_bin" ] || { echo "images: missing $coredns_bin: run build-node.sh" >&2; exit 1; }
mkdir -p "$rootfs/etc/coredns"
cp "$coredns_bin" "$rootfs/coredns"
docker_archive "$out/coredns.tar" "healer.local/coredns:$COREDNS_VERSION" "$rootfs" '["/coredns"]' 65532
echo "PAUSE_IMAGE=registry.k8s.io/pause:$pause_version BUSYBOX_IMAGE=healer.local/busybox:$busybox_version"
