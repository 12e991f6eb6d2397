"""The sidecar's memory with a golden suite per model (issue 30): RSS of `healer sidecar` probing N
models, each with a suite of S requests (lengths spread over 1..64), at a few model counts.

One real tritonserver serves the largest count of the variable-length sequence model
(tests/support/sequence_model.py, Python backend); for each count N, `healer sidecar` runs as its own
process with N of them configured (benchmarks/sidecar_footprint.py's measure(): its /proc VmRSS every
second over the window after its first ready cycle, VmHWM the peak since start, its CPU time). Every
probe passes: this is the cost of watching healthy models with suites, what every Triton pod pays.

    .venv/bin/python -m benchmarks.sidecar_suite_memory [--models 1,10,50] [--suite 10] [--seconds 15] [--period 1]
        [--tensors inline|files|shared]

``--tensors``: the suites' values written inline in healer.yaml (``data:``, as a small suite is), in
.npy files beside it (``file:``), or one suite in files that every model names through a YAML anchor
(``golden: *suite``: healer.yaml stays a few KiB). Inline, healer.yaml is about 9 KiB a model: until
issue 30's fix the sidecar's RSS grew with it (PyYAML composed the whole node graph before building the
document, and glibc kept the freed memory: 88 MiB at 50 models); healer.yaml is now read in one pass over
the parser's events and the freed heap given back (healer/settings/yaml12.py), so 100 models inline stay
within the 64 MiB target (docs/measured.md has the figures; the settings built are under 1 MiB for 500
requests, tracemalloc; probing cycles add < 0.5 MiB).

    .venv/bin/python -m benchmarks.sidecar_suite_memory --models 1,10,50,100 --tensors inline   # about 3 min
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.sidecar_footprint import RSS_TARGET_MIB, measure
from healer.edges.embedded import EmbeddedTriton
from healer.edges.logs import configure_logging
from healer.edges.processes import free_port
from tests.support.sequence_model import golden_request, write_sequence_model


def suite(size: int, files: Path | None = None) -> list[dict[str, Any]]:
    """S requests of lengths spread over 1..64; with ``files``, each tensor's values in a .npy file there
    (``file:``) instead of inline (``data:``)."""
    lengths = [max(1, round(1 + i * 63 / max(size - 1, 1))) for i in range(size)]
    requests = [golden_request(f"len{n}", n) for n in lengths]
    if files is not None:
        files.mkdir(parents=True, exist_ok=True)
        for request in requests:
            for tensor in [*request["inputs"], *request["outputs"]]:  # type: ignore[misc]
                path = files / f"{request['name']}-{tensor['name']}.npy"
                np.save(path, np.asarray(tensor.pop("data"), dtype=np.int32))
                tensor["file"] = str(path)
    return requests


def document(
    names: list[str], size: int, repo: Path, scratch: Path, period: float, port: int, *, tensors: str = "inline"
) -> dict[str, Any]:
    # Each model its own suite, written out (and its own files), as a real healer.yaml has them; or (shared)
    # one suite in .npy files written once, every model naming it through a YAML alias.
    shared = suite(size, scratch / "golden" / "shared") if tensors == "shared" else None
    files = tensors == "files"
    return {
        "triton": {"url": "127.0.0.1:1", "timeout_s": 5.0},  # measure() puts the real one in
        "models": [
            {"name": name, "golden": shared or suite(size, scratch / "golden" / name if files else None)}
            for name in names
        ],
        "store": {"filesystem": {"root": str(repo)}},
        "rollback": {"state_dir": str(scratch / "runs")},
        "sidecar": {"listen": f"127.0.0.1:{port}", "period_s": period},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="1,10,50", help="model counts, comma-separated")
    parser.add_argument("--suite", type=int, default=10, help="requests in each model's suite")
    parser.add_argument("--seconds", type=float, default=15.0, help="the window sampled after the first cycle")
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument(
        "--tensors",
        choices=["inline", "files", "shared"],
        default="inline",
        help="the suites' values inline in healer.yaml (data:), in .npy files beside it (file:), or one suite in "
        "files every model names through a YAML anchor (shared)",
    )
    args = parser.parse_args()
    counts = sorted({int(c) for c in args.models.split(",")})
    configure_logging(level="warning")
    scratch = Path(tempfile.mkdtemp(prefix="healer-suite-memory-"))
    ok = True
    try:
        repo = scratch / "repo"
        names = [f"seq_{i:03d}" for i in range(max(counts))]
        for name in names:
            write_sequence_model(repo, name, {1: 0})
        print(
            f"healer sidecar, off-cluster, a suite of {args.suite} requests per model ({args.tensors}), "
            f"period {args.period:g} s, "
            f"{args.seconds:g} s window; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"
        )
        with EmbeddedTriton(repo, load_models=names, startup_timeout_s=600) as server:
            for count in counts:
                port = free_port()
                doc = document(names[:count], args.suite, repo, scratch, args.period, port, tensors=args.tensors)
                config_kib = len(yaml.safe_dump(doc)) / 1024
                rss_mib, peak_mib, cpu_used, wall, probes = measure(
                    scratch, server.url, doc, port, args.seconds, {}, scratch / f"sidecar-{count}.log"
                )
                within = peak_mib <= RSS_TARGET_MIB
                ok = ok and within
                print(
                    f"  {count:4d} models ({count * args.suite} golden requests): RSS max {rss_mib:5.1f} MiB, peak "
                    f"{peak_mib:5.1f} MiB ({'within' if within else 'OVER'} {RSS_TARGET_MIB:g}); CPU "
                    f"{100 * cpu_used / wall:.1f} % of one core; {probes:.0f} probe results; "
                    f"healer.yaml {config_kib:.0f} KiB"
                )
        print(f"  load average {os.getloadavg()[0]:.2f} at the end (the machine is shared)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
