# shellcheck shell=bash
# shellcheck disable=SC2034 # the settings are used by the scripts that source this file
# Shared by the scripts in e2e/ (sourced; e2e/cluster/common.sh sources it too): the pinned versions,
# the repository, its Python, the binaries' cache, and two helpers for building upstream Go code.
# shellcheck source=SCRIPTDIR/versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" # the repository
python="${PYTHON:-$root/.venv/bin/python}"
cache="${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}"

# go_build_env: the Go settings of every build of upstream code here (e2e/build.sh, e2e/cluster/build-node.sh,
# e2e/cluster/build-argo-images.sh), exported: reproducible and hermetic enough (only the committed go.sum,
# no VCS stamping, no cgo, no paths), and one set for all, so they share Go's build cache.
go_build_env() {
  export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
  export CGO_ENABLED=0
}

# go_module_dir MODULE@VERSION...: download the modules (go mod download, in the current directory's
# wrapper module and with the caller's GOFLAGS) and print their directories in the module cache, one a line
go_module_dir() {
  go mod download -json "$@" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'
}

# kubernetes_ldflags: the ldflags of every Kubernetes binary built here (e2e/build.sh's kube-apiserver,
# e2e/cluster/build-node.sh's node components): stripped, and stamped with $KUBERNETES_VERSION as
# upstream's build stamps it. One value for all, so they share Go's build cache.
kubernetes_ldflags() {
  local minor="${KUBERNETES_VERSION#v1.}" flags="-s -w" package
  minor="${minor%%.*}"
  for package in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $package.gitVersion=$KUBERNETES_VERSION -X $package.gitMajor=1 -X $package.gitMinor=$minor"
    flags+=" -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s\n' "$flags"
}
