# shellcheck shell=bash
# What the tier (run.sh, `make cluster`) and the demo (demo.sh, `make cluster-demo`) share, sourced
# after setting HEALER_NODE_DIR and HEALER_NODE_NETNS (or not: the tier's defaults): the up-front
# checks, the build of every binary and image, one step run and timed, what a failed step leaves to
# read, and the lock that keeps the two from starting beside each other.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_dir="$root/e2e/cluster"
# shellcheck disable=SC2034 # used by run.sh and demo.sh
TIER_NETNS="healer-node" # the tier's node (run.sh: common.sh's defaults)
# shellcheck disable=SC2034
DEMO_NETNS="healer-demo" # the demo's node (demo.sh sets HEALER_NODE_NETNS to it)

# Go where its installer puts it (https://go.dev/doc/install) when it is not on PATH: sudo's secure_path
# leaves /usr/local/go/bin out. HEALER_GO_DIR: another such folder.
GO_DIR="${HEALER_GO_DIR:-/usr/local/go/bin}"
if ! type -P go >/dev/null && [ -x "$GO_DIR/go" ]; then export PATH="$PATH:$GO_DIR"; fi

netns_exists() { ip netns list 2>/dev/null | grep -qw "$1"; }

# require_root PREFIX: exit 1 with one line unless root
require_root() {
  [ "$(id -u)" = 0 ] ||
    { echo "$1: needs root (network and mount namespaces, cgroups, containerd): run it with sudo" >&2; exit 1; }
}

# go_built_missing: whether a binary (or the CRDs) that e2e/build.sh, build-node.sh or
# build-argo-images.sh builds from the Go module proxy is not cached yet; with all cached, no Go is needed
go_built_missing() {
  local file
  for file in "$ETCD" "$APISERVER" "$cache/argo-$ARGO_VERSION/bin/argo" "$cache/argo-$ARGO_VERSION/bin/workflow-controller" \
    "$HELM" "$cache/otelcol-$OTELCOL_VERSION/bin/otelcol-healer" "$COREDNS_BIN" "$cache/argoexec-$ARGO_VERSION/bin/argoexec" \
    "$cache/kubernetes-node-$KUBERNETES_VERSION"/bin/{kubelet,kube-scheduler,kube-controller-manager,kube-proxy,kubectl}; do
    [ -x "$file" ] || return 0
  done
  [ ! -f "$cache/crds-cert-manager-$CERT_MANAGER_VERSION-prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/.complete" ]
}

# check_requirements PREFIX [COMMAND=PACKAGE ...]: the node's Debian packages (and the caller's extra
# commands), python3's venv while .venv is not made, Go while an upstream binary is not cached, Node.js
# while Argo's UI is not built and Argo is. Prints one line naming everything missing and how to install
# it, and returns 3; returns 0 when nothing is.
check_requirements() {
  local prefix="$1" pair command package plugin min_go version venv_python
  shift
  local -a missing=() packages=() other=()
  for pair in containerd=containerd containerd-shim-runc-v2=containerd ctr=containerd runc=runc \
    iptables=iptables ip=iproute2 ss=iproute2 nsenter=util-linux unshare=util-linux flock=util-linux runuser=util-linux \
    openssl=openssl gcc=gcc strip=binutils file=file curl=curl mmdebstrap=mmdebstrap buildah=buildah \
    podman=podman python3=python3 "$@"; do
    command="${pair%%=*}" package="${pair#*=}"
    if ! type -P "$command" >/dev/null; then missing+=("$command") packages+=("$package"); fi
  done
  for plugin in bridge host-local loopback portmap; do
    if [ ! -x "$CNI_BIN/$plugin" ]; then missing+=("$CNI_BIN/$plugin") packages+=(containernetworking-plugins); fi
  done
  if type -P file >/dev/null && ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
    missing+=("a static /bin/busybox") packages+=(busybox-static)
  fi
  if [ ! -e /usr/lib/x86_64-linux-gnu/libc.a ] && [ ! -e /usr/lib/libc.a ]; then
    missing+=("libc.a (the static pause image)") packages+=(libc6-dev)
  fi
  # the Makefile's $(PYTHON) -m venv, which Debian's python3 cannot without python3-venv (ensurepip)
  venv_python="$(type -P python3.11 || type -P python3 || true)"
  if [ ! -x "$root/.venv/bin/python" ] && [ -n "$venv_python" ] && ! "$venv_python" -c 'import ensurepip, venv' 2>/dev/null; then
    missing+=("$(basename "$venv_python") -m venv") packages+=("$(basename "$venv_python")-venv")
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    local named
    named="$(printf '%s, ' "${missing[@]}")"
    other+=("missing ${named%, } (apt-get install $(printf '%s\n' "${packages[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//'))")
  fi
  if go_built_missing; then
    # the wrappers' highest go line: the upstream binaries are built from the Go module proxy on first use
    min_go="$(sed -n 's/^go //p' "$root"/e2e/*/go.mod "$cluster_dir"/*/go.mod | sort -V | tail -n 1)"
    version="$(go env GOVERSION 2>/dev/null || true)"
    version="${version#go}"
    if [ -z "$version" ]; then
      other+=("missing Go >= $min_go, which builds the upstream binaries on first use (none on PATH nor in $GO_DIR; https://go.dev/doc/install)")
    elif [ "$(printf '%s\n%s\n' "$min_go" "$version" | sort -V | head -n 1)" != "$min_go" ]; then
      other+=("Go $version ($(type -P go)) is too old: Go >= $min_go (https://go.dev/doc/install)")
    fi
  fi
  if [ ! -f "$cache/argo-ui-$ARGO_VERSION/app/index.html" ] && { go_built_missing || type -P go >/dev/null; } &&
    ! { command -v node && command -v npm; } >/dev/null 2>&1; then
    other+=("missing Node.js >= 20 and npm, which build Argo's web UI on first use (apt-get install nodejs npm)")
  fi
  [ "${#other[@]}" = 0 ] && return 0
  local line="" item
  for item in "${other[@]}"; do line+="${line:+; }$item"; done
  echo "$prefix: $line" >&2
  return 3
}

# hold_cluster_lock: fd 9 on run.sh, held by whichever of make cluster and make cluster-demo is
# starting (the tier for its whole run); fails at once when the other holds it. Every command these
# scripts start gets 9<&- (a node process holding the lock would hold it for the node's life).
hold_cluster_lock() {
  exec 9<"$cluster_dir/run.sh"
  flock -n 9
}

# build_components: the tier's binaries and images, each built on first use and cached
build_components() {
  local started=$SECONDS
  bash "$root/e2e/build.sh" >/dev/null 9<&-
  bash "$cluster_dir/build-node.sh" >/dev/null 9<&-
  bash "$root/e2e/images/build-healer.sh" >/dev/null 9<&-
  bash "$root/e2e/images/build-triton.sh" >/dev/null 9<&-
  bash "$cluster_dir/build-argo-images.sh" >/dev/null 9<&-
  echo "${log_prefix:-cluster}: binaries and images ready after $((SECONDS - started)) s" >&2
}

# run_step STEP [ARGS...]: run e2e/cluster/STEP, say how long it took and whether it passed
run_step() {
  local started=$SECONDS
  if bash "$cluster_dir/$1" "${@:2}" 9<&-; then
    echo "${log_prefix:-cluster}: $* passed in $((SECONDS - started)) s" >&2
  else
    echo "${log_prefix:-cluster}: $* FAILED after $((SECONDS - started)) s" >&2
    return 1
  fi
}

# diagnose: what a failed step leaves to read before node-down.sh removes it: the pods and events,
# the node's tmpfs and disk use, the kubelet's and containerd's last lines
diagnose() {
  {
    kubectl get pods -A -o wide
    kubectl get events -A --sort-by=.lastTimestamp | tail -n 40
    # shellcheck disable=SC2086 # a list of paths
    nsenter --mount="/proc/$(cat "$BASE/pids/mount-holder")/ns/mnt" -- df -h $NODE_TMPFS_DIRS
    df -h "$BASE"
    for name in kubelet containerd; do echo "--- $name.log"; tail -n 60 "$BASE/logs/$name.log"; done
  } 9<&- >&2 2>&1 || true
}

# node_down: node-down.sh for this node (HEALER_NODE_DIR, HEALER_NODE_NETNS); non-zero if it left anything
node_down() {
  local code=0
  bash "$cluster_dir/node-down.sh" 9<&- || code=$?
  [ "$code" = 0 ] || echo "${log_prefix:-cluster}: node-down.sh left something behind (exit $code)" >&2
  return "$code"
}
