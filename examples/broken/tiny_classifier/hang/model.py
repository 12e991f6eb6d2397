"""A tiny, deterministic numpy model for Triton's Python backend: y = x @ W + b.

head "linear": the output is y. head "softmax": outputs softmax(y) and argmax(y).
Weights live in params.json next to this file, so versions of a model differ only
by their parameters, as retrained versions do. ``extra_latency_ms`` is a drill knob
that makes a version slow without changing its answers.
"""

import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params_path = Path(args["model_repository"]) / args["model_version"] / "params.json"
        params = json.loads(params_path.read_text())
        self.weights = np.asarray(params["weights"], dtype=np.float32)
        self.bias = np.asarray(params["bias"], dtype=np.float32)
        self.head = params.get("head", "linear")
        self.extra_latency_s = float(params.get("extra_latency_ms", 0)) / 1000.0
        self.input_name = config["input"][0]["name"]
        self.output_names = [output["name"] for output in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy().astype(np.float32)
            logits = x @ self.weights + self.bias
            if self.head == "softmax":
                shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
                values = [
                    (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32),
                    logits.argmax(axis=1).reshape(-1, 1).astype(np.int64),
                ]
            else:
                values = [logits.reshape(x.shape[0], -1).astype(np.float32)]
            if self.extra_latency_s:
                time.sleep(self.extra_latency_s)
            tensors = [pb_utils.Tensor(name, value) for name, value in zip(self.output_names, values, strict=True)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
