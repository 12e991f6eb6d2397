"""healer at fleet scale, measured in one run: every part of issue 18's benchmark, its targets printed
as met or missed (never asserted by a timed test), its figures written as SVG for the README.

    .venv/bin/python -m benchmarks.scale [--only restore probe storm size] [--figures docs/figures] [-o json]
    .venv/bin/python -m benchmarks.scale --quick       # tiny sizes: a smoke run of every part

Parts (each also runs alone as ``python -m benchmarks.scale_<part>``):
  restore  restore time against replicas: 1, 2, 4 real Tritons, and 1 to 1000 replicas of a
           SIMULATED Triton (benchmarks/sim_triton.py; labelled a simulation wherever it appears),
           with and without a bandwidth-limited store (benchmarks/scale_restore.py)
  probe    the probe cycle against models per pod on one real Triton, healthy and with 5 hung models;
           the sidecar's peak RSS and CPU; detection time among 100 models against among 1
           (benchmarks/scale_probe.py)
  storm    the drain set with 50 pods of one replica set against a real S3; and, when the e2e tier
           wrote it, 50 sidecars submitting at once to the real Argo (benchmarks/scale_storm.py)
  size     healer's share of a rollback against Triton's own load at 10 MB, 1 GB and 5 GB
           (benchmarks/scale_size.py)

The JSON carries every part's measurements and one ``targets`` list: ``{name, value, goal, met, note}``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

PARTS = ("restore", "probe", "storm", "size")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="run only these parts")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--figures", type=Path, help="write each part's SVG figures into this folder")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    args = parser.parse_args()
    result: dict[str, Any] = {"parts": {}, "targets": []}
    started = time.monotonic()
    for part in args.only:
        module = importlib.import_module(f"benchmarks.scale_{part}")
        print(f"scale: {part} ...", file=sys.stderr)
        part_started = time.monotonic()
        measured = module.run(args.quick)
        measured["wall_s"] = round(time.monotonic() - part_started, 1)
        result["parts"][part] = measured
        result["targets"] += [{"part": part, **t} for t in measured.get("targets", [])]
        if args.figures:
            args.figures.mkdir(parents=True, exist_ok=True)
            for name, svg in module.figures(measured).items():
                (args.figures / name).write_text(svg)
                print(f"scale: wrote {args.figures / name}", file=sys.stderr)
    result["wall_s"] = round(time.monotonic() - started, 1)
    if args.output == "json":
        print(json.dumps(result, indent=2, default=str))
    else:
        print(f"healer at scale: {len(result['targets'])} targets, {result['wall_s']} s")
        for t in result["targets"]:
            mark = "met " if t["met"] else "MISS"
            note = f"; {t['note']}" if t.get("note") else ""
            print(f"  {mark} [{t['part']}] {t['name']}: {t['value']} (goal {t['goal']}){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
