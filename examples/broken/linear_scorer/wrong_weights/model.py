"""A tiny, deterministic numpy model for Triton's Python backend: y = x @ W + b.

head "linear": the output is y. head "softmax": outputs softmax(y) and argmax(y).
Weights live in params.json next to this file, so versions of a model differ only
by their parameters, as retrained versions do. Drill knobs: ``extra_latency_ms`` makes a
version slow without changing its answers (from its request number ``slow_after`` on, if set: a
version that passes its first checks and slows down later); ``wrong_every`` (every Nth request) and
``wrong_once_at`` (the Nth request only) make some answers wrong (negated), the rest right;
``fail_every`` (a test fixture's, examples/broken/linear_scorer/fails_one_in_ten) makes every Nth
single-row request raise (Triton counts it a failure, reason BACKEND): the golden request sends two rows
and never meets it, real traffic does (docs/traffic-signal.md); ``flip_below`` (a test fixture's,
examples/broken/*/flips_five_percent) changes the answer of every row whose first feature is below it (the
class: its two largest logits swapped; a linear head: negated): the golden rows never are, the variant's
replay set has 5 in 100 such rows (the replay-disagrees drill, docs/agreement.md).
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
        self.slow_after = int(params.get("slow_after", 0))
        self.wrong_every = int(params.get("wrong_every", 0))
        self.wrong_once_at = int(params.get("wrong_once_at", 0))
        self.requests = 0
        self.fail_every = int(params.get("fail_every", 0))
        self.single_rows = 0
        self.flip_below = params.get("flip_below")
        self.input_name = config["input"][0]["name"]
        self.output_names = [output["name"] for output in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy().astype(np.float32)
            if self.fail_every and x.shape[0] == 1:
                self.single_rows += 1
                if self.single_rows % self.fail_every == 0:
                    raise pb_utils.TritonModelException(f"single-row request {self.single_rows} fails (fail_every)")
            logits = x @ self.weights + self.bias
            self.requests += 1
            if self.requests == self.wrong_once_at or (self.wrong_every and self.requests % self.wrong_every == 0):
                logits = -logits
            if self.flip_below is not None:
                for row in np.nonzero(x[:, 0] < float(self.flip_below))[0]:
                    if self.head == "softmax":
                        top_two = np.argsort(logits[row])[-2:]
                        logits[row, top_two] = logits[row, top_two[::-1]]
                    else:
                        logits[row] = -logits[row]
            if self.head == "softmax":
                shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
                values = [
                    (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32),
                    logits.argmax(axis=1).reshape(-1, 1).astype(np.int64),
                ]
            else:
                values = [logits.reshape(x.shape[0], -1).astype(np.float32)]
            if self.extra_latency_s and self.requests > self.slow_after:
                time.sleep(self.extra_latency_s)
            tensors = [pb_utils.Tensor(name, value) for name, value in zip(self.output_names, values, strict=True)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
