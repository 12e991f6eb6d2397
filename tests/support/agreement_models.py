"""TEST FIXTURES for the agreement gate (docs/agreement.md): a replay set for tiny_classifier and a new
version of it that disagrees with the stable one on a known share of those inputs.

``write_flipping_version`` writes a version whose model (``FLIP_MODEL``, a test fixture, not an example)
is tiny_classifier v1's softmax classifier with one change: for every input row whose first feature is
below ``flip_below`` it swaps the two largest logits, so its class (LABEL, and PROBS' argmax) changes.
``replay_inputs`` draws inputs with every first feature in [-1, 1) except at the rows asked for, where it
is -3: those rows, and only those, are flipped. The golden request's rows (first features 0.2 and 1.5)
are never flipped, so the version passes its golden request and only the replay set tells it apart.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Collection
from pathlib import Path

import numpy as np

from tests.conftest import EXAMPLES

FLIP_BELOW = -2.0
FLIPPED_VALUE = -3.0

FLIP_MODEL = '''"""TEST FIXTURE (tests/support/agreement_models.py), not an example model: tiny_classifier's softmax
classifier whose class changes (the two largest logits swapped) for every input row whose first feature is
below params' flip_below."""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads((Path(args["model_repository"]) / args["model_version"] / "params.json").read_text())
        self.weights = np.asarray(params["weights"], dtype=np.float32)
        self.bias = np.asarray(params["bias"], dtype=np.float32)
        self.flip_below = float(params["flip_below"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().astype(np.float32)
            logits = x @ self.weights + self.bias
            for row in np.nonzero(x[:, 0] < self.flip_below)[0]:
                top_two = np.argsort(logits[row])[-2:]
                logits[row, top_two] = logits[row, top_two[::-1]]
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)
            label = logits.argmax(axis=1).reshape(-1, 1).astype(np.int64)
            outputs = [pb_utils.Tensor("PROBS", probs), pb_utils.Tensor("LABEL", label)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''


def write_flipping_version(target: Path) -> None:
    """A tiny_classifier version in ``target`` (a version directory) that flips the inputs below FLIP_BELOW."""
    target.mkdir(parents=True, exist_ok=True)
    params = json.loads((EXAMPLES / "model_repository" / "tiny_classifier" / "1" / "params.json").read_text())
    (target / "params.json").write_text(json.dumps({**params, "flip_below": FLIP_BELOW}))
    (target / "model.py").write_text(FLIP_MODEL)


def write_good_version(target: Path) -> None:
    """tiny_classifier's example v2: retrained, its probabilities within 1e-4 of v1's."""
    shutil.copytree(
        EXAMPLES / "model_repository" / "tiny_classifier" / "2",
        target,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )


def replay_inputs(count: int, flipped: Collection[int], seed: int = 31) -> np.ndarray:
    """``count`` inputs of tiny_classifier (float32 rows of 6), the rows ``flipped`` made to be flipped."""
    rows = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(count, 6)).astype(np.float32)
    for i in flipped:
        rows[i, 0] = FLIPPED_VALUE
    return rows


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()
