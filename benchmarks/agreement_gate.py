"""What the agreement gate costs (docs/agreement.md): one real tritonserver serving tiny_classifier v1 and
v2 side by side, a replay set of N inputs (one .npy) in a filesystem store, the gate run as a release's
bake runs it (workflows/steps/agreement.py, healer's own TritonRest client): its wall time, per input
(two requests, one to each version), and the verdict.

    .venv/bin/python -m benchmarks.agreement_gate [--inputs 1000] [--runs 3]

Exits 1 unless v2 (the example's retrained version) agrees with v1.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from healer.edges.embedded import EmbeddedTriton
from healer.edges.logs import configure_logging
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton_rest import TritonRest
from healer.settings import load_settings
from healer.settings.sections import AgreementSettings
from workflows.steps.agreement import agreement_gate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODEL = "tiny_classifier"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory() as tmp:
        repo, store_root = Path(tmp) / "repo", Path(tmp) / "store"
        shutil.copytree(
            EXAMPLES / "model_repository" / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__")
        )
        config = (repo / MODEL / "config.pbtxt").read_text()
        (repo / MODEL / "config.pbtxt").write_text(
            config.replace("version_policy: { latest: { num_versions: 1 } }", "version_policy: { all: {} }")
        )
        rows = np.random.default_rng(7).uniform(-1, 1, (args.inputs, 6)).astype(np.float32)
        out = io.BytesIO()
        np.save(out, rows, allow_pickle=False)
        (store_root / MODEL / "replay").mkdir(parents=True)
        (store_root / MODEL / "replay" / "inputs.npy").write_bytes(out.getvalue())
        store = ModelStore(FilesystemBlobs(store_root))
        rules = AgreementSettings(argmax_min_ratio=0.99, max_abs_diff=0.01)
        model = dataclasses.replace(load_settings(EXAMPLES / "healer.yaml").model(MODEL), agreement=rules)
        with EmbeddedTriton(repo, load_models=[MODEL], workdir=Path(tmp) / "work") as triton:
            client = TritonRest(triton.url, timeout_s=5.0)
            try:
                seconds, verdict = [], None
                for _ in range(args.runs):
                    started = time.perf_counter()
                    verdict = agreement_gate(model, store, client, stable="1", candidate="2")
                    seconds.append(time.perf_counter() - started)
            finally:
                client.close()
    assert verdict is not None
    median = statistics.median(seconds)
    print(
        f"agreement gate, {args.inputs} inputs x 2 versions on one Triton (tiny_classifier, Python backend): "
        f"median {median:.2f} s of {args.runs} runs ({', '.join(f'{s:.2f}' for s in seconds)}), "
        f"{1000 * median / args.inputs:.2f} ms per input; {verdict.status.value}: {verdict.why}"
    )
    return 0 if verdict.agrees else 1


if __name__ == "__main__":
    sys.exit(main())
