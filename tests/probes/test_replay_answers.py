"""The replay set's answers (probes/replay.py's answer_both): each input judged as both versions answer it,
only its judgement kept, so the memory the gate holds does not grow with the answers' size; one input's
answers over the cap stop the gate, nothing learnt, the cap named. Against a STAND-IN for Triton's client
(``LargeAnswers``, below: fresh arrays of a chosen size, as the real client returns); the real Triton's
answers are in tests/probes/test_replay_triton.py."""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from healer.core.agreement import Judged
from healer.edges.triton_types import OutputTensor
from healer.settings import TensorSpec
from probes import replay
from probes.replay import ReplayInput, ReplayUnanswered, answer_both, held_bytes

MIB = 1 << 20


class LargeAnswers:
    """STAND-IN for healer's Triton client (not Triton): every infer answered with a fresh float32 LOGITS of
    ``floats`` values (the stable and the new version a little apart), as the real client allocates each
    answer anew; counts the requests per version."""

    url = "stand-in:8000"

    def __init__(self, floats: int) -> None:
        self.floats = floats
        self.asked: dict[str, int] = {}

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        return {"outputs": [{"name": "LOGITS", "datatype": "FP32", "shape": [-1, self.floats]}]}

    def infer(
        self,
        model: str,
        version: str,
        inputs: Sequence[TensorSpec],
        output_names: Sequence[str],
        timeout_s: float,
        *,
        parameters: Any = None,
    ) -> dict[str, OutputTensor]:
        self.asked[version] = self.asked.get(version, 0) + 1
        values = np.full((1, self.floats), 0.5 if version == "1" else 0.501, dtype=np.float32)
        values[0, 7] = 2.0  # the class
        values[0, 3] = -np.inf  # masked on both
        return {"LOGITS": OutputTensor("LOGITS", "FP32", values)}


def inputs(count: int) -> list[ReplayInput]:
    x = TensorSpec(name="INPUT", datatype="FP32", shape=(1, 6), values=np.zeros((1, 6), dtype=np.float32))
    return [ReplayInput(f"replay/a.npy[{i}]", (x,)) for i in range(count)]


def ask(triton: LargeAnswers, count: int, **kwargs: Any) -> list[Judged]:
    return answer_both(
        triton, "m", stable="1", candidate="2", inputs=inputs(count), outputs=(), timeout_s=5, deadline_s=60, **kwargs
    )


def test_the_memory_held_stays_one_inputs_answers_for_many_large_answers() -> None:
    """40 inputs whose answers are 1 MiB each (80 MiB in all): the most held at once is one input's answers
    and the judgement's own copies (compared in chunks), not the set's: under 3 inputs' worth."""
    triton = LargeAnswers(floats=MIB // 4)
    one_input = 2 * MIB  # both versions' answers
    tracemalloc.start()
    try:
        judged = ask(triton, 40)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert triton.asked == {"1": 40, "2": 40}
    print(f"\n40 inputs, answers of {one_input / MIB:.0f} MiB each: at most {peak / MIB:.1f} MiB held")
    assert peak < 3 * one_input, f"{peak / MIB:.1f} MiB held at most, for answers of {one_input / MIB:.0f} MiB"
    assert len(judged) == 40 and all(j.argmax_same and j.largest_diff is not None for j in judged)
    kept = sum(len(j.notes) + len(j.name) for j in judged)
    assert kept < 40 * 100  # what is kept per input: its name, a note, a few figures
    assert not any(isinstance(v, np.ndarray) for j in judged for v in vars(j).values())


def test_answers_over_the_cap_stop_the_gate_naming_it() -> None:
    triton = LargeAnswers(floats=MIB // 4)  # 1 MiB per answer
    with pytest.raises(ReplayUnanswered) as caught:
        ask(triton, 3, max_answer_bytes=int(1.5 * MIB))
    said = str(caught.value)
    assert said.startswith("replay/a.npy[0]: the answers of m v1 and v2 hold 2.0 MiB, over the gate's cap of 1.5 MiB")
    assert "agreement.outputs" in said
    assert triton.asked == {"1": 1, "2": 1}  # the first input: nothing more asked
    with pytest.raises(ReplayUnanswered, match=r"a\.npy\[0\]: the answers of m v1 hold 1\.0 MiB, over the gate's cap"):
        ask(LargeAnswers(floats=MIB // 4), 3, max_answer_bytes=MIB // 2)  # the stable one alone: the new not asked


def test_the_default_cap_fits_a_bake() -> None:
    """Two answers of 22 MB (the review's example) fit under the cap; the cap is well under the bake's 512 MiB."""
    assert 2 * 22_000_000 < replay.MAX_ANSWER_BYTES <= 128 * MIB


def test_held_bytes_counts_bytes_elements() -> None:
    texts = np.asarray([b"a" * 1000, b"b" * 10], dtype=object)
    assert held_bytes(texts) == texts.nbytes + 1010
    assert held_bytes(np.zeros((4, 4), dtype=np.float32)) == 64
