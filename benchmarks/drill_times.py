"""Time to restore per rollback scenario, against the floor measured in the same run.

Starts the embedded stack (a real tritonserver over a scratch copy of the example repository, a
filesystem store, versions 1 and 2 of linear_scorer promoted through the real promote path) and
runs every scenario that ends in a rollback (`healer drill`'s catalog, expected outcome "healed")
``--runs`` times with the LocalEngine, measuring each from the moment the broken version starts
serving until the golden request passes again on every replica. In the same run it measures
Triton's own load of the stable version as a rollback does it (the pinned swap over the served
broken version), and prints, per scenario, the median and p95 time to restore against the floor:

    floor = failure_threshold × period_s   (the classic detection window: that many bad answers)
          + Triton's own load of the stable version, once per replica the scenario heals
            (the rollback restores replicas one at a time, each verified before the next)

and the targets on this 2-core machine: median ≤ 0.8 × floor, p95 ≤ 1.2 × floor, every run within
the budget (rollback.deadline_s). Exit status 1 when a run missed its scenario's expectation.

    .venv/bin/python benchmarks/drill_times.py [--runs 5] [--period 0.5] [--threshold 3] [--confirm 0.2]
                                               [--scenarios nan hang ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

from healer.core.drill_catalog import BY_NAME, CATALOG, Outcome
from healer.drills.runner import DrillRunner
from healer.drills.stack import EmbeddedStack
from healer.edges.logs import configure_logging
from healer.edges.triton import TritonHttp
from healer.settings import Settings, load_settings
from workflows.steps.drill_inject import Injected, pinned, push_and_serve, restore_stable, stable_record

ROOT = Path(__file__).resolve().parents[1]
MODEL = "linear_scorer"


def p95(values: list[float]) -> float:
    """Nearest rank: with 5 runs, the slowest one."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def stable_load_times(stack: EmbeddedStack, runs: int) -> list[float]:
    """Triton's own load of the stable version over a served broken version: what a rollback's swap asks."""
    target = stack.target
    assert target is not None
    times = []
    triton = TritonHttp(target.replicas[0], timeout_s=10)
    try:
        for _ in range(runs):
            injected = Injected(stable_record(target))
            push_and_serve(target, target.variant("wrong_weights"), injected)
            config = json.dumps(pinned(injected.stable, MODEL, [int(injected.stable.version)]))
            started = time.perf_counter()
            triton.load_model(MODEL, config=config, timeout_s=60)
            times.append(time.perf_counter() - started)
            problems = restore_stable(target, injected)
            if problems:
                raise RuntimeError("; ".join(problems))
    finally:
        triton.close()
    return times


def benchmark_settings(threshold: int | None, confirm_s: float | None) -> Settings:
    """The example configuration, with the sidecar's threshold and confirmation as asked."""
    settings = load_settings(ROOT / "examples" / "healer.yaml")
    sidecar = settings.sidecar
    if threshold is not None:
        sidecar = dataclasses.replace(
            sidecar, business=dataclasses.replace(sidecar.business, failure_threshold=threshold)
        )
    if confirm_s is not None:
        sidecar = dataclasses.replace(sidecar, confirm_interval_s=confirm_s)
    return dataclasses.replace(settings, sidecar=sidecar)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--period", type=float, default=0.5, help="the sidecars' probe period (default 0.5 s)")
    parser.add_argument(
        "--threshold", type=int, default=None, help="business failure_threshold (default: the config's)"
    )
    parser.add_argument(
        "--confirm", type=float, default=None, help="sidecar confirm_interval_s (default: the config's; 0: off)"
    )
    parser.add_argument(
        "--scenarios", nargs="*", default=[s.name for s in CATALOG if s.expect.outcome is Outcome.HEALED]
    )
    parser.add_argument("--log-file", default="/tmp/healer-drill-times.log")  # noqa: S108 - a scratch log
    args = parser.parse_args()
    settings = benchmark_settings(args.threshold, args.confirm)
    log = Path(args.log_file).open("w")  # noqa: SIM115 - open for the whole run
    configure_logging(stream=log, level="info")
    restores: dict[str, list[float]] = {}
    detects: dict[str, list[float]] = {}
    missed: dict[str, list[str]] = {}
    started = time.monotonic()
    stack = EmbeddedStack(settings, model=MODEL, broken=ROOT / "examples" / "broken", period_s=args.period)
    with stack as stack_target:
        loads = stable_load_times(stack, args.runs)
        runner = DrillRunner(
            stack_target,
            scratch=stack.workdir,
            start_replica=stack.start_replica,
            stop_replica=stack.stop_replica,
            recover=stack.restart,
        )
        for name in args.scenarios:
            scenario = BY_NAME[name]
            for run in range(args.runs):
                result = runner.run(scenario)
                restore = result.observation.restore_s
                if result.passed and restore is not None:
                    restores.setdefault(name, []).append(restore)
                    detects.setdefault(name, []).append(result.observation.detect_s or 0.0)
                else:
                    missed.setdefault(name, []).append(f"run {run}: " + "; ".join(result.verdict.missed))
                print(f"  {name} run {run + 1}/{args.runs}: restore {restore}", file=sys.stderr, flush=True)
        loads += stable_load_times(stack, args.runs)  # before and after: the machine's load changes
    sidecar = stack_target.settings.sidecar
    threshold = sidecar.business.failure_threshold
    load_s = statistics.median(loads)
    window = threshold * sidecar.period_s
    print(
        f"{MODEL} on the embedded stack, LocalEngine, sidecar period {sidecar.period_s:g} s, "
        f"failure_threshold {threshold}, confirm_interval {sidecar.confirm_interval_s:g} s, "
        f"golden timeout {stack_target.model_settings.golden.timeout_s:g} s, rollback order "
        f"{stack_target.settings.rollback.order}, {args.runs} runs per scenario "
        f"({time.monotonic() - started:.0f} s in all)"
    )
    print(
        f"Triton's own load of the stable version (pinned swap), median of {len(loads)}: {load_s:.3f} s; "
        f"floor = {threshold} × {sidecar.period_s:g} s + replicas × {load_s:.3f} s"
    )
    print(
        f"{'SCENARIO':<14}{'RUNS':>5}{'DETECT':>9}{'MEDIAN':>9}{'P95':>9}{'FLOOR':>9}"
        f"{'MEDIAN/FLOOR':>14}{'P95/FLOOR':>11}  TARGETS (≤0.8, ≤1.2)"
    )
    for name in args.scenarios:
        floor = window + BY_NAME[name].replicas * load_s
        times = restores.get(name, [])
        if not times:
            print(f"{name:<14}{0:>5}{'-':>9}{'-':>9}{'-':>9}{floor:>8.2f}s{'-':>14}{'-':>11}  -")
            continue
        median, slowest = statistics.median(times), p95(times)
        detect = statistics.median(detects[name])
        met = "met" if median <= 0.8 * floor and slowest <= 1.2 * floor else "MISSED"
        print(
            f"{name:<14}{len(times):>5}{detect:>8.2f}s{median:>8.2f}s{slowest:>8.2f}s{floor:>8.2f}s"
            f"{median / floor:>14.2f}{slowest / floor:>11.2f}  {met}"
        )
    print("For comparison: the published reference set-up (Triton, Kubernetes probes, Argo) reports ~23 s MTTR.")
    for name, lines in missed.items():
        for line in lines:
            print(f"  {name} {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
