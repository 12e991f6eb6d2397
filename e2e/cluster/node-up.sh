#!/usr/bin/env bash
# Spike for issue 16: a real one-node cluster on this machine, in its own network namespace.
#
#   etcd + kube-apiserver (flags as tests/e2e/control_plane.py) + kube-controller-manager +
#   kube-scheduler + containerd (Debian's, with runc and Debian's CNI plugins) + kubelet
#
# Everything runs in the network namespace $HEALER_NODE_NETNS (default healer-node), which has no
# uplink: loopback, one veth pair carrying the node IP ($NODE_IP), and the CNI bridge for the pod
# range ($POD_CIDR). containerd, its shims and the kubelet also share one private mount namespace
# (held by a `sleep` process), so every mount they make (overlay rootfs, pod netns, volumes) is in
# that namespace only and goes with it. A FORWARD rule in the netns drops anything from the pod
# range that is not for the pod range. Nothing is routed off the machine; there is no NAT.
#
# State, logs and PIDs: $HEALER_NODE_DIR (default /tmp/healer-node). Stop with node-down.sh.
# Needs root. Binaries: e2e/build.sh (etcd, kube-apiserver) and e2e/cluster/build-node.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"

[ "$(id -u)" = 0 ] || die "needs root (network and mount namespaces, cgroups, containerd)"
for binary in "$ETCD" "$APISERVER" "$NODE_BIN/kubelet" "$NODE_BIN/kube-scheduler" \
  "$NODE_BIN/kube-controller-manager" "$NODE_BIN/kubectl"; do
  [ -x "$binary" ] || die "missing $binary: run e2e/build.sh and e2e/cluster/build-node.sh"
done
for tool in containerd containerd-shim-runc-v2 runc ctr iptables openssl nsenter unshare gcc; do
  command -v "$tool" >/dev/null || die "missing $tool (apt-get install containerd runc containernetworking-plugins iptables busybox-static gcc)"
done
for plugin in bridge host-local loopback portmap; do
  [ -x "$CNI_BIN/$plugin" ] || die "missing CNI plugin $CNI_BIN/$plugin (apt-get install containernetworking-plugins)"
done
[ ! -e "$BASE/up" ] || die "$BASE/up exists: already up? run node-down.sh first"
! ip netns list | grep -qw "$NETNS" || die "netns $NETNS exists: run node-down.sh first"

mkdir -p "$BASE"/{logs,pids,pki,containerd,cni/net.d,cni/ipam,kubelet,pod-logs,images}
touch "$BASE/up"

# --- network namespace: loopback, the node IP on a veth pair, the egress rule -------------------
log "netns $NETNS: lo, $NODE_IP on $NODE_IF, FORWARD rule for $POD_CIDR"
# iproute2 makes /run/netns a shared bind mount of itself on first use; node-down.sh undoes that
# if it was not there before
if ! mountpoint -q /run/netns 2>/dev/null; then echo /run/netns >"$BASE/made-netns-mount"; fi
ip netns add "$NETNS"
in_netns ip link set lo up
in_netns ip link add "$NODE_IF" type veth peer name "${NODE_IF}p"
in_netns ip addr add "$NODE_IP/32" dev "$NODE_IF"
in_netns ip link set "${NODE_IF}p" up
in_netns ip link set "$NODE_IF" up
# Service addresses from the namespace's own processes (a check of argo-server's Service): a route so
# the packet reaches OUTPUT, where kube-proxy's DNAT sends it to a pod; still nothing leaves the machine.
in_netns ip route add "$SERVICE_CIDR" dev "$NODE_IF" src "$NODE_IP"
in_netns iptables -w -N "$EGRESS_CHAIN"
in_netns iptables -w -A "$EGRESS_CHAIN" -d "$POD_CIDR" -j RETURN
in_netns iptables -w -A "$EGRESS_CHAIN" -j DROP
in_netns iptables -w -I FORWARD 1 -s "$POD_CIDR" -j "$EGRESS_CHAIN"

# --- PKI -------------------------------------------------------------------------------------------
log "PKI in $BASE/pki"
(
  cd "$BASE/pki"
  ec=(-algorithm EC -pkeyopt ec_paramgen_curve:P-256)
  openssl genpkey "${ec[@]}" -out ca.key 2>/dev/null
  openssl req -x509 -new -key ca.key -subj /CN=healer-node-ca -days "$CERT_DAYS" -out ca.crt
  leaf apiserver /CN=kube-apiserver \
    "subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
  leaf admin /O=system:masters/CN=healer-node-admin "extendedKeyUsage=clientAuth\n"
  leaf kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=clientAuth\n"
  leaf kube-scheduler /CN=system:kube-scheduler "extendedKeyUsage=clientAuth\n"
  leaf kube-controller-manager /CN=system:kube-controller-manager "extendedKeyUsage=clientAuth\n"
  leaf kube-proxy /CN=system:kube-proxy "extendedKeyUsage=clientAuth\n"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub
)
for user in admin kubelet kube-scheduler kube-controller-manager kube-proxy; do
  cat >"$BASE/$user.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: healer-node, cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$BASE/pki/ca.crt"}}]
users: [{name: $user, user: {client-certificate: "$BASE/pki/$user.crt", client-key: "$BASE/pki/$user.key"}}]
contexts: [{name: healer-node, context: {cluster: healer-node, user: $user}}]
current-context: healer-node
YAML
done

# --- control plane ---------------------------------------------------------------------------------
start etcd "$ETCD" --name=node --data-dir="$BASE/etcd" \
  --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
  --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
  --initial-cluster=node=http://127.0.0.1:2380 --unsafe-no-fsync --log-level=warn
wait_for etcd 60 in_netns_quiet curl -fsS http://127.0.0.1:2379/health

start kube-apiserver "$APISERVER" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --advertise-address="$NODE_IP" \
  --secure-port="$APISERVER_PORT" --cert-dir="$BASE/apiserver-certs" \
  --tls-cert-file="$BASE/pki/apiserver.crt" --tls-private-key-file="$BASE/pki/apiserver.key" \
  --client-ca-file="$BASE/pki/ca.crt" --authorization-mode=RBAC,Node \
  --enable-admission-plugins=NodeRestriction \
  --kubelet-preferred-address-types=InternalIP --enable-aggregator-routing=true \
  --kubelet-client-certificate="$BASE/pki/admin.crt" --kubelet-client-key="$BASE/pki/admin.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$BASE/pki/sa.pub" --service-account-signing-key-file="$BASE/pki/sa.key" \
  --api-audiences=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=false --profiling=false --v=1
wait_for kube-apiserver 120 kubectl get --raw /readyz

start kube-controller-manager "$NODE_BIN/kube-controller-manager" \
  --kubeconfig="$BASE/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$BASE/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$BASE/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
  --service-account-private-key-file="$BASE/pki/sa.key" --root-ca-file="$BASE/pki/ca.crt" \
  --use-service-account-credentials=true --profiling=false --v=1
start kube-scheduler "$NODE_BIN/kube-scheduler" --kubeconfig="$BASE/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$BASE/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$BASE/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false --v=1

# --- the node's mount namespace, containerd, images -------------------------------------------------
# A private mount namespace that every node process joins (nsenter --mount): held by `sleep`.
# In it, tmpfs over the paths containerd 1.6 and the kubelet hard-code whatever their flags say
# (/run/containerd/{s,runc}, /run/netns/cni-*, /var/lib/kubelet/device-plugins, /var/lib/cni/results,
# /var/log/containers): what they write there goes with the namespace. A mount point that the
# host lacks is made here and removed by node-down.sh (listed in $BASE/made-dirs).
: >"$BASE/made-dirs"
for dir in $NODE_TMPFS_DIRS; do
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir"
    echo "$dir" >>"$BASE/made-dirs"
  fi
done
# shellcheck disable=SC2016 # expanded by the inner shell
setsid unshare --mount --propagation private sh -c \
  'for dir in $0; do mount -t tmpfs -o mode=0755,size=64m healer-node "$dir" || exit 1; done; exec sleep infinity' \
  "$NODE_TMPFS_DIRS" </dev/null >"$BASE/logs/mount-holder.log" 2>&1 &
echo $! >"$BASE/pids/mount-holder"
sleep 0.2
# the holder is `unshare`, then `sh`, until it execs sleep
for _ in $(seq 50); do
  [ "$(cat "/proc/$(cat "$BASE/pids/mount-holder")/comm" 2>/dev/null)" = sleep ] && break
  sleep 0.1
done
[ "$(cat "/proc/$(cat "$BASE/pids/mount-holder")/comm" 2>/dev/null)" = sleep ] ||
  die "the node's mount namespace did not start: $(cat "$BASE/logs/mount-holder.log")"

cat >"$BASE/containerd/config.toml" <<TOML
version = 2
root = "$BASE/containerd/root"
state = "$BASE/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$BASE/containerd/containerd.sock.ttrpc"
[debug]
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  enable_selinux = false
  # the CRI asks oom_score_adj -998 for sandboxes; without CAP_SYS_RESOURCE (this machine's root
  # lacks it) runc fails "nsexec: failed to update /proc/self/oom_score_adj: Permission denied"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$BASE/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$BASE/containerd/runc"
        SystemdCgroup = false
TOML
# Pods route everything through the bridge (isDefaultGateway) into the node's netns: Service
# addresses (kube-proxy's DNAT) and the node IP (argo-server). The netns itself has no route out, and
# the FORWARD rule drops whatever from the pod range is not for the pod range.
cat >"$BASE/cni/net.d/10-healer-node.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "dataDir": "$BASE/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
start_node containerd containerd --config "$BASE/containerd/config.toml"
wait_for containerd 60 ctr version

log "images: pause (upstream pause.c), busybox-static and CoreDNS, imported into containerd"
images="$(bash "$here/images.sh" "$BASE/images" | tail -n 1)"
busybox_image="${images#*BUSYBOX_IMAGE=}"
for tarball in pause busybox coredns; do
  ctr images import --all-platforms "$BASE/images/$tarball.tar" >>"$BASE/logs/images.log" 2>&1
done
ctr images ls -q | tee -a "$BASE/logs/images.log" >&2

# --- kubelet ---------------------------------------------------------------------------------------
for controller in $(cgroup_controllers --v1); do mkdir -p "/sys/fs/cgroup/$controller/$CGROUP_ROOT"; done
printf 'nameserver 127.0.0.1\n' >"$BASE/resolv.conf" # no upstream DNS from the host: cluster names only
cat >"$BASE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $BASE/pki/ca.crt}
authorization: {mode: Webhook}
resolvConf: $BASE/resolv.conf
clusterDNS: [$DNS_SERVICE_IP]
clusterDomain: cluster.local
podLogsDir: $BASE/pod-logs
failSwapOn: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
# No image garbage collection: every image here was imported, none can be pulled again, and
# containerd 1.6 does not pin the sandbox image, so at 85 % disk use the kubelet deleted pause and
# every new pod failed "failed to pull image registry.k8s.io/pause" (found in an empty-cache CI run).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
start_node kubelet "$NODE_BIN/kubelet" --config="$BASE/kubelet.yaml" --kubeconfig="$BASE/kubelet.kubeconfig" \
  --root-dir="$BASE/kubelet" --cert-dir="$BASE/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=2
wait_for "node $NODE_NAME Ready" 180 node_ready

# --- kube-proxy: Service addresses for the pods (the API server's own 10.96.0.1 first) -------------
# iptables mode in the netns. It leaves the conntrack sysctls alone (maxPerCore 0, timeouts 0s): they
# are not the netns' to set. Its KUBE-FORWARD jump goes first in FORWARD, so the egress rule is put
# back in front of it, and checked.
cat >"$BASE/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $BASE/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
start kube-proxy "$NODE_BIN/kube-proxy" --config="$BASE/kube-proxy.yaml" --v=1
kube_proxy_synced() { in_netns iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -q 'default/kubernetes:https'; }
wait_for "kube-proxy's rules for the kubernetes Service" 60 kube_proxy_synced
egress_rule_first
in_netns iptables -w -S FORWARD >&2

# --- cluster DNS: CoreDNS as a pod behind the kube-dns Service ----------------------------------------
# Cluster names only (no forward plugin: there is nowhere upstream to ask). It binds :53 as uid 65532
# through the pod's net.ipv4.ip_unprivileged_port_start sysctl (a safe sysctl), no capability added.
kubectl apply -f - <<YAML >&2
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:coredns}
rules:
- {apiGroups: [""], resources: [services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: system:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        loadbalance
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      priorityClassName: system-cluster-critical
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "53"}]
      containers:
      - name: coredns
        image: healer.local/coredns:$COREDNS_VERSION
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
        livenessProbe: {httpGet: {path: /health, port: 8080}, periodSeconds: 5}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 128Mi}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_SERVICE_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
YAML
kubectl -n kube-system rollout status deployment/coredns --timeout=120s >&2
cluster_dns_answers() { in_netns busybox nslookup kubernetes.default.svc.cluster.local "$DNS_SERVICE_IP" | grep -Eq '^Address: *10\.96\.0\.1$'; }
wait_for "CoreDNS answering for kubernetes.default.svc.cluster.local at $DNS_SERVICE_IP" 60 cluster_dns_answers

# --- a pod -----------------------------------------------------------------------------------------
wait_for "default ServiceAccount" 60 kubectl get serviceaccount default
kubectl apply -f - <<YAML >&2
apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  automountServiceAccountToken: false
  containers:
  - name: hello
    image: $busybox_image
    imagePullPolicy: Never
    command: [sh, -c, 'echo "hello from \$(hostname) at \$(ip -4 -o addr show eth0)"; cat /etc/resolv.conf; nslookup kubernetes.default.svc.cluster.local; exec sleep 3600']
    securityContext: {allowPrivilegeEscalation: false, runAsNonRoot: true, runAsUser: 65534, capabilities: {drop: [ALL]}}
YAML
wait_for "pod hello Running" 120 pod_running hello
# the pod's resolv.conf names the cluster DNS and search path (busybox's nslookup ignores the search
# path: the sidecars' short names, argo-server.argo, are resolved by the drills' submissions)
hello_resolved() {
  kubectl logs hello | grep -q "^nameserver $DNS_SERVICE_IP\$" &&
    kubectl logs hello | grep -q '^search default.svc.cluster.local svc.cluster.local cluster.local' &&
    kubectl logs hello | grep -A1 'Name:.*kubernetes.default.svc.cluster.local' | grep -Eq '^Address: *10\.96\.0\.1$'
}
wait_for "pod hello resolving kubernetes.default.svc.cluster.local through the cluster DNS" 30 hello_resolved
kubectl get nodes -o wide >&2
kubectl get pods -A -o wide >&2
log "up: KUBECONFIG=$BASE/admin.kubeconfig (inside: nsenter --net=/run/netns/$NETNS)"
