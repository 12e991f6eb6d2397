#!/usr/bin/env bash
# `make cluster-demo` and `make cluster-down`: the cluster tier's one node, offered to look at and left
# running. The tier's own scripts (steps.sh: the checks and the build; node-up.sh, argo-up.sh,
# healer-up.sh, drill-argo.sh) in a node of its own (state in $HEALER_DEMO_DIR, default /tmp/healer-demo;
# network namespace healer-demo; cgroups under healer-demo), so neither node-down.sh can touch the other's.
#   demo.sh check  root, Debian's packages, Go until the upstream binaries are cached (Node.js until Argo's
#                  UI is built), free ports, make cluster not running: the first miss is one line, exit 1
#                  (root, a conflict) or 3 (a requirement)
#   demo.sh up     the checks; then, holding the lock, installs healer into .venv (make's $DEMO_STAMP, as the
#                  checkout's owner), builds what is not cached, brings up the node, Argo and its UI, the chart
#                  with two injected Triton pods, runs a wrong-weights drill healed through Argo's heal pod,
#                  relays the API server and Argo's UI to 127.0.0.1 of this machine (relay.py: no link, route
#                  or rule added), checks both answer there, and prints where and how. Again while one runs:
#                  says so (or that its certificates expired), prints it again.
#   demo.sh down   node-down.sh for the demo's node: no process, mount, network namespace, iptables rule,
#                  cgroup or state left (exit 1 naming what is, if anything)
# make cluster and make cluster-demo never run beside each other (2 cores; both nodes make the same mount
# points on the host): the one that comes second says so in one line and changes nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# certificates for a year (common.sh's CERT_DAYS; the tier's are for 2 days): the demo is left running
export HEALER_NODE_DIR="${HEALER_DEMO_DIR:-/tmp/healer-demo}" HEALER_NODE_NETNS=healer-demo HEALER_NODE_CERT_DAYS=365
# shellcheck source=SCRIPTDIR/steps.sh
source "$here/steps.sh"
log_prefix=cluster-demo
argo_port="${HEALER_DEMO_ARGO_PORT:-2746}"
api_port="${HEALER_DEMO_API_PORT:-16443}"
say() { printf 'cluster-demo: %s\n' "$*" >&2; }
demo_ready() { [ -e "$BASE/demo-ready" ]; }
relay_alive() { kill -0 "$(cat "$BASE/pids/relay" 2>/dev/null)" 2>/dev/null; }

# certificates_valid: the API server's certificate (node-up.sh issues all the node's at once) not expired;
# else one line saying when it did and what to do. A line, too, when it expires within a week.
certificates_valid() {
  local certificate="$BASE/pki/apiserver.crt" until
  until="$(openssl x509 -in "$certificate" -noout -enddate 2>/dev/null)" ||
    { say "$certificate is missing or unreadable: make cluster-down && make cluster-demo"; return 1; }
  until="${until#notAfter=}"
  if ! openssl x509 -in "$certificate" -noout -checkend 0 >/dev/null; then
    say "up, but its certificates expired on $until (the API server and the kubelet refuse them): make cluster-down && make cluster-demo"
    return 1
  fi
  openssl x509 -in "$certificate" -noout -checkend 604800 >/dev/null ||
    say "its certificates expire on $until: make cluster-down && make cluster-demo before then"
}

port_free() { python3 -c 'import socket, sys; socket.create_server(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }
port_holder() { ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(("[^"]*"' | head -n 1 | cut -d'"' -f2; }

check() {
  require_root cluster-demo
  # up prints it again, or says one is starting (its relay may hold the ports already)
  if demo_ready || [ -e "$BASE/demo-starting" ]; then return 0; fi
  check_requirements cluster-demo || exit 3
  local port name
  for port in "$argo_port" "$api_port"; do
    name=HEALER_DEMO_API_PORT
    [ "$port" != "$argo_port" ] || name=HEALER_DEMO_ARGO_PORT
    if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
      say "$name=$port: not a port number"
      exit 3
    fi
    port_free "$port" ||
      { say "port $port on 127.0.0.1 is in use$(holder="$(port_holder "$port")" && [ -n "$holder" ] && echo " (by $holder)"): free it, or set $name to a free one"; exit 3; }
  done
  if netns_exists "$TIER_NETNS"; then
    say "the cluster tier's node is up here (make cluster is running, or a killed one left it: bash e2e/cluster/node-down.sh)"
    exit 1
  fi
}

# teardown: an up that did not finish (a failed step, Ctrl-C) removes all it started
teardown() {
  demo_ready && return 0
  say "not up: removing what it started"
  node_down || true
}

# open_to_this_machine: the operator's token for Argo's UI, a kubeconfig for this machine, the relay,
# and a check that each printed address answers from here
open_to_this_machine() {
  workflow_reader_account
  (umask 077 && printf 'Bearer %s\n' "$(kubectl -n ml create token operator --duration=24h)" >"$BASE/argo-token")
  cat >"$BASE/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: healer-demo, cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$BASE/pki/ca.crt"}}]
users: [{name: admin, user: {client-certificate: "$BASE/pki/admin.crt", client-key: "$BASE/pki/admin.key"}}]
contexts: [{name: healer-demo, context: {cluster: healer-demo, user: admin, namespace: ml}}]
current-context: healer-demo
YAML
  [ -x "$python" ] || python=python3
  setsid "$python" "$here/relay.py" "/run/netns/$NETNS" "$api_port=127.0.0.1:$APISERVER_PORT" \
    "$argo_port=$ARGO_SERVER_IP:2746" </dev/null >"$BASE/logs/relay.log" 2>&1 9<&- &
  echo $! >"$BASE/pids/relay"
  ui_answers() { [ "$(curl -s -o /dev/null -w '%{http_code}' -m 5 --cacert "$BASE/pki/ca.crt" "https://localhost:$argo_port/")" = 200 ]; }
  wait_for "Argo's UI at https://localhost:$argo_port" 30 ui_answers
  curl -fsS -m 10 --cacert "$BASE/pki/ca.crt" -H "Authorization: $(cat "$BASE/argo-token")" \
    "https://localhost:$argo_port/api/v1/workflows/ml" | grep -q '"name":"healer-' ||
    die "Argo's API at https://localhost:$argo_port lists no healer workflow in ml with the operator's token"
  "$NODE_BIN/kubectl" --kubeconfig "$BASE/kubeconfig" get pods -o wide >&2 ||
    die "the API server at https://127.0.0.1:$api_port does not answer with $BASE/kubeconfig"
}

# install_venv: healer with its embedded stack in .venv (the Makefile's $DEMO_STAMP; nothing when it is
# up to date). Under the lock and after demo-starting: two make cluster-demo never pip into one .venv.
# As the checkout's owner (runuser; under sudo that is the user who ran it): a .venv pip made as root
# would fail that user's make test and make dev with Permission denied. One already owned by another
# user stops the demo with one line on how to give it back.
install_venv() {
  local owner venv_owner
  local -a as_owner=()
  owner="$(stat -c %U "$root")"
  venv_owner="$(stat -c %U "$root/.venv" 2>/dev/null)" || venv_owner="$owner"
  if [ "$venv_owner" != "$owner" ]; then
    say "$root/.venv belongs to $venv_owner, the checkout to $owner: sudo chown -R $owner $root/.venv, then make cluster-demo"
    exit 1
  fi
  [ "$owner" = "$(id -un)" ] || as_owner=(runuser -u "$owner" --)
  "${as_owner[@]}" make -s --no-print-directory -C "$root" "${DEMO_STAMP:-.venv/.installed-embedded}" 9<&- ||
    { say "installing healer into $root/.venv as $owner failed (pip's lines above)"; exit 1; }
}

# heal_workflow: the drill's heal, as drill-argo.sh recorded it; else the newest rollback workflow (the
# healer.io/model label healer puts on each), never the newest of all (healer-stage-hourly's each hour)
heal_workflow() {
  local name
  name="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["runs"][-1]["workflow"])' \
    "$BASE/drill-argo.json" 2>/dev/null)" ||
    name="$("$NODE_BIN/kubectl" --kubeconfig "$BASE/kubeconfig" get workflows -l healer.io/model \
      --sort-by=.metadata.creationTimestamp -o name 2>/dev/null | tail -n 1)"
  printf '%s\n' "${name#*/}"
}

summary() {
  local kubectl_cmd=kubectl healer_cmd=healer workflow
  command -v kubectl >/dev/null || kubectl_cmd="$NODE_BIN/kubectl"
  command -v healer >/dev/null || healer_cmd="$root/.venv/bin/healer"
  workflow="$(heal_workflow)"
  cat <<EOF

healer on a one-node Kubernetes (a real kubelet, containerd and runc), left running:
  Argo UI     https://localhost:$argo_port/workflows/ml
              it listens on 127.0.0.1 of this machine only; from another: ssh -L $argo_port:localhost:$argo_port <this machine>
              log in: paste the line in $BASE/argo-token ("Bearer ...", 24 h) under "client authentication"
              its certificate is signed by the node's CA ($BASE/pki/ca.crt): trust that, or accept the warning
  kubeconfig  $BASE/kubeconfig (cluster-admin, namespace ml; the API server at https://127.0.0.1:$api_port)
  the heal    ${workflow:-(not found: kubectl get workflows -l healer.io/model)}: the drill's wrong-weights push, rolled back by Argo's heal pod
try (as root):
EOF
  printf '  %-62s # %s\n' "export KUBECONFIG=$BASE/kubeconfig" "" \
    "$kubectl_cmd get pods" "two Triton pods, each with the injected healer sidecar" \
    "$healer_cmd status" "each sidecar's view of its Triton, through the API server" \
    "$healer_cmd runs list" "the rollbacks Argo ran" \
    "$healer_cmd runs get ${workflow:-NAME} -o wide" "one, step by step" \
    "$kubectl_cmd create token operator --duration=24h" "a new token for Argo's UI" | sed 's/ *# $//'
  cat <<EOF
stop: make cluster-down (everything it started goes: processes, mounts, network namespace, iptables rules, $BASE)
EOF
}

up() {
  check
  if demo_ready; then
    certificates_valid || exit 1
    relay_alive || { say "the node is up but its relay (127.0.0.1:$argo_port, :$api_port) is not running: make cluster-down, then make cluster-demo"; exit 1; }
    say "already running (up since $(date -r "$BASE/demo-ready" '+%F %H:%M')); make cluster-down stops it"
    summary
    return 0
  fi
  if ! hold_cluster_lock; then
    if [ -e "$BASE/demo-starting" ]; then
      say "a make cluster-demo is starting here (pid $(cat "$BASE/demo-starting")): it prints the address when it is up"
    else
      say "make cluster is running here: not started beside it"
    fi
    exit 1
  fi
  if [ -e "$BASE" ] || netns_exists "$NETNS"; then
    say "a demo that did not finish is left in $BASE: make cluster-down removes it"
    exit 1
  fi
  local started=$SECONDS step
  mkdir -p "$BASE"
  echo $$ >"$BASE/demo-starting"
  trap teardown EXIT
  trap 'exit 130' INT TERM
  install_venv
  build_components
  for step in node-up.sh argo-up.sh healer-up.sh "drill-argo.sh 1"; do
    # shellcheck disable=SC2086 # a step and its arguments
    run_step $step || { diagnose; exit 1; }
  done
  open_to_this_machine
  rm -f "$BASE/demo-starting"
  touch "$BASE/demo-ready"
  exec 9<&-
  say "up in $((SECONDS - started)) s"
  summary
}

down() {
  require_root cluster-down
  if [ ! -e "$BASE" ] && ! netns_exists "$NETNS"; then
    say "no demo here: nothing to stop"
    return 0
  fi
  node_down
  say "stopped: nothing of it left"
}

case "${1:-up}" in
  check) check ;;
  up) up ;;
  down) down ;;
  *) say "usage: demo.sh check|up|down" && exit 64 ;;
esac
