"""The probe sidecar against many models in one pod: probe-cycle time, the sidecar's footprint, and
detection time, on ONE real Triton serving N renamed copies of linear_scorer (issue 18, item 5).

Every size N gets a fresh tritonserver (EmbeddedTriton, Triton 2.51 on CPU) over a generated model
repository: N copies of examples/model_repository/linear_scorer (version 2's files as version 1),
each a Python-backend model with a stub process of its own. At each N:

* Triton itself: the time from starting it with ``--load-model`` for all N until every model is
  READY in the repository index, the CPU its process group spent on that, and its memory once loaded:
  the server's RSS, the stubs' RSS, and the whole group's PSS (shared pages counted once);
* one full probe cycle, ``probes.runner.probe_all`` with healer's own client (TritonRest), at the
  default ``sidecar.probe_concurrency`` (8) and at 1 (one model after another), median of several:
  all N healthy, then with 5 of them hung (the ``hang`` broken variant pushed as a new version: a 3 s
  answer against a 0.5 s golden timeout), the hung ones first in the configured order, probed as on
  first sight (``last=()``) and as the sidecar orders them once it saw them time out (``last=hung``);
* ``healer sidecar`` as its own process watching the N models (period 1 s, as
  benchmarks/sidecar_footprint.py): its peak RSS (VmHWM) and CPU over a window, off-cluster.

At the largest N, detection with the sidecar process running (``healer sidecar``, local engine, a
filesystem store without a stable ledger, so a rollback fails at once and the model is escalated,
and nothing but the benchmark changes what Triton serves): a broken version (wrong_weights) pushed
and loaded as the drills do (workflows/steps/drill_inject.py); the break counts from the moment Triton
serves it (its version first seen in the model's metadata) to the sidecar's log line
``model_state_changed`` leaving ``suspect`` for ``healing`` or ``escalated`` (failure_threshold
consecutive wrong answers: healer/core/state.py's "confirmed"). Between trials the model gets a good
version again and the benchmark waits for /status to call it healthy, then a random part of a period
(a random phase against the sidecar's cycle). ``sidecar.max_rollbacks`` is raised so that the circuit
breaker never opens and every trial submits a rollback and logs its ``incident_detected`` line. Conditions:
the target alone; among all N healthy; with 5 hung models (5 hung + the target); among N with 5 of them
hung (the hung ones are escalated before the first trial). Each detection is split two ways:
"break → first wrong verdict applied" (the ``suspect`` line) and "→ confirmed" (fast confirmation);
and, with the incident line's ``detect_s`` (from the start of the cycle that first saw the wrong
answer, state.py ``first_bad_at``), "phase wait" (break → that cycle's start: random, whatever the pod
holds) and "cycle start → confirmed" (what the pod's cycle and the confirmations add). The ratio
targets are judged on the expected detection over a random break moment, period / 2 + the median
"cycle start → confirmed": a raw median of a few trials carries up to a period of phase noise (both
are reported).

    .venv/bin/python -m benchmarks.scale_probe [--quick] [-o json] [--figures DIR]
        [--sizes 1,3,10,50,100] [--cycles 7] [--window 60] [--trials 5] [--detect-periods 1,5]

``--quick``: N = 1 and 3 (2 hung where 5 do not fit), short windows, two trials: a smoke run.
Sizes that would not fit this machine's free memory (estimated from the smaller ones) or whose models
do not all load within LOAD_LIMIT_S are skipped and said so in ``skipped``; nothing is extrapolated.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.plot import line_chart
from benchmarks.sidecar_footprint import cpu_seconds, proc_status
from healer.core.results import Status, Tier
from healer.edges.embedded import EmbeddedTriton, free_port
from healer.edges.logs import configure_logging
from healer.edges.triton_rest import TritonRest
from healer.settings import Settings, load_settings
from probes.runner import probe_all

ROOT = Path(__file__).resolve().parents[1]
BASE = "linear_scorer"
GOOD = ROOT / "examples" / "model_repository" / BASE / "2"
BROKEN = ROOT / "examples" / "broken" / BASE

SIZES_FULL = (1, 3, 10, 50, 100)
SIZES_QUICK = (1, 3)
HUNG = 5
GOLDEN_TIMEOUT_S = 0.5  # examples/healer.yaml's
PERIOD_S = 5.0  # the production default: the probe-cycle target is 0.2 x this
WINDOW_PERIOD_S = 1.0  # the footprint window's period, as benchmarks/sidecar_footprint.py
CONCURRENCY = 8  # sidecar.probe_concurrency's default
LOAD_LIMIT_S = 900.0  # all N models READY within this, or the size does not fit
MEMORY_MARGIN_MIB = 3072.0  # left free for the rest of the machine when sizing the next N
RSS_TARGET_MIB = 64.0  # with 3 models
RSS_PER_MODEL_MIB = 0.1  # per model beyond 3
CYCLE_SHARE = 0.2  # 100 healthy models probed within this share of the period
DETECT_RATIO = 1.2
MIB = 1024.0


def name_of(index: int) -> str:
    return f"scorer_{index:03d}"


# ---- the model repository and what Triton serves --------------------------------------------------------


class Repository:
    """N renamed copies of linear_scorer; new versions pushed into it and loaded, as a deploy does."""

    def __init__(self, root: Path, count: int) -> None:
        self.root = root
        self.names = [name_of(i) for i in range(count)]
        self._next: dict[str, int] = {}
        config = (ROOT / "examples" / "model_repository" / BASE / "config.pbtxt").read_text()
        for name in self.names:
            (root / name).mkdir(parents=True)
            (root / name / "config.pbtxt").write_text(config.replace(f'name: "{BASE}"', f'name: "{name}"'))
            self._copy(GOOD, root / name / "1")
            self._next[name] = 2

    @staticmethod
    def _copy(source: Path, target: Path) -> None:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))

    def push(self, triton: TritonRest, model: str, source: Path) -> tuple[str, float]:
        """``source``'s files as the model's next version, loaded: (version, the wall time it was first
        seen served, as workflows/steps/drill_inject.py load_everywhere sees it; the load's return otherwise)."""
        version = str(self._next[model])
        self._next[model] += 1
        self._copy(source, self.root / model / version)
        seen: list[float] = []
        done = threading.Event()

        def watch() -> None:
            watcher = TritonRest(triton.url, timeout_s=2.0)
            while not done.is_set():
                with contextlib.suppress(Exception):
                    if version in watcher.served_versions(model):
                        seen.append(time.time())
                        return
                done.wait(0.01)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            triton.load_model(model, timeout_s=120.0)
        finally:
            returned = time.time()
            done.set()
            thread.join(5)
        served = triton.served_versions(model)
        if served != [version]:
            raise RuntimeError(f"pushed {model} v{version}, Triton serves {served}")
        return version, (seen[0] if seen else returned)


def group_processes(leader: int) -> list[int]:
    """The processes of ``leader``'s process group (tritonserver and its Python-backend stubs)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == leader:
                pids.append(int(entry.name))
    return pids


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def triton_memory(leader: int) -> dict[str, Any]:
    server_rss = stubs_rss = pss = 0
    stubs = 0
    cpu = 0.0
    for pid in group_processes(leader):
        with contextlib.suppress(OSError, KeyError):
            rss = proc_status(pid)["VmRSS"]
            pss += pss_kib(pid)
            cpu += cpu_seconds(pid)
            if pid == leader:
                server_rss = rss
            else:
                stubs += 1
                stubs_rss += rss
    return {
        "server_rss_mib": round(server_rss / MIB, 1),
        "stubs": stubs,
        "stubs_rss_mib": round(stubs_rss / MIB, 1),
        "group_rss_mib": round((server_rss + stubs_rss) / MIB, 1),
        "group_pss_mib": round(pss / MIB, 1),
        "group_cpu_s": round(cpu, 2),
    }


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / MIB
    return 0.0


def wait_all_ready(triton: TritonRest, names: Sequence[str], limit_s: float) -> str:
    """'' once every model is READY in the index; else why not (a failed load, or out of time)."""
    wanted = set(names)
    deadline = time.monotonic() + limit_s
    while True:
        try:
            index = triton.repository_index()
        except Exception as exc:
            index, why = [], f"index: {exc}"
        else:
            why = ""
        ready = {e.name for e in index if e.state == "READY"}
        failed = [e for e in index if e.name in wanted and e.state == "UNAVAILABLE" and e.reason]
        if wanted <= ready:
            return ""
        if failed:
            return f"{failed[0].name}: {failed[0].reason}"
        if time.monotonic() > deadline:
            return why or f"{len(wanted - ready)} of {len(wanted)} models not READY after {limit_s:g} s"
        time.sleep(0.25)


# ---- settings, as a file (the sidecar process) and as Settings (probe_all in this process) ------------


def golden() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "examples" / "healer.yaml").read_text())
    request = next(m for m in document["models"] if m["name"] == BASE)["golden"]
    return {**request, "timeout_s": GOLDEN_TIMEOUT_S}


def write_config(
    path: Path, *, url: str, names: Sequence[str], repo: Path, runs: Path, port: int, period_s: float
) -> Path:
    request = golden()
    document = {
        "triton": {"url": url, "timeout_s": 2.0},
        "models": [{"name": name, "golden": request} for name in names],
        "store": {"filesystem": {"root": str(repo)}},
        "rollback": {"engine": "local", "state_dir": str(runs)},
        # The breaker never opens (every trial's detection submits a rollback and logs its incident line).
        "sidecar": {
            "listen": f"127.0.0.1:{port}",
            "period_s": period_s,
            "probe_concurrency": CONCURRENCY,
            "max_rollbacks": 1000,
        },
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


# ---- one probe cycle, in this process --------------------------------------------------------------------


def summary(samples: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "median_s": round(statistics.median(ordered), 4),
        "min_s": round(ordered[0], 4),
        "max_s": round(ordered[-1], 4),
        "samples_s": [round(s, 4) for s in samples],
    }


def time_cycles(
    settings: Settings,
    triton: TritonRest,
    *,
    concurrency: int,
    cycles: int,
    hung: Sequence[str] = (),
    last: Sequence[str] = (),
) -> dict[str, Any]:
    """``cycles`` full probe_all cycles after one warm-up; each checked: the hung models' golden
    requests fail with ``timeout``, every other tier passes (a cycle that says otherwise is counted)."""
    probe_all(settings, triton, concurrency=concurrency, last=last)
    samples, unexpected = [], 0
    for _ in range(cycles):
        started = time.perf_counter()
        results = probe_all(settings, triton, concurrency=concurrency, last=last)
        samples.append(time.perf_counter() - started)
        for r in results:
            if r.model in hung and r.tier is Tier.BUSINESS:
                unexpected += not (r.status is Status.FAIL and r.code == "timeout")
            else:
                unexpected += r.status is not Status.PASS
    return {**summary(samples), "concurrency": concurrency, "unexpected_results": unexpected}


# ---- the sidecar as a process ----------------------------------------------------------------------------


def parse_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class SidecarProcess:
    """`healer sidecar` with a config, its JSON log lines read back as they come."""

    config: Path
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _offset: int = 0
    _partial: bytes = b""
    lines: list[dict[str, Any]] = field(default_factory=list)

    def __enter__(self) -> SidecarProcess:
        # `python -m healer` on this working tree (PYTHONPATH), whatever the virtualenv's install points at.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "healer", "--log-level", "info", "sidecar", "--config", str(self.config)],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        return self

    def __exit__(self, *_: object) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout_s) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def status(self) -> dict[str, Any]:
        return json.loads(self.get("/status", timeout_s=10.0)[1])

    def read_log(self) -> list[dict[str, Any]]:
        """The log lines written since the last call (each also kept in ``lines``)."""
        with self.log_path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        new = []
        for raw in complete:
            with contextlib.suppress(ValueError):
                new.append(json.loads(raw))
        self.lines += new
        return new

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the sidecar exited ({self.process.returncode}) waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sidecar: no {what} within {timeout_s:g} s")
            time.sleep(0.2)

    def ready(self) -> bool:
        with contextlib.suppress(OSError):
            return self.get("/readyz", timeout_s=2.0)[0] == 200
        return False

    def phases(self, names: Sequence[str]) -> dict[str, str]:
        with contextlib.suppress(OSError, ValueError):
            models = self.status()["models"]
            return {name: str(models[name]["state"]) for name in names}
        return {}


def footprint(
    scratch: Path, url: str, repo: Path, names: Sequence[str], *, seconds: float, period_s: float
) -> dict[str, Any]:
    """The sidecar watching ``names`` (all healthy): VmRSS every second over the window after its first
    good cycle, VmHWM at the end, CPU over the window."""
    port = free_port()
    config = write_config(
        scratch / f"footprint-{len(names)}.yaml",
        url=url,
        names=names,
        repo=repo,
        runs=scratch / "runs",
        port=port,
        period_s=period_s,
    )
    with SidecarProcess(config, port, scratch / f"footprint-{len(names)}.log") as sidecar:
        sidecar.wait_for(sidecar.ready, 60 + 3 * period_s, "/readyz 200")
        cpu_start, wall_start = cpu_seconds(sidecar.pid), time.monotonic()
        samples = []
        while time.monotonic() - wall_start < seconds:
            samples.append(proc_status(sidecar.pid)["VmRSS"])
            time.sleep(1.0)
        cpu_used = cpu_seconds(sidecar.pid) - cpu_start
        wall = time.monotonic() - wall_start
        peak = proc_status(sidecar.pid)["VmHWM"]
        cycles = sidecar.status()["cycles"]
        healthy = sidecar.ready()
    return {
        "models": len(names),
        "period_s": period_s,
        "window_s": round(wall, 1),
        "peak_rss_mib": round(peak / MIB, 1),
        "max_rss_mib": round(max(samples) / MIB, 1),
        "cpu_s": round(cpu_used, 2),
        "cpu_pct": round(100.0 * cpu_used / wall, 2),
        "cycles": cycles,
        "ready_at_end": healthy,
    }


# ---- detection -------------------------------------------------------------------------------------------


CONFIRMED = frozenset({"healing", "escalated"})


def state_change(line: dict[str, Any], model: str, to: frozenset[str], after: float) -> float | None:
    if line.get("event") != "model_state_changed" or line.get("model") != model or line.get("to_state") not in to:
        return None
    at = parse_time(line["timestamp"])
    return at if at >= after - 0.05 else None


def detection(
    scratch: Path,
    triton: TritonRest,
    repo: Repository,
    *,
    condition: str,
    names: Sequence[str],
    hung: Sequence[str],
    targets: Sequence[str],
    period_s: float,
    trials: int,
    rng: random.Random,
) -> dict[str, Any]:
    """``trials`` breaks of the targets (in turn) with a sidecar watching ``names``; each restored and
    seen healthy again before the next."""
    port = free_port()
    tag = f"{condition}-{period_s:g}"
    config = write_config(
        scratch / f"detect-{tag}.yaml",
        url=triton.url,
        names=names,
        repo=repo.root,
        runs=scratch / "runs",
        port=port,
        period_s=period_s,
    )
    healthy = [n for n in names if n not in hung]
    results = []
    with SidecarProcess(config, port, scratch / f"detect-{tag}.log") as sidecar:
        # Settled: every healthy model healthy; every hung one confirmed (a timeout waits for full
        # periods) and its rollback failed (no stable ledger): escalated, probed every cycle from then on.
        settle_s = 90 + (4 + 3) * period_s

        def settled() -> bool:
            phases = sidecar.phases(names)
            return bool(phases) and all(phases[n] == ("escalated" if n in hung else "healthy") for n in names)

        sidecar.wait_for(settled, settle_s, "healthy models healthy and hung ones escalated")
        for trial in range(trials):
            target = targets[trial % len(targets)]
            time.sleep(rng.uniform(0.0, period_s))  # a random phase against the sidecar's cycle
            sidecar.read_log()
            version, broke_at = repo.push(triton, target, BROKEN / "wrong_weights")
            suspect_at = confirmed_at = None
            incident: dict[str, Any] | None = None
            deadline = time.monotonic() + 30 + 4 * period_s
            while (confirmed_at is None or incident is None) and time.monotonic() < deadline:
                for line in sidecar.read_log():
                    suspect_at = suspect_at or state_change(line, target, frozenset({"suspect"}), broke_at)
                    confirmed_at = confirmed_at or state_change(line, target, CONFIRMED, broke_at)
                    if line.get("event") == "incident_detected" and line.get("model") == target:
                        incident = incident or line
                time.sleep(0.02)
            if confirmed_at is None or incident is None:
                raise RuntimeError(f"{condition}: {target} v{version} not confirmed failing in time")
            # The incident line's detect_s runs from the start of the cycle that first saw the wrong answer
            # (state.py first_bad_at): that start, on the wall clock, splits the detection into the wait for
            # a cycle (the phase: random, the same whatever the pod holds) and what the pod's cycle adds.
            cycle_start = parse_time(incident["timestamp"]) - float(incident["detect_s"])
            first = suspect_at or confirmed_at
            results.append(
                {
                    "target": target,
                    "version": version,
                    "detect_s": round(confirmed_at - broke_at, 3),
                    "to_first_verdict_s": round(first - broke_at, 3),
                    "confirmation_s": round(confirmed_at - first, 3),
                    "phase_wait_s": round(cycle_start - broke_at, 3),
                    "from_cycle_start_s": round(confirmed_at - cycle_start, 3),
                    "sidecar_detect_s": float(incident["detect_s"]),
                }
            )
            repo.push(triton, target, GOOD)
            sidecar.wait_for(lambda t=target: sidecar.phases([t]).get(t) == "healthy", 60 + 4 * period_s, "healthy")
        log_lines = len(sidecar.lines)
        peak_mib = round(proc_status(sidecar.pid)["VmHWM"] / MIB, 1)  # after in-pod rollbacks (hera imported)
    detects = [r["detect_s"] for r in results]
    return {
        "condition": condition,
        "period_s": period_s,
        "models_watched": len(names),
        "hung": len(hung),
        "trials": results,
        "median_s": round(statistics.median(detects), 3),
        "min_s": min(detects),
        "max_s": max(detects),
        "median_to_first_verdict_s": round(statistics.median(r["to_first_verdict_s"] for r in results), 3),
        "median_confirmation_s": round(statistics.median(r["confirmation_s"] for r in results), 3),
        "median_from_cycle_start_s": round(statistics.median(r["from_cycle_start_s"] for r in results), 3),
        # Over a break at a uniformly random moment the wait for a cycle averages half a period.
        "expected_s": round(period_s / 2 + statistics.median(r["from_cycle_start_s"] for r in results), 3),
        "healthy_models": len(healthy),
        "log_lines": log_lines,
        "sidecar_peak_rss_mib": peak_mib,
    }


# ---- the run ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def triton_with(repo: Path, names: Sequence[str], workdir: Path) -> Iterator[tuple[EmbeddedTriton, dict[str, Any]]]:
    """A fresh tritonserver loading ``names`` at start; how long until every one is READY."""
    started = time.monotonic()
    server = EmbeddedTriton(repo, load_models=names, startup_timeout_s=LOAD_LIMIT_S, workdir=workdir)
    with server:
        live_s = time.monotonic() - started
        client = TritonRest(server.url, timeout_s=10.0)
        why = wait_all_ready(client, names, max(1.0, LOAD_LIMIT_S - live_s))
        load = {"live_s": round(live_s, 2), "ready_s": round(time.monotonic() - started, 2), "failed": why}
        yield server, load


@dataclass(frozen=True)
class Plan:
    quick: bool
    sizes: list[int]
    cycles: int
    window_s: float
    trials: int
    detect_periods: list[float]


def fits(result: dict[str, Any], count: int) -> str:
    """'' when N models should fit the free memory (the PSS per model of the largest N measured so far,
    3 or more, times N, plus a margin); else why not."""
    measured = [s for s in result["sizes"] if s["models"] >= 3]
    if not measured:
        return ""
    per_model = measured[-1]["triton"]["group_pss_mib"] / measured[-1]["models"]
    need, available = per_model * count + MEMORY_MARGIN_MIB, mem_available_mib()
    if need <= available:
        return ""
    return f"would need ~{need:.0f} MiB ({per_model:.0f} MiB per model and a margin), {available:.0f} MiB available"


def measure_size(
    scratch: Path,
    repo: Repository,
    count: int,
    plan: Plan,
    result: dict[str, Any],
    rng: random.Random,
    progress: Callable[[str], None],
) -> str:
    """Everything measured at N = ``count`` on a fresh tritonserver, added to ``result``; '' or why the
    models did not load."""
    names = repo.names[:count]
    progress(f"N={count}: starting tritonserver with {count} models")
    with triton_with(repo.root, names, scratch / f"triton-{count}") as (server, load):
        if load["failed"]:
            return str(load["failed"])
        assert server.pid is not None
        triton = TritonRest(server.url, timeout_s=2.0)
        memory = triton_memory(server.pid)
        progress(f"N={count}: READY after {load['ready_s']} s, group PSS {memory['group_pss_mib']} MiB")
        config = write_config(
            scratch / f"probe-{count}.yaml",
            url=server.url,
            names=names,
            repo=repo.root,
            runs=scratch / "runs",
            port=free_port(),
            period_s=PERIOD_S,
        )
        settings = load_settings(config)
        entry: dict[str, Any] = {
            "models": count,
            "triton": {**load, "load_cpu_s": memory.pop("group_cpu_s"), **memory},
            "cycles": {"healthy": {}, "hung": None},
        }
        if count >= 3:
            entry["triton"]["pss_per_model_mib"] = round(memory["group_pss_mib"] / count, 1)
        for concurrency in (CONCURRENCY, 1):
            entry["cycles"]["healthy"][str(concurrency)] = time_cycles(
                settings, triton, concurrency=concurrency, cycles=plan.cycles
            )
        progress(f"N={count}: healthy cycles, medians {medians(entry['cycles']['healthy'])}")
        progress(f"N={count}: sidecar footprint, {plan.window_s:g} s window")
        entry["sidecar"] = footprint(
            scratch, server.url, repo.root, names, seconds=plan.window_s, period_s=WINDOW_PERIOD_S
        )
        progress(f"N={count}: sidecar {entry['sidecar']}")
        largest = count == plan.sizes[-1]
        hung_count = min(HUNG, count - 1)
        if largest:
            result["detection"] += detect_healthy(scratch, triton, repo, names, plan, rng, progress)
        if hung_count > 0:
            hung = names[:hung_count]  # first in the configured order: the worst place without `last`
            for name in hung:
                repo.push(triton, name, BROKEN / "hang")
            hung_cycles: dict[str, Any] = {"count": hung_count}
            for concurrency in (CONCURRENCY, 1):
                first = time_cycles(settings, triton, concurrency=concurrency, cycles=plan.cycles, hung=hung)
                steady = time_cycles(
                    settings, triton, concurrency=concurrency, cycles=plan.cycles, hung=hung, last=hung
                )
                hung_cycles[str(concurrency)] = {"first_sight": first, "hung_last": steady}
            entry["cycles"]["hung"] = hung_cycles
            progress(f"N={count}: {hung_count} hung, cycle medians "
                     f"{ {c: medians(v) for c, v in hung_cycles.items() if c != 'count'} }")  # fmt: skip
            if largest:
                result["detection"] += detect_hung(scratch, triton, repo, names, hung, plan, rng, progress)
        result["sizes"].append(entry)
    return ""


def medians(cases: dict[str, Any]) -> dict[str, float]:
    return {key: value["median_s"] for key, value in cases.items() if "median_s" in value}


def run(
    quick: bool,
    *,
    sizes: Sequence[int] | None = None,
    cycles: int | None = None,
    window_s: float | None = None,
    trials: int | None = None,
    detect_periods: Sequence[float] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    seed: int = 18,
    keep: bool = False,
) -> dict[str, Any]:
    """Every size in turn (each on a fresh tritonserver), detection at the largest; the result as JSON."""
    plan = Plan(
        quick=quick,
        sizes=sorted(set(sizes or (SIZES_QUICK if quick else SIZES_FULL))),
        cycles=cycles or (3 if quick else 7),
        window_s=window_s or (10.0 if quick else 60.0),
        trials=trials or (2 if quick else 5),
        detect_periods=list(detect_periods or ((1.0,) if quick else (1.0, PERIOD_S))),
    )
    if quick and max(plan.sizes) > 3:
        raise ValueError("--quick measures N <= 3")
    rng = random.Random(seed)
    scratch = Path(tempfile.mkdtemp(prefix="healer-scale-probe-"))
    result: dict[str, Any] = {
        "benchmark": "scale_probe",
        "quick": quick,
        "machine": {
            "cpus": os.cpu_count(),
            "mem_available_mib_at_start": round(mem_available_mib()),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {
            "sizes": plan.sizes,
            "cycles": plan.cycles,
            "window_s": plan.window_s,
            "window_period_s": WINDOW_PERIOD_S,
            "trials": plan.trials,
            "detect_periods_s": plan.detect_periods,
            "hung": HUNG,
            "golden_timeout_s": GOLDEN_TIMEOUT_S,
            "probe_concurrency": CONCURRENCY,
            "confirm_interval_s": 0.2,
            "failure_threshold": 3,
            "where": "off-cluster: one tritonserver on CPU (Python backend), the sidecar a local process",
        },
        "sizes": [],
        "skipped": [],
        "detection": [],
    }
    started = time.monotonic()
    try:
        for position, count in enumerate(plan.sizes):
            # A fresh repository per size: what the last size hung or broke stays behind with its Triton.
            why = fits(result, count) or measure_size(
                scratch, Repository(scratch / f"repo-{count}", count), count, plan, result, rng, progress
            )
            if why:
                result["skipped"] += [{"models": n, "why": why} for n in plan.sizes[position:]]
                progress(f"N={count}: not measured: {why}")
                break
        measured = [s["models"] for s in result["sizes"]]
        if measured and max(measured) < max(SIZES_FULL):
            result["largest_measured"] = max(measured)
    finally:
        if keep:
            progress(f"kept {scratch} (configs, sidecar logs, Triton logs)")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["notes"] = notes(result)
    result["targets"] = targets(result)
    return result


def detect_healthy(
    scratch: Path,
    triton: TritonRest,
    repo: Repository,
    names: Sequence[str],
    plan: Plan,
    rng: random.Random,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The target alone, then among every model (all healthy): the same target first, then others."""
    hung_count = min(HUNG, len(names) - 1)
    pool = list(names[hung_count:]) or list(names)  # never a model that will hang later
    spread = [pool[(i * len(pool)) // plan.trials] for i in range(plan.trials)]
    cases = [("alone", [pool[0]], pool[:1])] + ([("among_all", list(names), spread)] if len(names) > 1 else [])
    return run_cases(scratch, triton, repo, cases, (), plan, rng, progress)


def detect_hung(
    scratch: Path,
    triton: TritonRest,
    repo: Repository,
    names: Sequence[str],
    hung: Sequence[str],
    plan: Plan,
    rng: random.Random,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The hung models and one target; then every model, the hung ones among them."""
    pool = [n for n in names if n not in hung]
    spread = [pool[(i * len(pool)) // plan.trials] for i in range(plan.trials)]
    cases = [("hung_plus_one", [*hung, pool[0]], pool[:1])]
    if len(names) > len(hung) + 1:
        cases.append(("among_all_hung", list(names), spread))
    return run_cases(scratch, triton, repo, cases, hung, plan, rng, progress)


def run_cases(
    scratch: Path,
    triton: TritonRest,
    repo: Repository,
    cases: Sequence[tuple[str, list[str], list[str]]],
    hung: Sequence[str],
    plan: Plan,
    rng: random.Random,
    progress: Callable[[str], None],
) -> list[dict[str, Any]]:
    out = []
    for period in plan.detect_periods:
        for condition, names, targets_ in cases:
            out.append(
                detection(
                    scratch,
                    triton,
                    repo,
                    condition=condition,
                    names=names,
                    hung=[n for n in hung if n in names],
                    targets=targets_,
                    period_s=period,
                    trials=plan.trials,
                    rng=rng,
                )
            )
            d = out[-1]
            progress(
                f"detection {condition}, period {period:g} s, {len(names)} watched: median {d['median_s']} s "
                f"({[t['detect_s'] for t in d['trials']]})"
            )
    return out


def notes(result: dict[str, Any]) -> list[str]:
    """What makes a figure doubtful: probe results other than expected, a footprint window not all healthy."""
    out = []
    for s in result["sizes"]:
        cases = [(f"healthy, concurrency {c}", case) for c, case in s["cycles"]["healthy"].items()]
        hung = s["cycles"]["hung"] or {}
        cases += [
            (f"{hung['count']} hung, concurrency {c}, {order}", case)
            for c, orders in hung.items()
            if c != "count"
            for order, case in orders.items()
        ]
        out += [
            f"N={s['models']} {label}: {case['unexpected_results']} unexpected probe results"
            for label, case in cases
            if case["unexpected_results"]
        ]
        if not s["sidecar"]["ready_at_end"]:
            out.append(f"N={s['models']}: the footprint sidecar's /readyz was not 200 at the end of its window")
    return out


# ---- targets ---------------------------------------------------------------------------------------------


def target(name: str, value: Any, goal: str, met: bool | None, note: str) -> dict[str, Any]:
    return {"name": name, "value": value, "goal": goal, "met": met, "note": note}


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    sizes = {s["models"]: s for s in result["sizes"]}
    largest = max(sizes, default=0)
    out = []
    goal_s = CYCLE_SHARE * PERIOD_S
    if 100 in sizes:
        value = sizes[100]["cycles"]["healthy"][str(CONCURRENCY)]["median_s"]
        out.append(
            target(
                "probe cycle, 100 healthy models",
                value,
                f"<= {goal_s:g} s ({CYCLE_SHARE:g} x the {PERIOD_S:g} s period)",
                value <= goal_s,
                f"median of {result['settings']['cycles']} probe_all cycles, concurrency {CONCURRENCY}, TritonRest; "
                f"at concurrency 1: {sizes[100]['cycles']['healthy']['1']['median_s']} s",
            )
        )
    else:
        value = sizes[largest]["cycles"]["healthy"][str(CONCURRENCY)]["median_s"] if largest else None
        out.append(
            target(
                "probe cycle, 100 healthy models",
                value,
                f"<= {goal_s:g} s ({CYCLE_SHARE:g} x the {PERIOD_S:g} s period)",
                None,
                f"not measured at 100 models: the largest N measured is {largest} (value is at that N)",
            )
        )
    by = {(d["condition"], d["period_s"]): d for d in result["detection"]}
    for period in result["settings"]["detect_periods_s"]:
        alone, hung = by.get(("alone", period)), by.get(("hung_plus_one", period))
        if alone and hung:
            out.append(detection_target(f"detection with {hung['hung']} hung models, period {period:g} s", hung, alone))
    rss = {n: s["sidecar"]["peak_rss_mib"] for n, s in sizes.items()}
    if 3 in rss:
        out.append(
            target(
                "sidecar peak RSS, 3 models",
                rss[3],
                f"<= {RSS_TARGET_MIB:g} MiB",
                rss[3] <= RSS_TARGET_MIB,
                "off-cluster (no Kubernetes client, no draining rule), period "
                f"{WINDOW_PERIOD_S:g} s, {result['settings']['window_s']:g} s window",
            )
        )
    limits = {n: RSS_TARGET_MIB + RSS_PER_MODEL_MIB * max(0, n - 3) for n in rss}
    if rss:
        over = {n: rss[n] for n in rss if rss[n] > limits[n]}
        out.append(
            target(
                f"sidecar peak RSS up to {largest} models",
                {str(n): rss[n] for n in sorted(rss)},
                f"<= {RSS_TARGET_MIB:g} + {RSS_PER_MODEL_MIB:g} MiB per model beyond 3",
                not over,
                ("over at " + ", ".join(f"N={n} ({v} > {limits[n]:.1f})" for n, v in over.items()) if over else "")
                + ("; " if over else "")
                + "off-cluster, healthy models only"
                + (f"; not measured beyond {largest} models" if largest < 100 else "")
                + (
                    f"; a sidecar that has run an in-pod rollback (the detection runs) peaks at "
                    f"{max(d['sidecar_peak_rss_mib'] for d in result['detection'])} MiB"
                    if result["detection"]
                    else ""
                ),
            )
        )
    for period in result["settings"]["detect_periods_s"]:
        alone, among = by.get(("alone", period)), by.get(("among_all", period))
        if alone and among:
            missing = f"; 100 models not measured (largest {among['models_watched']})" if largest < 100 else ""
            name = f"detection among {among['models_watched']} models against alone, period {period:g} s"
            out.append(detection_target(name, among, alone, assumed=True, extra=missing))
    return out


def detection_target(
    name: str, case: dict[str, Any], alone: dict[str, Any], *, assumed: bool = False, extra: str = ""
) -> dict[str, Any]:
    """Judged on the expected detection over a random break moment (half a period, plus the median
    from the start of the cycle that saw the break to confirmed): the raw medians carry the phase's
    noise, up to a whole period per trial."""
    ratio = round(case["expected_s"] / alone["expected_s"], 2)
    raw = round(case["median_s"] / alone["median_s"], 2)
    return target(
        name,
        ratio,
        f"<= {DETECT_RATIO:g} x its time alone" + (" (assumed: the issue names no figure)" if assumed else ""),
        ratio <= DETECT_RATIO,
        f"expected {case['expected_s']} s against {alone['expected_s']} s alone (period / 2 + median from the "
        f"cycle's start to confirmed: {case['median_from_cycle_start_s']} s against "
        f"{alone['median_from_cycle_start_s']} s); raw medians {case['median_s']} s against {alone['median_s']} s "
        f"= {raw} x ({len(case['trials'])} and {len(alone['trials'])} trials, each with a random phase)" + extra,
    )


# ---- figures and text ------------------------------------------------------------------------------------


def figures(result: dict[str, Any]) -> dict[str, str]:
    sizes = result["sizes"]
    out: dict[str, str] = {}
    if not sizes:
        return out
    log_x = len(sizes) > 1 and max(s["models"] for s in sizes) / min(s["models"] for s in sizes) >= 10
    cycle: dict[str, list[tuple[float, float]]] = {}
    for s in sizes:
        for concurrency in (str(CONCURRENCY), "1"):
            cycle.setdefault(f"healthy, concurrency {concurrency}", []).append(
                (s["models"], s["cycles"]["healthy"][concurrency]["median_s"])
            )
            if s["cycles"]["hung"]:
                cycle.setdefault(f"{HUNG} hung, concurrency {concurrency}", []).append(
                    (s["models"], s["cycles"]["hung"][concurrency]["hung_last"]["median_s"])
                )
    out["scale_probe_cycle.svg"] = line_chart(
        "One full probe cycle against models per pod (median)",
        "models",
        "seconds",
        cycle,
        log_x=log_x,
        goal=(f"{CYCLE_SHARE:g} x {PERIOD_S:g} s period", CYCLE_SHARE * PERIOD_S),
    )
    sidecar = {
        "peak RSS (VmHWM)": [(s["models"], s["sidecar"]["peak_rss_mib"]) for s in sizes],
        "target": [(s["models"], RSS_TARGET_MIB + RSS_PER_MODEL_MIB * max(0, s["models"] - 3)) for s in sizes],
    }
    out["scale_probe_sidecar_rss.svg"] = line_chart(
        "healer sidecar peak RSS against models watched", "models", "MiB", sidecar, log_x=log_x
    )
    out["scale_probe_sidecar_cpu.svg"] = line_chart(
        f"healer sidecar CPU, period {WINDOW_PERIOD_S:g} s",
        "models",
        "% of one core",
        {"CPU": [(s["models"], s["sidecar"]["cpu_pct"]) for s in sizes]},
        log_x=log_x,
    )
    out["scale_probe_triton_memory.svg"] = line_chart(
        "Triton (server + Python-backend stubs) memory against models loaded",
        "models",
        "MiB",
        {
            "RSS, server + stubs": [(s["models"], s["triton"]["group_rss_mib"]) for s in sizes],
            "PSS (shared pages once)": [(s["models"], s["triton"]["group_pss_mib"]) for s in sizes],
        },
        log_x=log_x,
    )
    out["scale_probe_triton_load.svg"] = line_chart(
        "Triton start with N models until every one is READY",
        "models",
        "seconds",
        {"start to all READY": [(s["models"], s["triton"]["ready_s"]) for s in sizes]},
        log_x=log_x,
    )
    detect: dict[str, list[tuple[float, float]]] = {}
    for d in result["detection"]:
        kind = "with hung models" if d["hung"] else "healthy"
        detect.setdefault(f"{kind}, period {d['period_s']:g} s", []).append((d["models_watched"], d["expected_s"]))
    if detect:
        out["scale_probe_detection.svg"] = line_chart(
            "Detection of a broken push (expected over a random moment)",
            "models watched",
            "seconds",
            detect,
            log_x=max(x for v in detect.values() for x, _ in v) >= 10,
        )
    return out


def text(result: dict[str, Any]) -> str:
    lines = [f"scale_probe ({'quick' if result['quick'] else 'full'}), {result['settings']['where']}"]
    lines.append(f"machine: {result['machine']}")
    lines.append("")
    lines.append("Triton: start with N models until all READY; memory once loaded")
    lines.append(f"{'N':>4}{'READY s':>9}{'live s':>8}{'CPU s':>8}{'server RSS':>12}{'stubs':>7}{'stubs RSS':>11}"
                 f"{'group PSS':>11}{'PSS/model':>11}")  # fmt: skip
    for s in result["sizes"]:
        t = s["triton"]
        lines.append(
            f"{s['models']:>4}{t['ready_s']:>9}{t['live_s']:>8}{t['load_cpu_s']:>8}{t['server_rss_mib']:>12}"
            f"{t['stubs']:>7}{t['stubs_rss_mib']:>11}{t['group_pss_mib']:>11}{t.get('pss_per_model_mib', '-'):>11}"
        )
    lines.append("")
    lines.append("one full probe_all cycle, median s (min-max) [unexpected results]")
    head = f"{'N':>4}{'healthy c8':>22}{'healthy c1':>22}{'hung c8 first':>22}{'hung c8 last':>22}{'hung c1 last':>22}"
    lines.append(head)

    def cell(c: dict[str, Any] | None) -> str:
        if c is None:
            return f"{'-':>22}"
        return f"{c['median_s']:.3f} ({c['min_s']:.2f}-{c['max_s']:.2f}) [{c['unexpected_results']}]".rjust(22)

    for s in result["sizes"]:
        h, hung = s["cycles"]["healthy"], s["cycles"]["hung"]
        row = f"{s['models']:>4}{cell(h[str(CONCURRENCY)])}{cell(h['1'])}"
        if hung:
            c8 = hung[str(CONCURRENCY)]
            row += cell(c8["first_sight"]) + cell(c8["hung_last"]) + cell(hung["1"]["hung_last"])
            row += f"  ({hung['count']} hung)"
        lines.append(row)
    lines.append("")
    lines.append(f"healer sidecar, off-cluster, period {WINDOW_PERIOD_S:g} s")
    lines.append(f"{'N':>4}{'peak RSS MiB':>14}{'max RSS MiB':>13}{'CPU %':>8}{'cycles':>8}{'window s':>10}")
    for s in result["sizes"]:
        c = s["sidecar"]
        lines.append(
            f"{s['models']:>4}{c['peak_rss_mib']:>14}{c['max_rss_mib']:>13}{c['cpu_pct']:>8}{c['cycles']:>8}"
            f"{c['window_s']:>10}"
        )
    if result["detection"]:
        lines.append("")
        lines.append("detection of a broken push (served -> confirmed failing), seconds")
        lines.append(f"{'condition':<16}{'period':>7}{'watched':>8}{'hung':>5}{'median':>8}{'min':>7}{'max':>7}"
                     f"{'to verdict':>12}{'confirm':>9}{'phase wait':>12}{'cycle start->conf':>19}{'expected':>10}"
                     f"{'sidecar peak MiB':>18}")  # fmt: skip
        for d in result["detection"]:
            lines.append(
                f"{d['condition']:<16}{d['period_s']:>7g}{d['models_watched']:>8}{d['hung']:>5}{d['median_s']:>8}"
                f"{d['min_s']:>7}{d['max_s']:>7}{d['median_to_first_verdict_s']:>12}{d['median_confirmation_s']:>9}"
                f"{statistics.median(t['phase_wait_s'] for t in d['trials']):>12.3f}"
                f"{d['median_from_cycle_start_s']:>19}{d['expected_s']:>10}{d['sidecar_peak_rss_mib']:>18}"
            )
    for skipped in result["skipped"]:
        lines.append(f"skipped N={skipped['models']}: {skipped['why']}")
    lines += [f"note: {note}" for note in result.get("notes", [])]
    lines.append("")
    lines.append("targets")
    for t in result["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        lines.append(f"  {t['name']}: {t['value']} (goal {t['goal']}): {verdict}. {t['note']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N <= 3, short windows, two trials: a smoke run")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.add_argument("--figures", type=Path, help="write the SVG figures into this folder")
    parser.add_argument("--sizes", help="models per pod, comma-separated (default 1,3,10,50,100; quick 1,3)")
    parser.add_argument("--cycles", type=int, help="timed probe cycles per case (default 7; quick 3)")
    parser.add_argument("--window", type=float, help="the sidecar footprint window, s (default 60; quick 10)")
    parser.add_argument("--trials", type=int, help="detection trials per condition (default 5; quick 2)")
    parser.add_argument("--detect-periods", help="sidecar periods for detection, s (default 1,5; quick 1)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (configs and logs)")
    args = parser.parse_args()
    configure_logging(level="warning")
    result = run(
        args.quick,
        sizes=[int(x) for x in args.sizes.split(",")] if args.sizes else None,
        cycles=args.cycles,
        window_s=args.window,
        trials=args.trials,
        detect_periods=[float(x) for x in args.detect_periods.split(",")] if args.detect_periods else None,
        progress=lambda message: print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True),
        keep=args.keep,
    )
    if args.figures:
        args.figures.mkdir(parents=True, exist_ok=True)
        for name, svg in figures(result).items():
            (args.figures / name).write_text(svg)
    print(json.dumps(result, indent=2) if args.output == "json" else text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
