#!/usr/bin/env bash
# Shows the archives import into containerd as the kubelet would see them (`ctr -n k8s.io images import`),
# on a throwaway containerd of its own (own root, state and socket; the host's containerd, if any, is not
# touched), then stops it and removes its directories.
#
#   sudo nice -n 19 e2e/images/import-containerd.sh   # after build-healer.sh and build-triton.sh
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

dir="$(mktemp -d /tmp/healer-ctrd.XXXX)"
cat > "$dir/config.toml" <<CONF
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/sock"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
CONF
containerd --config "$dir/config.toml" > "$dir/containerd.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  umount "$dir"/root/* 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 50); do [ -S "$dir/sock" ] && break; sleep 0.2; done
for name in healer triton; do
  for format in docker oci; do
    start=$(now)
    ctr --address "$dir/sock" -n k8s.io images import "$cache/$name.$format.tar"
    log "$name.$format.tar imported in $(($(now) - start)) s"
  done
done
ctr --address "$dir/sock" -n k8s.io images ls
