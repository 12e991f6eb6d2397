"""A variable-length model for golden suites: ``sequence_doubler`` (Python backend, numpy only) takes
TOKENS (INT32, any length) and answers OUT = 2 * TOKENS + 1. A version's ``wrong_from`` (params.json)
makes every position from it on wrong by one: a version that answers short requests right and long
ones wrong, which one golden request of 7 tokens never sees."""

from __future__ import annotations

import json
from pathlib import Path

NAME = "sequence_doubler"

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "TOKENS" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
version_policy: {{ latest: {{ num_versions: 1 }} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

MODEL_PY = '''"""OUT = 2 * TOKENS + 1; from position wrong_from (params.json, 0: never) on, one more."""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads((Path(args["model_repository"]) / args["model_version"] / "params.json").read_text())
        self.wrong_from = int(params.get("wrong_from", 0))

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy().astype(np.int32)
            out = tokens * 2 + 1
            if self.wrong_from:
                out[self.wrong_from :] += 1
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out.astype(np.int32))]))
        return responses
'''


def write_sequence_model(root: Path, name: str, versions: dict[int, int]) -> Path:
    """The model under ``root/name`` with ``versions`` {version: wrong_from} (0: a correct version)."""
    target = root / name
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.pbtxt").write_text(CONFIG.format(name=name))
    for version, wrong_from in versions.items():
        directory = target / str(version)
        directory.mkdir(exist_ok=True)
        (directory / "model.py").write_text(MODEL_PY)
        (directory / "params.json").write_text(json.dumps({"wrong_from": wrong_from}))
    return target


def golden_request(name: str, length: int) -> dict[str, object]:
    """A golden request of ``length`` tokens (0, 1, 2, ...) as healer.yaml writes it."""
    tokens = list(range(length))
    return {
        "name": name,
        "latency_slo_ms": 5000,
        "timeout_s": 10,
        "inputs": [{"name": "TOKENS", "datatype": "INT32", "shape": [length], "data": tokens}],
        "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [length], "data": [2 * t + 1 for t in tokens]}],
    }
