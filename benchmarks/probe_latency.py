"""Median cost of one business probe (golden request + comparison) of each example model.

Starts a real tritonserver on the embedded default, warms up, then times N probes per model
end to end (the wall time of probes.tiers.check_business, not just Triton's server-side time).

    .venv/bin/python benchmarks/probe_latency.py --config examples/healer.yaml [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.logs import configure_logging
from healer.edges.triton import TritonHttp
from healer.settings import load_settings
from probes.tiers import check_business, resolve_versions

TARGET_MS = 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    configure_logging(level="warning")
    settings = load_settings(args.config)
    if settings.embedded is None:
        parser.error(f"{settings.source} has no 'embedded' section")
    names = [m.name for m in settings.models]
    worst_median = 0.0
    with EmbeddedTriton(settings.embedded.model_repository, load_models=names) as server:
        client = TritonHttp(server.url, timeout_s=settings.triton.timeout_s)
        print(f"tritonserver {server.url}, {args.runs} probes per model after {args.warmup} warm-up probes")
        print(f"{'model':<18}{'version':>8}{'median ms':>11}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        for model in settings.models:
            version = resolve_versions(client, model.name, model.version)[0]
            for _ in range(args.warmup):
                check_business(client, model.name, version, model.golden)
            costs = []
            for _ in range(args.runs):
                started = time.perf_counter()
                result = check_business(client, model.name, version, model.golden)
                costs.append((time.perf_counter() - started) * 1000)
                if result.status is not Status.PASS:
                    print(f"probe did not pass: {result.reason}", file=sys.stderr)
                    return 1
            costs.sort()
            median = statistics.median(costs)
            worst_median = max(worst_median, median)
            p90, p99 = costs[int(0.9 * len(costs)) - 1], costs[int(0.99 * len(costs)) - 1]
            print(f"{model.name:<18}{version:>8}{median:>11.2f}{p90:>9.2f}{p99:>9.2f}{costs[-1]:>9.2f}")
        client.close()
    verdict = "within" if worst_median < TARGET_MS else "OVER"
    print(f"worst median {worst_median:.2f} ms: {verdict} the {TARGET_MS:g} ms target")
    return 0 if worst_median < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
