#!/usr/bin/env bash
# Check the pinned upstream versions (e2e/versions.env) for reported vulnerabilities, offline from
# the Go vulnerability database as the Go module proxy serves it (the module golang.org/x/vulndb
# carries the OSV records), with govulncheck, also from the proxy. Not part of `make e2e`: run it
# when choosing or bumping a version. Exit status: govulncheck's (3 = vulnerabilities found).
#
#   e2e/vulncheck.sh                # every component, source mode (the call graph of each binary)
#   VULNDB_VERSION=v0.0.0-... e2e/vulncheck.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
vulndb_version="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
govulncheck_version="${GOVULNCHECK_VERSION:-v1.9.0}"
work="${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}/vulncheck-$vulndb_version"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

if [ ! -x "$work/bin/govulncheck" ] || [ ! -f "$work/db/index/db.json" ]; then
  mkdir -p "$work/tools"
  GOBIN="$work/bin" nice -n 19 go install "golang.org/x/vuln/cmd/govulncheck@$govulncheck_version"
  vulndb_dir="$(cd "$work/tools" && GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@$vulndb_version" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  printf 'module vulntools\n\ngo 1.26.5\n\nrequire golang.org/x/vulndb %s\n' "$vulndb_version" >"$work/tools/go.mod"
  cp "$vulndb_dir/go.sum" "$work/tools/go.sum"
  chmod u+w "$work/tools/go.sum"
  (cd "$work/tools" && GOFLAGS=-mod=mod nice -n 19 go build -o "$work/bin/indexdb" golang.org/x/vulndb/cmd/indexdb)
  rm -rf "$work/db"
  "$work/bin/indexdb" -vulns "$vulndb_dir/data/osv" -out "$work/db"
fi

status=0
check() { # component version packages...
  local component="$1" version="$2"
  shift 2
  echo "== $component $version"
  (cd "$here/$component" && nice -n 19 "$work/bin/govulncheck" -db "file://$work/db" "$@") || status=$?
}
check etcd "$ETCD_VERSION" healer.e2e/etcd
check kubernetes "$KUBERNETES_VERSION" k8s.io/kubernetes/cmd/kube-apiserver
check argo "$ARGO_VERSION" github.com/argoproj/argo-workflows/v4/cmd/argo github.com/argoproj/argo-workflows/v4/cmd/workflow-controller
exit "$status"
