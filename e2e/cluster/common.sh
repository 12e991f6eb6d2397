# shellcheck shell=bash
# shellcheck disable=SC2034 # the settings are used by the scripts that source this file
# Shared settings and helpers for node-up.sh and node-down.sh (sourced; needs versions.env first).
BASE="${HEALER_NODE_DIR:-/tmp/healer-node}"
NETNS="${HEALER_NODE_NETNS:-healer-node}"
NODE_NAME="healer-node"
NODE_IP="10.250.0.1"     # on a veth pair inside the netns; the kubelet refuses a loopback node IP
NODE_IF="hnode0"
POD_CIDR="10.244.0.0/24" # the CNI bridge's range, inside the netns only
CNI_BRIDGE="healer-cni0"
CNI_NETWORK="healer-node"
CNI_BIN="/usr/lib/cni"   # Debian's containernetworking-plugins
EGRESS_CHAIN="HEALER-POD-EGRESS"
CGROUP_ROOT="healer-node" # the kubelet's cgroupRoot: /sys/fs/cgroup/<controller>/healer-node
APISERVER_PORT=6443       # fixed: the netns is ours alone
CONTAINERD_SOCK="$BASE/containerd/containerd.sock"
PAUSE_IMAGE="registry.k8s.io/pause:3.10.2" # kubeadm's PauseVersion for 1.37 (images.sh builds it)
# tmpfs inside the node's mount namespace (see node-up.sh)
NODE_TMPFS_DIRS="/run/containerd /run/netns /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods"
cache="${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}"
ETCD="$cache/etcd-$ETCD_VERSION/bin/etcd"
APISERVER="$cache/kubernetes-$KUBERNETES_VERSION/bin/kube-apiserver"
NODE_BIN="${HEALER_NODE_BIN:-$cache/kubernetes-node-$KUBERNETES_VERSION/bin}"


log() { printf 'e2e/cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

in_netns() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
in_netns_quiet() { nsenter --net="/run/netns/$NETNS" -- "$@" >/dev/null 2>&1; }
kubectl() { in_netns "$NODE_BIN/kubectl" --kubeconfig="$BASE/admin.kubeconfig" "$@"; }
ctr() { command ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# start NAME COMMAND...: in the netns, in its own session, logs in $BASE/logs, pid in $BASE/pids
start() {
  local name="$1"
  shift
  log "starting $name"
  setsid nsenter --net="/run/netns/$NETNS" -- "$@" </dev/null >"$BASE/logs/$name.log" 2>&1 &
  echo $! >"$BASE/pids/$name"
}
# start_node NAME COMMAND...: as start, also in the node's private mount namespace
start_node() {
  local name="$1"
  shift
  log "starting $name (node mount namespace)"
  setsid nsenter --net="/run/netns/$NETNS" --mount="/proc/$(cat "$BASE/pids/mount-holder")/ns/mnt" --wd=/ -- \
    "$@" </dev/null >"$BASE/logs/$name.log" 2>&1 &
  echo $! >"$BASE/pids/$name"
}

# wait_for WHAT SECONDS COMMAND...
wait_for() {
  local what="$1" seconds="$2" started=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $((SECONDS - started)) -ge "$seconds" ]; then
      log "$what: not ready after $seconds s; last log lines:"
      tail -n 30 "$BASE"/logs/*.log >&2 || true
      exit 1
    fi
    sleep 1
  done
  log "$what: ready after $((SECONDS - started)) s"
}

node_ready() {
  [ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
pod_running() { [ "$(kubectl get pod "$1" -o jsonpath='{.status.phase}')" = Running ]; }

cgroup_controllers() { # the cgroup v1 hierarchies under /sys/fs/cgroup; with --all also unified
  local dir                # (the hybrid cgroup2 mount, where runc makes the same tree)
  for dir in /sys/fs/cgroup/*/; do
    dir="${dir%/}"
    dir="${dir##*/}"
    if [ "$dir" != unified ] || [ "${1:-}" = --all ]; then printf '%s\n' "$dir"; fi
  done
}
