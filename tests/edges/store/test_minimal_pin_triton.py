"""The minimal pin (healer/edges/store/pin.py minimal_pin_text: name, backend, version_policy) on the real
tritonserver: Triton accepts it, completes the rest from the model (here the Python backend's
auto_complete_config; an ONNX model's is the onnxruntime backend's, which the embedded wheel does not
carry) and loads only the pinned version, not the higher, quarantined one."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import minimal_pin_text, pinned_version
from tests.conftest import EXAMPLES

MODEL = "linear_scorer"
AUTO_COMPLETE = """

    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(8)
        config.add_input({"name": "FEATURES", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "SCORE", "data_type": "TYPE_FP32", "dims": [1]})
        return config
"""


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback Triton
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.triton
def test_a_minimal_pin_loads_the_pinned_version_with_the_rest_auto_completed(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    source = EXAMPLES / "model_repository" / MODEL
    for version in ("1", "2"):  # v2, the highest, stands for the quarantined version
        shutil.copytree(source / version, repository / MODEL / version)
        model_py = repository / MODEL / version / "model.py"
        model_py.write_text(
            model_py.read_text().replace(
                "class TritonPythonModel:\n", "class TritonPythonModel:" + AUTO_COMPLETE + "\n", 1
            )
        )
    pin = minimal_pin_text(MODEL, {"name": MODEL, "backend": "python", "platform": ""}, "1")
    assert pinned_version(pin) == "1" and "input" not in pin
    (repository / MODEL / "config.pbtxt").write_text(pin)

    with EmbeddedTriton(repository, load_models=[MODEL], workdir=tmp_path / "triton") as triton:
        base = f"http://{triton.url}/v2/models/{MODEL}"
        assert _status(f"{base}/versions/1/ready") == 200
        assert _status(f"{base}/versions/2/ready") != 200
        with urllib.request.urlopen(f"{base}/config", timeout=10) as response:  # noqa: S310
            config = json.loads(response.read())
        assert [i["name"] for i in config["input"]] == ["FEATURES"]  # completed by Triton, not the pin
        assert config["version_policy"] == {"specific": {"versions": [1]}}
