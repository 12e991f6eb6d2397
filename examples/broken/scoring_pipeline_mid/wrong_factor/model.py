"""Y = X * factor + offset (params.json beside this file, per version)."""

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
