"""Storms at scale (issue 18): the drain set when a whole replica set wants out at once, against a real
S3; and, from the e2e tier, 50 sidecars submitting the same incident to the real Argo at once.

drain storm   N pods of one replica set (N = 5, 10, 25, 50), min_ready = N - N // 5 (so at most N // 5
              may drain; 40 of 50). Each pod is the product's DrainKeeper (healer/sidecar/drain.py)
              with a store client of its own (S3Blobs through boto3, built as the sidecar builds it:
              the start-up conditional-write check, then ModelStore) on ONE real S3: SeaweedFS's weed
              (tests/support/s3_server.py). Its peers: a static PeerSource listing all N pods Running and
              Ready. All N start wanting to drain at the same instant (a barrier) and then decide every
              ``period_s`` on a thread of their own, until every pod has a decision resting on a view
              (admitted, or held back by min_ready); then one more cycle of every pod checks that the
              decisions are stable and write nothing. Counted through a wrapper around each pod's blobs:
              every exclusive create (a compare-and-swap attempt: won, lost, failed), LIST and GET.
              Checked: after every won write the drain set is read back (a separate client) and its size
              compared with N - min_ready; at the end every snapshot ever written (the set's whole
              history, append-only) is read and checked, each snapshot key had exactly one winner (the
              backend's If-None-Match held), and the pods whose own decision says "drain" never
              outnumbered N - min_ready at any moment.
history       the cost of one read of a drain set against its history: the store keeps every snapshot
              (nothing prunes .healer/drain/<set>/), and each read LISTs them all to find the newest.
submission    tests/e2e/test_submission_storm.py (the e2e tier, real kube-apiserver, etcd, Argo
storm         controller and argo-server): 50 threads, each with its own ArgoEngine built as the sidecar
              builds it, call submit_incident with the same RollbackRequest at once. Read here from the
              JSON file that test writes when $HEALER_BENCH_OUT is set; never run or invented here:

                  HEALER_BENCH_OUT=/tmp/healer-bench bash e2e/run.sh -k storm

Targets: admitted <= N - min_ready at every read, for every N; all of that room used (liveness);
compare-and-swap writes per pod roughly constant across N (total writes linear in pods).

    .venv/bin/python -m benchmarks.scale_storm [--quick] [-o json] [--figures DIR] [--runs 3]
        [--sizes 5 10 25 50] [--period 1.0] [--storm-json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is a folder, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.plot import line_chart  # noqa: E402

# Where tests/e2e/test_submission_storm.py writes its figures: $HEALER_BENCH_OUT/submission_storm.json.
BENCH_OUT_ENV = "HEALER_BENCH_OUT"
DEFAULT_BENCH_OUT = Path("/tmp/healer-bench")  # noqa: S108 - the documented default of the e2e run
STORM_FILE = "submission_storm.json"
DRAIN_FRACTION = 5  # at most N // 5 pods of N may drain: min_ready = N - N // 5
WRITES_PER_POD_SPREAD = 2.0  # "roughly constant": the largest per-pod figure within 2 x the smallest
HISTORY_SIZES_FULL = (1, 10, 100, 1000, 2000)
HISTORY_SIZES_QUICK = (1, 10, 100)


@dataclasses.dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    runs: int
    period_s: float  # each pod's decide cycle (sidecar.period_s; production default 5 s)
    store_timeout_s: float  # sidecar.drain.store_timeout_s (the bound on one read-decide-write)
    max_cycles: int  # give up on a run after this many cycles of the slowest pod
    history: tuple[int, ...]
    history_reads: int

    @staticmethod
    def full() -> Plan:
        return Plan(
            sizes=(5, 10, 25, 50),
            runs=3,
            period_s=1.0,
            store_timeout_s=5.0,
            max_cycles=60,
            history=HISTORY_SIZES_FULL,
            history_reads=20,
        )

    @staticmethod
    def quick() -> Plan:
        return Plan(
            sizes=(5, 10),
            runs=1,
            period_s=0.5,
            store_timeout_s=5.0,
            max_cycles=40,
            history=HISTORY_SIZES_QUICK,
            history_reads=5,
        )


def min_ready_for(n: int) -> int:
    return n - n // DRAIN_FRACTION


# ---- counting the store's calls ---------------------------------------------------------------------------


class Tally:
    """Every call one storm made on the store, all pods together, and what the checks saw."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.lists = 0
        self.gets = 0
        self.attempts = 0
        self.won = 0
        self.lost = 0
        self.failed = 0
        self.winners: dict[str, list[str]] = {}  # snapshot key -> the pods whose create of it returned True
        self.read_back_sizes: list[int] = []  # the set's size read back after every won write
        self.read_back_errors = 0
        self.draining: set[str] = set()  # pods whose own decision says "drain" now
        self.max_draining = 0
        self.troubles: dict[str, int] = {}  # kind of trouble a decide cycle met -> how often

    def add(self, field: str, count: int = 1) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + count)


class CountingBlobs:
    """A pod's blobs with every call counted; after a won create, the drain set is read back."""

    def __init__(self, inner: Any, tally: Tally, pod: str, read_back: Callable[[], int]) -> None:
        self._inner = inner
        self._tally = tally
        self._pod = pod
        self._read_back = read_back
        self.location = inner.location

    def keys(self, prefix: str) -> list[str]:
        self._tally.add("lists")
        return list(self._inner.keys(prefix))

    def read(self, key: str) -> bytes:
        self._tally.add("gets")
        return bytes(self._inner.read(key))

    def create(self, key: str, data: bytes) -> bool:
        self._tally.add("attempts")
        try:
            created = bool(self._inner.create(key, data))
        except Exception:
            self._tally.add("failed")
            raise
        if not created:
            self._tally.add("lost")
            return False
        with self._tally.lock:
            self._tally.won += 1
            self._tally.winners.setdefault(key, []).append(self._pod)
        try:
            size = self._read_back()
        except Exception:  # the check's own read failed: counted, never taken for a pass
            self._tally.add("read_back_errors")
        else:
            with self._tally.lock:
                self._tally.read_back_sizes.append(size)
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class StaticPeers:
    """Every pod of the replica set Running and Ready, as the Kubernetes API would list them."""

    lists_me = True
    timeout_s = 1.0

    def __init__(self, me: str, pods: Sequence[str]) -> None:
        from healer.core.decisions import Peer

        self.me = me
        self._peers = [Peer(name, True, False) for name in pods]

    def peers(self) -> list[Any]:
        return list(self._peers)


# ---- one drain storm -------------------------------------------------------------------------------------


def _s3_blobs(endpoint: str, bucket: str) -> Any:
    """A store client as the sidecar builds one (healer/edges/store/model_store.py store_from_settings), with
    the test server's credentials passed to boto3 rather than through the environment."""
    from healer.edges.store.blobs import S3Blobs, check_conditional_writes_at_start
    from tests.support.s3_server import s3_client

    blobs = S3Blobs(bucket, client=s3_client(endpoint, connect_timeout_s=3.0, read_timeout_s=10.0, max_attempts=3))
    check_conditional_writes_at_start(blobs)
    return blobs


def _learnt(decision: Any) -> bool:
    """A decision resting on this cycle's view (not kept from an earlier one, not "no view")."""
    return decision.view_at is not None and decision.why == decision.basis


def trouble_kind(keeper: Any) -> str:
    """What kept a cycle from a view, in a few words (the keeper's last trouble, healer/sidecar/drain.py)."""
    trouble = str(getattr(keeper, "_trouble", "") or "")
    if "did not return within" in trouble:
        return "store call over store_timeout_s"
    if "has not returned" in trouble:
        return "an earlier store call still running"
    if trouble.startswith("StoreConflict"):
        return "CAS lost DRAIN_CAS_ATTEMPTS times"
    return trouble.split(":", 1)[0][:60] or "no view (unknown)"


class Storm:
    """One drain storm: N DrainKeepers wanting to drain at once, each on a thread of its own."""

    def __init__(self, endpoint: str, bucket: str, n: int, plan: Plan, run: int) -> None:
        from healer.edges.metrics import Registry
        from healer.edges.store import ModelStore
        from healer.settings import DrainSettings, Settings, SidecarSettings, TritonSettings
        from healer.sidecar.clock import REAL_CLOCK
        from healer.sidecar.drain import DrainKeeper

        self.n, self.plan, self.run = n, plan, run
        self.min_ready = min_ready_for(n)
        self.limit = n - self.min_ready
        self.name = f"storm-{n}-{run}-{uuid.uuid4().hex[:8]}"
        drain = DrainSettings(min_ready=self.min_ready, set_name=self.name, store_timeout_s=plan.store_timeout_s)
        settings = Settings(
            source="benchmark", triton=TritonSettings(), models=(), sidecar=SidecarSettings(drain=drain)
        )
        self.pods = [f"triton-{i:02d}" for i in range(n)]
        self.tally = Tally(self.limit)
        self.checker = ModelStore(_s3_blobs(endpoint, bucket))  # the checks' own client, not counted
        # Built before the storm, one after the other: boto3's default session is not thread-safe to
        # build clients from, and a sidecar builds its own once anyway.
        self.keepers: list[DrainKeeper] = []
        for pod in self.pods:
            store = ModelStore(CountingBlobs(_s3_blobs(endpoint, bucket), self.tally, pod, self.read_back))
            self.keepers.append(
                DrainKeeper(
                    settings,
                    StaticPeers(pod, self.pods),
                    store_factory=lambda store=store: store,  # type: ignore[misc]
                    metrics=Registry(),
                    clock=REAL_CLOCK,
                )
            )
        self.start = 0.0
        self.everyone = threading.Event()
        self.decided_at: dict[str, float] = {}
        self.cycles: dict[str, int] = {}
        self.errors: list[str] = []

    def read_back(self) -> int:
        return len(self.checker.drain_set(self.name).drained)

    def _started(self) -> None:
        self.start = time.monotonic()

    def measure(self) -> dict[str, Any]:
        barrier = threading.Barrier(self.n + 1, action=self._started)
        threads = [
            threading.Thread(target=self._pod_loop, args=(pod, keeper, barrier), name=f"storm-{pod}")
            for pod, keeper in zip(self.pods, self.keepers, strict=True)
        ]
        for thread in threads:
            thread.start()
        barrier.wait(timeout=60)
        for thread in threads:
            thread.join(self.plan.max_cycles * (self.plan.period_s + self.plan.store_timeout_s) + 60)
        during = {k: getattr(self.tally, k) for k in ("lists", "gets", "attempts", "won", "lost", "failed")}
        changed = self._settle()
        return self._row(during, changed)

    def _pod_loop(self, pod: str, keeper: Any, barrier: threading.Barrier) -> None:
        tally = self.tally
        try:
            barrier.wait(timeout=60)
            count = 0
            while not self.everyone.is_set() and count < self.plan.max_cycles:
                began = time.monotonic()
                keeper.decide(wants=True, stopping=False, my_readiness=lambda: True)
                count += 1
                decision = keeper.decision
                with tally.lock:
                    (tally.draining.add if decision.drain else tally.draining.discard)(pod)
                    tally.max_draining = max(tally.max_draining, len(tally.draining))
                    if not _learnt(decision):
                        kind = trouble_kind(keeper)
                        tally.troubles[kind] = tally.troubles.get(kind, 0) + 1
                    elif pod not in self.decided_at:
                        self.decided_at[pod] = time.monotonic() - self.start
                        self.cycles[pod] = count
                        if len(self.decided_at) == self.n:
                            self.everyone.set()
                self.everyone.wait(max(0.0, self.plan.period_s - (time.monotonic() - began)))
        except Exception as exc:  # the benchmark's own failure: reported, never a silent pass
            self.errors.append(f"{pod}: {type(exc).__name__}: {exc}")

    def _settle(self) -> list[str]:
        """One more cycle of every pod, one after the other: the decisions stand (the pods that changed)."""
        changed = []
        for pod, keeper in zip(self.pods, self.keepers, strict=True):
            before = keeper.decision.drain
            keeper.decide(wants=True, stopping=False, my_readiness=lambda: True)
            if keeper.decision.drain != before or not _learnt(keeper.decision):
                changed.append(pod)
        return changed

    def _row(self, during: Mapping[str, int], changed: list[str]) -> dict[str, Any]:
        tally, checker, n, limit = self.tally, self.checker, self.n, self.limit
        # The set's whole history: every snapshot ever written, each within the limit.
        final = checker.drain_set(self.name)
        history_sizes = [
            len(json.loads(checker.blobs.read(key))["drained"])
            for key in sorted(checker.blobs.keys(checker._drain_prefix(self.name)))
        ]
        draining_now = sorted(p for p, k in zip(self.pods, self.keepers, strict=True) if k.decision.drain)
        double_winners = {k: v for k, v in tally.winners.items() if len(v) > 1}
        admitted = len(final.drained)
        cycles = list(self.cycles.values())
        row: dict[str, Any] = {
            "pods": n,
            "min_ready": self.min_ready,
            "may_drain": limit,
            "run": self.run,
            "set": self.name,
            "admitted": admitted,
            "draining_by_decision": len(draining_now),
            "decisions_match_set": draining_now == sorted(final.drained),
            "storm_s": round(max(self.decided_at.values()), 3) if len(self.decided_at) == n else None,
            "cycles_max": max(cycles, default=None),
            "cycles_median": statistics.median(cycles) if cycles else None,
            "undecided": sorted(set(self.pods) - set(self.decided_at)),
            "generations": final.generation,
            "cas_attempts": during["attempts"],
            "cas_won": during["won"],
            "cas_lost": during["lost"],
            "cas_failed": during["failed"],
            "lists": during["lists"],
            "gets": during["gets"],
            "attempts_per_pod": round(during["attempts"] / n, 2),
            "attempts_per_admission": round(during["attempts"] / admitted, 2) if admitted else None,
            "writes_after_settled": tally.attempts - during["attempts"],
            "changed_after_settled": changed,
            "max_read_back": max(tally.read_back_sizes, default=0),
            "read_backs": len(tally.read_back_sizes),
            "read_back_errors": tally.read_back_errors,
            "max_in_history": max(history_sizes, default=0),
            "snapshots_in_history": len(history_sizes),
            "double_winners": double_winners,
            "max_draining_by_decision": tally.max_draining,
            "troubles": dict(sorted(tally.troubles.items(), key=lambda kv: -kv[1])),
            "errors": self.errors,
        }
        row["safe"] = (
            row["max_read_back"] <= limit
            and row["max_in_history"] <= limit
            and row["max_draining_by_decision"] <= limit
            and row["decisions_match_set"]
            and not double_winners
            and row["read_back_errors"] == 0
            and not self.errors
        )
        return row


def drain_storm(endpoint: str, bucket: str, n: int, plan: Plan, run: int, log: Any) -> dict[str, Any]:
    """N DrainKeepers wanting to drain at once; what they wrote, read and decided, and the checks."""
    row = Storm(endpoint, bucket, n, plan, run).measure()
    print(
        f"  drain storm: {n} pods, may drain {row['may_drain']}, run {run + 1}: admitted {row['admitted']}, "
        f"{row['cas_attempts']} CAS attempts ({row['cas_won']} won, {row['cas_lost']} lost, "
        f"{row['cas_failed']} failed), {row['attempts_per_pod']}/pod, all decided in {_s(row['storm_s'])} "
        f"({row['cycles_max']} cycles), max seen {row['max_read_back']}/{row['max_in_history']}/"
        f"{row['max_draining_by_decision']}" + (f", troubles {row['troubles']}" if row["troubles"] else ""),
        file=log,
        flush=True,
    )
    return row


def summarise_sizes(rows: Sequence[Mapping[str, Any]], sizes: Sequence[int]) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        mine = [r for r in rows if r["pods"] == n]
        if not mine:
            continue
        times = [r["storm_s"] for r in mine if r["storm_s"] is not None]
        out.append(
            {
                "pods": n,
                "min_ready": mine[0]["min_ready"],
                "may_drain": mine[0]["may_drain"],
                "runs": len(mine),
                "admitted": sorted({r["admitted"] for r in mine}),
                "cas_attempts": _median([r["cas_attempts"] for r in mine]),
                "cas_lost": _median([r["cas_lost"] for r in mine]),
                "attempts_per_pod": _median([r["attempts_per_pod"] for r in mine]),
                "attempts_per_admission": _median(
                    [r["attempts_per_admission"] for r in mine if r["attempts_per_admission"]]
                ),
                "reads": _median([r["lists"] + r["gets"] for r in mine]),
                "storm_s": _median(times),
                "storm_s_max": max(times) if times else None,
                "cycles_max": max((r["cycles_max"] or 0) for r in mine),
                "max_admitted_seen": max(max(r["max_read_back"], r["max_in_history"]) for r in mine),
                "max_draining_by_decision": max(r["max_draining_by_decision"] for r in mine),
                "safe": all(r["safe"] for r in mine),
                "troubles": sum(sum(r["troubles"].values()) for r in mine),
            }
        )
    return out


# ---- the read cost against the set's history ----------------------------------------------------------------


def history_cost(endpoint: str, bucket: str, plan: Plan, log: Any) -> dict[str, Any]:
    """One drain_set() read (LIST every snapshot, GET the newest) as the history grows."""
    from healer.edges.store import ModelStore

    store = ModelStore(_s3_blobs(endpoint, bucket))
    name = f"history-{uuid.uuid4().hex[:8]}"
    rows = []
    written = 0
    for size in plan.history:
        while written < size:
            written += 1
            data = json.dumps({"drained": {"triton-00": time.time()} if written % 2 else {}, "at": "bench"}).encode()
            store.blobs.create(f"{store._drain_prefix(name)}/{written:08d}.json", data)
        times = []
        for _ in range(plan.history_reads):
            began = time.perf_counter()
            read = store.drain_set(name)
            times.append(time.perf_counter() - began)
        assert read.generation == size, (read.generation, size)
        rows.append({"snapshots": size, "read_ms": round(statistics.median(times) * 1000, 2)})
        print(f"  history: {size} snapshot(s): one read {rows[-1]['read_ms']} ms", file=log, flush=True)
    return {"rows": rows, "reads_per_point": plan.history_reads}


# ---- the submission storm, from the e2e tier -------------------------------------------------------------------


def storm_json_path(explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    return Path(os.environ.get(BENCH_OUT_ENV) or DEFAULT_BENCH_OUT) / STORM_FILE


def submission_storm(path: Path) -> dict[str, Any]:
    """What tests/e2e/test_submission_storm.py measured, if it wrote its file; else says it is absent."""
    how = f"HEALER_BENCH_OUT={path.parent} bash e2e/run.sh -k storm"
    if not path.is_file():
        return {"present": False, "path": str(path), "note": f"not measured here: no {path}; run `{how}`"}
    try:
        measured = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"present": False, "path": str(path), "note": f"unreadable {path}: {exc}; run `{how}` again"}
    age_s = time.time() - path.stat().st_mtime
    return {"present": True, "path": str(path), "file_age_s": round(age_s), **measured}


# ---- the whole benchmark ---------------------------------------------------------------------------------


def run(quick: bool, *, plan: Plan | None = None, storm_json: Path | None = None, log: Any = None) -> dict[str, Any]:
    """Measure and return everything (JSON-ready)."""
    from healer.edges.logs import configure_logging
    from tests.support.s3_server import SeaweedS3

    plan = plan or (Plan.quick() if quick else Plan.full())
    log = log or sys.stderr
    configure_logging(level="error")
    started = time.monotonic()
    result: dict[str, Any] = {
        "benchmark": "scale_storm",
        "quick": quick,
        "plan": dataclasses.asdict(plan),
        "cpus": os.cpu_count(),
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    rows: list[dict[str, Any]] = []
    with SeaweedS3() as server:  # started on entry, stopped and removed on exit
        bucket = server.make_bucket()
        result["store"] = f"SeaweedFS ({server.binary}) at {server.endpoint_url}, bucket {bucket}"
        for n in plan.sizes:
            for attempt in range(plan.runs):
                rows.append(drain_storm(server.endpoint_url, bucket, n, plan, attempt, log))
        result["history"] = history_cost(server.endpoint_url, bucket, plan, log)
    result["drain"] = {"rows": rows, "sizes": summarise_sizes(rows, plan.sizes)}
    result["submission_storm"] = submission_storm(storm_json_path(storm_json))
    result["targets"] = targets(result)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _fit(points: Sequence[tuple[float, float]]) -> dict[str, float] | None:
    """Least squares y = a x + b and y = c x^2 + d: which describes the totals better (R^2)."""
    if len(points) < 3:
        return None

    def r2(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
        icpt = my - slope * mx
        ss_res = sum((y - (slope * x + icpt)) ** 2 for x, y in zip(xs, ys, strict=True))
        ss_tot = sum((y - my) ** 2 for y in ys) or 1.0
        return slope, icpt, 1 - ss_res / ss_tot

    xs, ys = [p[0] for p in points], [p[1] for p in points]
    slope, _icpt, linear = r2(xs, ys)
    coef, _const, quadratic = r2([x * x for x in xs], ys)
    return {
        "linear_slope": round(slope, 3),
        "linear_r2": round(linear, 4),
        "quadratic_coef": round(coef, 4),
        "quadratic_r2": round(quadratic, 4),
    }


def targets(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    sizes = result["drain"]["sizes"]
    out: list[dict[str, Any]] = []
    worst = {s["pods"]: f"{s['max_admitted_seen']}/{s['may_drain']}" for s in sizes}
    out.append(
        {
            "name": "admitted <= N - min_ready at every read",
            "value": worst,
            "goal": "every read back after a won write and every snapshot in the set's history within N - min_ready; "
            "no snapshot with two winners; pods draining by their own decision never more",
            "met": bool(sizes) and all(s["safe"] for s in sizes),
            "note": "max admitted seen / may drain, per N (all runs); read back after every won write by a "
            "separate client",
        }
    )
    out.append(
        {
            "name": "all the room used",
            "value": {s["pods"]: s["admitted"] for s in sizes},
            "goal": "exactly N - min_ready admitted in the end, every pod decided",
            "met": bool(sizes)
            and all(
                s["admitted"] == [s["may_drain"]] and not r["undecided"]
                for s in sizes
                for r in result["drain"]["rows"]
                if r["pods"] == s["pods"]
            ),
            "note": "liveness: the storm ends with the drain set full and every pod's decision resting on a view",
        }
    )
    per_pod = {s["pods"]: s["attempts_per_pod"] for s in sizes}
    values = [v for v in per_pod.values() if v]
    spread = max(values) / min(values) if values else None
    fit = _fit([(s["pods"], s["cas_attempts"]) for s in sizes if s["cas_attempts"] is not None])
    out.append(
        {
            "name": "CAS writes per pod roughly constant (total linear in pods)",
            "value": per_pod,
            "goal": f"largest per-pod figure <= {WRITES_PER_POD_SPREAD:g} x the smallest across N",
            "met": spread is not None and spread <= WRITES_PER_POD_SPREAD,
            "note": f"spread {spread:.2f} x" + (f"; totals fit {fit}" if fit else "")
            if spread is not None
            else "no sizes measured",
        }
    )
    storm = result["submission_storm"]
    if storm.get("present"):
        out.append(
            {
                "name": "submission storm: exactly one workflow",
                "value": f"{storm.get('submitted')} submitted, {storm.get('joined')} joined, "
                f"{storm.get('workflows_listed')} listed",
                "goal": f"1 submitted, {storm.get('sidecars', 50) - 1} joined, 1 workflow listed by argo-server",
                "met": storm.get("submitted") == 1
                and storm.get("joined") == storm.get("sidecars", 50) - 1
                and storm.get("workflows_listed") == 1,
                "note": f"from {storm['path']} ({storm.get('measured_at')}, file {storm.get('file_age_s')} s old)",
            }
        )
    else:
        out.append(
            {
                "name": "submission storm: exactly one workflow",
                "value": None,
                "goal": "1 submitted, 49 joined, 1 workflow listed by argo-server",
                "met": None,
                "note": storm["note"],
            }
        )
    return out


def figures(result: Mapping[str, Any]) -> dict[str, str]:
    """SVG line charts: CAS attempts against pods (all pods, per pod); the time until every pod decided;
    one read of a drain set against its history."""
    sizes = [s for s in result["drain"]["sizes"] if s["cas_attempts"] is not None]
    charts: dict[str, str] = {}
    if not sizes:
        return charts
    charts["drain-storm-writes.svg"] = line_chart(
        "Drain storm: compare-and-swap writes against pods (S3)",
        "pods wanting to drain at once",
        "create attempts, all pods",
        {
            "attempts": [(s["pods"], s["cas_attempts"]) for s in sizes],
            "lost": [(s["pods"], s["cas_lost"]) for s in sizes],
        },
    )
    charts["drain-storm-writes-per-pod.svg"] = line_chart(
        "Drain storm: compare-and-swap writes per pod (S3)",
        "pods wanting to drain at once",
        "create attempts per pod",
        {"per pod": [(s["pods"], s["attempts_per_pod"]) for s in sizes]},
    )
    timed = [s for s in sizes if s["storm_s"] is not None]
    if timed:
        charts["drain-storm-time.svg"] = line_chart(
            f"Drain storm: until every pod decided (period {result['plan']['period_s']:g} s)",
            "pods wanting to drain at once",
            "seconds",
            {
                "median": [(s["pods"], s["storm_s"]) for s in timed],
                "slowest": [(s["pods"], s["storm_s_max"]) for s in timed],
            },
        )
    history = result.get("history", {}).get("rows", [])
    if len(history) > 1:
        charts["drain-set-read-vs-history.svg"] = line_chart(
            "One drain set read against its history (S3)",
            "snapshots kept",
            "ms (median)",
            {"drain_set()": [(r["snapshots"], r["read_ms"]) for r in history]},
            log_x=True,
        )
    return charts


def summary(result: Mapping[str, Any]) -> str:
    lines = [
        f"Storms at scale ({'quick' if result['quick'] else 'full'} run, {result['cpus']} CPUs); "
        f"store: {result['store']}",
        f"drain storm: every pod wants to drain at once; min_ready = N - N // {DRAIN_FRACTION}; "
        f"period {result['plan']['period_s']:g} s, store_timeout_s {result['plan']['store_timeout_s']:g}; "
        f"median of {result['plan']['runs']} run(s)",
        f"  {'PODS':>4} {'MIN_READY':>9} {'MAY':>4} {'ADMITTED':>8} {'MAX SEEN':>8} {'CAS':>6} {'LOST':>6} "
        f"{'CAS/POD':>7} {'CAS/ADM':>7} {'READS':>6} {'DECIDED':>8} {'SLOWEST':>8} {'CYCLES':>6} {'TROUBLE':>7} SAFE",
    ]
    for s in result["drain"]["sizes"]:
        lines.append(
            f"  {s['pods']:>4} {s['min_ready']:>9} {s['may_drain']:>4} {'/'.join(map(str, s['admitted'])):>8} "
            f"{s['max_admitted_seen']:>8} {_n(s['cas_attempts']):>6} {_n(s['cas_lost']):>6} "
            f"{_n(s['attempts_per_pod']):>7} {_n(s['attempts_per_admission']):>7} {_n(s['reads']):>6} "
            f"{_s(s['storm_s']):>8} {_s(s['storm_s_max']):>8} {s['cycles_max']:>6} {s['troubles']:>7} "
            f"{'yes' if s['safe'] else 'NO'}"
        )
    history = result.get("history", {}).get("rows", [])
    if history:
        lines.append("one drain set read (LIST every snapshot, GET the newest) against the snapshots kept:")
        lines.append("  " + ", ".join(f"{r['snapshots']}: {r['read_ms']} ms" for r in history))
    storm = result["submission_storm"]
    lines.append("submission storm against the real Argo (tests/e2e/test_submission_storm.py):")
    if storm.get("present"):
        lines.append(
            f"  {storm.get('sidecars')} sidecars: {storm.get('submitted')} submitted, {storm.get('joined')} joined, "
            f"{storm.get('failed', 0)} failed; argo-server lists {storm.get('workflows_listed')} workflow(s); "
            f"all returned in {_s(storm.get('all_returned_s'))} (one call: median {_s(storm.get('call_s_median'))}, "
            f"slowest {_s(storm.get('call_s_max'))}); measured {storm.get('measured_at')}, {storm['path']}"
        )
    else:
        lines.append(f"  {storm['note']}")
    lines.append("targets:")
    for target in result["targets"]:
        met = {True: "met", False: "MISSED", None: "absent"}[target["met"]]
        lines.append(f"  {met:<6} {target['name']}: {target['value']} (goal {target['goal']}); {target['note']}")
    lines.append(f"({result['seconds']:.0f} s in all)")
    return "\n".join(lines)


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 5 and 10, one run: a smoke test")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.add_argument("--figures", type=Path, help="write the SVG figures into this folder")
    parser.add_argument("--runs", type=int, help="storms per size")
    parser.add_argument("--sizes", type=int, nargs="+", help="pods per replica set")
    parser.add_argument("--period", type=float, help="each pod's decide cycle, seconds")
    parser.add_argument("--storm-json", type=Path, help=f"the e2e test's file (default ${BENCH_OUT_ENV}/{STORM_FILE})")
    args = parser.parse_args()
    plan = Plan.quick() if args.quick else Plan.full()
    changes = {
        "runs": args.runs,
        "sizes": tuple(args.sizes) if args.sizes else None,
        "period_s": args.period,
    }
    plan = dataclasses.replace(plan, **{k: v for k, v in changes.items() if v is not None})
    result = run(args.quick, plan=plan, storm_json=args.storm_json)
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
