"""The drain set's cost (issue 27, item 11): store calls for N pods and K admissions, and one read of the
set against the snapshots it keeps. A SIMULATION of the fleet: no Kubernetes, no Triton; each pod is
the product's DrainKeeper (healer/sidecar/drain.py) on one real store (a filesystem folder, or
SeaweedFS's S3 with --s3), its peers a static list of N pods Running and Ready, on fake time.

storm       N pods of one replica set all want to drain at once; min_ready = N - N // 5, so K = N // 5
            may drain. Rounds: in each, every pod decides once, all N on threads at once and in
            lockstep: every listing of the drain set waits until every pod still deciding lists too,
            and all get the same listing (every pod reads the same state and races for the same next
            snapshot; a lost race re-reads and races again with the others that lost: the worst case,
            as pods whose store calls take the same time). Rounds run until two in a row write
            nothing. Then every pod stops wanting at once (the incident healed), again in rounds
            until nothing is written. Counted through a wrapper around each pod's blobs: every
            exclusive create (won or lost), delete, LIST and GET. Checked after every won create:
            the set never holds more than K.
history     one drain_set() read (LIST, then GET the newest) when the set has had 1, 10, 100, 1000 and
            2000 writes: "unpruned" writes the snapshots straight into the folder (the history as it
            was before pruning: every snapshot ever written, still there), "through writes" makes the
            same number of changes through update_drain_set (which prunes old generations after each
            write, when the code does).

    .venv/bin/python -m benchmarks.drain_set [--sizes 5 10 25 50 100] [--s3] [-o json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is a folder, not an installed package
    sys.path.insert(0, str(ROOT))

DRAIN_FRACTION = 5  # at most N // 5 pods of N may drain: min_ready = N - N // 5 (as benchmarks/scale_storm.py)
SIZES = (5, 10, 25, 50, 100)
HISTORY = (1, 10, 100, 1000, 2000)
HISTORY_READS = 20
MAX_ROUNDS = 60  # a storm that has not settled by then is reported as such, never waited on


class Rounds:
    """What every pod's blobs share: the counts, and the lockstep. In a round every pod's decide runs on
    a thread of its own, and every listing of the drain set waits until each pod still deciding is
    waiting to list too: then one listing, taken then, is handed to all of them. So every pod reads
    the same state and races for the same next snapshot, and a lost race re-reads and races again with
    the others that lost (as pods whose store calls all take the same time would): the worst case."""

    def __init__(self, inner: Any, prefix: str, checker: Any, name: str) -> None:
        self.inner = inner
        self.prefix = prefix
        self.checker = checker
        self.name = name
        self.lock = threading.Lock()
        self.gate = threading.Condition()
        self.active = 0
        self.waiting = 0
        self.step = 0
        self.listing: list[str] = []
        self.counts = dict.fromkeys(("lists", "gets", "won", "lost", "deletes", "wishes"), 0)
        self.max_seen = 0

    def add(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def enter(self, pods: int) -> None:
        with self.gate:
            self.active += pods

    def leave(self) -> None:
        with self.gate:
            self.active -= 1
            self._release()

    def keys(self) -> list[str]:
        with self.gate:
            self.waiting += 1
            step = self.step
            self._release()
            if not self.gate.wait_for(lambda: self.step != step, timeout=120):
                raise RuntimeError("lockstep stuck: a pod neither listed nor finished in 120 s")
            return list(self.listing)

    def _release(self) -> None:
        if self.waiting and self.waiting >= self.active:
            self.listing = self.inner.keys(self.prefix)
            self.waiting = 0
            self.step += 1
            self.gate.notify_all()


class PodBlobs:
    """One pod's view of the shared store, every call counted (see Rounds)."""

    def __init__(self, rounds: Rounds, pod: str) -> None:
        self.rounds = rounds
        self.pod = pod
        self.location = rounds.inner.location

    def keys(self, prefix: str) -> list[str]:
        self.rounds.add("lists")
        if prefix == self.rounds.prefix:
            return self.rounds.keys()
        return list(self.rounds.inner.keys(prefix))

    def read(self, key: str) -> bytes:
        self.rounds.add("gets")
        return bytes(self.rounds.inner.read(key))

    def create(self, key: str, data: bytes) -> bool:
        created = bool(self.rounds.inner.create(key, data))
        if not key.endswith(".json"):  # a pod's wish (a key of its own, no race): counted apart
            self.rounds.add("wishes")
            return created
        self.rounds.add("won" if created else "lost")
        if created and key.endswith(".json"):
            size = len(self.rounds.checker.drain_set(self.rounds.name).drained)
            with self.rounds.lock:
                self.rounds.max_seen = max(self.rounds.max_seen, size)
        return created

    def delete(self, key: str) -> None:
        self.rounds.add("deletes")
        self.rounds.inner.delete(key)


class StaticPeers:
    lists_me = True
    timeout_s = 1.0

    def __init__(self, me: str, pods: Sequence[str]) -> None:
        from healer.core.decisions import Peer

        self.me = me
        self._peers = [Peer(name, True, False) for name in pods]

    def peers(self) -> list[Any]:
        return list(self._peers)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        self.now += timeout_s
        return event.is_set()


def storm(blobs_factory: Any, n: int) -> dict[str, Any]:
    """N DrainKeepers wanting to drain at once, in rounds; then all stopping at once."""
    from healer.edges.metrics import Registry
    from healer.edges.store import ModelStore
    from healer.settings import DrainSettings, Settings, SidecarSettings, TritonSettings
    from healer.sidecar.drain import DrainKeeper

    min_ready = n - n // DRAIN_FRACTION
    limit = n - min_ready
    name = f"storm-{n}-{uuid.uuid4().hex[:8]}"
    drain = DrainSettings(min_ready=min_ready, set_name=name, store_timeout_s=30.0)
    settings = Settings(source="benchmark", triton=TritonSettings(), models=(), sidecar=SidecarSettings(drain=drain))
    pods = [f"triton-{i:03d}" for i in range(n)]
    checker = ModelStore(blobs_factory())
    rounds = Rounds(blobs_factory(), f".healer/drain/{name}", checker, name)
    clock = FakeClock()
    keepers = [
        DrainKeeper(
            settings,
            StaticPeers(pod, pods),
            store_factory=lambda pod=pod: ModelStore(PodBlobs(rounds, pod)),  # type: ignore[misc]
            metrics=Registry(),
            clock=clock,
        )
        for pod in pods
    ]

    def decide(keeper: Any, wants: bool) -> None:
        try:
            keeper.decide(wants=wants, stopping=False, my_readiness=lambda: True)
        finally:
            rounds.leave()

    def phase(wants: bool) -> dict[str, Any]:
        before = dict(rounds.counts)
        quiet, count = 0, 0
        while quiet < 2 and count < MAX_ROUNDS:
            count += 1
            clock.now += 1.0
            writes = sum(rounds.counts[k] for k in ("won", "lost", "deletes", "wishes"))
            rounds.enter(len(keepers))
            threads = [threading.Thread(target=decide, args=(keeper, wants)) for keeper in keepers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wrote = sum(rounds.counts[k] for k in ("won", "lost", "deletes", "wishes")) - writes
            quiet = quiet + 1 if wrote == 0 else 0
        delta = {k: rounds.counts[k] - before[k] for k in rounds.counts}
        creates = delta["won"] + delta["lost"]
        return {
            "rounds": count - quiet,
            "settled": quiet >= 2,
            "creates": creates,
            "won": delta["won"],
            "lost": delta["lost"],
            "deletes": delta["deletes"],
            "wishes": delta["wishes"],
            "writes_per_pod": round((creates + delta["wishes"] + delta["deletes"]) / n, 2),
            "lists": delta["lists"],
            "gets": delta["gets"],
            "creates_per_pod": round(creates / n, 2),
            "draining": sum(1 for k in keepers if k.decision.drain),
            "in_set": len(checker.drain_set(name).drained),
        }

    admit = phase(True)
    leave = phase(False)
    return {
        "pods": n,
        "min_ready": min_ready,
        "may_drain": limit,
        "admit": admit,
        "leave": leave,
        "max_in_set_seen": rounds.max_seen,
        "safe": rounds.max_seen <= limit and admit["draining"] <= limit,
        "snapshots_left": len([k for k in rounds.inner.keys(rounds.prefix) if k.endswith(".json")]),
    }


def history(blobs_factory: Any, sizes: Sequence[int], reads: int) -> list[dict[str, Any]]:
    """One drain_set() read against the history: written straight (unpruned) and through update_drain_set."""
    from healer.edges.store import ModelStore

    rows = []
    unpruned = ModelStore(blobs_factory())
    through = ModelStore(blobs_factory())
    a, b = f"history-raw-{uuid.uuid4().hex[:8]}", f"history-cas-{uuid.uuid4().hex[:8]}"
    written = 0
    for size in sizes:
        while written < size:
            written += 1
            drained = {"triton-000": 1.0} if written % 2 else {}
            data = json.dumps({"drained": drained, "at": "bench"}).encode()
            unpruned.blobs.create(f".healer/drain/{a}/{written:08d}.json", data)
            through.update_drain_set(b, lambda _d, drained=drained: drained)  # type: ignore[misc]
        row: dict[str, Any] = {"writes": size}
        for label, store, name in (("unpruned", unpruned, a), ("through_writes", through, b)):
            times = []
            for _ in range(reads):
                began = time.perf_counter()
                read = store.drain_set(name)
                times.append(time.perf_counter() - began)
            assert read.generation == size, (label, read.generation, size)
            row[f"{label}_ms"] = round(statistics.median(times) * 1000, 2)
            row[f"{label}_snapshots"] = len(
                [k for k in store.blobs.keys(f".healer/drain/{name}") if k.endswith(".json")]
            )
        rows.append(row)
    return rows


@contextlib.contextmanager
def filesystem() -> Iterator[tuple[str, Any]]:
    from healer.edges.store import FilesystemBlobs

    with tempfile.TemporaryDirectory(prefix="healer-drain-bench-") as folder:
        yield f"filesystem ({folder})", lambda: FilesystemBlobs(Path(folder))


@contextlib.contextmanager
def seaweedfs() -> Iterator[tuple[str, Any]]:
    from healer.edges.store.blobs import S3Blobs
    from tests.support.s3_server import SeaweedS3, s3_client

    with SeaweedS3() as server:  # started on entry, stopped and removed on exit
        bucket = server.make_bucket()
        endpoint = server.endpoint_url
        yield (
            f"S3, SeaweedFS at {endpoint}",
            lambda: S3Blobs(bucket, client=s3_client(endpoint, connect_timeout_s=3.0, read_timeout_s=10.0)),
        )


def run(sizes: Sequence[int], use_s3: bool, history_sizes: Sequence[int], reads: int) -> dict[str, Any]:
    from healer.edges.logs import configure_logging

    configure_logging(level="error")
    began = time.monotonic()
    with seaweedfs() if use_s3 else filesystem() as (where, factory):
        result: dict[str, Any] = {
            "store": where,
            "storm": [storm(factory, n) for n in sizes],
            "history": history(factory, history_sizes, reads),
        }
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def summary(result: Mapping[str, Any]) -> str:
    lines = [
        f"The drain set (a SIMULATION of the fleet: DrainKeepers on fake time, static peers); store: {result['store']}",
        f"storm: every pod wants to drain at once, in lockstep (every pod lists, then races, together); "
        f"min_ready = N - N // {DRAIN_FRACTION} (K = N // {DRAIN_FRACTION} may drain); then all stop wanting",
        "  CAS: exclusive creates of a snapshot (won + lost); WISH: creates of a pod's own wish key; DEL: deletes "
        "(wishes, pruned snapshots); ALL/POD: all three per pod",
        f"  {'PODS':>4} {'K':>3} | {'ADMIT: CAS':>10} {'(LOST)':>6} {'CAS/POD':>7} {'WISH':>4} {'DEL':>4} "
        f"{'ALL/POD':>7} {'LISTS':>5} {'ROUNDS':>6} {'DRAINING':>8} | {'LEAVE: CAS':>10} {'(LOST)':>6} {'DEL':>4} "
        f"{'ALL/POD':>7} {'ROUNDS':>6} {'LEFT IN':>7} | {'SNAPSHOTS':>9} SAFE",
    ]
    for row in result["storm"]:
        a, b = row["admit"], row["leave"]
        lines.append(
            f"  {row['pods']:>4} {row['may_drain']:>3} | {a['creates']:>10} {a['lost']:>6} {a['creates_per_pod']:>7} "
            f"{a['wishes']:>4} {a['deletes']:>4} {a['writes_per_pod']:>7} {a['lists']:>5} {a['rounds']:>6} "
            f"{a['draining']:>8} | {b['creates']:>10} {b['lost']:>6} {b['deletes']:>4} {b['writes_per_pod']:>7} "
            f"{b['rounds']:>6} {b['in_set']:>7} | {row['snapshots_left']:>9} {'yes' if row['safe'] else 'NO'}"
        )
    lines.append("one drain_set() read against the writes the set has had (median ms; snapshots in the folder):")
    for row in result["history"]:
        lines.append(
            f"  {row['writes']:>5} writes: unpruned {row['unpruned_ms']:>7} ms ({row['unpruned_snapshots']}), "
            f"through update_drain_set {row['through_writes_ms']:>7} ms ({row['through_writes_snapshots']})"
        )
    lines.append(f"({result['seconds']:.0f} s in all)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="pods per replica set")
    parser.add_argument("--history", type=int, nargs="+", default=list(HISTORY), help="writes before a timed read")
    parser.add_argument("--reads", type=int, default=HISTORY_READS, help="timed reads per history point")
    parser.add_argument(
        "--s3", action="store_true", help="on SeaweedFS (tests/support/s3_server.py) instead of a folder"
    )
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = parser.parse_args()
    result = run(args.sizes, args.s3, args.history, args.reads)
    print(json.dumps(result, indent=2) if args.output == "json" else summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
