"""The replay set's answers on the real Triton (the session's, tests/conftest.py): tiny_classifier's served
version answers the replay set as both versions (healer's own client), each input judged as it comes; one
input's answers over the cap stop the gate (nothing learnt, the cap named, never a verdict), in answer_both
and in the whole gate (workflows/steps/agreement.py). Many large answers held one input at a time: a test
model of 1 MiB answers on a Triton of its own (module-scoped), as with the stand-in client of
tests/probes/test_replay_answers.py."""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from healer.core.agreement import Agreement
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import FilesystemBlobs, ModelStore
from healer.edges.triton import TritonHttp
from healer.settings import TensorSpec, load_settings
from healer.settings.sections import AgreementSettings
from probes import replay
from probes.replay import ReplayInput, ReplayUnanswered, answer_both, read_replay_set, replay_inputs
from tests.conftest import EXAMPLE_CONFIG
from tests.support.agreement_models import npy_bytes
from tests.support.agreement_models import replay_inputs as classifier_inputs
from workflows.steps.agreement import agreement_gate

pytestmark = pytest.mark.timeout(120)

MODEL = "tiny_classifier"
RULES = AgreementSettings(argmax_min_ratio=0.99, label_min_ratio=0.99, max_abs_diff=0.0)


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    replay_dir = tmp_path / MODEL / "replay"
    replay_dir.mkdir(parents=True)
    (replay_dir / "inputs.npy").write_bytes(npy_bytes(classifier_inputs(20, ())))
    return ModelStore(FilesystemBlobs(tmp_path))


def served(triton: TritonHttp) -> str:
    versions = triton.served_versions(MODEL)
    assert versions, f"{MODEL} not served by the session's Triton"
    return versions[-1]


def test_each_input_judged_as_answered_and_over_the_cap_stopped(triton: TritonHttp, store: ModelStore) -> None:
    version = served(triton)
    inputs = replay_inputs(read_replay_set(store, MODEL), triton.model_metadata(MODEL, version))
    judged = answer_both(
        triton, MODEL, stable=version, candidate=version, inputs=inputs, outputs=(), timeout_s=10, deadline_s=60
    )
    assert [j.name for j in judged] == [f"replay/inputs.npy[{i}]" for i in range(20)]
    assert all(j.argmax_same and j.labels_same and j.largest_diff == 0.0 for j in judged)
    # PROBS (3 x float32) and LABEL (int64): 20 bytes per answer; a cap of 30 holds the stable one, not both.
    with pytest.raises(ReplayUnanswered) as caught:
        answer_both(
            triton,
            MODEL,
            stable=version,
            candidate=version,
            inputs=inputs,
            outputs=(),
            timeout_s=10,
            deadline_s=60,
            max_answer_bytes=30,
        )
    assert str(caught.value).startswith(
        f"replay/inputs.npy[0]: the answers of {MODEL} v{version} and v{version} hold 40 bytes, "
        "over the gate's cap of 30 bytes per input"
    )


def test_the_gate_over_the_cap_learns_nothing_and_says_why(
    triton: TritonHttp, store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = served(triton)
    model = dataclasses.replace(load_settings(EXAMPLE_CONFIG).model(MODEL), agreement=RULES)
    verdict = agreement_gate(model, store, triton, stable=version, candidate=version)
    assert verdict.status is Agreement.AGREES and verdict.inputs == 20, verdict.why
    monkeypatch.setattr(replay, "MAX_ANSWER_BYTES", 30)
    verdict = agreement_gate(model, store, triton, stable=version, candidate=version)
    assert verdict.status is Agreement.ERROR
    assert "over the gate's cap of 30 bytes per input" in verdict.why and verdict.why.endswith("nothing learnt")
    assert np.isnan(verdict.argmax_ratio or np.nan)  # no ratio: nothing judged


# A TEST FIXTURE model (not an example): a Python-backend model answering every request with WIDE, float32
# values of 1 MiB (the version's number added, so the two versions differ a little), -inf where masked.
WIDE_FLOATS = 1 << 18
WIDE_CONFIG = f"""name: "wide"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1, 6 ] }} ]
output [ {{ name: "WIDE" data_type: TYPE_FP32 dims: [ 1, {WIDE_FLOATS} ] }} ]
version_policy: {{ all: {{}} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
WIDE_MODEL = f'''"""TEST FIXTURE (tests/probes/test_replay_triton.py): 1 MiB of float32 per answer."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.offset = int(args["model_version"]) * 1e-4

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            wide = np.full((1, {WIDE_FLOATS}), float(x[0, 0]) + self.offset, dtype=np.float32)
            wide[0, 3] = -np.inf
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("WIDE", wide)]))
        return responses
'''


@pytest.fixture(scope="module")
def wide_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonHttp]:
    repository = tmp_path_factory.mktemp("wide-repository")
    (repository / "wide").mkdir()
    (repository / "wide" / "config.pbtxt").write_text(WIDE_CONFIG)
    for version in ("1", "2"):
        (repository / "wide" / version).mkdir()
        (repository / "wide" / version / "model.py").write_text(WIDE_MODEL)
    with EmbeddedTriton(repository, load_models=["wide"], workdir=tmp_path_factory.mktemp("wide-triton")) as server:
        client = TritonHttp(server.url, timeout_s=30)
        try:
            yield client
        finally:
            client.close()


def test_many_large_answers_from_the_real_triton_are_held_one_input_at_a_time(wide_triton: TritonHttp) -> None:
    """16 inputs, each answered with 1 MiB by both versions through healer's client: 32 MiB in all; the gate
    holds about one input's at a time (the client's response body beside its tensors), not the set's."""
    x = TensorSpec(name="INPUT", datatype="FP32", shape=(1, 6), values=np.zeros((1, 6), dtype=np.float32))
    inputs = [ReplayInput(f"replay/wide.yaml#{i}", (x,)) for i in range(16)]
    one_input = 2 * WIDE_FLOATS * 4
    tracemalloc.start()
    try:
        judged = answer_both(
            wide_triton, "wide", stable="1", candidate="2", inputs=inputs, outputs=(), timeout_s=30, deadline_s=120
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(
        f"\n16 inputs from the real Triton, {one_input >> 20} MiB of answers each: "
        f"at most {peak / (1 << 20):.1f} MiB held"
    )
    assert peak < 4 * one_input, f"{peak / (1 << 20):.1f} MiB held"
    assert len(judged) == 16
    assert all(j.argmax_same and j.largest_diff == pytest.approx(1e-4, rel=1e-2) for j in judged), judged[0]
