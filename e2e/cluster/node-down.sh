#!/usr/bin/env bash
# Stop what node-up.sh started and leave nothing behind: processes, mounts, the network namespace
# (with its veth pair, CNI bridge, pod veths and iptables rules), cgroups, CNI state, $BASE.
# Safe to run twice, or after a node-up.sh that failed half way. Exit 1 if anything is left.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
[ "$(id -u)" = 0 ] || die "needs root"

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
stop_pid() { # PID NAME: SIGTERM, up to 10 s, then SIGKILL
  local pid="$1" name="$2"
  alive "$pid" || return 0
  log "stopping $name ($pid)"
  kill -TERM "$pid" 2>/dev/null
  local started=$SECONDS
  for _ in $(seq 100); do
    if ! alive "$pid"; then
      [ $((SECONDS - started)) -lt 2 ] || log "$name stopped after $((SECONDS - started)) s"
      return 0
    fi
    sleep 0.1
  done
  log "$name ($pid) ignored SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 50); do alive "$pid" || return 0; sleep 0.1; done
}
pid_of() { cat "$BASE/pids/$1" 2>/dev/null; }

# 1. The demo's relay (its ports on the host), the kubelet (so it restarts nothing), then every container.
for name in relay pod-discovery prometheus alertmanager kube-proxy kubelet; do stop_pid "$(pid_of "$name")" "$name"; done
if [ -S "$CONTAINERD_SOCK" ] && alive "$(pid_of containerd)"; then
  for task in $(ctr tasks ls -q 2>/dev/null); do
    ctr tasks kill -s SIGKILL "$task" >/dev/null 2>&1
    ctr tasks delete -f "$task" >/dev/null 2>&1
  done
  for container in $(ctr containers ls -q 2>/dev/null); do ctr containers rm "$container" >/dev/null 2>&1; done
fi
stop_pid "$(pid_of containerd)" containerd

# 2. Whatever is still in the node's mount namespace (shims, container processes): all ours.
holder="$(pid_of mount-holder)"
if alive "$holder"; then
  node_mnt="$(readlink "/proc/$holder/ns/mnt")"
  if [ "$node_mnt" != "$(readlink /proc/self/ns/mnt)" ]; then
    for proc in /proc/[0-9]*; do
      pid="${proc#/proc/}"
      if [ "$pid" = "$holder" ] || [ "$(readlink "$proc/ns/mnt" 2>/dev/null)" != "$node_mnt" ]; then continue; fi
      log "killing leftover $(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null | cut -c1-80) ($pid)"
      kill -KILL "$pid" 2>/dev/null
    done
  fi
  # 3. The holder last: its mount namespace, and every mount in it (overlay rootfs, pod netns,
  #    kubelet volumes), goes with it.
  stop_pid "$holder" "mount namespace holder"
fi

# 4. The control plane, then anything else still in the netns (all ours: nothing else runs there).
for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$(pid_of "$name")" "$name"; done
if ip netns list 2>/dev/null | grep -qw "$NETNS"; then
  for pid in $(ip netns pids "$NETNS" 2>/dev/null); do stop_pid "$pid" "leftover in netns"; done
fi

# 5. cgroups: the kubelet's tree under cgroupRoot, deepest first (each is empty once its tasks are gone).
for controller in $(cgroup_controllers --all); do
  root="/sys/fs/cgroup/$controller/$CGROUP_ROOT"
  [ -d "$root" ] || continue
  find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# 6. The netns: its veth pair, the CNI bridge, the pods' veths and its iptables rules go with it.
if ip netns list 2>/dev/null | grep -qw "$NETNS"; then
  log "deleting netns $NETNS"
  ip netns del "$NETNS"
fi

# 7. The mount points node-up.sh made on the host (empty: their tmpfs went with the namespace).
if [ -f "$BASE/made-dirs" ]; then
  while read -r dir; do rmdir "$dir" 2>/dev/null || log "LEFT: $dir (not empty)"; done <"$BASE/made-dirs"
fi

if [ -f "$BASE/made-netns-mount" ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
  umount /run/netns 2>/dev/null && rmdir /run/netns 2>/dev/null
fi

# 8. Check, then remove $BASE (only if nothing is mounted under it).
left=0
for name in "$BASE"/pids/*; do
  [ -f "$name" ] || continue
  if alive "$(cat "$name")"; then log "LEFT: process ${name##*/} ($(cat "$name"))"; left=1; fi
done
if grep -qF " $BASE" /proc/self/mountinfo; then log "LEFT: mounts under $BASE"; left=1; fi
if ip netns list 2>/dev/null | grep -qw "$NETNS"; then log "LEFT: netns $NETNS"; left=1; fi
for controller in $(cgroup_controllers --all); do
  if [ -d "/sys/fs/cgroup/$controller/$CGROUP_ROOT" ]; then log "LEFT: cgroup $controller/$CGROUP_ROOT"; left=1; fi
done
if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then log "LEFT: $CNI_BRIDGE in the host netns"; left=1; fi
if iptables -w -S 2>/dev/null | grep -q "$EGRESS_CHAIN"; then log "LEFT: $EGRESS_CHAIN in the host's iptables"; left=1; fi
if [ "$left" = 0 ]; then
  rm -rf "$BASE"
  log "down: nothing left"
fi
exit "$left"
