#!/usr/bin/env bash
# Build the upstream control plane the end-to-end tier runs (tests/e2e): etcd, kube-apiserver, and
# Argo Workflows' controller and CLI (`argo server` is the Argo Server), and an OpenTelemetry
# Collector (OTLP receiver, file exporter) for the tracing test, from the Go module proxy
# only, at the versions pinned in e2e/versions.env and the checksums in e2e/*/go.sum.
#
# Binaries are cached outside the repository, keyed by component and version:
#   ${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}/<component>-<version>/bin/
# so only the first run pays (about 35 minutes on 2 cores with Argo's web UI and Helm; see README). A cached component is not
# rebuilt unless its wrapper module or build flags change (a stamp records their digest).
#
# Prints the bin directories on the last line as KEY=PATH pairs. Exit 3: Go is missing or too old.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh" # versions.env, cache, go_build_env, go_module_dir, kubernetes_ldflags
min_go="1.26.5" # the wrappers' go line (Argo v4.1.4 needs 1.26.5)

go_build_env # reproducible and hermetic enough (e2e/common.sh)

log() { printf 'e2e/build: %s\n' "$*" >&2; }

have_go() {
  command -v go >/dev/null 2>&1 || return 1
  local version
  version="$(go env GOVERSION 2>/dev/null)" || return 1
  version="${version#go}"
  [ "$(printf '%s\n%s\n' "$min_go" "$version" | sort -V | head -n1)" = "$min_go" ]
}

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    log "Go is not installed (no 'go' on PATH). The end-to-end tier builds etcd $ETCD_VERSION,"
    log "kube-apiserver $KUBERNETES_VERSION, Argo Workflows $ARGO_VERSION and the OpenTelemetry Collector"
    log "$OTELCOL_VERSION from the Go module proxy"
    log "and needs Go >= $min_go. Install Go (https://go.dev/doc/install), or put the binaries in"
    log "$cache/<component>-<version>/bin yourself. 'make test' does not need Go."
    exit 3
  fi
  if ! have_go; then
    log "Go $(go env GOVERSION) is too old: the wrapper modules need Go >= $min_go."
    exit 3
  fi
}

# stamp: a digest of everything that decides the binaries (wrapper module, flags, Go version).
stamp_of() { # component flags...
  local component="$1"
  shift
  {
    cat "$here/$component"/go.mod "$here/$component"/go.sum
    [ -f "$here/$component/main.go" ] && cat "$here/$component/main.go"
    printf '%s\n' "$@" "$GOFLAGS" "$CGO_ENABLED"
    if [ -n "${stamp_extra:-}" ]; then printf '%s\n' "$stamp_extra"; fi # what else a build embeds (Argo's UI)
    go env GOVERSION GOOS GOARCH 2>/dev/null || true
  } | sha256sum | cut -d' ' -f1
}

# build COMPONENT VERSION "LDFLAGS" MODFILE NAME=PACKAGE...   (MODFILE: "" = the wrapper's go.mod)
build() {
  local component="$1" version="$2" ldflags="$3" modfile="$4"
  shift 4
  local dest="$cache/$component-$version"
  local -a binaries=()
  local pair
  for pair in "$@"; do binaries+=("${pair%%=*}"); done

  local complete=1 binary
  for binary in "${binaries[@]}"; do [ -x "$dest/bin/$binary" ] || complete=0; done
  if [ "$complete" = 1 ] && ! have_go; then
    log "$component $version: cached in $dest/bin (Go not available to check the stamp)"
    return 0
  fi
  need_go
  local stamp
  stamp="$(stamp_of "$component" "$ldflags" "$modfile")"
  if [ "$complete" = 1 ] && [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp" ]; then
    log "$component $version: cached in $dest/bin"
    return 0
  fi

  mkdir -p "$cache"
  exec 9>"$cache/.lock-$component-$version"
  flock 9 # another build of the same component (a parallel run) finishes first
  if [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp" ]; then
    exec 9>&-
    return 0
  fi
  local started=$SECONDS staging
  staging="$(mktemp -d "$cache/.build-$component-XXXXXX")"
  log "$component $version: building ${binaries[*]} (first run only; nice -n 19)"
  local -a modfile_flag=()
  if [ -n "$modfile" ]; then modfile_flag=("-modfile=$modfile"); fi
  for pair in "$@"; do
    (cd "$here/$component" && nice -n 19 go build "${modfile_flag[@]}" -ldflags "$ldflags" \
      -o "$staging/bin/${pair%%=*}" "${pair#*=}")
  done
  echo "$stamp" >"$staging/.stamp"
  rm -rf "$dest"
  mv "$staging" "$dest"
  exec 9>&-
  log "$component $version: built in $((SECONDS - started)) s into $dest/bin"
}

total_started=$SECONDS

build etcd "$ETCD_VERSION" "-s -w" "" etcd=healer.e2e/etcd

build kubernetes "$KUBERNETES_VERSION" "$(kubernetes_ldflags)" "" kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver

# Argo's web UI: ui/ in Argo's module (React and TypeScript, bundled by webpack), which argo-server
# embeds (ui/embed.go: //go:embed dist/app) and the module ships unbuilt. Built as upstream's `make
# ui/dist/app/index.html` does (yarn 1, Argo's own yarn.lock, the npm registry), with Node.js >= 20
# (ui/package.json's engines). Its one dependency no registry serves, argo-ui (a git URL in
# package.json), is the copy in e2e/vendor/argo-ui (see its README), installed with `file:`.
# Cached in $cache/argo-ui-<version>/app, keyed by a stamp; sets argo_ui_app and argo_ui_stamp.
argo_ui_commit="54f36c723d9a0e5d3386689298cbb9c27767fa00"
argo_ui_vendored="$here/vendor/argo-ui" # that commit's files (e2e/vendor/README.md)
yarn_version="1.22.22"
build_argo_ui() { # ARGO_MODULE_DIR
  local module="$1" dest="$cache/argo-ui-$ARGO_VERSION" node_version
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    log "Node.js and npm are not installed: Argo's web UI (embedded in argo-server) needs Node.js >= 20"
    log "and npm (e.g. apt-get install nodejs npm). 'make test' does not need them."
    exit 3
  fi
  node_version="$(node --version)"
  if [ "$(printf '%s\n%s\n' v20 "$node_version" | sort -V | head -n1)" != v20 ]; then
    log "Node.js $node_version is too old: Argo's web UI needs Node.js >= 20."
    exit 3
  fi
  argo_ui_stamp="$({
    cat "$module/ui/package.json" "$module/ui/yarn.lock"
    (cd "$argo_ui_vendored" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
    printf '%s\n' "$ARGO_VERSION" "$node_version" "$yarn_version"
    declare -f build_argo_ui
  } | sha256sum | cut -d' ' -f1)"
  argo_ui_app="$dest/app"
  if [ -f "$argo_ui_app/index.html" ] && [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$argo_ui_stamp" ]; then
    log "argo-ui $ARGO_VERSION: cached in $argo_ui_app"
    return 0
  fi
  mkdir -p "$cache"
  exec 8>"$cache/.lock-argo-ui-$ARGO_VERSION"
  flock 8 # another build of the UI (a parallel run) finishes first
  if [ -f "$argo_ui_app/index.html" ] && [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$argo_ui_stamp" ]; then
    exec 8>&-
    return 0
  fi
  local spec="git+https://github.com/argoproj/argo-ui.git#$argo_ui_commit"
  if ! grep -qF "\"argo-ui\": \"$spec\"" "$module/ui/package.json"; then
    log "Argo $ARGO_VERSION's ui/package.json does not pin argo-ui at $argo_ui_commit: update e2e/vendor/argo-ui"
    exit 1
  fi
  local started=$SECONDS work yarn="$cache/.tools/yarn-$yarn_version/node_modules/.bin/yarn"
  if [ ! -x "$yarn" ]; then
    npm install --prefix "$cache/.tools/yarn-$yarn_version" --no-audit --no-fund --loglevel=error \
      "yarn@$yarn_version" >&2
  fi
  work="$(mktemp -d "$cache/.build-argo-ui-XXXXXX")"
  # webpack also copies ../api/openapi-spec/swagger.json and ../api/jsonschema/schema.json
  cp -R "$module/ui" "$module/api" "$work/"
  chmod -R u+w "$work"
  local vendored
  vendored="$(realpath --relative-to="$work/ui" "$argo_ui_vendored")" # as yarn writes file: keys
  sed -i "s|\"$spec\"|\"file:$vendored\"|" "$work/ui/package.json"
  sed -i -e "s|^\"argo-ui@$spec\":\$|\"argo-ui@file:$vendored\":|" -e "\|^  resolved \"$spec\"\$|d" "$work/ui/yarn.lock"
  grep -qF "\"argo-ui@file:$vendored\":" "$work/ui/yarn.lock" || { log "could not point yarn.lock at e2e/vendor/argo-ui"; exit 1; }
  log "argo-ui $ARGO_VERSION: yarn install and webpack (first run only; nice -n 19; log in $work/yarn.log)"
  # ui/.yarnrc keeps --frozen-lockfile: yarn.lock decides every version. yarn's cache stays for the
  # next build. webpack fits in Node's default heap (peak memory: see the README).
  if ! (cd "$work/ui" &&
    YARN_CACHE_FOLDER="$cache/.yarn-cache" nice -n 19 "$yarn" install --non-interactive --network-timeout 600000 &&
    nice -n 19 "$yarn" build) >"$work/yarn.log" 2>&1; then
    tail -n 40 "$work/yarn.log" >&2
    log "argo-ui $ARGO_VERSION: the build failed (log: $work/yarn.log)"
    exit 1
  fi
  rm -rf "$dest"
  mkdir -p "$dest"
  mv "$work/ui/dist/app" "$argo_ui_app"
  echo "$argo_ui_stamp" >"$dest/.stamp"
  rm -rf "$work"
  exec 8>&-
  log "argo-ui $ARGO_VERSION: built in $((SECONDS - started)) s into $argo_ui_app"
}

# The build uses a copy of Argo's module with the UI in ui/dist/app: the go command never lets a build
# change the module cache (nor overlay a file in it). The copy is taken from the cache after `go mod
# download` checked it against e2e/argo/go.sum; a generated go.mod (-modfile) points at it, and the
# UI's stamp joins the build's, so a cached build without this UI is rebuilt.
argo_modfile=""
argo_ldflags="-s -w -X github.com/argoproj/argo-workflows/v4.version=$ARGO_VERSION"
argo_ldflags+=" -X github.com/argoproj/argo-workflows/v4.buildDate=1970-01-01T00:00:00Z"
argo_dest="$cache/argo-$ARGO_VERSION"
argo_source="$cache/.argo-source-$ARGO_VERSION"
argo_modfile="$cache/.argo-build-$ARGO_VERSION/go.mod"
argo_ui_stamp=""
if ! { [ -x "$argo_dest/bin/argo" ] && [ -x "$argo_dest/bin/workflow-controller" ]; } || have_go; then
  need_go
  argo_dir="$(cd "$here/argo" && go_module_dir "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION")"
  [ -n "$argo_dir" ] || { log "could not download github.com/argoproj/argo-workflows/v4@$ARGO_VERSION"; exit 1; }
  if ! command -v node >/dev/null 2>&1 && [ -f "$cache/argo-ui-$ARGO_VERSION/app/index.html" ]; then
    argo_ui_app="$cache/argo-ui-$ARGO_VERSION/app" # built before: usable without Node.js
    argo_ui_stamp="$(cat "$cache/argo-ui-$ARGO_VERSION/.stamp")"
    log "argo-ui $ARGO_VERSION: cached in $argo_ui_app (Node.js not available to check the stamp)"
  else
    build_argo_ui "$argo_dir"
  fi
  if [ "$(cat "$argo_source/.ui-stamp" 2>/dev/null)" != "$argo_ui_stamp" ]; then
    rm -rf "$argo_source" "$argo_source.tmp"
    cp -R "$argo_dir" "$argo_source.tmp"
    chmod -R u+w "$argo_source.tmp"
    rm -rf "$argo_source.tmp/ui/dist/app"
    mkdir -p "$argo_source.tmp/ui/dist"
    cp -R "$argo_ui_app" "$argo_source.tmp/ui/dist/app"
    echo "$argo_ui_stamp" >"$argo_source.tmp/.ui-stamp"
    mv "$argo_source.tmp" "$argo_source"
  fi
  mkdir -p "$(dirname "$argo_modfile")"
  { cat "$here/argo/go.mod"; printf '\nreplace github.com/argoproj/argo-workflows/v4 => %s\n' "$argo_source"; } \
    >"$argo_modfile"
  cp "$here/argo/go.sum" "${argo_modfile%.mod}.sum"
fi
stamp_extra="${argo_ui_stamp:+argo-ui $argo_ui_stamp}" build argo "$ARGO_VERSION" "$argo_ldflags" "$argo_modfile" \
  argo=github.com/argoproj/argo-workflows/v4/cmd/argo \
  workflow-controller=github.com/argoproj/argo-workflows/v4/cmd/workflow-controller

# Helm (tests/e2e/test_helm.py lints, renders and installs deploy/helm/healer with it). As helm's own
# Makefile does, the ldflags stamp its version and the Kubernetes version `helm template` and `helm
# lint` assume without a cluster (1.<client-go minor>), read from the wrapper's go.mod.
helm_k8s_minor="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$here/helm/go.mod")"
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for package in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X $package.k8sVersionMajor=1 -X $package.k8sVersionMinor=$helm_k8s_minor"
done
build helm "$HELM_VERSION" "$helm_ldflags" "" helm=helm.sh/helm/v3/cmd/helm

# The OpenTelemetry Collector (tests/e2e/test_tracing_collector.py exports healer's spans to it): the
# Collector Builder's generated main for the OTLP receiver and contrib's file exporter (e2e/otelcol,
# regenerated by e2e/otelcol/generate.sh). About 2 minutes on 2 cores with an empty Go build cache.
build otelcol "$OTELCOL_VERSION" "-s -w" "" otelcol-healer=healer.e2e/otelcol

# CustomResourceDefinitions the chart's optional objects need (cert-manager's Issuer and Certificate,
# the Prometheus Operator's PodMonitor and PrometheusRule), for tests/e2e/test_helm.py to install
# before `helm install`. Taken from the projects' Go modules (cert-manager's deploy/crds, "for
# development and testing"; the operator's example/prometheus-operator-crd), checked against
# e2e/crds/go.sum; cached in $cache/crds-<versions>/. Nothing is compiled.
crds_dest="$cache/crds-cert-manager-$CERT_MANAGER_VERSION-prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
if [ ! -f "$crds_dest/.complete" ]; then
  need_go
  crds_dirs="$(cd "$here/crds" && go_module_dir "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")"
  cert_manager_dir="$(printf '%s\n' "$crds_dirs" | grep '/cert-manager@')"
  operator_dir="$(printf '%s\n' "$crds_dirs" | grep '/prometheus-operator@')"
  [ -n "$cert_manager_dir" ] && [ -n "$operator_dir" ] || { log "could not download the CRD modules"; exit 1; }
  rm -rf "$crds_dest.tmp"
  mkdir -p "$crds_dest.tmp"
  for crd in issuers clusterissuers certificates certificaterequests; do
    cp "$cert_manager_dir/deploy/crds/cert-manager.io_$crd.yaml" "$crds_dest.tmp/"
  done
  for crd in podmonitors servicemonitors prometheusrules; do
    cp "$operator_dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$crds_dest.tmp/"
  done
  chmod u+w "$crds_dest.tmp"/*.yaml
  touch "$crds_dest.tmp/.complete"
  rm -rf "$crds_dest"
  mv "$crds_dest.tmp" "$crds_dest"
  log "CRDs: cert-manager $CERT_MANAGER_VERSION, Prometheus Operator $PROMETHEUS_OPERATOR_VERSION into $crds_dest"
else
  log "CRDs: cached in $crds_dest"
fi

log "all components ready in $((SECONDS - total_started)) s"
echo "ETCD_BIN=$cache/etcd-$ETCD_VERSION/bin KUBERNETES_BIN=$cache/kubernetes-$KUBERNETES_VERSION/bin ARGO_BIN=$argo_dest/bin OTELCOL_BIN=$cache/otelcol-$OTELCOL_VERSION/bin"
