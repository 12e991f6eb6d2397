"""Triton's own load (and unload) time for an example model vs the LocalEngine's whole rollback,
in both rollback orders (rollback.order: swap, unload-first), measured in one run.

Starts a real tritonserver over a scratch copy of the example repository, promotes versions 1 and 2
of linear_scorer through the real promote path, pushes a broken version 3 (wrong weights), serves it,
and rolls it back with the LocalEngine (lease → fetch-stable → restore → record), several times per
order. Each run pushes v3 again (the rollback moved it aside) and serves it before the clock starts.

    .venv/bin/python benchmarks/rollback_time.py [--runs 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from healer.edges.embedded import EmbeddedTriton
from healer.edges.logs import configure_logging
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.engines.factory import local_engine
from healer.settings import RollbackSettings, StoreSettings, load_settings
from healer.vocabulary import RollbackRequest
from workflows.steps.promote import promote

ROOT = Path(__file__).resolve().parents[1]
MODEL = "linear_scorer"
TARGET_RATIO = 1.5  # for the swap order
ORDERS = ("swap", "unload-first")


def wait_unloaded(triton: TritonHttp, model: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(r.state in {"READY", "UNLOADING", "LOADING"} for r in triton.repository_index() if r.name == model):
            return
        time.sleep(0.01)
    raise TimeoutError(f"{model} still loaded after {timeout_s} s")


def push_broken(triton: TritonHttp, live: Path) -> None:
    """Push the broken v3 again (the last rollback moved it aside) and serve it from config.pbtxt."""
    target = live / MODEL / "3"
    if not target.exists():
        shutil.copytree(ROOT / "examples" / "broken" / MODEL / "wrong_weights", target)
    triton.unload_model(MODEL)
    wait_unloaded(triton, MODEL)
    triton.load_model(MODEL, timeout_s=60)  # config.pbtxt: latest = broken v3
    served = triton.served_versions(MODEL)
    if served != ["3"]:
        raise RuntimeError(f"expected the broken v3 to serve, Triton serves {served}")


def measure_triton(triton: TritonHttp, runs: int) -> tuple[list[float], list[float]]:
    """Triton's own load and unload times for the model, repeated."""
    loads, unloads = [], []
    for _ in range(runs):
        started = time.perf_counter()
        triton.unload_model(MODEL)
        wait_unloaded(triton, MODEL)
        unloads.append(time.perf_counter() - started)
        started = time.perf_counter()
        triton.load_model(MODEL, timeout_s=60)
        loads.append(time.perf_counter() - started)
    return loads, unloads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    configure_logging(level="warning")
    scratch = Path(tempfile.mkdtemp(prefix="healer-bench-"))
    live, store_root = scratch / "live", scratch / "store"
    for root in (live, store_root):
        shutil.copytree(ROOT / "examples" / "model_repository", root)
        shutil.copytree(ROOT / "examples" / "broken" / MODEL / "wrong_weights", root / MODEL / "3")
    base = load_settings(ROOT / "examples" / "healer.yaml")
    settings = dataclasses.replace(
        base,
        store=StoreSettings(filesystem=store_root),
        live_repository=live,
        rollback=RollbackSettings(state_dir=scratch / "runs"),
    )
    store = ModelStore(FilesystemBlobs(store_root))
    try:
        with EmbeddedTriton(live, load_models=[MODEL]) as server:
            settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=server.url))
            triton = TritonHttp(server.url, timeout_s=10)
            loads, unloads = measure_triton(triton, args.runs)
            # Promote v1 and v2 while Triton serves them, then serve the newest (broken) v3.
            config = triton.model_config(MODEL)
            triton.load_model(
                MODEL, config=json.dumps({**config, "version_policy": {"specific": {"versions": [1, 2]}}}), timeout_s=60
            )
            for version in ("1", "2"):
                promote(settings, triton, store, MODEL, version, by="benchmark")
            results = {}
            for order in ORDERS:
                ordered = dataclasses.replace(settings, rollback=dataclasses.replace(settings.rollback, order=order))
                engine = local_engine(ordered)
                totals, phase_times = [], []
                for run in range(args.runs):
                    push_broken(triton, live)
                    request = RollbackRequest(
                        model=MODEL, from_version="3", incident=f"bench-{order}-{run}-{int(time.time())}"
                    )
                    started = time.perf_counter()
                    status = engine.run(request, timeout_s=120)
                    totals.append(time.perf_counter() - started)
                    if not status.succeeded:
                        print(
                            f"{order} rollback {run} did not succeed: {status.phase} {status.message}", file=sys.stderr
                        )
                        return 1
                    phase_times.append({p["name"]: p["duration_s"] for p in json.loads(status.outputs["phases"])})
                results[order] = (totals, phase_times)
            triton.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_s, unload_s = statistics.median(loads), statistics.median(unloads)
    print(f"{MODEL}, {args.runs} runs each, medians:")
    print(f"  Triton load (POST .../load, synchronous):             {load_s:6.3f} s")
    print(f"  Triton unload until UNAVAILABLE in the index:          {unload_s:6.3f} s")
    for order, (totals, phase_times) in results.items():
        rollback_s = statistics.median(totals)
        print(f"  LocalEngine rollback, order {order + ',':<13} submit → Succeeded: {rollback_s:6.3f} s")
        for phase in ("lease", "fetch-stable", "restore", "record"):
            print(f"    {phase:<14}{statistics.median(p[phase] for p in phase_times):6.3f} s")
        target = f"  (target <= {TARGET_RATIO})" if order == "swap" else ""
        print(f"    rollback / load:            {rollback_s / load_s:5.2f}{target}")
        print(f"    rollback / (unload + load): {rollback_s / (unload_s + load_s):5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
