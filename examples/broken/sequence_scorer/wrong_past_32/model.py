"""A tiny variable-length model for Triton's Python backend: OUT = scale * TOKENS + offset, position by
position, for a sequence of any length (a stand-in for a sequence model: a tagger, an embedder).

Its parameters live in params.json next to this file, so versions differ only by them. Drill knob:
``wrong_from`` (0: never) makes every position from that index on wrong by one: a version that answers
short requests right and long ones wrong, which a golden request of a few tokens never sees.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads((Path(args["model_repository"]) / args["model_version"] / "params.json").read_text())
        self.scale = int(params.get("scale", 2))
        self.offset = int(params.get("offset", 1))
        self.wrong_from = int(params.get("wrong_from", 0))

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy().astype(np.int32)
            out = tokens * self.scale + self.offset
            if self.wrong_from:
                out[self.wrong_from :] += 1
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out.astype(np.int32))]))
        return responses
