"""A STAND-IN for an LLM backend such as vLLM or TensorRT-LLM: no language model, a small table of
answers streamed one word at a time (each response a text delta, as those backends stream tokens),
so healer's generate_stream probe can be tested and drilled on a CPU. Its versions differ only by
params.json, as retrained versions do.

Requests: ``text_input`` (the prompt), optional ``stream`` (BOOL, default true; false: the whole
answer in one response, for ``generate``) and ``max_tokens`` (INT32), which a request may also give
as a parameter (``parameters: {max_tokens: N}``), the way sampling settings travel.

Drill knobs (params.json): ``token_delay_ms`` between words; ``first_token_delay_ms`` before the first
(a slow first token); ``degenerate`` (the first word repeated, a model gone degenerate);
``stall_after`` words, then ``stall_ms`` without a word before the rest (a stream that stalls);
``lowercase`` (an answer that varies within a normalised comparator).
"""

import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

UNKNOWN = "I do not know."
MAX_TOKENS = 64


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads((Path(args["model_repository"]) / args["model_version"] / "params.json").read_text())
        self.answers = {k.strip().casefold(): v for k, v in params["answers"].items()}
        self.token_delay_s = float(params.get("token_delay_ms", 20)) / 1000.0
        self.first_token_delay_s = float(params.get("first_token_delay_ms", 0)) / 1000.0
        self.degenerate = bool(params.get("degenerate", False))
        self.stall_after = int(params.get("stall_after", 0))
        self.stall_s = float(params.get("stall_ms", 0)) / 1000.0
        self.lowercase = bool(params.get("lowercase", False))

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._answer(request, sender)
            finally:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _answer(self, request, sender):
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
        prompt = prompt.decode("utf-8", errors="replace") if isinstance(prompt, bytes) else str(prompt)
        answer = self.answers.get(prompt.strip().casefold(), UNKNOWN)
        if self.lowercase:
            answer = answer.lower()
        words = answer.split(" ")
        if self.degenerate:
            words = [words[0]] * MAX_TOKENS
        limit = _optional(request, "max_tokens", json.loads(request.parameters() or "{}").get("max_tokens"))
        words = words[: int(limit) if limit is not None else MAX_TOKENS]
        deltas = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if not _optional(request, "stream", True):
            deltas = ["".join(deltas)]
        time.sleep(self.first_token_delay_s)
        for i, delta in enumerate(deltas):
            if i and self.stall_after and i == self.stall_after:
                time.sleep(self.stall_s)
            elif i:
                time.sleep(self.token_delay_s)
            text = pb_utils.Tensor("text_output", np.array([delta.encode()], dtype=np.object_))
            sender.send(pb_utils.InferenceResponse(output_tensors=[text]))


def _optional(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0].item()
