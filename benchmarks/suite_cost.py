"""What a golden suite costs the probe cycle (issue 30): one real tritonserver serving N copies of the
variable-length sequence model (tests/support/sequence_model.py, Python backend), each probed with a
suite of S requests (lengths spread over 1..64), ``probes.runner.probe_all`` with healer's own client
(TritonRest) at the sidecar's default probe_concurrency (8): the median cycle over C cycles, for a
suite of 1 and of S, the cost of one request, and the cycle extrapolated to 100 models against the
default 5 s period (linear in models x requests: measured so at 1, 10 and 100 models in docs/scale.md).

    .venv/bin/python -m benchmarks.suite_cost [--models 10] [--suite 10] [--cycles 7]
    .venv/bin/python -m benchmarks.suite_cost --models 100 --cycles 5    # measured at 100 (about 60 s on 2 cores)
    .venv/bin/python -m benchmarks.suite_cost --models 30 --cycles 3 --profile /tmp/cycle.prof   # where it goes

It prints the prober's own CPU time in a cycle too (this process: healer's client, what a sidecar pays);
the rest of a cycle is Triton answering (here on the same cores). Exits 1 when over the target.
``--profile`` writes cProfile statistics of the suite cycles, every probe worker's thread included
(``python -c "import pstats; pstats.Stats('/tmp/cycle.prof').sort_stats('tottime').print_stats(20)"``);
its times are wall times, a thread's waits on Triton and on the GIL included, and a profiled run's
cycle times are not the benchmark's figures. Since TritonRest keeps its connections (issue 30) the
client opens a connection per probe worker, not one per request: docs/measured.md has the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from healer.core.results import Status, Tier
from healer.edges.embedded import EmbeddedTriton
from healer.edges.logs import configure_logging
from healer.edges.triton_rest import TritonRest
from healer.settings import ModelSettings, Settings, TritonSettings, parse_section
from probes.runner import probe_all
from tests.support.sequence_model import golden_request, write_sequence_model

PERIOD_S = 5.0  # sidecar.period_s's default
TARGET = 0.2  # issue 30: a suite of 10 on 100 models under 0.2 x the period


def suite_settings(names: list[str], size: int, url: str) -> Settings:
    lengths = [max(1, round(1 + i * 63 / max(size - 1, 1))) for i in range(size)]
    models = tuple(
        parse_section(
            ModelSettings,
            {"name": name, "golden": [golden_request(f"len{n}", n) for n in lengths]},
            source="benchmark",
            base_dir=Path("."),
        )
        for name in names
    )
    return Settings(source="benchmark", triton=TritonSettings(url=url, timeout_s=5.0), models=models)


def median_cycle_s(
    settings: Settings, client: TritonRest, cycles: int, profile: Path | None = None
) -> tuple[float, float]:
    """The median cycle's wall time, and the median CPU time this process (the prober: healer's client,
    what a sidecar pays) spent in a cycle; the rest of the wall time is Triton's side. ``profile``: the
    cycles' cProfile statistics written there (every thread's: the probes run on the pool's workers)."""
    probe_all(settings, client, concurrency=8)  # warm-up: every model's first answers
    times, cpu = [], []
    for _ in range(cycles):
        started, cpu_started = time.perf_counter(), time.process_time()
        with _profiled(profile):
            results = probe_all(settings, client, concurrency=8)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        failed = [r for r in results if r.tier is Tier.BUSINESS and r.status is not Status.PASS]
        if failed:
            raise SystemExit(f"a probe did not pass: {failed[0].reason}")
    return statistics.median(times), statistics.median(cpu)


@contextlib.contextmanager
def _profiled(path: Path | None) -> Iterator[None]:
    """cProfile over every thread while the block runs (threading.setprofile_all_threads is 3.12: each new
    worker thread is given a profiler of its own through threading.setprofile), the statistics added to
    ``path``. Profiling slows the cycle: the cycle times of a profiled run are not the benchmark's figures."""
    if path is None:
        yield
        return
    profilers: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start(*_: object) -> None:
        profiler = cProfile.Profile()
        with lock:
            profilers.append(profiler)
        sys.setprofile(None)
        profiler.enable()

    main_profiler = cProfile.Profile()
    threading.setprofile(start)
    main_profiler.enable()
    try:
        yield
    finally:
        main_profiler.disable()
        threading.setprofile(None)
        for thread in threading.enumerate():  # the pool's workers, let go without waiting: done by now
            if thread.name.startswith("probe"):
                thread.join(timeout=5)
        with lock:
            for profiler in profilers:
                profiler.disable()
            stats = pstats.Stats(main_profiler)
            for profiler in profilers:
                stats.add(profiler)
        if path.exists():
            stats.add(str(path))
        stats.dump_stats(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--suite", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument(
        "--profile", type=Path, help="write the suite cycles' cProfile statistics here (slows them: no figures)"
    )
    args = parser.parse_args()
    configure_logging(level="warning")
    names = [f"seq_{i:03d}" for i in range(args.models)]
    if args.profile is not None:
        args.profile.unlink(missing_ok=True)  # the cycles' statistics are added up there
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        for name in names:
            write_sequence_model(Path(tmp), name, {1: 0})
        with EmbeddedTriton(tmp, load_models=names, startup_timeout_s=600) as server:
            client = TritonRest(server.url, timeout_s=5.0)
            load_before = os.getloadavg()[0]
            one, _ = median_cycle_s(suite_settings(names, 1, server.url), client, args.cycles)
            many, many_cpu = median_cycle_s(
                suite_settings(names, args.suite, server.url), client, args.cycles, args.profile
            )
            load_after = os.getloadavg()[0]
    per_request_ms = (many - one) / (args.models * (args.suite - 1)) * 1000
    at_100 = many * 100 / args.models
    print(
        f"{args.models} models, concurrency 8, median of {args.cycles} cycles; {os.cpu_count()} cores, load average "
        f"{load_before:.2f} before the cycles, {load_after:.2f} after (Triton and the prober share the machine)"
    )
    print(f"  suite of 1:  {one:.3f} s a cycle")
    print(
        f"  suite of {args.suite}: {many:.3f} s a cycle ({many / one:.1f} x); one more request: "
        f"{per_request_ms:.2f} ms; the prober's own CPU {many_cpu:.3f} s of it ({100 * many_cpu / many:.0f} %)"
    )
    verdict = "within" if at_100 / PERIOD_S <= TARGET else "OVER"
    how = "measured" if args.models == 100 else "extrapolated"
    print(
        f"  100 models, suite of {args.suite} ({how}): {at_100:.2f} s a cycle = {at_100 / PERIOD_S:.2f} x the "
        f"{PERIOD_S:g} s period ({verdict} the {TARGET:g} x target)"
    )
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    raise SystemExit(main())
