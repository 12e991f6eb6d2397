#!/usr/bin/env bash
# Argo's three images with no registry, each a static binary at /bin/<name> (PATH=/bin), a
# world-writable /tmp and user 8737 as upstream's images have, written as docker-archives for
# `ctr images import`, named as Argo's manifests name them under localhost/:
#   argoexec             the executor (init, wait and emissary of every workflow pod), built here from
#                        the Argo module at $ARGO_VERSION (its own wrapper module, argoexec/)
#   argocli              `argo` (argo-server), and
#   workflow-controller  both built by e2e/build.sh
# Cached by version in $HEALER_E2E_CACHE/argoexec-<version>/. Prints the archives' paths, one a line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=SCRIPTDIR/common.sh
source "$here/common.sh"
dest="$cache/argoexec-$ARGO_VERSION"
go_build_env
ldflags="-s -w -X github.com/argoproj/argo-workflows/v4.version=$ARGO_VERSION"
ldflags+=" -X github.com/argoproj/argo-workflows/v4.buildDate=1970-01-01T00:00:00Z"
mkdir -p "$dest/bin"
if [ ! -x "$dest/bin/argoexec" ]; then
  started=$SECONDS
  # The module zip lacks workflow/executor/osspecific/signal_linux.go: upstream's tree has it as a
  # symlink to signal_darwin.go, and Go module zips leave symlinks out, so the linux build fails
  # "undefined: Setpgid". A copy of the module with that file written as the symlink's target, used
  # through a replace (as e2e/build.sh does for Argo's UI).
  module_dir="$(cd "$here/argoexec" && go_module_dir "github.com/argoproj/argo-workflows/v4@$ARGO_VERSION")"
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
argo_bin="$cache/argo-$ARGO_VERSION/bin"
for name in argoexec argocli workflow-controller; do
  case "$name" in
    argoexec) binary="$dest/bin/argoexec" command=argoexec ;;
    argocli) binary="$argo_bin/argo" command=argo ;;
    workflow-controller) binary="$argo_bin/workflow-controller" command=workflow-controller ;;
  esac
  [ -x "$binary" ] || die "missing $binary: run e2e/build.sh"
  archive="$dest/$name.tar"
  if [ ! -f "$archive" ] || [ "$binary" -nt "$archive" ]; then
    rootfs="$(mktemp -d)"
    mkdir -p "$rootfs/bin" "$rootfs/tmp"
    chmod 1777 "$rootfs/tmp"
    cp "$binary" "$rootfs/bin/$command"
    docker_archive "$archive.tmp" "localhost/$name:$ARGO_VERSION" "$rootfs" "[\"/bin/$command\"]" 8737
    mv "$archive.tmp" "$archive"
    rm -rf "$rootfs"
  fi
  echo "$archive"
done
