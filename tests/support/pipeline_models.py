"""An ensemble of Python-backend models for the pipeline tests (CPU, numpy only):
``PRE`` (X + 1) -> ``MID`` (times ``factor``) -> ``POST`` (minus 1), served as one ensemble whose
steps take each composing model's newest loaded version (model_version -1). A version of MID is
written with its factor in params.json: factor 2 is right (Y = 2 * (X + 1) - 1), any other factor
breaks the ensemble's answer while every composing model still answers."""

from __future__ import annotations

import json
from pathlib import Path

STEP_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
version_policy: {{ latest: {{ num_versions: 1 }} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

STEP_PY = '''"""Y = X * factor + offset (params.json beside this file, per version)."""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads((Path(args["model_repository"]) / args["model_version"] / "params.json").read_text())
        self.factor = float(params.get("factor", 1.0))
        self.offset = float(params.get("offset", 0.0))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().astype(np.float32)
            y = (x * self.factor + self.offset).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
        return responses
'''

ENSEMBLE_CONFIG = """name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "{pre}" model_version: -1
      input_map {{ key: "X" value: "X" }} output_map {{ key: "Y" value: "pre_out" }} }},
    {{ model_name: "{mid}" model_version: -1
      input_map {{ key: "X" value: "pre_out" }} output_map {{ key: "Y" value: "mid_out" }} }},
    {{ model_name: "{post}" model_version: -1
      input_map {{ key: "X" value: "mid_out" }} output_map {{ key: "Y" value: "Y" }} }}
  ]
}}
"""

GOLDEN_X = [0.0, 1.0, 2.0, 3.0]


def expected_y(factor: float = 2.0) -> list[float]:
    """The ensemble's answer when MID multiplies by ``factor``: (X + 1) * factor - 1."""
    return [(x + 1.0) * factor - 1.0 for x in GOLDEN_X]


def write_step(root: Path, name: str, versions: dict[int, dict[str, float]]) -> Path:
    """A composing model under ``root/name``: {version: {"factor": f, "offset": o}}."""
    target = root / name
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.pbtxt").write_text(STEP_CONFIG.format(name=name))
    for version, params in versions.items():
        directory = target / str(version)
        directory.mkdir(exist_ok=True)
        (directory / "model.py").write_text(STEP_PY)
        (directory / "params.json").write_text(json.dumps(params))
    return target


def write_ensemble(root: Path, name: str, *, pre: str, mid: str, post: str, versions: tuple[int, ...] = (1,)) -> Path:
    """The ensemble under ``root/name`` (its versions are empty directories, as Triton wants them)."""
    target = root / name
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.pbtxt").write_text(ENSEMBLE_CONFIG.format(name=name, pre=pre, mid=mid, post=post))
    for version in versions:
        (target / str(version)).mkdir(exist_ok=True)
        # Triton reads nothing in an ensemble's version directory; the store keeps a version by its files.
        (target / str(version) / "README").write_text(f"{name} v{version}: an ensemble, its steps in config.pbtxt\n")
    return target


def write_pipeline(root: Path, prefix: str) -> dict[str, str]:
    """PRE, MID (v1 right) and POST and their ensemble under ``root``, named from ``prefix``: the names."""
    names = {"pre": f"{prefix}_pre", "mid": f"{prefix}_mid", "post": f"{prefix}_post", "ensemble": prefix}
    write_step(root, names["pre"], {1: {"factor": 1.0, "offset": 1.0}})
    write_step(root, names["mid"], {1: {"factor": 2.0}})
    write_step(root, names["post"], {1: {"factor": 1.0, "offset": -1.0}})
    write_ensemble(root, names["ensemble"], pre=names["pre"], mid=names["mid"], post=names["post"])
    return names


def golden_request(name: str = "golden", factor: float = 2.0) -> dict[str, object]:
    """The ensemble's golden request as healer.yaml writes it."""
    return {
        "name": name,
        "latency_slo_ms": 5000,
        "timeout_s": 10,
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [4], "data": GOLDEN_X}],
        "outputs": [{"name": "Y", "datatype": "FP32", "shape": [4], "data": expected_y(factor)}],
    }
