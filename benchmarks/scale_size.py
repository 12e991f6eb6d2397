"""Restore time against model size: healer's share of a rollback against Triton's own load.

For each size a model is made whose weights file holds that many bytes (a Python-backend model that
reads the whole file at load, so Triton's own load grows with it; it keeps a digest, not the bytes,
so two resident versions of 5 GB fit this machine's memory). Version 1 is promoted through the real
promote path (which reads it in full and stamps it, healer/edges/store/stamps.py), a wrong version 2 of the
same size is pushed and served, and one rollback (the LocalEngine: lease → fetch-stable → restore →
record) restores version 1 while a client sends the golden request every 10 ms (unversioned, as
production traffic does). The store is a filesystem store whose files are hard links to the live
repository's (no second copy on disk); the live repository is where Triton reads.

healer's share = the rollback's wall time minus Triton's load (the restore's ``load_s``); it is split
into the phases (lease, fetch-stable, restore minus load, record). For contrast, a second rollback of
the same size runs with the stamp removed: fetch-stable then reads every byte again, as every rollback
did before versions were staged.

    .venv/bin/python -m benchmarks.scale_size [--sizes 10MB 1GB 5GB] [-o json] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from healer.edges.embedded import EmbeddedTriton
from healer.edges.logs import configure_logging
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.store.stamps import forget_stamp
from healer.edges.triton_rest import TritonRest
from healer.engines.factory import local_engine
from healer.settings import RollbackSettings, StoreSettings, load_settings
from healer.vocabulary import RollbackRequest
from workflows.steps.promote import promote

ROOT = Path(__file__).resolve().parents[1]
BASE = "linear_scorer"
MODEL = "sized_scorer"
CHUNK = 1 << 24
SHARE_RATIO_GOAL = 0.1  # healer's share / Triton's load, at 1 GB and 5 GB
SMALL_SHARE_GOAL_S = 0.3  # healer's share at 10 MB

MODEL_PY = '''"""linear_scorer that also reads weights.bin in full at load (its size is the point)."""
import hashlib, json
from pathlib import Path
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = Path(args["model_repository"]) / args["model_version"]
        params = json.loads((folder / "params.json").read_text())
        digest = hashlib.blake2b(digest_size=8)
        with (folder / "weights.bin").open("rb") as handle:
            while chunk := handle.read(1 << 24):
                digest.update(chunk[:4096])  # every byte read from disk; a sample hashed
        self.digest = digest.hexdigest()
        self.weights = np.asarray(params["weights"], dtype=np.float32)
        self.bias = np.asarray(params["bias"], dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "FEATURES").as_numpy().astype(np.float32)
            y = (x @ self.weights + self.bias).reshape(x.shape[0], -1).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SCORE", y)]))
        return responses
'''


def parse_size(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def write_version(live: Path, store: Path, version: str, params: Path, size: int) -> None:
    """A version in the live repository, hard-linked into the store (one copy on disk)."""
    folder = live / MODEL / version
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(MODEL_PY)
    shutil.copy(params, folder / "params.json")
    block = os.urandom(1 << 20)
    with (folder / "weights.bin").open("wb") as handle:
        handle.write(f"version {version}\n".encode())
        written = 0
        while written < size:
            piece = block[: min(len(block), size - written)]
            handle.write(piece)
            written += len(piece)
    target = store / MODEL / version
    target.mkdir(parents=True)
    for name in ("model.py", "params.json", "weights.bin"):
        os.link(folder / name, target / name)


TRAFFIC = r"""
import json, sys, time, urllib.request
url, model, stop = sys.argv[1], sys.argv[2], sys.argv[3]
features = {"name": "FEATURES", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
body = json.dumps({"inputs": [features]}).encode()
sent = failed = 0
slowest = 0.0
import os
while not os.path.exists(stop):
    sent += 1
    started = time.perf_counter()
    request = urllib.request.Request(f"http://{url}/v2/models/{model}/infer", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            failed += response.status != 200
    except Exception:
        failed += 1
    slowest = max(slowest, time.perf_counter() - started)
    time.sleep(0.01)
print(json.dumps({"sent": sent, "failed": failed, "slowest_s": slowest}))
"""


class Traffic:
    """The golden request every 10 ms, unversioned, as clients send it, from a process of its own (the
    rollback's threads must not slow it); counts what failed and the slowest answer."""

    def __init__(self, url: str, scratch: Path) -> None:
        self._stop = scratch / f"traffic-stop-{time.time_ns()}"
        self._process = subprocess.Popen(
            [sys.executable, "-c", TRAFFIC, url, MODEL, str(self._stop)], stdout=subprocess.PIPE, text=True
        )
        self.sent, self.failed, self.slowest_s = 0, 0, 0.0

    def __enter__(self) -> Traffic:
        time.sleep(0.3)  # the child is sending before the clock starts
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.touch()
        out, _ = self._process.communicate(timeout=30)
        counts = json.loads(out)
        self.sent, self.failed, self.slowest_s = counts["sent"], counts["failed"], counts["slowest_s"]


def one_size(size: int, scratch: Path, base_settings: Any) -> dict[str, Any]:
    live, store_root = scratch / "live", scratch / "store"
    config = (ROOT / "examples" / "model_repository" / BASE / "config.pbtxt").read_text()
    for root in (live, store_root):
        (root / MODEL).mkdir(parents=True)
        (root / MODEL / "config.pbtxt").write_text(config.replace(f'name: "{BASE}"', f'name: "{MODEL}"'))
    good = ROOT / "examples" / "model_repository" / BASE / "1" / "params.json"
    wrong = ROOT / "examples" / "broken" / BASE / "wrong_weights" / "params.json"
    started = time.perf_counter()
    write_version(live, store_root, "1", good, size)
    written_s = time.perf_counter() - started
    golden = base_settings.model(BASE).golden
    model = dataclasses.replace(base_settings.model(BASE), name=MODEL)
    settings = dataclasses.replace(
        base_settings,
        models=(dataclasses.replace(model, golden=golden),),
        store=StoreSettings(filesystem=store_root),
        live_repository=live,
        rollback=RollbackSettings(state_dir=scratch / "runs", load_timeout_s=600, deadline_s=900),
    )
    store = ModelStore(FilesystemBlobs(store_root))
    with EmbeddedTriton(live, load_models=[], workdir=scratch / "triton") as server:
        settings = dataclasses.replace(settings, triton=dataclasses.replace(settings.triton, url=server.url))
        triton = TritonRest(server.url, timeout_s=10)
        started = time.perf_counter()
        triton.load_model(MODEL, timeout_s=600)
        first_load_s = time.perf_counter() - started
        started = time.perf_counter()
        promote(settings, triton, store, MODEL, "1", by="benchmark")
        promote_s = time.perf_counter() - started
        engine = local_engine(settings)  # built (the template read) before any clock starts
        runs = {}
        for label, stamped in (("staged", True), ("unstaged", False)):
            write_version(live, store_root, "2", wrong, size)
            triton.load_model(MODEL, timeout_s=600)  # config.pbtxt: the newest, the wrong v2
            if triton.served_versions(MODEL) != ["2"]:
                raise RuntimeError(f"expected the wrong v2 to serve, Triton serves {triton.served_versions(MODEL)}")
            if not stamped:
                forget_stamp(live / MODEL / "1")
            request = RollbackRequest(model=MODEL, from_version="2", incident=f"size-{size}-{label}-{time.time_ns()}")
            with Traffic(server.url, scratch) as traffic:
                started = time.perf_counter()
                status = engine.run(request, timeout_s=900)
                total_s = time.perf_counter() - started
            if not status.succeeded:
                raise RuntimeError(f"rollback at {size} bytes ({label}) did not succeed: {status.message}")
            phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
            [replica] = phases["restore"]["outputs"]["replicas"].values()
            load_s = float(replica["load"]["load_s"])
            runs[label] = {
                "total_s": round(total_s, 3),
                "triton_load_s": load_s,
                "healer_share_s": round(total_s - load_s, 3),
                "phases_s": {name: p["duration_s"] for name, p in phases.items()},
                "fetch_verified": phases["fetch-stable"]["outputs"]["verified"],
                "requests_sent": traffic.sent,
                "requests_failed": traffic.failed,
                "slowest_request_s": round(traffic.slowest_s, 3),
            }
            # The rollback moved v2 aside (quarantine): the next round pushes a fresh one.
            shutil.rmtree(live / MODEL / "2", ignore_errors=True)
            shutil.rmtree(store_root / MODEL / "2", ignore_errors=True)
            store.update_ledger(MODEL, lambda ledger: dataclasses.replace(ledger, quarantined=()))
            triton.load_model(MODEL, timeout_s=600)
    return {
        "size_bytes": size,
        "write_s": round(written_s, 2),
        "first_load_s": round(first_load_s, 3),
        "promote_s": round(promote_s, 3),
        **runs,
    }


def run(quick: bool = False, sizes: list[int] | None = None) -> dict[str, Any]:
    configure_logging(level="warning")
    sizes = sizes or ([10**6, 10 * 10**6] if quick else [10 * 10**6, 10**9, 5 * 10**9])
    base = load_settings(ROOT / "examples" / "healer.yaml")
    results = []
    for size in sizes:
        scratch = Path(tempfile.mkdtemp(prefix="healer-scale-size-"))
        try:
            results.append(one_size(size, scratch, base))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"  {size / 1e6:,.0f} MB done", file=sys.stderr)
    return {"kind": "real Triton, one replica", "sizes": results, "targets": targets(results)}


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in results:
        staged = r["staged"]
        mb = r["size_bytes"] / 1e6
        if r["size_bytes"] >= 10**9:
            ratio = staged["healer_share_s"] / staged["triton_load_s"]
            out.append(
                {
                    "name": f"healer's share / Triton's load at {mb:,.0f} MB",
                    "value": round(ratio, 3),
                    "goal": f"<= {SHARE_RATIO_GOAL}",
                    "met": ratio <= SHARE_RATIO_GOAL,
                    "note": f"{staged['healer_share_s']:.2f} s of {staged['total_s']:.2f} s; load "
                    f"{staged['triton_load_s']:.2f} s; unstaged share {r['unstaged']['healer_share_s']:.2f} s",
                }
            )
        elif 5 * 10**6 <= r["size_bytes"] <= 50 * 10**6:
            out.append(
                {
                    "name": f"healer's share at {mb:,.0f} MB",
                    "value": staged["healer_share_s"],
                    "goal": f"<= {SMALL_SHARE_GOAL_S} s",
                    "met": staged["healer_share_s"] <= SMALL_SHARE_GOAL_S,
                    "note": f"Triton's load {staged['triton_load_s']:.2f} s",
                }
            )
        failed = staged["requests_failed"] + r["unstaged"]["requests_failed"]
        out.append(
            {
                "name": f"failed requests during the swap at {mb:,.0f} MB",
                "value": failed,
                "goal": "0",
                "met": failed == 0,
                "note": f"of {staged['requests_sent'] + r['unstaged']['requests_sent']} sent every 10 ms",
            }
        )
    return out


def figures(result: dict[str, Any]) -> dict[str, str]:
    from benchmarks.plot import line_chart

    gb = [(r["size_bytes"] / 1e9, r) for r in result["sizes"]]
    series = {
        "Triton's load": [(x, r["staged"]["triton_load_s"]) for x, r in gb],
        "healer, staged": [(x, r["staged"]["healer_share_s"]) for x, r in gb],
        "healer, hashing (before)": [(x, r["unstaged"]["healer_share_s"]) for x, r in gb],
    }
    return {
        "restore-vs-model-size.svg": line_chart(
            "Rollback time against model size (real Triton, one replica)", "weights file (GB)", "seconds", series
        )
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", help="e.g. 10MB 1GB 5GB")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-o", "--output", choices=("json",), help="json: the results on stdout")
    args = parser.parse_args()
    result = run(args.quick, [parse_size(s) for s in args.sizes] if args.sizes else None)
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return 0
    print("size        Triton load  healer share (staged)  (unstaged)  fetch  failed/sent")
    for r in result["sizes"]:
        s, u = r["staged"], r["unstaged"]
        print(
            f"{r['size_bytes'] / 1e6:>8,.0f} MB  {s['triton_load_s']:>9.2f} s  {s['healer_share_s']:>17.3f} s"
            f"  {u['healer_share_s']:>8.3f} s  {s['fetch_verified']:<6} {s['requests_failed']}/{s['requests_sent']}"
        )
    for t in result["targets"]:
        print(f"  {'met ' if t['met'] else 'MISS'} {t['name']}: {t['value']} (goal {t['goal']}; {t['note']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
