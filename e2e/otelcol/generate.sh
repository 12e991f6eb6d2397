#!/usr/bin/env bash
# Regenerate e2e/otelcol (main.go, components.go, go.mod, go.sum) with the OpenTelemetry Collector
# Builder at the versions in e2e/versions.env; run after changing them, then commit the result.
# e2e/build.sh builds only from the committed, checksummed files (the builder is not needed there).
#
# `go mod tidy -e`: the builder's own tidy also resolves the file exporter's *test* imports, and one
# of them (contrib's otlpencodingextension at the same version) is not served by the module proxy;
# the binary does not import it, so tidy is told to carry on past it (go.sum still pins every module
# the build reads).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../versions.env
source "$here/../versions.env"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
GOBIN="$work/bin" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION"
sed -e "s/@OTELCOL_VERSION@/$OTELCOL_VERSION/g" -e "s/@OTELCOL_CONFMAP_VERSION@/$OTELCOL_CONFMAP_VERSION/g" \
  -e "s#^  output_path: .*#  output_path: $work/out#" "$here/manifest.yaml" >"$work/manifest.yaml"
"$work/bin/builder" --config "$work/manifest.yaml" --skip-compilation >"$work/builder.log" 2>&1 ||
  grep -q 'not available' "$work/builder.log" || { cat "$work/builder.log" >&2; exit 1; }
(cd "$work/out" && go mod tidy -e)
cp "$work/out"/{components.go,main.go,main_others.go,main_windows.go,go.mod,go.sum} "$here/"
echo "e2e/otelcol: generated for the Collector $OTELCOL_VERSION (confmap providers $OTELCOL_CONFMAP_VERSION)" >&2
