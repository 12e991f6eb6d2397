#!/usr/bin/env bash
# Argo's executor (argoexec: the init, wait and emissary parts of every workflow pod) built from the
# Argo module at $ARGO_VERSION through the same wrapper module as e2e/build.sh's argo, and packed as an
# image with no registry: a static binary at /bin/argoexec (the controller runs `argoexec init|wait`
# through PATH) and a world-writable /tmp, written as a docker-archive for `ctr images import`.
# Cached by version in $HEALER_E2E_CACHE/argoexec-<version>/: the binary and argoexec.tar.
# Prints ARGOEXEC_IMAGE=<name> ARGOEXEC_ARCHIVE=<path>.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/../versions.env
source "$here/../versions.env"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
dest="$cache/argoexec-$ARGO_VERSION"
image="localhost/argoexec:$ARGO_VERSION"
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
export CGO_ENABLED=0
ldflags="-s -w -X github.com/argoproj/argo-workflows/v4.version=$ARGO_VERSION"
ldflags+=" -X github.com/argoproj/argo-workflows/v4.buildDate=1970-01-01T00:00:00Z"
mkdir -p "$dest/bin"
if [ ! -x "$dest/bin/argoexec" ]; then
  started=$SECONDS
  # The module zip lacks workflow/executor/osspecific/signal_linux.go: upstream's tree has it as a
  # symlink to signal_darwin.go, and Go module zips leave symlinks out, so the linux build fails
  # "undefined: Setpgid". A copy of the module with that file written as the symlink's target, used
  # through a replace (as e2e/build.sh does for Argo's UI).
  module_dir="$(cd "$here/argoexec" && go mod download -json "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [ -n "$module_dir" ] || die "could not download github.com/argoproj/argo-workflows/v4@$ARGO_VERSION"
  source_dir="$cache/.argoexec-source-$ARGO_VERSION"
  rm -rf "$source_dir" "$source_dir.tmp"
  cp -R "$module_dir" "$source_dir.tmp"
  chmod -R u+w "$source_dir.tmp"
  osspecific="$source_dir.tmp/workflow/executor/osspecific"
  [ -e "$osspecific/signal_linux.go" ] || cp "$osspecific/signal_darwin.go" "$osspecific/signal_linux.go"
  mv "$source_dir.tmp" "$source_dir"
  build_dir="$cache/.argoexec-build-$ARGO_VERSION"
  mkdir -p "$build_dir"
  { cat "$here/argoexec/go.mod"; printf '\nreplace github.com/argoproj/argo-workflows/v4 => %s\n' "$source_dir"; } \
    >"$build_dir/go.mod"
  cp "$here/argoexec/go.sum" "$build_dir/go.sum"
  (cd "$here/argoexec" && nice -n 19 go build -modfile="$build_dir/go.mod" -ldflags "$ldflags" \
    -o "$dest/bin/argoexec.tmp" github.com/argoproj/argo-workflows/v4/cmd/argoexec)
  mv "$dest/bin/argoexec.tmp" "$dest/bin/argoexec"
  log "argoexec $ARGO_VERSION built in $((SECONDS - started)) s"
fi
if [ ! -f "$dest/argoexec.tar" ] || [ "$dest/bin/argoexec" -nt "$dest/argoexec.tar" ]; then
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  mkdir -p "$rootfs/bin" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  cp "$dest/bin/argoexec" "$rootfs/bin/argoexec"
  docker_archive "$dest/argoexec.tar.tmp" "$image" "$rootfs" '["/bin/argoexec"]'
  mv "$dest/argoexec.tar.tmp" "$dest/argoexec.tar"
fi
echo "ARGOEXEC_IMAGE=$image ARGOEXEC_ARCHIVE=$dest/argoexec.tar"
