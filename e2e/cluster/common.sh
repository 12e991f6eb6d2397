# shellcheck shell=bash
# shellcheck disable=SC2034 # the settings are used by the scripts that source this file
# Shared settings and helpers for the scripts in e2e/cluster (sourced). Each of them starts
#   set -euo pipefail
#   here="$(cd "$(dirname "$0")" && pwd)"
#   source "$here/common.sh"
# and the ones that need the node up then call require_node_up.
# shellcheck source=SCRIPTDIR/../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh" # versions.env, root, python, cache
BASE="${HEALER_NODE_DIR:-/tmp/healer-node}"
NETNS="${HEALER_NODE_NETNS:-healer-node}"
NODE_NAME="healer-node"
NODE_IP="10.250.0.1"     # on a veth pair inside the netns; the kubelet refuses a loopback node IP
NODE_IF="hnode0"
POD_CIDR="10.244.0.0/24" # the CNI bridge's range, inside the netns only
SERVICE_CIDR="10.96.0.0/24" # ClusterIPs (kube-proxy's DNAT), inside the netns only
CNI_BRIDGE="healer-cni0"
CNI_NETWORK="healer-node"
CNI_BIN="/usr/lib/cni"   # Debian's containernetworking-plugins
EGRESS_CHAIN="HEALER-POD-EGRESS"
CGROUP_ROOT="$NETNS" # the kubelet's cgroupRoot, /sys/fs/cgroup/<controller>/<netns>: one tree per node (tier, demo)
APISERVER_PORT=6443       # fixed: the netns is ours alone
ARGO_SERVER_IP="10.96.0.20" # argo-server's Service: a fixed ClusterIP, for the node's own checks (pods use its DNS name)
DNS_SERVICE_IP="10.96.0.10" # kube-dns: CoreDNS (node-up.sh)
CONTAINERD_SOCK="$BASE/containerd/containerd.sock"
PAUSE_IMAGE="registry.k8s.io/pause:3.10.2" # kubeadm's PauseVersion for 1.37 (images.sh builds it)
# tmpfs inside the node's mount namespace (see node-up.sh)
NODE_TMPFS_DIRS="/run/containerd /run/netns /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods"
ETCD="$cache/etcd-$ETCD_VERSION/bin/etcd"
APISERVER="$cache/kubernetes-$KUBERNETES_VERSION/bin/kube-apiserver"
NODE_BIN="${HEALER_NODE_BIN:-$cache/kubernetes-node-$KUBERNETES_VERSION/bin}"
# CoreDNS is built from our own main.go (its plugin list): cached by version and that file's hash
COREDNS_BIN="$cache/coredns-$COREDNS_VERSION-$(sha256sum "$(dirname "${BASH_SOURCE[0]}")/coredns/main.go" | cut -c1-12)/bin/coredns"
HELM="$cache/helm-$HELM_VERSION/bin/helm" # e2e/build.sh's
# Days the node's CA and certificates are valid: 2 for the tier's run (it is torn down within the hour);
# the demo, left running, sets a year (demo.sh), and its "already running" checks they still are
CERT_DAYS="${HEALER_NODE_CERT_DAYS:-2}"


# docker_archive TARBALL REPO:TAG ROOTFS_DIR ENTRYPOINT_JSON [USER]: a one-layer image for
# `ctr images import`, PATH=/bin, running as USER (a uid) when given
docker_archive() {
  local tarball="$1" tag="$2" rootfs="$3" entrypoint="$4" user="${5:-}" work layer_sha config config_sha
  work="$(mktemp -d)"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
  layer_sha="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  config="{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":$entrypoint,\"Env\":[\"PATH=/bin\"]${user:+,\"User\":\"$user\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_sha\"]}}"
  config_sha="$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)"
  printf '%s' "$config" >"$work/$config_sha.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config_sha" "$tag" >"$work/manifest.json"
  tar --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -cf "$tarball" manifest.json "$config_sha.json" layer.tar
  rm -rf "$work"
}

# leaf NAME SUBJECT EXTENSIONS: a P-256 key and a certificate signed by the node's CA, in the current
# directory (run in $BASE/pki)
leaf() {
  printf 'basicConstraints=CA:FALSE\n%b' "$3" >"$1.ext"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$CERT_DAYS" -extfile "$1.ext" \
    -out "$1.crt" 2>/dev/null
}

log() { printf 'e2e/cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
require_node_up() { [ -e "$BASE/up" ] || die "the node is not up: run node-up.sh first"; }

in_netns() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
in_netns_quiet() { nsenter --net="/run/netns/$NETNS" -- "$@" >/dev/null 2>&1; }
kubectl() { in_netns "$NODE_BIN/kubectl" --kubeconfig="$BASE/admin.kubeconfig" "$@"; }
helm() { in_netns "$HELM" --kubeconfig="$BASE/admin.kubeconfig" "$@"; }
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

# egress_rule_first: the pod range's egress rule at the head of FORWARD (kube-proxy prepends its own
# jumps), and fail unless it is there.
egress_rule_first() {
  in_netns iptables -w -D FORWARD -s "$POD_CIDR" -j "$EGRESS_CHAIN" 2>/dev/null || true
  in_netns iptables -w -I FORWARD 1 -s "$POD_CIDR" -j "$EGRESS_CHAIN"
  [ "$(in_netns iptables -w -S FORWARD | sed -n 2p)" = "-A FORWARD -s $POD_CIDR -j $EGRESS_CHAIN" ] ||
    die "the egress rule is not first in FORWARD: $(in_netns iptables -w -S FORWARD | tr '\n' ';')"
  [ "$(in_netns iptables -w -S "$EGRESS_CHAIN" | tr '\n' ';')" = "-N $EGRESS_CHAIN;-A $EGRESS_CHAIN -d $POD_CIDR -j RETURN;-A $EGRESS_CHAIN -j DROP;" ] ||
    die "the egress chain is not as written: $(in_netns iptables -w -S "$EGRESS_CHAIN" | tr '\n' ';')"
}

# operator_account ROLE BINDING <<RULES: the ServiceAccount operator in ml (an operator's identity, for
# its token), with the Role ROLE in ml, whose rules (YAML list items, indented two spaces) are read from
# stdin, bound to it by the RoleBinding BINDING
operator_account() {
  local rules
  rules="$(cat)"
  kubectl apply -f - >&2 <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: operator, namespace: ml}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: $1, namespace: ml}
rules:
$rules
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: $2, namespace: ml}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: $1}
subjects: [{kind: ServiceAccount, name: operator, namespace: ml}]
YAML
}

# workflow_reader_account: the ServiceAccount operator in ml with read access to workflows, their pods
# and logs, as an operator logging into Argo's UI with its token has (argo-ui.sh, demo.sh)
workflow_reader_account() {
  operator_account workflow-reader operator-reads-workflows <<'YAML'
  - apiGroups: [argoproj.io]
    resources: [workflows, workflowtemplates, cronworkflows, workflowtaskresults]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [pods, pods/log, events]
    verbs: [get, list, watch]
YAML
}

# argo_server_answers: argo-server's Service answers (client auth mode: a request without a token is
# a 401, which is an answer)
argo_server_answers() {
  [ "$(in_netns curl -s -o /dev/null -w '%{http_code}' --cacert "$BASE/pki/ca.crt" -m 2 \
    "https://$ARGO_SERVER_IP:2746/api/v1/version")" = 401 ]
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
