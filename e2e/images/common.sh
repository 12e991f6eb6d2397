# Sourced by the e2e/images scripts: the cache, logging, timing. Not executable on its own.
# shellcheck shell=bash
images_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$images_here/../.." && pwd)"
cache="${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}/images"
mkdir -p "$cache"

# Debian bookworm, as the official python:3.11.14-slim-bookworm is: its python3 is 3.11.
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
BASE_IMAGE="${BASE_IMAGE:-localhost/healer-base:bookworm-py3.11}"
HEALER_IMAGE="${HEALER_IMAGE:-localhost/healer:dev}"
TRITON_IMAGE="${TRITON_IMAGE:-localhost/healer-triton:pytriton-0.7.0}"
PYTRITON_VERSION="${PYTRITON_VERSION:-0.7.0}"

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
now() { date +%s; }
# image_size IMAGE: the uncompressed size podman reports, in bytes.
image_size() { podman image inspect --format '{{.Size}}' "$1"; }
# archive IMAGE NAME: a docker-archive (what `ctr -n k8s.io images import` and `docker load` read) and an
# OCI archive, both under the cache; prints their sizes.
archive() {
  local image="$1" name="$2"
  rm -f "$cache/$name.docker.tar" "$cache/$name.oci.tar"
  podman save --format docker-archive -o "$cache/$name.docker.tar" "$image"
  podman save --format oci-archive -o "$cache/$name.oci.tar" "$image"
  ls -l "$cache/$name.docker.tar" "$cache/$name.oci.tar" >&2
}

# This machine (a Firecracker VM, cgroups v1+v2 hybrid, root without CAP_SYS_RESOURCE) needs two changes
# from podman's and buildah's defaults, given through a containers.conf of our own (CONTAINERS_CONF):
#  - runc, not crun: crun 1.8.1 refuses hybrid cgroups ("cgroups in hybrid mode not supported, drop all
#    controllers from cgroupv2"), --cgroups=disabled too;
#  - rlimits no higher than ours: podman's rootful default nofile/nproc (1048576/4194304) cannot be set
#    without CAP_SYS_RESOURCE ("crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted"; runc: "error
#    setting rlimit type 6"). On a host with CAP_SYS_RESOURCE and cgroups v2 neither matters.
#    Measured here: nproc 32768 works, 65536 does not (our hard limit reads 96365; something between
#    podman and runc holds less), so nproc is capped at 32768.
containers_conf="$cache/containers.conf"
nofile="$(ulimit -Hn)"
nproc="$(ulimit -Hu)"
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ]; then nofile=65536; fi
{
  printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' "$nofile" "$nofile" "$nproc" "$nproc"
  printf '[engine]\nruntime = "runc"\n'
} > "$containers_conf"
export CONTAINERS_CONF="$containers_conf"
