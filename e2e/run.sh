#!/usr/bin/env bash
# `make e2e`: build (or reuse) the pinned binaries, then run the end-to-end tier (pytest -m e2e).
#
# Where it can (root, or unprivileged user namespaces), the tier runs in its own network and mount
# namespaces: only a loopback interface exists there, so everything it starts is reachable on
# loopback only, even the ports Argo binds on every interface (argo-server's --port, the
# controller's :6060 health endpoint), and two runs never collide on those fixed ports. A private
# tmpfs on /run gives the tests a pod's /var/run/secrets/kubernetes.io/serviceaccount to fill in,
# so healer's in-cluster Kubernetes client is tested as it runs in a pod. Elsewhere the tier runs on
# the host's loopback and the in-cluster tests are skipped (they say why).
set -euo pipefail
cd "$(dirname "$0")/.."
pytest="${PYTEST:-.venv/bin/pytest}"

if [ "${1:-}" = "--inside" ]; then
  shift
  ip link set lo up
  mount -t tmpfs -o mode=0755,size=16m healer-e2e-run /run
  mkdir -p /run/secrets/kubernetes.io/serviceaccount
  export HEALER_E2E_ISOLATED=1
  exec "$pytest" -m e2e tests/e2e "$@"
fi

bash e2e/build.sh >/dev/null
# The README walk-through (tests/e2e/test_readme_walkthrough.py) installs a fresh clone's .venv inside the
# namespace, where only loopback answers: the wheels `make demo` installs are fetched here, before it.
wheelhouse="${HEALER_E2E_CACHE:-$HOME/.cache/healer-e2e}/wheelhouse"
"$(dirname "$pytest")/python" -m pip download --quiet --dest "$wheelhouse" pip "setuptools>=77" ".[embedded]" ||
  echo "e2e: could not fetch the wheels for the README walk-through into $wheelhouse" >&2

started=$SECONDS
status=0
if command -v unshare >/dev/null && command -v ip >/dev/null && [ "$(id -u)" = 0 ] &&
  unshare --net --mount true 2>/dev/null; then
  unshare --net --mount --propagation private -- bash "$0" --inside "$@" || status=$?
elif command -v unshare >/dev/null && command -v ip >/dev/null &&
  unshare --user --map-root-user --net --mount true 2>/dev/null; then
  unshare --user --map-root-user --net --mount --propagation private -- bash "$0" --inside "$@" || status=$?
else
  echo "e2e: no private network namespace here (needs root or user namespaces, and iproute2):" \
    "running on the host's loopback; argo-server and the controller's :6060 bind all interfaces" >&2
  "$pytest" -m e2e tests/e2e "$@" || status=$?
fi
echo "e2e: tier finished in $((SECONDS - started)) s with exit status $status" >&2
exit "$status"
