#!/usr/bin/env bash
# A drill's trace through a real OpenTelemetry Collector (the one e2e/build.sh builds from its Go
# modules): the embedded stack (a real Triton, a filesystem store, the LocalEngine) runs the drills
# given (default: wrong-weights) with tracing on, exporting over OTLP/HTTP to the Collector on a free
# loopback port; the Collector's file exporter writes every span; the trees are printed
# (healer.core.trace_tree). What README's and docs/tracing.md's drill trace were made with:
#   bash e2e/trace-drill.sh [SCENARIO ...]
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh" # versions.env, root, python, cache
bash "$root/e2e/build.sh" >/dev/null
collector="$cache/otelcol-$OTELCOL_VERSION/bin/otelcol-healer"
work="$(mktemp -d)"
port="$("$python" -c 'from healer.edges.processes import free_port; print(free_port())')"
cat >"$work/otelcol.yaml" <<YAML
receivers: {otlp: {protocols: {http: {endpoint: "127.0.0.1:$port"}}}}
exporters: {file: {path: "$work/spans.jsonl", flush_interval: 100ms}}
service:
  telemetry: {metrics: {level: none}}
  pipelines: {traces: {receivers: [otlp], exporters: [file]}}
YAML
"$collector" --config="file:$work/otelcol.yaml" >"$work/otelcol.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"resourceSpans":[]}' \
    "http://127.0.0.1:$port/v1/traces" && break
  sleep 0.1
done
# The example's copy (its relative paths resolve against its own folder), with tracing on.
cp -r "$root/examples/." "$work/"
"$python" - "$work/healer.yaml" "$port" <<'PY'
import sys

import yaml

document = yaml.safe_load(open(sys.argv[1]))
endpoint = f"http://127.0.0.1:{sys.argv[2]}/v1/traces"
document["tracing"] = {"enabled": True, "otlp_endpoint": endpoint, "service_name": "healer"}
open(sys.argv[1], "w").write(yaml.safe_dump(document))
PY
"$root/.venv/bin/healer" drill --config "$work/healer.yaml" "${@:-wrong-weights}"
kill -TERM "$pid" && wait "$pid" || true
trap - EXIT
"$python" -c '
import sys
from healer.core.trace_tree import render_tree, spans_from_otlp_lines
spans = spans_from_otlp_lines(open(sys.argv[1]).read())
by_trace = {}
for span in spans:
    by_trace.setdefault(span.trace_id, []).append(span)
for trace in by_trace.values():
    print(render_tree(trace))
' "$work/spans.jsonl"
echo "spans: $work/spans.jsonl" >&2
