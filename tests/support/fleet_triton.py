"""A Triton replica in memory for the steps' tests (``FleetTriton``): what it serves, loads that switch it to
the pinned version, the golden request's answer; no process, no network."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from healer.edges.triton import IndexEntry, OutputTensor
from tests.support.sidecar_fleet import golden_metadata

MODEL = "linear_scorer"


class FleetTriton:
    """One replica of a heal: what it serves; loads switch it to the pinned version; golden answers."""

    def __init__(self, url: str, serves: list[str], golden: Any) -> None:
        self.url, self.serves, self.golden = url, serves, golden

    def server_live(self) -> bool:
        return True

    def served_versions(self, model: str) -> list[str]:
        return list(self.serves)

    def repository_index(self) -> list[IndexEntry]:
        return [IndexEntry(MODEL, v, "READY", "") for v in self.serves]

    def model_config(self, model: str) -> dict[str, Any]:
        return {"name": MODEL, "backend": "python"}

    def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        return golden_metadata(self.golden)

    def model_version_ready(self, model: str, version: str) -> bool:
        return version in self.serves

    def load_model(self, model: str, *, config: str | None = None, timeout_s: float) -> None:
        policy = json.loads(config or "{}").get("version_policy", {})
        self.serves = [str(v) for v in policy.get("specific", {}).get("versions", [])]

    def unload_model(self, model: str) -> None:
        self.serves = []

    def infer(self, model: str, version: str, inputs: Any, output_names: Any, timeout_s: float) -> dict[str, Any]:
        return {
            o.tensor.name: OutputTensor(o.tensor.name, o.tensor.datatype, np.array(o.tensor.values))
            for o in self.golden.outputs
        }

    def close(self) -> None:
        pass
