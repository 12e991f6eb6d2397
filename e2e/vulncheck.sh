#!/usr/bin/env bash
# Check the pinned upstream versions (e2e/versions.env) for reported vulnerabilities, offline from
# the Go vulnerability database as the Go module proxy serves it (the module golang.org/x/vulndb
# carries the OSV records), with govulncheck, also from the proxy. Not part of `make e2e`: run it
# when choosing or bumping a version. Exit status: govulncheck's (3 = vulnerabilities found).
#
#   e2e/vulncheck.sh                # every binary e2e/build.sh built
#   VULNDB_VERSION=v0.0.0-... e2e/vulncheck.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
vulndb_version="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
govulncheck_version="${GOVULNCHECK_VERSION:-v1.9.0}"
work="$cache/vulncheck-$vulndb_version"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

if [ ! -x "$work/bin/govulncheck" ] || [ ! -f "$work/db/index/db.json" ]; then
  mkdir -p "$work/tools"
  GOBIN="$work/bin" nice -n 19 go install "golang.org/x/vuln/cmd/govulncheck@$govulncheck_version"
  vulndb_dir="$(cd "$work/tools" && GOFLAGS=-mod=mod go_module_dir "golang.org/x/vulndb@$vulndb_version")"
  printf 'module vulntools\n\ngo 1.26.5\n\nrequire golang.org/x/vulndb %s\n' "$vulndb_version" >"$work/tools/go.mod"
  cp "$vulndb_dir/go.sum" "$work/tools/go.sum"
  chmod u+w "$work/tools/go.sum"
  (cd "$work/tools" && GOFLAGS=-mod=mod nice -n 19 go build -o "$work/bin/indexdb" golang.org/x/vulndb/cmd/indexdb)
  rm -rf "$work/db"
  "$work/bin/indexdb" -vulns "$vulndb_dir/data/osv" -out "$work/db"
fi

# Binary mode, on the binaries e2e/build.sh cached: seconds and little memory. (Source mode gives call
# traces, but on kube-apiserver it needs more than 23 GB: it was killed for memory on a 24 GB machine.)
bin_root="$cache"
status=0
check() { # component version binaries...
  local component="$1" version="$2" binary
  shift 2
  for binary in "$@"; do
    echo "== $component $version: $binary"
    [ -x "$bin_root/$component-$version/bin/$binary" ] || { echo "not built: run e2e/build.sh first" >&2; exit 1; }
    nice -n 19 "$work/bin/govulncheck" -db "file://$work/db" -mode binary \
      "$bin_root/$component-$version/bin/$binary" || status=$?
  done
}
check etcd "$ETCD_VERSION" etcd
check kubernetes "$KUBERNETES_VERSION" kube-apiserver
check argo "$ARGO_VERSION" argo workflow-controller
exit "$status"
