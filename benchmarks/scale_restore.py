"""Restore time against the number of replicas: real Tritons (1, 2, 4), then a SIMULATION (1 to 1000).

real        1, 2 and 4 real tritonservers (healer.edges.embedded.EmbeddedTriton) over ONE live repository
            (as a shared volume would be), the example model linear_scorer, a filesystem store with
            v1 and v2 promoted through the real promote path. A wrong-weights v3 is pushed and served
            on every replica, then ONE rollback (the LocalEngine, list_replicas returning every
            replica) restores all: the canary alone, then waves of rollback.parallelism. Recorded:
            the restore phase, the total (submit → Succeeded) and each replica's load. All the
            Tritons share this machine's cores, which a cluster's replicas would not: concurrent
            loads here also compete for CPU.
simulation  benchmarks/sim_triton.py: one asyncio thread serving one port per simulated replica,
            answering the calls the rollback makes; a load reads S bytes from one store of bandwidth
            B shared by the loads in progress, then takes a fixed part. The rollback itself is the
            product's code (workflows.steps.heal with TritonRest per replica, a real filesystem store
            and lease), run in a process of its own whose peak RSS and thread count are measured.
            Store models: unsaturated (B infinite) at the real Triton's measured load time and at a
            chosen 10 s; bandwidth-limited (1 GB model, 10 Gbit/s = 1.25 GB/s store). Replicas 1, 10,
            100, 1000; parallelism 10, 50 (the recommended default), 100, 1000. A combination whose
            predicted time (canary + waves × load) exceeds the cap is skipped and reported with that
            prediction; combinations that are the same run (a wave holds at most replicas − 1) are run
            once; one predicted to fail as it already did with fewer replicas is skipped. The
            simulation verifies with a relaxed golden SLO (what is measured is the restore) and
            reports each verify's latency against the example's 100 ms; then the 1000-replica run
            again with the example's SLO, as the product would verify.

Targets at the recommended default parallelism: restore(100) ≤ 2 × restore(1), restore(1000) ≤ 3 ×
restore(1) (unsaturated, real load time), 1000 replicas within the 90 s budget at a 10 s load, and
for the bandwidth-limited store how far the store's lower bound N·S/B sets the time.

    .venv/bin/python -m benchmarks.scale_restore [--quick] [-o json] [--figures DIR] [--cap 180]

About 17 minutes on 2 cores (the full matrix); --quick about 80 s.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is a folder, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.plot import line_chart  # noqa: E402
from benchmarks.sim_triton import OutputSpec, SimulatedTriton  # noqa: E402

MODEL = "linear_scorer"
FAILING, STABLE = "3", "2"
CONFIG = ROOT / "examples" / "healer.yaml"
BUDGET_S = 90.0  # rollback.deadline_s's default: lease → verified on every replica
# rollback.parallelism's default, the first wave after the canary (each next wave doubles while the
# store keeps up, up to rollback.max_parallelism); the targets are evaluated at this default. Why: see
# RECOMMENDATION below and docs/scale.md.
RECOMMENDED_PARALLELISM = 50
REAL_LOAD = "simulation-unsaturated-real-load"
CHOSEN_LOAD = "simulation-unsaturated-chosen-load"
LIMITED = "simulation-bandwidth-limited"
# The golden request's SLO and timeout while measuring (see measuring()).
MEASURE_S = 30.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run measures. ``full()`` is the issue's matrix; ``quick()`` a smoke test's."""

    real: tuple[tuple[int, int], ...]  # (replicas, parallelism)
    runs: int
    replicas: tuple[int, ...]
    parallelism: tuple[int, ...]
    chosen_load_s: float  # the simulation's "slow model" load
    model_bytes: float  # S, the bandwidth-limited simulation's model size
    bandwidth_bps: float  # B, its store's bandwidth (bytes/s)
    load_timeout_s: float  # rollback.load_timeout_s
    cap_s: float  # skip a simulated combination predicted to take longer
    recommended: int  # the first wave of the product's default (rollback.parallelism)
    ceiling: int = 200  # the largest wave of the product's default (rollback.max_parallelism)
    tick_s: float = 0.01
    stores: tuple[str, ...] = ("real-load", "chosen-load", "bandwidth-limited")

    @staticmethod
    def full() -> Plan:
        return Plan(
            real=((1, 10), (2, 10), (4, 10), (4, 1)),
            runs=3,
            replicas=(1, 10, 100, 1000),
            parallelism=(10, RECOMMENDED_PARALLELISM, 100, 1000),
            chosen_load_s=10.0,
            model_bytes=1e9,
            bandwidth_bps=10e9 / 8,
            load_timeout_s=60.0,
            cap_s=180.0,
            recommended=RECOMMENDED_PARALLELISM,
        )

    @staticmethod
    def quick() -> Plan:
        # Tiny: 2 real replicas, 16 simulated; with the real load (~1.5 s) as the fixed part, a wave of
        # 15 concurrent 0.2 s reads (~4.5 s) outlasts a 3 s load timeout: that path is exercised too.
        return Plan(
            real=((1, 10), (2, 10)),
            runs=1,
            replicas=(1, 4, 16),
            parallelism=(4, 16),
            chosen_load_s=0.5,
            model_bytes=1e6,
            bandwidth_bps=5e6,
            load_timeout_s=3.0,
            cap_s=20.0,
            recommended=4,
            ceiling=8,
        )


def policies(plan: Plan) -> list[tuple[int, int]]:
    """The wave policies measured, as (first wave, largest wave): each fixed size of the matrix (waves
    that never grow), then the product's default (waves that start at ``recommended`` and double while
    the store keeps up, up to ``ceiling``: workflows/plan.py next_wave_size)."""
    fixed = [(p, p) for p in plan.parallelism]
    default = (plan.recommended, max(plan.recommended, plan.ceiling))
    return fixed + ([default] if default not in fixed else [])


def policy_label(parallelism: int, ceiling: int) -> str:
    return f"{parallelism}" if ceiling == parallelism else f"{parallelism}→{ceiling}"


# ---- shared set-up --------------------------------------------------------------------------------------


def _settings(**changes: Any) -> Any:
    from healer.settings import load_settings

    return dataclasses.replace(load_settings(CONFIG), **changes)


def measuring(settings: Any) -> Any:
    """``settings`` with the model's golden latency SLO and timeout at MEASURE_S: what is measured is
    the restore, not latency (as tests/support/rollback_stack.py relaxed_slo). Each verify's latency is
    still recorded and compared with the example's SLO (``over_example_slo`` in the results)."""
    models = tuple(
        dataclasses.replace(
            m, golden=dataclasses.replace(m.golden, latency_slo_ms=MEASURE_S * 1000, timeout_s=MEASURE_S)
        )
        if m.name == MODEL
        else m
        for m in settings.models
    )
    return dataclasses.replace(settings, models=models)


def example_slo_ms() -> float:
    return float(_settings().model(MODEL).golden.latency_slo_ms)


def verify_latencies(restore_outputs: Mapping[str, Any]) -> list[float]:
    """Each restored replica's golden request latency (ms), from the restore phase's outputs."""
    return [
        float(r["verify"]["latency_ms"])
        for r in restore_outputs.get("replicas", {}).values()
        if isinstance(r.get("verify"), dict) and "latency_ms" in r["verify"]
    ]


def golden_outputs() -> dict[str, OutputSpec]:
    """The example golden request's expected outputs, for the simulation's good versions."""
    golden = _settings().model(MODEL).golden
    return {
        o.tensor.name: OutputSpec(o.tensor.datatype, tuple(o.tensor.shape), tuple(o.tensor.values.ravel().tolist()))
        for o in golden.outputs
    }


def write_repository(root: Path) -> None:
    """linear_scorer v1 and v2 (good) and a wrong-weights v3 under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "examples" / "model_repository" / MODEL, root / MODEL, ignore=_pycache)
    shutil.copytree(ROOT / "examples" / "broken" / MODEL / "wrong_weights", root / MODEL / FAILING, ignore=_pycache)


def _pycache(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


# ---- real Tritons ---------------------------------------------------------------------------------------


def _serve_broken(url: str, live: Path) -> None:
    """Push v3 again (the last rollback moved it aside) and serve it from config.pbtxt (newest)."""
    from healer.edges.triton_rest import TritonRest

    triton = TritonRest(url, timeout_s=10)
    triton.unload_model(MODEL)
    deadline = time.monotonic() + 60
    while any(r.state in {"READY", "UNLOADING", "LOADING"} for r in triton.repository_index() if r.name == MODEL):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{MODEL} not unloaded on {url} within 60 s")
        time.sleep(0.02)
    triton.load_model(MODEL, timeout_s=180)
    if triton.served_versions(MODEL) != [FAILING]:
        raise RuntimeError(f"{url}: expected the broken v{FAILING} to serve, got {triton.served_versions(MODEL)}")


def _real_rollback(engine: Any, urls: list[str], live: Path, count: int, parallelism: int, run: int) -> dict[str, Any]:
    """v3 pushed and served on every replica, then ONE rollback; what it took."""
    from healer.edges.triton_rest import TritonRest
    from healer.vocabulary import RollbackRequest

    if not (live / MODEL / FAILING).exists():
        shutil.copytree(ROOT / "examples" / "broken" / MODEL / "wrong_weights", live / MODEL / FAILING)
    with concurrent.futures.ThreadPoolExecutor(len(urls)) as pool:
        list(pool.map(lambda u: _serve_broken(u, live), urls))
    request = RollbackRequest(
        model=MODEL, from_version=FAILING, incident=f"real-{count}-{parallelism}-{run}-{time.time_ns() % 10**12}"
    )
    started = time.perf_counter()
    status = engine.run(request, timeout_s=300)
    total = time.perf_counter() - started
    if not status.succeeded:
        raise RuntimeError(f"real rollback of {count} replicas failed: {status.phase} {status.message}")
    phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
    restore = phases["restore"]
    loads = {u: r["load"]["load_s"] for u, r in restore["outputs"]["replicas"].items() if "load" in r}
    served = {u: TritonRest(u, timeout_s=5).served_versions(MODEL) for u in urls}
    if any(v != [STABLE] for v in served.values()):
        raise RuntimeError(f"after the rollback the replicas serve {served}")
    return {
        "label": "real",
        "replicas": count,
        "parallelism": parallelism,
        "run": run,
        "restore_s": restore["duration_s"],
        "total_s": round(total, 3),
        "phases_s": {name: p["duration_s"] for name, p in phases.items()},
        "waves": [len(w) for w in restore["outputs"]["waves"]],
        "load_s": [loads[u] for u in urls if u in loads],
        "verify_ms": [round(x, 1) for x in verify_latencies(restore["outputs"])],
    }


def _promote_stable(settings: Any, store: Any) -> None:
    """v1 and v2 served on the first replica and promoted through the real promote path."""
    from healer.edges.triton import TritonHttp
    from workflows.steps.promote import promote

    triton = TritonHttp(settings.triton.url, timeout_s=10)
    try:
        config = triton.model_config(MODEL)
        config["version_policy"] = {"specific": {"versions": [1, 2]}}
        triton.load_model(MODEL, config=json.dumps(config), timeout_s=180)
        for version in ("1", STABLE):
            promote(settings, triton, store, MODEL, version, by="benchmark")
    finally:
        triton.close()


def run_real(plan: Plan, log: Any) -> dict[str, Any]:
    """ONE rollback per run restores every real replica; the restore phase, the total, each load."""
    from healer.edges.embedded import EmbeddedTriton
    from healer.edges.store import FilesystemBlobs, ModelStore
    from healer.engines.local import LocalEngine
    from healer.settings import RollbackSettings, StoreSettings
    from workflows.plan import ReplicaTarget
    from workflows.rollback import build_rollback_template
    from workflows.steps.context import context_from_settings

    scratch = Path(tempfile.mkdtemp(prefix="healer-scale-real-"))
    live, store_root = scratch / "live", scratch / "store"
    write_repository(live)
    write_repository(store_root)
    rows: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as servers:
            tritons: list[EmbeddedTriton] = []

            def replicas(count: int) -> list[str]:
                while len(tritons) < count:
                    workdir = scratch / f"triton-{len(tritons)}"
                    tritons.append(servers.enter_context(EmbeddedTriton(live, load_models=[MODEL], workdir=workdir)))
                return [t.url for t in tritons[:count]]

            settings = _settings(
                store=StoreSettings(filesystem=store_root),
                live_repository=live,
                rollback=RollbackSettings(state_dir=scratch / "runs"),
            )
            settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=replicas(1)[0]))
            _promote_stable(settings, ModelStore(FilesystemBlobs(store_root)))
            settings = measuring(settings)
            for count, parallelism in plan.real:
                urls = replicas(count)
                ordered = dataclasses.replace(
                    settings,
                    rollback=dataclasses.replace(
                        settings.rollback, parallelism=parallelism, max_parallelism=parallelism
                    ),
                )
                targets = [ReplicaTarget(u, f"triton-{i}") for i, u in enumerate(urls)]

                def context(ordered: Any = ordered, targets: list[ReplicaTarget] = targets) -> Any:
                    return dataclasses.replace(context_from_settings(ordered), list_replicas=lambda: targets)

                engine = LocalEngine(build_rollback_template(), context, scratch / f"runs-{count}-{parallelism}")
                for run in range(plan.runs):
                    row = _real_rollback(engine, urls, live, count, parallelism, run)
                    rows.append(row)
                    print(
                        f"  real: {count} replica(s), parallelism {parallelism}, run {run + 1}/{plan.runs}: "
                        f"restore {row['restore_s']:.2f} s, total {row['total_s']:.2f} s, loads {row['load_s']}",
                        file=log,
                        flush=True,
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = []
    for count, parallelism in plan.real:
        mine = [r for r in rows if r["replicas"] == count and r["parallelism"] == parallelism]
        summary.append(
            {
                "label": "real",
                "replicas": count,
                "parallelism": parallelism,
                "runs": len(mine),
                "restore_s": _median([r["restore_s"] for r in mine]),
                "total_s": _median([r["total_s"] for r in mine]),
                "canary_load_s": _median([r["load_s"][0] for r in mine]),
                "wave_load_s": _median([x for r in mine for x in r["load_s"][1:]]),
                "load_s_max": max((x for r in mine for x in r["load_s"]), default=None),
                "verify_ms_max": max((x for r in mine for x in r["verify_ms"]), default=None),
                "over_example_slo": sum(1 for r in mine for x in r["verify_ms"] if x > example_slo_ms()),
            }
        )
    single = [r["load_s"][0] for r in rows if r["replicas"] == 1]
    return {
        "label": "real",
        "what": "real tritonservers (CPU, Python backend) on this machine, one live repository, LocalEngine",
        "cpus": os.cpu_count(),
        "load_s": _median(single),
        "rows": summary,
        "runs": rows,
    }


# ---- the simulation -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StoreModel:
    name: str  # always begins with "simulation"
    title: str
    short: str  # the figure's title
    load_s: float  # the fixed part of a load
    model_bytes: float = 0.0
    bandwidth_bps: float = math.inf

    def load_alone_s(self) -> float:
        return self.load_s + (0.0 if math.isinf(self.bandwidth_bps) else self.model_bytes / self.bandwidth_bps)

    def wave_s(self, size: int) -> float:
        """``size`` loads started together: each reads S at B/size, then its fixed part."""
        if math.isinf(self.bandwidth_bps):
            return self.load_s
        return self.load_s + size * self.model_bytes / self.bandwidth_bps


def store_models(plan: Plan, real_load_s: float) -> list[StoreModel]:
    """The simulation's store models that ``plan.stores`` names."""
    return [m for m in _store_models(plan, real_load_s) if any(m.name.endswith(key) for key in plan.stores)]


def _store_models(plan: Plan, real_load_s: float) -> list[StoreModel]:
    size = f"{plan.model_bytes / 1e9:g} GB" if plan.model_bytes >= 1e8 else f"{plan.model_bytes / 1e6:g} MB"
    rate = plan.bandwidth_bps * 8
    speed = f"{rate / 1e9:g} Gbit/s" if rate >= 1e8 else f"{rate / 1e6:g} Mbit/s"
    return [
        StoreModel(
            REAL_LOAD,
            f"simulation, unsaturated store, load {real_load_s:.2f} s (the real Triton's)",
            f"simulation, unsaturated store, load {real_load_s:.2f} s (real)",
            real_load_s,
        ),
        StoreModel(
            CHOSEN_LOAD,
            f"simulation, unsaturated store, load {plan.chosen_load_s:g} s (chosen)",
            f"simulation, unsaturated store, load {plan.chosen_load_s:g} s",
            plan.chosen_load_s,
        ),
        StoreModel(
            LIMITED,
            f"simulation, {size} model from a {speed} store, + {real_load_s:.2f} s fixed",
            f"simulation, {size} model, {speed} store",
            real_load_s,
            plan.model_bytes,
            plan.bandwidth_bps,
        ),
    ]


def predict(
    model: StoreModel, replicas: int, parallelism: int, load_timeout_s: float, ceiling: int | None = None
) -> tuple[float, str]:
    """Canary + waves × load, the waves sized as the product sizes them (growing up to ``ceiling``);
    and, when a wave's loads would outlast load_timeout_s, why it fails."""
    from workflows.plan import SHRINK_AT, next_wave_size

    seconds = model.load_alone_s()
    rest = replicas - 1
    step = max(1, parallelism)
    if seconds > SHRINK_AT * load_timeout_s:
        step = 1
    while rest > 0:
        size = min(step, rest)
        wave = model.wave_s(size)
        if wave > load_timeout_s:
            why = (
                f"a wave of {size} concurrent loads needs {wave:.1f} s > load_timeout_s {load_timeout_s:g} s: "
                "its loads time out and the rollback fails"
            )
            return seconds + load_timeout_s, why
        seconds += wave
        rest -= size
        step = next_wave_size(step, wave, load_timeout_s=load_timeout_s, ceiling=ceiling or parallelism)
    return seconds, ""


def max_safe_parallelism(model: StoreModel, load_timeout_s: float) -> int | None:
    """The largest wave whose concurrent loads finish within load_timeout_s (None: no limit)."""
    if math.isinf(model.bandwidth_bps) or model.model_bytes <= 0:
        return None
    return max(0, math.floor((load_timeout_s - model.load_s) * model.bandwidth_bps / model.model_bytes))


def template_store(scratch: Path, outputs: Mapping[str, OutputSpec]) -> Path:
    """A filesystem store that is also the live repository (a shared volume), v1 and v2 promoted
    through the real promote path against one simulated replica."""
    from healer.edges.store import FilesystemBlobs, ModelStore
    from healer.edges.triton_rest import TritonRest
    from healer.settings import RollbackSettings, StoreSettings
    from workflows.steps.promote import promote

    root = scratch / "template"
    write_repository(root)
    settings = _settings(
        store=StoreSettings(filesystem=root), live_repository=root, rollback=RollbackSettings(state_dir=scratch)
    )
    with SimulatedTriton(
        1,
        model=MODEL,
        good_versions={"1", STABLE},
        outputs=outputs,
        serving=["1", STABLE],
        load_s=0.0,
        live_repository=root,
    ) as sim:
        triton = TritonRest(sim.urls[0], timeout_s=5)
        for version in ("1", STABLE):
            promote(settings, triton, ModelStore(FilesystemBlobs(root)), MODEL, version, by="benchmark")
    return root


def run_simulated(
    model: StoreModel,
    replicas: int,
    parallelism: int,
    ceiling: int,
    plan: Plan,
    template: Path,
    outputs: Mapping[str, OutputSpec],
    *,
    example_slo: bool = False,
) -> dict[str, Any]:
    """One rollback of ``replicas`` simulated replicas, the rollback in a process of its own.
    ``example_slo``: verify with the example's golden SLO and timeout, as the product would."""
    scratch = Path(tempfile.mkdtemp(prefix="healer-scale-sim-"))
    root = scratch / "store"
    shutil.copytree(template, root, symlinks=True)
    try:
        with SimulatedTriton(
            replicas,
            model=MODEL,
            good_versions={"1", STABLE},
            outputs=outputs,
            serving=[FAILING],
            load_s=model.load_s,
            model_bytes=model.model_bytes,
            bandwidth_bps=model.bandwidth_bps,
            tick_s=plan.tick_s,
            live_repository=root,
        ) as sim:
            spec = {
                "root": str(root),
                "urls": sim.urls,
                "parallelism": parallelism,
                "max_parallelism": ceiling,
                "load_timeout_s": plan.load_timeout_s,
                "example_slo": example_slo,
                "incident": f"sim-{replicas}-{parallelism}-{time.time_ns() % 10**12}",
            }
            stderr = scratch / "rollback.log"
            with stderr.open("wb") as err:
                child = subprocess.run(
                    [sys.executable, "-m", "benchmarks.scale_restore", "--simulation-child"],
                    input=json.dumps(spec).encode(),
                    stdout=subprocess.PIPE,
                    stderr=err,
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    timeout=plan.cap_s * 3 + 120,
                    check=False,
                )
            lines = child.stdout.decode().strip().splitlines()
            if child.returncode != 0 or not lines:
                tail = stderr.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the simulated rollback's process exited {child.returncode}: {tail}")
            out: dict[str, Any] = json.loads(lines[-1])
            served = sim.served()
            out["restored_replicas"] = sum(1 for v in served if v == [STABLE])
            out["simulation_stats"] = sim.stats()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def simulation_child() -> int:
    """The rollback's own process (``--simulation-child``): a spec on stdin, one JSON line out."""
    import workflows.rollback  # noqa: F401 - what an Argo heal pod imports (Hera's runner loads this module)
    from healer.edges.logs import configure_logging
    from healer.edges.store import FilesystemBlobs, ModelStore
    from healer.edges.triton_rest import TritonRest
    from healer.settings import RollbackSettings, StoreSettings
    from healer.vocabulary import RollbackRequest
    from workflows.plan import ReplicaTarget
    from workflows.steps import HealFailed, StepContext, heal

    configure_logging(level="error")
    spec = json.loads(sys.stdin.read())
    root = Path(spec["root"])
    settings = _settings(
        store=StoreSettings(filesystem=root),
        live_repository=root,
        rollback=RollbackSettings(
            state_dir=root.parent / "runs",
            parallelism=spec["parallelism"],
            max_parallelism=spec["max_parallelism"],
            load_timeout_s=spec["load_timeout_s"],
        ),
    )
    urls: list[str] = spec["urls"]
    settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=urls[0]))
    if not spec.get("example_slo"):
        settings = measuring(settings)
    targets = [ReplicaTarget(u, f"sim-{i}") for i, u in enumerate(urls)]
    ctx = StepContext(
        settings=settings,
        triton=TritonRest(urls[0], timeout_s=settings.triton.timeout_s),
        store=ModelStore(FilesystemBlobs(root)),
        live_repository=root,
        list_replicas=lambda: targets,
        workflow_name="scale-restore-simulation",
    )
    request = RollbackRequest(model=MODEL, from_version=FAILING, incident=spec["incident"], reason="wrong-answer")
    peak = {"threads": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            peak["threads"] = max(peak["threads"], _proc_status()["Threads"])

    sampler = threading.Thread(target=sample, name="sampler", daemon=True)
    baseline = _proc_status()
    sampler.start()
    started = time.perf_counter()
    error = ""
    try:
        phases = heal(ctx, request)["phases"]
    except HealFailed as failure:
        phases = [p.__dict__ for p in failure.phases]
        error = str(failure)
    total = time.perf_counter() - started
    stop.set()
    sampler.join()
    status = _proc_status()
    restore = next((p for p in phases if p["name"] == "restore"), None)
    loads: list[float] = []
    waves: list[int] = []
    verified: list[float] = []
    if restore is not None and restore.get("outputs"):
        loads = [r["load"]["load_s"] for r in restore["outputs"]["replicas"].values() if "load" in r]
        waves = [len(w) for w in restore["outputs"]["waves"]]
        verified = verify_latencies(restore["outputs"])
    slo = example_slo_ms()
    print(
        json.dumps(
            {
                "ok": not error,
                "error": error[:600] + (" ..." if len(error) > 600 else ""),
                "restore_s": restore["duration_s"] if restore else None,
                "total_s": round(total, 3),
                "phases_s": {p["name"]: p["duration_s"] for p in phases},
                "waves": len(waves),
                "largest_wave": max(waves, default=0),
                "wave_sizes": waves,
                "load_s_median": _median(loads),
                "load_s_max": max(loads, default=None),
                "verify_ms_median": _median(verified),
                "verify_ms_max": round(max(verified), 1) if verified else None,
                "over_example_slo": sum(1 for x in verified if x > slo),
                "example_slo_ms": slo,
                "rss_before_mib": round(baseline["VmRSS"] / 1024, 1),
                "peak_rss_mib": round(status["VmHWM"] / 1024, 1),
                "peak_threads": max(peak["threads"], baseline["Threads"]),
            }
        ),
        flush=True,
    )
    return 0


def _proc_status() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in {"VmRSS", "VmHWM", "Threads"}:
            fields[key] = int(value.split()[0])
    return fields


def run_simulation(plan: Plan, real_load_s: float, log: Any) -> dict[str, Any]:
    outputs = golden_outputs()
    scratch = Path(tempfile.mkdtemp(prefix="healer-scale-template-"))
    models = store_models(plan, real_load_s)
    rows: list[dict[str, Any]] = []
    try:
        template = template_store(scratch, outputs)
        for model in models:
            done: dict[tuple[int, int, int], dict[str, Any]] = {}  # (replicas, first, largest wave): same run
            failed_at: set[tuple[int, int]] = set()  # wave policies whose run (at fewer replicas) failed
            for replicas in plan.replicas:
                for parallelism, ceiling in policies(plan):
                    effective = max(1, min(parallelism, replicas - 1))
                    predicted, fails = predict(model, replicas, parallelism, plan.load_timeout_s, ceiling)
                    row: dict[str, Any] = {
                        "label": "simulation",
                        "store": model.name,
                        "replicas": replicas,
                        "parallelism": parallelism,
                        "max_parallelism": ceiling,
                        "policy": policy_label(parallelism, ceiling),
                        "predicted_s": round(predicted, 2),
                        "predicted_failure": fails,
                        "lower_bound_s": round(replicas * model.model_bytes / model.bandwidth_bps, 2)
                        if not math.isinf(model.bandwidth_bps)
                        else None,
                    }
                    # Waves that cannot grow past what is left are the same run, whatever the ceiling.
                    key = (replicas, effective, max(effective, min(ceiling, replicas - 1)))
                    if key in done:
                        same = done[key]
                        row.update({k: v for k, v in same.items() if k not in row or k == "status"})
                        row["same_as"] = same["policy"]
                        row["note"] = f"same run as parallelism {same['policy']}: " + (
                            f"a wave holds at most {replicas - 1}" if replicas > 1 else "the canary alone"
                        )
                    elif predicted > plan.cap_s:
                        row.update(status="skipped", note=f"predicted {predicted:.0f} s > cap {plan.cap_s:g} s")
                    elif fails and (parallelism, ceiling) in failed_at:
                        row.update(status="skipped", note="predicted to fail as it did with fewer replicas: " + fails)
                    else:
                        measured = run_simulated(model, replicas, parallelism, ceiling, plan, template, outputs)
                        row.update(measured)
                        row["status"] = "ok" if measured["ok"] else "failed"
                        done[key] = row
                    if row.get("status") == "failed":
                        failed_at.add((parallelism, ceiling))
                    rows.append(row)
                    _progress(row, log)
        slo_checks = example_slo_checks(plan, models, template, outputs, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    checks = []
    for model in models:
        safe = max_safe_parallelism(model, plan.load_timeout_s)
        if safe is None:
            continue
        failed = sorted({r["policy"] for r in rows if r["store"] == model.name and r.get("status") == "failed"})
        checks.append(
            {
                "store": model.name,
                "load_timeout_s": plan.load_timeout_s,
                "load_alone_s": round(model.load_alone_s(), 3),
                "max_wave_within_timeout": safe,
                "exceeded_from_parallelism": safe + 1,
                "measured_failures_at_parallelism": failed,
                "note": (
                    f"a wave of k loads takes {model.load_s:.2f} + k × {model.model_bytes / model.bandwidth_bps:.2f}"
                    f" s; from k = {safe + 1} it outlasts load_timeout_s {plan.load_timeout_s:g} s"
                ),
            }
        )
    return {
        "label": "simulation",
        "what": "benchmarks/sim_triton.py (not Triton); the rollback is the product's code in its own process",
        "store_models": [
            dataclasses.asdict(m)
            | {"load_alone_s": round(m.load_alone_s(), 3), "bandwidth_bps": _finite(m.bandwidth_bps)}
            for m in models
        ],
        "rows": rows,
        "load_timeout_check": checks,
        "example_slo_check": slo_checks,
    }


def example_slo_checks(
    plan: Plan, models: Sequence[StoreModel], template: Path, outputs: Mapping[str, OutputSpec], log: Any
) -> list[dict[str, Any]]:
    """The largest fleet again, unsaturated store at the real load, with the example's golden SLO
    (100 ms) and timeout as the product runs it: does verifying hundreds of replicas at once from one
    process still pass the latency SLO? Each parallelism whose run is predicted to take <= 60 s."""
    model = next((m for m in models if m.name == REAL_LOAD), None)
    if model is None:
        return []
    replicas = max(plan.replicas)
    out = []
    for parallelism, ceiling in policies(plan):
        predicted, _ = predict(model, replicas, parallelism, plan.load_timeout_s, ceiling)
        if predicted > min(60.0, plan.cap_s) or replicas == 1:
            continue
        measured = run_simulated(model, replicas, parallelism, ceiling, plan, template, outputs, example_slo=True)
        row: dict[str, Any] = {
            "store": model.name,
            "replicas": replicas,
            "parallelism": parallelism,
            "max_parallelism": ceiling,
            "policy": policy_label(parallelism, ceiling),
            "golden": f"latency_slo_ms {example_slo_ms():g} (examples/healer.yaml)",
            "status": "ok" if measured["ok"] else "failed",
        } | {k: measured.get(k) for k in ("restore_s", "error", "restored_replicas", "peak_threads", "peak_rss_mib")}
        out.append(row)
        print(
            f"  example-SLO check, {replicas} simulated replicas, parallelism {row['policy']}: {row['status']}, "
            f"restore {row['restore_s']} s {(row['error'] or '')[:160]}",
            file=log,
            flush=True,
        )
    return out


def _finite(value: float) -> float | None:
    """JSON has no infinity: an unsaturated store's bandwidth is written as null."""
    return None if math.isinf(value) else value


def _progress(row: Mapping[str, Any], log: Any) -> None:
    what = f"  {row['store']}: {row['replicas']} replica(s), parallelism {row['policy']}: "
    if row.get("status") == "skipped":
        what += f"skipped ({row['note']})"
    elif row.get("restore_s") is not None:
        what += f"{row['status']}, restore {row['restore_s']:.2f} s (predicted {row['predicted_s']:.1f} s)"
        what += f", {row.get('peak_threads')} threads, {row.get('peak_rss_mib')} MiB peak"
        if row.get("same_as"):
            what += f" [same run as parallelism {row['same_as']}]"
    print(what, file=log, flush=True)


# ---- targets, recommendation --------------------------------------------------------------------------


def _find(
    result: Mapping[str, Any], store: str, replicas: int, parallelism: int, ceiling: int | None = None
) -> Mapping[str, Any] | None:
    for row in result["simulation"]["rows"]:
        if (row["store"], row["replicas"], row["parallelism"]) == (store, replicas, parallelism) and row.get(
            "max_parallelism", row["parallelism"]
        ) == (ceiling or parallelism):
            return row  # type: ignore[no-any-return]
    return None


def _time(row: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """A row's restore time, or its prediction when it was not run (said so)."""
    if row is None:
        return None, "not in this run's matrix"
    if row.get("status") == "ok":
        return float(row["restore_s"]), "measured"
    if row.get("status") == "failed":
        return None, f"failed: {row.get('error', '')[:200]}"
    return float(row["predicted_s"]), f"predicted ({row.get('note', '')})"


def targets(result: Mapping[str, Any], plan: Plan) -> list[dict[str, Any]]:
    at, top = plan.recommended, max(plan.recommended, plan.ceiling)
    label = policy_label(at, top)
    ordered = sorted(plan.replicas)
    big, mid = ordered[-1], ordered[-2] if len(ordered) > 1 else ordered[-1]
    real_load, chosen, limited = REAL_LOAD, CHOSEN_LOAD, LIMITED
    one, how_one = _time(_find(result, real_load, 1, at, top))
    out = []
    for replicas, factor in ((mid, 2.0), (big, 3.0)):
        value, how = _time(_find(result, real_load, replicas, at, top))
        ratio = value / one if value is not None and one else None
        out.append(
            {
                "name": (
                    f"simulation, unsaturated store, real load: restore({replicas}) / restore(1), parallelism {label}"
                ),
                "value": round(ratio, 2) if ratio is not None else None,
                "goal": f"<= {factor:g}",
                "met": ratio is not None and ratio <= factor,
                "note": f"restore({replicas}) {value} s ({how}); restore(1) {one} s ({how_one})",
            }
        )
    value, how = _time(_find(result, chosen, big, at, top))
    out.append(
        {
            "name": (
                f"simulation, unsaturated store, {plan.chosen_load_s:g} s load: restore({big}), parallelism {label}"
            ),
            "value": value,
            "goal": f"<= {BUDGET_S:g} s",
            "met": value is not None and value <= BUDGET_S and how == "measured",
            "note": how,
        }
    )
    for replicas in (mid, big):
        row = _find(result, limited, replicas, at, top)
        value, how = _time(row)
        bound = row["lower_bound_s"] if row else None
        out.append(
            {
                "name": f"simulation, bandwidth-limited store: restore({replicas}) against N·S/B, parallelism {label}",
                "value": value,
                "goal": f"<= {BUDGET_S:g} s; lower bound N·S/B = {bound} s",
                "met": value is not None and value <= BUDGET_S and how == "measured",
                "note": (
                    f"{how}; {value / bound:.2f} × the store's lower bound" if value is not None and bound else how
                )
                + (f"; the bound alone is {bound / BUDGET_S:.1f} × the budget" if bound and bound > BUDGET_S else ""),
            }
        )
    return out


RECOMMENDATION = (
    "Parallelism trades the unsaturated store's time (fewer waves: faster) against the bandwidth-limited "
    "store's load timeout (a wave of k loads shares the store: k × S/B + fixed part must stay under "
    "rollback.load_timeout_s, or every load of the wave times out and the rollback fails while Triton "
    "keeps loading). The default should never turn a rollback that would succeed into one that fails."
)


def recommendation(result: Mapping[str, Any], plan: Plan) -> dict[str, Any]:
    """The recommended default, with what failed (measured) or would (predicted) at each parallelism."""
    sim = result["simulation"]
    failures: dict[str, list[str]] = {}
    for row in sim["rows"]:
        if row.get("status") == "failed" or row.get("predicted_failure"):
            how = "failed" if row.get("status") == "failed" else "would fail (predicted)"
            failures.setdefault(row["policy"], []).append(
                f"{row['store']}, {row['replicas']} replicas: {how}: load_timeout_s exceeded"
            )
    for check in sim.get("example_slo_check", []):
        if check["status"] == "failed":
            failures.setdefault(check["policy"], []).append(
                f"{check['store']}, {check['replicas']} replicas, the example's golden SLO: failed: verify too slow"
            )
    never_failed = [p for p in plan.parallelism if str(p) not in failures]
    return {
        "rollback.parallelism": plan.recommended,
        "rollback.max_parallelism": max(plan.recommended, plan.ceiling),
        "default_failed": policy_label(plan.recommended, max(plan.recommended, plan.ceiling)) in failures,
        "largest_fixed_wave_without_a_failure": max(never_failed, default=None),
        "failures_by_parallelism": {str(p): sorted(set(v)) for p, v in sorted(failures.items())},
        "why": RECOMMENDATION,
    }


# ---- the whole benchmark ------------------------------------------------------------------------------


def run(quick: bool, *, plan: Plan | None = None, real_load_s: float | None = None, log: Any = None) -> dict[str, Any]:
    """Measure and return everything (JSON-ready). ``real_load_s``: skip the real Tritons and
    simulate with this load time instead (development)."""
    from healer.edges.logs import configure_logging

    plan = plan or (Plan.quick() if quick else Plan.full())
    log = log or sys.stderr
    configure_logging(level="error")
    started = time.monotonic()
    result: dict[str, Any] = {
        "benchmark": "scale_restore",
        "quick": quick,
        "model": MODEL,
        "plan": dataclasses.asdict(plan),
        "budget_s": BUDGET_S,
    }
    if real_load_s is None:
        result["real"] = run_real(plan, log)
        real_load_s = float(result["real"]["load_s"])
    else:
        result["real"] = {"label": "real", "skipped": f"not run; the simulation used a load of {real_load_s:g} s"}
    result["simulation"] = run_simulation(plan, real_load_s, log)
    result["targets"] = targets(result, plan)
    result["recommendation"] = recommendation(result, plan)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def figures(result: Mapping[str, Any]) -> dict[str, str]:
    """SVG line charts: restore time against replicas (log x), one series per parallelism, the budget."""
    sim = result["simulation"]
    charts: dict[str, str] = {}
    names = {
        REAL_LOAD: "restore-vs-replicas.svg",
        CHOSEN_LOAD: "restore-vs-replicas-chosen-load.svg",
        LIMITED: "restore-vs-replicas-bandwidth-limited.svg",
    }
    for model in sim["store_models"]:
        series: dict[str, list[tuple[float, float]]] = {}
        if model["name"] == REAL_LOAD and "rows" in result.get("real", {}):
            for row in result["real"]["rows"]:
                if row["restore_s"] is not None:
                    series.setdefault(f"real p={row['parallelism']}", []).append((row["replicas"], row["restore_s"]))
        for row in sim["rows"]:
            if row["store"] == model["name"] and row.get("status") == "ok":
                series.setdefault(f"simulation p={row['policy']}", []).append((row["replicas"], row["restore_s"]))
        if model["name"] == LIMITED:
            bounds = sorted({(r["replicas"], r["lower_bound_s"]) for r in sim["rows"] if r["store"] == model["name"]})
            series["lower bound N·S/B"] = [(n, b) for n, b in bounds if b]
        series = {k: v for k, v in series.items() if v}
        if not series:
            continue
        charts[names[model["name"]]] = line_chart(
            f"Restore vs replicas: {model['short']}",
            "replicas",
            "restore phase, seconds",
            series,
            log_x=True,
            log_y=model["name"] == LIMITED,
            goal=(f"{result['budget_s']:g} s budget", result["budget_s"]),
        )
    return charts


def summary(result: Mapping[str, Any]) -> str:
    """The figures as text tables: real, then each simulated store model, the checks, the targets."""
    slo = example_slo_ms()
    lines = [f"Restore time against replicas, {MODEL} ({'quick' if result['quick'] else 'full'} run)"]
    real = result["real"]
    if "rows" in real:
        lines.append(f"real: {real['what']}, {real['cpus']} CPUs; median of the runs")
        lines.append(
            f"  {'REPLICAS':>8} {'PARALLEL':>8} {'RESTORE':>8} {'TOTAL':>8} {'CANARY LOAD':>12} {'WAVE LOAD':>10} "
            f"{'MAX LOAD':>9} {'VERIFY MAX':>10} >{slo:g}ms"
        )
        for row in real["rows"]:
            lines.append(
                f"  {row['replicas']:>8} {row['parallelism']:>8} {_s(row['restore_s']):>8} {_s(row['total_s']):>8} "
                f"{_s(row['canary_load_s']):>12} {_s(row['wave_load_s']):>10} {_s(row['load_s_max']):>9} "
                f"{_ms(row['verify_ms_max']):>10} {row['over_example_slo']}"
            )
        lines.append(f"  real load time used by the simulation: {real['load_s']:.3f} s (one replica, median)")
    else:
        lines.append(f"real: {real['skipped']}")
    sim = result["simulation"]
    for model in sim["store_models"]:
        lines.append(f"{model['title']} [{model['name']}]")
        lines.append(
            f"  {'REPLICAS':>8} {'PARALLEL':>8} {'STATUS':>8} {'RESTORE':>8} {'PREDICTED':>9} {'BOUND':>8} "
            f"{'THREADS':>7} {'RSS MiB':>7} {'VERIFY MAX':>10} >{slo:g}ms  NOTE"
        )
        for row in (r for r in sim["rows"] if r["store"] == model["name"]):
            lines.append(
                f"  {row['replicas']:>8} {row['policy']:>8} {row.get('status', '?'):>8} "
                f"{_s(row.get('restore_s')):>8} {_s(row['predicted_s']):>9} {_s(row['lower_bound_s']):>8} "
                f"{row.get('peak_threads', '-')!s:>7} {row.get('peak_rss_mib', '-')!s:>7} "
                f"{_ms(row.get('verify_ms_max')):>10} {row.get('over_example_slo', '-')!s:>6}  "
                f"{row.get('note') or (row.get('error') or '')[:120]}"
            )
    for check in sim["load_timeout_check"]:
        lines.append(
            f"load timeout ({check['store']}): {check['note']}; measured failures at parallelism "
            f"{check['measured_failures_at_parallelism'] or 'none'}"
        )
    for check in sim.get("example_slo_check", []):
        lines.append(
            f"example SLO ({check['golden']}), {check['replicas']} simulated replicas, parallelism "
            f"{check['policy']}: {check['status']}, restore {_s(check['restore_s'])}, "
            f"{check['restored_replicas']} serve v{STABLE} afterwards {(check['error'] or '')[:160]}"
        )
    plan = result["plan"]
    default = policy_label(plan["recommended"], max(plan["recommended"], plan.get("ceiling", plan["recommended"])))
    lines.append(f"targets (at the default waves, parallelism {default}):")
    for target in result["targets"]:
        met = "met" if target["met"] else "MISSED"
        lines.append(f"  {met:<6} {target['name']}: {target['value']} (goal {target['goal']}); {target['note']}")
    rec = result["recommendation"]
    lines.append(
        f"default waves: rollback.parallelism {rec['rollback.parallelism']}, rollback.max_parallelism "
        f"{rec['rollback.max_parallelism']} ({'FAILED somewhere' if rec['default_failed'] else 'never failed'}; "
        f"largest fixed wave without a failure: {rec['largest_fixed_wave_without_a_failure']})"
    )
    for parallelism, reasons in rec["failures_by_parallelism"].items():
        lines.append(f"  parallelism {parallelism}: " + "; ".join(reasons))
    lines.append(f"  {rec['why']}")
    lines.append(f"({result['seconds']:.0f} s in all)")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}ms"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CI smoke test")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.add_argument("--figures", type=Path, help="write the SVG figures into this folder")
    parser.add_argument("--cap", type=float, help="skip simulated combinations predicted to take longer (s)")
    parser.add_argument("--runs", type=int, help="real rollbacks per configuration")
    parser.add_argument("--replicas", type=int, nargs="+", help="simulated replica counts")
    parser.add_argument("--parallelism", type=int, nargs="+", help="simulated rollback.parallelism values")
    parser.add_argument("--recommend", type=int, help="the default's first wave, where the targets are evaluated")
    parser.add_argument("--ceiling", type=int, help="the default's largest wave (rollback.max_parallelism)")
    parser.add_argument(
        "--stores", nargs="+", choices=Plan.stores, help="the simulation's store models (default: all three)"
    )
    parser.add_argument("--real-load-s", type=float, help="skip the real Tritons; simulate with this load time")
    parser.add_argument("--simulation-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.simulation_child:
        return simulation_child()
    plan = Plan.quick() if args.quick else Plan.full()
    changes = {
        "cap_s": args.cap,
        "runs": args.runs,
        "replicas": tuple(args.replicas) if args.replicas else None,
        "parallelism": tuple(args.parallelism) if args.parallelism else None,
        "recommended": args.recommend,
        "ceiling": args.ceiling,
        "stores": tuple(args.stores) if args.stores else None,
    }
    plan = dataclasses.replace(plan, **{k: v for k, v in changes.items() if v is not None})
    result = run(args.quick, plan=plan, real_load_s=args.real_load_s)
    if args.figures:
        args.figures.mkdir(parents=True, exist_ok=True)
        for name, svg in figures(result).items():
            (args.figures / name).write_text(svg)
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
