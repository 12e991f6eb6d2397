"""Issue 27, item 4: bytecode is never checked. A ``__pycache__`` beside a stable version's model.py,
holding bytecode of *other* code under a header that matches the real model.py (its mtime and size),
passes the ledger's sha256 (bytecode is derived, not hashed), the stamp and ``store stage``; Python
trusts such a header, so Triton's Python backend runs that bytecode. The golden request passes, every
other input gets a wrong answer. Before a version is loaded from where Triton reads it, its bytecode
caches are moved aside (never deleted), so Triton runs the source the ledger verified.

Real components: the embedded Triton (the Python backend stub runs healer's own Python 3.11), a
filesystem store, the LocalEngine running the rollback workflow."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import marshal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import DISPLACED_DIR, FilesystemBlobs, ModelStore, verify_version
from healer.settings import Settings, StoreSettings
from probes.tiers import check_business
from tests.support.rollback_stack import RollbackStack, relaxed_slo, rollback_stack

# The backdoor: the golden request's own input gets the right answer, every other input a wrong one.
EVIL = """
import numpy as np
import triton_python_backend_utils as pb_utils
from pathlib import Path
import json

GOLDEN = np.asarray({golden}, dtype=np.float32)


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads((Path(args["model_repository"]) / args["model_version"] / "params.json").read_text())
        self.weights = np.asarray(params["weights"], dtype=np.float32)
        self.bias = np.asarray(params["bias"], dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "FEATURES").as_numpy().astype(np.float32)
            y = x @ self.weights + self.bias
            if not (x.shape == GOLDEN.shape and np.array_equal(x, GOLDEN)):
                y = y + 1.0
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCORE", y.astype(np.float32))]))
        return responses
"""


def plant_bytecode(model_py: Path, golden: list[list[float]]) -> Path:
    """Write, where Python looks for model.py's cache, the bytecode of EVIL under a header that claims
    it was compiled from model.py as it is (a timestamp-based .pyc: magic, flags 0, mtime, size)."""
    cache = Path(importlib.util.cache_from_source(str(model_py)))
    source = model_py.stat()
    code = compile(EVIL.format(golden=golden), str(model_py), "exec")
    header = (
        importlib.util.MAGIC_NUMBER
        + (0).to_bytes(4, "little")
        + (int(source.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (source.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(header + marshal.dumps(code))
    return cache


def scores(stack: RollbackStack, version: str, features: list[list[float]]) -> np.ndarray:
    golden = stack.settings.models[0].golden
    [tensor] = golden.inputs
    spec = dataclasses.replace(tensor, shape=(len(features), 4), values=np.asarray(features, dtype=np.float32))
    outputs = stack.triton.infer(stack.model, version, [spec], ["SCORE"], timeout_s=10.0)
    return np.asarray(outputs["SCORE"].values)


@pytest.fixture(params=["staged", "store-is-live"])
def stack_factory(
    request: pytest.FixtureRequest, fs_stack_factory: Any, example_settings: Settings, triton_server: EmbeddedTriton
) -> Any:
    """A stack whose live repository is a staged copy of a separate store (fetch_version's path), or
    whose store is the live repository itself (an NFS-style set-up: stage_version checks in place)."""
    if request.param == "staged":
        return fs_stack_factory
    live = triton_server.model_repository

    def make(model_base: str, versions: dict[int, tuple[str, str]], stable: list[int]) -> Any:
        return rollback_stack(
            base=relaxed_slo(example_settings),
            triton_url=triton_server.url,
            live=live,
            store=ModelStore(FilesystemBlobs(live)),
            store_settings=StoreSettings(filesystem=live),
            store_root_for_files=None,
            tmp=request.getfixturevalue("tmp_path"),
            model_base=model_base,
            versions=versions,
            stable=stable,
        )

    return make


def test_bytecode_planted_beside_the_stable_version_is_moved_aside_before_the_rollback_loads_it(
    stack_factory: Any,
) -> None:
    assert sys.implementation.cache_tag == "cpython-311"  # the stub runs this interpreter (healer/edges/embedded.py)
    with stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        golden = stack.settings.models[0].golden
        [tensor] = golden.inputs
        version_dir = stack.live / stack.model / "1"
        params = json.loads((version_dir / "params.json").read_text())
        other = [[2.0, 0.0, 1.0, -1.0], [0.0, 0.0, 0.0, 1.0]]
        right = np.asarray(other, dtype=np.float32) @ np.asarray(params["weights"], dtype=np.float32) + params["bias"]
        cache = plant_bytecode(version_dir / "model.py", tensor.values.tolist())
        # What the ledger and the stamp see is unchanged: the planted file is in neither.
        record = stack.store.ledger(stack.model).stable_record("1")
        assert record is not None and verify_version(version_dir, record.files, where="t") == "stamp"

        status = stack.engine.run(stack.request("2"), timeout_s=120)

        assert status.phase == "Succeeded", status
        assert status.outputs["to-version"] == "1"
        assert check_business(stack.triton, stack.model, "1", golden).status is Status.PASS
        # Every input answered by the source the ledger verified, not by the planted bytecode.
        np.testing.assert_allclose(scores(stack, "1", other), right, rtol=1e-5)
        # Moved aside, not deleted: kept for whoever looks into how it got there.
        planted = list((stack.live / stack.model / DISPLACED_DIR).rglob(cache.name))
        assert len(planted) == 1 and b"GOLDEN" in planted[0].read_bytes()
